"""HF Trainer's ``checkpoint-<N>/trainer_state.json`` as a kind of scalar source.

HF Trainer (every trainer on it, ModelOpt's included) saves its whole logged history in each
``checkpoint-<N>/trainer_state.json``, whatever trackers it reports to. The newest one discovery
found is read when it appears or changes (a new newest file, or a new mtime or size of it), on the
caller's thread (the watcher's, never the UI's). Its series are named ``trainer_state/<key>`` when
the run has any other source (which logged the same values live), by the trainer's keys otherwise
(``report_to="none"``); a console of the run is given it, so HF console dicts get their logged steps.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from triage_tui.core.changed_file import FileStamp, file_stamp, stamp_of
from triage_tui.core.errors import BadInput
from triage_tui.core.formats.trainer_state import TrainerState, read_trainer_state
from triage_tui.core.read.runs.names import TRAINER_STATE_NAME
from triage_tui.core.read.source_kinds.kind import RunTree, ScalarSource, ScalarSourceKind
from triage_tui.core.series import ReadStats, RunScalars


class TrainerStateFile:
    """The newest checkpoint's ``trainer_state.json`` as a scalar source: read whole when it is new
    or changed (a new newest file, or a new mtime or size of it); its last readable version's
    points stay while a newer one cannot be read. HF Trainer rewrites the file in place
    (``TrainerState.save_to_json``: ``open(path, "w")`` then one write), so a read that races the
    save sees a cut document: one that fails while the file changed under the read is read again
    at the next poll, not said. What it cannot read is in ``problems`` (it never raises for it)."""

    kind = "trainer_state"

    def __init__(self, prefix: str) -> None:
        self.path: Path | None = None
        self.prefix = prefix
        self.state: TrainerState | None = None
        self.scalars = RunScalars()
        self.problems: dict[Path, str] = {}
        self.damaged: dict[Path, int] = {}
        self._key: FileStamp | None = None
        self._failure: str | None = None  # why the version at _key could not be read

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.path,) if self.path is not None else ()

    def set_files(self, paths: Sequence[Path]) -> None:
        """The newest checkpoint's file (the last given): a newer one is read when its key differs."""
        self.path = paths[-1] if paths else None

    def rename(self, prefix: str) -> None:
        """Its series under another prefix (the run gained or lost a source); the file is not read again."""
        if prefix != self.prefix:
            self.prefix = prefix
            self.scalars = self.state.scalars(prefix) if self.state is not None else RunScalars()

    def poll(self) -> ReadStats:
        path = self.path
        if path is None:
            return ReadStats()
        self.problems = {}
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return ReadStats()  # rotated away (save_total_limit) since discovery: the next rescan names the newest
        except OSError as err:
            self.problems = {path: f"cannot read it: {err.strerror or err}"}
            return ReadStats(unreadable_files=1)
        key = stamp_of(stat)
        stats = ReadStats()
        if key != self._key:
            self._key, self._failure = key, None
            try:
                state = read_trainer_state(path)
            except BadInput as err:
                if file_stamp(path) != key:
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
            self.problems = {path: self._failure}
        return stats


def _reader(prefix: str, current: ScalarSource | None) -> ScalarSource:
    """The run's reader kept, renamed where the run gained or lost a source: the file is not read again."""
    if isinstance(current, TrainerStateFile):
        current.rename(prefix)
        return current
    return TrainerStateFile(prefix)


def _files(run: RunTree) -> tuple[Path, ...]:
    return (run.trainer_state,) if run.trainer_state is not None else ()


KIND = ScalarSourceKind(
    name="trainer_state",
    prefix="trainer_state/",
    claims=lambda name: name == TRAINER_STATE_NAME,
    reader=_reader,
    files=_files,
    makes_run=False,  # a checkpoint-<N>/ holding one makes its parent a run (discovery's rule)
)
