"""A followed text log whose lines carry a step and named values, as a scalar source.

What torchtune's DiskLogger, nanoGPT-style consoles and NeMo Automodel's JSON lines share: one
file (or several, one per launch) followed through ``core/log_tail.LogTail`` (appends, rotation,
truncation, a partial last line), each complete line handed to the format's parser. A line the
parser does not know is not a metrics line (a console prints much else); a line it knows but
cannot read whole is damage, counted on its file. The lines carry no time of their own: a poll's
points take the file's modification time as read, the latest they can have been written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from triage_tui.core.log_tail import LogTail
from triage_tui.core.read.trackers import tuning
from triage_tui.core.read.trackers.points import PointBatch
from triage_tui.core.series import ReadStats, RunScalars


@dataclass(frozen=True)
class Logged:
    """One metrics line: its step and (name, value) pairs, in the order written."""

    step: int
    values: tuple[tuple[str, float], ...]


class Damaged:
    """A line of the format that could not be read whole."""


DAMAGED = Damaged()
# A parser: a line into what it logged, DAMAGED, or None (not a metrics line of this format).
LineParser = Callable[[str], "Logged | Damaged | None"]
# The parser of one file's lines (a file's name may say how its metrics are named).
ParserFor = Callable[[Path], LineParser]


class LineLogs:
    """A run's log files of one format, read in the order given (a new file per launch: oldest first),
    each followed from where the last poll stopped (the ``ScalarSource`` protocol)."""

    def __init__(self, kind: str, parser_for: ParserFor, prefix: str = "", *, split_cr: bool = False) -> None:
        self.kind, self.parser_for, self.prefix, self.split_cr = kind, parser_for, prefix, split_cr
        self.scalars = RunScalars()
        self.problems: dict[Path, str] = {}
        self.damaged: dict[Path, int] = {}
        self.lines_read = 0
        self._tails: dict[Path, LogTail] = {}
        self._parsers: dict[Path, LineParser] = {}

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(self._tails)

    def set_files(self, paths: Sequence[Path]) -> None:
        """The files to follow, oldest first; a file already followed keeps its place in it."""
        self._tails = {
            path: self._tails.get(path) or LogTail(path, max_line_bytes=tuning.MAX_LINE_BYTES, split_cr=self.split_cr)
            for path in paths
        }
        self._parsers = {path: self._parsers.get(path) or self.parser_for(path) for path in paths}

    def poll(self) -> ReadStats:
        stats = ReadStats()
        for path, tail in self._tails.items():
            dropped = tail.dropped
            lines = tail.poll(tuning.MAX_READ_BYTES)
            if tail.problem is not None and tail.problem != "no such file (yet)":
                self.problems[path] = tail.problem
                continue
            self.problems.pop(path, None)
            batch, bad = PointBatch(), tail.dropped - dropped
            wall = tail.mtime if tail.mtime is not None else 0.0
            parse = self._parsers[path]
            for line in lines:
                logged = parse(line)
                if logged is None:
                    continue
                if isinstance(logged, Damaged):
                    bad += 1
                    continue
                for name, value in logged.values:
                    batch.add(name, logged.step, wall, value)
            if bad:
                self.damaged[path] = self.damaged.get(path, 0) + bad
            self.lines_read += len(lines)
            added = batch.append_to(self.scalars, self.prefix)
            stats = ReadStats(
                files=stats.files + 1,
                bytes_read=stats.bytes_read + tail.bytes_read,
                records=stats.records + len(lines),
                scalars=stats.scalars + added,
                corrupt_records=stats.corrupt_records + bad,
                resets=stats.resets,
            )
        return stats
