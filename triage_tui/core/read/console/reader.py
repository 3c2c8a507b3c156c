"""``ConsoleLogs``: a run's training console files followed, their records as one ``RunScalars``.

Each file is followed by a ``follow.ConsoleFile``; each record gets its step (``steps``), and its
values become points of series named as the trainer printed them (``prefix`` before each name
when the run's other sources need it). A point's wall time is the file's modification time at the
poll that read it: console lines carry no date, and a log read long after it was written must not
look live. A file's points stay when the file leaves the run.

Several console files of one run (``train.log`` beside ``slurm-<job>.out``, one SLURM job's log per
resume) are merged with ``series.overlay``, the most recently modified file over the others: a
copy of the same log adds nothing, a resumed job's log replaces the steps it repeats (its first
step marked a restart).

HF Trainer's steps come from a checkpoint's ``trainer_state.json`` when the reader is given one
(``set_trainer_state``): the newest one, given again when a newer checkpoint lands; every file's
points are then placed again, so a step once inferred becomes the logged one.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triage_tui.core.formats.trainer_state import TrainerState
from triage_tui.core.natural_sort import natural_key
from triage_tui.core.read.console.follow import ConsoleFile
from triage_tui.core.read.console.record import HF_TRAINER, ConsoleRecord
from triage_tui.core.read.console.steps import INFERRED, StepResolver
from triage_tui.core.series import ReadStats, RunScalars, overlay_runs

TRAINER_NAMES = {"specforge": "SpecForge", "hf-trainer": "HF Trainer", "speculators": "speculators"}


@dataclass(frozen=True)
class PollStats:
    """What one poll of one console file did (``ConsoleLogs.poll`` sums them into a ReadStats)."""

    files: int = 0  # console files looked at
    bytes_read: int = 0
    records: int = 0  # trainer records read
    points: int = 0  # scalar points they hold
    resets: int = 0  # files found replaced or truncated and read again from their start
    unreadable_files: int = 0  # files that could not be read (missing, permissions, not a file)


class _Placed:
    """Points placed at their steps, and what each step was taken from."""

    def __init__(self) -> None:
        self.scalars = RunScalars()
        self.bases: dict[str, Counter[str]] = {}  # trainer -> step basis -> records
        self.inferred: Counter[str] = Counter()  # series -> points whose step was inferred

    def place(self, records: Sequence[tuple[ConsoleRecord, float]], resolver: StepResolver, prefix: str) -> None:
        columns: dict[str, tuple[list[int], list[float], list[float]]] = {}
        for record, wall in records:
            step, basis = resolver.resolve(record)
            self.bases.setdefault(record.trainer, Counter())[basis] += 1
            for key, value in record.values:
                tag = prefix + key
                steps, walls, values = columns.setdefault(tag, ([], [], []))
                steps.append(step)
                walls.append(wall)
                values.append(value)
                if basis == INFERRED:
                    self.inferred[tag] += 1
        for tag, (steps, walls, values) in columns.items():
            series = self.scalars.series_for(tag, None)
            if series is not None:  # None: a tag beyond the TUI's bound (core.series.display_series)
                series.extend(
                    np.asarray(steps, np.int64), np.asarray(walls, np.float64), np.asarray(values, np.float64)
                )


class _File:
    """One console file and its series. Its records are read a chunk at a time and placed at once
    (a console of millions of lines is never held whole); only HF Trainer's dicts are kept, as they
    are the records a newer ``trainer_state.json`` places again (``steps``): the others print their
    step, or take it from the record before, whatever the trainer state says."""

    def __init__(self, path: Path, prefix: str, state: TrainerState | None) -> None:
        self.console = ConsoleFile(path)
        self.prefix = prefix
        self.scalars = RunScalars()
        self.fixed = _Placed()  # the records no trainer state places again
        self.hf_records: list[tuple[ConsoleRecord, float]] = []  # (record, wall time), in file order
        self.rebuild(state)

    def rebuild(self, state: TrainerState | None) -> None:
        self.resolver = StepResolver(state)
        self.hf = _Placed()
        self.hf.place(self.hf_records, self.resolver, self.prefix)
        self._merge()

    @property
    def bases(self) -> dict[str, Counter[str]]:
        return {**self.fixed.bases, **self.hf.bases}

    @property
    def inferred(self) -> Counter[str]:
        return self.fixed.inferred + self.hf.inferred

    def poll(self) -> PollStats:
        tail = self.console.tail
        offset, restarts = tail.offset, tail.restarts
        records = points = 0
        for chunk in self.console.poll():
            wall = tail.mtime or 0.0
            placed = [(record, wall) for record in chunk]
            self.hf_records += [item for item in placed if item[0].trainer == HF_TRAINER]
            # In file order, each to its own: the resolver's spacing and last step follow the file.
            for is_hf, group in itertools.groupby(placed, key=lambda item: item[0].trainer == HF_TRAINER):
                (self.hf if is_hf else self.fixed).place(list(group), self.resolver, self.prefix)
            records += len(chunk)
            points += sum(len(record.values) for record in chunk)
        if records:
            self._merge()
        return PollStats(
            files=1,
            bytes_read=max(0, tail.offset - offset) if tail.restarts == restarts else tail.offset,
            records=records,
            points=points,
            resets=tail.restarts - restarts,
            unreadable_files=int(self.console.problem is not None),
        )

    def _merge(self) -> None:
        # One name printed by HF Trainer's dicts and by another trainer's lines in one file (two
        # trainers appended to one log) keeps HF's, which the trainer state places.
        self.scalars.series = {**self.fixed.scalars.series, **self.hf.scalars.series}
        self.scalars.version += 1


class ConsoleLogs:
    """Incremental reader of all of one run's console files; ``scalars`` is one live, stable view."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.scalars = RunScalars()
        self._files: dict[Path, _File] = {}
        self._paths: tuple[Path, ...] = ()
        self._state: TrainerState | None = None
        self._seen: tuple = ()

    def set_files(self, files: Sequence[Path]) -> None:
        """The run's console files. A file that leaves keeps its points (as a vanished event file's)."""
        self._paths = tuple(files)
        for path in self._paths:
            if path not in self._files:
                self._files[path] = _File(path, self.prefix, self._state)

    def set_trainer_state(self, state: TrainerState | None) -> None:
        """The newest checkpoint's trainer state (HF Trainer's steps); a changed one places every
        file's points again."""
        if _identity(state) == _identity(self._state):
            return
        self._state = state
        for file in self._files.values():
            file.rebuild(state)
        self._refresh()

    kind = "console"  # a ScalarSource (core.read.source_kinds.kind)

    @property
    def files(self) -> tuple[Path, ...]:
        return self._paths

    def poll(self) -> ReadStats:
        """Read what was appended to every file, each up to its size when the poll began
        (``follow.ConsoleFile.poll``): every surface that polls once sees every line written then."""
        polls = [self._files[path].poll() for path in self._paths]
        self._refresh()
        total = PollStats(*(sum(getattr(p, name) for p in polls) for name in PollStats.__dataclass_fields__))
        return ReadStats(
            files=total.files,
            bytes_read=total.bytes_read,
            records=total.records,
            scalars=total.points,
            resets=total.resets,
            unreadable_files=total.unreadable_files,
        )

    @property
    def damaged(self) -> dict[Path, int]:
        """Lines of a trainer's format that could not be read, and lines too long, per file."""
        return {path: file.console.damaged for path, file in self._files.items() if file.console.damaged}

    @property
    def problems(self) -> dict[Path, str]:
        """Files the last poll could not read (missing, unreadable, not a regular file), and why."""
        return {path: file.console.problem for path in self._paths if (file := self._files[path]).console.problem}

    def newest(self) -> tuple[Path, tuple[int, int, float]] | None:
        """The run's console file written last (its modification time at the last poll), with a mark
        that changes whenever the last poll read more of it, found it rewritten or touched: whoever
        reads its tail again (core.watch.run_state's crash line) does so only then. None before a poll
        found one."""
        found = [(mtime, path) for path in self._paths if (mtime := self._files[path].console.tail.mtime)]
        if not found:
            return None
        _, path = max(found, key=lambda item: (item[0], natural_key(os.fspath(item[1]))))
        tail = self._files[path].console.tail
        return path, (tail.offset, tail.restarts, tail.mtime or 0.0)

    def inferred(self) -> dict[str, int]:
        """Per series, the points whose step was inferred (HF Trainer's dicts no checkpoint or
        progress bar placed): a marker the chart and scan show with the series."""
        total: Counter[str] = Counter()
        for file in self._files.values():
            total.update(file.inferred)
        return dict(total)

    def wandb_dirs(self) -> tuple[str, ...]:
        """The W&B run directories the consoles name (``wandb: Run data is saved locally in <dir>``),
        as printed: untrusted paths, to be checked before use (SpecForge keeps them in its checkout)."""
        found: list[str] = []
        for path in self._paths:
            found += [d for d in self._files[path].console.wandb_dirs if d not in found]
        return tuple(found)

    def notes(self) -> tuple[str, ...]:
        """One line per file saying what was read of it: formats and where steps came from, the rank
        read, lines skipped or unknown."""
        lines = []
        for path in self._paths:
            file = self._files[path]
            console = file.console
            parts = []
            for trainer, bases in sorted(file.bases.items()):
                counted = ", ".join(f"{count} {basis}" for basis, count in sorted(bases.items()))
                parts.append(f"{TRAINER_NAMES.get(trainer, trainer)} records ({counted})")
            if console.rank is not None:
                parts.append(f"rank {console.rank}'s lines")
            if console.other_rank_lines:
                parts.append(f"{console.other_rank_lines} line(s) of other ranks skipped")
            if console.unknown_lines:
                parts.append(f"{console.unknown_lines} line(s) of no known format ignored")
            if console.cut_short is not None:
                parts.append(console.cut_short)
            if parts:
                lines.append(f"{path.name}: " + "; ".join(parts))
        return tuple(lines)

    def _refresh(self) -> None:
        files = list(self._files.values())  # a file that left keeps its points
        seen = tuple((id(f.scalars), f.scalars.version, f.console.tail.mtime) for f in files)
        if seen == self._seen:
            return
        self._seen = seen
        if len(files) == 1:
            merged = dict(files[0].scalars.series)
        else:
            # The most recently written file over the others (natural order among equals).
            ordered = sorted(files, key=lambda f: (f.console.tail.mtime or 0.0, natural_key(os.fspath(f.console.path))))
            merged = overlay_runs([f.scalars for f in ordered], resume=True)
        self.scalars.series = merged
        self.scalars.version += 1


def _identity(state: TrainerState | None) -> tuple | None:
    return None if state is None else (state.path, state.global_step, state.mtime, len(state.log_history))
