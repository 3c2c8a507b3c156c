"""EAGLE-3 drafter checkpoints in the three layouts of docs/formats.md section 1.

- SpecForge / sglang / EAGLE (``LlamaForCausalLMEagle3``): ``fc``, ``midlayer.*``, ``norm``,
  ``lm_head``, buffers ``d2t`` [Vd] int64 and ``t2d`` [V] bool, usually no ``embed_tokens``.
- speculators (``Eagle3Speculator``): ``layers.0.*`` and a saved ``embed_tokens``; sizes in
  ``transformer_layer_config``, aux layer ids at the top level of config.json.
- modelopt export (``modelopt/torch/export/plugins/hf_spec_export.py``): ``d2t`` in frequency order
  (``calibrate_frequent_vocab``), no ``t2d``, the export template's ``eagle_config`` keys; the
  decoder layer is ``midlayer.*`` before NVIDIA/Model-Optimizer PR #913 (2026-03) and ``layers.0.*``
  since (``LLAMA_EAGLE_SINGLE_LAYER``; nvidia-modelopt 0.47.0 writes ``layers.0.*``).

Only metadata is read up front (safetensors headers; the mmap'd pickle for ``.bin``);
``DrafterCheckpoint.tensor(name)`` loads one tensor when a check asks for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.safe_torch import TensorInfo
from triage_tui.core.formats.weights import WeightFiles, find_weights, read_config
from triage_tui.core.vocab import VocabMapping, mapping_from_arrays, mask_array, offsets_array

if TYPE_CHECKING:
    import torch  # imported by the readers when a tensor is read (formats/safe_torch.py)

__all__ = ["DrafterCheckpoint", "TensorInfo", "read_checkpoint"]

LM_HEAD = "lm_head.weight"
NORM = "norm.weight"
FC = "fc.weight"
EMBED = "embed_tokens.weight"
_INTEGER_DTYPES = {"int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64"}
# modelopt's export template writes these into eagle_config (hf_spec_export.py).
_MODELOPT_EAGLE_KEYS = {"use_input_layernorm_in_first_layer", "use_last_layernorm", "use_mtp_layernorm"}


@dataclass(frozen=True, eq=False)
class DrafterCheckpoint:
    """What a drafter checkpoint holds and the sizes it implies; tensors stay on disk until asked for."""

    path: Path  # the checkpoint directory
    files: tuple[Path, ...]
    file_kind: str  # "safetensors" | "bin"
    layout: str  # "specforge" | "speculators" | "modelopt" | "unknown"
    config: dict
    tensors: Mapping[str, TensorInfo]  # a safetensors file's compact table (formats/safetensors_header.py)
    hidden_size: int
    draft_vocab_size: int
    target_vocab_size: int | None
    target_hidden_size: int | None
    aux_layer_ids: tuple[int, ...] | None
    mapping: VocabMapping | None  # from the d2t/t2d buffers; None when there is no d2t
    notes: tuple[str, ...] = ()  # oddities seen while reading (config vs tensors, missing lm_head, ...)
    _weights: WeightFiles | None = field(default=None, repr=False)

    def tensor(self, name: str) -> torch.Tensor:
        """One tensor, memory-mapped; nothing else is read."""
        if name not in self.tensors or self._weights is None:
            raise BadInput(self.path, f"checkpoint has no tensor {name!r}")
        return self._weights.load(name)

    def rows(self, name: str, spans: list[tuple[int, int]]) -> list[torch.Tensor]:
        """Rows [start, stop) of one tensor for each span, the rest unread (a K2 embedding is 2.3 GB)."""
        if name not in self.tensors or self._weights is None:
            raise BadInput(self.path, f"checkpoint has no tensor {name!r}")
        return self._weights.load_rows(name, spans)

    def dequantized(self) -> DrafterCheckpoint:
        """The checkpoint as a float model is built from it (core/drafter.py ``load_drafter``): each 8-bit
        weight times its scale, the scales and zero points left out (formats/quantization.py); itself
        when it stores nothing quantized."""
        from triage_tui.core.formats.quantization import dequantizing_reader

        names, read = dequantizing_reader(self.tensors, self.tensor)
        kept = {name: self.tensors[name] for name in names}
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return _Dequantized(**{**values, "tensors": kept}, read=read)

    @property
    def lm_head_name(self) -> str | None:
        return LM_HEAD if LM_HEAD in self.tensors else None

    @property
    def not_eagle3(self) -> str | None:
        """Why this is not an EAGLE-3 drafter at all, or None: no ``fc`` and no draft decoder layer
        (``midlayer.*``, speculators' ``layers.0.*``) is a plain model, such as an HF Trainer
        language-model checkpoint (``model.layers.*``), which the drafter checks cannot judge.
        An EAGLE-1/2 draft keeps its decoder layer and lacks only ``fc``: the hidden-state check
        says so itself."""
        if FC in self.tensors or any(name.startswith(("midlayer.", "layers.0.")) for name in self.tensors):
            return None
        return "not an EAGLE-3 drafter: no fc/midlayer weights"


def _config_int(config: dict, layer_config: dict, key: str) -> int | None:
    for source in (config, layer_config):
        value = source.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _require_shape(info: TensorInfo | None, ndim: int, what: str) -> TensorInfo | None:
    if info is not None and len(info.shape) != ndim:
        raise BadInput(info.file, f"tensor {info.name!r} has shape {list(info.shape)}; expected {what}")
    return info


def _layout(names: set[str], config: dict) -> str:
    architectures = config.get("architectures") or []
    eagle_config = config.get("eagle_config")
    modelopt_config = isinstance(eagle_config, dict) and bool(_MODELOPT_EAGLE_KEYS & set(eagle_config))
    if "Eagle3Speculator" in architectures or "speculators_model_type" in config:
        return "speculators"
    if any(n.startswith("layers.") for n in names):
        # modelopt >= PR #913 exports layers.0.* too; its template's eagle_config keys and the
        # missing t2d tell it from speculators, whose config carries neither.
        return "modelopt" if modelopt_config and "t2d" not in names else "speculators"
    if any(n.startswith("midlayer.") for n in names):
        if "t2d" not in names and ("d2t" in names or modelopt_config):
            return "modelopt"
        return "specforge"
    return "unknown"


def _aux_layer_ids(config: dict, notes: list[str]) -> tuple[int, ...] | None:
    # sglang/SpecForge read eagle_config[...]; speculators and vLLM the top-level key (sglang
    # `python/sglang/srt/configs/model_config.py`; vLLM `vllm/transformers_utils/configs/eagle.py`).
    eagle_config = config.get("eagle_config")
    nested = eagle_config.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle_config, dict) else None
    top = config.get("eagle_aux_hidden_state_layer_ids")
    ids = top if top is not None else nested
    if ids is None:
        return None
    if not (isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)):
        notes.append(f"config.json eagle_aux_hidden_state_layer_ids is {ids!r}, not a list of ints; ignored")
        return None
    if top is not None and nested is not None and list(top) != list(nested):
        notes.append(
            f"config.json has aux layer ids {top} at the top level (vLLM, speculators) "
            f"but {nested} in eagle_config (sglang, SpecForge)"
        )
    return tuple(ids)


def read_checkpoint(path: str | Path) -> DrafterCheckpoint:
    """A drafter directory (config.json + weights) or the weights file itself."""
    weights = find_weights(path)
    root = weights.root
    notes: list[str] = []
    config = read_config(root)
    if config is None:
        notes.append("no config.json next to the weights; sizes come from tensor shapes only")
        config = {}
    layer_config = config.get("transformer_layer_config")
    layer_config = layer_config if isinstance(layer_config, dict) else {}
    tensors = weights.all_infos()
    names = set(tensors)
    layout = _layout(names, config)

    lm_head = _require_shape(tensors.get(LM_HEAD), 2, "[draft_vocab_size, hidden_size]")
    norm = _require_shape(tensors.get(NORM), 1, "[hidden_size]")
    fc = _require_shape(tensors.get(FC), 2, "[hidden_size, 3 * target_hidden_size]")
    embed = _require_shape(tensors.get(EMBED), 2, "[target_vocab_size, hidden_size]")
    d2t = _require_shape(tensors.get("d2t"), 1, "[draft_vocab_size]")
    t2d = _require_shape(tensors.get("t2d"), 1, "[target_vocab_size]")
    if d2t is not None and d2t.dtype not in _INTEGER_DTYPES:
        raise BadInput(d2t.file, f"tensor 'd2t' has dtype {d2t.dtype}; expected integer offsets (int64)")
    if t2d is not None and t2d.dtype != "bool" and t2d.dtype not in _INTEGER_DTYPES:
        raise BadInput(t2d.file, f"tensor 't2d' has dtype {t2d.dtype}; expected a bool mask")

    hidden_size = _hidden_size(config, layer_config, lm_head, norm, fc, notes, root)
    draft_vocab_size = _draft_vocab_size(config, lm_head, d2t, notes, root)
    target_vocab_size = _target_vocab_size(config, layer_config, t2d, embed, notes)
    aux_layer_ids = _aux_layer_ids(config, notes)
    target_hidden_size = _target_hidden_size(config, fc, aux_layer_ids, notes)
    if lm_head is None:
        notes.append(
            "no lm_head.weight: sglang would use a random head unless draft_vocab_size is unset "
            "(sglang PR #27908); modelopt falls back to the target's head"
        )

    mapping = None
    if d2t is not None:
        offsets = offsets_array(d2t.file, "d2t", weights.load_array("d2t"))
        mask, mask_note = (None, None)
        if t2d is not None:
            mask, mask_note = mask_array(t2d.file, "t2d", weights.load_array("t2d"))
        vocab = target_vocab_size
        mapping_notes: tuple[str, ...] = (mask_note,) if mask_note else ()
        if vocab is None and mask is None:
            vocab = int((np.arange(offsets.shape[0]) + offsets).max()) + 1
            mapping_notes += (
                f"target vocab size unknown (no t2d, no vocab_size in config.json); "
                f"range checks assume {vocab} (largest mapped id + 1)",
            )
        mapping = mapping_from_arrays(d2t.file, offsets, mask, target_vocab_size=vocab, notes=mapping_notes)

    return DrafterCheckpoint(
        path=root,
        files=weights.files,
        file_kind=weights.kind,
        layout=layout,
        config=config,
        tensors=tensors,
        hidden_size=hidden_size,
        draft_vocab_size=draft_vocab_size,
        target_vocab_size=target_vocab_size,
        target_hidden_size=target_hidden_size,
        aux_layer_ids=aux_layer_ids,
        mapping=mapping,
        notes=tuple(notes),
        _weights=weights,
    )


def _hidden_size(config, layer_config, lm_head, norm, fc, notes, root) -> int:
    from_tensors: list[tuple[str, int]] = [
        (info.name, int(info.shape[dim])) for info, dim in ((norm, 0), (lm_head, 1), (fc, 0)) if info is not None
    ]
    for name, size in from_tensors[1:]:
        if size != from_tensors[0][1]:
            info = {NORM: norm, LM_HEAD: lm_head, FC: fc}[name]
            raise BadInput(
                info.file,
                f"tensor {name!r} has shape {list(info.shape)}, which does not fit "
                f"hidden size {from_tensors[0][1]} from {from_tensors[0][0]!r}",
            )
    configured = _config_int(config, layer_config, "hidden_size")
    if from_tensors:
        size = from_tensors[0][1]
        if configured is not None and configured != size:
            notes.append(f"config.json hidden_size is {configured} but {from_tensors[0][0]} says {size}")
        return size
    if configured is None:
        raise BadInput(
            root,
            "cannot tell the hidden size: no norm.weight, lm_head.weight or fc.weight, "
            "and no hidden_size in config.json",
        )
    return configured


def _draft_vocab_size(config, lm_head, d2t, notes, root) -> int:
    configured = config.get("draft_vocab_size")
    configured = configured if isinstance(configured, int) and not isinstance(configured, bool) else None
    if lm_head is not None and d2t is not None and lm_head.shape[0] != d2t.shape[0]:
        raise BadInput(
            d2t.file,
            f"tensor 'd2t' has {d2t.shape[0]} entries but lm_head.weight has "
            f"{lm_head.shape[0]} rows; they must both be the draft vocab size",
        )
    size = lm_head.shape[0] if lm_head is not None else d2t.shape[0] if d2t is not None else configured
    if size is None:
        raise BadInput(
            root, "cannot tell the draft vocab size: no lm_head.weight, no d2t, no draft_vocab_size in config.json"
        )
    if configured is not None and configured != size:
        notes.append(
            f"config.json draft_vocab_size is {configured} but the tensors hold {size} "
            "(an engine building the head from config.json would fail to load them)"
        )
    return int(size)


def _target_vocab_size(config, layer_config, t2d, embed, notes) -> int | None:
    if t2d is not None and embed is not None and t2d.shape[0] != embed.shape[0]:
        raise BadInput(
            t2d.file,
            f"tensor 't2d' has {t2d.shape[0]} entries but embed_tokens.weight has "
            f"{embed.shape[0]} rows; both must be the target vocab size",
        )
    size = t2d.shape[0] if t2d is not None else embed.shape[0] if embed is not None else None
    configured = _config_int(config, layer_config, "vocab_size")
    if size is not None and configured is not None and configured != size:
        notes.append(f"config.json vocab_size is {configured} but the tensors say the target vocab is {size}")
    return int(size) if size is not None else configured


def _target_hidden_size(config, fc, aux_layer_ids, notes) -> int | None:
    configured = config.get("target_hidden_size")
    configured = configured if isinstance(configured, int) and not isinstance(configured, bool) else None
    if fc is None:
        return configured
    chunks = len(aux_layer_ids) if aux_layer_ids else 3
    in_features = fc.shape[1]
    if in_features % chunks:
        notes.append(f"fc.weight takes {in_features} inputs, not a multiple of {chunks} aux layers")
        return configured
    derived = in_features // chunks
    if configured is not None and configured != derived:
        notes.append(
            f"config.json target_hidden_size is {configured} but fc.weight takes {in_features} "
            f"inputs = {chunks} x {derived}"
        )
    return derived


@dataclass(frozen=True, eq=False)
class _Dequantized(DrafterCheckpoint):
    """A DrafterCheckpoint whose tensors are read through a dequantizing reader (``dequantized``)."""

    read: Callable[[str], torch.Tensor] | None = field(default=None, repr=False)

    def tensor(self, name: str) -> torch.Tensor:
        if name not in self.tensors or self.read is None:
            raise BadInput(self.path, f"checkpoint has no tensor {name!r}")
        return self.read(name)
