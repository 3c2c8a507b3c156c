"""Causes that serving evidence speaks to (core/watch/serving/), with the checks beside it: a config the
engine reads differently, a drafter launched under the wrong algorithm or built as another backbone
or rotated with another RoPE layout, a verifier that is not the named target, a training metric that
does not measure the drafter the server runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triage_tui.core.diagnose.checks.result import ran_details
from triage_tui.core.diagnose.hypotheses.scoring import (
    LIKELY,
    LINKS,
    Evidence,
    Hypothesis,
    RunEvidence,
    corroborate,
    serving_collapsed,
)
from triage_tui.core.watch.serving.evidence import ENGINES

if TYPE_CHECKING:
    from triage_tui.core.watch.serving.compare import ServingComparison


# -- config_contract ----------------------------------------------------------------------------
# Weights per finding of the config_contract check (core/diagnose/checks/config_contract.py). A missing or
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

# -- target_mismatch from the dumps (core/diagnose/checks/dump_target.py) ------------------------------
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

# -- serving against training (core/watch/serving/compare.py) ---------------------------------------
# Training's per-position accuracies predict far more than the server accepts: the drafter the
# server runs is fine by training's measure, so the verifier it is checked against (a fine-tuned or
# quantized target: SpecForge #533, vLLM #9534) or the engine's reading of it differs.
W_SERVING_BELOW_TRAINING = 0.45
# ... but not when serving collapsed (acceptance ~1.0, every later position ~0): a fine-tuned or
# quantized verifier still agrees with its drafter on the easy tokens, so it lowers acceptance
# (vllm-project/vllm-ascend#5974: "drop significantly" on a QuaRot copy) rather than zeroing it,
# while the structural causes zero it (a mapping not saved: NeMo Automodel #2447; aux layers read
# otherwise: vLLM #50170, 1.036; the EAGLE flag: SGLang #21272, 1.00). The gap then says less about
# the verifier: 0.2, below the 0.3 a collapse gives each structural cause, so they rank first.
W_SERVING_BELOW_TRAINING_COLLAPSED = 0.2
# The server accepts far more than training's accuracies predict: the drafter works, so the
# training number is not measuring it (mis-read metric, labels built with another mapping: the
# founding case, where the drafter "predicted well in inference" while training sat at chance).
W_SERVING_ABOVE_TRAINING = 0.45


def config_contract(run: RunEvidence) -> Hypothesis:
    ev = Evidence()
    contract = run.contract()
    # Serving evidence that is not scored (synthetic, not measured) is skipped; a benchmark's profile
    # ("modelopt") names no engine whose reading the check knows.
    scored = run.serving is not None and run.serving.serving.scored
    engine = run.serving.serving.engine if run.serving is not None and scored else None
    engine = engine if engine in ENGINES else None
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
    if run.serving is not None and not scored:
        ev.note(f"serving evidence not scored: {run.serving.serving.not_scored()}")
    elif run.serving is not None and not collapsed:
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
    from triage_tui.core.diagnose.checks.dump_target import DumpTargetDetails

    ev = Evidence()
    serving = run.serving
    if serving is not None and not serving.serving.scored:
        ev.note(f"serving evidence not scored: {serving.serving.not_scored()}")
    elif serving is not None:
        below = serving.finding("serving_below_training")
        if below is not None:
            collapsed = serving.finding("acceptance_collapsed") is not None
            ev.add(
                W_SERVING_BELOW_TRAINING_COLLAPSED if collapsed else W_SERVING_BELOW_TRAINING,
                f"serving: {below.message}"
                + ("; a collapse to ~1 points at the drafter's structure before the verifier" if collapsed else ""),
            )
        elif serving.training is not None:
            ev.note(f"training estimates {serving.training.acceptance_length:.2f}, serving accepts {_length(serving)}")
        else:
            ev.note("the run logs no per-position accuracy (acc_i, full_acc_i, cond_acc_i) to compare serving with")
    dumps = ran_details(run.checks, "dump_target", DumpTargetDetails)
    if dumps is not None and dumps.pre_norm_reading_fits:
        # The target reads the states as its own once normed: a capture before the final norm
        # (hidden_before_final_norm), not another verifier.
        ev.note(f"the target reads the dumped states as its own after its final norm: {dumps.reading_line()}")
    elif dumps is not None:
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


# -- algorithm_flag (core/formats/engine_launch.py reads the launch) ----------------------------
# SGLang launched with --speculative-algorithm EAGLE (or NEXTN, its alias) while the drafter checked
# is an EAGLE-3 one (it has fc): no aux states are captured and fc is skipped, accept length exactly
# 1.00 with no warning (sglang PR #21272; sglang 0.5.23 still resolves the flag as given). Direct
# evidence, the flag and the drafter both read: 0.8.
W_EAGLE_FLAG_EAGLE3_DRAFTER = 0.8
# ... with only the drafter's path saying "eagle3" (the test vLLM's SpeculativeConfig uses to pick
# eagle3 from a model name): 0.45, below one half until a collapsed acceptance or the checkpoint agrees.
W_EAGLE_FLAG_NAMED_EAGLE3 = 0.45
EAGLE3_ALGORITHM = "EAGLE3"


def algorithm_flag(run: RunEvidence) -> Hypothesis | None:
    """An EAGLE-3 drafter served under SGLang's EAGLE algorithm flag (sglang PR #21272)."""
    launches = [launch for launch in run.launches if launch.engine == "sglang"]
    if not launches:
        return None
    ev = Evidence()
    contract = run.contract()
    eagle3_checked = contract is not None and contract.fc_in_features is not None
    for launch in launches:
        if launch.algorithm == EAGLE3_ALGORITHM:
            ev.note(f"{launch.describe()}: the flag an EAGLE-3 drafter needs")
        elif launch.algorithm != "EAGLE":
            ev.note(f"{launch.describe()}")
        elif eagle3_checked:
            assert contract is not None
            ev.add(
                W_EAGLE_FLAG_EAGLE3_DRAFTER,
                f"{launch.describe()}, but the drafter checked is EAGLE-3 (fc.weight reads "
                f"{contract.fc_in_features} features): SGLang captures no aux states and skips fc",
            )
        elif launch.draft_model and "eagle3" in launch.draft_model.lower():
            ev.add(W_EAGLE_FLAG_NAMED_EAGLE3, f"{launch.describe()}, and the drafter's name says EAGLE-3")
        else:
            ev.note(f"{launch.describe()}: right for an EAGLE-1/2 drafter; pass --checkpoint to tell")
    if ev.structural:
        serving_collapsed(ev, run.serving)
    return Hypothesis(
        "algorithm_flag",
        "An EAGLE-3 drafter is served with the EAGLE algorithm flag: the engine skips its fc and accepts nothing",
        ev.score(),
        ev.lines(),
        None,
        LINKS["algorithm_flag"],
        checks=("config_contract",),
    )


