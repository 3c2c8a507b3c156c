"""The remap dialogs: a confirm that shows exactly what will be written, then progress and result."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, ProgressBar, Static

from triage_tui.core.text import printable

if TYPE_CHECKING:
    from triage_tui.core.remap import RemapPlan, RemapReport


class ConfirmRemapScreen(ModalScreen[bool]):
    """y writes, n or Esc cancels; No has the focus, so Enter alone writes nothing."""

    HELP_TITLE = "confirm remap"
    BINDINGS = [
        Binding("y", "answer(True)", "Yes, write it"),
        Binding("n,escape", "answer(False)", "No", key_display="n/esc"),
    ]

    def __init__(self, plan: RemapPlan) -> None:
        super().__init__()
        self.plan = plan
        self.text = plan.describe()

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            with VerticalScroll(id="dialog-body"):
                # Text, not markup: the plan names paths, which may hold brackets.
                yield Static(Text(printable(self.text, newlines=True)), id="plan-text")
            with Horizontal(id="dialog-buttons"):
                yield Button("y  write it", id="yes", variant="error", compact=True)
                yield Button("n  cancel", id="no", variant="primary", compact=True)

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = "remap the drafter's lm_head?"
        self.query_one("#no", Button).focus()

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


def describe_report(report: RemapReport) -> Table:
    """The report as label/value rows; long paths fold under their value, not under the label."""
    table = Table(box=None, show_header=False, padding=(0, 1), expand=True)
    table.add_column("label", style="dim", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_row("output", Text(printable(report.output), style="bold"))
    table.add_row("from", Text(printable(report.source)))
    table.add_row("mapping", Text(printable(report.mapping)))
    table.add_row(
        "rows",
        f"{report.rows_copied} copied, {report.rows_initialized} initialised ({report.init}) "
        f"of {report.draft_vocab_size}",
    )
    table.add_row(
        "verified",
        Text("yes: re-read and compared with the source", style="green")
        if report.verified
        else Text("NO", style="bold red"),
    )
    if report.accuracy_before is not None and report.accuracy_after is not None:
        accuracy = Text()
        accuracy.append(f"{report.accuracy_before:.1%}", style="red")
        accuracy.append(" → ")
        accuracy.append(f"{report.accuracy_after:.1%}", style="bold green")
        accuracy.append("  first-step accuracy on the run's dumps and mapping")
        table.add_row("replay", accuracy)
    else:
        table.add_row("replay", Text("not measured (needs hidden-state dumps and the target)", style="dim"))
    for note in report.notes:
        table.add_row("note", Text(note, style="yellow"))
    table.add_row("", "")
    table.add_row("next", "restart the fine-tune from the output (SpecForge: --ckpt-dir)")
    return table


class RemapScreen(ModalScreen[None]):
    """Progress of the remap worker, then its report. x cancels; Esc closes (the work carries on)."""

    HELP_TITLE = "remap"
    BINDINGS = [
        Binding("escape,enter,q", "dismiss", "Close", key_display="esc"),
        Binding("x", "cancel_remap", "Cancel remap"),
    ]

    def __init__(self, plan: RemapPlan) -> None:
        super().__init__()
        self.plan = plan
        self.report: RemapReport | None = None
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(Text(f"writing {printable(self.plan.output)}"), id="remap-status")
            yield ProgressBar(total=1.0, show_eta=False, id="remap-progress")
            with VerticalScroll(id="dialog-body"):
                yield Static("", id="remap-result")

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = "remap"
        self.query_one("#dialog").border_subtitle = "x cancels · esc closes"

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_remap":
            return self.report is None and self.error is None
        return True

    def action_cancel_remap(self) -> None:
        self.app.cancel_remap()  # type: ignore[attr-defined]  # Screen.app is an App; pushed only by TriageApp

    def show_progress(self, fraction: float, text: str) -> None:
        self.query_one(ProgressBar).update(progress=max(0.0, min(1.0, fraction)))
        self.query_one("#remap-status", Label).update(Text(printable(text)))

    def show_result(self, report: RemapReport | None, error: str | None) -> None:
        self.report, self.error = report, error
        self.refresh_bindings()
        self.query_one(ProgressBar).display = False
        status = self.query_one("#remap-status", Label)
        result = self.query_one("#remap-result", Static)
        if report is None:
            status.update(Text("remap failed: nothing was written", style="bold red"))
            result.update(Text(printable(error or "", newlines=True)))
            self.query_one("#dialog").border_title = "remap failed"
        else:
            status.update(
                Text(
                    "✔ wrote a verified checkpoint" if report.verified else "✖ written but NOT verified",
                    style="bold green" if report.verified else "bold red",
                )
            )
            result.update(describe_report(report))
            self.query_one("#dialog").border_title = "remap done"
        self.query_one("#dialog").border_subtitle = "esc closes"
