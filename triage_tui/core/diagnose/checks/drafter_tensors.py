"""Does the drafter checkpoint hold every tensor its architecture needs? Names only (safetensors
headers, or the index), no tensor is read.

A converter or exporter that skips tensors writes a checkpoint that loads "cleanly" in an engine that
fills what is missing with its own initialisation, and serves at acceptance near zero
(https://github.com/inclusionAI/AReaL/issues/1403, https://github.com/NVIDIA/Model-Optimizer/issues/2427;
speculators' converter saved random weights for unmatched keys: vllm-project/speculators#1114).
Some rewrite ``model.safetensors.index.json`` to list only what they wrote, so the index and the
shards agree and nothing complains: the names are held against the layer, not against the index.

Required (nvidia-modelopt 0.47.0 ``modelopt/torch/export/plugins/hf_spec_export.py``
``LLAMA_EAGLE_SINGLE_LAYER``, the same names SpecForge's ``LlamaForCausalLMEagle3`` and speculators'
``Eagle3DraftModel`` save): per decoder layer up to ``num_hidden_layers`` the attention projections
(q/k/v/o, or DeepSeek's MLA q_a/q_b/kv_a/kv_b/o), the MLP projections (gate/up/down),
``input_layernorm`` and ``post_attention_layernorm``; the first layer's ``hidden_norm``; ``fc``, ``norm``
and ``lm_head``. Layers after the first are speculators' plain decoder layers (no ``hidden_norm``);
ModelOpt's exporter does not ask them for an ``input_layernorm`` either. ``fc`` and ``hidden_norm`` are
needed only when the aux hidden states are used (``eagle_config.use_aux_hidden_state``). Optional, never
evidence: ``embed_tokens`` (SpecForge does not save it), ``d2t`` and ``t2d`` (ModelOpt exports no t2d),
speculators' ``verifier_*`` copies, Qwen3's q/k norms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triage_tui.core.diagnose.checks.engine_build import read_backbone
from triage_tui.core.diagnose.checks.result import CheckResult, key_value_lines
from triage_tui.core.errors import BadInput
from triage_tui.core.formats.json_file import read_json

if TYPE_CHECKING:
    from triage_tui.core.formats.checkpoint import DrafterCheckpoint

NAME = "drafter_tensors"

_LLAMA_ATTENTION = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
# hf_spec_export.py KIMIK2_EAGLE_SINGLE_LAYER: DeepSeek's MLA attention (sglang kimi_k25_eagle3.py).
_MLA_ATTENTION = (
    "self_attn.q_a_proj",
    "self_attn.q_b_proj",
    "self_attn.kv_a_proj_with_mqa",
    "self_attn.kv_b_proj",
    "self_attn.o_proj",
)
_MLP = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
_INDEX = "model.safetensors.index.json"
# A bound on the layers a config may ask names for (the number is the file's, unchecked): drafters
# have one to a few; past this the names listed would say nothing more.
MAX_LAYERS = 64
# How many missing names a line of evidence spells out before it counts the rest.
SHOWN_NAMES = 12


@dataclass(frozen=True)
class DrafterTensorsDetails:
    """What `drafter_tensors` compared (docs/contracts.md, `check --json`)."""

    layout: str
    num_hidden_layers: int
    required: int  # how many names the architecture requires
    missing: tuple[str, ...]  # required names the checkpoint does not hold, as it would name them
    stored: int  # tensors the headers (or the index) list
    index_total_size: int | None  # the index's metadata.total_size, when there is an index
    stored_bytes: int | None  # the bytes its tensors take, by their headers

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "num_hidden_layers": self.num_hidden_layers,
            "required": self.required,
            "missing": list(self.missing),
            "stored": self.stored,
            "index_total_size": self.index_total_size,
            "stored_bytes": self.stored_bytes,
        }

    def missing_line(self) -> str:
        shown = ", ".join(self.missing[:SHOWN_NAMES])
        more = f" and {len(self.missing) - SHOWN_NAMES} more" if len(self.missing) > SHOWN_NAMES else ""
        return (
            f"{len(self.missing)} of the {self.required} tensors a {self.layout} EAGLE-3 drafter with "
            f"{self.num_hidden_layers} layer(s) needs are not in the checkpoint: {shown}{more}"
        )

    def index_line(self) -> str | None:
        """The index's stated size against its tensors', when they differ (an index edited by hand)."""
        if self.index_total_size is None or self.stored_bytes is None or self.index_total_size == self.stored_bytes:
            return None
        return (
            f"the index's metadata.total_size is {self.index_total_size} bytes, its tensors hold "
            f"{self.stored_bytes}: {self.index_total_size - self.stored_bytes} bytes it no longer lists"
        )

    def drilldown(self) -> list[str]:
        lines = key_value_lines(
            [
                ("layout", self.layout),
                ("num_hidden_layers", self.num_hidden_layers),
                ("required_tensors", self.required),
                ("stored_tensors", self.stored),
                ("index_total_size", self.index_total_size),
                ("stored_bytes", self.stored_bytes),
            ]
        )
        if self.missing:
            lines += ["", "missing", *self.missing]
        return lines


def required_names(checkpoint: DrafterCheckpoint, held: set[str]) -> tuple[int, list[str]]:
    """The number of decoder layers, and every tensor name the drafter's architecture needs, spelled
    as this checkpoint spells its layers."""
    config = checkpoint.config
    layer_config = config.get("transformer_layer_config")
    layer_config = layer_config if isinstance(layer_config, Mapping) else config
    layers = _int(layer_config.get("num_hidden_layers")) or _int(config.get("num_hidden_layers")) or 1
    layers = min(layers, MAX_LAYERS)
    eagle = config.get("eagle_config")
    use_aux = not (isinstance(eagle, Mapping) and eagle.get("use_aux_hidden_state") is False)
    # The names as held, ``model.`` dropped (some exports prefix every name with it).
    prefix = "layers.0." if any(name.startswith("layers.0.") for name in held) else "midlayer."
    if prefix == "midlayer.":
        layers = 1  # SpecForge's and EAGLE's draft model has one midlayer, whatever config says
    attention = _MLA_ATTENTION if read_backbone(checkpoint.tensors, config).trained_as == "mla" else _LLAMA_ATTENTION
    names = ["norm", "lm_head"] + (["fc"] if use_aux else [])
    for i in range(layers):
        at = prefix if i == 0 else f"layers.{i}."
        parts = [*attention, *_MLP, "post_attention_layernorm"]
        if i == 0:
            parts += ["input_layernorm"] + (["hidden_norm"] if use_aux else [])
        elif checkpoint.layout != "modelopt":
            parts.append("input_layernorm")
        names += [at + part for part in parts]
    return layers, [f"{name}.weight" for name in names]


def check_drafter_tensors(checkpoint: DrafterCheckpoint | None) -> CheckResult:
    """The names the drafter's layer requires against the names its weights hold."""
    if checkpoint is None:
        return CheckResult.skipped(NAME, "no drafter checkpoint found for this run (pass --checkpoint)")
    if checkpoint.not_eagle3 is not None:
        return CheckResult.skipped(NAME, checkpoint.not_eagle3)
    architectures = checkpoint.config.get("architectures")
    if "dflash_config" in checkpoint.config or (
        isinstance(architectures, list) and any("DFlash" in str(a) for a in architectures)
    ):
        return CheckResult.skipped(NAME, "a DFlash drafter: its layers are not the EAGLE-3 layer this check knows")
    held = {name.removeprefix("model.") for name in checkpoint.tensors}
    layers, required = required_names(checkpoint, held)
    missing = tuple(name for name in required if name not in held)
    total, stored_bytes = _index_sizes(checkpoint)
    details = DrafterTensorsDetails(
        layout=checkpoint.layout,
        num_hidden_layers=layers,
        required=len(required),
        missing=missing,
        stored=len(checkpoint.tensors),
        index_total_size=total,
        stored_bytes=stored_bytes,
    )
    if not missing:
        summary = f"all {len(required)} tensors the drafter's layer needs are stored"
        return CheckResult(NAME, "pass", summary, details)
    evidence = (details.missing_line(),) + ((line,) if (line := details.index_line()) else ())
    return CheckResult(NAME, "fail", f"{len(missing)} required tensors missing: {missing[0]}, ...", details, evidence)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _index_sizes(checkpoint: DrafterCheckpoint) -> tuple[int | None, int | None]:
    """The index's stated total size and the bytes its tensors take, when the weights come with an index."""
    root = Path(checkpoint.path)
    index = root / _INDEX
    # find_weights prefers model.safetensors; the index is the one read only when that is absent.
    if checkpoint.file_kind != "safetensors" or (root / "model.safetensors").is_file() or not index.is_file():
        return None, None
    try:
        document = read_json(index)
    except BadInput:  # the reader took this index a moment ago; a second read only adds a number
        return None, None
    metadata = document.get("metadata") if isinstance(document, dict) else None
    total = _int(metadata.get("total_size")) if isinstance(metadata, dict) else None
    spans = [info.data for info in checkpoint.tensors.values()]
    stored = sum(span[1] - span[0] for span in spans if span is not None) if None not in spans else None
    return total, stored
