"""What a serving engine builds for a drafter's config, against what its weights and the target say:
the decoder layer's backbone and the RoPE layout. The config-contract check (config_contract.py)
turns a difference into a finding; the ``backbone_fallback`` and ``rope_layout`` hypotheses weigh it.

Backbone (https://github.com/vllm-project/speculators/issues/796: a drafter served under another
backbone than it was trained as, acceptance "extremely low"). The weights say what the draft layer
was trained as: Qwen3's attention carries ``self_attn.q_norm``/``k_norm`` (speculators'
``Qwen3DecoderEagle3FirstLayer``), DeepSeek's MLA ``kv_a_proj_with_mqa``/``q_a_proj``; Llama's has
neither. What each engine builds comes from the config alone:

- SGLang 0.5.23 registers two EAGLE-3 drafter classes: ``LlamaForCausalLMEagle3``
  (``python/sglang/srt/models/llama_eagle3.py``, a Llama layer whose ``load_weights`` skips every
  name it has no parameter for, without a word) and ``Eagle3DeepseekV2ForCausalLM``
  (``kimi_k25_eagle3.py``, MLA). Any other name it does not load at all.
- vLLM builds ``Eagle3LlamaForCausalLM`` for ``LlamaForCausalLMEagle3``/``Eagle3LlamaForCausalLM``
  configs and ``Eagle3Qwen3ForCausalLM`` for that name; for a speculators config its loader
  (``vllm/transformers_utils/configs/speculators/algos.py``) took the Llama class for every layer
  type until https://github.com/vllm-project/vllm/pull/43132 (merged 2026-06), which builds the
  Qwen3 class for ``transformer_layer_config.model_type`` "qwen3".

RoPE layout (https://github.com/vllm-project/vllm/issues/53063). NeoX (rotate halves) or interleaved
(GPT-J, rotate pairs). The trainers' draft layers rotate NeoX (transformers' ``rotate_half`` in
SpecForge's, speculators' and ModelOpt's Llama layers) unless the config says otherwise; targets
say ``rope_interleave`` (transformers' DeepseekV3Config, default true), ``is_neox_style`` or
``rope_is_neox_style`` (the keys vLLM and SGLang read), and Llama 4 rotates interleaved
(https://github.com/NVIDIA/TensorRT-LLM/pull/19036: an EAGLE-3 drafter rotated the other way served
at accept length 1.01). vLLM's DFlash loader gave the drafter the target's layout from PR #51655
until https://github.com/vllm-project/vllm/pull/54373 (merged 2026-08-29), which reads the draft's
own ``is_neox_style``: on GLM-5.3 (interleaved) a NeoX-distilled DFlash2 drafter served at
acceptance 1.03 against 7.78. EAGLE-3 drafters are rotated by their own config in both engines
(SGLang ``rope_is_neox_style``, default true), so there a difference is context, not a cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LINK_BACKBONE = "https://github.com/vllm-project/speculators/issues/796"
LINK_ROPE_LAYOUT = "https://github.com/vllm-project/vllm/issues/53063"

_QWEN3_NORMS = ("self_attn.q_norm.weight", "self_attn.k_norm.weight")
_MLA_WEIGHTS = ("self_attn.kv_a_proj_with_mqa.weight", "self_attn.q_a_proj.weight")
# SGLang 0.5.23's EAGLE-3 drafter classes and the layer each builds.
SGLANG_DRAFTERS = {"LlamaForCausalLMEagle3": "llama", "Eagle3DeepseekV2ForCausalLM": "mla"}
VLLM_DRAFTERS = {
    "LlamaForCausalLMEagle3": "llama",
    "Eagle3LlamaForCausalLM": "llama",
    "Eagle3Qwen3ForCausalLM": "qwen3",
}
INTERLEAVED_ARCHITECTURES = frozenset({"Llama4ForConditionalGeneration", "Llama4ForCausalLM"})
NEOX, INTERLEAVED = "neox", "interleaved"


@dataclass(frozen=True)
class EngineBuild:
    """The decoder layer one engine builds for the drafter's config (None: it does not load it)."""

    engine: str
    builds: str | None
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "builds": self.builds, "why": self.why}


@dataclass(frozen=True)
class BackboneReading:
    """What the drafter's weights were trained as, and what each engine builds for its config."""

    trained_as: str  # "llama" | "qwen3" | "mla"
    evidence: str
    engines: tuple[EngineBuild, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "trained_as": self.trained_as,
            "evidence": self.evidence,
            "engines": [e.to_json() for e in self.engines],
        }


@dataclass(frozen=True)
class RopeReading:
    """The drafter's RoPE against the target's (layout, base, scaling type), and where each came from."""

    drafter_layout: str
    drafter_layout_source: str
    drafter_family: str  # "dflash" | "eagle3": whose layout engines give it (module docstring)
    drafter_theta: float | None
    drafter_type: str | None
    target_layout: str | None
    target_layout_source: str | None
    target_theta: float | None
    target_type: str | None

    @property
    def layouts_differ(self) -> bool:
        return self.target_layout is not None and self.target_layout != self.drafter_layout

    def to_json(self) -> dict[str, Any]:
        return {
            "drafter_layout": self.drafter_layout,
            "drafter_layout_source": self.drafter_layout_source,
            "drafter_family": self.drafter_family,
            "drafter_rope_theta": self.drafter_theta,
            "drafter_rope_type": self.drafter_type,
            "target_layout": self.target_layout,
            "target_layout_source": self.target_layout_source,
            "target_rope_theta": self.target_theta,
            "target_rope_type": self.target_type,
        }

    def lines(self) -> list[tuple[str, Any]]:
        drafter = (
            f"{self.drafter_layout} ({self.drafter_layout_source}), {_words(self.drafter_theta, self.drafter_type)}"
        )
        target = (
            f"{self.target_layout} ({self.target_layout_source}), {_words(self.target_theta, self.target_type)}"
            if self.target_layout is not None
            else "no target read"
        )
        return [("drafter RoPE", drafter), ("target RoPE", target)]


