"""Flags from the shape of a run's curves, beyond where they stand (core.watch.signals): later TTT positions
collapsing while position 0 learns, a jump where the run resumed, an evaluation acceptance length that
peaked while the loss kept falling; and how the run started (near chance or not), which a fine-tune from
a good drafter must not (core.diagnose.hypotheses ``warm_start_broken``).

Each shape is one the public issue record of EAGLE-3 training shows:

- later positions collapse: https://github.com/vllm-project/speculators/pull/818 (the TTT loop fed the
  drafter its own argmax tokens), https://github.com/sgl-project/SpecForge/issues/424;
- a fine-tune from a good drafter starting near zero accuracy:
  https://github.com/sgl-project/SpecForge/issues/300 ("0.00 acc at the start of finetuning");
- acceptance peaking while the loss falls: https://github.com/deepseek-ai/DeepSpec/issues/84 (Eagle3 peaks
  at 4.6 of 10 epochs, accept length 3.34 -> 3.18 while the train loss goes 1.73 -> 1.50);
- a resume whose curve does not continue: the model, mapping or optimizer state loaded on resume is not
  the one that was saved.

Every threshold is a module constant with the reason for its size. Accuracies logged in percent (a
maximum above 1) are read as percent, as core.watch.signals does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triage_tui.core.metric_names import ACCEPTANCE_LENGTH_WORD, TrainerNames, ordered, per_position
from triage_tui.core.series import RunScalars, ScalarSeries, ema_smooth
from triage_tui.core.watch.signals.chance import ChanceLine
from triage_tui.core.watch.signals.flags import Flag, fmt
from triage_tui.core.watch.signals.kinds import FlagKind, Severity
from triage_tui.core.watch.signals.values import CHANCE_BAND_BELOW, SIGNAL_SMOOTHING, streak_start

# -- how the run started -------------------------------------------------------------------------
# The start is the median of the first 5 logged points (SpecForge logs every 50 steps: the first
# ~250 steps), so one odd first batch neither makes nor hides it.
START_POINTS = 5
# Near zero accuracy: under 5 %. A drafter that works is at 30-80 % top-1 on its first batch of a
# fine-tune (core.watch.signals' accuracy-at-chance reasoning); guessing the most frequent tokens gives a
# few percent (SpecForge #300 saw 0.00-0.03 "for a long time" from lmsys/Qwen3-235B-A22B-EAGLE3).
START_ACCURACY = 0.05

# -- later TTT positions collapse ----------------------------------------------------------------
# Position 0 "fine": at least 20 % top-1 (smoothed), twice core.watch.signals' chance line of 10 %, so
# the drafter demonstrably learned something a later position could learn too.
POSITION0_FINE = 0.20
# Collapsed: position 1 below a quarter of position 0. Healthy runs keep far more: EAGLE's own
# trainer reported 0.70, 0.37, 0.21, ... for positions 0, 1, 2 (SafeAILab/EAGLE#191, a ratio of
# 0.53), SpecForge's TTT keeps acc_1 within ~10 % of acc_0, speculators' cond_acc_1 is 0.6-0.9.
POSITION_COLLAPSE_RATIO = 0.25
# Judged only after this many points logged by both positions, and not while position 1 still
# climbs by more than 2 points over the last COLLAPSE_WINDOW points: early in a from-scratch run
# position 0 learns first.
COLLAPSE_MIN_POINTS = 10
COLLAPSE_WINDOW = 5
COLLAPSE_MAX_RISE = 0.02
# ... nor while position 1 gains on position 0: from the middle of the collapsed stretch to its end
# the ratio acc_1 / acc_0 grew 1.5x and by at least a point. A from-scratch drafter's position 1
# starts learning long after position 0 and climbs slowly in absolute terms (the sample world's
# healthy run: acc_1 0.4 % -> 4 % over steps 20-60 while acc_0 sits at 55 %), a collapsed position
# keeps a flat ratio (speculators #818: full_acc_1 at 1 % for the whole run).
COLLAPSE_RATIO_GROWTH = 1.5
COLLAPSE_RATIO_MIN_GAIN = 0.01
# ... nor before the collapsed stretch lasts 10x the steps position 0 took to become fine. Position 1
# of a drafter trained from scratch starts learning only once position 0 predicts well, several times
# later (the sample world's healthy run: position 0 fine at step 11, position 1 climbing from step
# ~60, 5x later; `triage samples --small` stops at step 60 with acc_1 at 0.8 %). A fine-tune from a
# working drafter has position 0 fine from its first point and is judged at once; the public collapses
# last for the whole run.
COLLAPSE_SPAN_FACTOR = 10

# -- a jump where the run resumed ----------------------------------------------------------------
# Up to 5 points on each side of the resume step, at least 3 each: the points after it are compared
# with the line through the points before it (their median distance is the jump), so a curve that
# keeps falling at its pace is no jump; the noise is the median distance of the points from their lines.
RESUME_WINDOW = 5
RESUME_MIN_SIDE = 3
# A resume that restores the model and optimizer continues the curve within batch noise; an lr
# warm-up restarting adds a bump of tenths of a nat. A jump of more than max(0.5 nats, a tenth of
# the loss before it), or 10 accuracy points, and 4x the point-to-point noise around it, means the
# model training after the resume is not the one that was saved.
RESUME_LOSS_NATS = 0.5
RESUME_LOSS_FRACTION = 0.10
RESUME_ACCURACY = 0.10
RESUME_NOISE_MULTIPLE = 4.0

# -- evaluation acceptance peaked while the loss fell --------------------------------------------
# At least 4 evaluations, 2 or more of them after the best and all below it (DeepSpec #84: four in a
# row), the last 3 % or more under the best (#84: -4.9 %; the acceptance length of a few hundred
# prompts varies by well under 1 % between evaluations of one checkpoint), while the smoothed loss
# fell by another 2 % or more since the best evaluation (#84: 1.73 -> 1.50, -13 %).
EVAL_MIN_POINTS = 4
EVAL_AFTER_PEAK = 2
EVAL_DROP_FRACTION = 0.03
LOSS_STILL_FALLING = 0.02
# Evaluation acceptance-length names beyond the trainers' tables (core.metric_names): an evaluation
# prefix and an accept length, e.g. DeepSpec-style ``eval/accept_len``.
_EVAL_ACCEPTANCE = re.compile(
    rf"^(eval|val|valid|validation|test)[/_](.*[/_])?{ACCEPTANCE_LENGTH_WORD}$",
    re.IGNORECASE,
)
# Checkpoint directory names that carry the step they were saved at: SpecForge classic
# epoch_{e}_step_{s}, SpecForge 0.2.0 <run_id>-step<N>, HF Trainer checkpoint-N.
_CHECKPOINT_STEP = re.compile(r"(?:^|[_-])step[_-]?(\d+)$|^checkpoint-(\d+)$")


def _finite(series: ScalarSeries) -> tuple[np.ndarray, np.ndarray]:
    steps, _walls, values = series.columns()
    keep = np.isfinite(values)
    return np.asarray(steps)[keep], np.asarray(values, dtype=np.float64)[keep]


def _fraction_scale(values: np.ndarray) -> float:
    """0.01 for an accuracy logged in percent (a maximum above 1), else 1."""
    return 0.01 if len(values) and float(values.max()) > 1.0 else 1.0


def _series(scalars: RunScalars, tag: str | None) -> ScalarSeries | None:
    series = scalars.get(tag) if tag is not None else None
    return series if series is not None and len(series) else None


def checkpoint_step(path: str | Path) -> int | None:
    """The step a checkpoint directory's name says it was saved at, or None."""
    match = _CHECKPOINT_STEP.search(Path(path).name)
    if match is None:
        return None
    return int(match.group(1) or match.group(2))


