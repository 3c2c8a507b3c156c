"""Flags from a run's values (not the clock): loss at or above chance, accuracy at chance, NaN,
divergence, plateau.

A loss clearly *above* the chance line means confident and wrong, the signature of an lm_head
whose rows are ordered for another vocab mapping (docs/case.md: loss 18-20, accuracy 2-7 %).
All thresholds below are module constants with the reason next to them; the signals are
computed on TensorBoard's debiased EMA (core.series.ema_smooth) of the finite points, and a
flag describes the run's *current* state: it names the step where the current episode began.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from triage_tui.core.series import RunScalars, ScalarSeries, ema_smooth
from triage_tui.core.watch.signals.chance import ChanceLine
from triage_tui.core.watch.signals.flags import Flag, fmt
from triage_tui.core.watch.signals.kinds import FlagKind, Severity

# EMA weight for the signals. TensorBoard's default slider is 0.6; the flags use a heavier
# 0.8 so one noisy batch can neither raise nor clear a flag, while a 20-point window still
# follows a real change within ~10 points.
SIGNAL_SMOOTHING = 0.8

# Warm-up: a from-scratch drafter starts at ~ln V and needs some steps to leave it, so no
# chance flag is raised before the run has logged WARMUP_POINTS points AND advanced
# WARMUP_STEPS steps (SpecForge logs every 50 steps by default: ~5 points, ~250 steps; the
# story's run would be flagged within minutes of starting). A run whose step never advances
# (global_step=None) uses WARMUP_POINTS_NO_STEPS points instead.
WARMUP_POINTS = 5
WARMUP_STEPS = 100
WARMUP_POINTS_NO_STEPS = 20
# What the warm-up does not hide: a loss above the chance band (below). A fresh lm_head starts at
# ln V plus a few tenths of a nat, never a nat above it, so a loss there is confidently wrong from
# its first points (a drafter whose rows mean other tokens: the story's run starts at 18); it is
# judged from the WARMUP_POINTS-th point on, enough for the EMA to outweigh one noisy batch. A run
# still inside the warm-up carries an info flag ``warming_up`` that says until when.

# Chance band: [ (1 - 0.10) ln V, ln V + max(1.0, 0.10 ln V) ].
# Lower edge: a model that learned only token frequencies already sits at the unigram
# entropy of the draft vocab (6-8 nats for text tokens over 32 000), far below 0.9 ln V
# (9.33); anything above it has learned next to nothing.
# Upper edge: a fresh random lm_head gives ln V plus half the logit variance, a few tenths of
# a nat with standard init; a full nat (or 10 %) above ln V is beyond that: the model is
# confidently wrong (the story's 18-20 against 10.37).
CHANCE_BAND_BELOW = 0.10
ABOVE_CHANCE_FRACTION = 0.10
ABOVE_CHANCE_MIN_NATS = 1.0
# "Sits" at chance: over the last quarter of the post-warm-up points (at least
# TREND_MIN_POINTS, clipped to the warm-up's end), the smoothed loss fell by less than 2 % of
# ln V (0.21 nats at 32 000). A from-scratch run still descending from ln V is learning and
# is left alone; 10 points (~500 steps at SpecForge's log interval) are enough to see a
# descent of 1 nat per 1 000 steps above the noise of the EMA.
TREND_WINDOW_FRACTION = 0.25
TREND_MIN_POINTS = 10
TREND_MAX_DROP_FRACTION = 0.02

# Accuracy at chance: below 10 % top-1 after warm-up. A uniform guess scores 1/V (0.003 %),
# predicting the most frequent tokens a few percent (the story's 2-7 %); a drafter that uses
# the target's hidden states is at 30-80 % on step 0 (fine-tune from a good drafter) or passes
# 10 % within the first few hundred steps from scratch. Not raised while still rising by more
# than 2 points over the trend window. Values above 1 are read as percent.
ACCURACY_CHANCE = 0.10
ACCURACY_MAX_RISE = 0.02

# Diverging: the smoothed loss has risen above its running minimum by more than half the
# minimum (x1.5) and by at least 0.5 nats (so 0.1 -> 0.16 near convergence is not a
# divergence), for DIVERGE_PERSIST consecutive points (one spike is not a divergence).
DIVERGE_RELATIVE = 0.5
DIVERGE_MIN_NATS = 0.5
DIVERGE_PERSIST = 3

# Plateau (info): at least PLATEAU_MIN_POINTS post-warm-up points, and over the last quarter
# (at least 10 points) the smoothed loss moved by under 1 % of its value. Convergence looks
# the same, hence only "info".
PLATEAU_MIN_POINTS = 20
PLATEAU_WINDOW_MIN_POINTS = 10
PLATEAU_MAX_CHANGE = 0.01


@dataclass(frozen=True)
class _Curve:
    """The finite points of one series and their EMA."""

    tag: str
    steps: np.ndarray
    values: np.ndarray
    smooth: np.ndarray
    post_warmup: int  # index of the first point past warm-up (len(values) if none)

    @classmethod
    def of(cls, series: ScalarSeries, scale: float = 1.0) -> _Curve:
        values = np.asarray(series.values, dtype=np.float64)
        finite = np.isfinite(values)
        steps = np.asarray(series.steps)[finite]
        values = values[finite] * scale
        smooth = ema_smooth(values, SIGNAL_SMOOTHING) if len(values) else values
        return cls(series.tag, steps, values, smooth, _warmup_end(steps))

    @property
    def judged(self) -> int:
        return len(self.values) - self.post_warmup


def _warmup_end(steps: np.ndarray) -> int:
    n = len(steps)
    if n == 0:
        return 0
    if steps[-1] == steps[0]:
        return min(n, WARMUP_POINTS_NO_STEPS)
    past = np.nonzero(steps >= steps[0] + WARMUP_STEPS)[0]
    first_by_steps = int(past[0]) if len(past) else n
    return min(n, max(WARMUP_POINTS, first_by_steps))


def streak_start(condition: np.ndarray, start: int) -> int | None:
    """Index where the run of True values that ends at the last point begins (>= start)."""
    if len(condition) == 0 or not condition[-1] or len(condition) <= start:
        return None
    false_at = np.nonzero(~condition[start:])[0]
    return start + (int(false_at[-1]) + 1 if len(false_at) else 0)


def _trend_window(curve: _Curve) -> tuple[float, float]:
    """(smoothed value at the start of the trend window, smoothed value now)."""
    judged = curve.judged
    width = max(TREND_MIN_POINTS, int(math.ceil(judged * TREND_WINDOW_FRACTION)))
    first = max(curve.post_warmup, len(curve.smooth) - width)
    return float(curve.smooth[first]), float(curve.smooth[-1])


def _first_with_points(scalars: RunScalars, tags: Sequence[str]) -> ScalarSeries | None:
    """The series of the first tag that has at least one point."""
    return next((s for t in tags if (s := scalars.get(t)) is not None and len(s)), None)


def value_flags(
    scalars: RunScalars,
    *,
    vocab_size: int,
    loss_tags: Sequence[str],
    accuracy_tags: Sequence[str],
    chance_comparable: bool = True,
    chance: ChanceLine | None = None,
) -> list[Flag]:
    """Every flag that depends on the values only (not on the clock); the loss is compared with
    `chance` (default ln V)."""
    chance = chance if chance is not None else ChanceLine(vocab_size)
    flags: list[Flag] = []
    non_finite = _non_finite([scalars.get(t) for t in dict.fromkeys([*loss_tags, *accuracy_tags])])
    if non_finite is not None:
        flags.append(non_finite)
    loss = _first_with_points(scalars, loss_tags)
    accuracy = _first_with_points(scalars, accuracy_tags)
    if loss is None and accuracy is not None and _Curve.of(accuracy).judged == 0:  # a run that logs no loss
        from_start = _chance_from_start(None, accuracy, chance)
        if from_start is not None:
            flags.append(from_start)
    if loss is not None:
        curve = _Curve.of(loss)
        warming = _warming_up(curve)
        if warming is not None:
            flags.append(warming)
            from_start = _chance_from_start(curve if chance_comparable else None, accuracy, chance)
            if from_start is not None:
                flags.append(from_start)
        if len(curve.values):
            at_chance = _loss_vs_chance(curve, chance) if chance_comparable else None
            diverging = _diverging(curve)
            flags.extend(f for f in (at_chance, diverging) if f is not None)
            if at_chance is None and diverging is None:
                plateau = _plateau(curve)
                if plateau is not None:
                    flags.append(plateau)
    if accuracy is not None:
        flag = _accuracy_at_chance(accuracy, vocab_size)
        if flag is not None:
            flags.append(flag)
    return flags


def _warming_up(curve: _Curve) -> Flag | None:
    """An info flag while no point of the loss is past the warm-up: until when, and what is judged."""
    if not len(curve.values) or curve.judged > 0:
        return None
    first, last, points = int(curve.steps[0]), int(curve.steps[-1]), len(curve.values)
    if last == first:
        until_step, until = None, f"for {WARMUP_POINTS_NO_STEPS} points (its step does not advance)"
    else:
        until_step = first + WARMUP_STEPS
        until = f"until step {until_step} (and {WARMUP_POINTS} points)"
    return Flag(
        FlagKind.WARMING_UP,
        Severity.INFO,
        curve.tag,
        until_step,
        None,
        f"warming up {until}; {points} points to step {last} so far. Loss and accuracy at chance are "
        f"judged after it; a loss above the chance band counts after {WARMUP_POINTS} points",
    )


def _chance_from_start(loss: _Curve | None, accuracy: ScalarSeries | None, chance: ChanceLine) -> Flag | None:
    """A warning, inside the warm-up, for a run none of whose points has left chance.

    The warm-up exists for a drafter trained from scratch, which starts at the chance line; it must
    not hide a run that has never left it (a fine-tune from a trained drafter never starts there,
    and the case this product exists for sits there from its first step). So once WARMUP_POINTS
    points are logged, every one of them within the chance band of the loss (or, without a loss
    comparable to chance, below ACCURACY_CHANCE) is said now, as a warning; the chance rules judge
    it in full after the warm-up. One point below the band (or above it, for accuracy) clears it.
    """
    if loss is not None:
        if len(loss.values) < WARMUP_POINTS:
            return None
        lower = chance.value * (1.0 - CHANCE_BAND_BELOW)
        if float(loss.values.min()) < lower:
            return None
        tag, step, value = loss.tag, int(loss.steps[-1]), float(loss.values[-1])
        said = f"every one of {tag}'s {len(loss.values)} points to step {step} is at or above chance ({chance.label()})"
    else:
        if accuracy is None:
            return None
        values = np.asarray(accuracy.values, dtype=np.float64)
        finite = values[np.isfinite(values)]
        if len(finite) < WARMUP_POINTS:
            return None
        scale = 0.01 if float(finite.max()) > 1.0 else 1.0  # percent
        if float(finite.max()) * scale >= ACCURACY_CHANCE:
            return None
        tag, step, value = accuracy.tag, int(accuracy.steps[-1]), float(finite[-1])
        said = f"every one of {tag}'s {len(finite)} points to step {step} is below {ACCURACY_CHANCE * 100:.0f} %"
    return Flag(
        FlagKind.CHANCE_FROM_START,
        Severity.WARNING,
        tag,
        step,
        value,
        f"{said}: the run has not left chance since its first point. A drafter trained from scratch "
        "starts there; a fine-tune of a trained one never does. Judged in full after the warm-up",
    )


def _non_finite(candidates: Sequence[ScalarSeries | None]) -> Flag | None:
    """One flag for the first NaN/inf among the loss and accuracy tags (primary first on ties).

    One flag, not one per tag: when training blows up every ploss_i and acc_i goes NaN at once.
    """
    found = []  # (step, order, series, first index, count)
    for order, series in enumerate(candidates):
        if series is None or not len(series):
            continue
        bad = ~np.isfinite(np.asarray(series.values))
        if bad.any():
            first = int(np.argmax(bad))
            found.append((int(series.steps[first]), order, series, first, int(bad.sum())))
    if not found:
        return None
    step, _, series, first, count = min(found, key=lambda item: item[:2])
    value = float(series.values[first])
    others = f"; also in {len(found) - 1} other tag{'s' if len(found) > 2 else ''}" if len(found) > 1 else ""
    # From the first logged point, nothing trained before it broke: the model as built or its inputs
    # (speculators #238: num_layers 2, "loss turns to nan from the first step"). After finite points, an
    # update broke it (learning rate, fp16 overflow, a bad batch): the last finite value says how it went.
    if first == 0:
        when = f"from its first logged step {step} (never finite before)"
    else:
        last_finite, last_step = float(series.values[first - 1]), int(series.steps[first - 1])
        when = f"at step {step}, after {first} finite points (last {fmt(last_finite)} at step {last_step})"
    return Flag(
        FlagKind.NON_FINITE,
        Severity.CRITICAL,
        series.tag,
        step,
        value,
        f"{series.tag} = {fmt(value)} {when} ({count} of {len(series)} points not finite{others})",
        from_start=first == 0,
        points=count,
        extent=count / (len(series) - first),
    )


def _loss_vs_chance(curve: _Curve, chance: ChanceLine) -> Flag | None:
    ln_v = chance.value
    upper = ln_v + max(ABOVE_CHANCE_MIN_NATS, ABOVE_CHANCE_FRACTION * ln_v)
    lower = ln_v * (1.0 - CHANCE_BAND_BELOW)
    now_step, now_value = int(curve.steps[-1]), float(curve.smooth[-1])
    chance_text = chance.label()
    above = streak_start(curve.smooth > upper, min(curve.post_warmup, WARMUP_POINTS))
    if above is not None:
        step, value = int(curve.steps[above]), float(curve.values[above])
        return Flag(
            FlagKind.LOSS_ABOVE_CHANCE,
            Severity.CRITICAL,
            curve.tag,
            step,
            value,
            f"{curve.tag} = {fmt(value)} at step {step}, above {chance_text} "
            f"(smoothed {fmt(now_value)} at step {now_step}): confidently wrong",
        )
    at = streak_start((curve.smooth >= lower) & (curve.smooth <= upper), curve.post_warmup)
    if at is None:
        return None
    start_value, end_value = _trend_window(curve)
    if start_value - end_value > TREND_MAX_DROP_FRACTION * ln_v:
        return None  # still descending from chance: learning, just early
    step, value = int(curve.steps[at]), float(curve.values[at])
    return Flag(
        FlagKind.LOSS_AT_CHANCE,
        Severity.CRITICAL,
        curve.tag,
        step,
        value,
        f"{curve.tag} = {fmt(value)} at step {step}, at chance {chance_text} "
        f"(smoothed {fmt(now_value)} at step {now_step}, not falling)",
    )


def _diverging(curve: _Curve) -> Flag | None:
    running_min = np.minimum.accumulate(curve.smooth)
    rise = curve.smooth - running_min
    diverged = rise > np.maximum(DIVERGE_RELATIVE * np.abs(running_min), DIVERGE_MIN_NATS)
    start = streak_start(diverged, 0)
    if start is None or len(diverged) - start < DIVERGE_PERSIST:
        return None
    best = float(running_min[-1])
    step, value = int(curve.steps[start]), float(curve.values[start])
    return Flag(
        FlagKind.DIVERGING,
        Severity.CRITICAL,
        curve.tag,
        step,
        value,
        f"{curve.tag} rising since step {step}: smoothed {fmt(float(curve.smooth[-1]))} "
        f"at step {int(curve.steps[-1])}, best was {fmt(best)}",
        points=len(diverged) - start,
        extent=float(curve.smooth[-1]) / best if best > 0 else None,
    )


def _plateau(curve: _Curve) -> Flag | None:
    if curve.judged < PLATEAU_MIN_POINTS:
        return None
    width = max(PLATEAU_WINDOW_MIN_POINTS, int(math.ceil(curve.judged * TREND_WINDOW_FRACTION)))
    first = len(curve.smooth) - width
    start_value, end_value = float(curve.smooth[first]), float(curve.smooth[-1])
    if abs(end_value - start_value) > PLATEAU_MAX_CHANGE * max(abs(start_value), 1e-12):
        return None
    step = int(curve.steps[first])
    return Flag(
        FlagKind.PLATEAU,
        Severity.INFO,
        curve.tag,
        step,
        float(curve.values[first]),
        f"{curve.tag} flat at {fmt(end_value)} since step {step} "
        f"(changed {fmt(end_value - start_value)} over the last {width} points)",
    )


def _accuracy_at_chance(series: ScalarSeries, vocab_size: int) -> Flag | None:
    values = np.asarray(series.values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    if not len(finite):
        return None
    percent = float(finite.max()) > 1.0
    curve = _Curve.of(series, 0.01 if percent else 1.0)
    at = streak_start(curve.smooth < ACCURACY_CHANCE, curve.post_warmup)
    if at is None:
        return None
    start_value, end_value = _trend_window(curve)
    if end_value - start_value > ACCURACY_MAX_RISE:
        return None  # climbing out of chance
    step, value = int(curve.steps[at]), float(curve.values[at])
    return Flag(
        FlagKind.ACCURACY_AT_CHANCE,
        Severity.CRITICAL,
        curve.tag,
        step,
        value * (100.0 if percent else 1.0),
        f"{curve.tag} = {value * 100:.1f} % at step {step}, below {ACCURACY_CHANCE * 100:.0f} % "
        f"(smoothed {end_value * 100:.1f} % at step {int(curve.steps[-1])}; "
        f"uniform over {vocab_size} is {100 / vocab_size:.3g} %)",
    )
