"""What a kind of scalar source declares once (``ScalarSourceKind``) and what its reader is (``ScalarSource``).

A kind is one module of this package holding one ``KIND``, listed once in ``registry.SCALAR_SOURCES``:
discovery takes a run's files of each kind through it (``files``), ``RunSources`` builds its reader
(``reader``), the watcher wakes for the names it claims, and ``scan --json``'s ``sources`` names it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Protocol

from triage_tui.core.series import ReadStats, RunScalars, ScalarSeries


class ScalarSource(Protocol):
    """One kind of a run's scalar files, read incrementally: what ``RunSources`` needs of a reader.

    ``set_files`` gives it the run's files of its kind (again at each rescan that changed them);
    ``poll`` reads what was appended since the last poll into ``scalars`` (one live, stable view:
    a series is extended in place, never replaced by a copy); ``problems`` names each file the last
    poll could not read, and why; ``damaged`` counts the records dropped from each file so far.
    ``kind`` is what ``SourceError.source`` calls the source, ``prefix`` what its series' names
    begin with. The one failure convention, a serving source's too (core/watch/serving/source.py): a
    reader never raises for what it reads, it says what it could not read as values (here
    ``problems``); an exception is a bug, which ``RunSources`` (the fault boundary) turns into an
    error of this source of this run, never of another source or run.
    """

    @property
    def kind(self) -> str: ...
    @property
    def prefix(self) -> str: ...
    @property
    def files(self) -> tuple[Path, ...]: ...
    @property
    def scalars(self) -> RunScalars: ...
    @property
    def problems(self) -> Mapping[Path, str]: ...
    @property
    def damaged(self) -> Mapping[Path, int]: ...
    def set_files(self, paths: Sequence[Path]) -> None: ...
    def poll(self) -> ReadStats: ...


@dataclass(frozen=True)
class RunTree:
    """What discovery found of one run, for each kind to take its files from.

    ``dirs``: every directory of the run (its own first, then below it in walk order, a directory
    that is a run of its own left out) with its file names; nothing was opened. The four kinds
    discovery's rules (docs/contracts.md "What a run is") place get what those rules found:
    ``event_files`` (non-empty), ``wandb_files``, ``console_files`` (the run's own directory and
    those its triage.toml names, less its serving logs) and ``trainer_state`` (the newest
    ``checkpoint-<N>/trainer_state.json``). ``subdirs``: the names of the directories in the run's own."""

    path: Path
    dirs: tuple[tuple[str, tuple[str, ...]], ...]
    event_files: tuple[Path, ...] = ()
    wandb_files: tuple[Path, ...] = ()
    console_files: tuple[Path, ...] = ()
    trainer_state: Path | None = None
    subdirs: tuple[str, ...] = ()

    def claimed(self, claims: Callable[[str], bool]) -> tuple[Path, ...]:
        """The files of every directory of the run whose names ``claims`` accepts, in walk order."""
        return tuple(Path(directory, name) for directory, names in self.dirs for name in names if claims(name))


@dataclass(frozen=True)
class ScalarSourceKind:
    """One kind of scalar source, declared once.

    ``name``: what ``scan --json``'s ``sources`` and its errors' ``source`` call it. ``prefix``: the
    start of its series' names when a kind listed before it in ``SCALAR_SOURCES`` has files in the
    run too (its series never merge into theirs), nothing otherwise. ``claims``: whether a file name
    is of this kind (by name alone). ``files``: the run's files of this kind (default: every file
    of the run it claims). ``reader``: the reader for ``prefix``, given the one the run had (None
    at first): kept when it fits, else a new one; it is then given its files. ``makes_run``: a
    directory holding a file it claims is a run (the kinds discovery's own rules place say False).
    ``wakes``: a change to a file it claims wakes the watcher at once (else the next poll reads it).
    ``uses``/``prepare``: the kind whose reader this one is handed before each poll, read first.
    ``printed``: its values are text a trainer printed, rounded to what it prints (a console's): a
    name a kind that records values as logged also holds is shown from that one, this one's series
    kept as its alternative (core/read/sources.py).
    """

    name: str
    prefix: str
    claims: Callable[[str], bool]
    reader: Callable[[str, ScalarSource | None], ScalarSource]
    files: Callable[[RunTree], tuple[Path, ...]] | None = None
    makes_run: bool = True
    wakes: bool = True
    uses: str | None = None
    prepare: Callable[[ScalarSource, ScalarSource | None], None] | None = None
    printed: bool = False

    def files_in(self, run: RunTree) -> tuple[Path, ...]:
        return self.files(run) if self.files is not None else run.claimed(self.claims)


def renewed_on_rename(make: Callable[[str], ScalarSource]) -> Callable[[str, ScalarSource | None], ScalarSource]:
    """The common ``reader``: the run's reader kept while its prefix stays, a new one (reading its
    files again under the new names) when the run gained or lost a source listed before it."""

    def reader(prefix: str, current: ScalarSource | None) -> ScalarSource:
        return current if current is not None and current.prefix == prefix else make(prefix)

    return reader


def sum_stats(a: ReadStats, b: ReadStats) -> ReadStats:
    """Two sources' polls as one: every count added up."""
    return ReadStats(**{f.name: getattr(a, f.name) + getattr(b, f.name) for f in fields(ReadStats)})


def merge_scalars(
    into: RunScalars,
    parts: Sequence[RunScalars],
    seen: tuple,
    one_record: Callable[[dict[str, ScalarSeries]], dict[str, str]] | None = None,
) -> tuple:
    """``into`` made the union of ``parts``' series (a later part's over an earlier one's of the same
    name) and their resumes, its version bumped, unless ``seen`` (what the last merge returned) says
    none of them changed since. ``one_record``: given the union, makes each metric two sources
    record one series and returns the alternatives it kept (``RunScalars.alternatives``). Returns
    what to pass as ``seen`` next time."""
    now = tuple((id(part), id(part.series), part.version) for part in parts)
    if now == seen:
        return seen
    merged: dict = {}
    for part in parts:
        merged.update(part.series)
    into.alternatives = one_record(merged) if one_record is not None else {}
    into.series = merged
    into.purges = [step for part in parts for step in part.purges]  # resumes (core.watch.curve_shapes)
    into.version += 1
    return now
