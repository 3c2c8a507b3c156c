"""The remap dialogs: a confirm that shows exactly what will be written, then progress and result."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer, Vertical
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import Button, Label, ProgressBar, Static

from triage_tui.core.text import printable
from triage_tui.tui import messages

if TYPE_CHECKING:
    from triage_tui.core.fix.remap.execute import RemapReport
    from triage_tui.core.fix.remap.plan import RemapPlan


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

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            with ScrollableContainer(id="dialog-body"):
                # Every path whole, on lines of its own, folded at the dialog's edge: what will be
                # written is read, and copied (select it; tmux needs `set-clipboard on`), in full.
                yield Static(describe_plan(self.plan), id="plan-text")
                if self.plan.notes:
                    yield Static(notes_text(self.plan.notes), classes="dialog-notes")
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


def _label_lines(rows: list[tuple[str, Text | str | Path]]) -> Text:
    """Label/value lines. A Path is a line of its own from the first column (under the line that
    says what it is), whole: one longer than the dialog is wide folds onto the next lines, never
    cut, so it can be read and copied in full. Prose wraps at spaces, and numbers are written
    without spaces, so a count is never split. Text, not markup: paths may hold brackets."""
    text = Text(overflow="fold")
    for index, (label, value) in enumerate(rows):
        if index:
            text.append("\n")
        if isinstance(value, Path):
            text.append(printable(value), style="bold")
        else:
            text.append(f"{label:<9}", style="dim")
            text.append_text(value if isinstance(value, Text) else Text(printable(value)))
    return text


def describe_plan(plan: RemapPlan) -> Text:
    """What a remap will write, a label and a value per line."""
    rows: list[tuple[str, Text | str | Path]] = [
        ("write", Text("a new checkpoint directory", style="dim")),
        ("", plan.output),
    ]
    if plan.output_outside_of is not None:
        # Said before "y": the output is not where the source is, and why (staging.default_output).
        what, where = plan.output_outside_of
        rows += [("", Text(f"not beside the source, which is in this {what}:", style="yellow")), ("", where)]
    rows += [
        ("from", Text("the drafter's checkpoint, not touched", style="dim")),
        ("", plan.source),
        ("d2t/t2d", Text("the run's mapping, in place of the checkpoint's", style="dim")),
        ("", plan.mapping_path),
        ("rows", f"{plan.rows_copied} copied into the run's order"),
    ]
    if plan.init == "target" and plan.target_path is not None:
        rows += [("", f"{plan.rows_initialized} initialised from the target's lm_head"), ("", plan.target_path)]
    else:
        rows.append(("", f"{plan.rows_initialized} initialised from {plan.init_from}"))
    return _label_lines(rows)


def describe_report(report: RemapReport) -> Text:
    """What the remap wrote, a label and a value per line."""
    if report.accuracy_before is not None and report.accuracy_after is not None:
        replay = Text.assemble(
            (f"{report.accuracy_before:.1%}", "red"),
            " → ",
            (f"{report.accuracy_after:.1%}", "bold green"),
            "  first-step accuracy on the run's dumps and mapping",
        )
    else:
        replay = Text("not measured (needs hidden-state dumps and the target)", style="dim")
    outside = (
        [("", Text(f"not beside the source: {report.output_outside_because}", style="yellow"))]
        if report.output_outside_because
        else []
    )
    return _label_lines(
        [
            ("output", Text("the remapped checkpoint", style="dim")),
            ("", Path(report.output)),
            *outside,
            ("from", Text("the source, untouched", style="dim")),
            ("", Path(report.source)),
            ("mapping", Text("d2t/t2d now the run's", style="dim")),
            ("", Path(report.mapping)),
            (
                "rows",
                f"{report.rows_copied} copied, {report.rows_initialized} initialised ({report.init}) "
                f"of {report.draft_vocab_size}",
            ),
            (
                "verified",
                Text("yes: re-read and compared with the source", style="green")
                if report.verified
                else Text("NO", style="bold red"),
            ),
            ("replay", replay),
            ("", ""),
            ("next", "restart the fine-tune from the output (SpecForge: --ckpt-dir)"),
        ]
    )


def notes_text(notes: tuple[str, ...] | list[str]) -> Text:
    """Notes of a plan or report: prose, wrapped at spaces (numbers are written without spaces, as
    everywhere in the TUI, so none is split)."""
    return Text("\n".join(printable(note) for note in notes), style="yellow")


class RemapRefusedScreen(ModalScreen[None]):
    """Why there is no remap (its output exists already, the plan failed), the reason whole and the
    paths in it folded, never cut: a toast of two lines lost the reason behind a long path."""

    HELP_TITLE = "no remap"
    BINDINGS = [Binding("escape,enter,q", "dismiss", "Close", key_display="esc")]

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"), ScrollableContainer(id="dialog-body"):
            yield Static(Text(printable(self.reason, newlines=True), overflow="fold"), id="remap-refused")

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = "cannot remap: nothing was written"
        self.query_one("#dialog").border_subtitle = "esc closes"


class RemapScreen(ModalScreen[None]):
    """Progress of the remap worker, then its report. x cancels; Esc closes (the work carries on)."""

    HELP_TITLE = "remap"
    BINDINGS = [
        Binding("escape,enter,q", "dismiss", "Close", key_display="esc"),
        Binding("x", "cancel_remap", "Cancel remap"),
    ]

    # Set by the app as the remap worker reports: (fraction, text), then (report, error).
    progress: reactive[tuple[float, str]] = reactive((0.0, ""), init=False, repaint=False)
    outcome: reactive[tuple[RemapReport | None, str | None] | None] = reactive(
        None, init=False, bindings=True, repaint=False
    )

    def __init__(self, plan: RemapPlan) -> None:
        super().__init__()
        self.plan = plan
        self.report: RemapReport | None = None
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(Text(f"writing {printable(self.plan.output)}"), id="remap-status")
            yield ProgressBar(total=1.0, show_eta=False, id="remap-progress")
            with ScrollableContainer(id="dialog-body"):
                yield Static("", id="remap-result")
                yield Static("", id="remap-notes", classes="dialog-notes")

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = "remap"
        self.query_one("#dialog").border_subtitle = "x cancels · esc closes"

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_remap":
            return self.report is None and self.error is None
        return True

    def action_cancel_remap(self) -> None:
        self.post_message(messages.CancelRemap())

    def watch_progress(self) -> None:
        fraction, text = self.progress
        self.query_one(ProgressBar).update(progress=max(0.0, min(1.0, fraction)))
        self.query_one("#remap-status", Label).update(Text(printable(text)))

    def watch_outcome(self) -> None:
        if self.outcome is None:
            return
        report, error = self.outcome
        self.report, self.error = report, error
        self.query_one(ProgressBar).display = False
        status = self.query_one("#remap-status", Label)
        result = self.query_one("#remap-result", Static)
        if report is None:
            status.update(Text("remap failed: nothing was written", style="bold red"))
            self.query_one("#remap-notes", Static).update(Text(printable(error or "", newlines=True)))
            self.query_one("#dialog").border_title = "remap failed"
        else:
            status.update(
                Text(
                    "✔ wrote a verified checkpoint" if report.verified else "✖ written but NOT verified",
                    style="bold green" if report.verified else "bold red",
                )
            )
            result.update(describe_report(report))
            self.query_one("#remap-notes", Static).update(notes_text(report.notes))
            self.query_one("#dialog").border_title = "remap done"
        self.query_one("#dialog").border_subtitle = "esc closes"
