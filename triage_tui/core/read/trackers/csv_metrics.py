"""Metrics CSV files: PyTorch Lightning's CSVLogger and DeepSpeed's CSV monitor, as scalars.

Lightning (lightning/fabric/loggers/csv_logs.py ``_ExperimentWriter.save``, 2.5) writes
``<save_dir>/<name>/version_<N>/metrics.csv``: a header of every metric name seen so far (``step``
among them; ``epoch`` is logged as a metric) and one row per logged step, a metric not logged at
that step left empty. Rows are appended; when a new metric appears the whole file is rewritten, not
atomically, with the wider header (``_rewrite_with_new_header``). DeepSpeed's CSV monitor
(deepspeed/monitor/csv_monitor.py) writes one ``<name>.csv`` per metric, header ``step,<name>``,
and after every restart appends that header again mid-file before the new process's rows.

So a header may appear on any line: a line whose ``step`` field is no number is a header, and the
rows after it are read by its columns. A file rewritten (its first line changed, or it shrank, or
its bytes before the read offset changed) is read again from its start and its series rebuilt;
a step that goes back after a repeated header is a restart (core.series).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path

from triage_tui.core.log_tail import LogTail
from triage_tui.core.read.trackers import tuning
from triage_tui.core.read.trackers.points import PointBatch, metric_name, step_of
from triage_tui.core.read.trackers.text_numbers import parse_number
from triage_tui.core.series import ReadStats, RunScalars

LIGHTNING_KIND = "lightning"
LIGHTNING_NAME = "metrics.csv"
STEP_COLUMN = "step"
EPOCH_COLUMN = "epoch"  # the Trainer logs it with every metric (its logger connector adds it)
# A header longer than this is no logger's: its first line is not looked at further.
MAX_HEADER_BYTES = 1 << 16
# Headers looked at by discovery, by path: ((inode, size, mtime), is Lightning's), kept while the
# file is unchanged; a bound on how many, past which they are forgotten.
_HEADERS: dict[str, tuple[tuple[int, int, int], bool]] = {}
_MAX_HEADERS = 4096


def _first_line(path: Path, limit: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        head = handle.read(limit)
    end = head.find(b"\n")
    return head[:end] if end >= 0 else None  # no whole first line yet: nothing to compare


def is_lightning_header(line: bytes) -> bool:
    """A first line as Lightning's CSVLogger writes it: its columns hold ``step`` (its
    ``_ExperimentWriter.log_metrics`` adds it to every row) and ``epoch`` (the Trainer logs it)."""
    try:
        columns = next(csv.reader([line.decode("utf-8")]))
    except (UnicodeDecodeError, csv.Error, StopIteration):
        return False
    return STEP_COLUMN in columns and EPOCH_COLUMN in columns


def has_lightning_header(path: Path) -> bool:
    """Whether ``path`` begins with a Lightning header (``is_lightning_header``), its first line read
    again only when the file changed (discovery asks at every rescan)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _HEADERS.get(str(path))
    if cached is not None and cached[0] == key:
        return cached[1]
    line = _first_line(path, MAX_HEADER_BYTES)
    found = line is not None and is_lightning_header(line)
    if len(_HEADERS) >= _MAX_HEADERS:
        _HEADERS.clear()
    _HEADERS[str(path)] = (key, found)
    return found


class _CsvFile:
    """One CSV file followed: its current header and the tail after it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tail = LogTail(path, max_line_bytes=tuning.MAX_LINE_BYTES)
        self.first_line: bytes | None = None
        self.columns: list[str] | None = None
        self.step_index = -1
        self.dropped_seen = 0  # the tail's over-long lines already counted as damage

    def rewritten(self) -> bool:
        """Whether the file's first line is no longer the one it was read with (a wider rewrite)."""
        if self.first_line is None:
            return False
        return _first_line(self.path, len(self.first_line) + 1) not in (self.first_line, None)

    def header(self, fields: list[str]) -> bool:
        """Take ``fields`` as the header if they are one (the step column named, no number in it)."""
        if STEP_COLUMN not in fields:
            return False
        self.columns, self.step_index = fields, fields.index(STEP_COLUMN)
        return True


class CsvMetrics:
    """A run's metrics CSV files (the ``ScalarSource`` protocol)."""

    def __init__(self, kind: str = LIGHTNING_KIND, prefix: str = "") -> None:
        self.kind, self.prefix = kind, prefix
        self.scalars = RunScalars()
        self.problems: dict[Path, str] = {}
        self.damaged: dict[Path, int] = {}
        self._files: dict[Path, _CsvFile] = {}

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(self._files)

    def set_files(self, paths: Sequence[Path]) -> None:
        self._files = {path: self._files.get(path) or _CsvFile(path) for path in paths}

    def poll(self) -> ReadStats:
        stats = ReadStats()
        rebuild = [state for state in self._files.values() if state.rewritten()]
        if rebuild:
            # A file rewritten whole: every file's series read again, the run's scalars rebuilt.
            self._files = {path: _CsvFile(path) for path in self._files}
            self.scalars.clear()
            self.damaged = {}
            stats = ReadStats(resets=1)
        for state in self._files.values():
            restarts = state.tail.restarts
            lines = state.tail.poll(tuning.MAX_READ_BYTES)
            if state.tail.restarts != restarts:
                # Shrunk or replaced under the offset: read from its start, this file's points again.
                return self._restart(stats)
            problem = state.tail.problem
            if problem is not None and problem != "no such file (yet)":
                self.problems[state.path] = problem
                continue
            self.problems.pop(state.path, None)
            stats = self._read_lines(state, lines, stats)
        return stats

    def _restart(self, stats: ReadStats) -> ReadStats:
        self._files = {path: _CsvFile(path) for path in self._files}
        self.scalars.clear()
        self.damaged = {}
        return ReadStats(resets=stats.resets + 1)

    def _read_lines(self, state: _CsvFile, lines: list[str], stats: ReadStats) -> ReadStats:
        batch, bad = PointBatch(), state.tail.dropped - state.dropped_seen
        state.dropped_seen = state.tail.dropped
        wall = state.tail.mtime if state.tail.mtime is not None else 0.0
        for line in lines:
            if not line:
                continue
            try:
                fields = next(csv.reader([line]))
            except (csv.Error, StopIteration):
                bad += 1
                continue
            if state.first_line is None:
                state.first_line = line.encode("utf-8", "replace")
            if state.header(fields):
                continue
            if state.columns is None or len(fields) > len(state.columns):
                bad += 1  # a row before any header, or wider than its header: no column to put it in
                continue
            step_value = parse_number(fields[state.step_index]) if state.step_index < len(fields) else None
            step = step_of(step_value)
            if step is None:
                bad += 1
                continue
            row: list[tuple[str, float]] = []
            for name, text in zip(state.columns, fields, strict=False):
                if name == STEP_COLUMN or text == "":
                    continue
                value, series = parse_number(text), metric_name(name)
                if value is None or series is None:
                    row = []
                    bad += 1
                    break
                row.append((series, value))
            for series, value in row:
                batch.add(series, step, wall, value)
        if bad:
            self.damaged[state.path] = self.damaged.get(state.path, 0) + bad
        added = batch.append_to(self.scalars, self.prefix)
        return ReadStats(
            files=stats.files + 1,
            bytes_read=stats.bytes_read + state.tail.bytes_read,
            records=stats.records + len(lines),
            scalars=stats.scalars + added,
            corrupt_records=stats.corrupt_records + bad,
            resets=stats.resets,
        )
