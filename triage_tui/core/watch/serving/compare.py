"""Serving against training: the training side's estimate, and what their difference concludes.

The thresholds are named constants with the reasons for their sizes; the findings become run
flags (``serving_flags``) and feed the hypotheses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from triage_tui.core.json_numbers import json_number
from triage_tui.core.watch.serving.evidence import ServingEvidence
from triage_tui.core.watch.signals.kinds import FlagKind, Severity

if TYPE_CHECKING:
    from triage_tui.core.watch.signals.flags import Flag

# -- conclusions ----------------------------------------------------------------------------
# "Collapsed": the drafter's tokens are essentially never accepted. vLLM #50170 and SGLang
# #25454 report 1.00-1.05 with every later position at 0; a working EAGLE-3 drafter with 3+
# speculative tokens sits at 2-4. 1.15 leaves room for a few lucky tokens of a broken drafter.
COLLAPSED_LENGTH = 1.15
# ... and every position after the first below this (when the source has positions).
COLLAPSED_LATER_POSITION = 0.05
# "Disagree": the training-side estimate and serving differ by at least this many tokens of
# acceptance length and by this factor. Half a token is more than the interval-to-interval
# noise of a serving log (prompts differ) and smaller than the gap of a wrong target.
DISAGREE_TOKENS = 0.5
DISAGREE_RATIO = 1.4


@dataclass(frozen=True)
class TrainingEstimate:
    """Acceptance length as the run's own per-position accuracies predict it."""

    acceptance_length: float
    per_position: tuple[float, ...]  # unconditional: P(first i+1 draft tokens all correct)
    tags: tuple[str, ...]
    step: int | None
    arithmetic: str

    def to_json(self) -> dict[str, Any]:
        return {
            "acceptance_length": json_number(self.acceptance_length),
            "per_position": [json_number(p) for p in self.per_position],
            "tags": list(self.tags),
            "step": self.step,
            "arithmetic": self.arithmetic,
        }

    def truncated(self, k: int) -> TrainingEstimate:
        """The estimate for a server that drafts only k tokens."""
        if k <= 0 or k >= len(self.per_position):
            return self
        per_position = self.per_position[:k]
        return replace(
            self,
            acceptance_length=1.0 + sum(per_position),
            per_position=per_position,
            arithmetic=f"{self.arithmetic}; first {k} positions (the server drafts {k})",
        )


# Per-position accuracies are found by the trainers' metric-names table (core/metric_names.py).
# speculators' full_acc_k is already unconditional (its correct mask is ANDed with the previous
# steps': speculators/models/metrics.py compute_accuracy_single_step); every other per-position
# accuracy (SpecForge's acc_i and per_position_acc/i, speculators' cond_acc_k, EAGLE's, ModelOpt's)
# is taken as step i's accuracy given the earlier steps, and chained as a product, as SpecForge's
# own simulated acceptance does (specforge/eval/evaluator.py _simulated_acc_len).
_UNCONDITIONAL = ("full_acc",)
_HELD_OUT = ("eval", "val", "valid", "validation", "test")


def position_choices(tags: Iterable[str]) -> list[tuple[str, tuple[str, ...], bool]]:
    """The run's per-position accuracy families an estimate can chain, preferred first: (the table's
    name, its tags for positions 0..k-1 with none missing, whether they are already unconditional).
    Held-out families come before training ones, the table's order kept within each."""
    from triage_tui.core.metric_names import match_trainer, position_of

    tags = list(tags)
    trainer = match_trainer(tags)
    if trainer is None:
        return []
    names = [name for name in trainer.accuracy if "{" in name]
    names.sort(key=lambda name: not is_held_out(name))  # stable: table order kept
    found_families = []
    for name in names:
        found = {p: tag for tag in tags if (p := position_of(name, tag)) is not None}
        k = 0
        while k in found:
            k += 1
        if k:
            unconditional = any(word in name for word in _UNCONDITIONAL)
            found_families.append((name, tuple(found[i] for i in range(k)), unconditional))
    return found_families


def is_held_out(name: str) -> bool:
    """A held-out (evaluation) series by its name's first part: eval/, val/, test/ ..."""
    return name.split("/", 1)[0].lower() in _HELD_OUT


def chained(values: Sequence[float] | np.ndarray, unconditional: bool) -> np.ndarray:
    """P(the first i+1 draft tokens all correct) from per-position accuracies (last axis: position):
    a product of the conditional ones (SpecForge's ``_simulated_acc_len``), the unconditional ones as
    they are. Accuracies are clamped to [0, 1]."""
    array = np.clip(np.asarray(values, dtype=np.float64), 0.0, 1.0)
    return array if unconditional else np.cumprod(array, axis=-1)


def arithmetic_of(name: str, k: int, unconditional: bool) -> str:
    if unconditional:
        return f"1 + sum of {name} over positions 0..{k - 1} (already P(first i+1 correct))"
    return (
        f"1 + sum over i < {k} of the product of {name} for positions <= i (each taken as "
        f"conditional on the earlier ones, as SpecForge's simulated acceptance does; SpecForge "
        f"leaves out the 1)"
    )


