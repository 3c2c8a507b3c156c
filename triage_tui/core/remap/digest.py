"""BLAKE3 of a whole file, read through memory-mapped windows (the provenance of what was read)."""

from __future__ import annotations

import os
from pathlib import Path

from triage_tui.core import fileio
from triage_tui.core.remap import tuning


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
