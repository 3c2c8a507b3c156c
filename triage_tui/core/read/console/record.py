"""What a trainer's console line says, as the line parsers give it: ``ConsoleRecord`` or ``Damaged``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from triage_tui.core.read.console.literal import LiteralError, number

# Steps are int64 in every series (core/series.py), as in TensorBoard and W&B.
MAX_STEP = 2**63 - 1

# Trainer ids: the formats a console line is read as (the same ids as core/metric_names.py's rows).
SPECFORGE = "specforge"
HF_TRAINER = "hf-trainer"
SPECULATORS = "speculators"


@dataclass(frozen=True)
class ConsoleRecord:
    """One logged set of metrics: the series names as the trainer printed them, and their values.

    ``step`` is the step the line printed (None when the trainer prints none: HF Trainer's dicts,
    speculators' evaluation records); ``progress_step`` the step of the training bar tqdm drew
    right after the line (HF Trainer's ``tqdm.write``), when it is known; ``is_train`` whether the
    record is one of the trainer's periodic training logs (HF Trainer: every ``logging_steps``).
    """

    trainer: str
    values: tuple[tuple[str, float], ...]
    step: int | None = None
    progress_step: int | None = None
    is_train: bool = True


@dataclass(frozen=True)
class Damaged:
    """A line that is one trainer's format but cannot be read (counted as damage, never raised)."""

    trainer: str
    why: str


def numeric_items(mapping: Mapping[str, Any], *, strings: bool, prefix: str = "") -> Iterable[tuple[str, float]]:
    """The (name, value) pairs of a printed metrics dict that are numbers; lists become ``name/i``
    (SpecForge's convention for per-position values, ``specforge/training/tracking.py``
    ``scalar_metrics``), nested dicts ``outer/inner``. ``strings``: a string holding a number is one
    (HF Trainer prints ``f"{v:.4g}"``). Booleans, None and other strings are not metrics.
    Raises LiteralError for an impossible number."""
    for key, value in mapping.items():
        name = prefix + key
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)):
            yield name, float(value)
        elif isinstance(value, str):
            if strings:
                parsed = number(value)
                if parsed is not None:
                    yield name, parsed
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, bool) or not isinstance(item, (int, float)):
                    continue
                yield f"{name}/{index}", float(item)
        elif isinstance(value, dict):
            yield from numeric_items(value, strings=strings, prefix=name + "/")


def checked_step(value: Any) -> int:
    """A printed step as an int; LiteralError when it is no whole number in [0, int64]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LiteralError("a step that is no number")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise LiteralError(f"a step that is no whole number: {value!r}")
    step = int(value)
    if not 0 <= step <= MAX_STEP:
        raise LiteralError(f"a step outside [0, 2**63): {step}")
    return step
