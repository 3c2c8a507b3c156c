"""Offline hidden-state dumps (SpecForge `scripts/prepare_hidden_states.py`; speculators
`src/speculators/data_generation/`), a deterministic sample of them.

- SpecForge ``scripts/prepare_hidden_states.py``: ``rows_{a}-{b}/data_{i}.ckpt`` (main: ``.ckpt.gz``),
  ``torch.save`` of ``{input_ids [T], loss_mask [T], hidden_state [1,T,Ht] (post-norm last layer),
  aux_hidden_state [1,T,3Ht]}``.
- speculators ``data_generation/offline.py``: ``hs_{i}.safetensors`` with ``token_ids [T]`` and
  ``hidden_states [T,k,H]``; the last slot is the verifier's last layer (pre-norm), the rest are aux.
- modelopt ``compute_hidden_states_hf.py``: ``<conversation_id>.pt`` with ``input_ids [T]``,
  ``hidden_states [T,H]`` (post-norm), ``aux_hidden_states [T,3H]``; a capture that declares
  ``base_hidden_prenorm`` true (vLLM's extractor, NVIDIA/Model-Optimizer PR #1846) holds it pre-norm.
Every form becomes ``HiddenStateSample`` with aux states as float32 ``[T, k*Ht]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.safe_torch import load_safetensors_tensor, safe_torch_load
from triage_tui.core.formats.safetensors_header import read_safetensors_header
from triage_tui.core.natural_sort import natural_key

_SPECFORGE_PATTERNS = ("data_*.ckpt", "data_*.ckpt.gz", "rows_*/data_*.ckpt", "rows_*/data_*.ckpt.gz")
_SPECULATORS_PATTERNS = ("hs_*.safetensors", "*/hs_*.safetensors")
_MODELOPT_PATTERNS = ("*.pt",)
# A ModelOpt dump whose last hidden state was captured before the final norm says so under this key.
_MODELOPT_PRENORM_KEY = "base_hidden_prenorm"


@dataclass(frozen=True)
class HiddenStateSample:
    """One dumped sequence: token ids, optional loss mask, aux hidden states, last target hidden."""

    path: Path
    input_ids: np.ndarray  # int64 [T]
    loss_mask: np.ndarray | None  # [T], None when the format does not store it
    aux_hidden: torch.Tensor  # float32 [T, k*Ht], aux layers concatenated low -> high
    target_hidden: torch.Tensor | None  # float32 [T, Ht], the target's last hidden state
    num_aux_chunks: int | None  # k, when the widths make it unambiguous
    # The stored dtype of each hidden-state tensor ("aux", "target"), before the float32 widening
    # above: what the trainer will be fed (checks/dump_values.py says why it matters).
    stored_dtypes: dict[str, str] = field(default_factory=dict)
    # The dump's own word that its last hidden state is pre-norm (ModelOpt's ``base_hidden_prenorm``).
    declares_pre_norm: bool = False


@dataclass(frozen=True)
class HiddenStateDumps:
    root: Path
    format: str  # "specforge" | "speculators" | "modelopt"
    files_total: int  # how many dump files exist; len(samples) were read
    samples: tuple[HiddenStateSample, ...]
    aux_layer_ids: tuple[int, ...] | None  # the dump formats do not record them
    target_hidden_is_post_norm: bool | None


def _list_files(root: Path) -> tuple[str, list[Path]]:
    for kind, patterns in (
        ("specforge", _SPECFORGE_PATTERNS),
        ("speculators", _SPECULATORS_PATTERNS),
        ("modelopt", _MODELOPT_PATTERNS),
    ):
        found = {p for pattern in patterns for p in root.glob(pattern) if p.is_file()}
        files = sorted(found, key=lambda p: natural_key(str(p)))
        if files:
            return kind, files
    raise BadInput(root, "no hidden-state dumps here (looked for rows_*/data_*.ckpt[.gz], hs_*.safetensors, *.pt)")


def _kind_of_file(path: Path) -> str:
    if path.name.endswith(".safetensors"):
        return "speculators"
    if path.name.endswith((".ckpt", ".ckpt.gz")):
        return "specforge"
    return "modelopt"


def evenly_spaced(count: int, wanted: int) -> list[int]:
    """``wanted`` indices spread over ``range(count)``, first and last included, deterministic."""
    if count <= 0 or wanted <= 0:
        return []
    if wanted >= count:
        return list(range(count))
    return [int(i) for i in np.linspace(0, count - 1, wanted).round()]


def _dump_files(path: str | Path) -> tuple[str, list[Path], Path]:
    """(format, sorted dump files, their directory) for a dump directory or a single dump file."""
    path = Path(path)
    if not path.exists():
        raise BadInput(path, "no such file or directory")
    if path.is_dir():
        kind, files = _list_files(path)
        return kind, files, path
    return _kind_of_file(path), [path], path.parent


def read_dumps(path: str | Path, *, max_files: int = 8) -> HiddenStateDumps:
    """Up to ``max_files`` dump files, evenly spaced over the sorted list of all of them."""
    kind, files, root = _dump_files(path)
    chosen = [files[i] for i in evenly_spaced(len(files), max_files)]
    reader = {"specforge": _read_specforge, "speculators": _read_speculators, "modelopt": _read_modelopt}[kind]
    samples = tuple(reader(file) for file in chosen)
    return HiddenStateDumps(
        root=root,
        format=kind,
        files_total=len(files),
        samples=samples,
        aux_layer_ids=None,
        target_hidden_is_post_norm=kind != "speculators" and not any(s.declares_pre_norm for s in samples),
    )


@dataclass(frozen=True)
class LossMaskFraction:
    """The share of positions a trainer's loss counts, from the loss masks of a sample of dumps."""

    fraction: float  # valid positions / all positions, over the files read
    files_read: int
    files_total: int
    positions: int
    root: Path

    def describe(self) -> str:
        return (
            f"loss_mask of {self.files_read} of {self.files_total} hidden-state dumps in {self.root} "
            f"({self.positions} positions, the last of each zeroed as the SpecForge loader does)"
        )


