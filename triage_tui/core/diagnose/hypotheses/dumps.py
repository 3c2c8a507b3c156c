"""Causes in the hidden-state dumps the drafter trains on: a format its fc was not trained to read,
aux layers one off, an empty or misplaced loss mask, NaN/inf states."""

from __future__ import annotations

from triage_tui.core.diagnose.checks.result import ran_details
from triage_tui.core.diagnose.hypotheses.scoring import (
    LINKS,
    MIN_REPLAY_GAP,
    W_SYMPTOM_CORROBORATES,
    Evidence,
    Hypothesis,
    RunEvidence,
    corroborate,
    serving_collapsed,
)
from triage_tui.core.watch.signals.kinds import FlagKind
from triage_tui.core.watch.signals.metrics import RunMetrics

# -- hidden_state_format ----------------------------------------------------------------------
# Weights per issue kind the hidden-state check reports (the dumps against the drafter; the
# drafter against its own config and the target is config_contract's). Shape errors (width, chunk
# count, only the last layer) make training impossible or meaningless: 0.9. A repeated chunk or a
# reversed order keeps shapes valid but feeds states the drafter never saw: 0.75.
W_HIDDEN_ISSUE = {
    "aux_width": 0.9,
    "only_last_layer": 0.9,
    "aux_chunk_count": 0.9,
    "length_mismatch": 0.8,
    "inconsistent_dumps": 0.6,
    "repeated_aux_chunk": 0.75,
    "aux_chunk_order": 0.75,
    "aux_chunk_is_last_hidden": 0.75,
    "aux_layer_mismatch": 0.6,
}
# Replay: another chunk order scores clearly better than the stored one (low, mid, high).
W_REPLAY_CHUNK_ORDER = 0.7

# -- aux_layer_off_by_one ---------------------------------------------------------------------
# One layer off degrades rather than destroys (vLLM PR #43671: position-0 acceptance 10 % vs
# 45 %), so it can explain a poor run but not a loss at chance: 0.6.
W_AUX_OFF_BY_ONE = 0.6

# -- empty_loss_mask --------------------------------------------------------------------------
# Loss and accuracy both exactly 0 are what an all-zero loss mask produces (ploss is a mean over
# all positions; SpecForge #392). Nothing else gives exactly 0.0 for both: 0.9.
W_LOSS_AND_ACC_ZERO = 0.9
# The loss-mask check (core/diagnose/checks/loss_mask.py) found most sampled dumps' masks empty: weight =
# this x the share of them (all: 0.8, a little short of certain because the dumps are a sample of
# the data; half: 0.4, the other half still trains).
W_DUMPS_ALL_MASKS_EMPTY = 0.8
# Most masks cover the prompt (position 0 supervised) or supervise no two adjacent tokens: the
# drafter learns text it will never draft, or almost nothing. Either bends a run rather than
# sends it to chance (the loss curve looks plausible: Megatron-Bridge #3359), so alone it ranks
# but stays below 0.5.
W_MASK_OFF_TEMPLATE = 0.4

# -- non_finite_dumps -------------------------------------------------------------------------
# A sampled dump holds NaN/inf hidden states: every batch that draws it trains on NaN, and one
# such step turns every weight NaN (core/diagnose/checks/dump_values.py). 0.9: short of certain only
# because a trainer may skip non-finite steps.
W_NON_FINITE_DUMPS = 0.9


# -- hidden_before_final_norm (core/diagnose/checks/dump_target.py) ------------------------------------
# The dumps' "last" hidden state, under a key that promises it after the final norm (SpecForge
# ``hidden_state``, ModelOpt ``hidden_states``), breaks the target's final-norm identity while the
# target's own lm_head, applied to rms_norm(h) with its weight and eps, predicts the dumped next
# token at its normal rate and far better than on h raw: the state was captured before the norm
# (a vLLM-based extractor: speculators #313, Model-Optimizer #1846) and the trainer feeds it to
# lm_head as if normed. Two measurements on the target's own weights agree on it: 0.8.
W_NORMED_READING_FITS = 0.8
# rms(h / w) off by an order of magnitude or more: the scale of a residual stream, not of other
# norm weights. Alone it does not say whose states these are (another model's pre-norm states do
# it too): 0.3, which ranks the cause but never convicts alone.
W_PRE_NORM_SCALE = 0.3
HIDDEN_BEFORE_FINAL_NORM_LINKS = (
    "https://github.com/vllm-project/speculators/pull/313",
    "https://github.com/NVIDIA/Model-Optimizer/pull/1846",
)


def hidden_before_final_norm(run: RunEvidence) -> Hypothesis | None:
    """The dumped "last" hidden state was captured before the target's final norm (its key says after);
    listed whenever the dump-target check is among the results."""
    from triage_tui.core.diagnose.checks.dump_target import NAME, DumpTargetDetails

    if NAME not in run.checks:
        return None
    ev = Evidence()
    dumps = ran_details(run.checks, NAME, DumpTargetDetails)
    if dumps is None:
        ev.note(f"dump-target check {run.checks[NAME].status}: {run.checks[NAME].summary}")
    elif dumps.post_norm is not True:
        ev.note(f"the {dumps.dumps_format} dumps store the last layer before the final norm by contract: not this")
    elif dumps.normed_agreement is None:
        ev.note(f"dumps against the target: {run.checks[NAME].summary}")
    else:
        if dumps.pre_norm_reading_fits:
            ev.add(W_NORMED_READING_FITS, dumps.reading_line())
        else:
            ev.note(dumps.reading_line())
        if dumps.norm_scale is not None and dumps.state_rms_spread is not None:
            if dumps.scale_off_by_orders:
                ev.add(W_PRE_NORM_SCALE, dumps.scale_line())
            else:
                ev.note(dumps.scale_line())
    if any(w >= W_NORMED_READING_FITS for w, _ in ev.items):
        corroborate(ev, run.symptoms)
    return Hypothesis(
        "hidden_before_final_norm",
        "The dumped last hidden state was captured before the target's final norm, though its format "
        "says after: the trainer feeds it to lm_head as if normed",
        ev.score(),
        ev.lines(),
        "capture the last hidden state after the target's final norm (the model's output, not the last "
        "decoder layer's) and regenerate the dumps, or have the trainer apply the target's norm first",
        HIDDEN_BEFORE_FINAL_NORM_LINKS,
        checks=(NAME,),
    )


