"""The single pass over a safetensors source: every byte read once, in file order, hashed as it is copied.

Each window is read into a private buffer, hashed (BLAKE3, in a thread) and written from that same
buffer, so the digest recorded is that of the bytes copied; unchanged tensors are copied inside
the kernel and hashed from the output. The old lm_head's rows go to their new positions as they
pass (each old row feeds at most one new row), and the mean of the old rows is summed on the way.
No torch on this path.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from pathlib import Path

import numpy as np

from triage_tui.core import fileio
from triage_tui.core.formats.safe_torch import SAFETENSORS_DTYPES
from triage_tui.core.remap import tuning
from triage_tui.core.remap.job import WRITE_SPAN, Cancelled, PhaseProgress, check_cancel
from triage_tui.core.remap.plan import RemapPlan, source_changed
from triage_tui.core.remap.rows import InitRows, is_range
from triage_tui.core.remap.writer import SafetensorsWriter, write_runs


class _HashPipe:
    """Hashing in a thread, in the order asked, while the main thread copies: windows read into two
    buffers used in turn, and ranges of the output file (hashed from the copy itself)."""

    def __init__(self, size: int) -> None:
        self.buffers = [bytearray(size), bytearray(size)]
        self.done: list[threading.Event | None] = [None, None]
        self.turn = 0
        self.error: BaseException | None = None
        self.items: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="triage-remap-blake3", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (item := self.items.get()) is not None:
            hasher, what, done = item
            try:
                if self.error is None and hasher is not None:
                    if isinstance(what, tuple):  # (fd, offset, length) of the output: the bytes as copied
                        with fileio.mapped(*what) as data:
                            hasher.update(data)  # blake3 releases the GIL: the copying goes on meanwhile
                            del data
                    else:
                        hasher.update(what)
            except BaseException as err:  # noqa: BLE001 - re-raised by the main thread
                self.error = err
            if done is not None:
                done.set()

    def buffer(self) -> tuple[int, bytearray]:
        """A buffer whose previous window has been hashed."""
        i, self.turn = self.turn, self.turn ^ 1
        done = self.done[i]
        if done is not None:
            done.wait()
            self.done[i] = None
        self._raise()
        return i, self.buffers[i]

    def hash(self, i: int, hasher, view: memoryview) -> None:
        self.done[i] = threading.Event()
        self.items.put((hasher, view, self.done[i]))

    def hash_range(self, hasher, fd: int, offset: int, length: int) -> None:
        self.items.put((hasher, (fd, offset, length), None))

    def drain(self) -> None:
        """Wait until everything asked so far has been hashed."""
        done = threading.Event()
        self.items.put((None, None, done))
        done.wait()
        self.done = [None, None]
        self._raise()

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        if self.error is None:
            self.error = Cancelled("hashing stopped")  # what is still queued is skipped, not hashed
        self.items.put(None)  # after whatever is queued: the buffers and files outlive the thread's use
        self.thread.join()


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


def stream_source(
    plan: RemapPlan,
    writers: dict[str, SafetensorsWriter],
    init_rows: InitRows,
    progress: PhaseProgress,
    cancel: threading.Event | None,
) -> dict[str, str]:
    """Copy every unchanged tensor and move the lm_head rows, reading each source file once;
    returns the BLAKE3 of each file as read."""
    import blake3

    lm_head_name = plan.lm_head_name
    writer_of = {entry.name: writer for writer in writers.values() for entry in writer.entries}
    row_bytes = init_rows.row_bytes
    window_rows = max(1, tuning.WINDOW_BYTES // row_bytes)
    new_position = np.full(init_rows.old_rows, -1, dtype=np.int64)
    copied = np.flatnonzero(plan.source_rows >= 0)
    new_position[plan.source_rows[copied]] = copied
    head_writer = writer_of[lm_head_name]
    digests: dict[str, str] = {}
    in_kernel = True
    pipe = _HashPipe(max(tuning.WINDOW_BYTES, window_rows * row_bytes))
    try:
        for file in plan.checkpoint.files:
            hasher = blake3.blake3()
            with fileio.opened(file) as fd:
                fileio.read_sequentially(fd)
                size = os.fstat(fd).st_size
                try:
                    i, buffer = pipe.buffer()
                    prefix = bytes(fileio.pread_into(fd, buffer, 8, 0))
                    header_length = int.from_bytes(prefix, "little")
                    if header_length > size - 8:
                        raise _SourceChanged
                    header = bytes(fileio.pread_into(fd, buffer, header_length, 8))
                    layout = _source_layout(plan, file, header, size)
                    hasher.update(prefix)
                    hasher.update(header)
                    for name, begin, end in layout:
                        step = window_rows * row_bytes if name == lm_head_name else tuning.WINDOW_BYTES
                        for offset in range(begin, end, step):
                            check_cancel(cancel)
                            length = min(step, end - offset)
                            if in_kernel and name not in (lm_head_name, "d2t", "t2d"):
                                # copied inside the kernel (no trip through this process), then hashed
                                # from the output file: the digest is of the bytes as copied
                                writer = writer_of[name]
                                try:
                                    writer.copy(name, offset - begin, fd, offset, length)
                                    pipe.hash_range(hasher, writer.fd, writer.start_of(name) + offset - begin, length)
                                    progress.advance(length, f"copying {name}", WRITE_SPAN)
                                    continue
                                except fileio.NoInKernelCopy:
                                    in_kernel = False  # this window and the rest through memory
                            i, buffer = pipe.buffer()
                            view = fileio.pread_into(fd, buffer, length, offset)
                            pipe.hash(i, hasher, view)
                            if name == lm_head_name:
                                first_row = (offset - begin) // row_bytes
                                rows = np.frombuffer(view, dtype=np.uint8).reshape(-1, row_bytes)
                                _scatter_rows(
                                    head_writer,
                                    lm_head_name,
                                    rows,
                                    new_position[first_row : first_row + rows.shape[0]],
                                    row_bytes,
                                )
                                init_rows.add(rows)
                                del rows
                            elif name not in ("d2t", "t2d"):  # those two are replaced by the run's
                                writer_of[name].write(name, offset - begin, np.frombuffer(view, dtype=np.uint8))
                            progress.advance(length, f"copying {name}", WRITE_SPAN)
                            del view
                    pipe.drain()
                except (_SourceChanged, fileio.ShortRead):
                    raise source_changed(plan) from None
            digests[file.name] = hasher.hexdigest()
    finally:
        pipe.close()
    initialised = np.flatnonzero(plan.source_rows < 0)
    for start in range(0, initialised.size, window_rows):
        check_cancel(cancel)
        positions = initialised[start : start + window_rows]
        write_runs(head_writer, lm_head_name, positions, init_rows.rows_bytes(positions), row_bytes)
    return digests


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
