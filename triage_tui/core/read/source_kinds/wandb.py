"""W&B run files (core/read/wandb/) as a kind of scalar source: ``wandb/<key>`` when the run has event
files too (they come from the run's ``wandb/`` directory, as add_scalars series are named by their
sub-directory), so the two writers' points never merge into one series.

Earlier W&B runs in the same directory (another run id: a re-run into the same output directory)
are each read apart under ``wandb/<id>/``: their steps would otherwise be replaced by the newest
run's. Files of one id (a resumed run) are read together, in order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triage_tui.core.read.runs.names import WANDB_DIR_NAME, WANDB_SUFFIX, is_wandb_file_name
from triage_tui.core.read.source_kinds.kind import (
    RunTree,
    ScalarSourceKind,
    merge_scalars,
    renewed_on_rename,
    sum_stats,
)
from triage_tui.core.series import ReadStats, RunScalars

if TYPE_CHECKING:
    from triage_tui.core.read.wandb.history import WandbHistory

WANDB_PREFIX = WANDB_DIR_NAME + "/"


class WandbRuns:
    """A run's W&B files as one source: the newest run id's history under ``prefix``, each earlier
    id's under ``wandb/<id>/``; ``config``, ``config_version`` and ``exit_code`` are the newest's."""

    kind = "wandb"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.newest: WandbHistory | None = None
        self.earlier: dict[str, WandbHistory] = {}
        self.scalars = RunScalars()
        self._seen: tuple = ()

    @property
    def histories(self) -> tuple[WandbHistory, ...]:
        return (*((self.newest,) if self.newest is not None else ()), *self.earlier.values())

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(path for history in self.histories for path in history.files)

    def set_files(self, paths: Sequence[Path]) -> None:
        from triage_tui.core.read.wandb.history import WandbHistory  # imported only for a run that has W&B files

        by_id = wandb_runs(paths)
        newest = by_id.pop(next(reversed(by_id))) if by_id else ()
        if newest and self.newest is None:
            self.newest = WandbHistory(self.prefix)
        elif not newest:
            self.newest = None
        if self.newest is not None:
            self.newest.set_files(newest)
        earlier = {}
        for run_id, files in by_id.items():
            history = self.earlier.get(run_id) or WandbHistory(f"{WANDB_PREFIX}{run_id}/")
            history.set_files(files)
            earlier[run_id] = history
        self.earlier = earlier

    def poll(self) -> ReadStats:
        """Every history polled; the first that failed outright raised again once all were read."""
        stats = ReadStats()
        failure: Exception | None = None
        for history in self.histories:
            try:
                stats = sum_stats(stats, history.poll())
            except Exception as err:  # noqa: BLE001 - raised again below, after the other histories
                failure = failure or err
        self._seen = merge_scalars(self.scalars, [history.scalars for history in self.histories], self._seen)
        if failure is not None:
            raise failure
        return stats

    @property
    def problems(self) -> Mapping[Path, str]:
        return {path: what for history in self.histories for path, what in history.problems.items()}

    @property
    def damaged(self) -> Mapping[Path, int]:
        return {path: count for history in self.histories for path, count in dict(history.damaged).items()}

    @property
    def config(self) -> dict[str, Any] | None:
        return self.newest.config if self.newest is not None else None

    @property
    def config_version(self) -> int:
        return self.newest.config_version if self.newest is not None else 0

    @property
    def exit_code(self) -> int | None:
        return self.newest.exit_code if self.newest is not None else None


def wandb_runs(files: Sequence[Path]) -> dict[str, tuple[Path, ...]]:
    """W&B run files by run id (``run-<id>.wandb``), in the order given (discovery's: oldest run
    directory first), each id's files in that order too: a resumed run keeps its id."""
    runs: dict[str, list[Path]] = {}
    for path in files:
        runs.setdefault(path.name.removeprefix("run-").removesuffix(WANDB_SUFFIX), []).append(path)
    return {run_id: tuple(paths) for run_id, paths in runs.items()}


def _files(run: RunTree) -> tuple[Path, ...]:
    return run.wandb_files


KIND = ScalarSourceKind(
    name="wandb",
    prefix=WANDB_PREFIX,
    claims=is_wandb_file_name,
    reader=renewed_on_rename(WandbRuns),
    files=_files,
    makes_run=False,  # discovery's own rules (a wandb/ directory's runs belong to the directory above)
)
