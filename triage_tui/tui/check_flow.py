"""CheckFlow: the checks of one run from the TUI, `c` to the hypotheses pane.

ChecksRequested starts them: a thread worker gathers the run's evidence as `triage check` does
(core/diagnose/evidence.py) and calls core's diagnose(), posting CheckProgress as each check goes and
ChecksFinished at the end (or on failure); the app hands each of those messages here. `x`
(CancelChecks) cancels the worker, and the UI is released at once (the thread still finishes its
current batch). The flow holds what the
checks found (diagnoses, or why there is none: outcomes) and which run they run on; the hypotheses
pane shows those through the app's AnalysisView, and `enter` on a hypothesis opens its drill-down.

The app keeps the ``@on`` handlers (Textual collects them from MessagePump subclasses only) and
they call into this class. The worker is started here with ``app.run_worker``, what ``@work``
expands to, with the same group, exclusivity and ``exit_on_error``: the workflow stays in one
module, and the app has no worker body of its own to forward to. The app is reached through
CheckHost, what the flow needs of it; this module never imports the app (tests/test_layers.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from textual.worker import get_current_worker

from triage_tui.core.diagnose.hypotheses.scoring import LIKELY
from triage_tui.core.errors import BadInput
from triage_tui.core.text import printable
from triage_tui.tui import messages
from triage_tui.tui.screens.drilldown import DrillDownScreen
from triage_tui.tui.view_state import CheckProgressView

if TYPE_CHECKING:
    from textual.message import Message
    from textual.notifications import SeverityLevel
    from textual.screen import Screen
    from textual.worker import Worker
    from textual.worker_manager import WorkerManager

    from triage_tui.core.diagnose.diagnosis import Diagnosis
    from triage_tui.core.watch.run_status import RunStatus

# The workers' group: one checks worker at a time (exclusive), and the app knows it by this name.
GROUP = "check"


class CheckHost(Protocol):
    """What the checks need of the app: its settings, the runs, Textual's services and where it shows them."""

    device: str
    readonly: bool

    @property
    def statuses(self) -> Mapping[Path, RunStatus]: ...
    @property
    def selected(self) -> Path | None: ...
    @property
    def workers(self) -> WorkerManager: ...

    def post_message(self, message: Message) -> bool: ...
    def run_worker(
        self,
        work: Callable[[], None],
        name: str | None = ...,
        group: str = ...,
        description: str = ...,
        exit_on_error: bool = ...,
        start: bool = ...,
        exclusive: bool = ...,
        thread: bool = ...,
    ) -> Worker[None]: ...
    def notify(
        self, message: str, *, title: str = ..., severity: SeverityLevel = ..., timeout: float | None = ...
    ) -> None: ...
    def push_screen(self, screen: Screen[Any], callback: Callable[[Any], None] | None = ...) -> object: ...

    def remapped_checkpoint(self, path: Path) -> Path | None:
        """The checkpoint the last remap of this run wrote, if any."""

    def show_check_progress(self, view: CheckProgressView) -> None: ...
    def show_analysis(self) -> None:
        """Show the selected run's checks again (they started, finished or were cancelled)."""

    def show_news(self, path: Path, text: str) -> None:
        """Say in the top bar what the checks found on a run the user moved away from."""


