"""Row arithmetic: an lm_head read a window at a time, gathered in any order, its new rows initialised.

Bytes are compared as bytes (NaN payloads and signed zeros included), and initialised rows are
rounded exactly as torch rounds them, so the single pass (numpy) and the path through torch
write the same file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from triage_tui.core import fileio
from triage_tui.core.errors import BadInput
from triage_tui.core.fix.remap import tuning
from triage_tui.core.fix.remap.job import VERIFY_SPAN, Background, PhaseProgress, check_cancel
from triage_tui.core.fix.remap.plan import RemapPlan
from triage_tui.core.fix.remap.writer import Entry

if TYPE_CHECKING:
    import torch

# lm_head dtypes numpy can sum and round to (bf16 through its float32 top half); others go through torch.
NUMPY_HEAD_DTYPES = {"bfloat16": "<u2", "float16": "<f2", "float32": "<f4", "float64": "<f8"}


class Rows:
    """Row windows of one tensor of a checkpoint, re-opened per window.

    ``DrafterCheckpoint.tensor`` memory-maps the whole tensor; every page touched through
    the map stays counted in the process's memory until the map is dropped, so each window
    is read through a fresh map that is dropped right after.
    """

    def __init__(self, checkpoint, name: str) -> None:
        import torch

        self.checkpoint = checkpoint
        self.name = name
        info = checkpoint.tensors[name]
        self.shape = info.shape
        self.dtype = getattr(torch, info.dtype)
        row_elements = int(np.prod(self.shape[1:], dtype=np.int64)) if len(self.shape) > 1 else 1
        self.row_bytes = row_elements * torch.empty((), dtype=self.dtype).element_size()
        self.window_rows = max(1, tuning.WINDOW_BYTES // max(1, self.row_bytes))

    def windows(self) -> Iterator[tuple[int, int]]:
        rows = self.shape[0] if self.shape else 1
        for lo in range(0, rows, self.window_rows):
            yield lo, min(rows, lo + self.window_rows)

    def read(self, lo: int, hi: int) -> torch.Tensor:
        whole = self.checkpoint.tensor(self.name)
        if whole.dtype != self.dtype or tuple(whole.shape) != tuple(self.shape):
            raise BadInput(
                self.checkpoint.path,
                f"tensor {self.name!r} reads as {whole.dtype} {list(whole.shape)}, "
                f"its header says {self.dtype} {list(self.shape)}",
            )
        return whole if whole.dim() == 0 else whole[lo:hi]

    def gather(self, rows: np.ndarray, cancel: threading.Event | None = None) -> torch.Tensor:
        """``tensor[rows]`` for any order of rows, touching one window of the source at a time."""
        import torch

        if is_range(rows) and rows.size <= self.window_rows:
            return self.read(int(rows[0]), int(rows[-1]) + 1)  # one run of rows: the mapped rows themselves
        out = torch.empty((rows.size, *self.shape[1:]), dtype=self.dtype)
        if not rows.size:
            return out
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        window_of = ordered // self.window_rows
        starts = np.flatnonzero(np.r_[True, window_of[1:] != window_of[:-1]])
        ends = np.r_[starts[1:], ordered.size]
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            check_cancel(cancel)
            lo, hi = int(ordered[start]), int(ordered[end - 1]) + 1
            window = self.read(lo, hi)
            put(out, order[start:end], take(window, ordered[start:end] - lo))
            del window
        return out

    def column_sum(self, cancel: threading.Event | None = None) -> np.ndarray:
        """Sum over rows in float64 (numpy, on the CPU: every device then gets the same mean)."""
        total = np.zeros(self.shape[1:], dtype=np.float64)
        for lo, hi in self.windows():
            check_cancel(cancel)
            total += _float64_row_sum(self.read(lo, hi))
        return total


def _float64_row_sum(window: torch.Tensor) -> np.ndarray:
    import torch

    if window.dtype == torch.bfloat16:
        # bf16 is the top half of a float32: widening by a shift is exact, and much faster than .float()
        wide = window.view(torch.int16).numpy().astype(np.int32)
        wide <<= 16
        values = wide.view(np.float32)
    elif window.dtype in (torch.float32, torch.float64):
        values = window.numpy()
    else:
        values = window.to(torch.float32).numpy()
    return np.add.reduce(values, axis=0, dtype=np.float64)


def is_range(index: np.ndarray) -> bool:
    """True when ``index`` is a, a+1, ..., a+n-1 (a slice does then what fancy indexing would)."""
    return bool(index.size) and int(index[-1]) - int(index[0]) == index.size - 1 and bool(np.all(np.diff(index) == 1))


def take(source: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    import torch

    if is_range(index):
        return source[int(index[0]) : int(index[-1]) + 1]
    return source.index_select(0, torch.from_numpy(index))


def put(target: torch.Tensor, index: np.ndarray, values: torch.Tensor) -> None:
    import torch

    if is_range(index):
        target[int(index[0]) : int(index[-1]) + 1] = values
    else:
        target[torch.from_numpy(index)] = values


class StagedRows:
    """The old lm_head copied once to a device (read window by window), gathered there.

    Random row reads from the mapped file become one sequential read; the gather itself is
    a copy, so the bits are those of the CPU path.
    """

    def __init__(self, rows: Rows, device: torch.device, cancel: threading.Event | None) -> None:
        import torch

        self.rows = rows
        self.device = device
        self.staged = torch.empty(tuple(rows.shape), dtype=rows.dtype, device=device)
        for lo, hi in rows.windows():
            check_cancel(cancel)
            self.staged[lo:hi].copy_(rows.read(lo, hi))

    def gather(self, rows: np.ndarray, cancel: threading.Event | None = None) -> torch.Tensor:
        import torch

        index = torch.from_numpy(rows).to(self.device)
        return self.staged.index_select(0, index).cpu()


def as_bytes(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's bytes as a flat uint8 array (a view when the tensor is contiguous)."""
    import torch

    flat = tensor.contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy() if flat.numel() else np.empty(0, dtype=np.uint8)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality (NaN payloads and signed zeros included), not float equality."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    x, y = as_bytes(a), as_bytes(b)
    if x.size % 8 == 0 and x.ctypes.data % 8 == 0 and y.ctypes.data % 8 == 0:
        x, y = x.view(np.uint64), y.view(np.uint64)  # eight bytes per comparison: ~4x faster
    return np.array_equal(x, y)


