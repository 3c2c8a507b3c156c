"""Causes in the checkpoint's head and its vocab mapping: rows ordered for another mapping, a verifier
mask that selects other logits, a mapping not saved, an identity mapping, a mapping that drifts
between checkpoints, no lm_head at all."""

from __future__ import annotations

from triage_tui.core.diagnose.hypotheses.scoring import (
    LIKELY,
    LINKS,
    MIN_REPLAY_GAP,
    Evidence,
    Hypothesis,
    RunEvidence,
    corroborate,
    serving_collapsed,
)
from triage_tui.core.watch.signals.kinds import FlagKind

# -- vocab_mapping_mismatch -------------------------------------------------------------------
# The vocab check measured the share of draft positions whose target token differs; weight =
# W_VOCAB_CHECK x that share. 0.9 and not 1: a differing mapping is certain, that it is what
# broke *this* run is not (the run may not have started from that checkpoint's head).
W_VOCAB_CHECK = 0.9
# Replay: the checkpoint scores far better with its own mapping than with the run's on the
# run's own data. Weight = W_REPLAY_GAP x relative gap. It is direct evidence that the labels,
# not the model, are wrong, so it is nearly as strong as the check itself.
W_REPLAY_GAP = 0.7
# Loss above chance (ln Vd) means confident *wrong* predictions: a trained head whose rows mean
# other tokens does exactly that, a random head sits at chance. So it points at this cause
# even with no check run, but alone it cannot pass 0.5 (a diverged run does it too). When the
# vocab check ran and passed (the mappings agree), the rows mean their tokens and the symptom
# points elsewhere: it is then shown as a note, with no weight.
W_ABOVE_CHANCE_ALONE = 0.35

# -- verifier_mask_mismatch -------------------------------------------------------------------
# A failed required invariant of the mask the trainer uses. Non-ascending ids with t2d masking
# misalign every row silently (SpecForge classic `specforge/core/eagle3.py`, `_compute_target_p`): 0.9. A mask whose
# count or length is
# wrong usually crashes (EAGLE #248) rather than trains at chance: 0.6. A stored mask that
# disagrees with d2t selects other target columns than the rows mean: 0.8.
W_MASK_INVARIANT = {
    "ascending": 0.9,
    "count": 0.6,
    "length": 0.6,
    "stored_t2d": 0.8,
    "in_range": 0.6,
    "unique": 0.6,
}
# The checkpoint's mask differs from the run's: a consequence of a different mapping, which
# vocab_mapping_mismatch already explains and remap fixes; small on its own.
W_MASKS_DIFFER = 0.1
# The invariants a t2d of all ones fails; with an all-zero d2t beside it (SpecForge's buffers as
# constructed) they restate the identity mapping and carry no weight here.
DEFAULT_BUFFER_INVARIANTS = ("count", "stored_t2d")
# Most verifier argmaxes fall outside the run's draft vocab: the vocab was built from other
# data (or another tokenizer), so most positions are dropped from the loss by position_mask.
# Weak: it starves training, it does not make the loss random or push it above chance.
W_ARGMAX_OUTSIDE = 0.15
ARGMAX_OUTSIDE_THRESHOLD = 0.5

# -- mapping_not_in_checkpoint / identity_mapping / mapping_drift ------------------------------
# A run checkpoint without d2t whose draft vocab is smaller than the target's is served with draft
# id i as target id i (NeMo Automodel PR #2447: acceptance collapsed): 0.85, not more because the
# run may publish its drafter through another exporter that writes the mapping. The starting
# drafter without d2t: its rows were trained for a mapping nobody can read back, so the vocab
# comparison cannot run: 0.6.
W_NOT_IN_RUN_CHECKPOINT = 0.85
W_NOT_IN_STARTING_DRAFTER = 0.6
# An all-zero d2t with Vd < V: the draft vocab is target ids 0..Vd-1, which no trainer builds on
# purpose (verl-SpeCo PR #66: SpecForge's and verl's defaults before a mapping is installed); the
# drafter can never propose a later id. 0.8: a tokenizer whose first ids are its most frequent
# tokens makes it a poor rather than a broken drafter.
W_IDENTITY = 0.8
# The mapping changed between two of the run's checkpoints: every changed position's row was
# trained for another token before the change. Weight = W_DRIFT x the share of positions changed,
# the vocab check's rule (a regenerated sorted vocab changes almost every position).
W_DRIFT = 0.9

