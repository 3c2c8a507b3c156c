"""A run's scalar sources read together: every kind core/read/source_kinds/registry.py lists (TensorBoard
event files, W&B run files, training consoles, HF Trainer's ``trainer_state.json``, ...).

The watcher, `scan`, `check` and `scalars` read every run through ``RunSources``, so a W&B run is
treated exactly like a TensorBoard run. A run that has several kinds keeps them all: a kind's
series are named under its prefix (``wandb/<key>``, ``console/<name>``, ``trainer_state/<key>``)
when a kind listed before it has files in the run, so two writers' points never merge into one
series; the first kind a run has keeps its names. One exception: a metric a printed record (a
console's, rounded to what it prints) and an exact one (HF Trainer's ``trainer_state.json``, an event
file, a store) both log is one series, the exact values first, the printed series kept as an
alternative (``RunScalars.alternatives``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triage_tui.core.errors import BadInput, SourceError
from triage_tui.core.formats.trainer_state import TrainerState
from triage_tui.core.read.events.reader import RunEvents
from triage_tui.core.read.runs.config import read_config
from triage_tui.core.read.source_kinds import registry
from triage_tui.core.read.source_kinds.kind import ScalarSource, ScalarSourceKind, merge_scalars, sum_stats
from triage_tui.core.read.source_kinds.trainer_state import TrainerStateFile
from triage_tui.core.read.source_kinds.wandb import WandbRuns
from triage_tui.core.read.trackers.stores import StoreRuns
from triage_tui.core.series import ReadStats, RunScalars, ScalarSeries, overlay

if TYPE_CHECKING:
    from triage_tui.core.read.console.reader import ConsoleLogs

# How deep in a W&B config (trainer arguments, often nested) to look for the draft vocab size.
CONFIG_SEARCH_DEPTH = 3


class RunSources:
    """Incremental reader of all of one run's scalar sources; ``scalars`` is one live, stable view."""

    def __init__(self) -> None:
        self.readers: dict[str, ScalarSource] = {}  # by kind, the registry's order: those with files
        self._kinds: tuple[ScalarSourceKind, ...] = ()  # the kinds of ``readers``, in reading order
        self.scalars = RunScalars()  # the union of the sources' series, refreshed by poll()
        self._seen: tuple = ()
        # Why the last poll of a whole source failed, by kind: a reader raised (a bug: readers say
        # what they cannot read in ``problems``). It stays on this run; the other sources are read.
        self.failures: dict[str, SourceError] = {}

    @property
    def sources(self) -> tuple[ScalarSource, ...]:
        """The run's sources, in the registry's order."""
        return tuple(self.readers.values())

    def set_files(self, scalar_files: Iterable[tuple[str, Sequence[Path]]], store_run: str | None = None) -> None:
        """The run's files by kind (``RunInfo.scalar_files``). A kind's reader is kept while its
        prefix stays; a run that gains or loses a kind listed before another re-reads that one under
        its new names (or renames it, where its kind says how). ``store_run`` (``RunInfo.store_run``):
        the key of the one run of a tracker's store to read, None for every run it holds."""
        files = {name: tuple(paths) for name, paths in scalar_files if paths}
        readers: dict[str, ScalarSource] = {}
        kinds = []
        for kind in registry.SCALAR_SOURCES:
            if kind.name not in files:
                continue
            reader = kind.reader(kind.prefix if readers else "", self.readers.get(kind.name))
            if isinstance(reader, StoreRuns):
                reader.select(store_run)
            reader.set_files(files[kind.name])
            readers[kind.name] = reader
            kinds.append(kind)
        self.readers = readers
        # Read a kind another uses first: it is handed that one's reader as just polled.
        self._kinds = tuple(sorted(kinds, key=lambda kind: kind.uses is not None))

    def _reader(self, name: str, cls: type) -> Any:
        reader = self.readers.get(name)
        return reader if isinstance(reader, cls) else None

    @property
    def events(self) -> RunEvents | None:
        """The run's event-file reader, when it has event files."""
        return self._reader("tensorboard", RunEvents)

    @events.setter
    def events(self, reader: RunEvents) -> None:
        if "tensorboard" in self.readers:
            self.readers["tensorboard"] = reader  # the same files, read in a helper process

    @property
    def wandb(self) -> WandbRuns | None:
        """The run's W&B runs, when it has W&B files."""
        return self._reader("wandb", WandbRuns)

    @property
    def console(self) -> ConsoleLogs | None:
        """The run's console reader, when it has a console."""
        if "console" not in self.readers:
            return None  # its reader's modules are imported only for a run that has a console
        from triage_tui.core.read.console.reader import ConsoleLogs

        return self._reader("console", ConsoleLogs)

    @property
    def trainer_state(self) -> TrainerState | None:
        """The newest checkpoint's trainer state as last read whole, when the run has one."""
        reader = self._reader("trainer_state", TrainerStateFile)
        return reader.state if reader is not None else None

    @property
    def config(self) -> dict[str, Any] | None:
        """The W&B run's config (wandb.config), when the run has W&B files."""
        wandb = self.wandb
        return wandb.config if wandb is not None else None

    @property
    def problems(self) -> dict[Path, str]:
        """Files that could not be read, and why, from every source."""
        return {path: what for source in self.sources for path, what in source.problems.items()}

    @property
    def errors(self) -> tuple[SourceError, ...]:
        """What could not be read, as of the last poll: each failed source, then each file."""
        files = tuple(
            SourceError(name, str(path), what)
            for name, source in self.readers.items()
            for path, what in source.problems.items()
        )
        return tuple(self.failures.values()) + files

    @property
    def damaged(self) -> dict[Path, int]:
        """Damaged records skipped so far, per file, from every source."""
        # dict(...) first: the reader's thread may add to them
        return {path: count for source in self.sources for path, count in dict(source.damaged).items()}

    @property
    def notes(self) -> tuple[str, ...]:
        """What was read of each file, as of the last poll, where a reader says it (the consoles:
        formats and where steps came from, the rank read, lines skipped), one line each. Raw text:
        file names and counts from the run's files, made printable where shown."""
        console = self.console
        return console.notes() if console is not None else ()

    def poll(self) -> ReadStats:
        """Read what was appended to every source's files since the last poll; refresh ``scalars``.
        Each source fails alone: its failure is kept in ``failures``, the others are read."""
        stats = ReadStats()
        self.failures = {}
        for kind in self._kinds:
            source = self.readers[kind.name]
            if kind.prepare is not None:
                kind.prepare(source, self.readers.get(kind.uses) if kind.uses is not None else None)
            try:
                polled = source.poll()
            except BadInput as err:
                self.failures.setdefault(kind.name, SourceError.of(kind.name, err))
            except Exception as err:  # noqa: BLE001 - the fault boundary: a reader's failure is this run's error
                where = str(source.files[0].parent) if source.files else ""
                what = f"cannot read its scalars: {type(err).__name__}: {err}"
                self.failures.setdefault(kind.name, SourceError(kind.name, where, what))
            else:
                stats = sum_stats(stats, polled)
        parts = [source.scalars for source in self.sources]
        self._seen = merge_scalars(self.scalars, parts, self._seen, self._exact_over_printed)
        return stats

    def _exact_over_printed(self, merged: dict[str, ScalarSeries]) -> dict[str, str]:
        """Each metric a printed record (a kind that says it is ``printed``: HF Trainer's console,
        values to 4 significant digits) and an exact one (any other: ``trainer_state.json``, event
        files, a store) both log under one name, as one series: the first exact record's values over
        its steps, the printed one's after them (logged since the exact one was last written: HF
        Trainer saves its history at checkpoints) and before; the printed series kept as an
        alternative named under its kind's prefix (``console/loss``). The series is named as the
        printed record names it when that one leads the run (``loss``), else as the exact one does.
        Returns the alternatives (alternative name -> the name shown)."""
        alternatives: dict[str, str] = {}
        kinds = {kind.name: kind for kind in self._kinds}
        exact_readers = [reader for name, reader in self.readers.items() if not kinds[name].printed]
        for name, printed_reader in self.readers.items():  # the registry's order
            if not kinds[name].printed:
                continue
            for exact_reader in exact_readers:
                for tag, exact in list(exact_reader.scalars.series.items()):
                    key = tag.removeprefix(exact_reader.prefix)
                    printed_tag = printed_reader.prefix + key
                    printed = printed_reader.scalars.series.get(printed_tag)
                    alternative = kinds[name].prefix + key
                    if printed is None or not len(exact) or alternative in alternatives:
                        continue  # the first exact record of a name is the one shown
                    shown = printed_tag if printed_tag != alternative else tag
                    merged.pop(tag, None)
                    merged[shown] = overlay(printed, exact, tag=shown)
                    merged[alternative] = overlay(ScalarSeries(alternative), printed, tag=alternative)  # a copy
                    alternatives[alternative] = shown
        return alternatives


