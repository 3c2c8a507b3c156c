"""A run's scalar sources read together: TensorBoard event files, W&B run files, training consoles
and HF Trainer's ``trainer_state.json``.

The watcher, `scan`, `check` and `scalars` read every run through ``RunSources``, so a W&B run is
treated exactly like a TensorBoard run. A run that has both keeps both: the W&B series are named
``wandb/<key>`` (they come from the run's ``wandb/`` directory, as add_scalars series are named
by their sub-directory), so the two writers' points never merge into one series. A run's training
console (core/console/) is read beside them; its series are named ``console/<name>`` when the run
has event or W&B files too (the console prints what they hold), as printed otherwise.

HF Trainer (every trainer on it, ModelOpt's included) saves its whole logged history in each
``checkpoint-<N>/trainer_state.json``, whatever trackers it reports to. The newest one discovery
found is read when it appears or changes (a new newest file, or a new mtime or size of it), on the
caller's thread (the watcher's, never the UI's). Its series are named ``trainer_state/<key>`` when
the run has any other source (which logged the same values live), by the trainer's keys otherwise
(``report_to="none"``); a console of the run is given it, so HF console dicts get their logged steps.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from triage_tui.core.errors import BadInput, SourceError
from triage_tui.core.events.reader import RunEvents
from triage_tui.core.formats.trainer_state import TrainerState, read_trainer_state
from triage_tui.core.runs.config import read_config
from triage_tui.core.runs.names import WANDB_DIR_NAME, WANDB_SUFFIX, is_console_log_name, is_wandb_file_name
from triage_tui.core.series import ReadStats, RunScalars

if TYPE_CHECKING:
    from triage_tui.core.console.reader import ConsoleLogs
    from triage_tui.core.wandb.history import WandbHistory

WANDB_PREFIX = WANDB_DIR_NAME + "/"
CONSOLE_PREFIX = "console/"
TRAINER_STATE_PREFIX = "trainer_state/"
# How deep in a W&B config (trainer arguments, often nested) to look for the draft vocab size.
CONFIG_SEARCH_DEPTH = 3


def _sum_stats(a: ReadStats, b: ReadStats) -> ReadStats:
    return ReadStats(**{f.name: getattr(a, f.name) + getattr(b, f.name) for f in fields(ReadStats)})


class ScalarSource(Protocol):
    """One kind of a run's scalar files, read incrementally: what ``RunSources`` needs of a reader.

    ``poll`` reads what was appended since the last poll into ``scalars`` (one live, stable view:
    a series is extended in place, never replaced by a copy); ``problems`` names each file the last
    poll could not read, and why; ``damaged`` counts the records dropped from each file so far.
    ``kind`` is what ``SourceError.source`` calls the source. A reader that fails outright raises:
    ``RunSources`` turns it into an error of the run (the fault boundary), never of another run.
    The event-file reader (core.events.reader.RunEvents), the W&B reader (core.wandb.history.WandbHistory),
    the console reader (core.console.reader.ConsoleLogs) and ``TrainerStateFile`` are the four.
    """

    @property
    def kind(self) -> str: ...
    @property
    def files(self) -> tuple[Path, ...]: ...
    @property
    def scalars(self) -> RunScalars: ...
    @property
    def problems(self) -> Mapping[Path, str]: ...
    @property
    def damaged(self) -> Mapping[Path, int]: ...
    def poll(self) -> ReadStats: ...


class TrainerStateFile:
    """The newest checkpoint's ``trainer_state.json`` as a scalar source: read whole when it is new
    or changed (a new newest file, or a new mtime or size of it); its last readable version's
    points stay while a newer one cannot be read. HF Trainer rewrites the file in place
    (``TrainerState.save_to_json``: ``open(path, "w")`` then one write), so a read that races the
    save sees a cut document: one that fails while the file changed under the read is read again
    at the next poll, not said."""

    kind = "trainer_state"

    def __init__(self, path: Path, prefix: str) -> None:
        self.path, self.prefix = path, prefix
        self.state: TrainerState | None = None
        self.scalars = RunScalars()
        self.problems: dict[Path, str] = {}
        self.damaged: dict[Path, int] = {}
        self._key: tuple[Path, int, int] | None = None
        self._failure: str | None = None  # why the version at _key could not be read

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.path,)

    def rename(self, prefix: str) -> None:
        """Its series under another prefix (the run gained or lost a source); the file is not read again."""
        if prefix != self.prefix:
            self.prefix = prefix
            self.scalars = self.state.scalars(prefix) if self.state is not None else RunScalars()

    def poll(self) -> ReadStats:
        path = self.path
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return ReadStats()  # rotated away (save_total_limit) since discovery: the next rescan names the newest
        except OSError as err:
            raise BadInput(path, f"cannot read it: {err.strerror or err}") from None
        key = (path, stat.st_mtime_ns, stat.st_size)
        stats = ReadStats()
        if key != self._key:
            self._key, self._failure = key, None
            try:
                state = read_trainer_state(path)
            except BadInput as err:
                if _stat_key(path) != key:
                    self._key = None  # written while it was read: a save in progress, read again next poll
                else:
                    self._failure = err.what
            except Exception as err:  # noqa: BLE001 - a reader's bug: said of this file until it changes
                self._failure = f"cannot read its scalars: {type(err).__name__}: {err}"
            else:
                self.state = state
                self.scalars = state.scalars(self.prefix)
                stats = ReadStats(files=1, bytes_read=stat.st_size, records=len(state.log_history))
        if self._failure is not None:
            raise BadInput(path, self._failure)
        return stats


def _stat_key(path: Path) -> tuple[Path, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return path, stat.st_mtime_ns, stat.st_size


class RunSources:
    """Incremental reader of all of one run's scalar sources; ``scalars`` is one live, stable view."""

    def __init__(self) -> None:
        self.events = RunEvents()
        self.wandb: WandbHistory | None = None  # once the run has W&B files (imported only then)
        # Earlier W&B runs in the same directory (another run id: a re-run into the same output
        # directory), each read apart under wandb/<id>/: their steps would otherwise be replaced by
        # the newest run's. Files of one id (a resumed run) are read together, in order.
        self.earlier_wandb: dict[str, WandbHistory] = {}
        self.console: ConsoleLogs | None = None  # once the run has a training console
        self.trainer_state_file: TrainerStateFile | None = None
        self.scalars = RunScalars()  # the union of the sources' series, refreshed by poll()
        self._seen: tuple = ()
        # Why the last poll of a whole source failed, by kind: a reader's bug or a file it could
        # not cope with stays on this run, and the other sources are still read.
        self.failures: dict[str, SourceError] = {}

    @property
    def sources(self) -> tuple[ScalarSource, ...]:
        """The run's sources in reading order: the trainer state before the console (HF console
        dicts take their steps from it), and, merged into ``scalars``, a later one's series over
        an earlier one's of the same name (none share a name but through a prefix-less source)."""
        found: list[ScalarSource | None] = [
            self.events if self.events.files else None,
            self.wandb,
            *self.earlier_wandb.values(),
            self.trainer_state_file,
            self.console,
        ]
        return tuple(source for source in found if source is not None)

    @property
    def trainer_state(self) -> TrainerState | None:
        """The newest checkpoint's trainer state as last read whole, when the run has one."""
        return self.trainer_state_file.state if self.trainer_state_file is not None else None

    def set_files(
        self,
        event_files: Sequence[Path],
        wandb_files: Sequence[Path] = (),
        console_files: Sequence[Path] = (),
        trainer_state: Path | None = None,
    ) -> None:
        """The run's files (``trainer_state``: its newest checkpoint's trainer_state.json). A run that
        gains or loses a source re-reads its W&B files and its console under their new names, and
        renames its trainer_state series."""
        event_files, wandb_files = tuple(event_files), tuple(wandb_files)
        prefix = WANDB_PREFIX if event_files and wandb_files else ""
        by_id = wandb_runs(wandb_files)
        newest = by_id.pop(next(reversed(by_id))) if by_id else ()
        if newest and (self.wandb is None or self.wandb.prefix != prefix):
            from triage_tui.core.wandb.history import WandbHistory

            self.wandb = WandbHistory(prefix)
        elif not newest:
            self.wandb = None
        if self.wandb is not None:
            self.wandb.set_files(newest)
        earlier = {}
        for run_id, files in by_id.items():
            history = self.earlier_wandb.get(run_id)
            if history is None:
                from triage_tui.core.wandb.history import WandbHistory

                history = WandbHistory(f"{WANDB_PREFIX}{run_id}/")
            history.set_files(files)
            earlier[run_id] = history
        self.earlier_wandb = earlier
        self.events.set_files(event_files)
        console_files = tuple(console_files)
        self._set_console(console_files, CONSOLE_PREFIX if event_files or wandb_files else "")
        self._set_trainer_state(
            trainer_state, TRAINER_STATE_PREFIX if event_files or wandb_files or console_files else ""
        )

    def _set_console(self, files: tuple[Path, ...], prefix: str) -> None:
        if files and (self.console is None or self.console.prefix != prefix):
            from triage_tui.core.console.reader import ConsoleLogs

            self.console = ConsoleLogs(prefix)
        elif not files:
            self.console = None
        if self.console is not None:
            self.console.set_files(files)

    def _set_trainer_state(self, path: Path | None, prefix: str) -> None:
        current = self.trainer_state_file
        if path is None:
            self.trainer_state_file = None
        elif current is None:
            self.trainer_state_file = TrainerStateFile(path, prefix)
        else:
            current.path = path  # a newer checkpoint's: read when its key differs
            current.rename(prefix)

    @property
    def config(self) -> dict[str, Any] | None:
        """The W&B run's config (wandb.config), when the run has W&B files."""
        return self.wandb.config if self.wandb is not None else None

    @property
    def problems(self) -> dict[Path, str]:
        """Files that could not be read, and why, from every source."""
        return {path: what for source in self.sources for path, what in source.problems.items()}

    @property
    def errors(self) -> tuple[SourceError, ...]:
        """What could not be read, as of the last poll: each failed source, then each file."""
        files = tuple(SourceError(source_of_file(path), str(path), what) for path, what in self.problems.items())
        return tuple(self.failures.values()) + files

    @property
    def damaged(self) -> dict[Path, int]:
        """Damaged records skipped so far, per file, from every source."""
        # dict(...) first: the reader's thread may add to them
        return {path: count for source in self.sources for path, count in dict(source.damaged).items()}

    def poll(self) -> ReadStats:
        """Read what was appended to every source's files since the last poll; refresh ``scalars``.
        Each source fails alone: its failure is kept in ``failures``, the others are read."""
        stats = ReadStats()
        self.failures = {}
        for source in self.sources:
            if source is self.console:
                self.console.set_trainer_state(self.trainer_state)  # HF console dicts at their logged steps
            try:
                polled = source.poll()
            except BadInput as err:
                self.failures.setdefault(source.kind, SourceError.of(source.kind, err))
            except Exception as err:  # noqa: BLE001 - the fault boundary: a reader's failure is this run's error
                where = str(source.files[0].parent) if source.files else ""
                what = f"cannot read its scalars: {type(err).__name__}: {err}"
                self.failures.setdefault(source.kind, SourceError(source.kind, where, what))
            else:
                stats = _sum_stats(stats, polled)
        self._refresh()
        return stats

    def _refresh(self) -> None:
        parts = [source.scalars for source in self.sources]
        seen = tuple((id(p), id(p.series), p.version) for p in parts)
        if seen == self._seen:
            return
        self._seen = seen
        merged: dict = {}
        for part in parts:
            merged.update(part.series)
        self.scalars.series = merged
        self.scalars.purges = [step for part in parts for step in part.purges]  # resumes (core.curve_shapes)
        self.scalars.version += 1


def wandb_runs(files: Sequence[Path]) -> dict[str, tuple[Path, ...]]:
    """W&B run files by run id (``run-<id>.wandb``), in the order given (discovery's: oldest run
    directory first), each id's files in that order too: a resumed run keeps its id."""
    runs: dict[str, list[Path]] = {}
    for path in files:
        runs.setdefault(path.name.removeprefix("run-").removesuffix(WANDB_SUFFIX), []).append(path)
    return {run_id: tuple(paths) for run_id, paths in runs.items()}


def source_of_file(path: Path) -> str:
    """The kind of scalar source a file belongs to, as ``SourceError.source`` names it."""
    if is_wandb_file_name(path.name):
        return "wandb"
    return "console" if is_console_log_name(path.name) else "tensorboard"


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
