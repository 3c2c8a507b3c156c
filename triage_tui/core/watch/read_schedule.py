"""When each watched run is read next: a run whose files are idle for long is read less often.

Ten thousand runs read at every poll cost a core while nothing is written (a stat and an open per
file, the run's state from /proc, its flags: ~90 µs a run, 0.9 s a poll). A run is read at every
poll while it may be written: it has no file yet, a writer of it is alive here, it has a [serving]
source (an engine is scraped whatever the training does), or its newest file was modified less than
the first idle tier ago. Past that it is read at the tiers a bucket's listings use
(``objstore.cost.idle_tier``: idle 30 min, every 60 s; 6 h, 5 min; 2 d, 15 min), and the
watcher hands on its last report in between; a run's first wait at a tier is between half of it
and all of it, set by its path, so runs that went idle together are read a few at each poll. A
file event under the run (the watchdog, where it runs), a bucket's pass that fetched one of its
objects, a rescan that found its files or settings changed, or an object of its bucket failing
makes it due at once. Idleness is the files' modification time against the real clock, not the
times the run logged (another host's clock) nor the watcher's clock (a test's).
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Collection, Iterable
from pathlib import Path

from triage_tui.core.objstore import cost
from triage_tui.core.read.runs.info import RunInfo
from triage_tui.core.watch.run_state import WriterState
from triage_tui.core.watch.run_status import RunStatus
from triage_tui.core.watch.signals.flags import fmt_duration


def newest_mtime(info: RunInfo) -> float | None:
    """The newest modification time among the run's scalar files (None: none of them is there)."""
    newest = None
    for _, files in info.scalar_files:
        for path in files:
            try:
                mtime = os.stat(path).st_mtime
            except OSError:
                continue
            newest = mtime if newest is None else max(newest, mtime)
    return newest


def _live(status: RunStatus | None) -> bool:
    return status is not None and status.state is not None and status.state.state == WriterState.LIVE


class ReadSchedule:
    """Per run (by path): whether this poll reads it, and, as it is read, how often it is read from
    then on and the line its report carries when that is less often than every poll.
    ``poll_secs``: the watcher's poll interval, the least time between two reads; ``tiered``
    False (``triage scan``: one poll): every run at every poll, nothing said."""

    def __init__(self, poll_secs: float, *, tiered: bool = True) -> None:
        self.poll_secs = poll_secs
        self.tiered = tiered
        # The runs read less often than every poll -> the time.monotonic() from which each is read again.
        self._next_read: dict[Path, float] = {}
        self._touched: list[Path] = []  # what the watchdog saw change since the last poll

    def due(self, path: Path, now: float | None = None) -> bool:
        next_read = self._next_read.get(path)
        return next_read is None or (time.monotonic() if now is None else now) >= next_read

    def mark_due(self, path: Path) -> None:
        self._next_read.pop(path, None)

    def touched(self, *paths: Path) -> None:
        """``paths`` (files, or the directories they are in) changed (the watchdog saw them, a
        bucket's pass fetched them): their runs are read at the next poll, however idle. Safe from
        another thread."""
        self._touched.extend(paths)

    def take_touched(self, runs: Iterable[RunInfo]) -> None:
        """The runs (of ``runs``, the watched ones) under a path that changed are due now."""
        touched, self._touched = self._touched, []  # an append meanwhile lands in one list or the other
        if not touched:
            return
        runs_in: dict[Path, list[Path]] = {}  # a directory -> the runs whose files are there (a store's: several)
        for info in runs:
            runs_in.setdefault(info.directory, []).append(info.path)
        for changed in set(touched):
            for above in (changed, *changed.parents):
                if above in runs_in:
                    for path in runs_in[above]:
                        self.mark_due(path)
                    break

    def read(self, info: RunInfo, status: RunStatus) -> None:
        """``info``'s run was just read into ``status``: a writer of it found alive (the first read
        cannot know before) has it read at every poll from now on."""
        if _live(status):
            self._next_read.pop(info.path, None)

    def keep_only(self, paths: Collection[Path]) -> None:
        """Forget the runs no longer watched."""
        for path in [p for p in self._next_read if p not in paths]:
            del self._next_read[path]

    def plan(self, info: RunInfo, previous: RunStatus | None) -> str | None:
        """``info``'s run is read now (``previous``: its last report): when it is read next, and the
        line for its report when that is later than the next poll (None: at every poll)."""
        if not self.tiered:
            return None
        idle = None
        serving = info.manifest is not None and bool(info.manifest.serving_sources)
        if not serving and not _live(previous):
            newest = newest_mtime(info)
            idle = None if newest is None else max(0.0, time.time() - newest)
        tier = cost.idle_tier(idle)
        if tier is None or tier[1] <= self.poll_secs:
            self._next_read.pop(info.path, None)  # read at every poll, however soon it comes
            return None
        over, every = tier
        # A run that begins to be read at a tier waits half of it and a part of the other half first,
        # the same part each time (its path's): ten thousand runs that went idle together, or were
        # found at once, are read a few at each poll instead of all in one poll a minute (0.4 s of
        # the watcher's thread), and none sooner than half its tier.
        first = info.path not in self._next_read
        wait = every * (1.0 - 0.5 * zlib.crc32(os.fsencode(info.path)) / 2**32) if first else every
        self._next_read[info.path] = time.monotonic() + wait
        return (
            f"its files unmodified for over {fmt_duration(over)}: read every {fmt_duration(every)}, "
            "and at once on a change the watchdog sees or a rescan finds"
        )