def read_loss_mask_fraction(path: str | Path, *, max_files: int = 16) -> LossMaskFraction | None:
    """The valid fraction SpecForge's ploss is scaled by, or None when the dumps carry no loss mask.

    SpecForge's offline loader (``process_offline_eagle3_sample``) zeroes each sample's last
    position; its loss then averages over every position (specforge/core/loss.py). Only the
    ``loss_mask`` of each file is materialised (torch.load maps the rest lazily).
    """
    kind, files, root = _dump_files(path)
    if kind == "speculators":
        return None  # speculators keeps the loss mask in its dataset, not in hs_*.safetensors
    valid = positions = read = 0
    for index in evenly_spaced(len(files), max_files):
        data = _load_dict(files[index], "a hidden-state dict")
        mask = _loss_mask(files[index], data)
        if mask is None:
            return None
        mask = mask.astype(bool)
        if mask.size:
            mask[-1] = False
        valid += int(mask.sum())
        positions += int(mask.size)
        read += 1
    if positions == 0:
        return None
    return LossMaskFraction(valid / positions, read, len(files), positions, root)


def _load_dict(path: Path, expected: str) -> dict:
    loaded = safe_torch_load(path)
    if not isinstance(loaded, dict):
        raise BadInput(path, f"holds a {type(loaded).__name__}, not a {expected} hidden-state dict")
    return loaded


def _tensor(path: Path, data: dict, key: str) -> torch.Tensor:
    value = data.get(key)
    if value is None:
        keys = ", ".join(sorted(map(str, data))[:8])
        raise BadInput(path, f"no {key!r} in this dump (keys: {keys})")
    if not isinstance(value, torch.Tensor):
        raise BadInput(path, f"{key!r} is a {type(value).__name__}, not a tensor")
    return value


def _optional_tensor(path: Path, data: dict, key: str) -> torch.Tensor | None:
    return None if data.get(key) is None else _tensor(path, data, key)


def _loss_mask(path: Path, data: dict) -> np.ndarray | None:
    mask = _optional_tensor(path, data, "loss_mask")
    return None if mask is None else _mask_array(path, _squeeze_batch(path, "loss_mask", mask, 1, "[T]"))


def _squeeze_batch(path: Path, key: str, tensor: torch.Tensor, ndim: int, what: str) -> torch.Tensor:
    """Accept ``[1, ...]`` for a per-sample tensor of ``ndim`` dimensions; anything else is BadInput."""
    if tensor.dim() == ndim + 1 and tensor.shape[0] == 1:
        tensor = tensor[0]
    if tensor.dim() != ndim:
        raise BadInput(path, f"{key!r} has shape {list(tensor.shape)}; expected {what}")
    return tensor