class CheckFlow:
    """The checks: started, followed, cancelled and finished; their results kept per run."""

    def __init__(self, app: CheckHost) -> None:
        self.app = app
        self.diagnoses: dict[Path, Diagnosis] = {}
        self.outcomes: dict[Path, str] = {}  # why a run has no diagnosis: "checks cancelled", "checks failed: ..."
        self.running_for: Path | None = None

    def start(self, path: Path) -> None:
        status = self.app.statuses.get(path)
        if status is None:
            return
        self.running_for = path
        self.outcomes.pop(path, None)
        self.diagnoses.pop(path, None)
        self.app.show_check_progress(CheckProgressView(start=True))
        self.app.show_analysis()
        # After a remap the question is whether the remapped checkpoint fixes the run: check it,
        # not the drafter the run's triage.toml still names.
        checkpoint = self.app.remapped_checkpoint(path)
        self.app.run_worker(
            partial(self._run, path, checkpoint),
            name="checks",
            group=GROUP,
            description="checks",
            exit_on_error=False,
            exclusive=True,
            thread=True,
        )

    def cancel(self) -> None:
        for worker in self.app.workers:
            if worker.group == GROUP and not worker.is_finished:
                worker.cancel()

    def _run(self, path: Path, checkpoint: Path | None) -> None:
        """In the worker's thread: gather the run's evidence as `triage check` does, diagnose, post the answer."""
        from triage_tui.core.diagnose.diagnosis import diagnose
        from triage_tui.core.diagnose.evidence import Overrides, gather_evidence

        cancel = get_current_worker().cancelled_event

        def progress(fraction: float, text: str) -> None:
            check = text.split(":", 1)[0].strip()
            self.app.post_message(messages.CheckProgress(path, check, fraction, text))

        try:
            evidence = gather_evidence(path, Overrides(checkpoint=checkpoint, device=self.app.device))
            diagnosis = diagnose(evidence, progress=progress, cancel=cancel)
        except BadInput as err:
            self.app.post_message(messages.ChecksFinished(path, None, error=err.line()))
            return
        except Exception as err:  # noqa: BLE001 - a bug in a check must not take the screen down
            self.app.post_message(messages.ChecksFinished(path, None, error=f"{type(err).__name__}: {err}"))
            return
        self.app.post_message(messages.ChecksFinished(path, diagnosis, cancelled=cancel.is_set()))

    def progress(self, message: messages.CheckProgress) -> None:
        if message.path == self.running_for:
            self.app.show_check_progress(CheckProgressView(message.check, message.fraction, message.text))

    def worker_cancelled(self) -> None:
        """The checks worker was cancelled: the thread still finishes its current batch; the UI is released now."""
        if self.running_for:
            self._finish(self.running_for, None, "checks cancelled")

    def finished(self, message: messages.ChecksFinished) -> None:
        if message.path != self.running_for:
            return  # a cancelled run reporting late
        if message.cancelled:
            self._finish(message.path, None, "checks cancelled")
        elif message.error:
            self._finish(message.path, None, f"checks failed: {message.error}")
        else:
            self._finish(message.path, message.diagnosis, None)

    def _finish(self, path: Path, diagnosis: Diagnosis | None, outcome: str | None) -> None:
        self.running_for = None
        if diagnosis is not None:
            self.diagnoses[path] = diagnosis
            top = diagnosis.hypotheses[0] if diagnosis.hypotheses else None
            if path != self.app.selected:
                # The user moved on: a toast would sit over the run they are looking at now. The
                # top bar says it instead, until they go back to the run.
                status = self.app.statuses.get(path)
                name = status.info.name if status else path.name
                cause = f"{top.id} {top.score:.2f}" if top is not None and top.score >= LIKELY else "nothing stands out"
                self.app.show_news(path, f"checks done on {printable(name)}: {cause}")
            # On the selected run the hypotheses pane shows the answer; no toast over its evidence.
        else:
            self.outcomes[path] = outcome or ""
            self.app.notify(outcome or "", severity="warning", timeout=6)
        self.app.show_analysis()

    def open_hypothesis(self, path: Path, hypothesis_id: str) -> None:
        """The drill-down of one hypothesis of the run's last checks."""
        diagnosis = self.diagnoses.get(path)
        if diagnosis is None:
            return
        hypothesis = next((h for h in diagnosis.hypotheses if h.id == hypothesis_id), None)
        if hypothesis is None:
            return
        status = self.app.statuses.get(path)
        name = status.info.name if status else path.name
        consoles = status.info.console_files if status else ()
        self.app.push_screen(
            DrillDownScreen(path, name, diagnosis, hypothesis, readonly=self.app.readonly, console_files=consoles)
        )
