"""8-bit weights and the scales stored beside them, as the quantizing exporters write them, and what a
``quantization_config`` promises.

Where each layout comes from:
- ModelOpt (nvidia-modelopt 0.47.0 ``modelopt/torch/export/unified_export_hf.py``, through the EAGLE
  exporter ``plugins/hf_spec_export.py``): ``<layer>.weight`` F8_E4M3 with a per-tensor float32
  ``<layer>.weight_scale`` and ``<layer>.input_scale``; ``quantization_config`` with ``quant_algo``
  ``FP8`` (and ``hf_quant_config.json`` beside it);
- compressed-tensors (llm-compressor's format, ``quant_method: compressed-tensors``): ``weight``
  F8_E4M3 or I8 with ``weight_scale`` per tensor ``[1]``, per channel ``[out, 1]``, per group or
  block; ``config_groups.*.weights`` says ``num_bits`` and ``type``;
- transformers' FineGrainedFP8 and DeepSeek-V3's release (``quant_method: fp8``): ``weight`` F8_E4M3
  with ``weight_scale_inv`` per 128 x 128 block (multiplied in, despite its name: DeepSeek-V3
  ``inference/kernel.py`` ``weight_dequant``);
- bitsandbytes int8 (``SCB``), AWQ/GPTQ (``scales``).

A weight stored in one of these dtypes with none of its scales beside it is read by the engines as
codes times a scale they never got (sglang issues 32440, 37736, 35797; vllm issue 49552).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from triage_tui.core.formats.safe_torch import TensorInfo

# torch dtype names (TensorInfo.dtype) of the 8-bit storage types, with the largest code of each.
EIGHT_BIT_CODES: dict[str, float] = {
    "float8_e4m3fn": 448.0,
    "float8_e5m2": 57344.0,
    "int8": 127.0,
    "uint8": 255.0,
}
# Names of the safetensors dtypes, for messages (formats/safe_torch.py SAFETENSORS_DTYPES).
STORED_NAMES = {"float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "int8": "I8", "uint8": "U8"}
# What an exporter stores beside ``<layer>.weight`` to undo the quantization: the weight's own scale
# (ModelOpt, compressed-tensors: weight_scale; FineGrainedFP8: weight_scale_inv; AWQ/GPTQ: scales;
# bitsandbytes: SCB) or the activation's (input_scale), which also says the layer was quantized.
SCALE_SUFFIXES = ("weight_scale", "weight_scale_inv", "scales", "SCB", "input_scale")
_WEIGHT_SCALES = ("weight_scale", "weight_scale_inv", "scales", "SCB")
# Companions a quantized layer carries that no float layer uses: zero points, KV-cache and output
# scales (ModelOpt ``k_scale``/``v_scale``), bitsandbytes' format tag.
_COMPANIONS = (*SCALE_SUFFIXES, "weight_zero_point", "input_zero_point", "k_scale", "v_scale", "output_scale")
_COMPANION_ENDINGS = ("weight_format",)


def is_companion(name: str) -> bool:
    """A scale or zero point stored beside a quantized weight (never a weight of its own)."""
    last = name.rsplit(".", 1)[-1]
    return last in _COMPANIONS or last in _COMPANION_ENDINGS or ".weight." in name


def scales_beside(name: str, names: Mapping[str, Any]) -> tuple[str, ...]:
    """The scale tensors stored beside weight ``name`` (``<layer>.weight`` -> ``<layer>.weight_scale``, ...)."""
    stem = name.removesuffix(".weight")
    beside = tuple(f"{stem}.{suffix}" for suffix in SCALE_SUFFIXES if f"{stem}.{suffix}" in names)
    # bitsandbytes' 4-bit state hangs under the weight's own name (``<layer>.weight.absmax``, ...).
    return beside + tuple(sorted(n for n in names if n.startswith(f"{name}.") and "absmax" in n))


def eight_bit_weights(tensors: Mapping[str, TensorInfo]) -> list[TensorInfo]:
    """Matrices stored in an 8-bit dtype (the d2t/t2d buffers and 1-d scales are not weights)."""
    return [
        info
        for name, info in sorted(tensors.items())
        if info.dtype in EIGHT_BIT_CODES and name.endswith(".weight") and len(info.shape) == 2
    ]


@dataclass(frozen=True)
class QuantizationPromise:
    """What a config's ``quantization_config`` says the weights are: the tool, and 8-bit or not."""

    method: str  # "modelopt", "compressed-tensors", "fp8", "bitsandbytes", ...
    scheme: str  # in words: "FP8", "float 8-bit weights", "int 8-bit weights", ...
    eight_bit: bool  # the promise is of 8-bit weights (FP8/int8), which need scales beside them

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "scheme": self.scheme, "eight_bit": self.eight_bit}