def _words(theta: float | None, kind: str | None) -> str:
    return f"theta {theta if theta is not None else '-'}, {kind or 'default'}"


def layer_tensor_names(tensors: Mapping[str, Any]) -> set[str]:
    """The first draft layer's tensor names without their prefix (``midlayer.``, ``layers.0.``, ``model.``)."""
    names = set()
    for name in tensors:
        bare = name.removeprefix("model.")
        for prefix in ("midlayer.", "layers.0."):
            if bare.startswith(prefix):
                names.add(bare[len(prefix) :])
    return names


def read_backbone(tensors: Mapping[str, Any], config: Mapping[str, Any]) -> BackboneReading:
    layer = layer_tensor_names(tensors)
    if any(name in layer for name in _QWEN3_NORMS):
        trained, evidence = "qwen3", "its first layer holds self_attn.q_norm/k_norm, Qwen3's attention norms"
    elif any(name in layer for name in _MLA_WEIGHTS):
        trained, evidence = "mla", "its first layer holds self_attn.kv_a_proj_with_mqa/q_a_proj, DeepSeek's MLA"
    else:
        trained, evidence = "llama", "its first layer holds plain q/k/v/o projections, Llama's attention"
    return BackboneReading(trained, evidence, (_sglang_build(config), _vllm_build(config)))


def _architecture(config: Mapping[str, Any]) -> str | None:
    names = config.get("architectures")
    return names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None


def _sglang_build(config: Mapping[str, Any]) -> EngineBuild:
    arch = _architecture(config)
    if arch in SGLANG_DRAFTERS:
        return EngineBuild("sglang", SGLANG_DRAFTERS[arch], f"SGLang builds {arch}")
    return EngineBuild("sglang", None, f"SGLang 0.5.23 registers no EAGLE-3 drafter class named {arch!r}")


def _vllm_build(config: Mapping[str, Any]) -> EngineBuild:
    if config.get("speculators_model_type") == "eagle3":
        layer = config.get("transformer_layer_config")
        model_type = layer.get("model_type") if isinstance(layer, Mapping) else None
        if model_type == "qwen3":
            return EngineBuild(
                "vllm", "qwen3", "vLLM builds Eagle3Qwen3ForCausalLM for a qwen3 layer config (PR #43132)"
            )
        return EngineBuild(
            "vllm", "llama", f"vLLM's speculators loader builds Eagle3LlamaForCausalLM for layer type {model_type!r}"
        )
    arch = _architecture(config)
    if arch in VLLM_DRAFTERS:
        return EngineBuild(
            "vllm", VLLM_DRAFTERS[arch], f"vLLM builds its {VLLM_DRAFTERS[arch]} EAGLE-3 class for {arch}"
        )
    return EngineBuild("vllm", None, f"not known which vLLM class {arch!r} selects")


def _flag(config: Mapping[str, Any]) -> tuple[str, str] | None:
    """A layout the config states: (layout, the key that says it)."""
    for key in ("is_neox_style", "rope_is_neox_style"):
        if isinstance(config.get(key), bool):
            return (NEOX if config[key] else INTERLEAVED), f"{key}: {str(config[key]).lower()}"
    for key in ("rope_interleave", "rope_interleaved"):
        if isinstance(config.get(key), bool):
            return (INTERLEAVED if config[key] else NEOX), f"{key}: {str(config[key]).lower()}"
    return None


def _base(config: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """rope_theta and the scaling type, from transformers 5's ``rope_parameters`` or the older keys."""
    parameters = config.get("rope_parameters")
    scaling = config.get("rope_scaling")
    nested = parameters if isinstance(parameters, Mapping) else scaling if isinstance(scaling, Mapping) else {}
    theta = config.get("rope_theta", nested.get("rope_theta"))
    kind = nested.get("rope_type", nested.get("type"))
    theta_value = float(theta) if isinstance(theta, (int, float)) and not isinstance(theta, bool) else None
    return theta_value, kind if isinstance(kind, str) else None


def read_rope(
    drafter: Mapping[str, Any], target: Mapping[str, Any] | None, target_architectures: tuple[str, ...] = ()
) -> RopeReading:
    layer = drafter.get("transformer_layer_config")  # speculators keeps the layer's RoPE there
    drafter = {**layer, **drafter} if isinstance(layer, Mapping) else drafter
    stated = _flag(drafter)
    layout, source = stated if stated is not None else (NEOX, "not stated: the trainers' draft layers rotate NeoX")
    family = (
        "dflash"
        if "dflash_config" in drafter or any("DFlash" in a for a in drafter.get("architectures") or [])
        else "eagle3"
    )
    theta, kind = _base(drafter)
    target_layout = target_source = None
    target_theta = target_kind = None
    if target is not None:
        target_stated = _flag(target)
        if target_stated is not None:
            target_layout, target_source = target_stated
        elif INTERLEAVED_ARCHITECTURES & set(target_architectures):
            target_layout, target_source = INTERLEAVED, "Llama 4 rotates interleaved (GPT-J)"
        else:
            target_layout, target_source = NEOX, "not stated: transformers' rotate_half (NeoX)"
        target_theta, target_kind = _base(target)
    return RopeReading(layout, source, family, theta, kind, target_layout, target_source, target_theta, target_kind)
