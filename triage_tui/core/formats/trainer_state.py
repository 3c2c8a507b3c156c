"""HF Trainer's ``checkpoint-N/trainer_state.json``: the run's whole logged history up to that save.

``TrainerState.save_to_json`` writes ``dataclasses.asdict(state)`` with ``json.dumps(...,
indent=2, sort_keys=True)`` (huggingface/transformers 5.24.0 ``src/transformers/trainer_callback.py``)
into every ``checkpoint-{global_step}/`` (``trainer.py`` ``_save_checkpoint``; ``PREFIX_CHECKPOINT_DIR``
and ``get_last_checkpoint`` in ``trainer_utils.py``: the newest checkpoint is the one with the
largest N). ``log_history`` holds every dict ``Trainer.log`` logged, each with its ``"step"``
(``trainer.py`` ``log``: ``{**logs, "step": global_step}``): training logs (``loss``,
``grad_norm``, ``learning_rate``, ``epoch``), evaluations (``eval_*``) and the final summary
(``train_runtime``, ``train_loss``, ``total_flos``, ...). Python's json writes a non-finite float
as ``NaN``/``Infinity``, which it reads back. Every HF-based trainer writes it, whether or not a
tracker was on: ModelOpt's EAGLE training runs on HF Trainer.

The series keep the trainer's names (``loss``, ``eval_loss``).
"""

from __future__ import annotations

import math
import os
import re
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.json_file import Streamed, read_json_streaming
from triage_tui.core.series import RunScalars, ScalarSeries

TRAINER_STATE_NAME = "trainer_state.json"
# transformers trainer_utils.py: PREFIX_CHECKPOINT_DIR = "checkpoint", _re_checkpoint = ^checkpoint\-(\d+)$
CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d{1,18})$")
STEP_KEY = "step"
# A year of logging every step of a fast run is ~3 M entries of ~150 bytes: far below this. The
# file is read once per new checkpoint, a value at a time.
MAX_BYTES = 512 << 20
# One value (a log entry, a callback's state, trial_params): HF writes none near this; a longer
# one is a damaged or hostile file, refused rather than held.
MAX_VALUE_CHARS = 4 << 20
# The document nests 4 levels (stateful_callbacks.<name>.args.<key>); trial_params and user
# callbacks' state a few more.
MAX_DEPTH = 32
_MAX_STEP = 2**63 - 1
_NUMBER_TYPES = (int, float)  # exactly: bool, an int subclass, is no logged number


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One ``log_history`` entry: its step and its numeric values, by the trainer's names."""

    step: int
    values: tuple[tuple[str, float], ...]


