"""RemapFlow: `m`, a checkpoint rewritten with its lm_head rows in the run's order, from the TUI.

RemapRequested: remap, or say why not (blocker). A thread worker plans the remap (RemapPlanned);
the confirm dialog shows the plan, and on "yes" a second worker executes exactly that plan,
posting RemapProgress to the progress dialog and RemapFinished at the end. `x` in the dialog
(CancelRemap) cancels the worker; nothing is written then. The flow holds whether a remap is
being planned or written and each run's last remap report: the next checks check that checkpoint.

The remap follows from the checks (the vocab check says the rows are out of order), so this
flow reads CheckFlow's diagnoses; the checks know the remap only through the app
(CheckHost.remapped_checkpoint). As with the checks, the app keeps the ``@on`` handlers and they
call into this class, and the workers are started here with ``app.run_worker`` (what ``@work``
expands to): each workflow stays whole in its module, and this module never imports the app.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from textual.worker import get_current_worker

from triage_tui.core.errors import BadInput
from triage_tui.tui import messages
from triage_tui.tui.check_flow import CheckFlow, CheckHost
from triage_tui.tui.screens.remap import ConfirmRemapScreen, RemapRefusedScreen, RemapScreen

if TYPE_CHECKING:
    from textual.screen import Screen

    from triage_tui.core.diagnose.check_inputs import CheckInputs
    from triage_tui.core.fix.remap.execute import RemapReport
    from triage_tui.core.fix.remap.plan import RemapPlan

# The workers' group: the plan and the write are one at a time (exclusive).
GROUP = "remap"


class RemapHost(CheckHost, Protocol):
    """What the remap needs of the app: what the checks need, the checks themselves and the screens shown."""

    @property
    def checks(self) -> CheckFlow: ...
    @property
    def screen_stack(self) -> list[Screen[Any]]: ...


class RemapFlow:
    """The remap: asked, planned, confirmed, written or cancelled; each run's last report kept."""

    def __init__(self, app: RemapHost) -> None:
        self.app = app
        self.running = False  # a remap is being planned, confirmed or written
        self.reports: dict[Path, RemapReport] = {}

    def blocker(self, path: Path | None) -> str | None:
        """Why `m` cannot remap this run now, in a sentence; None when it can."""
        if self.app.readonly:
            return "read-only (--readonly): triage writes nothing"
        if self.running:
            return "a remap is already being planned or written"
        if path is None:
            return "no run selected"
        checks = self.app.checks
        if checks.running_for == path:
            return "the checks are still running; m works once they say the rows are out of order"
        diagnosis = checks.diagnoses.get(path)
        if diagnosis is None:
            return "run the checks first (c): the remap follows from what the vocab check finds"
        return diagnosis.remap_blocker()

    def request(self, path: Path | None) -> None:
        """`m`: remap, or say why not."""
        if self.app.readonly:
            return
        reason = self.blocker(path)
        if reason is not None or path is None:
            self.app.notify(reason or "no run selected", title="m: no remap", severity="warning", timeout=6)
            return
        self.running = True
        self._start(partial(self._plan, path, self.app.checks.diagnoses[path].inputs), "plan remap")

    def _start(self, work: Callable[[], None], description: str) -> None:
        self.app.run_worker(
            work,
            name=description,
            group=GROUP,
            description=description,
            exit_on_error=False,
            exclusive=True,
            thread=True,
        )

    def _plan(self, path: Path, inputs: CheckInputs) -> None:
        """In the worker's thread: the plan, or why there is none."""
        from triage_tui.core.fix.remap.plan import plan_remap

        if inputs.checkpoint is None or inputs.mapping is None:  # blocker() let none of these through
            self.app.post_message(messages.RemapPlanned(path, None, error="no checkpoint and mapping to remap"))
            return
        try:
            plan = plan_remap(inputs.checkpoint, inputs.mapping, target=inputs.target)
            if plan.output.exists():
                # Refuse before asking: a dialog whose "yes" can only fail would be a lie.
                raise BadInput(
                    plan.output,
                    "already exists (an earlier remap?): nothing was written; remove it or use `triage remap --force`",
                )
        except BadInput as err:
            self.app.post_message(messages.RemapPlanned(path, None, error=err.line()))
            return
        except Exception as err:  # noqa: BLE001 - a bug in planning is shown in the dialog, not a crash
            self.app.post_message(messages.RemapPlanned(path, None, error=f"{type(err).__name__}: {err}"))
            return
        self.app.post_message(messages.RemapPlanned(path, plan))

    def planned(self, message: messages.RemapPlanned) -> None:
        """The plan is ready: ask, then write it; or say why there is none."""
        if message.plan is None:
            self.running = False
            self.app.push_screen(RemapRefusedScreen(message.error or "no plan"))
            return
        plan = message.plan

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.app.push_screen(RemapScreen(plan))
                inputs = self.app.checks.diagnoses[message.path].inputs
                self._start(partial(self._write, message.path, inputs, plan), "remap")
            else:
                self.running = False
                self.app.notify("remap cancelled: nothing was written", timeout=4)

        self.app.push_screen(ConfirmRemapScreen(plan), confirmed)

    def _write(self, path: Path, inputs: CheckInputs, plan: RemapPlan) -> None:
        """In the worker's thread: execute the plan the user confirmed."""
        from triage_tui.core.fix.remap.execute import execute_remap
        from triage_tui.core.fix.remap.job import Cancelled

        def progress(fraction: float, text: str) -> None:
            self.app.post_message(messages.RemapProgress(fraction, text))

        try:
            # The plan the user confirmed is the plan executed: the dialog's text is the truth.
            report = execute_remap(
                plan,
                data=inputs.data,
                device=self.app.device,
                progress=progress,
                cancel=get_current_worker().cancelled_event,
            )
        except Cancelled:
            self.app.post_message(messages.RemapFinished(path, None, error="cancelled: nothing was written"))
            return
        except BadInput as err:
            self.app.post_message(messages.RemapFinished(path, None, error=err.line()))
            return
        except Exception as err:  # noqa: BLE001 - a failed remap is shown in the dialog, not a crash
            self.app.post_message(messages.RemapFinished(path, None, error=f"{type(err).__name__}: {err}"))
            return
        self.app.post_message(messages.RemapFinished(path, report))

    def cancel(self) -> None:
        for worker in self.app.workers:
            if worker.group == GROUP and not worker.is_finished:
                worker.cancel()

    def progress(self, message: messages.RemapProgress) -> None:
        for screen in self.app.screen_stack:
            if isinstance(screen, RemapScreen):
                screen.progress = (message.fraction, message.text)

    def finished(self, message: messages.RemapFinished) -> None:
        self.running = False
        if message.report is not None:
            self.reports[message.path] = message.report
            self.app.show_analysis()  # the checks shown are now from before the remap
        shown = False
        for screen in self.app.screen_stack:
            if isinstance(screen, RemapScreen):
                screen.outcome = (message.report, message.error)
                shown = True
        if not shown:  # the user closed the progress dialog; say it here
            if message.report is not None:
                self.app.notify(f"remapped checkpoint written to {message.report.output}", timeout=10)
            else:
                self.app.notify(f"remap failed: {message.error}", severity="error", timeout=10)

    def checkpoint(self, path: Path) -> Path | None:
        """The checkpoint the run's last remap wrote, if any."""
        report = self.reports.get(path)
        return report.output if report is not None else None
