"""The one vocab-mapping type of the program, and the arithmetic every on-disk form needs.

A draft vocab is an array of target token ids, one per draft position ("hot ids"):
position ``i`` of the drafter's ``lm_head`` stands for target token ``hot_ids[i]``.
Every project stores it as ``d2t`` offsets, ``target = draft + d2t[draft]``, plus an
optional ``t2d`` membership mask over the target vocab (sgl-project/SpecForge classic `specforge/data/preprocessing.py`;
sglang ``hot_token_id = d2t + arange(Vd)``, vLLM ``arange(Vd) + draft_id_to_target_id``).
Readers in ``core/formats`` convert every form into a ``VocabMapping`` at the edge.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from triage_tui.core.errors import BadInput

if TYPE_CHECKING:
    from torch import Tensor

# torch is never imported here: a tensor can only reach these functions once its caller has
# imported torch, and safetensors headers and .npy mappings need none of it.

_NO_VOCAB_SIZE = "cannot tell the target vocab size; pass --target or a t2d"


@dataclass(frozen=True, eq=False)
class VocabMapping:
    """Target token id of each draft position, plus the target vocab size.

    ``stored_t2d`` keeps the mask exactly as the file held it (None when the file had
    none) so that checks can compare it with the mask the hot ids imply; it is never
    used to build the mapping. ``notes`` are anomalies the reader saw and did not fix
    (absolute ids stored as offsets, a t2d that disagrees with d2t, ...).
    """

    hot_ids: np.ndarray
    target_vocab_size: int
    source: str = ""
    stored_t2d: np.ndarray | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        hot = np.ascontiguousarray(self.hot_ids, dtype=np.int64)
        hot.setflags(write=False)
        object.__setattr__(self, "hot_ids", hot)
        if self.stored_t2d is not None:
            t2d = np.ascontiguousarray(self.stored_t2d, dtype=bool)
            t2d.setflags(write=False)
            object.__setattr__(self, "stored_t2d", t2d)

    @classmethod
    def from_d2t(
        cls,
        d2t: np.ndarray,
        target_vocab_size: int,
        *,
        source: str = "",
        stored_t2d: np.ndarray | None = None,
        notes: tuple[str, ...] = (),
    ) -> VocabMapping:
        """Build from offsets: ``hot_ids = arange(Vd) + d2t`` (all-zero d2t is the identity)."""
        d2t = np.asarray(d2t, dtype=np.int64)
        return cls(
            np.arange(d2t.shape[0], dtype=np.int64) + d2t,
            int(target_vocab_size),
            source=source,
            stored_t2d=stored_t2d,
            notes=tuple(notes),
        )

    @classmethod
    def identity(cls, draft_vocab_size: int, target_vocab_size: int, *, source: str = "") -> VocabMapping:
        return cls(np.arange(draft_vocab_size, dtype=np.int64), int(target_vocab_size), source=source)

    @property
    def draft_vocab_size(self) -> int:
        return int(self.hot_ids.shape[0])

    def d2t(self) -> np.ndarray:
        """Offsets as every trainer and engine stores them."""
        return self.hot_ids - np.arange(self.draft_vocab_size, dtype=np.int64)

    def t2d(self) -> np.ndarray:
        """The membership mask the hot ids imply (what SpecForge/EAGLE/speculators write)."""
        mask = np.zeros(self.target_vocab_size, dtype=bool)
        valid = self.hot_ids[(self.hot_ids >= 0) & (self.hot_ids < self.target_vocab_size)]
        mask[valid] = True
        return mask

    def is_ascending(self) -> bool:
        """True when draft order is ascending target-id order, the order ``logits[..., t2d]`` yields."""
        return bool(np.all(np.diff(self.hot_ids) > 0))

    def out_of_range(self) -> np.ndarray:
        """Draft positions whose target id falls outside ``[0, target_vocab_size)``."""
        return np.flatnonzero((self.hot_ids < 0) | (self.hot_ids >= self.target_vocab_size))

    def draft_position_of(self) -> np.ndarray:
        """Inverse map: for each target id, its draft position, or -1 when not in the draft vocab."""
        inverse = np.full(self.target_vocab_size, -1, dtype=np.int64)
        ok = (self.hot_ids >= 0) & (self.hot_ids < self.target_vocab_size)
        inverse[self.hot_ids[ok]] = np.flatnonzero(ok)
        return inverse

    def sha256(self) -> str:
        """Digest of what the mapping means (hot ids + target vocab size), not of the file."""
        h = hashlib.sha256()
        h.update(np.int64(self.target_vocab_size).tobytes())
        h.update(self.hot_ids.tobytes())
        return h.hexdigest()


# Constructors from stored arrays: every reader in core/formats (mapping files, checkpoint
# buffers) turns what it loaded into a VocabMapping through these, so the checks on a stored
# d2t/t2d and the anomaly notes are the same whatever the file.


def _as_array(path: str | Path, name: str, value: object) -> np.ndarray | None:
    torch = sys.modules.get("torch")  # a tensor exists only once torch is imported
    if torch is not None and isinstance(value, torch.Tensor):
        tensor = cast("Tensor", value)  # torch found in sys.modules is an untyped module object
        # A weights-only load rebuilds these too; none holds a plain array of ids to read.
        kind = (
            "a meta tensor (no data)"
            if tensor.device.type == "meta"
            else f"a {str(tensor.layout).removeprefix('torch.')} tensor"
            if tensor.layout != torch.strided
            else "a nested tensor"
            if tensor.is_nested
            else f"a quantized tensor ({_dtype_name(tensor)})"
            if tensor.is_quantized
            else None
        )
        if kind is not None:
            raise BadInput(path, f"{name} is {kind}; expected a dense tensor of integers")
        if tensor.dtype.is_floating_point and tensor.dtype not in (torch.float16, torch.float32, torch.float64):
            tensor = tensor.float()  # bf16, float8: numpy has none; the caller's dtype check names the original
        try:
            return tensor.detach().cpu().numpy()
        except (TypeError, RuntimeError):  # a dtype numpy has no counterpart for
            raise BadInput(path, f"{name} has dtype {_dtype_name(tensor)}; expected integers") from None
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
    if array.size == 0:
        # Said here, of this tensor: an empty mask otherwise reads as "a target vocab of 0 tokens",
        # and the blame falls on the d2t or on the target model.
        raise BadInput(path, f"{name} is empty: a verifier mask has one entry per target token")
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
    given = list(notes)
    if t2d is not None:
        vocab = int(t2d.shape[0])
        if target_vocab_size is not None and target_vocab_size != vocab:
            given.append(f"t2d has {vocab} entries but the target vocab size given is {target_vocab_size}")
    elif target_vocab_size is not None:
        vocab = int(target_vocab_size)
    else:
        raise BadInput(path, _NO_VOCAB_SIZE)
    draft = int(d2t.shape[0])
    hot = np.arange(draft, dtype=np.int64) + d2t
    mapping_notes = _anomalies(d2t, hot, t2d, vocab)
    return VocabMapping(hot, vocab, source=str(path), stored_t2d=t2d, notes=tuple(given + mapping_notes))


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
            + (
                f" and arange+d2t puts {outside.size} of {draft} positions past the target vocab"
                if outside.size
                else " and equal the ids t2d marks"
            )
            + "; engines compute target = draft + d2t[draft], so every position maps to the wrong token"
        )
    elif looks_absolute and draft >= 16:
        notes.append(
            "d2t is strictly increasing, which offsets of a real vocab almost never are; "
            "it may hold absolute target ids instead of offsets"
        )
    if outside.size:
        first = int(outside[0])
        notes.append(
            f"{outside.size} of {draft} draft positions map outside the target vocab [0, {vocab}) "
            f"(first: position {first} -> id {int(hot[first])})"
        )
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
            notes.append(
                f"t2d disagrees with d2t: {only_t2d.size} tokens marked in t2d are not mapped by d2t, "
                f"{only_d2t.size} tokens mapped by d2t are not marked in t2d"
            )
    if draft > 1 and not bool(np.all(np.diff(hot) > 0)):
        if t2d is not None:
            notes.append(
                "draft order is not ascending by target id, yet the file has a t2d: a trainer that "
                "builds targets with logits[..., t2d] (SpecForge/EAGLE/speculators) misaligns lm_head rows"
            )
        else:
            notes.append(
                "draft order is not ascending by target id (frequency order, as modelopt writes); "
                "self-consistent for engines, which use d2t only"
            )
    return notes
