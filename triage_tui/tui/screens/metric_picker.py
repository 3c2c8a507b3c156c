"""`t`: pick the series the chart draws from every series name the shown runs have."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from triage_tui.core.text import printable

# The first option, while the filter matches this: back to each run's loss (with its chance line).
LOSS_OPTION = "loss"


def name_filter(text: str) -> tuple[re.Pattern[str] | None, str | None]:
    """What the filter text matches: a regex when written /.../, else the text itself, case-insensitive
    either way; (None, why) when the regex does not compile."""
    if len(text) >= 2 and text.startswith("/") and text.endswith("/"):
        try:
            return re.compile(text[1:-1], re.IGNORECASE), None
        except re.error as err:
            return None, f"not a regex: {err}"
    return re.compile(re.escape(text), re.IGNORECASE), None


class MetricPickerScreen(ModalScreen[str | None]):
    """A filter over the names, and the names it matches; enter draws the highlighted one.

    Dismissed with the name, "" for the loss, or None (esc: the chart stays as it was)."""

    HELP_TITLE = "metric"
    BINDINGS = [
        Binding("escape", "dismiss_none", "Back", key_display="esc", tooltip="Back, the chart as it was"),
        Binding("down", "move(1)", "Next", show=False, key_display="↓", tooltip="Next series"),
        Binding("up", "move(-1)", "Previous", show=False, key_display="↑", tooltip="Previous series"),
    ]

    def __init__(
        self, names: Sequence[str], current: str | None, alternatives: Mapping[str, str] | None = None
    ) -> None:
        super().__init__()
        self.names = list(names)
        # Another source's record of a metric shown under another name: alternative -> that name.
        self.alternatives = dict(alternatives or {})
        self.current = current
        self.choices: list[str] = []  # what each option dismisses with, in order ("" the loss); ids are indices
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="picker-body"):
            yield Input(placeholder="filter: text, or /regex/", id="metric-filter")
            yield Static("", id="metric-error")
            yield OptionList(id="metric-options")

    def on_mount(self) -> None:
        self.query_one("#picker-body").border_subtitle = "enter draws it · esc back"
        self._refilter("")
        self.query_one("#metric-filter", Input).focus()

    @on(Input.Changed, "#metric-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self._refilter(event.value)

    def _refilter(self, text: str) -> None:
        pattern, self.error = name_filter(text)
        error = self.query_one("#metric-error", Static)
        error.display = self.error is not None
        # A Text: the regex's error quotes what was typed.
        error.update(Text(self.error or "", style="bold red"))
        shown = [] if pattern is None else [name for name in self.names if pattern.search(name)]
        with_loss = pattern is not None and pattern.search(LOSS_OPTION) is not None
        self.choices = ([""] if with_loss else []) + shown
        options = self.query_one("#metric-options", OptionList)
        options.clear_options()
        for index, choice in enumerate(self.choices):
            mark = "● " if choice == (self.current or "") else "  "
            # Names come from the runs' files: a Text, never markup.
            label = (
                Text(mark + printable(choice))
                if choice
                else Text.assemble(mark, ("loss", "bold"), (" · each run's, with ln V", "dim"))
            )
            if choice in self.alternatives:
                label.append(f" · alternative of {printable(self.alternatives[choice])}", "dim")
            options.add_option(Option(label, id=str(index)))
        if self.choices:
            options.highlighted = 0
        self.query_one("#picker-body").border_title = f"series · {len(shown)} of {len(self.names)}"

    def _choose(self, option_id: str | None) -> None:
        if option_id is not None:
            self.dismiss(self.choices[int(option_id)])

    def action_move(self, step: int) -> None:
        options = self.query_one("#metric-options", OptionList)
        if options.option_count:
            current = options.highlighted if options.highlighted is not None else -step
            options.highlighted = max(0, min(options.option_count - 1, current + step))

    def action_dismiss_none(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted, "#metric-filter")
    def _submitted(self, event: Input.Submitted) -> None:
        options = self.query_one("#metric-options", OptionList)
        if options.highlighted is not None:
            self._choose(options.get_option_at_index(options.highlighted).id)

    @on(OptionList.OptionSelected, "#metric-options")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self._choose(event.option.id)
