"""Causes read from the run's curves and how it started (core/watch/signals/, core/watch/curve_shapes.py): a loss
that is NaN or diverges, a warm start that did not load, later TTT positions that do not learn, a run
trained past its acceptance peak."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from triage_tui.core.diagnose.hypotheses.scoring import (
    LINKS,
    MIN_REPLAY_GAP,
    Evidence,
    Hypothesis,
    RunEvidence,
    serving_collapsed,
)
from triage_tui.core.text import printable
from triage_tui.core.watch.signals.kinds import FlagKind
from triage_tui.core.watch.signals.values import DIVERGE_PERSIST, DIVERGE_RELATIVE

if TYPE_CHECKING:
    from triage_tui.core.watch.best_checkpoint import AcceptanceHistory
    from triage_tui.core.watch.curve_shapes import RunStart, StartingCheckpoint
    from triage_tui.core.watch.signals.flags import Flag


# -- non_finite (the flag counts the points; core/watch/signals/values.py) ----------------------------
# Each non-finite point, as independent evidence: one inf loss can be a step that mixed precision
# overflowed and torch.amp's GradScaler skipped (it skips steps whose gradients are inf and lowers
# its scale), which training survives; several are a run that keeps breaking. 0.3 a point: one
# alone stays well under LIKELY, two reach it (0.51), more reach W_NON_FINITE_MAX.
W_NON_FINITE_POINT = 0.3
# The share of the points from the first bad one on that stayed non-finite, times 0.85: a loss that
# never came back (share 1.0) is the failure itself, one that came back at once was a bad batch.
# Short of 1: the flag sees the logged loss, not the weights (a logging bug can print NaN too).
W_NON_FINITE_STAYED = 0.85
# However much of the loss is NaN, this cause says only *that* it is: at most 0.9, so a check that
# found where the NaN comes from (non_finite_dumps: 0.9 for NaN in the dumps, corroborated by this
# very flag) ranks above it, and the loss's own NaN tops the list only when nothing explains it.
W_NON_FINITE_MAX = 0.9

# -- diverged (the flag measures how far and how long; core/watch/signals/values.py) -------------------
# The flag's bar (the smoothed loss 1.5x its best for DIVERGE_PERSIST = 3 points) is also what a
# loss spike the optimizer recovers from looks like: 0.3 at the bar, rising to 0.9 as the rise goes
# further (DIVERGE_FAR: three times the best, beyond any spike or warm restart of the schedule) and
# lasts longer (DIVERGE_LONG_POINTS: 20 logged points, ~1000 steps at SpecForge's interval). Never
# 1: a rising loss says learning rate or data, the flag cannot tell which.
W_DIVERGING_AT_BAR = 0.3
W_DIVERGING_MAX = 0.9
DIVERGE_BAR = 1.0 + DIVERGE_RELATIVE
DIVERGE_FAR = 3.0
DIVERGE_LONG_POINTS = 20

# -- warm_start_broken (core/watch/curve_shapes.py measures the run's start) ---------------------------
# A fine-tune from a good drafter starts near that drafter's accuracy; one that starts near zero
# (SpecForge #300: 0.00-0.03 "for a long time" from lmsys/Qwen3-235B-A22B-EAGLE3) trains something
# else: the weights were not loaded, or were loaded under other names. The replay scores the named
# checkpoint on the run's own dumps with the run's own mapping; when it predicts well there
# (WARM_REPLAY_GOOD) while training's first points are near zero, weight W_WARM_REPLAY x the share of
# the replay's accuracy training lost. Direct evidence (one drafter, the same data and labels): 0.8.
W_WARM_REPLAY = 0.8
# "A good drafter": 20 % top-1 or more in the replay, twice core.watch.signals' accuracy-at-chance line.
WARM_REPLAY_GOOD = 0.20
# The run names its starting checkpoint and starts near chance, with no replay to say whether that
# checkpoint is any good and no failed check to explain it: 0.4, below LIKELY, since a named
# checkpoint need not be a good drafter (only the replay can say so).
W_NAMED_START_COLD = 0.4

# -- ttt_position_collapse (core/watch/curve_shapes.py raises the flag) --------------------------------
# The flag is the measurement itself (position 1 under a quarter of a position 0 that learned); 0.85,
# short of certain because a per-position metric can be biased (speculators PR #902: cond_acc low at
# assistant-span boundaries, by points, not by a factor of four).
W_POSITION_COLLAPSE = 0.85


def non_finite(run: RunEvidence) -> Hypothesis | None:
    found = [f for f in run.flags if f.kind == FlagKind.NON_FINITE]
    if not found:
        return None
    flag = found[0]
    ev = Evidence()
    points = flag.points if flag.points is not None else 1
    ev.add(1.0 - (1.0 - W_NON_FINITE_POINT) ** points, f"{flag.tag} at step {flag.step}: {flag.message}")
    if flag.extent is not None:
        ev.add(
            W_NON_FINITE_STAYED * flag.extent,
            f"{flag.extent:.0%} of the points from step {flag.step} on are not finite"
            + (": it never came back" if flag.extent >= 1.0 else ""),
        )
    score = min(ev.score(), W_NON_FINITE_MAX)
    if not flag.from_start:
        ev.note("finite before: an update broke it (learning rate, fp16 overflow, a bad batch)")
        return Hypothesis("non_finite", "The loss became NaN or infinite", score, ev.lines(), None)
    ev.note(
        "never finite: nothing trained before it broke, so no learning rate did it; the model as built "
        "(a config the trainer mishandles: num_layers 2 in speculators #238) or its inputs (NaN in the "
        "hidden-state dumps: SpecForge #104)"
    )
    return Hypothesis(
        "non_finite",
        "The loss is NaN from the first step: the model as built or its inputs, not training",
        score,
        ev.lines(),
        None,
        LINKS["non_finite_from_start"],
    )


def warm_start_broken(run: RunEvidence) -> Hypothesis:
    """A fine-tune from a good drafter whose first logged points are near chance (SpecForge #300)."""
    ev = Evidence()
    start, checkpoint = run.start, run.starting_checkpoint
    if start is None:
        ev.note("the run logged too few points of accuracy or loss to judge how it started")
    elif not start.near_chance:
        ev.note(f"{start.describe()}: not near chance")
    elif checkpoint is None or not checkpoint.named:
        ev.note(
            f"{start.describe()}; the run names no starting checkpoint (--checkpoint, triage.toml or the "
            "trainer's own record): a run from scratch starts there too"
        )
    elif checkpoint.saved_by_the_run(start):
        ev.note(
            f"{start.describe()}; {checkpoint.path.name} was saved by this run after it started, not where it started"
        )
    elif checkpoint.checks_scored_another:
        _another_checkpoint_checked(ev, start, checkpoint)
    else:
        _warm_start_evidence(ev, run, start, checkpoint)
    return Hypothesis(
        "warm_start_broken",
        "The fine-tune did not start from the drafter it names: its first points are near chance",
        ev.score(),
        ev.lines(),
        None,
        LINKS["warm_start_broken"],
        checks=("replay",),
    )


def _another_checkpoint_checked(ev: Evidence, start: RunStart, checkpoint: StartingCheckpoint) -> None:
    """The checks scored another checkpoint than the run's start: their replay says what that one would
    give, nothing of how the run started, so it weighs nothing here (a remap's output replays well
    because it is repaired, which a run that started before the repair never saw)."""
    checked = Path(checkpoint.checked or checkpoint.path)
    start_name = f"{checkpoint.path.name} ({checkpoint.source})"
    remapped_from = checkpoint.checked_remapped_from
    if remapped_from is not None and Path(remapped_from) == Path(checkpoint.path):
        what = f"{checked.name}, triage's remap of the run's start {start_name} onto the run's mapping"
    else:
        what = f"{checked.name}, not the run's start {start_name}"
    ev.note(
        f"{start.describe()}; the checks scored {what}: their replay says what {checked.name} would give, "
        f"not how the run started (a check of {checkpoint.path.name} itself judges that)"
    )


def _warm_start_evidence(ev: Evidence, run: RunEvidence, start: RunStart, checkpoint: StartingCheckpoint) -> None:
    name = f"{checkpoint.path.name} ({checkpoint.source})"
    failed = [name for name, result in run.checks.items() if result.status == "fail" and name != "replay"]
    if failed:
        ev.note(f"{start.describe()}; the failed {', '.join(failed)} check explains a cold start from {name}")
        return
    replay = run.replay()
    scored = replay.accuracy_run_mapping if replay is not None else None
    if replay is None or scored is None:
        ev.add(W_NAMED_START_COLD, f"{start.describe()}, though the run names {name} as its start")
        return
    line = (
        f"{start.describe()}, yet the replay scores its starting checkpoint {name} at {scored:.1%} top-1 on "
        f"the run's dumps with the run's mapping ({replay.tokens} tokens)"
    )
    lost = scored - (start.accuracy or 0.0)
    if scored >= WARM_REPLAY_GOOD and lost >= MIN_REPLAY_GAP:
        ev.add(W_WARM_REPLAY * lost / scored, line)
    else:
        ev.note(f"{line}: not a good drafter on this data, so a cold start is what it gives")


def ttt_position_collapse(run: RunEvidence) -> Hypothesis:
    """Later TTT positions far below a position 0 that learned (speculators PR #818, SpecForge #424)."""
    ev = Evidence()
    found = [f for f in run.flags if f.kind == FlagKind.TTT_POSITION_COLLAPSE]
    if found:
        ev.add(W_POSITION_COLLAPSE, f"run flag ttt_position_collapse: {found[0].message}")
        serving_collapsed(ev, run.serving)
    elif run.metrics is not None and run.metrics.per_position_accuracy:
        ev.note("the per-position accuracies after position 0 hold up")
    else:
        ev.note("the run logs no per-position accuracy (acc_i, full_acc_i, cond_acc_i)")
    return Hypothesis(
        "ttt_position_collapse",
        "The later TTT positions do not learn while position 0 does: the training loop feeds them what "
        "inference does not",
        ev.score(),
        ev.lines(),
        None,
        LINKS["ttt_position_collapse"],
    )


def diverged(run: RunEvidence) -> Hypothesis | None:
    found = [f for f in run.flags if f.kind == FlagKind.DIVERGING]
    if not found:
        return None
    flag = found[0]
    ev = Evidence()
    ev.add(_diverging_weight(flag), f"{flag.tag} at step {flag.step}: {flag.message}")
    return Hypothesis(
        "diverged", "The run diverged (learning rate too high, or bad batches)", ev.score(), ev.lines(), None
    )


# -- past_acceptance_peak (a held-out acceptance estimate over the run: scoring.AcceptanceHistory) --
# deepseek-ai/DeepSpec#84: an Eagle3 drafter's accept length peaked at 3.34 (4.6 epochs) and fell to
# 3.18 (-4.9 %) by the end over four evaluations, all below the peak, while the training loss kept
# falling; the same schedule's DSpark and DFlash kept rising. A drop of 3 % or more from the peak,
# in every one of at least two evaluations after it, is past the noise of a deterministic evaluation
# (temperature 0, fixed prompts: re-running a checkpoint gives the same number) and short of #84's.
PAST_PEAK_DROP = 0.03
MIN_EVALS_AFTER_PEAK = 2
# With the loss still falling past the peak, the drafter is fitting its training data at the expense
# of what the server accepts (#84's signature): 0.6, enough alone; the fix is the checkpoint nearest
# the peak. Without the loss to tell it from a run going wrong, 0.45; with the loss rising too, the
# run diverged (the `diverged` cause), and this adds nothing.
W_PAST_PEAK = 0.6
W_PAST_PEAK_LOSS_UNKNOWN = 0.45


def past_acceptance_peak(run: RunEvidence) -> Hypothesis | None:
    """The run kept training after its held-out acceptance peaked (DeepSpec #84)."""
    history = run.acceptance
    points = sorted(p for p in history.points if math.isfinite(p[1])) if history is not None else []
    if history is None or len(points) < MIN_EVALS_AFTER_PEAK + 1:
        return None
    ev = Evidence()
    nearest = _past_peak_evidence(ev, history, points)
    where = f": use {printable(nearest[1].name)} (step {nearest[0]})" if nearest is not None else ""
    return Hypothesis(
        "past_acceptance_peak",
        f"The run trained past its acceptance peak ({printable(history.metric)} fell while training went on){where}",
        ev.score(),
        ev.lines(),
        None,
        LINKS["past_acceptance_peak"],
    )


def _past_peak_evidence(
    ev: Evidence, history: AcceptanceHistory, points: list[tuple[int, float]]
) -> tuple[int, Path] | None:
    """Weigh the drop after the peak; the checkpoint nearest the peak when the run is past it."""
    metric, loss_tag = printable(history.metric), printable(history.loss_tag)
    # The last of equal maxima: it is as good and the latest point training was still there
    # (DeepSpec #84 reads 3.34 at 2.3 and 4.6 epochs and calls 4.6 the peak).
    peak_at = max(range(len(points)), key=lambda i: (points[i][1], i))
    peak_step, peak = points[peak_at]
    after = points[peak_at + 1 :]
    last_step, last = points[-1]
    drop = (peak - last) / peak if peak > 0 else 0.0
    line = (
        f"{metric} peaked at {peak:.3g} (step {peak_step}) and is {last:.3g} at step {last_step} "
        f"({-drop:+.1%}) over {len(after)} evaluation{'s' if len(after) != 1 else ''} after the peak"
    )
    if len(after) < MIN_EVALS_AFTER_PEAK or drop < PAST_PEAK_DROP or any(value >= peak for _, value in after):
        needs = f"{MIN_EVALS_AFTER_PEAK}+ evaluations after it, all below, the last {PAST_PEAK_DROP:.0%} under"
        ev.note(f"{line}: not past the peak (needs {needs})")
        return None
    loss = _loss_between(history, peak_step, last_step)
    if loss is None:
        ev.add(W_PAST_PEAK_LOSS_UNKNOWN, f"{line}; the run logs no loss to tell overfitting from a run going wrong")
    elif loss[1] < loss[0]:
        ev.add(W_PAST_PEAK, f"{line}, while {loss_tag} kept falling ({loss[0]:.3g} -> {loss[1]:.3g})")
    else:
        ev.note(
            f"{line}, and {loss_tag} rose too ({loss[0]:.3g} -> {loss[1]:.3g}): a run going wrong, not past its peak"
        )
        return None
    nearest = _nearest_checkpoint(history.checkpoints, peak_step)
    if nearest is None:
        ev.note("no saved checkpoint is known near the peak")
    else:
        ev.note(f"the checkpoint nearest the peak: {printable(nearest[1])} (step {nearest[0]})")
    return nearest


def _loss_between(history: AcceptanceHistory, start: int, end: int) -> tuple[float, float] | None:
    """The loss at (or last before) two steps; None when the run logged none there."""
    if not history.loss:
        return None
    points = sorted(p for p in history.loss if math.isfinite(p[1]))

    def at(step: int) -> float | None:
        before = [value for s, value in points if s <= step]
        return before[-1] if before else None

    first, last = at(start), at(end)
    return (first, last) if first is not None and last is not None else None


def _nearest_checkpoint(checkpoints: tuple[tuple[int, Path], ...], step: int) -> tuple[int, Path] | None:
    """The saved checkpoint closest to ``step``; of two as close, the earlier (it has not trained past it)."""
    if not checkpoints:
        return None
    return min(checkpoints, key=lambda c: (abs(c[0] - step), c[0]))


def _diverging_weight(flag: Flag) -> float:
    """W_DIVERGING_AT_BAR at the flag's bar, up to W_DIVERGING_MAX as the rise goes as far as
    DIVERGE_FAR and lasts DIVERGE_LONG_POINTS (half of the way for each)."""
    far = 0.0 if flag.extent is None else (flag.extent - DIVERGE_BAR) / (DIVERGE_FAR - DIVERGE_BAR)
    long = 0.0 if flag.points is None else (flag.points - DIVERGE_PERSIST) / (DIVERGE_LONG_POINTS - DIVERGE_PERSIST)
    strength = (min(max(far, 0.0), 1.0) + min(max(long, 0.0), 1.0)) / 2
    return W_DIVERGING_AT_BAR + (W_DIVERGING_MAX - W_DIVERGING_AT_BAR) * strength