# -- missing_lm_head ----------------------------------------------------
W_MISSING_LM_HEAD = 0.9  # a random head: accept length 1.00 (sglang PR #27908)
# ... which corroborates a mapping mismatch a check already found (labels, not model, are wrong).
W_SERVING_ABOVE_CORROBORATES = 0.3


def vocab_mapping_mismatch(run: RunEvidence) -> Hypothesis:
    ev = Evidence()
    vocab_result = run.checks.get("vocab_mapping")
    vocab = run.vocab()
    if vocab is not None:
        fraction = vocab.positional_match_fraction
        line = (
            f"{vocab.positional_match} / {vocab.draft_vocab_size} draft positions map to the same target "
            f"token in the checkpoint's and the run's mapping ({fraction:.2%})"
        )
        if vocab_result is not None and vocab_result.status == "fail":
            ev.add(W_VOCAB_CHECK * (1.0 - fraction), line)
            tokens = vocab.training_tokens
            if tokens is not None and tokens.same_row_fraction is not None:
                ev.note(
                    f"{tokens.same_row_fraction:.1%} of {tokens.tokens} loss-masked training tokens land "
                    f"on the lm_head row trained for them"
                )
        else:
            ev.note(line)
    replay = run.replay()
    if replay is not None:
        own, other = replay.accuracy_checkpoint_mapping, replay.accuracy_run_mapping
        if other is not None:
            line = (
                f"replay on {replay.tokens} tokens: accuracy {own:.1%} with the checkpoint's mapping, "
                f"{other:.1%} with the run's"
            )
            if own - other >= MIN_REPLAY_GAP:
                ev.add(W_REPLAY_GAP * (own - other) / own, line)
            else:
                ev.note(line)
    above = [f for f in run.flags if f.kind == FlagKind.LOSS_ABOVE_CHANCE]
    mappings_agree = vocab is not None and vocab_result is not None and vocab_result.status == "pass"
    if above and mappings_agree:
        ev.note(
            f"run flag loss_above_chance: {above[0].message}; the vocab check found the mappings in agreement, "
            "so the symptom does not point at them"
        )
    elif above:
        ev.add(W_ABOVE_CHANCE_ALONE, f"run flag loss_above_chance: {above[0].message}")
    else:
        corroborate(ev, run.symptoms)
    serving_above = run.serving.finding("serving_above_training") if run.serving is not None else None
    if serving_above is not None:
        if ev.structural:
            ev.add(W_SERVING_ABOVE_CORROBORATES, f"serving: {serving_above.message}")
        else:
            ev.note(f"serving: {serving_above.message}")
    # The vocab check passed: the drafter's rows are in the run's order, so a collapse comes from
    # another of the causes it raises (the launch, the aux states, the config), not from this one.
    serving_collapsed(ev, run.serving, "the vocab check found the mappings in agreement" if mappings_agree else None)
    return Hypothesis(
        "vocab_mapping_mismatch",
        "The checkpoint's lm_head rows are ordered for another vocab mapping than the run's",
        ev.score(),
        ev.lines(),
        "remap",
        checks=("vocab_mapping", "replay"),
    )


def verifier_mask_mismatch(run: RunEvidence) -> Hypothesis:
    ev = Evidence()
    mask = run.mask()
    # A t2d of all ones beside an all-zero d2t is SpecForge's untouched default buffers: the mask
    # is as wrong as the d2t because no mapping was ever installed, which identity_mapping weighs.
    health = run.mapping_health()
    default_buffers = health is not None and any(f.default_buffers for f in health.found("identity_mapping"))
    if mask is not None:
        for inv in mask.invariants:
            if inv.ok:
                continue
            line = inv.line()
            if default_buffers and inv.kind in DEFAULT_BUFFER_INVARIANTS:
                ev.note(f"{line} (SpecForge's default buffers: see identity_mapping)")
                continue
            if not inv.required:
                if inv.kind == "masks_equal":
                    ev.add(W_MASKS_DIFFER, line)
                else:
                    ev.note(line)
                continue
            ev.add(W_MASK_INVARIANT.get(inv.kind, 0.6), line)
        outside = mask.target_argmax_outside_draft_vocab
        share = outside.run if outside is not None else None
        if share is not None and share > ARGMAX_OUTSIDE_THRESHOLD:
            ev.add(W_ARGMAX_OUTSIDE, f"{share:.1%} of verifier argmaxes fall outside the run's draft vocab")
        if not ev.items:
            result = run.checks["verifier_mask"]
            ev.note(f"verifier-mask check {result.status}: {result.summary}")
    # Only a failed required invariant is structural evidence here; differing masks follow from
    # a differing mapping and should not pull in the chance-level symptom.
    if any(w >= LIKELY for w, _ in ev.items):
        corroborate(ev, run.symptoms)
    return Hypothesis(
        "verifier_mask_mismatch",
        "The verifier mask (t2d) does not select target logits in the drafter's row order",
        ev.score(),
        ev.lines(),
        None,
        checks=("verifier_mask", "replay"),
    )


