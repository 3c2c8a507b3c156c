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
from dataclasses import dataclass, field

import numpy as np


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
        return cls(np.arange(d2t.shape[0], dtype=np.int64) + d2t, int(target_vocab_size),
                   source=source, stored_t2d=stored_t2d, notes=tuple(notes))

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
