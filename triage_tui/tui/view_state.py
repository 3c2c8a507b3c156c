"""What the app shows, as values: the app sets these as its reactives, the screens bind to them.

The screens never import the app: they post the messages of messages.py for what the user asks,
and show the state they are bound to (``data_bind`` in TriageApp.get_default_screen). A value is
replaced, never changed in place; ``eq=False`` makes every new one count as a change (some hold
numpy arrays, which have no single truth value to compare).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text

from triage_tui.tui.view_data import metrics_line, state_line

if TYPE_CHECKING:
    from triage_tui.core.diagnose.diagnosis import Diagnosis
    from triage_tui.core.fix.remap.execute import RemapReport
    from triage_tui.core.watch.run_status import RunStatus
    from triage_tui.core.watch.signals.flags import Flag
    from triage_tui.tui.view_data import RunRow


@dataclass(frozen=True, eq=False)
class RunsView:
    """The runs table: the rows shown, in order, and why it is empty when it is."""

    rows: tuple[RunRow, ...] = ()
    now: float = 0.0
    empty: Text | None = None  # None: the table has rows, or nothing was read yet
    renamed: tuple[tuple[Path, Path], ...] = ()  # (old, new) paths of runs that moved: keep the cursor on them
    total: int | None = None  # runs found, the filter's hidden ones too (the table's header counts both); None: not yet
    marks: dict[Path, str] = field(default_factory=dict)  # marked runs (space): their curves' colours
    pinned: frozenset[Path] = frozenset()  # runs held at the top (p)


@dataclass(frozen=True, eq=False)
class FlagsState:
    flags: tuple[Flag, ...] = ()
    scanning: bool = True  # before the first poll: "scanning…", not "no flags"
    subtitle: str = ""  # trainer, accuracy by position, acceptance length
    state: tuple[str, str] | None = None  # the run's state and its evidence (view_data.state_line)
    best: str | None = None  # where the run's acceptance estimate peaked (core.watch.best_checkpoint describe())
    notes: tuple[str, ...] = ()  # what was read of the run's files (RunStatus.source_notes), raw text

    @classmethod
    def of(cls, status: RunStatus | None, *, scanning: bool) -> FlagsState:
        """The flags pane of the selected run (None: no run selected)."""
        if status is None:
            return cls((), scanning)
        return cls(
            tuple(status.flags),
            scanning,
            metrics_line(status) or "",
            state_line(status),
            status.best.describe() if status.best is not None else None,
            status.source_notes,
        )


@dataclass(frozen=True, eq=False)
class ChartRequest:
    """What the chart pane draws (widgets/chart_pane.py computes and draws it): the marked runs, else the
    selected one, and the series picked with `t`."""

    statuses: tuple[RunStatus, ...] = ()
    selected: RunStatus | None = None  # its serving acceptance is drawn under the loss
    overlay: bool = False  # runs are marked: each is drawn smoothed, in its colour
    metric: str | None = None  # the series picked with `t`; None: each run's loss


@dataclass(frozen=True, eq=False)
class AnalysisView:
    """The checks and hypotheses of the selected run, and whether checks run (on any run)."""

    path: Path | None = None
    checks_running_for: Path | None = None
    diagnosis: Diagnosis | None = None
    outcome: str | None = None  # "checks cancelled", "checks failed: ..."
    remapped: RemapReport | None = None  # the run's last remap, when there was one

    @property
    def running(self) -> bool:
        return self.path is not None and self.checks_running_for == self.path


@dataclass(frozen=True, eq=False)
class CheckProgressView:
    """Progress of one check of the running checks (``start``: the checks just started)."""

    check: str = ""
    fraction: float = 0.0
    text: str = ""
    start: bool = False
