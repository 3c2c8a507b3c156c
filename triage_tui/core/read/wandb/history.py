"""``WandbHistory``: a run's W&B files polled, their history rows into scalar series, their config.

- The step of a point is its row's ``_step``, unless ``define_metric`` gave the key a step metric (by
  name, or by glob: a metric defined by name wins over a glob, as in the W&B UI): then the row's value
  of that step metric. HF Trainer's WandbCallback does this for every key (``train/global_step``). A
  row without that value, or with a fractional one, gives no point for the key (counted in
  ``unkeyed_points``, never guessed: mixing two step scales would let preemption erase the series).
  A step metric whose value is not finite or past int64 makes the whole row damage: no point of it
  is placed, and it is counted as a damaged record.
- ``run`` and ``config`` records update the run's config (``wandb.config``), used like config.json.

Files are read from where the last poll stopped (core.read.wandb.framing); a record that is damage, or that
core.read.wandb.records finds impossible, is skipped and counted. A file that shrinks or changes inode
is read again, with every other file of the run.
"""

from __future__ import annotations

import fnmatch
import math
import os
import stat
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from triage_tui.core import fileio
from triage_tui.core.read.events.reader import any_file_replaced
from triage_tui.core.read.wandb.framing import WANDB_HEADER, frame
from triage_tui.core.read.wandb.records import (
    DAMAGED,
    ConfigChange,
    MetricDefinition,
    Row,
    RunExit,
    WandbUnavailable,
    decode,
    has_typed_values,
    step_in_int64,
    wandb_protos,
)
from triage_tui.core.series import ReadStats, RunScalars

_READ_LIMIT = 64 << 20  # bytes read per step; a live run appends far less between polls


@dataclass
class _FileState:
    path: Path
    dev: int = -1
    ino: int = -1
    offset: int = 0  # file offset of the next record; 0 = the header is not read yet


# Points of one poll before they go into the series: tag -> (steps, wall times, values), row order.
_Rows = dict[str, tuple[list[int], list[float], list[float]]]


