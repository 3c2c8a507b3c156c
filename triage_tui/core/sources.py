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
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triage_tui.core.errors import BadInput, SourceError
from triage_tui.core.events.event_file import ReadStats
from triage_tui.core.events.reader import RunEvents
from triage_tui.core.formats.trainer_state import TrainerState, read_trainer_state
from triage_tui.core.runs.config import read_config
from triage_tui.core.runs.names import WANDB_DIR_NAME, WANDB_SUFFIX, is_console_log_name, is_wandb_file_name
from triage_tui.core.series import RunScalars

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


class RunSources:
    """Incremental reader of all of one run's scalar files; ``scalars`` is one live, stable view."""

    def __init__(self) -> None:
        self.events = RunEvents()
        self.wandb: WandbHistory | None = None  # once the run has W&B files (imported only then)
        # Earlier W&B runs in the same directory (another run id: a re-run into the same output
        # directory), each read apart under wandb/<id>/: their steps would otherwise be replaced by
        # the newest run's. Files of one id (a resumed run) are read together, in order.
        self.earlier_wandb: dict[str, WandbHistory] = {}
        self.console: ConsoleLogs | None = None  # once the run has a training console
        self._console_files: tuple[Path, ...] = ()
        self.scalars = RunScalars()  # the union of the sources' series, refreshed by poll()
        self._event_files: tuple[Path, ...] = ()
        self._wandb_files: tuple[Path, ...] = ()
        # The newest checkpoint's trainer_state.json: the state last read whole, its series, the
        # (path, mtime, size) it was read at, and why that version could not be read (kept until the
        # file changes: it is read once per version).
        self.trainer_state: TrainerState | None = None
        self._state_path: Path | None = None
        self._state_prefix = ""
        self._state_key: tuple[Path, int, int] | None = None
        self._state_failure: SourceError | None = None
        self._state_scalars = RunScalars()
        self._seen: tuple = ()
        # Why the last poll of a whole source failed ("tensorboard", "wandb"): a reader's bug or a
        # file it could not cope with stays on this run, and the other source is still read.
        self.failures: dict[str, SourceError] = {}

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
        self._event_files, self._wandb_files = event_files, wandb_files
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
        self._console_files = files

    def _set_trainer_state(self, path: Path | None, prefix: str) -> None:
        if path is None:
            self.trainer_state, self._state_key, self._state_failure = None, None, None
            self._state_scalars = RunScalars()
        elif prefix != self._state_prefix and self.trainer_state is not None:
            self._state_scalars = self.trainer_state.scalars(prefix)  # renamed; the file is not read again
        self._state_path, self._state_prefix = path, prefix

    @property
    def config(self) -> dict[str, Any] | None:
        """The W&B run's config (wandb.config), when the run has W&B files."""
        return self.wandb.config if self.wandb is not None else None

    @property
    def problems(self) -> dict[Path, str]:
        """Files that could not be read, and why (event files and W&B files alike)."""
        return {
            **self.events.problems,
            **(self.wandb.problems if self.wandb is not None else {}),
            **{path: what for history in self.earlier_wandb.values() for path, what in history.problems.items()},
            **(self.console.problems() if self.console is not None else {}),
        }

    @property
    def errors(self) -> tuple[SourceError, ...]:
        """What could not be read, as of the last poll: each failed source, then each file."""
        files = tuple(SourceError(source_of_file(path), str(path), what) for path, what in self.problems.items())
        return tuple(self.failures.values()) + files

    @property
    def damaged(self) -> dict[Path, int]:
        """Damaged records skipped so far, per file, in event files and W&B files alike."""
        damaged = dict(self.events.damaged)  # the reader's thread may add to them
        for history in (self.wandb, *self.earlier_wandb.values()):
            if history is not None:
                damaged.update(history.damaged)
        if self.console is not None:
            damaged.update(self.console.damaged)
        return damaged

    def poll(self, *, split_files: bool = False) -> ReadStats:
        """Read what was appended to every file since the last poll; refresh ``scalars``.

        ``split_files``: as RunEvents.poll (a one-thread process reading once: ``triage scalars``)."""
        stats = ReadStats()
        self.failures = {}
        if self._event_files:
            poll_events = lambda: self.events.poll(split_files=split_files)  # noqa: E731
            stats = self._poll_source("tensorboard", self._event_files, poll_events, stats)
        if self.wandb is not None:
            stats = self._poll_source("wandb", self._wandb_files, self._poll_wandb, stats)
        if self._state_path is not None:
            state_files = (self._state_path,)
            stats = self._poll_source("trainer_state", state_files, self._poll_trainer_state, stats)
        if self.console is not None:
            self.console.set_trainer_state(self.trainer_state)  # HF console dicts at their logged steps
            stats = self._poll_source("console", self._console_files, self._poll_console, stats)
        self._refresh()
        return stats

    def _poll_trainer_state(self) -> ReadStats:
        """Read the newest trainer_state.json whole when it is new or changed; its last readable
        version's points stay while a newer one cannot be read (a half-written save, a bad file)."""
        path = self._state_path
        assert path is not None
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return ReadStats()  # rotated away (save_total_limit) since discovery: the next rescan names the newest
        except OSError as err:
            raise BadInput(path, f"cannot read it: {err.strerror or err}") from None
        key = (path, stat.st_mtime_ns, stat.st_size)
        stats = ReadStats()
        if key != self._state_key:
            self._state_key, self._state_failure = key, None
            try:
                state = read_trainer_state(path)
            except BadInput as err:
                self._state_failure = SourceError.of("trainer_state", err)
            except Exception as err:  # noqa: BLE001 - the fault boundary: a reader's failure is this run's error
                what = f"cannot read its scalars: {type(err).__name__}: {err}"
                self._state_failure = SourceError("trainer_state", str(path), what)
            else:
                self.trainer_state = state
                self._state_scalars = state.scalars(self._state_prefix)
                stats = ReadStats(files=1, bytes_read=stat.st_size, records=len(state.log_history))
        if self._state_failure is not None:
            self.failures["trainer_state"] = self._state_failure
        return stats

    def _poll_console(self) -> ReadStats:
        assert self.console is not None
        polled = self.console.poll()
        return ReadStats(files=polled.files, records=polled.records, bytes_read=polled.bytes_read)

    def _poll_source(
        self, kind: str, files: tuple[Path, ...], poll: Callable[[], ReadStats], stats: ReadStats
    ) -> ReadStats:
        try:
            return _sum_stats(stats, poll())
        except BadInput as err:
            self.failures[kind] = SourceError.of(kind, err)
        except Exception as err:  # noqa: BLE001 - the fault boundary: a reader's failure is this run's error
            where = str(files[0].parent) if files else ""
            self.failures[kind] = SourceError(kind, where, f"cannot read its scalars: {type(err).__name__}: {err}")
        return stats

    def _poll_wandb(self) -> ReadStats:
        assert self.wandb is not None
        stats = self.wandb.poll()
        for history in self.earlier_wandb.values():
            stats = _sum_stats(stats, history.poll())
        return stats

    def _refresh(self) -> None:
        sources = (self.wandb, *self.earlier_wandb.values(), self.console)
        parts = [self.events.scalars] + [s.scalars for s in sources if s is not None]
        parts.append(self._state_scalars)
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
