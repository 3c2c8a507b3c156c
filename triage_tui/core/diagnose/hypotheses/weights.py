"""Causes in what the drafter's export stores: tensors a converter skipped, 8-bit weights without their
scales, a RoPE scaling the target has and the drafter's config lost. Each reads one check's details
(core/diagnose/checks/drafter_tensors.py, quantization.py, rope_scaling.py)."""

from __future__ import annotations

from triage_tui.core.diagnose.checks.drafter_tensors import NAME as DRAFTER_TENSORS
from triage_tui.core.diagnose.checks.drafter_tensors import DrafterTensorsDetails
from triage_tui.core.diagnose.checks.quantization import NAME as QUANTIZATION
from triage_tui.core.diagnose.checks.quantization import QuantizationDetails, unscaled_line
from triage_tui.core.diagnose.checks.result import ran_details
from triage_tui.core.diagnose.checks.rope_scaling import NAME as ROPE_SCALING
from triage_tui.core.diagnose.checks.rope_scaling import RopeScalingDetails
from triage_tui.core.diagnose.hypotheses.scoring import (
    Evidence,
    Hypothesis,
    RunEvidence,
    corroborate,
    serving_collapsed,
)

LINKS_DROPPED = (
    "https://github.com/inclusionAI/AReaL/issues/1403",
    "https://github.com/NVIDIA/Model-Optimizer/issues/2427",
)
LINKS_UNSCALED = (
    "https://github.com/sgl-project/sglang/issues/32440",
    "https://github.com/sgl-project/sglang/issues/37736",
    "https://github.com/sgl-project/sglang/issues/35797",
    "https://github.com/vllm-project/vllm/issues/49552",
)
LINKS_ROPE = ("https://github.com/vllm-project/speculators/pull/574",)
TITLE_DROPPED = "A converter or exporter left tensors the drafter's layer needs out of the checkpoint"
TITLE_UNSCALED = "The drafter's weights are stored in 8 bits without the scales that turn them back into weights"
TITLE_ROPE = "The target scales RoPE (llama3, YaRN, ...) and the drafter's config does not, or scales it otherwise"

# -- dropped_tensors ----------------------------------------------------------------------------
# A tensor the layer needs is not in the checkpoint: an engine that loads it fills the gap with its own
# initialisation and serves near zero acceptance (AReaL #1403, Model-Optimizer #2427). The names are
# read from the headers, so this is certain; 0.75, short of quantized_without_scales' 0.8, so that where
# a quantizing exporter also left names out, the more specific cause ranks first.
W_REQUIRED_MISSING = 0.75

# -- quantized_without_scales -------------------------------------------------------------------
# Weights stored in an 8-bit dtype with no scale beside them: whatever scale the engine assumes, the
# products are not the trained weights (SGLang #32440, #37736, #35797; vLLM #49552: acceptance ~0): 0.8.
W_UNSCALED = 0.8
# The config promises FP8/int8 weights: the engine takes the codes as quantized and looks for their
# scales, so the missing ones are what it computes with: 0.5 more.
W_PROMISED_EIGHT_BIT = 0.5
# The sampled codes reach the top of the 8-bit range (>= 90 %): quantized codes, made for a scale,
# not small float weights cast down: 0.4 more.
W_CODES_FILL_RANGE = 0.4
CODES_FILL = 0.9

# -- rope_scaling_dropped -----------------------------------------------------------------------
# The target scales RoPE and the drafter's config has none: the converter dropped it (speculators
# PR #574), and the drafter's positions drift from the target's as the context grows: 0.7.
W_SCALING_DROPPED = 0.7
# Both scale, differently (another type or factor): the same drift, from a config copied from a
# sibling model: 0.6.
W_SCALING_DIFFERS = 0.6
# The drafter scales and the target does not: a drafter made for a long-context sibling. It matters
# only past the target's original context, so alone it stays below one half: 0.35.
W_SCALING_EXTRA = 0.35


def dropped_tensors(run: RunEvidence) -> Hypothesis:
    details = ran_details(run.checks, DRAFTER_TENSORS, DrafterTensorsDetails)
    if details is None:
        return _not_run(run, "dropped_tensors", TITLE_DROPPED, DRAFTER_TENSORS, LINKS_DROPPED)
    ev = Evidence()
    if details.missing:
        ev.add(W_REQUIRED_MISSING, details.missing_line())
        index = details.index_line()
        if index is not None:
            ev.note(index)
    else:
        ev.note(f"all {details.required} tensors the drafter's layer needs are stored ({details.stored} in all)")
    corroborate(ev, run.symptoms)
    if ev.structural:
        serving_collapsed(ev, run.serving)
    return Hypothesis(
        "dropped_tensors",
        TITLE_DROPPED,
        ev.score(),
        ev.lines(),
        "Export the drafter again from the trainer's checkpoint with a converter that refuses missing keys, "
        "and check that every name listed is in the new model.safetensors (or its index) before serving it"
        if details.missing
        else None,
        LINKS_DROPPED,
        checks=(DRAFTER_TENSORS,),
    )


