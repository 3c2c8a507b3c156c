"""The step of each console record, and what it was taken from (``StepBasis``).

SpecForge's lines and speculators' training records print their step: taken as printed. HF
Trainer's dicts print none (``hf_trainer``), so their step comes, best first, from:

1. ``trainer_state.json`` of a checkpoint: its ``log_history`` holds the same dicts, in the same
   order, with their steps and unrounded values; a printed dict is the entry whose values, formatted
   as the console formats them (``f"{v:.4g}"``, or as they are for transformers 4.x), equal the
   printed ones: exact, for every log up to that checkpoint;
2. the progress bar: ``tqdm.write`` clears the bar, prints the dict and redraws the bar at the
   step being logged (``ProgressCallback.on_step_end`` updated it before ``on_log``), so the bar
   drawn right after a dict that followed a clear is its step. Only when stdout and the bar reach
   the file in order: with ``> train.log`` and no ``python -u``/``PYTHONUNBUFFERED``, stdout is
   block-buffered and the dicts land in chunks away from the bar, which is then not used;
3. inferred: a training dict ``logging_steps`` after the last one (``logging_steps`` from
   ``trainer_state.json``, else the spacing of the last two dicts whose steps were known, else 1:
   the dict's ordinal), any other dict (evaluation, the summary) at the last dict's step.

speculators' validation records take the step of the training record before them (inferred).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

from triage_tui.core.formats.trainer_state import TrainerState
from triage_tui.core.read.console.record import HF_TRAINER, ConsoleRecord

# What a point's step was taken from: shown with the series (scan --json, the TUI), never hidden.
PRINTED = "printed"
TRAINER_STATE = "trainer_state.json"
PROGRESS_BAR = "progress bar"
INFERRED = "inferred"

# HF's log_history keys that never reach the console (``ProgressCallback.on_log`` pops
# ``total_flos``; ``step`` is added to the history only).
_HISTORY_ONLY = frozenset({"step", "total_flos"})

Signature = tuple[tuple[str, object], ...]


def _canonical(value: float) -> object:
    return "nan" if math.isnan(value) else value


def _signature(values: Iterable[tuple[str, float]]) -> Signature:
    return tuple(sorted((key, _canonical(value)) for key, value in values))


def _printed(value: float) -> float:
    """The value as HF Trainer 5.x prints it (``f"{v:.4g}"``), read back."""
    return float(f"{value:.4g}")


class HistoryIndex:
    """A ``trainer_state.json``'s log entries by what the console would print of them."""

    def __init__(self, state: TrainerState) -> None:
        self.state = state
        self._positions: dict[Signature, list[int]] = {}
        for position, entry in enumerate(state.log_history):
            shown = [(key, value) for key, value in entry.values if key not in _HISTORY_ONLY]
            for signature in {_signature(shown), _signature((k, _printed(v)) for k, v in shown)}:
                self._positions.setdefault(signature, []).append(position)

    def find(self, values: Iterable[tuple[str, float]], after: int) -> int | None:
        """The first entry after position ``after`` the printed values are, or None."""
        positions = self._positions.get(_signature(values))
        if not positions:
            return None
        index = bisect.bisect_right(positions, after)
        return positions[index] if index < len(positions) else None


class StepResolver:
    """Gives each record of one console file, in order, its step and that step's basis."""

    def __init__(self, state: TrainerState | None = None) -> None:
        self.index = HistoryIndex(state) if state is not None else None
        self.logging_steps = state.logging_steps if state is not None else None
        self._cursor = -1  # the history position of the last record found there
        self._last_step: int | None = None  # the previous record's step
        self._last_train: tuple[int, bool] | None = None  # the previous training dict's (step, known)
        self._spacing: int | None = None  # between the last two training dicts of known step

    def resolve(self, record: ConsoleRecord) -> tuple[int, str]:
        if record.step is not None:
            step, basis = record.step, PRINTED
        elif record.trainer == HF_TRAINER:
            step, basis = self._hf(record)
        else:  # a speculators validation record: logged after the last training record
            step, basis = (self._last_step or 0), INFERRED
        self._last_step = step
        if record.is_train:
            known = basis != INFERRED
            if known and self._last_train is not None and self._last_train[1] and step > self._last_train[0]:
                self._spacing = step - self._last_train[0]
            self._last_train = (step, known)
        return step, basis

    def _hf(self, record: ConsoleRecord) -> tuple[int, str]:
        if self.index is not None:
            position = self.index.find(record.values, self._cursor)
            if position is not None:
                self._cursor = position
                return self.index.state.log_history[position].step, TRAINER_STATE
        if record.progress_step is not None:
            return record.progress_step, PROGRESS_BAR
        if not record.is_train:
            return (self._last_step or 0), INFERRED
        spacing = self.logging_steps or self._spacing or 1
        last = self._last_train[0] if self._last_train is not None else 0
        return last + spacing, INFERRED
