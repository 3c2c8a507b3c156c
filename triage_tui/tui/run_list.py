"""The runs as the table shows them: each run's status from the last poll, its row, and what the user did
to the list (a filter, pinned runs, marked runs); which runs were critical, for the bell.

Plain state and the rules on it, no widgets: the app holds one, feeds it every poll and the user's
messages, and shows what it says (RunsView, the chart's runs, the top bar's text).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text

from triage_tui.core.read.runs.remote import shown_path
from triage_tui.core.text import printable
from triage_tui.core.watch.signals.kinds import RunHealth
from triage_tui.tui.view_data import RunRow, overlay_colour
from triage_tui.tui.view_state import RunsView

if TYPE_CHECKING:
    from triage_tui.core.watch.run_status import RunStatus


class RunList:
    """Every run of the last poll, sorted worst first, with the filter, pins and marks the user set."""

    def __init__(self) -> None:
        self.statuses: dict[Path, RunStatus] = {}
        self.rows: list[RunRow] = []
        self.filter = ""
        self.marked: list[Path] = []  # runs drawn side by side (space), in the order marked: their colours
        self.pinned: set[Path] = set()  # runs held at the top of the table (p)
        # The files of the runs that were critical at the last update. A run is known by its files, not
        # its path: `out/runs` becoming `out` when out/triage.toml lands is the same run, and must not ring
        # again (nor lose its selection).
        self._critical_files: set[Path] = set()

    def update(
        self, statuses: Sequence[RunStatus], rows: Sequence[RunRow], selected: Path | None
    ) -> tuple[bool, tuple[tuple[Path, Path], ...]]:
        """Take a poll's statuses and rows. Returns whether a run turned critical (one bell: a second flag on
        a run already critical adds none; it rings again only after its critical flags cleared and came
        back), and (old, new) when the selected run moved to a new path, to keep it selected."""
        previous = self.statuses
        self.statuses = {status.info.path: status for status in statuses}
        self.marked = [path for path in self.marked if path in self.statuses]
        self.rows = sorted(rows, key=RunRow.sort_key)
        critical = [status for status in statuses if status.status == RunHealth.CRITICAL]
        ring = any(self._critical_files.isdisjoint(run_identity(status)) for status in critical)
        self._critical_files = {item for status in critical for item in run_identity(status)}
        return ring, self._moved(previous, selected)

    def _moved(self, previous: dict[Path, RunStatus], selected_path: Path | None) -> tuple[tuple[Path, Path], ...]:
        selected = previous.get(selected_path) if selected_path else None
        if selected_path is None or selected is None or selected_path in self.statuses:
            return ()
        files = selected.info.scalar_file_set()
        moved = next(
            (path for path, status in self.statuses.items() if not files.isdisjoint(run_identity(status))), None
        )
        return ((selected_path, moved),) if moved is not None else ()

    def set_filter(self, text: str) -> None:
        self.filter = text.strip().lower()

    def toggle_mark(self, path: Path) -> None:
        if path in self.marked:
            self.marked.remove(path)
        elif path in self.statuses:
            self.marked.append(path)

    def toggle_pin(self, path: Path) -> None:
        self.pinned ^= {path}

    def visible(self) -> list[RunRow]:
        rows = self.rows if not self.filter else [row for row in self.rows if self.filter in row.name.lower()]
        # Pinned runs first, each part still worst first (a stable sort).
        return sorted(rows, key=lambda row: row.path not in self.pinned)

    def charted(self, selected: Path | None) -> list[RunStatus]:
        """The runs the chart draws: the marked ones, else the selected one."""
        if self.marked:
            return [self.statuses[path] for path in self.marked if path in self.statuses]
        status = self.statuses.get(selected) if selected else None
        return [status] if status is not None else []

    def view(
        self, now: float, polled: bool, watched: Sequence[Path], renamed: tuple[tuple[Path, Path], ...] = ()
    ) -> RunsView:
        """What the table shows; the screen then says which run its cursor is on (RunSelected)."""
        visible = self.visible()
        empty = None if visible or not polled else self._empty_text(watched)
        total = len(self.rows) if polled else None  # before the first poll the header says "run", no count
        marks = {path: overlay_colour(index) for index, path in enumerate(self.marked)}
        return RunsView(tuple(visible), now, empty, renamed, total=total, marks=marks, pinned=frozenset(self.pinned))

    def _empty_text(self, watched: Sequence[Path]) -> Text:
        """What an empty table means: the filter matches nothing, or nothing was found (yet)."""
        if self.rows:
            return Text.assemble(
                ("no run name contains ", "dim"), (self.filter, "bold"), ("  (esc clears the filter)", "dim")
            )
        where = ", ".join(printable(shown_path(path)) for path in watched)
        return Text.assemble(
            ("No runs under ", ""),
            (where, "bold"),
            (" yet.\n\n", ""),
            ("triage looks, in every subdirectory, for TensorBoard event files (", "dim"),
            ("*tfevents*", "bold"),
            ("), W&B run files (", "dim"),
            ("run-*.wandb", "bold"),
            ("), training consoles beside checkpoints or holding a trainer's lines (", "dim"),
            ("*.log", "bold"),
            (", ", "dim"),
            ("*.out", "bold"),
            ("), HF Trainer's ", "dim"),
            ("trainer_state.json", "bold"),
            (" and ", "dim"),
            ("triage.toml", "bold"),
            (" files, and is watching: a run shows here as soon as its trainer writes its first event.", "dim"),
        )


def run_identity(status: RunStatus) -> set[Path]:
    """What makes a run the same run from one update to the next: its scalar files (of every kind),
    and its path for a run that has none yet."""
    return {status.info.path, *status.info.scalar_file_set()}