def quantized_without_scales(run: RunEvidence) -> Hypothesis:
    details = ran_details(run.checks, QUANTIZATION, QuantizationDetails)
    if details is None:
        return _not_run(run, "quantized_without_scales", TITLE_UNSCALED, QUANTIZATION, LINKS_UNSCALED)
    ev = Evidence()
    promise = details.promise
    if details.unscaled:
        ev.add(W_UNSCALED, unscaled_line(details))
        if promise is not None and promise.eight_bit:
            ev.add(
                W_PROMISED_EIGHT_BIT,
                f"config.json quantization_config ({promise.method}: {promise.scheme}) promises 8-bit weights "
                "with their scales: the engine multiplies the codes by scales that are not there",
            )
        fullest = details.fullest()
        if fullest is not None and fullest.range_fraction is not None:
            line = (
                f"{fullest.name}'s codes reach {fullest.largest_code:g} of the {fullest.stored} range's "
                f"{fullest.range_max:g} ({fullest.range_fraction:.0%}) in its first rows"
            )
            if fullest.range_fraction >= CODES_FILL:
                ev.add(W_CODES_FILL_RANGE, line + ": quantized codes, made to be multiplied by a scale")
            else:
                ev.note(line + ": small values cast down rather than quantized codes, still read without a scale")
    elif details.weights:
        ev.note(f"all {len(details.weights)} 8-bit weights have their scales beside them")
    else:
        ev.note("no weight is stored in an 8-bit dtype")
    corroborate(ev, run.symptoms)
    if ev.structural:
        serving_collapsed(ev, run.serving)
    return Hypothesis(
        "quantized_without_scales",
        TITLE_UNSCALED,
        ev.score(),
        ev.lines(),
        "Export the quantized drafter with its scales (ModelOpt's and llm-compressor's exporters write a "
        "weight_scale beside each weight), or serve the drafter in bf16"
        if details.unscaled
        else None,
        LINKS_UNSCALED,
        checks=(QUANTIZATION,),
    )


def rope_scaling_dropped(run: RunEvidence) -> Hypothesis:
    details = ran_details(run.checks, ROPE_SCALING, RopeScalingDetails)
    if details is None:
        return _not_run(run, "rope_scaling_dropped", TITLE_ROPE, ROPE_SCALING, LINKS_ROPE)
    ev = Evidence()
    drafter, target = details.drafter, details.target
    both = f"target RoPE {target.words()}; drafter RoPE {drafter.words()}"
    if details.differences:
        weight = (
            W_SCALING_DROPPED
            if target.scaled and not drafter.scaled
            else W_SCALING_DIFFERS
            if target.scaled
            else W_SCALING_EXTRA
        )
        ev.add(weight, f"{both}: {'; '.join(details.differences)}")
    else:
        ev.note(f"{both}: the same scaling")
    if drafter.theta is not None and target.theta is not None and drafter.theta != target.theta:
        ev.note(f"rope_theta differs too (drafter {drafter.theta:g}, target {target.theta:g})")
    if any(w >= 0.5 for w, _ in ev.items):
        corroborate(ev, run.symptoms)
    return Hypothesis(
        "rope_scaling_dropped",
        TITLE_ROPE,
        ev.score(),
        ev.lines(),
        "Copy the target's rope_scaling (rope_parameters in transformers 5) into the drafter's config.json "
        "(transformer_layer_config for a speculators drafter); a drafter trained without it needs training again"
        if details.differences
        else None,
        LINKS_ROPE,
        checks=(ROPE_SCALING,),
    )


def _not_run(run: RunEvidence, hypothesis: str, title: str, check: str, links: tuple[str, ...]) -> Hypothesis:
    """Listed at 0 when its check did not run (docs/contracts.md: present once their check exists)."""
    result = run.checks.get(check)
    why = f"{check} check {result.status}: {result.summary}" if result is not None else f"{check} check not run"
    return Hypothesis(hypothesis, title, 0.0, (why,), None, links, checks=(check,))