def same_file_bytes(
    fd_a: int,
    offset_a: int,
    fd_b: int,
    offset_b: int,
    length: int,
    cancel: threading.Event | None,
    progress: PhaseProgress | None,
    phase: str,
    equal: Callable[[int, int], None] | None = None,
) -> bool:
    """Two byte ranges of files are equal, compared a window at a time through memory maps; each
    window of the first found equal is handed to ``equal`` (offset, length) if one is given."""
    for position in range(0, length, tuning.WINDOW_BYTES):
        check_cancel(cancel)
        n = min(tuning.WINDOW_BYTES, length - position)
        with fileio.mapped(fd_a, offset_a + position, n) as a, fileio.mapped(fd_b, offset_b + position, n) as b:
            same = fileio.equal_bytes(a, b)
            del a, b
        if not same:
            return False
        if equal is not None:
            equal(offset_a + position, n)
        if progress is not None:
            progress.advance(n, phase, VERIFY_SPAN)
    return True


def _column_sum(rows: np.ndarray, dtype: str, wide: np.ndarray | None = None) -> np.ndarray:
    """Sum over the rows (a [n, row_bytes] uint8 array) in float64.

    ``wide``: a uint32 scratch of at least n * row_bytes / 2 elements for a bf16 head, reused from
    window to window (a fresh 64 MiB array per window had the kernel zero its pages every time: a
    third of the remap's CPU).
    """
    if dtype == "bfloat16":
        # bf16 is the top half of a float32: widening by a shift is exact
        halves = rows.view("<u2")
        if wide is None or wide.size < halves.size:
            wide = np.empty(halves.size, dtype=np.uint32)
        widened = wide[: halves.size].reshape(halves.shape)
        np.left_shift(halves, 16, out=widened, dtype=np.uint32)
        values = widened.view(np.float32)
    else:
        values = rows.view(NUMPY_HEAD_DTYPES[dtype])
    return np.add.reduce(values, axis=0, dtype=np.float64)


def float64_to_bytes(values: np.ndarray, dtype: str) -> np.ndarray:
    """``torch.from_numpy(values).to(dtype)``'s bytes: float64 goes to float32 first, then rounds to
    nearest even (c10's BFloat16/Half are built from a float), NaN as torch writes it."""
    if dtype not in NUMPY_HEAD_DTYPES:
        import torch

        return as_bytes(torch.from_numpy(values).to(getattr(torch, dtype)))
    if dtype == "float64":
        return values.astype("<f8").view(np.uint8)
    single = values.astype(np.float32)
    if dtype == "float32":
        return single.astype("<f4").view(np.uint8)
    if dtype == "float16":
        return single.astype("<f2").view(np.uint8)
    bits = single.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
    rounded[np.isnan(single)] = 0x7FC0
    return rounded.view(np.uint8)


