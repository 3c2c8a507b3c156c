"""A run's headline metrics as `scan --json` reports them ("metrics"): its loss and accuracy, and where
the trainer logs them, the accuracy of each TTT position and the acceptance length. Typed, so a reader
names the field it means; ``to_json`` is the contract's shape (docs/contracts.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from triage_tui.core.json_numbers import json_number


@dataclass(frozen=True)
class MetricSummary:
    """One series: its tag, its last and lowest finite values (None: no point yet, or not finite), its
    number of points."""

    tag: str
    last: float | None
    min: float | None
    count: int

    def __post_init__(self) -> None:
        # The JSON's rule, once: NaN and inf are not numbers there (json_numbers).
        object.__setattr__(self, "last", json_number(self.last))
        object.__setattr__(self, "min", json_number(self.min))

    def to_json(self) -> dict[str, Any]:
        return {"tag": self.tag, "last": self.last, "min": self.min, "count": self.count}


@dataclass(frozen=True)
class PositionAccuracy(MetricSummary):
    """The accuracy of one TTT position (acc_0, acc_1, ...)."""

    position: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, **super().to_json()}


@dataclass(frozen=True)
class RunMetrics:
    loss: MetricSummary | None = None
    accuracy: MetricSummary | None = None
    per_position_accuracy: tuple[PositionAccuracy, ...] = ()  # empty: the trainer logs none
    acceptance_length: MetricSummary | None = None  # an evaluation's estimate, where the trainer logs one

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "loss": self.loss.to_json() if self.loss is not None else None,
            "accuracy": self.accuracy.to_json() if self.accuracy is not None else None,
        }
        if self.per_position_accuracy:
            document["per_position_accuracy"] = [position.to_json() for position in self.per_position_accuracy]
        if self.acceptance_length is not None:
            document["acceptance_length"] = self.acceptance_length.to_json()
        return document
