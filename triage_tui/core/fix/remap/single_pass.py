"""The single pass over a safetensors source: every byte read once, in file order, and written.

Unchanged tensors are copied inside the kernel (``copy_file_range``), and so are the old lm_head's
kept rows, to their new positions (one copy per run of rows consecutive in both files; where the
kernel cannot, they go through a private buffer). The mean of the old rows is summed by a thread
beside the copy (``_Mean``), which reads the old lm_head again and hashes the rows no new row copies.
Nothing else is hashed here: the verification hashes the source while it compares it with the output
(verify.verify_streamed), so each byte is hashed once, after it compared equal; what it needs from
this pass (the header bytes, the size, a digest of the dropped rows the mean was summed from) is a
``SourceRead``. No torch on this path.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from pathlib import Path
from typing import Any

import numpy as np

from triage_tui.core import fileio
from triage_tui.core.fix.remap import tuning
from triage_tui.core.fix.remap.digest import SourceRead, dropped_rows_hasher, hash_dropped_rows
from triage_tui.core.fix.remap.job import WRITE_SPAN, Background, PhaseProgress, check_cancel
from triage_tui.core.fix.remap.plan import RemapPlan, source_changed
from triage_tui.core.fix.remap.rows import InitRows, is_range
from triage_tui.core.fix.remap.writer import SafetensorsWriter, write_runs
from triage_tui.core.formats.safe_torch import MAX_SAFETENSORS_HEADER, SAFETENSORS_DTYPES


class _SourceChanged(Exception):
    """The source file no longer is what the plan read (shorter, or another header)."""


def _source_layout(plan: RemapPlan, file: Path, header: bytes, size: int) -> list[tuple[str, int, int]]:
    """(name, begin, end) of each tensor in ``file``, from the header bytes the pass read; they must
    describe the tensors the plan was made from, at the byte ranges it read them at."""
    try:
        entries = json.loads(header)
    except ValueError:
        raise _SourceChanged from None
    if not isinstance(entries, dict):
        raise _SourceChanged
    start = 8 + len(header)
    layout = []
    for name, entry in entries.items():
        if name == "__metadata__":
            continue
        info = plan.checkpoint.tensors.get(name)
        if (
            info is None
            or info.file != file
            or not isinstance(entry, dict)
            or SAFETENSORS_DTYPES.get(str(entry.get("dtype")), ("",))[0] != info.dtype
            or entry.get("shape") != list(info.shape)
            or info.data is None
            or entry.get("data_offsets") != [info.data[0] - start, info.data[1] - start]
        ):
            raise _SourceChanged
        layout.append((name, *info.data))
    layout.sort(key=lambda item: item[1])
    if start + sum(end - begin for _, begin, end in layout) != size or len(layout) != sum(
        1 for info in plan.checkpoint.tensors.values() if info.file == file
    ):
        raise _SourceChanged
    return layout


class _Mean:
    """The old lm_head's rows summed for the mean, and those no new row copies hashed, by a thread of
    their own while the pass goes on copying (on two free cores the sum no longer waits for the copy,
    nor the copy for the sum).

    Windows are queued in file order and summed in that order (the same additions as before, so the
    same mean bit for bit); each is read again from the source through a descriptor the caller keeps
    open until ``finish`` or ``close``, into a buffer of the thread's own. The dropped rows' digest
    is of the very bytes summed.
    """

    def __init__(self, init_rows: InitRows, window_bytes: int, cancel: threading.Event | None) -> None:
        self.init_rows = init_rows
        self.cancel = cancel
        self.stop = threading.Event()
        self.buffer = bytearray(window_bytes)
        self.dropped: dict[str, Any] = {}  # file name -> BLAKE3 of its dropped rows
        self.windows: queue.SimpleQueue[tuple[str, int, int, int, np.ndarray] | None] = queue.SimpleQueue()
        self.worker = Background("triage-remap-mean", self._run)

    def add(self, file_name: str, fd: int, offset: int, length: int, positions: np.ndarray) -> None:
        """Rows ``offset..offset+length`` of ``fd``, whose new positions are ``positions`` (-1: dropped)."""
        self.windows.put((file_name, fd, offset, length, positions))

    def _run(self) -> None:
        row_bytes = self.init_rows.row_bytes
        while (window := self.windows.get()) is not None:
            check_cancel(self.stop)
            check_cancel(self.cancel)
            file_name, fd, offset, length, positions = window
            view = fileio.pread_into(fd, self.buffer, length, offset)
            rows = np.frombuffer(view, dtype=np.uint8).reshape(-1, row_bytes)
            self.init_rows.add(rows)
            hasher = self.dropped.setdefault(file_name, dropped_rows_hasher(True))
            hash_dropped_rows(hasher, rows, positions)
            del rows, view

    def finish(self) -> dict[str, str]:
        """Wait for the last window; the dropped rows' digest of each file that holds the lm_head."""
        self.windows.put(None)
        self.worker.result()
        return {name: hasher.hexdigest() for name, hasher in self.dropped.items()}

    def close(self) -> None:
        """Skip the windows left and wait (before the descriptors they read are closed)."""
        self.stop.set()
        self.windows.put(None)
        self.worker.join()


