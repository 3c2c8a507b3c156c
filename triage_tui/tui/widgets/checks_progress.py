"""One progress bar per check while `check` runs, then a one-line result per check."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, ProgressBar, Static

from triage_tui.core.diagnose.checks.registry import CHECK_NAME_WIDTH, CHECK_NAMES  # one bar per check, in order
from triage_tui.core.text import printable

STATUS_STYLE = {
    "pass": ("✔", "green"),
    "fail": ("✖", "bold red"),
    "skipped": ("–", "dim"),
    "error": ("!", "yellow"),
}


class CheckBar(Horizontal):
    def __init__(self, check: str) -> None:
        super().__init__(id=f"bar-{check}", classes="check-bar")
        self.check = check

    def compose(self) -> ComposeResult:
        name = Label(self.check, classes="check-name")
        name.styles.width = CHECK_NAME_WIDTH + 1  # a space after the longest name, as in check_lines
        yield name
        yield ProgressBar(total=1.0, show_eta=False, show_percentage=False)
        yield Label("", classes="check-note")

    def set_progress(self, fraction: float, text: str) -> None:
        self.query_one(ProgressBar).update(progress=max(0.0, min(1.0, fraction)))
        note = text.split(":", 1)[1].strip() if ":" in text else text
        self.query_one(".check-note", Label).update(Text(printable(note)))


class ChecksProgress(Vertical):
    """Bars while running; a compact status line per check when done."""

    HELP = "Checks on the selected run. x or Esc cancels a running check."

    def compose(self) -> ComposeResult:
        for check in CHECK_NAMES:
            yield CheckBar(check)
        yield Static("", id="checks-summary")

    def start(self) -> None:
        self.remove_class("-done")
        for bar in self.query(CheckBar):
            bar.set_progress(0.0, "waiting")

    def progress(self, check: str, fraction: float, text: str) -> None:
        bars = {bar.check: bar for bar in self.query(CheckBar)}
        if check not in bars:
            return
        bars[check].set_progress(fraction, text)

    def finish(self, statuses: Mapping[str, tuple[str, str]] | None, message: str = "") -> None:
        """Show each check's status and summary ({name: (status, summary)}), or a message."""
        self.add_class("-done")
        text = Text()
        if statuses is None:
            text.append(printable(message), style="yellow")
        else:
            text = check_lines(statuses)
        self.query_one("#checks-summary", Static).update(text)


def check_lines(statuses: Mapping[str, tuple[str, str]]) -> Text:
    """One line per check: glyph, name in a column as wide as the longest name and a space, summary."""
    text = Text()
    for index, (name, (status, summary)) in enumerate(statuses.items()):
        glyph, style = STATUS_STYLE.get(status, ("?", ""))
        if index:
            text.append("\n")
        text.append(f"{glyph} {name:<{CHECK_NAME_WIDTH}} ", style=style)
        text.append(printable(summary), style="dim" if status == "skipped" else "")
    return text
