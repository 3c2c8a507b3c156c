"""BLAKE3 of a whole file, read through memory-mapped windows (the provenance of what was read), and what
the single pass hands the verification so that it can hash the source as it compares it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triage_tui.core import fileio
from triage_tui.core.fix.remap import tuning


def file_blake3(path: Path) -> str:
    """BLAKE3 of a file (the source's digest where it is not hashed while it is copied: .bin sources)."""
    import blake3

    digest = blake3.blake3()
    with fileio.opened(path) as fd:
        size = os.fstat(fd).st_size
        for offset in range(0, size, tuning.WINDOW_BYTES):
            with fileio.mapped(fd, offset, min(tuning.WINDOW_BYTES, size - offset)) as data:
                digest.update(data.data)  # the array's memoryview: numpy types its buffer only on 3.12+
                del data
    return digest.hexdigest()


@dataclass(frozen=True)
class SourceRead:
    """What the single pass read of one source file, for the verification to hold the source to."""

    head: bytes  # the 8-byte length and the JSON header, as read
    size: int
    # BLAKE3 of the old lm_head rows that no new row copies, when the mean was summed from them
    # (the comparison with the output cannot see a change there); None when nothing reads them
    dropped: str | None


def dropped_rows_hasher(needs_sum: bool):
    """A BLAKE3 for the old lm_head rows no new row copies, when the mean reads them; else None."""
    if not needs_sum:
        return None
    import blake3

    return blake3.blake3()


def hash_dropped_rows(hasher, rows: np.ndarray, positions: np.ndarray) -> None:
    """Feed ``hasher`` the rows (uint8 [n, row_bytes]) whose new position is -1, in order, run by run."""
    dropped = np.flatnonzero(positions < 0)
    if not dropped.size:
        return
    breaks = np.flatnonzero(np.diff(dropped) != 1) + 1
    for run in np.split(dropped, breaks):
        hasher.update(rows[int(run[0]) : int(run[-1]) + 1].data)
