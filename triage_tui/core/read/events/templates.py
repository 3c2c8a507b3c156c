"""Templates: one skeleton per (tag, writer, byte layout), matched exactly, many records at once.

Scalar events of one tag from one writer are byte-identical except for the wall_time, step and
value fields. Records of one length are grouped by their bytes outside those fields; a group's
skeleton words, hashed, find every member with numpy, and each member's data CRC is the
skeleton's CRC updated by table for the ~14 bytes that vary (``LayoutTemplates.data_crcs``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from triage_tui.core.read.events.crc import byte_crc_table, crc32c, mask, pair_crc_table
from triage_tui.core.read.events.wire import Layout

_HASH_MULT = [
    0x9E3779B97F4A7C15,
    0xC2B2AE3D27D4EB4F,
    0x165667B19E3779F9,
    0xD6E8FEB86659FD93,
    0xFF51AFD7ED558CCD,
    0xC4CEB9FE1A85EC53,
    0x94D049BB133111EB,
    0xBF58476D1CE4E5B9,
]


@dataclass
class Template:
    tag_id: int
    plugin: str | None


class LayoutTemplates:
    """All templates sharing one layout: their skeleton words, for exact matching."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        width = -(-layout.length // 8) * 8
        skeleton = np.zeros(width, np.uint8)
        skeleton[: layout.length] = 0xFF
        if layout.wall >= 0:
            skeleton[layout.wall : layout.wall + 8] = 0
        if layout.step >= 0:
            skeleton[layout.step : layout.step + layout.step_width] = 0
        skeleton[layout.value : layout.value + layout.value_width] = 0
        self.masks = skeleton.view("<u8")  # bytes past the payload (its CRC, the next record) too
        variable = np.flatnonzero(skeleton[: layout.length] == 0).tolist()
        # The variable bytes two by two where they are adjacent (the wall time's 8, the value's 4,
        # a two-byte step's): one lookup in a 65 536-entry table for both, which halved the casts,
        # gathers and xors of data_crcs (100k records: 4.8 -> 2.9 ms). The tables are looked up
        # where they are used (crc.py caches them), not held here.
        self._crc_parts: list[tuple[int, int, bool]] = []  # (offset, bytes after it, two bytes)
        i = 0
        while i < len(variable):
            pair = i + 1 < len(variable) and variable[i + 1] == variable[i] + 1
            self._crc_parts.append((variable[i], layout.length - 1 - variable[i], pair))
            i += 2 if pair else 1
        self.templates: list[Template] = []
        # Word j of every template's skeleton, one array per j (lookup reads them column by column).
        self._skeleton_columns = [np.empty(0, np.uint64) for _ in range(self.masks.size)]
        self.sorted_hashes = np.empty(0, np.uint64)
        self.sorted_ids = np.empty(0, np.int64)
        self._tag_ids = np.empty(0, np.int64)
        self._skeleton_crcs = np.empty(0, np.uint32)  # CRC-32C of each template's skeleton bytes
        self._pending: list[tuple[np.ndarray, int]] = []

    def words(self, matrix: np.ndarray) -> np.ndarray:
        return matrix & self.masks

    @staticmethod
    def hashes(words: np.ndarray) -> np.ndarray:
        h = np.zeros(words.shape[0], np.uint64)
        for j in range(words.shape[1]):
            h += words[:, j] * np.uint64(_HASH_MULT[j % len(_HASH_MULT)])
            h ^= h >> np.uint64(29)
        return h

    def lookup(self, words: np.ndarray, hashes: np.ndarray) -> np.ndarray:
        """Template index per row (-1: none), matched on the exact skeleton bytes."""
        self._sync()
        if not self.templates:
            return np.full(hashes.size, -1, np.int64)
        at = np.minimum(np.searchsorted(self.sorted_hashes, hashes), self.sorted_hashes.size - 1)
        ids = self.sorted_ids[at]
        differ = self.sorted_hashes[at] != hashes
        # Column by column against the skeleton each row's hash points at (a row that missed is
        # compared with some template and already differs): no (rows x words) copies.
        for j, column in enumerate(self._skeleton_columns):
            differ |= np.take(column, ids) != words[:, j]
        ids[differ] = -1
        return ids

    def add(self, template: Template, words: np.ndarray, h: int) -> None:
        self.templates.append(template)
        self._pending.append((words, h))

    def tag_ids(self) -> np.ndarray:
        self._sync()
        return self._tag_ids

    def _sync(self) -> None:
        # New templates are folded in once per discovery round, not once each (10 000 tags).
        if not self._pending:
            return
        first = self._skeleton_columns[0].size
        new = np.stack([w for w, _ in self._pending])
        self._skeleton_columns = [np.concatenate([old, new[:, j]]) for j, old in enumerate(self._skeleton_columns)]
        hashes = np.concatenate([self.sorted_hashes, np.array([h for _, h in self._pending], np.uint64)])
        ids = np.concatenate([self.sorted_ids, np.arange(first, first + len(self._pending))])
        order = np.argsort(hashes, kind="stable")
        self.sorted_hashes, self.sorted_ids = hashes[order], ids[order]
        self._tag_ids = np.array([t.tag_id for t in self.templates], np.int64)
        length = self.layout.length
        crcs = [crc32c(w.view(np.uint8)[:length].tobytes()) for w, _ in self._pending]
        self._skeleton_crcs = np.concatenate([self._skeleton_crcs, np.array(crcs, np.uint32)])
        self._pending = []

    def data_crcs(self, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Masked data CRC of every payload row (a C-contiguous uint8 matrix) matching template `ids`:
        the skeleton's CRC xor one table lookup per variable byte, or per two adjacent ones (about 7 for a
        scalar)."""
        self._sync()
        crc = self._skeleton_crcs[ids]
        if not len(rows):
            return mask(crc)
        for position, distance, pair in self._crc_parts:
            if pair:
                column = np.ndarray((len(rows),), "<u2", buffer=rows, offset=position, strides=(rows.strides[0],))
                table = pair_crc_table(distance)
            else:
                column, table = rows[:, position], byte_crc_table(distance)
            np.bitwise_xor(crc, np.take(table, column), out=crc)
        return mask(crc)