class WandbHistory:
    """Incremental reader for the .wandb files of one run; `scalars` is updated in place.

    ``prefix`` is put in front of every tag (``wandb/`` when the run also has event files, so that
    the two sources' series never merge). Files are read in the order given (discovery's natural
    order: a resumed run's later directory after the earlier one); a step going back replaces what
    came after it, as for event files. ``problems`` names what could not be read, per file.
    A scalar source (core.read.source_kinds.kind.ScalarSource).
    """

    kind = "wandb"

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.scalars = RunScalars()
        self.totals = ReadStats()
        self.config: dict[str, Any] = {}
        self.config_version = 0  # bumps whenever a run or config record changed `config`
        self.unkeyed_points = 0  # values whose step metric was missing from the row or not an integer
        # The run's ``exit`` record (RunExitRecord.exit_code, wandb/proto/wandb_internal.proto): what
        # wandb.finish(exit_code=...) or the process's exit hook recorded; None while the run has none.
        self.exit_code: int | None = None
        self.problems: dict[Path, str] = {}
        self.damaged: dict[Path, int] = {}  # file -> damaged records skipped in it, every poll so far
        self._files: dict[Path, _FileState] = {}
        self._named_metrics: dict[str, str] = {}  # key -> its step metric ("" = _step)
        self._glob_metrics: list[tuple[str, str]] = []  # (glob, step metric), in definition order
        self._step_of: dict[str, tuple[str, str]] = {}  # cache: key -> (tag, step metric or "" for _step)
        self._typed = False
        self._lock = threading.Lock()

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(self._files)

    def set_files(self, paths: Iterable[Path]) -> None:
        with self._lock:
            self._files = {Path(p): self._files.get(Path(p)) or _FileState(Path(p)) for p in paths}

    def poll(self) -> ReadStats:
        """Stat every file and decode only the records appended since the last poll."""
        with self._lock:
            stats = ReadStats(files=len(self._files))
            if not self._files:
                return stats
            try:
                pb = wandb_protos()
                self._typed = has_typed_values(pb)
            except WandbUnavailable as err:
                self.problems = dict.fromkeys(self._files, err.what)
                stats.unreadable_files = len(self._files)
                return stats
            if any_file_replaced(self._files.values()):
                self._forget_all()
                stats.resets += 1
            rows: _Rows = {}
            for state in self._files.values():
                self._read(pb, state, stats, rows)
            for tag, (steps, walls, values) in rows.items():
                series = self.scalars.series_for(tag, "wandb")
                if series is not None:  # None: a tag beyond the TUI's bound (core.series.display_series)
                    series.extend(np.array(steps, np.int64), np.array(walls, np.float64), np.array(values, np.float64))
            if stats.scalars or stats.resets:
                self.scalars.version += 1
            self.totals.add(stats)
            return stats

    # ------------------------------------------------------------------ files

    def _forget_all(self) -> None:
        # A rewritten file: every file of the run is read again, in order (as RunEvents does).
        self.scalars.clear()
        self.config = {}
        self.unkeyed_points = 0
        self.exit_code = None
        self.problems = {}
        self.damaged = {}
        self._named_metrics, self._glob_metrics, self._step_of = {}, [], {}
        self._files = {p: _FileState(p) for p in self._files}

    def _read(self, pb, state: _FileState, stats: ReadStats, rows: _Rows) -> None:
        try:
            handle = fileio.open_polled(state.path)  # a FIFO named like a run file must not hang the poll
        except FileNotFoundError:
            return
        except OSError as err:
            self.problems[state.path] = f"cannot read: {err.strerror or err}"
            stats.unreadable_files += 1
            return
        with handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode):
                self.problems[state.path] = "not a regular file"
                stats.unreadable_files += 1
                return
            if state.dev < 0:
                state.dev, state.ino = st.st_dev, st.st_ino
            elif (st.st_dev, st.st_ino) != (state.dev, state.ino):
                return  # replaced since the stat: the next poll starts over
            size = st.st_size
            if state.offset == 0:
                header = handle.read(len(WANDB_HEADER))
                stats.bytes_read += len(header)
                if len(header) < len(WANDB_HEADER) and WANDB_HEADER.startswith(header):
                    stats.pending_bytes += len(header)
                    return  # the writer has not finished the header yet
                if header != WANDB_HEADER:
                    self.problems[state.path] = "not a W&B run file (no ':W&B' version 0 header)"
                    stats.unreadable_files += 1
                    return
                self.problems.pop(state.path, None)
                state.offset = len(WANDB_HEADER)
            window = _READ_LIMIT
            corrupt_before = stats.corrupt_records
            while state.offset < size:
                handle.seek(state.offset)
                buf = handle.read(min(size - state.offset, window))
                stats.bytes_read += len(buf)
                framed = frame(buf, state.offset)
                stats.corrupt_records += framed.corrupt
                stats.skipped_bytes += framed.skipped_bytes
                for payload in framed.records:
                    self._take(pb, payload, stats, rows)
                state.offset += framed.consumed
                if state.offset + len(buf) - framed.consumed >= size:
                    break  # the rest is a record still being written
                window = _READ_LIMIT if framed.consumed else 2 * window  # a record longer than the window
            stats.pending_bytes += max(size - state.offset, 0)
            if stats.corrupt_records > corrupt_before:
                self.damaged[state.path] = self.damaged.get(state.path, 0) + stats.corrupt_records - corrupt_before

    # ------------------------------------------------------------------ records

    def _take(self, pb, payload: bytes, stats: ReadStats, rows: _Rows) -> None:
        stats.records += 1
        decoded = decode(pb, payload, self._typed)
        if isinstance(decoded, Row):
            if not self._history(decoded, stats, rows):
                stats.corrupt_records += 1
        elif decoded is DAMAGED:
            stats.corrupt_records += 1
        elif isinstance(decoded, MetricDefinition):
            self._metric(decoded)
        elif isinstance(decoded, ConfigChange):
            self.config.update(decoded.update)
            for key in decoded.remove:
                self.config.pop(key, None)
            self.config_version += 1
        elif isinstance(decoded, RunExit):
            self.exit_code = decoded.code

    def _history(self, row: Row, stats: ReadStats, rows: _Rows) -> bool:
        """Place the row's points; False, and nothing placed, when a step metric's value is impossible."""
        values = row.values
        step_of = self._step_of
        points: list[tuple[str, int, float]] = []
        unkeyed = 0
        for key, value in values.items():
            target = step_of.get(key)
            if target is None:
                target = step_of[key] = (self.prefix + key, self._step_metric(key))
            tag, metric = target
            point_step = row.step
            if metric:
                x = values.get(metric)
                if x is None or (math.isfinite(x) and x != int(x)):
                    unkeyed += 1  # a row without its step, or a fractional one (an epoch): not a step
                    continue
                whole = step_in_int64(x)
                if whole is None:
                    return False  # NaN, inf, 1e300 as a step: no writer meant that row
                point_step = whole
            points.append((tag, point_step, value))
        self.unkeyed_points += unkeyed
        wall = row.wall
        for tag, point_step, value in points:
            columns = rows.get(tag)
            if columns is None:
                columns = rows[tag] = ([], [], [])  # steps, wall times, values
            columns[0].append(point_step)
            columns[1].append(wall)
            columns[2].append(value)
        stats.scalars += len(points)
        return True

    def _step_metric(self, key: str) -> str:
        """The step metric define_metric gave `key` ("" = _step): by name, else the first glob that matches."""
        found = self._named_metrics.get(key)
        if found is None:
            found = next((s for glob, s in self._glob_metrics if fnmatch.fnmatchcase(key, glob)), "")
        return "" if found == key else found  # a step metric itself is plotted against _step

    def _metric(self, metric: MetricDefinition) -> None:
        if metric.name:
            self._named_metrics[metric.name] = metric.step_metric
        elif metric.glob:
            self._glob_metrics.append((metric.glob, metric.step_metric))
        else:
            return
        self._step_of = {}