def draft_vocab_from_config(config: dict[str, Any] | None) -> int | None:
    """The draft vocab size a W&B run's config names, or None.

    Only ``draft_vocab_size`` (at any level up to CONFIG_SEARCH_DEPTH: trainers log their nested
    arguments), or the config file a ``draft_model_config`` path names (SpecForge's argument), read
    like config.json. A bare ``vocab_size`` is not taken: in a trainer's config it is often the
    target model's (HF Trainer logs the model config), which would put the chance line too high.
    """
    if not config:
        return None
    found = _find_key(config, "draft_vocab_size", CONFIG_SEARCH_DEPTH)
    if isinstance(found, int) and not isinstance(found, bool) and found >= 2:
        return found
    path = _find_key(config, "draft_model_config", CONFIG_SEARCH_DEPTH)
    # Only a regular file: the path comes from the run's records (a FIFO would hang the poll).
    if isinstance(path, str) and path.endswith(".json") and Path(path).is_file():
        drafter = read_config(Path(path))
        if drafter:
            for key in ("draft_vocab_size", "vocab_size"):
                value = drafter.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 2:
                    return value
    return None


def _find_key(config: dict, key: str, depth: int) -> Any:
    if key in config:
        return config[key]
    if depth <= 1:
        return None
    for value in config.values():
        if isinstance(value, dict):
            found = _find_key(value, key, depth - 1)
            if found is not None:
                return found
    return None