def nearest_checkpoint(checkpoints: Sequence[Path], step: int) -> tuple[int, Path] | None:
    """(its step, the checkpoint) saved nearest ``step`` by the steps in their names, the earlier of
    two as near; None when no name carries a step."""
    saved = [(found, Path(path)) for path in checkpoints if (found := checkpoint_step(path)) is not None]
    if not saved:
        return None
    return min(saved, key=lambda item: (abs(item[0] - step), item[0]))


def best_index(values: np.ndarray) -> int:
    """The index of the largest value, the last of equal bests (DeepSpec #84 logged 3.34 twice: the
    later checkpoint has trained longer for the same acceptance)."""
    return len(values) - 1 - int(np.argmax(values[::-1]))


# --------------------------------------------------------------------------- run start


@dataclass(frozen=True)
class RunStart:
    """The first logged points of a run: whether it started near chance (what a fine-tune from a good
    drafter never does)."""

    tag: str
    first_step: int
    last_step: int  # of the points the start is measured over
    points: int
    accuracy: float | None  # median accuracy, a fraction; None when measured on the loss
    loss: float | None  # median loss; None when measured on the accuracy
    chance: float | None  # the chance loss the loss was compared with

    @property
    def near_chance(self) -> bool:
        if self.accuracy is not None:
            return self.accuracy < START_ACCURACY
        return (
            self.loss is not None and self.chance is not None and self.loss >= (1.0 - CHANCE_BAND_BELOW) * self.chance
        )

    def describe(self) -> str:
        where = f"its first {self.points} logged points, steps {self.first_step}-{self.last_step}"
        if self.accuracy is not None:
            return f"{self.tag} starts at {self.accuracy * 100:.1f} % (median of {where})"
        chance = f", chance {fmt(self.chance)}" if self.chance is not None else ""
        return f"{self.tag} starts at {fmt(self.loss or math.nan)} (median of {where}{chance})"


