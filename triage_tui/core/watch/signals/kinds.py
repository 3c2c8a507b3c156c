"""The words triage judges runs in, as str-valued enums: a flag's kind and severity, a run's status, and
the state of its writer. Each member is its JSON string (``FlagKind.STALLED == "stalled"``), so the JSON
and every comparison with the word keep working; code names the member, and a misspelt one is an error."""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    """enum.StrEnum (Python 3.11) for 3.10 too: the member is its string in str(), f-strings and JSON."""

    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]


class Severity(StrEnum):
    """How much a flag matters; SEVERITY_ORDER (core.watch.signals.flags) ranks them."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class RunHealth(StrEnum):
    """A run's status: its worst flag's severity ("ok" with none or only info flags), or "error" when
    nothing of the run could be read."""

    OK = "ok"
    WARNING = "warning"
    CRITICAL = "critical"
    ERROR = "error"


class FlagKind(StrEnum):
    """What a flag says is wrong, or worth knowing (docs/contracts.md lists them with their rules)."""

    # core.watch.signals.values: the loss and accuracy against the chance line, and the curve's shape
    LOSS_AT_CHANCE = "loss_at_chance"
    LOSS_ABOVE_CHANCE = "loss_above_chance"
    ACCURACY_AT_CHANCE = "accuracy_at_chance"
    CHANCE_FROM_START = "chance_from_start"
    NON_FINITE = "non_finite"
    DIVERGING = "diverging"
    PLATEAU = "plateau"
    WARMING_UP = "warming_up"
    # core.watch.signals.stall and core.watch.run_state: the writer
    STALLED = "stalled"
    CRASHED = "crashed"
    # core.watch.derive: files
    DAMAGED_RECORDS = "damaged_records"
    UNREADABLE_FILE = "unreadable_file"
    # core.watch.curve_shapes
    TTT_POSITION_COLLAPSE = "ttt_position_collapse"
    RESUME_DISCONTINUITY = "resume_discontinuity"
    EVAL_PEAKED = "eval_peaked"
    # core.watch.best_checkpoint: an acceptance estimate that cannot be (outside [0, k + 1], a step out of range)
    IMPOSSIBLE_VALUES = "impossible_values"
    # core.watch.serving.compare: what the serving engine accepted against the training estimate
    SERVING_ACCEPTANCE_COLLAPSED = "serving_acceptance_collapsed"
    SERVING_BELOW_TRAINING = "serving_below_training"
    SERVING_ABOVE_TRAINING = "serving_above_training"


class WriterState(StrEnum):
    """Whether a run's writer is alive on this node (core.watch.run_state)."""

    LIVE = "live"
    STALLED = "stalled"
    ENDED = "ended"
    CRASHED = "crashed"
    UNKNOWN = "unknown"
