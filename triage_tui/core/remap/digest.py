"""BLAKE3 of a whole file, read through memory-mapped windows (the provenance of what was read); what
the single pass hands the verification so that it can hash the source as it compares it; the thread
that hashes behind the comparison."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from triage_tui.core import fileio
from triage_tui.core.remap import tuning
from triage_tui.core.remap.job import Background


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


class HashBehind:
    """One BLAKE3 fed in order by a thread of its own, so that the hashing (a core) runs beside the
    comparison ahead of it (another core) instead of after it.

    The caller queues each step (a function of the hasher) only once the bytes it hashes compared
    equal with the output; ``hexdigest`` waits for the last step and re-raises the first error of
    one. ``close`` skips the steps left and waits: call it before closing what they read.
    """

    def __init__(self) -> None:
        import blake3

        self.hasher = blake3.blake3()
        self.stop = threading.Event()  # the steps' cancel: set by close()
        self._steps: queue.SimpleQueue[Callable[[Any], None] | None] = queue.SimpleQueue()
        self._worker = Background("triage-remap-blake3", self._run)

    def then(self, step: Callable[[Any], None]) -> None:
        self._steps.put(step)

    def _run(self) -> None:
        while (step := self._steps.get()) is not None:
            step(self.hasher)  # an error ends the thread; result() hands it over

    def hexdigest(self) -> str:
        self._steps.put(None)
        self._worker.result()
        return self.hasher.hexdigest()

    def close(self) -> None:
        self.stop.set()
        self._steps.put(None)
        self._worker.join()
