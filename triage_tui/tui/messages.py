"""Messages that worker threads post to the app (post_message is thread-safe)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from triage_tui.core.diagnose.diagnosis import Diagnosis
    from triage_tui.core.fix.remap.execute import RemapReport
    from triage_tui.core.fix.remap.plan import RemapPlan
    from triage_tui.core.watch.run_status import RunStatus
    from triage_tui.tui.view_data import RunRow


@dataclass
class RunsUpdated(Message):
    """One watcher poll: every run's status and its table row."""

    statuses: list[RunStatus]
    rows: list[RunRow]
    poll: int = 0  # the Watcher's poll count when it was sent (Watcher.updated): tests wait on it
    skipped_links: str | None = None  # core/read/runs/discover.py skipped_links_note: symlinks not followed
    unplaced_errors: str | None = None  # Watcher.unplaced_errors, a line each: a bucket prefix not listed
    walk_limits: str | None = None  # core/read/runs/walk.py walk_limits_note: where discovery stopped walking

    def can_replace(self, message: Message) -> bool:
        # A newer poll supersedes an older one still queued: the UI never falls behind.
        return isinstance(message, RunsUpdated)


@dataclass
class CheckProgress(Message):
    """Progress of one check of a diagnose() call ("vocab_mapping: ..." messages)."""

    path: Path
    check: str
    fraction: float
    text: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, CheckProgress) and message.path == self.path and message.check == self.check


@dataclass
class ChecksFinished(Message):
    path: Path
    diagnosis: Diagnosis | None
    error: str | None = None
    cancelled: bool = False


@dataclass
class RemapPlanned(Message):
    path: Path
    plan: RemapPlan | None
    error: str | None = None


@dataclass
class RemapProgress(Message):
    fraction: float
    text: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RemapProgress)


@dataclass
class RemapFinished(Message):
    path: Path
    report: RemapReport | None
    error: str | None = None


# ---- what the screens ask of the app (they post these; the app decides and answers with state)


@dataclass
class RunSelected(Message):
    """The runs table's cursor is on this run (None: no run shown)."""

    path: Path | None


@dataclass
class FilterChanged(Message):
    text: str


@dataclass
class MarkToggled(Message):
    """`space`: the run is drawn beside the other marked runs, or no longer."""

    path: Path


@dataclass
class PinToggled(Message):
    """`p`: the run is held at the top of the runs table, or no longer."""

    path: Path


@dataclass
class MetricPickerRequested(Message):
    """`t`: the app offers every series name of the runs shown."""


@dataclass
class ChecksRequested(Message):
    path: Path


@dataclass
class CancelChecks(Message):
    pass


@dataclass
class HypothesisOpened(Message):
    path: Path
    hypothesis_id: str


@dataclass
class RemapRequested(Message):
    """`m`: the app remaps the run, or says why it cannot."""

    path: Path | None


@dataclass
class CancelRemap(Message):
    pass


@dataclass
class ConsoleRequested(Message):
    """`o`: the run's console log."""

    path: Path
