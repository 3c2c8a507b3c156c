"""Which decoder layers an EAGLE-3 drafter's aux hidden states come from: how trainers and engines
mean the ids in its config.json (output-of or capture-before), the ids they fall back to, and which
layers each engine captures for a config and a target (the config-contract and hidden-state checks)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Convention = Literal["output_of", "capture_before"]
# Conventions for aux layer ids (vLLM `vllm/model_executor/models/llama.py`, sglang
# `python/sglang/srt/models/llama.py`). "output_of": id i names the output of decoder layer i
# (SpecForge's forward hooks; ModelOpt's, registered on the layers whose index is in the ids:
# nvidia-modelopt 0.47.0 modelopt/torch/speculative/plugins/hf_eagle.py
# `_collect_aux_hidden_states_forward_hook`, default ids `default_eagle_aux_layer_ids`
# = sorted({1, N//2 - 1, N - 4}), so [0, 1] for a target of 4 layers or fewer). "capture_before":
# id i names the input of layer i = HF ``hidden_states[i]`` = the output of layer i - 1 (EAGLE's
# modeling_llama_kv.py, vLLM, speculators, modelopt's offline dumps).
OUTPUT_OF: Convention = "output_of"
CAPTURE_BEFORE: Convention = "capture_before"

# Both engines and every trainer default to three aux layers (low, mid, high).
DEFAULT_AUX_LAYERS = 3

ENGINES = ("vllm", "sglang")

# How SGLang turns config ids into the layers it captures before, per target model file (sglang
# 0.5.23 python/sglang/srt/models/*.py `set_eagle3_layers_to_capture`). llama.py, qwen2/3*.py and
# every other file: ``[val + 1 for val in layer_ids]`` (output-of). deepseek_v2.py and
# glm4_moe_lite.py (PR #25454), and the models that delegate to deepseek_v2's class (Kimi-K2.5,
# Mistral Large 3): +1 only when the first id is 1, else the ids as given (capture-before).
# gpt_oss.py (PR #32334): the ids as given when the largest is the layer count, else +1.
SGLANG_FIRST_ID_RULE = frozenset(
    {
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "KimiK25ForConditionalGeneration",
        "MistralLarge3ForCausalLM",
    }
)
SGLANG_LAST_BOUNDARY_RULE = frozenset({"GptOssForCausalLM"})


@dataclass(frozen=True)
class EngineReading:
    """Which decoder layers' outputs an engine feeds the drafter, and why."""

    engine: str
    ids: tuple[int, ...] | None  # the ids the engine reads (None: it falls back to its default)
    source: str  # where they come from, in words
    layers: tuple[int, ...] | None  # outputs of these decoder layers; None when the target's depth is unknown

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "ids": list(self.ids) if self.ids is not None else None,
            "source": self.source,
            "layers": list(self.layers) if self.layers is not None else None,
        }


def config_convention(layout: str) -> Convention:
    """How the ids in a drafter's config.json are meant: speculators' configs are consumed by vLLM
    as-is (capture-before); SpecForge/EAGLE/modelopt configs hold their hook ids (output-of)."""
    return CAPTURE_BEFORE if layout == "speculators" else OUTPUT_OF


def physical_layers(ids: Sequence[int], convention: Convention) -> tuple[int, ...]:
    """Decoder layers whose *output* the ids name."""
    shift = 0 if convention == OUTPUT_OF else -1
    return tuple(int(i) + shift for i in ids)


def engine_default_ids(num_layers: int) -> tuple[int, int, int]:
    """The ids both engines fall back to, capture-before (vLLM `get_eagle3_aux_hidden_state_layers`,
    sglang `python/sglang/srt/models/llama.py`): the outputs of layers 1, N//2 - 1 and N - 4."""
    return (2, num_layers // 2, num_layers - 3)


def engine_reading(
    engine: str,
    top_ids: tuple[int, ...] | None,
    nested_ids: tuple[int, ...] | None,
    num_layers: int | None,
    target_architectures: tuple[str, ...] | None,
) -> EngineReading:
    """The layers an engine captures for this config (docs/formats.md, aux layer conventions);
    ``target_architectures`` None when no target was given."""
    convention: Convention | None
    if engine == "vllm":
        # vllm/v1/worker/gpu_model_runner.py get_eagle3_aux_layers_from_config: the top-level field,
        # used as-is (capture-before); eagle_config is not read.
        ids, convention = top_ids, CAPTURE_BEFORE
        source = "reads the top-level ids" if ids else "finds no top-level ids, falls back to (2, N//2, N-3)"
    else:
        ids = nested_ids
        convention, source = sglang_convention(ids, num_layers, target_architectures)
    if ids is None:
        layers = physical_layers(engine_default_ids(num_layers), CAPTURE_BEFORE) if num_layers else None
    else:
        layers = physical_layers(ids, convention) if convention is not None else None
    return EngineReading(engine, ids, source, layers)


def sglang_convention(
    ids: tuple[int, ...] | None, num_layers: int | None, architectures: tuple[str, ...] | None
) -> tuple[Convention | None, str]:
    """How SGLang reads eagle_config's ids for this target (SGLANG_FIRST_ID_RULE above); None when
    it depends on a target nobody named."""
    if not ids:
        return None, "finds no eagle_config ids, falls back to (2, N//2, N-3)"
    arch = next(iter(architectures), None) if architectures else None
    if architectures is not None and arch in SGLANG_FIRST_ID_RULE:
        convention = OUTPUT_OF if ids[0] == 1 else CAPTURE_BEFORE
        return (
            convention,
            f"reads eagle_config's ids for a {arch} target as {_words(convention)} (first id {ids[0]})",
        )
    if architectures is not None and arch in SGLANG_LAST_BOUNDARY_RULE:
        convention = CAPTURE_BEFORE if num_layers is not None and max(ids) == num_layers else OUTPUT_OF
        return convention, f"reads eagle_config's ids for a {arch} target as {_words(convention)}"
    if architectures is not None:
        return (
            OUTPUT_OF,
            f"adds 1 to eagle_config's ids for a {arch or 'target'} target ({_words(OUTPUT_OF)})",
        )
    if ids[0] == 1:  # every model file adds 1 to these
        return OUTPUT_OF, f"reads eagle_config's ids as {_words(OUTPUT_OF)} (first id 1)"
    return None, (
        f"adds 1 to eagle_config's ids for Llama and Qwen targets, not for DeepSeek, Kimi or GLM-4.7-Flash "
        f"ones (first id {ids[0]}, not 1): the target decides (pass --target)"
    )


def _words(convention: Convention) -> str:
    return convention.replace("_", "-")
