"""Ranked hypotheses, each with its score as a bar and its first line of evidence."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from triage_tui.core.diagnose.hypotheses.scoring import LIKELY
from triage_tui.core.text import printable

BAR_CELLS = 10


def score_bar(score: float) -> Text:
    score = max(0.0, min(1.0, score))
    filled = round(score * BAR_CELLS)
    style = "bold red" if score >= LIKELY else ("yellow" if score >= 0.2 else "green")
    # Styles go on spans: a style given to Text() would colour everything appended later too.
    bar = Text()
    bar.append("█" * filled, style=style)
    bar.append("░" * (BAR_CELLS - filled), style="dim")
    bar.append(f" {score:.2f} ")
    return bar


def hypothesis_prompt(hypothesis) -> Text:
    """Two lines (app.tcss cuts them with an ellipsis rather than wrapping, so a small pane lists them all)."""
    line = score_bar(hypothesis.score)
    line.append(printable(hypothesis.title), style="bold" if hypothesis.score >= LIKELY else "")
    if hypothesis.evidence:
        line.append("\n")
        line.append(" " * (BAR_CELLS + 6))
        line.append(printable(hypothesis.evidence[0]), style="dim")
    return line


class HypothesesList(OptionList):
    """Enter opens the drill-down of the highlighted hypothesis."""

    HELP = "Possible causes, best first. Enter opens the evidence, details and action."

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.hypotheses: list = []

    def show(self, hypotheses: Sequence) -> None:
        self.hypotheses = list(hypotheses)
        self.clear_options()
        self.add_options(Option(hypothesis_prompt(h), id=h.id) for h in self.hypotheses)
        if self.hypotheses:
            self.highlighted = 0

    @property
    def selected(self):
        if self.highlighted is None or not self.hypotheses:
            return None
        return self.hypotheses[self.highlighted]