@dataclass(frozen=True)
class StartingCheckpoint:
    """The drafter a run started from, where it was named (core.diagnose.check_inputs' sources: "flag",
    "triage.toml", "training_state.pt", ... or "discovery"), and the run it is scored for; with the
    checkpoint the checks scored when that is another one (a remap's output, a candidate)."""

    path: Path
    source: str
    run: Path
    checked: Path | None = None  # None: the checks scored ``path`` itself
    checked_remapped_from: Path | None = None  # the checked checkpoint is triage's remap of this one

    @property
    def checks_scored_another(self) -> bool:
        """The checks' replay speaks of another checkpoint than the one the run started from."""
        return self.checked is not None and Path(self.checked) != Path(self.path)

    @property
    def named(self) -> bool:
        """Named as the run's start; discovery only picks one of the run's own saves."""
        return self.source != "discovery"

    def saved_by_the_run(self, start: RunStart) -> bool:
        """Inside the run's directory and saved (by its name) at a step after the run's first point:
        the run's product, not its start (a from-scratch run's triage.toml may name its own last save)."""
        step = checkpoint_step(self.path)
        inside = Path(self.run) in Path(self.path).parents
        return inside and step is not None and step > start.first_step


def run_start(
    scalars: RunScalars, loss_tag: str | None, accuracy_tag: str | None, chance: ChanceLine | None
) -> RunStart | None:
    """The run's start, on its accuracy when it logs one, else on a loss comparable with chance
    (``chance`` None: the loss is a TTT-summed total, not comparable)."""
    series = _series(scalars, accuracy_tag)
    if series is not None:
        steps, values = _finite(series)
        if len(values) >= START_POINTS:
            first = values[:START_POINTS] * _fraction_scale(values)
            return RunStart(
                series.tag,
                int(steps[0]),
                int(steps[START_POINTS - 1]),
                START_POINTS,
                float(np.median(first)),
                None,
                None,
            )
    series = _series(scalars, loss_tag) if chance is not None else None
    if series is not None:
        steps, values = _finite(series)
        if len(values) >= START_POINTS and chance is not None:
            loss = float(np.median(values[:START_POINTS]))
            return RunStart(
                series.tag, int(steps[0]), int(steps[START_POINTS - 1]), START_POINTS, None, loss, chance.value
            )
    return None


# --------------------------------------------------------------------------- TTT positions