def stream_source(
    plan: RemapPlan,
    writers: dict[str, SafetensorsWriter],
    init_rows: InitRows,
    progress: PhaseProgress,
    cancel: threading.Event | None,
) -> dict[str, SourceRead]:
    """Copy every unchanged tensor and move the lm_head rows, reading each source file once (the mean's
    thread reads the old lm_head again); returns what was read of each file, by name, for the verification."""
    lm_head_name = plan.lm_head_name
    writer_of = {entry.name: writer for writer in writers.values() for entry in writer.entries}
    row_bytes = init_rows.row_bytes
    window_rows = max(1, tuning.WINDOW_BYTES // row_bytes)
    new_position = np.full(init_rows.old_rows, -1, dtype=np.int64)
    copied = np.flatnonzero(plan.source_rows >= 0)
    new_position[plan.source_rows[copied]] = copied
    head_writer = writer_of[lm_head_name]
    heads: dict[str, tuple[bytes, int]] = {}
    in_kernel = True
    buffer = bytearray(max(tuning.WINDOW_BYTES, window_rows * row_bytes))
    mean = _Mean(init_rows, window_rows * row_bytes, cancel) if init_rows.needs_sum else None
    mean_fds: dict[str, int] = {}  # the mean thread's descriptor of each file it reads
    try:
        for file in plan.checkpoint.files:
            with fileio.opened(file) as fd:
                fileio.read_sequentially(fd)
                size = os.fstat(fd).st_size
                try:
                    prefix = bytes(fileio.pread_into(fd, buffer, 8, 0))
                    header_length = int.from_bytes(prefix, "little")
                    if header_length > min(size - 8, MAX_SAFETENSORS_HEADER):  # the plan read one within both
                        raise _SourceChanged
                    # a header may outgrow the window (the format allows 100 MB; the plan read it whole)
                    header_buffer = buffer if header_length <= len(buffer) else bytearray(header_length)
                    header = bytes(fileio.pread_into(fd, header_buffer, header_length, 8))
                    del header_buffer
                    layout = _source_layout(plan, file, header, size)
                    for name, begin, end in layout:
                        step = window_rows * row_bytes if name == lm_head_name else tuning.WINDOW_BYTES
                        for offset in range(begin, end, step):
                            check_cancel(cancel)
                            length = min(step, end - offset)
                            if in_kernel and name not in (lm_head_name, "d2t", "t2d"):
                                # copied inside the kernel, no trip through this process
                                try:
                                    writer_of[name].copy(name, offset - begin, fd, offset, length)
                                    progress.advance(length, f"copying {name}", WRITE_SPAN)
                                    continue
                                except fileio.NoInKernelCopy:
                                    in_kernel = False  # this window and the rest through memory
                            if name == lm_head_name:
                                first_row = (offset - begin) // row_bytes
                                positions = new_position[first_row : first_row + length // row_bytes]
                                moved = False
                                if in_kernel:
                                    # kept rows copied inside the kernel too: under strace on this project's
                                    # machine each 32 MiB pwrite() of rows took ~200 ms (dirty-page
                                    # throttling) where copy_file_range of the same size took ~30 ms
                                    try:
                                        _copy_rows(
                                            head_writer, lm_head_name, fd, begin, first_row, positions, row_bytes
                                        )
                                        moved = True
                                    except fileio.NoInKernelCopy:
                                        in_kernel = False
                                if not moved:
                                    view = fileio.pread_into(fd, buffer, length, offset)
                                    rows = np.frombuffer(view, dtype=np.uint8).reshape(-1, row_bytes)
                                    _scatter_rows(head_writer, lm_head_name, rows, positions, row_bytes)
                                    del rows, view
                                if mean is not None:
                                    if file.name not in mean_fds:
                                        mean_fds[file.name] = os.dup(fd)
                                    mean.add(file.name, mean_fds[file.name], offset, length, positions)
                                progress.advance(length, f"copying {name}", WRITE_SPAN)
                                continue
                            view = fileio.pread_into(fd, buffer, length, offset)
                            if name not in ("d2t", "t2d"):  # those two are replaced by the run's
                                writer_of[name].write(name, offset - begin, np.frombuffer(view, dtype=np.uint8))
                            progress.advance(length, f"copying {name}", WRITE_SPAN)
                            del view
                except (_SourceChanged, fileio.ShortRead):
                    raise source_changed(plan) from None
            heads[file.name] = (prefix + header, size)
        try:
            dropped = mean.finish() if mean is not None else {}
        except fileio.ShortRead:
            raise source_changed(plan) from None
    finally:
        if mean is not None:
            mean.close()
        for mean_fd in mean_fds.values():
            os.close(mean_fd)
    initialised = np.flatnonzero(plan.source_rows < 0)
    for start in range(0, initialised.size, window_rows):
        check_cancel(cancel)
        positions = initialised[start : start + window_rows]
        write_runs(head_writer, lm_head_name, positions, init_rows.rows_bytes(positions), row_bytes)
    return {name: SourceRead(head, size, dropped.get(name)) for name, (head, size) in heads.items()}


def _copy_rows(
    writer: SafetensorsWriter,
    name: str,
    fd: int,
    head_begin: int,
    first_row: int,
    positions: np.ndarray,
    row_bytes: int,
) -> None:
    """Old rows ``first_row + i`` to new rows ``positions[i]`` (-1: not kept), file to file inside the
    kernel, one copy per run of rows consecutive in both; NoInKernelCopy where that cannot be done."""
    kept = np.flatnonzero(positions >= 0)
    if not kept.size:
        return
    order = np.argsort(positions[kept], kind="stable")
    source, target = kept[order] + first_row, positions[kept][order]
    breaks = (np.flatnonzero((np.diff(source) != 1) | (np.diff(target) != 1)) + 1).tolist()
    for a, b in zip([0, *breaks], [*breaks, source.size], strict=True):
        writer.copy(name, int(target[a]) * row_bytes, fd, head_begin + int(source[a]) * row_bytes, (b - a) * row_bytes)


def _scatter_rows(
    writer: SafetensorsWriter, name: str, rows: np.ndarray, positions: np.ndarray, row_bytes: int
) -> None:
    """Write old rows to their new positions (-1: the row is not kept)."""
    kept = np.flatnonzero(positions >= 0)
    if not kept.size:
        return
    order = np.argsort(positions[kept], kind="stable")
    source = kept[order]
    data = rows[int(source[0]) : int(source[-1]) + 1] if is_range(source) else rows[source]
    write_runs(writer, name, positions[source], data, row_bytes)
