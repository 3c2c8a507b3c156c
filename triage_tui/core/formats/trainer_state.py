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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.json_file import read_json
from triage_tui.core.series import RunScalars, ScalarSeries

TRAINER_STATE_NAME = "trainer_state.json"
# transformers trainer_utils.py: PREFIX_CHECKPOINT_DIR = "checkpoint", _re_checkpoint = ^checkpoint\-(\d+)$
CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d{1,18})$")
STEP_KEY = "step"
# A year of logging every step of a fast run is ~3 M entries of ~150 bytes: far below this. The
# file is read whole, once per new checkpoint.
MAX_BYTES = 512 << 20
# The document nests 4 levels (stateful_callbacks.<name>.args.<key>); trial_params and user
# callbacks' state a few more.
MAX_DEPTH = 32
_MAX_STEP = 2**63 - 1


@dataclass(frozen=True)
class LogEntry:
    """One ``log_history`` entry: its step and its numeric values, by the trainer's names."""

    step: int
    values: tuple[tuple[str, float], ...]


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
    log_history: tuple[LogEntry, ...]
    skipped_entries: int  # entries without a usable step (not a dict, no int step): not read
    mtime: float  # the file's modification time: the wall time of its points (entries carry none)

    def scalars(self, prefix: str = "") -> RunScalars:
        """The history as series named by the trainer's keys (``prefix`` before each), points at
        their logged steps, each point's wall time the file's modification time (the save: entries
        carry no time). A step logged twice keeps both points, neither marked a restart."""
        columns: dict[str, tuple[list[int], list[float]]] = {}
        for entry in self.log_history:
            for key, value in entry.values:
                steps, values = columns.setdefault(key, ([], []))
                steps.append(entry.step)
                values.append(value)
        scalars = RunScalars()
        for key, (steps, values) in columns.items():
            # The history's own order, sorted by step (stable) in case a hand-edited file is not.
            order = np.argsort(np.asarray(steps, np.int64), kind="stable")
            walls = np.full(len(steps), self.mtime, np.float64)
            tag = prefix + key
            scalars.series[tag] = ScalarSeries.of(tag, np.asarray(steps)[order], walls, np.asarray(values)[order])
        scalars.version += 1
        return scalars


def read_trainer_state(path: str | Path) -> TrainerState:
    """A ``trainer_state.json``; BadInput naming the file when it is unreadable, too large, nested
    too deeply, not JSON, or not a trainer state (no object, no int ``global_step``, no list
    ``log_history``). Entries that are not dicts or lack an int step are skipped and counted."""
    path = Path(path)
    try:
        mtime = os.stat(path).st_mtime
    except OSError as err:
        raise BadInput(path, f"cannot read it: {err.strerror or err}") from None
    document = read_json(path, max_bytes=MAX_BYTES, max_depth=MAX_DEPTH)
    if not isinstance(document, dict):
        raise BadInput(path, "not an HF Trainer state: the document is not an object")
    global_step = _int(document.get("global_step"))
    if global_step is None:
        raise BadInput(path, "not an HF Trainer state: no whole, non-negative global_step")
    history = document.get("log_history")
    if not isinstance(history, list):
        raise BadInput(path, "not an HF Trainer state: log_history is not a list")
    entries: list[LogEntry] = []
    skipped = 0
    for item in history:
        entry = _entry(item)
        if entry is None:
            skipped += 1
        else:
            entries.append(entry)
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
        log_history=tuple(entries),
        skipped_entries=skipped,
        mtime=mtime,
    )


def _entry(item: Any) -> LogEntry | None:
    if not isinstance(item, dict):
        return None
    step = _int(item.get(STEP_KEY))
    if step is None:
        return None
    values = []
    for key, value in item.items():
        if key == STEP_KEY or not key or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        try:
            values.append((key, float(value)))
        except OverflowError:  # an integer beyond a float: no trainer logs one
            continue
    return LogEntry(step, tuple(values))


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
