"""The files a run's settings come from, each read again only when it changed (core.changed_file): its
config.json, the config.json of the drafter its triage.toml names (a fine-tune keeps its starting
drafter's head), its newest training_state.pt (SpecForge 0.2.0 writes no config.json), and SpecForge's
best_meta.json (replaced, atomically, each time an evaluation beats the best)."""

from __future__ import annotations

from pathlib import Path

from triage_tui.core.changed_file import ChangedFile
from triage_tui.core.errors import BadInput, SourceError
from triage_tui.core.formats.specforge_output import BestMeta, read_best_meta
from triage_tui.core.read.runs.config import read_config
from triage_tui.core.read.runs.info import RunInfo
from triage_tui.core.read.runs.manifest import Manifest
from triage_tui.core.watch.signals.chance import config_vocab_problems, named_drafter_config, named_drafter_config_path

Config = tuple[dict | None, tuple[SourceError, ...]]  # the document, and why it (or its vocab size) is not used


class SettingFiles:
    """One run's setting files and what each said at its last read."""

    def __init__(self) -> None:
        self._manifest: Manifest | None = None
        self.config: ChangedFile[Config] = ChangedFile(_read_config, (None, ()))
        self.drafter: ChangedFile[Config] = ChangedFile(self._read_drafter_config, (None, ()))
        # The draft vocab of the newest training_state.pt (None: a classic state holds no drafter).
        self.training_state: ChangedFile[tuple[int | None, SourceError | None]] = ChangedFile(
            _read_training_state, (None, None)
        )
        self.best_meta: ChangedFile[tuple[BestMeta | None, SourceError | None]] = ChangedFile(
            _read_best_meta, (None, None)
        )

    def refresh(self, info: RunInfo) -> bool:
        """Read each file that changed; True when any did (the run's settings are derived again)."""
        self._manifest = info.manifest
        changed = self.config.refresh(info.artifacts.config_json)
        changed |= self.drafter.refresh(named_drafter_config_path(info.manifest))
        # A run with a config.json takes its vocab from it: its training_state.pt is not read.
        changed |= self.training_state.refresh(info.artifacts.training_state if self.config.value[0] is None else None)
        changed |= self.best_meta.refresh(info.artifacts.best_meta)
        return changed

    @property
    def problems(self) -> tuple[SourceError, ...]:
        """Why each file, or its draft vocab, was not used."""
        return (
            *self.config.value[1],
            *self.drafter.value[1],
            *(problem for problem in (self.training_state.value[1], self.best_meta.value[1]) if problem is not None),
        )

    def _read_drafter_config(self, path: Path) -> Config:
        problems: list[str] = []
        config = named_drafter_config(self._manifest, problems)
        return config, tuple(SourceError("config", str(path), problem) for problem in problems)


def _read_config(path: Path) -> Config:
    problems: list[str] = []
    config = read_config(path, problems)
    problems += config_vocab_problems(config)
    return config, tuple(SourceError("config", str(path), problem) for problem in problems)


def _read_training_state(path: Path) -> tuple[int | None, SourceError | None]:
    """The draft vocab of a training_state.pt, read weights-only."""
    from triage_tui.core.formats.training_state import read_training_state

    try:
        return read_training_state(path).draft_vocab_size, None
    except BadInput as err:
        return None, SourceError(
            "training_state", err.path or str(path), f"{err.what}; the chance line does not use it"
        )
    except Exception as err:  # noqa: BLE001 - a reader bug on one run's file must not stop the watch
        return None, SourceError("training_state", str(path), f"cannot read it: {type(err).__name__}: {err}")


def _read_best_meta(path: Path) -> tuple[BestMeta | None, SourceError | None]:
    try:
        return read_best_meta(path), None
    except BadInput as err:
        return None, SourceError("specforge", err.path or str(path), err.what)