def _dtype_name(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _token_ids(path: Path, key: str, tensor: torch.Tensor) -> np.ndarray:
    tensor = _squeeze_batch(path, key, tensor, 1, "[T]")
    if tensor.is_floating_point() or tensor.dtype == torch.bool:
        raise BadInput(path, f"{key!r} has dtype {_dtype_name(tensor)}; expected token ids")
    return tensor.to(torch.int64).numpy().copy()


def _mask_array(path: Path, tensor: torch.Tensor) -> np.ndarray:
    """A loss mask as numpy; bf16/float8 (numpy has none) widened, a complex one refused, naming the file."""
    if tensor.is_complex():
        raise BadInput(path, f"'loss_mask' has dtype {_dtype_name(tensor)}; expected a 0/1 mask")
    if tensor.is_floating_point() and tensor.dtype not in (torch.float16, torch.float32, torch.float64):
        tensor = tensor.to(torch.float32)
    return tensor.numpy().copy()


def _check_length(path: Path, tokens: int, key: str, tensor: torch.Tensor | np.ndarray | None) -> None:
    if tensor is not None and tensor.shape[0] != tokens:
        raise BadInput(path, f"{key!r} covers {tensor.shape[0]} positions but the dump has {tokens} tokens")


def _chunks(aux_width: int, hidden_width: int | None) -> int | None:
    if hidden_width and aux_width % hidden_width == 0:
        return aux_width // hidden_width
    return None


def _read_specforge(path: Path) -> HiddenStateSample:
    data = _load_dict(path, "SpecForge")
    input_ids = _token_ids(path, "input_ids", _tensor(path, data, "input_ids"))
    tokens = input_ids.shape[0]
    loss_mask = _loss_mask(path, data)
    aux = _squeeze_batch(path, "aux_hidden_state", _tensor(path, data, "aux_hidden_state"), 2, "[1, T, 3*Ht]")
    target = _optional_tensor(path, data, "hidden_state")
    if target is not None:
        target = _squeeze_batch(path, "hidden_state", target, 2, "[1, T, Ht]")
    for key, value in (("loss_mask", loss_mask), ("aux_hidden_state", aux), ("hidden_state", target)):
        _check_length(path, tokens, key, value)
    dtypes = {"aux": _dtype_name(aux)} | ({} if target is None else {"target": _dtype_name(target)})
    return HiddenStateSample(
        path,
        input_ids,
        loss_mask,
        aux.float(),
        None if target is None else target.float(),
        _chunks(aux.shape[1], None if target is None else target.shape[1]),
        dtypes,
    )


def _read_modelopt(path: Path) -> HiddenStateSample:
    data = _load_dict(path, "modelopt")
    input_ids = _token_ids(path, "input_ids", _tensor(path, data, "input_ids"))
    tokens = input_ids.shape[0]
    aux = _squeeze_batch(path, "aux_hidden_states", _tensor(path, data, "aux_hidden_states"), 2, "[T, 3*H]")
    target = _squeeze_batch(path, "hidden_states", _tensor(path, data, "hidden_states"), 2, "[T, H]")
    loss_mask = _loss_mask(path, data)
    for key, value in (("aux_hidden_states", aux), ("hidden_states", target), ("loss_mask", loss_mask)):
        _check_length(path, tokens, key, value)
    prenorm = data.get(_MODELOPT_PRENORM_KEY)
    if isinstance(prenorm, torch.Tensor) and prenorm.numel() == 1:
        prenorm = bool(prenorm.item())
    return HiddenStateSample(
        path,
        input_ids,
        loss_mask,
        aux.float(),
        target.float(),
        _chunks(aux.shape[1], target.shape[1]),
        {"aux": _dtype_name(aux), "target": _dtype_name(target)},
        declares_pre_norm=prenorm is True,
    )


def _read_speculators(path: Path) -> HiddenStateSample:
    header = read_safetensors_header(path)
    for key in ("token_ids", "hidden_states"):
        if key not in header:
            raise BadInput(path, f"no {key!r} in this dump (tensors: {', '.join(sorted(header)[:8])})")
    shape = header["hidden_states"].shape
    if len(shape) != 3 or shape[1] < 2:
        raise BadInput(
            path,
            f"'hidden_states' has shape {list(shape)}; expected [T, k, H] with k >= 2 "
            "(aux layers, then the verifier's last layer)",
        )
    input_ids = _token_ids(path, "token_ids", load_safetensors_tensor(path, "token_ids"))
    hidden = load_safetensors_tensor(path, "hidden_states")
    tokens, layers, width = hidden.shape
    _check_length(path, input_ids.shape[0], "hidden_states", hidden)
    loss_mask = None
    if "loss_mask" in header:
        mask = _squeeze_batch(path, "loss_mask", load_safetensors_tensor(path, "loss_mask"), 1, "[T]")
        _check_length(path, tokens, "loss_mask", mask)
        loss_mask = _mask_array(path, mask)
    # speculators train/data.py: hidden_states[:, :-1].flatten(1) is the draft input, [:, -1] the verifier's
    aux = hidden[:, :-1].reshape(tokens, (layers - 1) * width).float()
    dtypes = {"aux": _dtype_name(hidden), "target": _dtype_name(hidden)}
    return HiddenStateSample(path, input_ids, loss_mask, aux, hidden[:, -1].float(), layers - 1, dtypes)
