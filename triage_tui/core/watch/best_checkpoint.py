"""The best checkpoint: the step where the run's acceptance-length estimate peaked, the checkpoint
saved nearest it, and whether the last checkpoint is past the peak.

The loss is not the measure of a drafter: the acceptance length is, and it can peak while the loss
keeps falling (https://github.com/deepseek-ai/DeepSpec/issues/84: Eagle3's accept length 3.34 at
4.6 of 10 epochs, 3.18 at the end). Where a run logs an acceptance estimate, the best drafter is
the checkpoint nearest its peak, not the last one.

Which series, first found first:

1. a logged evaluation acceptance length: SpecForge's ``eval/simulated_acc_len``
   (specforge/eval/evaluator.py), ModelOpt's ``validate_ar`` (the metric-names table,
   core.metric_names), or another ``eval/accept_len``-like tag (core.watch.curve_shapes);
2. the estimate from held-out per-position accuracies (SpecForge's ``eval/per_position_acc/{i}``),
   chained at every step they were all logged, as the serving comparison does (core.watch.serving.compare:
   1 + the sum over positions of P(the first i+1 tokens all correct));
3. a logged training-time estimate (ModelOpt's ``estimated_training_ar``), then the estimate from
   the training per-position accuracies: these rarely peak (a training accuracy keeps rising), so
   ``held_out`` says which kind was used.

SpecForge also records its own choice: ``<run_id>.best_meta.json`` (core.formats.specforge_output),
the step whose evaluation beat every earlier one on its ``best_metric``, which its ``-best`` pointer
names. It is kept beside the series' best (``recorded``) and said where the two differ; where the
run's curves hold no acceptance series (a console cut short, evaluation lines not kept), the best is
the record's alone (an evaluation's, it comes before a training-time estimate), and nothing is known
of the evaluations after it.

Checkpoint steps come from their directory names (core.watch.curve_shapes ``checkpoint_step``:
``epoch_{e}_step_{s}``, ``<run>-step<N>``, ``checkpoint-N``); a checkpoint whose name carries no step
(speculators' ``checkpoints/<epoch>``) cannot be placed and is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from triage_tui.core import bounds
from triage_tui.core.json_numbers import json_number
from triage_tui.core.metric_names import TrainerNames, ordered
from triage_tui.core.series import RunScalars
from triage_tui.core.text import printable
from triage_tui.core.watch.curve_shapes import best_index, checkpoint_step, eval_acceptance_tags, nearest_checkpoint
from triage_tui.core.watch.serving.compare import chained, is_held_out, position_choices
from triage_tui.core.watch.signals.flags import Flag, fmt
from triage_tui.core.watch.signals.kinds import FlagKind, Severity

if TYPE_CHECKING:
    from triage_tui.core.formats.specforge_output import BestMeta

# At least two evaluations: with one, the "best" is all there is and says nothing about a peak.
MIN_EVALUATIONS = 2


@dataclass(frozen=True)
class AcceptanceSeries:
    """The acceptance-length series a best is taken over: logged, or estimated at each step."""

    metric: str  # the tag, or the per-position family's name ("eval/per_position_acc/{i}")
    estimated: bool  # chained from per-position accuracies, not logged as such
    held_out: bool
    steps: np.ndarray  # int64, ascending
    values: np.ndarray  # float64, finite


@dataclass(frozen=True)
class AcceptanceHistory:
    """A held-out acceptance estimate over a run (SpecForge's ``eval/simulated_acc_len``, an
    evaluator's accept length), the checkpoints the run saved, and its training loss: what
    ``past_acceptance_peak`` weighs. Points are (step, value), steps ascending; ``acceptance_history``
    builds it from evaluations only, never a smoothed curve."""

    metric: str
    points: tuple[tuple[int, float], ...]
    checkpoints: tuple[tuple[int, Path], ...] = ()  # (step, directory) of each saved checkpoint
    loss_tag: str | None = None
    loss: tuple[tuple[int, float], ...] = ()  # the training loss, (step, value)


@dataclass(frozen=True)
class BestCheckpoint:
    """The peak of the run's acceptance estimate and the checkpoints around it."""

    metric: str
    estimated: bool
    held_out: bool
    step: int  # where the estimate peaked (the last of equal bests)
    value: float
    evaluations: int  # points of the series (0: the best is the trainer's record alone)
    last_step: int | None  # the series' last evaluation; None without a series
    last_value: float | None
    checkpoint: Path | None  # saved nearest the peak
    checkpoint_step: int | None
    last_checkpoint: Path | None  # the newest by the step in its name
    last_checkpoint_step: int | None
    recorded: BestMeta | None = None  # the trainer's own record of its best step (SpecForge)

    @property
    def past_peak(self) -> bool:
        """The last checkpoint was saved after the peak, is not the one nearest it, and the estimate
        fell after the peak (an evaluation after it): keeping the last one loses acceptance."""
        return (
            self.last_checkpoint_step is not None
            and self.last_checkpoint_step > self.step
            and self.last_checkpoint != self.checkpoint
            and self.last_step is not None
            and self.last_step > self.step
        )

    def to_json(self) -> dict[str, Any]:
        """``scan --json``'s ``best``."""
        return {
            "step": self.step,
            "value": json_number(self.value),
            "metric": self.metric,
            "checkpoint": str(self.checkpoint) if self.checkpoint is not None else None,
            "checkpoint_step": self.checkpoint_step,
            "estimated": self.estimated,
            "held_out": self.held_out,
            "evaluations": self.evaluations,
            "last_step": self.last_step,
            "last_value": json_number(self.last_value) if self.last_value is not None else None,
            "last_checkpoint": str(self.last_checkpoint) if self.last_checkpoint is not None else None,
            "past_peak": self.past_peak,
            "recorded": _recorded_json(self.recorded) if self.recorded is not None else None,
        }

    def describe(self) -> str:
        """One plain line for the drill-down (names from disk: the TUI shows it as Text, never markup)."""
        what = f"{'estimated from ' if self.estimated else ''}{printable(self.metric)}"
        kind = "" if self.held_out else ", a training-time estimate"
        line = f"best {fmt(self.value)} at step {self.step} ({what}{kind})"
        recorded = self.recorded
        if self.evaluations == 0 and recorded is not None:
            line += f", as {printable(recorded.path.name)} records it"
        if self.last_step is not None and self.last_value is not None:
            line += f"; {fmt(self.last_value)} at step {self.last_step}"
        if recorded is not None and self.evaluations and recorded.step != self.step:
            line += f"; {printable(recorded.path.name)} records step {recorded.step} ({fmt(recorded.score)})"
        if self.checkpoint is not None:
            line += f"; nearest checkpoint {printable(self.checkpoint.name)} (step {self.checkpoint_step})"
        if self.past_peak and self.last_checkpoint is not None:
            line += f"; the last checkpoint, {printable(self.last_checkpoint.name)}, is past the peak"
        return line


def _recorded_json(recorded: BestMeta) -> dict[str, Any]:
    """``best.recorded``: what the trainer's best_meta.json says, and whether its checkpoint is complete."""
    return {
        "path": str(recorded.path),
        "step": recorded.step,
        "score": json_number(recorded.score),
        "metric": recorded.metric,
        "checkpoint": str(recorded.checkpoint),
        "complete": recorded.complete,
    }


def acceptance_series(scalars: RunScalars, trainer: TrainerNames | None) -> AcceptanceSeries | None:
    """The run's acceptance-length series, in the order of the module doc; None when it logs none."""
    tags = scalars.tags()
    training_logged = [t for t in ordered(tags, trainer.acceptance_length) if "train" in t] if trainer else []
    choices = position_choices(tags)
    candidates: list[tuple[str, bool]] = [(tag, True) for tag in eval_acceptance_tags(tags, trainer)]
    candidates += [(name, True) for name, _, _ in choices if is_held_out(name)]
    candidates += [(tag, False) for tag in training_logged]
    candidates += [(name, False) for name, _, _ in choices if not is_held_out(name)]
    families = {name: (chosen, unconditional) for name, chosen, unconditional in choices}
    positions = _evaluated_positions(choices)
    for metric, held_out in candidates:
        if metric in families:
            found = _estimated(scalars, *families[metric])
            estimated = True
        else:
            found = _logged(scalars, metric)
            estimated = False
            if found is not None and _impossible(metric, *found, positions) is not None:
                continue  # not believed: impossible_acceptance says why
        if found is not None and len(found[0]):
            return AcceptanceSeries(metric, estimated, held_out, found[0], found[1])
    return None


def _evaluated_positions(choices: Sequence[tuple[str, tuple[str, ...], bool]]) -> int:
    """The draft positions an evaluation logs an accuracy for (SpecForge's evaluator: every TTT
    position, ``eval/per_position_acc``), 0 when none: a training family may log fewer positions
    than the drafter drafts (ModelOpt's ``parallel_0_step_0`` alone), so it says nothing of k."""
    return max((len(chosen) for name, chosen, _ in choices if is_held_out(name)), default=0)


def _impossible(metric: str, steps: np.ndarray, values: np.ndarray, positions: int) -> str | None:
    """Why a logged acceptance-length series cannot be one, None when it can: a value outside [0,
    k + 1] (k the draft positions whose accuracies the run's evaluation logs, else at most
    ``bounds.MAX_ACCEPTANCE_LENGTH``; 0, not 1: SpecForge's ``simulated_acc_len`` leaves out the bonus
    token, specforge/eval/evaluator.py ``_simulated_acc_len``), or a step beyond ``bounds.MAX_STEP``."""
    limit = positions + 1.0 if positions else bounds.MAX_ACCEPTANCE_LENGTH
    outside = np.flatnonzero((values < 0.0) | (values > limit))
    if len(outside):
        at = int(outside[0])
        where = f" ({positions} draft positions)" if positions else ""
        return (
            f"{printable(metric)} is {fmt(float(values[at]))} at step {int(steps[at])}: an acceptance length lies "
            f"in [0, {limit:g}]{where}"
        )
    if len(steps) and int(steps[-1]) > bounds.MAX_STEP:
        return f"{printable(metric)} is logged at step {int(steps[-1])}: a step lies in [0, 2^53 - 1]"
    return None


def impossible_acceptance(scalars: RunScalars, trainer: TrainerNames | None) -> Flag | None:
    """A warning for the first logged acceptance-length series that holds a number no acceptance
    length can be: the series is not used for the best checkpoint, and the flag says why."""
    tags = scalars.tags()
    logged = [*eval_acceptance_tags(tags, trainer)]
    logged += [t for t in ordered(tags, trainer.acceptance_length) if "train" in t] if trainer else []
    positions = _evaluated_positions(position_choices(tags))
    for metric in logged:
        found = _logged(scalars, metric)
        why = _impossible(metric, *found, positions) if found is not None else None
        if why is not None:
            message = f"{why}; not used for the best checkpoint"
            return Flag(FlagKind.IMPOSSIBLE_VALUES, Severity.WARNING, metric, None, None, message)
    return None


def acceptance_history(
    scalars: RunScalars, trainer: TrainerNames | None, checkpoints: Sequence[Path], loss_tag: str | None
) -> AcceptanceHistory | None:
    """The run's held-out acceptance series (logged, or estimated from held-out per-position
    accuracies), its placed checkpoints and its loss: what ``past_acceptance_peak`` weighs. None
    when the run logs no held-out acceptance: a training-time estimate rarely peaks, and its fall
    says nothing of what the server accepts."""
    series = acceptance_series(scalars, trainer)
    if series is None or not series.held_out:
        return None
    placed = sorted((found, Path(path)) for path in checkpoints if (found := checkpoint_step(path)) is not None)
    loss = _logged(scalars, loss_tag) if loss_tag is not None else None
    return AcceptanceHistory(
        series.metric,
        tuple(zip(series.steps.tolist(), series.values.tolist(), strict=True)),
        tuple(placed),
        loss_tag if loss is not None else None,
        tuple(zip(loss[0].tolist(), loss[1].tolist(), strict=True)) if loss is not None else (),
    )


def _logged(scalars: RunScalars, tag: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The tag's finite points by step, ascending; a step logged twice (a resumed run) keeps its last value."""
    series = scalars.get(tag)
    if series is None or not len(series):
        return None
    steps, _walls, values = series.columns()
    steps, values = np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64)
    keep = np.isfinite(values)
    steps, values = steps[keep], values[keep]
    unique, first_from_end = np.unique(steps[::-1], return_index=True)
    return unique, values[::-1][first_from_end]


def _estimated(scalars: RunScalars, tags: Sequence[str], unconditional: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """1 + the sum of the chained accuracies, at every step all positions were logged (finite)."""
    columns = []
    for tag in tags:
        column = _logged(scalars, tag)
        if column is None:
            return None
        columns.append(column)
    common = columns[0][0]
    for steps, _ in columns[1:]:
        common = np.intersect1d(common, steps, assume_unique=True)
    if not len(common):
        return None
    matrix = np.stack([values[np.searchsorted(steps, common)] for steps, values in columns], axis=1)
    return common, 1.0 + chained(matrix, unconditional).sum(axis=1)


def best_checkpoint(
    scalars: RunScalars,
    trainer: TrainerNames | None,
    checkpoints: Sequence[Path] = (),
    *,
    recorded: BestMeta | None = None,
) -> BestCheckpoint | None:
    """The best step of the run's acceptance estimate and the checkpoint saved nearest it; with
    fewer than ``MIN_EVALUATIONS`` points of it, or only a training-time estimate, the trainer's
    ``recorded`` best if there is one, else the estimate, else None."""
    placed = [(found, Path(path)) for path in checkpoints if (found := checkpoint_step(path)) is not None]
    last = max(placed, key=lambda item: item[0]) if placed else None
    series = acceptance_series(scalars, trainer)
    if series is not None and len(series.values) < MIN_EVALUATIONS:
        series = None
    if recorded is not None and series is not None and not series.held_out:
        series = None  # the record is of an evaluation: it outranks a training-time estimate
    if series is None:
        if recorded is None:
            return None
        # SpecForge skips a record whose checkpoint is gone (CheckpointManager._load_best_meta).
        nearest = (
            (recorded.step, recorded.checkpoint)
            if recorded.complete
            else nearest_checkpoint(checkpoints, recorded.step)
        )
        return BestCheckpoint(
            metric=recorded.metric,
            estimated=False,
            held_out=True,  # SpecForge's best_metric is an evaluation's
            step=recorded.step,
            value=recorded.score,
            evaluations=0,
            last_step=None,
            last_value=None,
            checkpoint=nearest[1] if nearest else None,
            checkpoint_step=nearest[0] if nearest else None,
            last_checkpoint=last[1] if last else None,
            last_checkpoint_step=last[0] if last else None,
            recorded=recorded,
        )
    best = best_index(series.values)
    step = int(series.steps[best])
    nearest = nearest_checkpoint(checkpoints, step)
    return BestCheckpoint(
        metric=series.metric,
        estimated=series.estimated,
        held_out=series.held_out,
        step=step,
        value=float(series.values[best]),
        evaluations=len(series.values),
        last_step=int(series.steps[-1]),
        last_value=float(series.values[-1]),
        checkpoint=nearest[1] if nearest else None,
        checkpoint_step=nearest[0] if nearest else None,
        last_checkpoint=last[1] if last else None,
        last_checkpoint_step=last[0] if last else None,
        recorded=recorded,
    )
