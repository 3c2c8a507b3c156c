"""Vocab mapping files in every on-disk form, read into (and written from) ``VocabMapping``.

Forms (docs/formats.md section 2): SpecForge ``cache/vocab_mapping/<key>.pt`` and EAGLE
``cache.pt`` (``torch.save({"d2t", "t2d"})``), modelopt ``d2t.pt`` (a bare offsets tensor,
frequency order, no t2d), speculators ``d2t.npy``/``t2d.npy`` (PR #1081: ``d2t-{Vd}.npy``/
``t2d-{Vd}.npy``), and the ``d2t``/``t2d`` buffers of a drafter checkpoint. Anomalies are
reported in ``VocabMapping.notes`` and never fixed: the mapping always means what an
inference engine would make of the file (``hot_ids = arange(Vd) + d2t``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.safe_torch import load_plain_arrays, safe_torch_load
from triage_tui.core.formats.training_state import TRAINING_STATE
from triage_tui.core.vocab import VocabMapping

# torch is imported where a tensor is read or written, not at module import: it takes ~1 s, and
# safetensors headers and .npy mappings need none of it.

_NO_VOCAB_SIZE = "cannot tell the target vocab size; pass --target or a t2d"


def _as_array(path: str | Path, name: str, value: object) -> np.ndarray | None:
    torch = sys.modules.get("torch")  # a tensor exists only once torch is imported
    if torch is not None and isinstance(value, torch.Tensor):
        # A weights-only load rebuilds these too; none holds a plain array of ids to read.
        kind = ("a meta tensor (no data)" if value.device.type == "meta"
                else f"a {str(value.layout).removeprefix('torch.')} tensor" if value.layout != torch.strided
                else "a nested tensor" if value.is_nested
                else f"a quantized tensor ({_dtype_name(value)})" if value.is_quantized
                else None)
        if kind is not None:
            raise BadInput(path, f"{name} is {kind}; expected a dense tensor of integers")
        if value.dtype.is_floating_point and value.dtype not in (torch.float16, torch.float32, torch.float64):
            value = value.float()  # bf16, float8: numpy has none; the caller's dtype check names the original
        try:
            return value.detach().cpu().numpy()
        except (TypeError, RuntimeError):  # a dtype numpy has no counterpart for
            raise BadInput(path, f"{name} has dtype {_dtype_name(value)}; expected integers") from None
    if isinstance(value, np.ndarray):
        return value
    return None


def offsets_array(path: str | Path, name: str, value: object) -> np.ndarray:
    """A stored ``d2t``: one-dimensional integers, else BadInput naming the file and tensor."""
    array = _as_array(path, name, value)
    if array is None:
        raise BadInput(path, f"{name} is a {type(value).__name__}, not a tensor")
    if array.ndim != 1:
        raise BadInput(path, f"{name} has shape {list(array.shape)}; expected one dimension [draft_vocab_size]")
    if array.dtype == bool or not np.issubdtype(array.dtype, np.integer):
        raise BadInput(path, f"{name} has dtype {_dtype_name(value)}; expected integer offsets (int64)")
    return array.astype(np.int64, copy=False)


def mask_array(path: str | Path, name: str, value: object) -> tuple[np.ndarray, str | None]:
    """A stored ``t2d``: one-dimensional bool (0/1 integers accepted with a note), else BadInput."""
    array = _as_array(path, name, value)
    if array is None:
        raise BadInput(path, f"{name} is a {type(value).__name__}, not a tensor")
    if array.ndim != 1:
        raise BadInput(path, f"{name} has shape {list(array.shape)}; expected one dimension [target_vocab_size]")
    if array.dtype == bool:
        return array, None
    if np.issubdtype(array.dtype, np.integer) and array.size and array.min() >= 0 and array.max() <= 1:
        return array.astype(bool), f"{name} is stored as {_dtype_name(value)} 0/1, not bool"
    raise BadInput(path, f"{name} has dtype {_dtype_name(value)}; expected a bool mask over the target vocab")


def _dtype_name(value: object) -> str:
    dtype = getattr(value, "dtype", None)
    return str(dtype).removeprefix("torch.") if dtype is not None else type(value).__name__


def mapping_from_arrays(
    path: str | Path,
    d2t: np.ndarray,
    t2d: np.ndarray | None,
    *,
    target_vocab_size: int | None = None,
    notes: tuple[str, ...] = (),
) -> VocabMapping:
    """The mapping engines would use (``arange + d2t``), with every anomaly noted."""
    notes = list(notes)
    if t2d is not None:
        vocab = int(t2d.shape[0])
        if target_vocab_size is not None and target_vocab_size != vocab:
            notes.append(f"t2d has {vocab} entries but the target vocab size given is {target_vocab_size}")
    elif target_vocab_size is not None:
        vocab = int(target_vocab_size)
    else:
        raise BadInput(path, _NO_VOCAB_SIZE)
    draft = int(d2t.shape[0])
    hot = np.arange(draft, dtype=np.int64) + d2t
    mapping_notes = _anomalies(d2t, hot, t2d, vocab)
    return VocabMapping(hot, vocab, source=str(path), stored_t2d=t2d, notes=tuple(notes + mapping_notes))


def _anomalies(d2t: np.ndarray, hot: np.ndarray, t2d: np.ndarray | None, vocab: int) -> list[str]:
    notes: list[str] = []
    draft = int(d2t.shape[0])
    if draft and not d2t.any():
        notes.append("d2t is all zeros: identity mapping (draft id i is target id i)")
    outside = np.flatnonzero((hot < 0) | (hot >= vocab))
    strictly_increasing = draft > 1 and bool(np.all(np.diff(d2t) > 0))
    looks_absolute = strictly_increasing and d2t.min() >= 0 and d2t.max() < vocab
    t2d_ids = np.flatnonzero(t2d) if t2d is not None else None
    if looks_absolute and (outside.size or (t2d_ids is not None and np.array_equal(t2d_ids, d2t))):
        notes.append(
            "d2t holds absolute target ids, not offsets: values ascend like token ids"
            + (f" and arange+d2t puts {outside.size} of {draft} positions past the target vocab"
               if outside.size else " and equal the ids t2d marks")
            + "; engines compute target = draft + d2t[draft], so every position maps to the wrong token")
    elif looks_absolute and draft >= 16:
        notes.append("d2t is strictly increasing, which offsets of a real vocab almost never are; "
                     "it may hold absolute target ids instead of offsets")
    if outside.size:
        first = int(outside[0])
        notes.append(f"{outside.size} of {draft} draft positions map outside the target vocab [0, {vocab}) "
                     f"(first: position {first} -> id {int(hot[first])})")
    in_range = hot[(hot >= 0) & (hot < vocab)]
    unique = np.unique(in_range)
    if unique.size < in_range.size:
        notes.append(f"{in_range.size - unique.size} draft positions repeat a target id another position has")
    if t2d is not None and t2d_ids is not None:
        if t2d_ids.size != draft:
            notes.append(f"t2d marks {t2d_ids.size} tokens but the draft vocab has {draft} (t2d.sum() != Vd)")
        only_t2d = np.setdiff1d(t2d_ids, unique, assume_unique=True)
        only_d2t = np.setdiff1d(unique, t2d_ids, assume_unique=True)
        if only_t2d.size or only_d2t.size:
            notes.append(f"t2d disagrees with d2t: {only_t2d.size} tokens marked in t2d are not mapped by d2t, "
                         f"{only_d2t.size} tokens mapped by d2t are not marked in t2d")
    if draft > 1 and not bool(np.all(np.diff(hot) > 0)):
        if t2d is not None:
            notes.append("draft order is not ascending by target id, yet the file has a t2d: a trainer that "
                         "builds targets with logits[..., t2d] (SpecForge/EAGLE/speculators) misaligns lm_head rows")
        else:
            notes.append("draft order is not ascending by target id (frequency order, as modelopt writes); "
                         "self-consistent for engines, which use d2t only")
    return notes


def read_mapping(path: str | Path, *, target_vocab_size: int | None = None) -> VocabMapping:
    """Any mapping form: a .pt, a .npy (or a dir with the pair), a checkpoint dir or weights file."""
    path = Path(path)
    if not path.exists():
        raise BadInput(path, "no such file or directory")
    if path.is_dir():
        return _read_mapping_dir(path, target_vocab_size)
    name = path.name
    if name.endswith(".npy"):
        return _read_npy_pair(path, target_vocab_size)
    if name.endswith((".safetensors", ".index.json")) or name.startswith("pytorch_model") or name == TRAINING_STATE:
        return _checkpoint_mapping(path)  # SpecForge 0.2.0: the run's own d2t/t2d in draft_state_dict
    return _read_mapping_pt(path, target_vocab_size)


def _read_mapping_dir(path: Path, target_vocab_size: int | None) -> VocabMapping:
    d2t_files = sorted(path.glob("d2t*.npy"))
    if len(d2t_files) > 1:
        raise BadInput(path, "several d2t files (" + ", ".join(p.name for p in d2t_files) + "); pass one")
    if d2t_files:
        return _read_npy_pair(d2t_files[0], target_vocab_size)
    if ((path / "config.json").is_file() or any(path.glob("*.safetensors")) or (path / "pytorch_model.bin").is_file()
            or (path / TRAINING_STATE).is_file()):
        return _checkpoint_mapping(path)
    for name in ("d2t.pt", "cache.pt"):  # modelopt draft_vocab_cache/<model>/d2t.pt, EAGLE cache.pt
        if (path / name).is_file():
            return _read_mapping_pt(path / name, target_vocab_size)
    raise BadInput(path, "no vocab mapping here (looked for d2t*.npy, a checkpoint, d2t.pt, cache.pt)")


def _checkpoint_mapping(path: Path) -> VocabMapping:
    # Imported here: checkpoint.py builds its mapping with this module's mapping_from_arrays.
    from triage_tui.core.formats.checkpoint import read_checkpoint

    checkpoint = read_checkpoint(path)
    if checkpoint.mapping is None:
        raise BadInput(path, "checkpoint has no d2t buffer, so no vocab mapping "
                             "(vLLM would treat it as identity)")
    return checkpoint.mapping


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise BadInput(path, f"not a readable .npy array: {' '.join(str(err).split())[:200]}") from None


def _read_npy_pair(path: Path, target_vocab_size: int | None) -> VocabMapping:
    """speculators ``d2t.npy`` + ``t2d.npy`` (or ``d2t-{Vd}.npy`` + ``t2d-{Vd}.npy``); either may be named."""
    name = path.name
    if name.startswith("t2d"):
        d2t_path, t2d_path = path.with_name("d2t" + name[3:]), path
        if not d2t_path.is_file():
            raise BadInput(path, f"no {d2t_path.name} next to it; a t2d alone does not give the draft order")
    elif name.startswith("d2t"):
        d2t_path, t2d_path = path, path.with_name("t2d" + name[3:])
    else:
        raise BadInput(path, "a .npy mapping file must be named d2t*.npy or t2d*.npy")
    d2t = offsets_array(d2t_path, "d2t", _load_npy(d2t_path))
    t2d, t2d_note = (None, None)
    if t2d_path.is_file():
        t2d, t2d_note = mask_array(t2d_path, "t2d", _load_npy(t2d_path))
    return mapping_from_arrays(d2t_path, d2t, t2d, target_vocab_size=target_vocab_size,
                               notes=(t2d_note,) if t2d_note else ())


def _read_mapping_pt(path: Path, target_vocab_size: int | None) -> VocabMapping:
    loaded = load_plain_arrays(path)  # without torch, when the file is plain integer/bool tensors
    if loaded is None:
        loaded = safe_torch_load(path)
    torch = sys.modules.get("torch")
    if isinstance(loaded, np.ndarray) or (torch is not None and isinstance(loaded, torch.Tensor)):
        # modelopt d2t.pt: offsets only, frequency order
        return mapping_from_arrays(path, offsets_array(path, "d2t", loaded), None,
                                   target_vocab_size=target_vocab_size)
    if not isinstance(loaded, dict):
        raise BadInput(path, f"holds a {type(loaded).__name__}, not a {{'d2t', 't2d'}} dict or a d2t tensor")
    if "d2t" not in loaded:
        keys = ", ".join(sorted(map(str, loaded))[:8])
        raise BadInput(path, f"no 'd2t' in this file (keys: {keys})")
    d2t = offsets_array(path, "d2t", loaded["d2t"])
    t2d, t2d_note = (None, None)
    if loaded.get("t2d") is not None:
        t2d, t2d_note = mask_array(path, "t2d", loaded["t2d"])
    return mapping_from_arrays(path, d2t, t2d, target_vocab_size=target_vocab_size,
                               notes=(t2d_note,) if t2d_note else ())


def _atomic_write(path: Path, write) -> None:
    """Write next to the destination, then rename: a crash never leaves a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_mapping_pt(mapping: VocabMapping, path: str | Path) -> Path:
    """SpecForge/EAGLE form: ``torch.save({"d2t": int64 offsets [Vd], "t2d": bool [V]})``."""
    import torch

    path = Path(path)
    payload = {"d2t": torch.from_numpy(mapping.d2t().copy()), "t2d": torch.from_numpy(mapping.t2d())}
    _atomic_write(path, lambda tmp: torch.save(payload, tmp))
    return path


def _save_npy(path: str, array: np.ndarray) -> None:
    # Through a file object: np.save would append ".npy" to the temporary name.
    with open(path, "wb") as f:
        np.save(f, array, allow_pickle=False)


def write_mapping_npy(mapping: VocabMapping, directory: str | Path, *, sized_names: bool = False) -> list[Path]:
    """speculators form: ``d2t.npy`` (int64 offsets) and ``t2d.npy`` (bool); ``-{Vd}`` names after PR #1081."""
    directory = Path(directory)
    suffix = f"-{mapping.draft_vocab_size}" if sized_names else ""
    written = []
    for stem, array in (("d2t", mapping.d2t()), ("t2d", mapping.t2d())):
        target = directory / f"{stem}{suffix}.npy"
        _atomic_write(target, lambda tmp, a=array: _save_npy(tmp, a))
        written.append(target)
    return written
