"""A run's event files, polled: only the bytes appended since the last poll are read (``event_file``).

The length and data CRCs are always checked; a record whose CRC or proto is bad is dropped and
reading resumes at the next offset that holds a whole record with valid CRCs (rustboard marks such
a file dead, TensorBoard's Python loader stops there for good); a file that shrinks or changes
inode is read again from the start (with the rest of its run). SessionLog.START purges as
TensorBoard's loader does (``RunEvents._restarts``), and each event file's series are named below
the run's own log directory (``series_prefixes``).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from triage_tui.core import fileio
from triage_tui.core.errors import BadInput
from triage_tui.core.natural_sort import natural_key
from triage_tui.core.read.events.decode import Chunk, Decoder
from triage_tui.core.read.events.event_file import FileState, read_appended
from triage_tui.core.read.events.framing import Frames
from triage_tui.core.read.runs.listing import RACY_MTIME_SECS
from triage_tui.core.series import ReadStats, RunScalars


def any_file_replaced(states: Iterable) -> bool:
    """Whether a file already read (``path``, ``dev``, ``ino``, ``offset``) was replaced or shrank.

    Then the run is read again from the start (RunEvents, WandbHistory). A file that is gone keeps
    what it gave (as rustboard does).
    """
    for state in states:
        if state.dev < 0:
            continue
        try:
            st = os.stat(state.path)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) != (state.dev, state.ino) or st.st_size < state.offset:
            return True
    return False


# A big read grows each series' arrays several times; glibc keeps the freed smaller arrays in its
# heap, so RSS ends ~38 B/point while the series hold 24 (benchmarks/RESULTS-scale.md; 24.4 B/point
# after malloc_trim). Trimming after reads of this size costs a few ms and gives them back.
_TRIM_AFTER_BYTES = 16 << 20


class RunEvents:
    """Incremental reader for all event files of one run; `scalars` is updated in place. A scalar
    source (core.read.source_kinds.kind.ScalarSource)."""

    kind = "tensorboard"
    prefix = ""  # the first kind of a run (core/read/source_kinds/registry.py): its series keep their names

    def __init__(self) -> None:
        self.scalars = RunScalars()
        self.totals = ReadStats()
        self._files: dict[Path, FileState] = {}
        self._decoder = Decoder()
        self._plugins: dict[int, str | None] = {}  # tag id -> plugin of its first occurrence
        self.damaged: dict[Path, int] = {}  # file -> damaged records dropped from it, every poll so far
        self.problems: dict[Path, str] = {}  # file -> why the last poll could not read it
        self._lock = threading.Lock()

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(self._files)

    def set_files(self, paths: Iterable[Path]) -> None:
        """The run's event files. Points already read from a file that leaves the set are kept."""
        with self._lock:
            # Discovery's order (natural: ...tfevents.<t>.<host>.<pid>.9 before .13), so files of
            # one second are read in the order the writer created them.
            # Paths kept as given (discovery's, their hashes cached): a new Path of each costs its
            # parsing and its hash again, ~25 µs a run of the 2.7 s first rescan of 10 000 runs.
            given = {p if isinstance(p, Path) else Path(p) for p in paths}
            wanted = sorted(given, key=lambda p: (natural_key(p.name), str(p)))
            prefixes = series_prefixes(wanted)
            files = {}
            renamed = False
            for path in wanted:
                state = self._files.get(path) or FileState(path, prefix=prefixes[path])
                renamed |= state.prefix != prefixes[path]
                files[path] = state
            self._files = files
            if renamed:
                # A log dir above a file appeared (its writer started later): its series change
                # names, so the run is read again under the new ones.
                for state in files.values():
                    state.prefix = prefixes[state.path]
                self._forget_all()

    def poll(self) -> ReadStats:
        """Stat every file and read only the bytes appended since the last poll."""
        with self._lock:
            stats = ReadStats(files=len(self._files))
            if self._any_replaced():
                self._forget_all()
                stats.resets += 1
            self._read_files(stats)
            if stats.scalars or stats.resets:
                self.scalars.version += 1
            if stats.bytes_read >= _TRIM_AFTER_BYTES:
                fileio.return_freed_heap()
            self.totals.add(stats)
            return stats

    def _read_files(self, stats: ReadStats) -> None:
        for state in self._files.values():
            self.problems.pop(state.path, None)
            try:
                self._read(state, stats)
            except OSError as err:
                # EIO from a failing disk, ...: this file named, its points so far kept, the
                # run's other files read on; the next poll tries it again.
                stats.unreadable_files += 1
                self.problems[state.path] = f"cannot read it: {err.strerror or err}"
                continue
            except Exception as err:  # a reader bug: said of the file that caused it
                raise BadInput(state.path, f"cannot read it: {type(err).__name__}: {err}") from err

    def _any_replaced(self) -> bool:
        return any_file_replaced(self._files.values())

    def _forget_all(self) -> None:
        # Simplest correct answer to a rewritten file: every file of the run is read again, in order.
        self.scalars.clear()
        self._plugins = {}
        self._files = {p: FileState(p, prefix=state.prefix) for p, state in self._files.items()}

    def _read(self, state: FileState, stats: ReadStats) -> None:
        corrupt_before = stats.corrupt_records
        try:
            # Reopened every poll: NFS close-to-open revalidation. Unbuffered: the hole probes move
            # the descriptor's offset, which a buffered reader would not notice (its seek() can stay
            # within its buffer).
            handle = fileio.open_polled(state.path, buffering=0)
        except FileNotFoundError:
            return  # gone (or not there yet): keep what it gave
        except OSError as err:
            # Permission denied, ...: the points it gave stay, and the run says which file and why.
            stats.unreadable_files += 1
            self.problems[state.path] = f"cannot open it: {err.strerror or err}"
            return
        with handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode):  # a FIFO would block the reader forever
                stats.unreadable_files += 1
                self.problems[state.path] = "not a regular file (a FIFO, a device, ...): not read"
                return
            if state.dev < 0:
                state.dev, state.ino = st.st_dev, st.st_ino
            elif (st.st_dev, st.st_ino) != (state.dev, state.ino):
                return  # replaced since the stat: the next poll starts the run over
            size = st.st_size
            if state.quiet == (size, st.st_mtime_ns):
                # Nothing written since a poll that could take nothing (a half-written record, a
                # zero-filled or sparse tail): reading the same bytes again would find the same.
                stats.pending_bytes += size - state.offset
                self._say_damaged_tail(state, size)
                return
            read_appended(handle, state, size, stats, self._take)
            # Remembered only when the mtime is old enough to change with the next write (git's
            # racy-index rule, as core.read.runs' listing cache): a write in the same tick keeps it.
            racy = time.time() - st.st_mtime <= RACY_MTIME_SECS
            state.quiet = (size, st.st_mtime_ns) if state.offset < size and not racy else None
            stats.pending_bytes += max(size - state.offset, 0)
            self._say_damaged_tail(state, size)
        if stats.corrupt_records > corrupt_before:
            self.damaged[state.path] = self.damaged.get(state.path, 0) + stats.corrupt_records - corrupt_before

    def _say_damaged_tail(self, state: FileState, size: int) -> None:
        """A file whose last bytes are no records (random bytes, a tail overwritten) is said, not
        left waiting as if a writer were still writing it; its records before stay."""
        if state.damaged_from is not None and state.damaged_from == state.offset < size:
            if state.damaged_from == 0:
                self.problems[state.path] = "not a TensorBoard event file: no valid record in it"
                return
            self.problems[state.path] = (
                f"no TFRecord from byte {state.damaged_from} on ({size - state.damaged_from} bytes fail the "
                "length check and no whole record follows): damaged, or not an event file"
            )

    def _take(self, buf: bytearray, frames: Frames, state: FileState, stats: ReadStats) -> None:
        """Whole records of one read window into points, stored under the run's restart rules."""
        self._store(self._decode(buf, frames, stats), state, stats)

    def _decode(self, buf: bytearray, frames: Frames, stats: ReadStats) -> Chunk:
        # A signalling NaN widened to float64 makes numpy print a RuntimeWarning, with a source
        # line from the install, on the user's terminal: it is just a NaN point.
        with np.errstate(invalid="ignore"):
            chunk = self._decoder.decode(buf, frames)
        stats.corrupt_records += chunk.corrupt
        stats.slow_records += chunk.slow
        return chunk

    def _restarts(self, chunk: Chunk, state: FileState) -> list[tuple[int, int]]:
        """SessionLog.START events that purge: (key, step).

        Only in files with file_version >= 2, as TensorBoard's Python loader
        (plugin_event_accumulator.py: _CheckForRestartAndMaybePurge). TB ignores the first START
        of a run (PR tensorflow/tensorboard#4763: a writer's own START must not purge the graph
        or summaries it wrote just before it). Here a file's first START is ignored only when
        that file already wrote summaries before it; torch's SummaryWriter(purge_step=T) writes
        START(T) as the first records of the restarted writer's new file, and that one must purge
        what the dead process wrote at steps >= T in the run's other files.
        """
        events = sorted([(k, 0, v) for k, v in chunk.versions] + [(k, 1, s) for k, s in chunk.starts])
        version = state.file_version
        purges = []
        for key, is_start, value in events:
            if not is_start:
                version = value
                continue
            if version is None or version < 2:
                continue
            if not state.seen_start:
                state.seen_start = True
                wrote_before = state.seen_summary or (chunk.first_summary is not None and chunk.first_summary < key)
                if wrote_before:
                    continue
            purges.append((key, int(value)))
        state.file_version = version
        state.seen_summary |= chunk.first_summary is not None
        return purges

    def _store(self, chunk: Chunk, state: FileState, stats: ReadStats) -> None:
        purges = self._restarts(chunk, state)
        # First occurrence wins, even when that point itself is not kept (a NaN wall_time).
        for tag_id, (_, plugin) in chunk.first_plugin.items():
            self._plugins.setdefault(tag_id, plugin)
        if not chunk.keys and not purges:
            return
        scalars = self.scalars
        if chunk.keys:
            chunk.group()
            (keys,), (tag_ids,), (steps,), (walls,), (values,) = (
                chunk.keys,
                chunk.tag_ids,
                chunk.steps,
                chunk.walls,
                chunk.values,
            )
            chunk.keys = chunk.tag_ids = chunk.steps = chunk.walls = chunk.values = []  # peak memory
            stats.scalars += int(keys.size)
            finite = np.isfinite(walls)
            if not finite.all():
                stats.dropped_points += int(finite.size - finite.sum())
                keys, tag_ids, steps, walls, values = (a[finite] for a in (keys, tag_ids, steps, walls, values))
            edges = np.flatnonzero(np.diff(tag_ids)) + 1
            bounds = np.concatenate(([0], edges, [keys.size])).tolist() if keys.size else [0]
        else:
            bounds = [0]
        tags = self._decoder.tags
        segments = []
        # Each tag in the order the file first logs it (its first record's key): where the TUI keeps a
        # bounded number of series (core.series.display_series), the tags a writer logs first are kept.
        for a, b in sorted(zip(bounds[:-1], bounds[1:], strict=True), key=lambda ab: int(keys[ab[0]])):
            tag_id = int(tag_ids[a])
            series = scalars.series_for(state.prefix + tags[tag_id], self._plugins.get(tag_id))
            if series is None:
                continue  # a tag beyond the TUI's bound (core.series.display_series): its points are not kept
            if series.tag not in state.series_seen:
                # This file's first point of a series other files began: a resumed writer's new file.
                if len(series):
                    series.mark_restart(int(steps[a]))
                state.series_seen.add(series.tag)
            cuts = np.searchsorted(keys[a:b], [k for k, _ in purges]).tolist() if purges else []
            segments.append((series, a, [a + c for c in cuts] + [b]))
        lows = [a for _, a, _ in segments]
        for phase in range(len(purges) + 1):
            for i, (series, _, cuts) in enumerate(segments):
                lo, hi = lows[i], cuts[phase]
                if hi > lo:
                    series.extend(steps[lo:hi], walls[lo:hi], values[lo:hi])
                lows[i] = hi
            if phase < len(purges) and scalars.purge_from(purges[phase][1]):
                scalars.version += 1  # a purge alone (no new points) is a change too


def series_prefixes(files: Iterable[Path]) -> dict[Path, str]:
    """Each event file's series-name prefix: ``"<subdir>/"`` below the run's own log directory.

    A series is (sub-directory, tag), as in TensorBoard, where every directory of event files is
    a run of its own: ``add_scalars("eval", {"ploss_0": x, "acc_0": y})`` writes tag ``eval``
    into ``eval_ploss_0/`` and ``eval_acc_0/`` below the writer's directory, and those must not
    merge into one ``eval``. The run's own log directories are those with no other event-file
    directory of the run above them (several of them, such as HF Trainer's
    ``runs/<date_host>/`` after a restart, are one run's continuations: their tags merge).
    """
    files = [f if isinstance(f, Path) else Path(f) for f in files]
    directories = {f.parent for f in files}
    if len(directories) == 1:  # the usual run: one log directory, nothing above or below it
        return dict.fromkeys(files, "")
    prefixes = {}
    for file in files:
        directory = file.parent
        root = next((a for a in reversed(directory.parents) if a in directories), directory)
        prefixes[file] = "" if root == directory else directory.relative_to(root).as_posix() + "/"
    return prefixes
