"""What discovery reports about one run: ``RunInfo`` and the ``RunArtifacts`` found beside it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from triage_tui.core.read.runs.manifest import Manifest


@dataclass(frozen=True)
class RunArtifacts:
    """What discovery found on disk in a run directory (by name; nothing opened)."""

    config_json: Path | None = None
    checkpoints: tuple[Path, ...] = ()  # dirs holding weights or a training_state.pt, oldest first (natural order)
    mappings: tuple[Path, ...] = ()
    dumps: Path | None = None
    training_state: Path | None = None
    target: Path | None = None
    run_yaml: Path | None = None  # speculators: the args it ran with, in --save-path (formats/run_yaml.py)
    # HF Trainer (and every trainer on it): the newest checkpoint-<N>/trainer_state.json, by N
    # (formats/trainer_state.py): its log_history is a scalar source of the run.
    trainer_state: Path | None = None
    # SpecForge: <run_id>.best_meta.json in the output directory, the step its CheckpointManager
    # chose as best (formats/specforge_output.py); of several run ids, the newest checkpoint's.
    best_meta: Path | None = None


@dataclass(frozen=True)
class RunInfo:
    """One run: its directory, the event files that belong to it, its manifest and artifacts.

    ``manifest_error`` is set, and ``manifest`` is None, when discovery ran with
    ``strict=False`` and the run's triage.toml was malformed (the watcher keeps going).

    ``store_run``: the run's key in its tracker's store (an MLflow run id; a trackio project and
    run) where the run is one of the runs a store holds (core/read/runs/tracker_runs.py), else None.
    Such a run's ``path``, its identity, is the store's path joined with one segment for the run
    (``<dir>/mlflow.db/<run id>``, ``<dir>/<project>.db/<run>``): no directory, so ``directory``
    says where its files are; an MLflow file store's run keeps its own directory.
    """

    path: Path
    name: str
    event_files: tuple[Path, ...]
    manifest: Manifest | None
    artifacts: RunArtifacts
    manifest_error: str | None = None
    wandb_files: tuple[Path, ...] = ()  # W&B run files (run-<id>.wandb), natural order
    console_files: tuple[Path, ...] = ()  # training consoles (core/read/console/): named, then found
    # The run's files of each kind of scalar source that has any, in the order of
    # core/read/source_kinds/registry.py (discovery asks each kind): what the run's readers are given.
    scalar_files: tuple[tuple[str, tuple[Path, ...]], ...] = ()
    store_run: str | None = None

    @property
    def directory(self) -> Path:
        """The directory the run's files are in: its path, or for a store's run its store's directory."""
        if self.store_run is not None:
            for store in (path for _, files in self.scalar_files for path in files if path in self.path.parents):
                return store.parent
        return self.path

    @property
    def sources(self) -> tuple[str, ...]:
        """Which kinds of scalar source the run has files of: "tensorboard", "wandb", "console",
        "trainer_state", ... (docs/contracts.md, scan --json)."""
        return tuple(name for name, _ in self.scalar_files)

    def scalar_file_set(self) -> set[Path]:
        """Every scalar file of the run, as one set (a run that moved is known by them)."""
        return {path for _, files in self.scalar_files for path in files}