def ttt_position_collapse(scalars: RunScalars, trainer: TrainerNames | None) -> Flag | None:
    """Position 1 (and later) far below a position 0 that learned, now and not still climbing."""
    if trainer is None:
        return None
    positions = [(p, s) for p, tag in per_position(scalars.tags(), trainer) if (s := _series(scalars, tag)) is not None]
    by_position = dict(positions)
    if 0 not in by_position or 1 not in by_position:
        return None
    steps0, values0 = _finite(by_position[0])
    steps1, values1 = _finite(by_position[1])
    if np.array_equal(steps0, steps1) and bool((steps0[1:] > steps0[:-1]).all()):
        # Both positions logged at the same steps, each step once (how trainers log them):
        # intersect1d's answer without its two sorts (~0.4 ms of a 10k-point run's flags).
        common, i0 = steps0, np.arange(len(steps0))
        i1 = i0
    else:
        common, i0, i1 = np.intersect1d(steps0, steps1, return_indices=True)
    if len(common) < COLLAPSE_MIN_POINTS:
        return None
    scale = _fraction_scale(np.concatenate([values0, values1]))
    acc0 = ema_smooth(values0[i0] * scale, SIGNAL_SMOOTHING)
    acc1 = ema_smooth(values1[i1] * scale, SIGNAL_SMOOTHING)
    collapsed = (acc0 >= POSITION0_FINE) & (acc1 <= POSITION_COLLAPSE_RATIO * acc0)
    start = streak_start(collapsed, 0)
    if start is None or len(common) - start < COLLAPSE_WINDOW:
        return None
    if acc1[-1] - acc1[-COLLAPSE_WINDOW] > COLLAPSE_MAX_RISE:
        return None  # position 1 is still learning
    fine_at = int(np.argmax(values0[i0] * scale >= POSITION0_FINE))  # as logged: smoothing lags
    if common[-1] - common[start] < COLLAPSE_SPAN_FACTOR * (common[fine_at] - common[0]):
        return None  # position 1 of a from-scratch drafter starts late
    middle = start + (len(common) - start) // 2
    ratio_then, ratio_now = float(acc1[middle] / acc0[middle]), float(acc1[-1] / acc0[-1])
    if ratio_now >= COLLAPSE_RATIO_GROWTH * ratio_then and ratio_now - ratio_then >= COLLAPSE_RATIO_MIN_GAIN:
        return None  # position 1 is gaining on position 0: late, not collapsed
    later = []
    for position, series in positions:
        if position >= 1:
            _, values = _finite(series)
            if len(values):
                later.append(f"{float(ema_smooth(values * scale, SIGNAL_SMOOTHING)[-1]) * 100:.1f}")
    earlier_best = float(acc1[:start].max()) if start else None
    was = (
        f"; it was {earlier_best * 100:.1f} % before"
        if earlier_best is not None and earlier_best > POSITION_COLLAPSE_RATIO * float(acc0[-1])
        else ""
    )
    step = int(common[start])
    tag0, tag1 = by_position[0].tag, by_position[1].tag
    return Flag(
        FlagKind.TTT_POSITION_COLLAPSE,
        Severity.CRITICAL,
        tag1,
        step,
        float(values1[i1][start]),
        f"{tag1} = {acc1[-1] * 100:.1f} % against {tag0} = {acc0[-1] * 100:.1f} % (smoothed, at step "
        f"{int(common[-1])}; below {POSITION_COLLAPSE_RATIO:g} x position 0 since step {step}{was}); positions 1+ "
        f"at {', '.join(later)} %: the later TTT positions do not learn, the server will accept about one token",
    )


# --------------------------------------------------------------------------- resume


def resume_discontinuities(scalars: RunScalars, loss_tag: str | None, accuracy_tag: str | None) -> list[Flag]:
    """A loss or accuracy jump at a step where the run resumed (a step logged again, the steps going
    back, a writer's purge, or another event file going on); one flag per resume step, naming every
    tag that jumped there."""
    jumps: dict[int, list[tuple[str, float, float]]] = {}
    for tag, is_accuracy in ((loss_tag, False), (accuracy_tag, True)):
        series = _series(scalars, tag)
        if series is None:
            continue
        steps, values = _finite(series)
        if is_accuracy:
            values = values * _fraction_scale(values)
        for resume in sorted(set(series.restarts) | set(scalars.purges)):
            jump = _jump(steps, values, resume, is_accuracy)
            if jump is not None:
                jumps.setdefault(resume, []).append((series.tag, *jump))
    flags = []
    for resume, found in sorted(jumps.items()):
        tag, before, after = found[0]
        also = "".join(f"; {t} {fmt(b)} -> {fmt(a)}" for t, b, a in found[1:])
        flags.append(
            Flag(
                FlagKind.RESUME_DISCONTINUITY,
                Severity.WARNING,
                tag,
                resume,
                after - before,
                f"{tag} jumps from {fmt(before)} to {fmt(after)} at step {resume}, where the run resumed "
                f"(the step was logged again, went back, or a new event file began){also}: the model training "
                "after the resume is not the one that was saved (weights, mapping or optimizer state)",
            )
        )
    return flags