def quantization_promise(config: Mapping[str, Any]) -> QuantizationPromise | None:
    """The ``quantization_config`` of a config.json (or ModelOpt's hf_quant_config.json body), read."""
    raw = config.get("quantization_config")
    if not isinstance(raw, Mapping):
        raw = config if isinstance(config.get("quantization"), Mapping) else None
    if raw is None:
        return None
    method = raw.get("quant_method")
    producer = raw.get("producer")
    if not isinstance(method, str) and isinstance(producer, Mapping) and isinstance(producer.get("name"), str):
        method = producer["name"]  # ModelOpt's hf_quant_config.json: {"producer": {"name": "modelopt"}, ...}
    # Strings from the file end up in messages: a bounded length (the edges escape what they hold).
    method = method[:40] if isinstance(method, str) else "unknown"
    nested = raw.get("quantization")
    algo = raw.get("quant_algo", nested.get("quant_algo") if isinstance(nested, Mapping) else None)
    if isinstance(algo, str):
        return QuantizationPromise(method, algo[:40], "FP8" in algo.upper() or "INT8" in algo.upper())
    if method == "compressed-tensors":
        bits = _compressed_tensors_bits(raw)
        if bits is not None:
            kind, num_bits = bits
            return QuantizationPromise(method, f"{kind} {num_bits}-bit weights", num_bits == 8)
    if method in ("fp8", "fbgemm_fp8"):
        return QuantizationPromise(method, "FP8", True)
    if method == "bitsandbytes" and raw.get("load_in_8bit") is True:
        return QuantizationPromise(method, "int8", True)
    return QuantizationPromise(method, str(raw.get("format") or method)[:40], False)


def _compressed_tensors_bits(raw: Mapping[str, Any]) -> tuple[str, int] | None:
    groups = raw.get("config_groups")
    if not isinstance(groups, Mapping):
        return None
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if isinstance(weights, Mapping) and isinstance(weights.get("num_bits"), int):
            return str(weights.get("type") or "int")[:20], int(weights["num_bits"])
    return None


# --------------------------------------------------------------------------- reading them as floats


def dequantizing_reader(
    tensors: Mapping[str, TensorInfo], load: Callable[[str], torch.Tensor]
) -> tuple[list[str], Callable[[str], torch.Tensor]]:
    """The names of a checkpoint's own tensors (scales and zero points left out) and a loader that
    returns each 8-bit weight times its scale, so a float model can be built from a quantized export.

    A weight with no scale beside it comes back as its codes in float: what an engine without the
    scale computes with, which the replay then measures."""
    names = [name for name in tensors if not is_companion(name)]

    def read(name: str) -> torch.Tensor:
        value = load(name)
        info = tensors.get(name)
        if info is None or info.dtype not in EIGHT_BIT_CODES:
            return value
        stem = name.removesuffix(".weight")
        weight = value.float()
        zero = f"{stem}.weight_zero_point"
        if zero in tensors:
            weight = weight - _expanded(load(zero).float(), weight.shape)
        scale = next((f"{stem}.{s}" for s in _WEIGHT_SCALES if f"{stem}.{s}" in tensors), None)
        return weight * _expanded(load(scale).float(), weight.shape) if scale is not None else weight

    return names, read


def _expanded(scale: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """A scale per tensor, per row, per group of columns or per block, repeated to the weight's shape."""
    if scale.numel() == 1:
        return scale.reshape(())
    grid = scale.reshape(scale.shape[0], -1) if scale.dim() != 2 else scale
    rows, cols = shape[0], shape[1]
    row_block, col_block = math.ceil(rows / grid.shape[0]), math.ceil(cols / grid.shape[1])
    full = grid.repeat_interleave(row_block, 0).repeat_interleave(col_block, 1)
    return full[:rows, :cols]