class LogHistory(Sequence[LogEntry]):
    """The usable ``log_history`` entries in columns (a step per entry; a key and a value per logged
    number): 16 bytes a number where json's dicts of them cost several times the text, so a history of
    millions of entries fits in about the file's size. An entry is built when it is asked for."""

    def __init__(self) -> None:
        self._steps = array("q")
        self._starts = array("q", [0])  # entry i's numbers are [starts[i], starts[i + 1])
        self._key_ids = array("q")
        self._values = array("d")
        self._ids: dict[str, int] = {}
        self.keys: list[str] = []  # by key id

    def add(self, item: Any) -> bool:
        """A ``log_history`` item's step and numbers onto the columns; False when it is not a dict
        with a usable step (nothing is added)."""
        if not isinstance(item, dict):
            return False
        step = _int(item.get(STEP_KEY))
        if step is None:
            return False
        ids, key_ids, values = self._ids, self._key_ids, self._values
        for key, value in item.items():
            if key == STEP_KEY or not key or value.__class__ not in _NUMBER_TYPES:
                continue
            try:
                number = float(value)
            except OverflowError:  # an integer beyond a float: no trainer logs one
                continue
            key_id = ids.get(key)
            if key_id is None:
                key_id = ids[key] = len(self.keys)
                self.keys.append(key)
            key_ids.append(key_id)
            values.append(number)
        self._steps.append(step)
        self._starts.append(len(values))
        return True

    def __len__(self) -> int:
        return len(self._steps)

    @overload
    def __getitem__(self, index: int) -> LogEntry: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[LogEntry]: ...
    def __getitem__(self, index: int | slice) -> LogEntry | Sequence[LogEntry]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        begin, end = self._starts[index], self._starts[index + 1]
        keys = self.keys
        values = tuple(zip((keys[k] for k in self._key_ids[begin:end]), self._values[begin:end], strict=True))
        return LogEntry(self._steps[index], values)

    def columns(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Each key's (steps, values) in the history's order."""
        steps = np.frombuffer(self._steps, np.int64) if self._steps else np.zeros(0, np.int64)
        starts = np.frombuffer(self._starts, np.int64)
        key_ids = np.frombuffer(self._key_ids, np.int64) if self._key_ids else np.zeros(0, np.int64)
        values = np.frombuffer(self._values, np.float64) if self._values else np.zeros(0, np.float64)
        step_of_value = np.repeat(steps, np.diff(starts))
        columns = {}
        for key_id, key in enumerate(self.keys):
            chosen = key_ids == key_id
            columns[key] = (step_of_value[chosen], values[chosen])
        return columns


@dataclass(frozen=True)
class TrainerState:
    """What a ``trainer_state.json`` says of the run's steps and logged history."""

    path: Path
    global_step: int
    max_steps: int | None
    logging_steps: int | None
    eval_steps: int | None
    save_steps: int | None
    epoch: float | None
    best_metric: float | None
    best_global_step: int | None
    best_model_checkpoint: str | None
    log_history: LogHistory
    skipped_entries: int  # entries without a usable step (not a dict, no int step): not read
    mtime: float  # the file's modification time: the wall time of its points (entries carry none)

    def scalars(self, prefix: str = "") -> RunScalars:
        """The history as series named by the trainer's keys (``prefix`` before each), points at
        their logged steps, each point's wall time the file's modification time (the save: entries
        carry no time). A step logged twice keeps both points, neither marked a restart."""
        columns = self.log_history.columns()
        scalars = RunScalars()
        for key, (steps, values) in columns.items():
            # The history's own order, sorted by step (stable) in case a hand-edited file is not.
            order = np.argsort(steps, kind="stable")
            walls = np.full(len(steps), self.mtime, np.float64)
            tag = prefix + key
            scalars.series[tag] = ScalarSeries.of(tag, steps[order], walls, values[order])
        scalars.version += 1
        return scalars


def read_trainer_state(path: str | Path) -> TrainerState:
    """A ``trainer_state.json``; BadInput naming the file when it is unreadable, too large, nested
    too deeply, not JSON, holds one value longer than ``MAX_VALUE_CHARS``, or is not a trainer state
    (no object, no int ``global_step``, no list ``log_history``). ``log_history`` is read an entry at
    a time into columns, so memory follows the numbers logged, not the text. Entries that are not
    dicts or lack an int step are skipped and counted."""
    path = Path(path)
    try:
        mtime = os.stat(path).st_mtime
    except OSError as err:
        raise BadInput(path, f"cannot read it: {err.strerror or err}") from None
    history = LogHistory()
    skipped = 0

    def take(item: Any) -> None:
        nonlocal skipped
        if not history.add(item):
            skipped += 1

    document = read_json_streaming(
        path, arrays={"log_history": take}, max_value_bytes=MAX_VALUE_CHARS, max_depth=MAX_DEPTH, max_bytes=MAX_BYTES
    )
    global_step = _int(document.get("global_step"))
    if global_step is None:
        raise BadInput(path, "not an HF Trainer state: no whole, non-negative global_step")
    if not isinstance(document.get("log_history"), Streamed):
        raise BadInput(path, "not an HF Trainer state: log_history is not a list")
    best = document.get("best_model_checkpoint")
    return TrainerState(
        path=path,
        global_step=global_step,
        max_steps=_int(document.get("max_steps")),
        logging_steps=_positive(document.get("logging_steps")),
        eval_steps=_positive(document.get("eval_steps")),
        save_steps=_positive(document.get("save_steps")),
        epoch=_finite(document.get("epoch")),
        best_metric=_finite(document.get("best_metric")),
        best_global_step=_int(document.get("best_global_step")),
        best_model_checkpoint=best if isinstance(best, str) else None,
        log_history=history,
        skipped_entries=skipped,
        mtime=mtime,
    )


def _int(value: Any) -> int | None:
    """A whole number in [0, int64] (a float such as 2.0 too), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        return None
    number = int(value)
    return number if 0 <= number <= _MAX_STEP else None


def _positive(value: Any) -> int | None:
    number = _int(value)
    return number if number else None


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