def _jump(steps: np.ndarray, values: np.ndarray, resume: int, is_accuracy: bool) -> tuple[float, float] | None:
    """(last value before, first value after) when the points after `resume` leave the line the points
    before it were on by more than the thresholds (a falling loss continued is no jump)."""
    k = int(np.searchsorted(steps, resume, side="left"))
    k += max(int(np.searchsorted(steps, resume, side="right")) - k - 1, 0)  # a repeated step: its last copy is new
    lo, hi = max(0, k - RESUME_WINDOW), k + RESUME_WINDOW
    before, after = values[lo:k], values[k:hi]
    if len(before) < RESUME_MIN_SIDE or len(after) < RESUME_MIN_SIDE:
        return None
    x_before, x_after = steps[lo:k].astype(np.float64), steps[k:hi].astype(np.float64)
    line = np.polyfit(x_before, before, 1) if np.ptp(x_before) > 0 else np.array([0.0, float(np.median(before))])
    jump = float(np.median(after - np.polyval(line, x_after)))
    own = np.polyfit(x_after, after, 1) if np.ptp(x_after) > 0 else np.array([0.0, float(np.median(after))])
    noise = float(
        np.median(np.abs(np.concatenate([before - np.polyval(line, x_before), after - np.polyval(own, x_after)])))
    )
    level = float(np.median(before))
    floor = RESUME_ACCURACY if is_accuracy else max(RESUME_LOSS_NATS, RESUME_LOSS_FRACTION * abs(level))
    if abs(jump) <= max(floor, RESUME_NOISE_MULTIPLE * noise):
        return None
    return float(before[-1]), float(after[0])


# --------------------------------------------------------------------------- evaluation peak


def eval_acceptance_tags(tags: Sequence[str], trainer: TrainerNames | None) -> list[str]:
    """Evaluation acceptance-length tags: the trainer's (not a training-time estimate), then any other."""
    known = [t for t in ordered(tags, trainer.acceptance_length) if "train" not in t] if trainer else []
    return known + [t for t in tags if _EVAL_ACCEPTANCE.match(t) and t not in known]


def eval_peaked(
    scalars: RunScalars,
    loss_tag: str | None,
    trainer: TrainerNames | None,
    checkpoints: Sequence[Path] = (),
) -> Flag | None:
    """The evaluation acceptance length peaked and fell while the training loss kept falling: the
    best drafter is the checkpoint nearest the peak, not the last one (DeepSpec #84)."""
    acceptance = next(
        (s for t in eval_acceptance_tags(scalars.tags(), trainer) if (s := _series(scalars, t)) is not None), None
    )
    loss = _series(scalars, loss_tag)
    if acceptance is None or loss is None:
        return None
    steps, values = _finite(acceptance)
    if len(values) < EVAL_MIN_POINTS:
        return None
    best = best_index(values)
    peak, after = float(values[best]), values[best + 1 :]
    if len(after) < EVAL_AFTER_PEAK or not bool(np.all(after < peak)):
        return None
    last = float(values[-1])
    if last > peak * (1.0 - EVAL_DROP_FRACTION):
        return None
    loss_steps, loss_values = _finite(loss)
    if len(loss_values) < 2:
        return None
    smooth = ema_smooth(loss_values, SIGNAL_SMOOTHING)
    at_peak = float(smooth[min(int(np.searchsorted(loss_steps, steps[best], side="right")) - 1, len(smooth) - 1)])
    now = float(smooth[-1])
    if at_peak - now < LOSS_STILL_FALLING * abs(at_peak):
        return None
    best_step = int(steps[best])
    nearest = nearest_checkpoint(checkpoints, best_step)
    keep = f"; the checkpoint saved nearest it is {nearest[1].name} (step {nearest[0]})" if nearest else ""
    return Flag(
        FlagKind.EVAL_PEAKED,
        Severity.WARNING,
        acceptance.tag,
        best_step,
        peak,
        f"{acceptance.tag} peaked at {fmt(peak)} at step {best_step} and fell to {fmt(last)} "
        f"({(last - peak) / peak * 100:+.1f} %) by step {int(steps[-1])} over {len(after)} evaluations while "
        f"{loss.tag} kept falling ({fmt(at_peak)} -> {fmt(now)}, smoothed): the best drafter is the one at "
        f"step {best_step}{keep}",
    )


def curve_flags(
    scalars: RunScalars,
    *,
    loss_tags: Sequence[str],
    accuracy_tags: Sequence[str],
    trainer: TrainerNames | None,
    checkpoints: Sequence[Path] = (),
) -> list[Flag]:
    """Every curve-shape flag of a run (the run's start is not a flag: see ``run_start``)."""
    loss_tag = loss_tags[0] if loss_tags else None
    accuracy_tag = accuracy_tags[0] if accuracy_tags else None
    flags = [f for f in (ttt_position_collapse(scalars, trainer),) if f is not None]
    flags += resume_discontinuities(scalars, loss_tag, accuracy_tag)
    peaked = eval_peaked(scalars, loss_tag, trainer, checkpoints)
    if peaked is not None:
        flags.append(peaked)
    return flags