class InitRows:
    """Bytes of the initialised rows, computed once and used for writing and for verification.

    The mean's column sum comes either from the single pass over the source (``add``) or, for a
    source read through torch, from a thread summing the old rows while the rest is copied.
    """

    def __init__(self, plan: RemapPlan, old: Rows | None) -> None:
        self.plan = plan
        info = plan.checkpoint.tensors[plan.lm_head_name]
        self.dtype = info.dtype
        self.old_rows, self.width = info.shape
        self.row_bytes = Entry("row", self.dtype, (self.width,)).nbytes
        self.needs_sum = plan.init == "mean" and plan.rows_initialized > 0
        self._sum = np.zeros(self.width, dtype=np.float64)
        self._wide = np.empty(0, dtype=np.uint32)  # _column_sum's scratch, kept across windows
        self._sum_thread = None
        self._mean: np.ndarray | None = None
        self._stop = threading.Event()
        if self.needs_sum and old is not None:
            self._sum_thread = Background("triage-remap-mean", lambda: old.column_sum(self._stop))
        self.target_head: torch.Tensor | None = None
        if plan.init == "target" and plan.rows_initialized:
            head = plan.target_model.lm_head()
            if head.dim() != 2 or head.shape[1] != self.width or head.shape[0] != plan.run_mapping.target_vocab_size:
                raise BadInput(
                    plan.target_path,
                    f"target lm_head has shape {list(head.shape)}; expected "
                    f"[{plan.run_mapping.target_vocab_size}, {self.width}]",
                )
            self.target_head = head

    def add(self, rows: np.ndarray) -> None:
        """Old rows (uint8, [n, row_bytes]) read by the single pass, in order."""
        if self.needs_sum:
            if self.dtype == "bfloat16" and self._wide.size < rows.size // 2:
                self._wide = np.empty(rows.size // 2, dtype=np.uint32)
            self._sum += _column_sum(rows, self.dtype, self._wide)

    def mean(self) -> np.ndarray:
        if self._mean is None:
            total = self._sum_thread.result() if self._sum_thread is not None else self._sum
            self._mean = float64_to_bytes(total / max(1, self.old_rows), self.dtype)
        return self._mean

    def rows_bytes(self, positions: np.ndarray) -> np.ndarray:
        """Rows for new draft positions ``positions`` (all initialised ones), as [n, row_bytes] uint8."""
        if self.plan.init == "zeros" or not positions.size:
            return np.zeros((positions.size, self.row_bytes), dtype=np.uint8)
        if self.plan.init == "mean":
            return np.tile(self.mean(), (positions.size, 1))
        import torch

        token_ids = torch.from_numpy(self.plan.run_mapping.hot_ids[positions])
        assert self.target_head is not None  # init "target" with rows to initialise reads it in __init__
        head = self.target_head.index_select(0, token_ids).to(getattr(torch, self.dtype))
        return as_bytes(head).reshape(positions.size, self.row_bytes)

    def rows(self, positions: np.ndarray) -> torch.Tensor:
        """The same rows as a tensor (the path through torch)."""
        import torch

        data = self.rows_bytes(positions)
        return torch.from_numpy(data.copy()).view(getattr(torch, self.dtype)).reshape(positions.size, self.width)

    def close(self) -> None:
        """Stop the mean thread if it still runs, and wait for it."""
        self._stop.set()
        if self._sum_thread is not None:
            self._sum_thread.join()


def lm_head_chunk(
    plan: RemapPlan, gather, init_rows: InitRows, lo: int, hi: int, cancel: threading.Event | None
) -> torch.Tensor:
    """New lm_head rows lo..hi: copied rows gathered from the old head, the rest initialised."""
    import torch

    sources = plan.source_rows[lo:hi]
    copied = sources >= 0
    if copied.all():
        return gather(sources, cancel)
    chunk = torch.empty((hi - lo, init_rows.width), dtype=getattr(torch, init_rows.dtype))
    copied_at = np.flatnonzero(copied)
    if copied_at.size:
        put(chunk, copied_at, gather(sources[copied_at], cancel))
    init_at = np.flatnonzero(~copied)
    put(chunk, init_at, init_rows.rows(init_at + lo))
    return chunk
