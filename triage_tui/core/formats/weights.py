"""Where the tensors of a Hugging Face style model directory live, and one-at-a-time access to them.

One resolver for drafter checkpoints and target models alike. Files are looked for in the
order transformers prefers: ``model.safetensors``, ``model.safetensors.index.json``,
``pytorch_model.bin``, ``pytorch_model.bin.index.json``, else a lone ``*.safetensors``, else
SpecForge 0.2.0's ``training_state.pt``, whose ``draft_state_dict`` is read like a ``.bin``.
With an index, only the shards that hold a requested name are opened, so a 1 TB target
costs a few header reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.json_file import read_json
from triage_tui.core.formats.remote_safetensors import fetched_whole, opened_placeholder
from triage_tui.core.formats.safe_torch import (
    TensorInfo,
    load_safetensors_array,
    load_safetensors_rows,
    load_safetensors_tensor,
    safe_torch_load,
    tensor_info,
)
from triage_tui.core.formats.safetensors_header import read_safetensors_header
from triage_tui.core.formats.training_state import DRAFT_STATE_DICT, TRAINING_STATE

if TYPE_CHECKING:
    import numpy as np
    import torch

# torch is imported where a tensor is read or written, not at module import: it takes ~1 s, and
# safetensors headers need none of it.

_CANDIDATES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


@dataclass(frozen=True, eq=False)
class WeightFiles:
    """The weight files of one model and a lazy name -> tensor lookup over them."""

    root: Path  # the directory (config.json lives here)
    kind: str  # "safetensors" | "bin"
    files: tuple[Path, ...]
    weight_map: dict[str, Path] | None  # from an index file; None for a single file
    _headers: dict[Path, Mapping[str, TensorInfo]] = field(default_factory=dict, repr=False)
    _bin_states: dict[Path, dict[str, torch.Tensor]] = field(default_factory=dict, repr=False)

    def _file_tensors(self, file: Path) -> Mapping[str, TensorInfo]:
        if file not in self._headers:
            if self.kind == "safetensors":
                with opened_placeholder(file) as remote:
                    # A mirrored checkpoint (runs/remote.py): its header by range; ``file`` stays the
                    # name shown, and each tensor is fetched by range when it is read (below).
                    self._headers[file] = (
                        {name: replace(info, file=file) for name, info in remote.tensors.items()}
                        if remote is not None
                        else read_safetensors_header(file)
                    )
            else:
                state = _load_bin_state(file)
                self._bin_states[file] = state
                self._headers[file] = {name: tensor_info(name, t, file) for name, t in state.items()}
        return self._headers[file]

    def names(self) -> list[str]:
        if self.weight_map is not None:
            return list(self.weight_map)
        return list(self._file_tensors(self.files[0]))

    def info(self, name: str) -> TensorInfo | None:
        """Shape and dtype of one tensor, reading only the header of the file that holds it."""
        if self.weight_map is not None:
            file = self.weight_map.get(name)
            if file is None:
                return None
            found = self._file_tensors(file).get(name)
            if found is None:
                raise BadInput(file, f"the index says {name!r} is in this shard, but it is not")
            return found
        return self._file_tensors(self.files[0]).get(name)

    def all_infos(self) -> Mapping[str, TensorInfo]:
        """Every tensor's metadata (reads every header). A single safetensors file's is its header's
        compact table (each tensor's ``TensorInfo`` built when asked for); shards' are merged."""
        if len(self.files) == 1 and self.weight_map is None:
            return self._file_tensors(self.files[0])
        merged: dict[str, TensorInfo] = {}
        for file in self.files:
            merged.update(self._file_tensors(file))
        if self.weight_map is not None:
            for name in self.weight_map:
                self.info(name)  # raises when a shard lacks a name its index promises
        return merged

    def load(self, name: str) -> torch.Tensor:
        """One tensor: memory-mapped through safe_open, or from the mmap'd pickle for .bin."""
        found = self.info(name)
        if found is None:
            raise BadInput(self.root, f"no tensor {name!r} in the weights")
        if self.kind == "safetensors":
            with opened_placeholder(found.file) as remote:
                return remote.tensor(name) if remote is not None else load_safetensors_tensor(found.file, name)
        return self._bin_states[found.file][name]

    def load_array(self, name: str) -> np.ndarray | torch.Tensor:
        """A tensor of integers or bools (d2t, t2d): numpy from safetensors, without importing torch."""
        found = self.info(name)
        if found is None:
            raise BadInput(self.root, f"no tensor {name!r} in the weights")
        if self.kind == "safetensors":
            with opened_placeholder(found.file) as remote:
                if remote is not None:
                    remote.ensure([name])
                    return load_safetensors_array(remote.path, name)
            return load_safetensors_array(found.file, name)
        return self._bin_states[found.file][name]

    def load_rows(self, name: str, spans: list[tuple[int, int]]) -> list[torch.Tensor]:
        """Rows [start, stop) of tensor `name` for each span, without reading the rest of it."""
        found = self.info(name)
        if found is None:
            raise BadInput(self.root, f"no tensor {name!r} in the weights")
        if self.kind == "safetensors":
            with opened_placeholder(found.file) as remote:
                if remote is not None:
                    return remote.rows(name, spans)
            return load_safetensors_rows(found.file, name, spans)
        tensor = self._bin_states[found.file][name]  # memory-mapped: a slice reads only its rows
        return [tensor[start:stop].clone() for start, stop in spans]


def _load_bin_state(file: Path) -> dict[str, torch.Tensor]:
    import torch

    with fetched_whole(file) as readable:
        state = safe_torch_load(readable)
    if not isinstance(state, dict):
        raise BadInput(file, f"holds a {type(state).__name__}, not a state dict of tensors")
    if file.name == TRAINING_STATE:
        # SpecForge 0.2.0 keeps the drafter inside its training state (formats/training_state.py).
        draft = state.get(DRAFT_STATE_DICT)
        if not isinstance(draft, dict):
            raise BadInput(
                file,
                f"no '{DRAFT_STATE_DICT}' in this training state: it holds no drafter weights "
                "(a SpecForge classic training state sits beside model.safetensors)",
            )
        state = draft
    not_tensors = [str(k) for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if not_tensors:
        raise BadInput(file, "not a flat state dict: non-tensor entries " + ", ".join(not_tensors[:5]))
    return state


def read_config(root: Path) -> dict | None:
    """``config.json`` in ``root`` as a dict, None when absent; BadInput when malformed."""
    path = root / "config.json"
    if not path.is_file():
        return None
    config = read_json(path)
    if not isinstance(config, dict):
        raise BadInput(path, "not a JSON object")
    return config


def find_weights(path: str | Path) -> WeightFiles:
    """The weights of a model directory, or of the one weights/index file ``path`` names."""
    path = Path(path)
    if not path.exists():
        raise BadInput(path, "no such file or directory")
    if path.is_dir():
        chosen = next((path / name for name in _CANDIDATES if (path / name).is_file()), None)
        if chosen is None:
            lone = sorted(path.glob("*.safetensors"))
            if len(lone) == 1:
                chosen = lone[0]
            elif not lone and (path / TRAINING_STATE).is_file():
                chosen = path / TRAINING_STATE  # SpecForge 0.2.0 <run_id>-step<N>/
            else:
                raise BadInput(
                    path,
                    "no weights here (looked for "
                    + ", ".join(_CANDIDATES)
                    + f", a {TRAINING_STATE} holding draft_state_dict)",
                )
        path = chosen
    root = path.parent
    name = path.name
    if name.endswith(".index.json"):
        return _from_index(path)
    kind = "safetensors" if name.endswith(".safetensors") else "bin"
    return WeightFiles(root, kind, (path,), None)


def _from_index(index_path: Path) -> WeightFiles:
    """A sharded model: ``{"weight_map": {tensor name: shard file}}``, every shard checked to exist."""
    root = index_path.parent
    index = read_json(index_path)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise BadInput(index_path, "no 'weight_map' object in the index")
    kind = "safetensors" if index_path.name.endswith(".safetensors.index.json") else "bin"
    shards: dict[str, Path] = {}
    for tensor_name, shard in weight_map.items():
        if not isinstance(shard, str) or Path(shard).name != shard or shard in ("", ".", ".."):
            raise BadInput(
                index_path, f"weight_map entry {tensor_name!r} names {shard!r}, not a file in this directory"
            )
        if shard not in shards:
            shard_path = root / shard
            if not shard_path.is_file():
                raise BadInput(index_path, f"shard {shard} (holding {tensor_name!r}) is missing")
            shards[shard] = shard_path
    mapped = {tensor_name: shards[shard] for tensor_name, shard in weight_map.items()}
    return WeightFiles(root, kind, tuple(shards.values()), mapped)
