"""Causes read from the run's curves and how it started (core/signals/, core/curve_shapes.py): a loss
that is NaN or diverges, a warm start that did not load, later TTT positions that do not learn."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triage_tui.core.hypotheses.scoring import (
    LINKS,
    MIN_REPLAY_GAP,
    Evidence,
    Hypothesis,
    RunEvidence,
    serving_collapsed,
)

if TYPE_CHECKING:
    from triage_tui.core.curve_shapes import RunStart, StartingCheckpoint


# -- non_finite / diverged ----------------------------------------------------------------------
W_NON_FINITE = 0.9  # a NaN/inf loss is itself the failure
W_DIVERGING = 0.6  # a rising loss: learning rate or data, the flag cannot tell which

# -- warm_start_broken (core/curve_shapes.py measures the run's start) ---------------------------
# A fine-tune from a good drafter starts near that drafter's accuracy; one that starts near zero
# (SpecForge #300: 0.00-0.03 "for a long time" from lmsys/Qwen3-235B-A22B-EAGLE3) trains something
# else: the weights were not loaded, or were loaded under other names. The replay scores the named
# checkpoint on the run's own dumps with the run's own mapping; when it predicts well there
# (WARM_REPLAY_GOOD) while training's first points are near zero, weight W_WARM_REPLAY x the share of
# the replay's accuracy training lost. Direct evidence (one drafter, the same data and labels): 0.8.
W_WARM_REPLAY = 0.8
# "A good drafter": 20 % top-1 or more in the replay, twice core.signals' accuracy-at-chance line.
WARM_REPLAY_GOOD = 0.20
# The run names its starting checkpoint and starts near chance, with no replay to say whether that
# checkpoint is any good and no failed check to explain it: 0.4, below LIKELY, since a named
# checkpoint need not be a good drafter (only the replay can say so).
W_NAMED_START_COLD = 0.4

# -- ttt_position_collapse (core/curve_shapes.py raises the flag) --------------------------------
# The flag is the measurement itself (position 1 under a quarter of a position 0 that learned); 0.85,
# short of certain because a per-position metric can be biased (speculators PR #902: cond_acc low at
# assistant-span boundaries, by points, not by a factor of four).
W_POSITION_COLLAPSE = 0.85


def non_finite(run: RunEvidence) -> Hypothesis | None:
    found = [f for f in run.flags if f.kind == "non_finite"]
    if not found:
        return None
    flag = found[0]
    ev = Evidence()
    ev.add(W_NON_FINITE, f"{flag.tag} at step {flag.step}: {flag.message}")
    if not flag.from_start:
        ev.note("finite before: an update broke it (learning rate, fp16 overflow, a bad batch)")
        return Hypothesis("non_finite", "The loss became NaN or infinite", ev.score(), ev.lines(), None)
    ev.note(
        "never finite: nothing trained before it broke, so no learning rate did it; the model as built "
        "(a config the trainer mishandles: num_layers 2 in speculators #238) or its inputs (NaN in the "
        "hidden-state dumps: SpecForge #104)"
    )
    return Hypothesis(
        "non_finite",
        "The loss is NaN from the first step: the model as built or its inputs, not training",
        ev.score(),
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
    found = [f for f in run.flags if f.kind == "ttt_position_collapse"]
    if found:
        ev.add(W_POSITION_COLLAPSE, f"run flag ttt_position_collapse: {found[0].message}")
        serving_collapsed(ev, run.serving)
    elif (run.metrics or {}).get("per_position_accuracy"):
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
    found = [f for f in run.flags if f.kind == "diverging"]
    if not found:
        return None
    ev = Evidence()
    ev.add(W_DIVERGING, f"{found[0].tag} at step {found[0].step}: {found[0].message}")
    return Hypothesis(
        "diverged", "The run diverged (learning rate too high, or bad batches)", ev.score(), ev.lines(), None
    )