def training_estimate(
    tags: Iterable[str], last_value: Callable[[str], tuple[int, float] | None]
) -> TrainingEstimate | None:
    """The estimate from the latest per-position accuracies, or None when the run logs none.

    ``last_value(tag)`` returns the tag's last (step, value). Held-out series come before train.
    """
    for name, chosen, unconditional in position_choices(tags):
        points = [point for tag in chosen if (point := last_value(tag)) is not None and math.isfinite(point[1])]
        if len(points) != len(chosen):
            continue
        per_position = tuple(float(p) for p in chained([p[1] for p in points], unconditional))
        step = max(p[0] for p in points)
        arithmetic = arithmetic_of(name, len(chosen), unconditional)
        return TrainingEstimate(1.0 + sum(per_position), per_position, chosen, step, arithmetic)
    return None


def training_estimate_from_scalars(scalars: Any) -> TrainingEstimate | None:
    """training_estimate over a RunScalars (core/series.py)."""

    def last_value(tag: str) -> tuple[int, float] | None:
        series = scalars.get(tag)
        last = series.last() if series is not None and len(series) else None
        return (int(last[0]), float(last[2])) if last is not None else None

    return training_estimate(scalars.tags(), last_value)


@dataclass(frozen=True)
class ServingFinding:
    """A conclusion from the serving evidence, with its numbers in the message."""

    kind: str  # "acceptance_collapsed" | "serving_below_training" | "serving_above_training"
    value: float
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": json_number(self.value), "message": self.message}


@dataclass(frozen=True)
class ServingComparison:
    """Serving evidence beside the training estimate, and what the two say together."""

    serving: ServingEvidence
    training: TrainingEstimate | None
    findings: tuple[ServingFinding, ...] = field(default=())

    def finding(self, kind: str) -> ServingFinding | None:
        return next((f for f in self.findings if f.kind == kind), None)

    def to_json(self) -> dict[str, Any]:
        document = self.serving.to_json()
        document["training_estimate"] = self.training.to_json() if self.training is not None else None
        document["findings"] = [f.to_json() for f in self.findings]
        return document


def compare_serving(serving: ServingEvidence, training: TrainingEstimate | None) -> ServingComparison:
    """Flag a collapsed acceptance and a training estimate far from what the server accepts.

    Evidence that is not scored (a placeholder, figures an engine forced for benchmarking:
    ``ServingEvidence.scored``) concludes nothing: no finding, so no flag and no hypothesis."""
    findings: list[ServingFinding] = []
    length = serving.acceptance_length if serving.scored else None
    if length is not None:
        later = serving.per_position[1:]
        if length <= COLLAPSED_LENGTH and all(p <= COLLAPSED_LATER_POSITION for p in later):
            positions = (
                ", per position " + ", ".join(f"{p:.3f}" for p in serving.per_position) if serving.per_position else ""
            )
            counts = (
                f" ({serving.accepted} accepted of {serving.drafts} drafts)"
                if serving.drafts is not None and serving.accepted is not None
                else ""
            )
            findings.append(
                ServingFinding(
                    "acceptance_collapsed",
                    length,
                    f"{serving.engine} accepts almost nothing from the drafter: acceptance length {length:.2f}"
                    f"{counts}{positions} (collapsed: <= {COLLAPSED_LENGTH} with later positions <= "
                    f"{COLLAPSED_LATER_POSITION})",
                )
            )
        if training is not None:
            # Compare over the positions both sides have: a server drafting fewer tokens than the
            # run trained for gets the estimate's first k; one drafting more gets its own first k.
            k = len(serving.per_position)
            estimate = training.truncated(k) if k else training
            served, over = length, ""
            if k > len(training.per_position):
                k = len(training.per_position)
                served = 1.0 + sum(serving.per_position[:k])
                over = f" over the first {k} position{'s' if k > 1 else ''}"
            gap = estimate.acceptance_length - served
            ratio = max(estimate.acceptance_length, served) / max(min(estimate.acceptance_length, served), 1e-9)
            if abs(gap) >= DISAGREE_TOKENS and ratio >= DISAGREE_RATIO:
                tags = ", ".join(estimate.tags)
                if gap > 0:
                    findings.append(
                        ServingFinding(
                            "serving_below_training",
                            gap,
                            f"training estimates acceptance length {estimate.acceptance_length:.2f} from {tags} "
                            f"at step "
                            f"{estimate.step}, {serving.engine} accepts {served:.2f}{over}: the served target or the "
                            f"engine's reading of the drafter differs from training",
                        )
                    )
                else:
                    findings.append(
                        ServingFinding(
                            "serving_above_training",
                            -gap,
                            f"{serving.engine} accepts {served:.2f}{over}, training estimates only "
                            f"{estimate.acceptance_length:.2f} from {tags} at step {estimate.step}: the drafter works, "
                            f"the training metric does not measure it",
                        )
                    )
    return ServingComparison(serving, training, tuple(findings))


# Severity of each finding as a run flag (scan, the TUI): a collapsed acceptance means the drafter
# buys nothing in production; a disagreement says one of the two numbers is not what it seems.
FLAG_SEVERITY = {
    "acceptance_collapsed": Severity.CRITICAL,
    "serving_below_training": Severity.WARNING,
    "serving_above_training": Severity.WARNING,
}


def serving_flags(comparison: ServingComparison) -> list[Flag]:
    """The findings as run flags: ``serving_acceptance_collapsed``, ``serving_below_training``, ..."""
    from triage_tui.core.watch.signals.flags import Flag

    flags = []
    for finding in comparison.findings:
        kind = FlagKind(finding.kind if finding.kind.startswith("serving_") else f"serving_{finding.kind}")
        step = comparison.training.step if comparison.training is not None and "training" in kind else None
        flags.append(Flag(kind, FLAG_SEVERITY[finding.kind], None, step, finding.value, finding.message))
    return flags