def mapping_not_in_checkpoint(run: RunEvidence) -> Hypothesis:
    ev = Evidence()
    health = run.mapping_health()
    if health is not None:
        for finding in health.found("mapping_not_in_checkpoint"):
            weight = W_NOT_IN_RUN_CHECKPOINT if finding.role == "run checkpoint" else W_NOT_IN_STARTING_DRAFTER
            ev.add(weight, finding.message)
        for finding in health.found("unknown_target_vocab"):
            ev.note(finding.message)
        if any(w > 0 for w, _ in ev.items):
            corroborate(ev, run.symptoms)
        else:
            ev.note(f"every checkpoint read holds its d2t, or needs none ({len(health.checkpoints)} read)")
    if health is None or ev.structural:
        # A drafter served without its d2t collapses (NeMo Automodel #2447); with every checkpoint
        # read holding one, a collapse points elsewhere.
        serving_collapsed(ev, run.serving)
    return Hypothesis(
        "mapping_not_in_checkpoint",
        "A checkpoint holds no d2t/t2d while its draft vocab is smaller than the target's: "
        "engines serve draft id i as target id i",
        ev.score(),
        ev.lines(),
        None,
        LINKS["mapping_not_in_checkpoint"],
        checks=("mapping_health",),
    )


def identity_mapping(run: RunEvidence) -> Hypothesis:
    ev = Evidence()
    health = run.mapping_health()
    if health is not None:
        for finding in health.found("identity_mapping"):
            ev.add(W_IDENTITY, finding.message)
        if ev.structural:
            corroborate(ev, run.symptoms)
        else:
            ev.note("no mapping read is the identity (an all-zero d2t) with a draft vocab smaller than the target's")
    return Hypothesis(
        "identity_mapping",
        "The vocab mapping is the identity (d2t all zeros): the draft vocab is the first Vd target ids",
        ev.score(),
        ev.lines(),
        None,
        LINKS["identity_mapping"],
        checks=("mapping_health",),
    )


def mapping_drift(run: RunEvidence) -> Hypothesis:
    ev = Evidence()
    health = run.mapping_health()
    if health is not None:
        for finding in health.found("mapping_drift"):
            ev.add(W_DRIFT * (finding.fraction or 0.0), finding.message)
        if any(w >= LIKELY for w, _ in ev.items):
            corroborate(ev, run.symptoms)
        if not ev.items:
            steps = len(health.drift)
            ev.note(
                f"the mapping is the same in all {steps + 1} run checkpoints that hold one"
                if steps
                else "fewer than two run checkpoints hold a mapping: nothing to compare"
            )
    return Hypothesis(
        "mapping_drift",
        "The vocab mapping changed between the run's checkpoints (a resume regenerated it)",
        ev.score(),
        ev.lines(),
        None,
        LINKS["mapping_drift"],
        checks=("mapping_health",),
    )


def missing_lm_head(run: RunEvidence) -> Hypothesis | None:
    contract = run.contract()
    found = [f for f in contract.findings if f.kind == "missing_lm_head"] if contract is not None else []
    if not found:
        return None
    ev = Evidence()
    ev.add(W_MISSING_LM_HEAD, found[0].message)
    corroborate(ev, run.symptoms)
    return Hypothesis(
        "missing_lm_head",
        "The checkpoint has no lm_head: the draft head starts random",
        ev.score(),
        ev.lines(),
        None,
        checks=("config_contract",),
    )
