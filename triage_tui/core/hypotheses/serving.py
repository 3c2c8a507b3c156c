"""Causes that serving evidence speaks to (core/serving/), with the checks beside it: a config the
engine reads differently, a verifier that is not the named target, a training metric that does not
measure the drafter the server runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triage_tui.core.checks.result import ran_details
from triage_tui.core.hypotheses.scoring import (
    LIKELY,
    LINKS,
    Evidence,
    Hypothesis,
    RunEvidence,
    corroborate,
    serving_collapsed,
)

if TYPE_CHECKING:
    from triage_tui.core.serving.compare import ServingComparison


# -- config_contract ----------------------------------------------------------------------------
# Weights per finding of the config_contract check (core/checks/config_contract.py). A missing or
# mis-sized fc, or aux states switched off beside an fc, make the drafter read nothing it was
# trained on (sglang PR #21272: accept length 1.00): 0.9 / 0.8. A norm the weights and the flags
# disagree on is skipped or left at its initial weights (vLLM PR #38111, SGLang #32226:
# acceptance collapsed): 0.7, like a draft/target hidden mismatch (vLLM #18906). Sizes the config
# states wrongly stop a loader that builds from the config, or make it load the target's head:
# 0.6; aux layers an engine reads one off or from its fallback degrade rather than destroy
# (vLLM PR #43671: position-0 acceptance 10 % vs 45 %): 0.6.
W_CONTRACT_FINDING = {
    "missing_fc": 0.9,
    "fc_width": 0.9,
    "aux_disabled": 0.8,
    "weights_without_flag": 0.7,
    "flag_without_weights": 0.7,
    "draft_hidden_mismatch": 0.7,
    "target_hidden_size_mismatch": 0.6,
    "draft_vocab_size_mismatch": 0.6,
    "draft_vocab_size_missing": 0.6,
    "aux_layer_out_of_range": 0.6,
    "aux_layers_engine_mismatch": 0.6,
    "exclusive_flags": 0.6,
    "target_vocab": 0.6,
    "vocab_size_mismatch": 0.4,
    "flag_not_at_top_level": 0.3,
}
# Missing aux layer ids are right whenever the drafter was trained on the engines' default layers,
# as every trainer's default is, and nothing in the checkpoint says which layers it was trained
# on: alone they are context (no weight). Beside a collapsed serving acceptance they are vLLM PR
# #50170's case (the fallback fed other layers: accept length 1.036): 0.35, which with the
# collapse's own 0.3 passes one half.
W_AUX_IDS_MISSING_WITH_COLLAPSE = 0.35
# A finding that holds for one engine only, when no serving evidence says which engine serves the
# drafter: three quarters of its weight (0.6 -> 0.45), so that one engine's reading alone stays
# below one half; with serving evidence it counts in full for that engine and not for the other.
ONE_ENGINE_UNKNOWN_SERVER = 0.75

# -- target_mismatch from the dumps (core/checks/dump_target.py) ------------------------------
# The dumps' last hidden states break the named target's final-norm identity: they were
# normalised with other weights, i.e. captured from another verifier (or stored before the norm
# under SpecForge's after-the-norm key, which misleads the trainer's TargetHead the same way): 0.6,
# enough to convict alone (a measured deviation past rounding), short of the head's 0.7 because
# it assumes an RMSNorm target.
W_DUMPS_NORM_MISMATCH = 0.6
# The named target's lm_head reads the dumped states as noise (its top-1 matches the dumped next
# token under 10 % of the time): the labels the trainer computes from them are not this
# target's, and neither are the aux states of the same forward pass: 0.7.
W_DUMPS_HEAD_NOISE = 0.7

# -- serving against training (core/serving/compare.py) ---------------------------------------
# Training's per-position accuracies predict far more than the server accepts: the drafter the
# server runs is fine by training's measure, so the verifier it is checked against (a fine-tuned or
# quantized target: SpecForge #533, vLLM #9534) or the engine's reading of it differs.
W_SERVING_BELOW_TRAINING = 0.45
# The server accepts far more than training's accuracies predict: the drafter works, so the
# training number is not measuring it (mis-read metric, labels built with another mapping: the
# founding case, where the drafter "predicted well in inference" while training sat at chance).
W_SERVING_ABOVE_TRAINING = 0.45


def config_contract(run: RunEvidence) -> Hypothesis:
    ev = Evidence()
    contract = run.contract()
    engine = run.serving.serving.engine if run.serving is not None else None
    collapsed = run.serving is not None and run.serving.finding("acceptance_collapsed") is not None
    if contract is not None:
        for finding in contract.findings:
            line = f"{finding.message} ({finding.link})" if finding.link else finding.message
            if finding.kind == "aux_layer_ids_missing":
                if collapsed:
                    ev.add(W_AUX_IDS_MISSING_WITH_COLLAPSE, line)
                else:
                    ev.note(line)
                continue
            weight = W_CONTRACT_FINDING.get(finding.kind)
            if weight is None:
                continue  # missing_lm_head is a hypothesis of its own
            if finding.engine is not None and engine is not None and finding.engine != engine:
                ev.note(f"not the engine serving it ({engine}): {line}")
                continue
            if finding.engine is not None and engine is None:
                weight *= ONE_ENGINE_UNKNOWN_SERVER
            ev.add(weight, line)
        if not ev.items:
            ev.note(
                f"config contract check {run.checks['config_contract'].status}: {run.checks['config_contract'].summary}"
            )
    # A chance-level run corroborates a finding strong enough to explain it, not a weak warning.
    if any(w >= LIKELY for w, _ in ev.items):
        corroborate(ev, run.symptoms)
    serving_collapsed(ev, run.serving)
    if run.serving is not None and not collapsed:
        ev.note(f"serving acceptance length {_length(run.serving)}: not collapsed")
    return Hypothesis(
        "config_contract",
        "The drafter's config asks for something its weights or the serving engine do not give "
        "(aux layer ids, fc width, norm flags, vocab sizes)",
        ev.score(),
        ev.lines(),
        None,
        LINKS["config_contract"],
        checks=("config_contract",),
    )


def target_mismatch(run: RunEvidence) -> Hypothesis:
    from triage_tui.core.checks.dump_target import DumpTargetDetails

    ev = Evidence()
    serving = run.serving
    if serving is not None:
        below = serving.finding("serving_below_training")
        if below is not None:
            ev.add(W_SERVING_BELOW_TRAINING, f"serving: {below.message}")
        elif serving.training is not None:
            ev.note(f"training estimates {serving.training.acceptance_length:.2f}, serving accepts {_length(serving)}")
        else:
            ev.note("the run logs no per-position accuracy (acc_i, full_acc_i, cond_acc_i) to compare serving with")
    dumps = ran_details(run.checks, "dump_target", DumpTargetDetails)
    if dumps is not None:
        if dumps.norm_mismatch:
            ev.add(W_DUMPS_NORM_MISMATCH, dumps.norm_line())
        if dumps.head_noise:
            ev.add(W_DUMPS_HEAD_NOISE, dumps.head_line())
        if not (dumps.norm_mismatch or dumps.head_noise):
            ev.note(f"dumps against the target: {run.checks['dump_target'].summary}")
    if not ev.items:
        ev.note("no serving evidence, and no dumps compared with the target (pass --data and --target)")
    return Hypothesis(
        "target_mismatch",
        "The verifier the drafter learns from or is served with is not the target the run names "
        "(another model, a fine-tuned or quantized copy)",
        ev.score(),
        ev.lines(),
        None,
        LINKS["target_mismatch"],
        checks=("dump_target",),
    )


def training_metric_misread(run: RunEvidence) -> Hypothesis | None:
    above = run.serving.finding("serving_above_training") if run.serving is not None else None
    if above is None:
        return None
    ev = Evidence()
    ev.add(W_SERVING_ABOVE_TRAINING, f"serving: {above.message}")
    return Hypothesis(
        "training_metric_misread",
        "Training's accuracy does not measure the drafter the server runs (labels or metric)",
        ev.score(),
        ev.lines(),
        None,
        LINKS["training_metric_misread"],
    )


def _length(serving: ServingComparison) -> str:
    length = serving.serving.acceptance_length
    return f"{length:.2f}" if length is not None else "unknown"