# -- backbone_fallback / rope_layout (core/diagnose/checks/engine_build.py reads them, config_contract finds) --
# An engine builds another decoder layer than the weights were trained as and loads only what fits
# (SGLang's llama_eagle3.py skips the q_norm/k_norm it has no parameter for, without a word;
# speculators #796: "extremely low" acceptance): the attention runs without norms it was trained
# with, as a norm flag the engine ignores does (vLLM PR #38111): 0.7, like those. One engine's
# reading counts ONE_ENGINE_UNKNOWN_SERVER of it until serving says which engine runs the drafter.
W_BACKBONE_FALLBACK = 0.7
# A DFlash drafter whose RoPE layout differs from the target's: vLLM's loader gave it the target's
# from PR #51655 to PR #54373 (vLLM #53063: acceptance 1.03 against 7.78): 0.6, the engine's version
# decides. An EAGLE-3 drafter is rotated by its own config in vLLM and SGLang, so the difference
# alone is weak (TensorRT-LLM PR #19036 shows an engine hard-coding one layout can still bite): 0.15.
W_ROPE_LAYOUT_INHERITED = 0.6
W_ROPE_LAYOUT_OWN_CONFIG = 0.15


def backbone_fallback(run: RunEvidence) -> Hypothesis | None:
    """An engine builds another decoder layer than the drafter's weights were trained as (speculators #796)."""
    contract = run.contract()
    if contract is None or contract.backbone is None:
        return None
    found = [f for f in contract.findings if f.kind == "backbone_fallback"]
    if not found:
        return None  # listed when an engine builds another layer (the drill-down shows what each builds)
    ev = Evidence()
    _engine_findings(ev, run, found, W_BACKBONE_FALLBACK)
    return Hypothesis(
        "backbone_fallback",
        "The engine builds the drafter as another backbone than it was trained as (its attention loses "
        "what that backbone has)",
        ev.score(),
        ev.lines(),
        None,
        LINKS["backbone_fallback"],
        checks=("config_contract",),
    )


def rope_layout(run: RunEvidence) -> Hypothesis | None:
    """The drafter's RoPE layout against the target's (vLLM #53063)."""
    contract = run.contract()
    if contract is None or contract.rope is None:
        return None
    found = [f for f in contract.findings if f.kind == "rope_layout_mismatch"]
    if not found:
        return None  # listed when the layouts differ
    ev = Evidence()
    weight = W_ROPE_LAYOUT_INHERITED if contract.rope.drafter_family == "dflash" else W_ROPE_LAYOUT_OWN_CONFIG
    _engine_findings(ev, run, found, weight)
    return Hypothesis(
        "rope_layout",
        "The drafter is rotated with another RoPE layout than the one it was distilled with (the target's)",
        ev.score(),
        ev.lines(),
        None,
        LINKS["rope_layout"],
        checks=("config_contract",),
    )


def _engine_findings(ev: Evidence, run: RunEvidence, findings: list, weight: float) -> None:
    """Weigh findings that may hold for one engine only, as config_contract does; a collapsed serving
    acceptance adds its weight once something structural was found."""
    engine = run.serving.serving.engine if run.serving is not None else None
    for finding in findings:
        line = f"{finding.message} ({finding.link})" if finding.link else finding.message
        if finding.engine is not None and engine is not None and finding.engine != engine:
            ev.note(f"not the engine serving it ({engine}): {line}")
            continue
        ev.add(weight * (ONE_ENGINE_UNKNOWN_SERVER if finding.engine is not None and engine is None else 1.0), line)
    if any(w >= LIKELY for w, _ in ev.items):
        corroborate(ev, run.symptoms)
    if ev.structural:
        serving_collapsed(ev, run.serving)
