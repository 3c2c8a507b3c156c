"""The path through torch: .bin sources, and lm_head dtypes numpy lacks.

Each tensor goes to its own offset, so order is free: unchanged tensors first (copied in the
kernel where their byte range is known), the lm_head last, gathered window by window (on a GPU
when one is worth the copy), once the mean of the old rows (summed in a thread) is ready.
"""

from __future__ import annotations

import os
import threading

from triage_tui.core import fileio
from triage_tui.core.fix.remap import tuning
from triage_tui.core.fix.remap.job import WRITE_SPAN, PhaseProgress, check_cancel
from triage_tui.core.fix.remap.plan import RemapPlan
from triage_tui.core.fix.remap.rows import InitRows, Rows, as_bytes, lm_head_chunk
from triage_tui.core.fix.remap.writer import Entry, SafetensorsWriter


def _copy_tensor(
    checkpoint,
    entry: Entry,
    writer: SafetensorsWriter,
    progress: PhaseProgress,
    cancel: threading.Event | None,
) -> None:
    """An unchanged tensor: copied in the kernel when its byte range is known (a safetensors source),
    else streamed by windows."""
    info = checkpoint.tensors[entry.name]
    if info.data is not None:
        begin, end = info.data
        fd = os.open(info.file, os.O_RDONLY)
        try:
            for offset in range(0, end - begin, tuning.WINDOW_BYTES):
                check_cancel(cancel)
                length = min(tuning.WINDOW_BYTES, end - begin - offset)
                writer.copy(entry.name, offset, fd, begin + offset, length)
                progress.advance(length, f"copying {entry.name}", WRITE_SPAN)
            return
        except fileio.NoInKernelCopy:
            pass  # the whole tensor again, through memory
        finally:
            os.close(fd)
    rows = Rows(checkpoint, entry.name)
    for lo, hi in rows.windows():
        check_cancel(cancel)
        data = as_bytes(rows.read(lo, hi))
        writer.write(entry.name, lo * rows.row_bytes, data)
        progress.advance(data.size, f"copying {entry.name}", WRITE_SPAN)
        del data


def write_tensors(
    plan: RemapPlan,
    writers: dict[str, SafetensorsWriter],
    gather,
    init_rows: InitRows,
    progress: PhaseProgress,
    cancel: threading.Event | None,
) -> None:
    """The path through torch (.bin sources, lm_head dtypes numpy lacks): each tensor goes to its own
    offset, so order is free: the lm_head comes last, once the mean (summed in a thread) is ready."""
    checkpoint = plan.checkpoint
    lm_head_name = plan.lm_head_name
    head_writer = next(w for w in writers.values() if any(e.name == lm_head_name for e in w.entries))
    for writer in writers.values():
        for entry in writer.entries:
            if entry.name not in (lm_head_name, "d2t", "t2d"):
                _copy_tensor(checkpoint, entry, writer, progress, cancel)
    entry = next(e for e in head_writer.entries if e.name == lm_head_name)
    row_bytes = entry.nbytes // max(1, entry.shape[0])
    step = max(1, tuning.WINDOW_BYTES // max(1, row_bytes))
    for lo in range(0, entry.shape[0], step):
        hi = min(entry.shape[0], lo + step)
        check_cancel(cancel)
        chunk = lm_head_chunk(plan, gather, init_rows, lo, hi, cancel)
        head_writer.write(entry.name, lo * row_bytes, as_bytes(chunk))
        progress.advance(chunk.numel() * chunk.element_size(), "writing lm_head", WRITE_SPAN)