def hidden_state_format(run: RunEvidence) -> Hypothesis:
    ev = Evidence()
    hidden = run.hidden()
    if hidden is not None:
        for issue in hidden.issues:
            weight = W_HIDDEN_ISSUE.get(issue.kind)
            if weight is not None and issue.severity == "error":
                ev.add(weight, issue.message)
        if not ev.structural:
            result = run.checks["hidden_state"]
            ev.note(f"hidden-state check {result.status}: {result.summary}")
    replay = run.replay()
    if replay is not None and replay.accuracy_by_chunk_order:
        orders = replay.accuracy_by_chunk_order
        stored = orders.get("0,1,2")
        best_order, best = max(orders.items(), key=lambda kv: kv[1])
        if stored is not None and best_order != "0,1,2" and best - stored >= MIN_REPLAY_GAP:
            ev.add(
                W_REPLAY_CHUNK_ORDER * (best - stored) / best,
                f"replay accuracy {best:.1%} with aux chunks in order {best_order}, {stored:.1%} as stored",
            )
    corroborate(ev, run.symptoms)
    serving_collapsed(ev, run.serving)
    return Hypothesis(
        "hidden_state_format",
        "The hidden-state dumps are not what the drafter's fc was trained to read",
        ev.score(),
        ev.lines(),
        None,
        checks=("hidden_state", "replay"),
    )


def aux_layer_off_by_one(run: RunEvidence) -> Hypothesis | None:
    found = run.issues("aux_layer_off_by_one")
    if not found:
        return None
    ev = Evidence()
    ev.add(W_AUX_OFF_BY_ONE, found[0].message)
    return Hypothesis(
        "aux_layer_off_by_one",
        "The aux hidden states come from layers one off from those the config names",
        ev.score(),
        ev.lines(),
        None,
    )


def empty_loss_mask(run: RunEvidence) -> Hypothesis:
    from triage_tui.core.diagnose.checks.loss_mask import LossMaskDetails

    ev = Evidence()
    metrics = run.metrics or RunMetrics()
    loss, acc = metrics.loss, metrics.accuracy
    if loss is not None and acc is not None and loss.last == 0.0 and acc.last == 0.0:
        ev.add(
            W_LOSS_AND_ACC_ZERO,
            f"{loss.tag} and {acc.tag} are exactly 0 at the last step (SpecForge #392)",
        )
    mask = ran_details(run.checks, "loss_mask", LossMaskDetails)
    if mask is not None and mask.samples:
        n, fraction = len(mask.samples), mask.fraction or 0.0
        if mask.majority(mask.empty):
            ev.add(
                W_DUMPS_ALL_MASKS_EMPTY * mask.share(mask.empty),
                f"{mask.empty} of {n} sampled dumps have an all-zero loss_mask "
                f"({mask.supervised} of {mask.positions} positions supervised)",
            )
        elif mask.empty:
            ev.note(f"{mask.empty} of {n} sampled dumps have an all-zero loss_mask")
        for count, what in (
            (mask.covering_prompt, "supervise position 0: the mask covers the prompt"),
            (mask.starved, "supervise no two adjacent tokens"),
        ):
            if mask.majority(count):
                ev.add(
                    W_MASK_OFF_TEMPLATE, f"{count} of {n} sampled dumps {what} ({fraction:.1%} of positions supervised)"
                )
        if not ev.items:
            ev.note(f"loss mask: {fraction:.1%} of {mask.positions} positions supervised over {n} sampled dumps")
    elif not ev.items:
        ev.note("no dumped loss mask was measured (the loss_mask check needs dumps that store one: --data)")
    return Hypothesis(
        "empty_loss_mask",
        "The loss mask is empty or does not follow the chat template: no token, or the wrong ones, are trained",
        ev.score(),
        ev.lines(),
        None,
        LINKS["empty_loss_mask"],
        checks=("loss_mask",),
    )


def non_finite_dumps(run: RunEvidence) -> Hypothesis:
    from triage_tui.core.diagnose.checks.dump_values import DumpValuesDetails

    ev = Evidence()
    values = ran_details(run.checks, "dump_values", DumpValuesDetails)
    if values is not None:
        if values.non_finite:
            ev.add(
                W_NON_FINITE_DUMPS,
                f"{values.files_with_non_finite} of {values.samples} sampled dumps hold NaN/inf hidden states; "
                f"{values.non_finite[0].line()}",
            )
            loss = [f for f in run.flags if f.kind == FlagKind.NON_FINITE]
            if loss:
                ev.add(W_SYMPTOM_CORROBORATES, f"run flag non_finite: {loss[0].tag} at step {loss[0].step}")
        else:
            ev.note(f"{values.values} hidden-state values in {values.samples} sampled dumps, all finite")
        for line in values.dtype_findings:
            ev.note(line)
    else:
        ev.note("no hidden-state dumps were read (pass --data)")
    return Hypothesis(
        "non_finite_dumps",
        "The hidden-state dumps hold NaN or inf: every batch that draws one trains on NaN",
        ev.score(),
        ev.lines(),
        None,
        LINKS["non_finite_dumps"],
        checks=("dump_values",),
    )
