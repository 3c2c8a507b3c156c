"""One event file read incrementally: the bytes appended since the last poll, framed into whole records.

Robustness: only whole records are consumed, so a half-written tail waits for the next poll;
damage is stepped over to the next offset holding a whole record with valid CRCs (``framing``);
a zero-filled or sparse tail is pending, not corruption: runs of zeros and holes are skipped in
bounded steps (SEEK_DATA/SEEK_HOLE) instead of reading ever larger windows. What the records
mean is the run's business (``reader.RunEvents``), handed each window's records through ``take``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from triage_tui.core import fileio
from triage_tui.core.read.events import tuning
from triage_tui.core.read.events.framing import Frames, frame
from triage_tui.core.series import ReadStats

_PAD = 16  # slack after the data in every read buffer: word gathers may run past the last record


@dataclass
class FileState:
    """How far one event file has been read, and what the run's restart rules have seen of it."""

    path: Path
    dev: int = -1
    ino: int = -1
    offset: int = 0  # everything before it is consumed; it is always a record boundary
    file_version: float | None = None
    seen_start: bool = False
    seen_summary: bool = False
    prefix: str = ""  # "<subdir>/" of series names from this file (series_prefixes)
    series_seen: set[str] = field(default_factory=set)  # series this file has added points to
    quiet: tuple[int, int] | None = None  # (size, mtime_ns) when a poll found bytes it could not take yet
    damaged_from: int | None = None  # the file's last bytes, from here on, are no records (framing.Frames.damaged_tail)


Take = Callable[[bytearray, Frames, "FileState", "ReadStats"], None]


def read_appended(handle: IO[bytes], state: FileState, size: int, stats: ReadStats, take: Take) -> None:
    """Read ``handle`` (an unbuffered file of ``size`` bytes) from ``state.offset`` on: each window's
    whole records to ``take``, ``state.offset`` moved past what was consumed."""
    window = tuning.READ_WINDOW
    base = state.offset  # where this read starts: past a run of zero bytes, beyond offset
    while base < size:
        remaining = size - base
        # Up to the next hole of a sparse file: what lies beyond it starts with zeros.
        data_end = fileio.hole_at(handle.fileno(), base, size)
        if data_end == base:
            found = fileio.next_nonzero(handle.fileno(), base, size)
            if found is None:
                break  # a sparse tail: the writer's data has not landed yet
            base, window = max(base + 1, found - 16), tuning.READ_WINDOW
            continue
        want = min(window, remaining, data_end - base)
        buf = bytearray(want + _PAD)  # zero slack: word gathers may run past the last record
        handle.seek(base)
        n = fileio.read_into(handle, memoryview(buf)[:want])
        stats.bytes_read += n
        frames = frame(buf, n, remaining - n)
        state.damaged_from = base + frames.consumed if frames.damaged_tail and n >= remaining else None
        if frames.consumed and base != state.offset:
            # Zeros [offset, base), then whole records: the zeros were damage after all.
            stats.skipped_bytes += base - state.offset
            stats.corrupt_records += 0 if frames.corrupt else 1
        stats.skipped_bytes += frames.skipped_bytes
        stats.corrupt_records += frames.corrupt
        if frames.starts.size:
            stats.records += int(frames.starts.size)
            take(buf, frames, state, stats)
        if frames.consumed:
            state.offset = base = base + frames.consumed
            window = tuning.READ_WINDOW
            continue
        if n and not np.frombuffer(buf, np.uint8, count=n).any():
            # No record starts in zeros. Look for the next byte of data in bounded steps
            # (holes skipped with SEEK_DATA) instead of reading ever larger windows.
            found = fileio.next_nonzero(handle.fileno(), base + n, size)
            if found is None:
                break  # a zero-filled tail: the writer's data has not landed yet
            base, window = (
                max(base + n, found - 16),
                tuning.READ_WINDOW,
            )  # a header starts at most 8 bytes before
            continue
        if n >= remaining or n < want or frames.need > remaining:
            break  # the rest is a record still being written, or damage not yet followed by data
        if base + n >= data_end:
            # What could not be taken runs into a hole: look past the hole for data.
            found = fileio.next_nonzero(handle.fileno(), data_end, size)
            if found is None:
                break
            base, window = max(base + 1, found - 16), tuning.READ_WINDOW
            continue
        window = max(frames.need, 2 * n)  # a record, or damage, longer than the window
