"""The fix: a drafter checkpoint whose ``lm_head`` rows sit where the run's vocab mapping needs them.

docs/case.md: a drafter's ``lm_head`` row ``i`` was trained to predict the
target token its own mapping gives position ``i``; a fine-tune that labels with another
mapping asks row ``i`` for a different token. The remap builds a new checkpoint where row
``j`` holds the old row of the run's token ``j`` (bit for bit), rows for tokens the old
drafter never had are initialised, and ``d2t``/``t2d`` are the run's. Every other tensor is
copied unchanged. The opposite fix (SpecForge PR #534, SpecForge main ``vocab_mapping_path``,
speculators ``--d2t-path/--t2d-path``) keeps the weights and hands the trainer the
checkpoint's own mapping: :func:`keep_checkpoint_mapping`.

Safety, because this runs on someone's only copy of a drafter:
- the source is only ever opened for reading;
- the output is written into a sibling temporary directory, flushed (fsync of every file and
  of the directory), re-read and compared with the source, and only then renamed into place,
  so a crash at any moment leaves either no output or a complete verified one; a temporary
  directory left by a killed run is removed by the next run (an flock on it tells live from dead);
- a safetensors source is read once, in file order, a window at a time (peak memory near one
  window, not the checkpoint): unchanged tensors are copied in the kernel and hashed from the
  output, the lm_head's rows are read into a buffer, hashed from it and written from it to their
  new positions; so the BLAKE3 recorded (provenance) is that of the bytes copied, and the
  comparison with the source afterwards fails if the source changed since. No torch on that
  path; a .bin source goes through torch, hashed apart twice (the two digests must agree);
- ``--force`` replaces only a directory whose provenance file triage wrote and that holds
  nothing else; files beside the weights are carried over with their modes and holes, and a
  symlink out of the checkpoint is never followed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import json
import mmap
import os
import queue
import shutil
import stat
import struct
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from triage_tui import __version__
from triage_tui.core.device import resolve_device
from triage_tui.core.errors import BadInput
from triage_tui.core.formats.checkpoint import read_checkpoint
from triage_tui.core.formats.mapping import mapping_sha256, read_mapping, write_mapping_npy, write_mapping_pt
from triage_tui.core.formats.safe_torch import SAFETENSORS_DTYPES
from triage_tui.core.vocab import VocabMapping

if TYPE_CHECKING:
    import torch

    from triage_tui.core.formats.checkpoint import DrafterCheckpoint

# torch is imported by the functions that handle tensors, not here: the import takes ~1 s, which
# plan_remap spends hashing the source meanwhile (formats/ defers it the same way).

__all__ = [
    "INIT_STRATEGIES",
    "Cancelled",
    "KeptMapping",
    "RemapPlan",
    "RemapReport",
    "execute_remap",
    "keep_checkpoint_mapping",
    "plan_remap",
    "remap_checkpoint",
]

INIT_STRATEGIES = ("target", "mean", "zeros")
PROVENANCE_FILE = "triage-remap.json"
KEPT_MAPPING_PROVENANCE_FILE = "triage-mapping.json"
OUTPUT_WEIGHTS = "model.safetensors"
# Rows are read and written this many bytes at a time: peak memory is a few windows.
WINDOW_BYTES = 32 << 20
# Below this an lm_head is gathered on the CPU even when a GPU is present: the copy to the
# device would cost more than the gather.
GPU_MIN_BYTES = 64 << 20
# Files in a checkpoint directory that are never carried over: weights in other forms and
# pickles (optimizer and training state hold lm_head moments in the old row order).
_NOT_COPIED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".gz", ".index.json")
_TORCH_DTYPE_TO_SAFETENSORS = {torch_name: (code, size) for code, (torch_name, size) in SAFETENSORS_DTYPES.items()}

Progress = Callable[[float, str], None]


class Cancelled(Exception):
    """The caller's cancel event was set; the temporary output has been removed."""


def _count(n: int) -> str:
    """25750 -> '25 750' (the story's way of writing counts)."""
    return f"{n:,}".replace(",", " ")


# ---------------------------------------------------------------------------------------------
# The plan: everything decided and validated before a byte is written.


@dataclass(frozen=True, eq=False)
class RemapPlan:
    """What a remap will write, worked out from the inputs; nothing has been written yet."""

    source: Path  # the source checkpoint directory
    output: Path
    mapping_path: Path
    draft_vocab_size: int  # rows of the new lm_head (the run's draft vocab)
    rows_copied: int
    rows_initialized: int
    init: str  # "target" | "mean" | "zeros": what initialised rows are set from
    notes: tuple[str, ...]
    init_from: str  # the same in words, for the confirm dialog
    written_as: str | None  # "model.safetensors" when a pytorch_model.bin source is rewritten
    mapping_sha256: str
    mapping_sha256_of: str  # "file" (bytes of the mapping's file) | "mapping" (hot ids: read from no file)
    target_path: Path | None
    lm_head_name: str  # the checkpoint's lm_head tensor (checked present when planning)
    checkpoint: DrafterCheckpoint = field(repr=False)
    run_mapping: VocabMapping = field(repr=False)
    source_rows: np.ndarray = field(repr=False)  # per new row: the old row it copies, -1 if initialised
    target_model: Any = field(default=None, repr=False)
    source_identities: tuple = field(default=(), repr=False)  # (dev, inode, size, mtime) of each weights file

    def describe(self) -> str:
        """The exact text the TUI's confirm dialog shows."""
        text = (
            f"Write {self.output} from {self.source}: {_count(self.rows_copied)} lm_head rows move to the "
            f"run's order, {_count(self.rows_initialized)} rows initialised from {self.init_from}; "
            f"d2t/t2d replaced by {self.mapping_path}; source untouched."
        )
        return "\n".join([text, *self.notes])


def _file_sha256(path: Path, block: int = 8 << 20) -> str:
    """SHA-256 of a (mapping) file, hashed from memory-mapped windows."""
    digest = hashlib.sha256()
    with _opened(path) as fd:
        size = os.fstat(fd).st_size
        for offset in range(0, size, block):
            with _mapped(fd, offset, min(block, size - offset)) as data:
                digest.update(data.data)  # the array's memoryview: numpy types its buffer only on 3.12+
                del data
    return digest.hexdigest()


def _file_blake3(path: Path) -> str:
    """BLAKE3 of a file (the source's digest where it is not hashed while it is copied: .bin sources)."""
    import blake3

    digest = blake3.blake3()
    with _opened(path) as fd:
        size = os.fstat(fd).st_size
        for offset in range(0, size, WINDOW_BYTES):
            with _mapped(fd, offset, min(WINDOW_BYTES, size - offset)) as data:
                digest.update(data.data)  # the array's memoryview: numpy types its buffer only on 3.12+
                del data
    return digest.hexdigest()


def _identity(path: Path) -> tuple[int, ...]:
    """What changes when a file is rewritten or replaced: device, inode, size, modification time."""
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def _check_unchanged(plan: RemapPlan) -> None:
    """The source's files are those the plan read (a rewrite or replacement since is refused)."""
    if tuple(_identity(file) for file in plan.checkpoint.files) != plan.source_identities:
        raise BadInput(
            plan.source,
            "the checkpoint's weights changed while it was being remapped; "
            "nothing was written (run again once nothing writes to it)",
        )


def _default_output(source: Path, mapping_sha: str) -> Path:
    return source.parent / f"{source.name}-remapped-{mapping_sha[:8]}"


def _read_target(path: Path):
    from triage_tui.core.formats.target import read_target

    return read_target(path)


def plan_remap(
    checkpoint_path: str | Path,
    mapping_path: str | Path,
    *,
    out: str | Path | None = None,
    init: str | None = None,
    target: str | Path | None = None,
) -> RemapPlan:
    """Read and check the inputs and decide every row; BadInput for anything that does not fit."""
    if init is not None and init not in INIT_STRATEGIES:
        raise BadInput(None, f"--init-missing must be one of {', '.join(INIT_STRATEGIES)}, not {init!r}")
    if init == "target" and target is None:
        raise BadInput(None, "--init-missing target needs --target (the target model's directory)")
    try:
        return _plan(checkpoint_path, mapping_path, out, init, target)
    except OSError as err:  # PermissionError, a name too long, ...: the file named, exit 2
        raise _read_error(err, checkpoint_path) from None


def _read_error(err: OSError, fallback: str | Path) -> BadInput:
    """An input that cannot be read (permissions, a name too long, a loop), as one line naming it."""
    reason = err.strerror or str(err)
    if err.errno == errno.ELOOP:
        reason = "a symlink loop"
    return BadInput(err.filename or fallback, f"cannot read: {reason}")


def _plan(
    checkpoint_path: str | Path,
    mapping_path: str | Path,
    out: str | Path | None,
    init: str | None,
    target: str | Path | None,
) -> RemapPlan:
    checkpoint = read_checkpoint(checkpoint_path)
    identities = tuple(_identity(file) for file in checkpoint.files)
    source = checkpoint.path.resolve()
    notes: list[str] = []

    lm_head_name = checkpoint.lm_head_name
    lm_head = checkpoint.tensors.get(lm_head_name) if lm_head_name is not None else None
    if lm_head_name is None or lm_head is None:
        raise BadInput(source, "checkpoint has no lm_head.weight: there are no rows to remap")
    old_rows, width = lm_head.shape
    if old_rows == 0 or width == 0:
        raise BadInput(lm_head.file, f"lm_head.weight has shape [{old_rows}, {width}]: there are no rows to remap")
    for info in checkpoint.tensors.values():
        if info.dtype not in _TORCH_DTYPE_TO_SAFETENSORS:
            raise BadInput(info.file, f"tensor {info.name!r} has dtype {info.dtype}, which safetensors cannot store")

    target_path = Path(target).resolve() if target is not None else None
    target_model = _read_target(target_path) if target_path is not None else None

    checkpoint_mapping = checkpoint.mapping
    if checkpoint_mapping is None:
        vocab = checkpoint.target_vocab_size or (target_model.vocab_size if target_model else old_rows)
        # vLLM keeps draft_id_to_target_id at zeros when a checkpoint has no d2t (reference
        # section 1.2): the rows then stand for target ids 0..Vd-1, and that is what they learnt.
        checkpoint_mapping = VocabMapping.identity(old_rows, vocab, source=f"{source} (no d2t: identity)")
        notes.append(
            f"The checkpoint has no d2t: its rows are taken as target ids 0..{old_rows - 1}, "
            "as vLLM reads such a checkpoint."
        )
    elif checkpoint_mapping.draft_vocab_size != old_rows:
        raise BadInput(
            source, f"d2t has {checkpoint_mapping.draft_vocab_size} entries but lm_head.weight has {old_rows} rows"
        )

    mapping_path = Path(mapping_path).resolve()
    run_mapping = read_mapping(
        mapping_path,
        target_vocab_size=checkpoint.target_vocab_size or (target_model.vocab_size if target_model else None),
    )
    _check_run_mapping(run_mapping, mapping_path, checkpoint, checkpoint_mapping, source)
    notes.extend(f"The checkpoint's mapping: {note}" for note in checkpoint_mapping.notes)
    notes.extend(f"The run's mapping: {note}" for note in run_mapping.notes)

    duplicated = checkpoint_mapping.draft_vocab_size - np.unique(checkpoint_mapping.hot_ids).size
    if duplicated:
        notes.append(
            f"The checkpoint's d2t repeats a target id at {duplicated} positions; "
            "a repeated token's row is taken from its last position."
        )
    source_rows = checkpoint_mapping.draft_position_of()[run_mapping.hot_ids]
    rows_copied = int(np.count_nonzero(source_rows >= 0))
    rows_initialized = run_mapping.draft_vocab_size - rows_copied
    if rows_copied == 0:
        # Every row would be initialised: a checkpoint that keeps nothing of its training is not a fix.
        outside = checkpoint_mapping.out_of_range().size
        why = (
            f"its d2t maps {outside} of its {old_rows} positions outside the target vocab "
            f"[0, {run_mapping.target_vocab_size})"
            if outside
            else "the two mappings share no token"
        )
        raise BadInput(
            source,
            f"none of the {run_mapping.draft_vocab_size} tokens of the run's mapping "
            f"{mapping_path} has a row in this checkpoint ({why}): the output would keep "
            "no trained lm_head row; nothing was written",
        )

    if target_model is not None and target_model.vocab_size != run_mapping.target_vocab_size:
        raise BadInput(
            target_path,
            f"the target's vocab has {target_model.vocab_size} tokens but the run's "
            f"mapping {mapping_path} is over {run_mapping.target_vocab_size}",
        )
    init = init or ("target" if target_model is not None else "mean")
    if init == "target" and target_model is not None and target_model.hidden_size != width:
        notes.append(
            f"The target's lm_head rows are {target_model.hidden_size} wide but the drafter's are "
            f"{width}: new rows are initialised from the mean of the old rows instead."
        )
        init = "mean"
    init_from = {
        "target": f"the target's lm_head ({target_path})",
        "mean": "the mean of the old rows",
        "zeros": "zeros",
    }[init]

    written_as = None
    if checkpoint.file_kind == "bin":
        written_as = OUTPUT_WEIGHTS
        notes.append(
            f"{', '.join(f.name for f in checkpoint.files)} is written as {OUTPUT_WEIGHTS} "
            "(same tensor names, same layout)."
        )

    mapping_sha, mapping_sha_of = mapping_sha256(run_mapping)  # the digest check shows as run_sha256
    output = Path(out).resolve() if out is not None else _default_output(source, mapping_sha)
    _check_output_name(output)
    _check_output_location(output, source, [source, mapping_path] + ([target_path] if target_path else []))
    return RemapPlan(
        source=source,
        output=output,
        mapping_path=mapping_path,
        draft_vocab_size=run_mapping.draft_vocab_size,
        rows_copied=rows_copied,
        rows_initialized=rows_initialized,
        init=init,
        notes=tuple(notes),
        init_from=init_from,
        written_as=written_as,
        mapping_sha256=mapping_sha,
        mapping_sha256_of=mapping_sha_of,
        target_path=target_path,
        lm_head_name=lm_head_name,
        checkpoint=checkpoint,
        run_mapping=run_mapping,
        source_rows=source_rows,
        target_model=target_model,
        source_identities=identities,
    )


def _check_run_mapping(
    run: VocabMapping, path: Path, checkpoint, checkpoint_mapping: VocabMapping, source: Path
) -> None:
    """The run's mapping must name each token once, inside the same target vocab as the checkpoint's."""
    if run.draft_vocab_size == 0:
        raise BadInput(path, "the mapping has 0 draft positions: a drafter with no lm_head rows; nothing was written")
    vocab = checkpoint.target_vocab_size
    if vocab is not None and run.target_vocab_size != vocab:
        raise BadInput(
            path,
            f"mapping is over a target vocab of {run.target_vocab_size} tokens but the "
            f"checkpoint's is {vocab} ({source}): not the same target model",
        )
    outside = run.out_of_range()
    if outside.size:
        first = int(outside[0])
        raise BadInput(
            path,
            f"{outside.size} draft positions map outside the target vocab "
            f"[0, {run.target_vocab_size}) (first: position {first} -> id {int(run.hot_ids[first])})",
        )
    repeated = run.draft_vocab_size - np.unique(run.hot_ids).size
    if repeated:
        raise BadInput(
            path,
            f"{repeated} draft positions repeat a target id another position has; "
            "a remapped lm_head needs one row per token",
        )
    if vocab is None and int(checkpoint_mapping.hot_ids.max(initial=-1)) >= run.target_vocab_size:
        raise BadInput(
            path,
            f"the checkpoint maps target ids up to {int(checkpoint_mapping.hot_ids.max())}, "
            f"beyond this mapping's target vocab of {run.target_vocab_size}",
        )


def _check_output_name(output: Path) -> None:
    """The output's name must leave room for the temporary sibling it is written as first."""
    try:
        name_max = os.pathconf(output.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    # mkdtemp adds 8 characters to _temp_prefix (and _aside_prefix is as long)
    limit = name_max - len(os.fsencode(_temp_prefix(Path("x")))) + 1 - 8
    length = len(os.fsencode(output.name))
    if length > limit:
        raise BadInput(
            output.parent,
            f"the --out name is {length} bytes long; with the temporary name it is "
            f"written under first, this filesystem allows at most {limit}",
        )


def _is_within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _check_output_location(output: Path, source: Path, inputs: list[Path]) -> None:
    """Refuse an output that is an input or holds one, or that lies inside the source checkpoint."""
    for given in inputs:
        if _is_within(given, output):
            raise BadInput(output, f"the output would replace {given}, an input; choose another --out")
    if _is_within(output, source):
        raise BadInput(
            output, f"is inside the source checkpoint {source}, which is never written to; choose another --out"
        )


# ---------------------------------------------------------------------------------------------
# Reading rows a window at a time.


class _Rows:
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
        self.window_rows = max(1, WINDOW_BYTES // max(1, self.row_bytes))

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

        if _is_range(rows) and rows.size <= self.window_rows:
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
            _check_cancel(cancel)
            lo, hi = int(ordered[start]), int(ordered[end - 1]) + 1
            window = self.read(lo, hi)
            _put(out, order[start:end], _take(window, ordered[start:end] - lo))
            del window
        return out

    def column_sum(self, cancel: threading.Event | None = None) -> np.ndarray:
        """Sum over rows in float64 (numpy, on the CPU: every device then gets the same mean)."""
        total = np.zeros(self.shape[1:], dtype=np.float64)
        for lo, hi in self.windows():
            _check_cancel(cancel)
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


def _is_range(index: np.ndarray) -> bool:
    """True when ``index`` is a, a+1, ..., a+n-1 (a slice does then what fancy indexing would)."""
    return bool(index.size) and int(index[-1]) - int(index[0]) == index.size - 1 and bool(np.all(np.diff(index) == 1))


def _take(source: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    import torch

    if _is_range(index):
        return source[int(index[0]) : int(index[-1]) + 1]
    return source.index_select(0, torch.from_numpy(index))


def _put(target: torch.Tensor, index: np.ndarray, values: torch.Tensor) -> None:
    import torch

    if _is_range(index):
        target[int(index[0]) : int(index[-1]) + 1] = values
    else:
        target[torch.from_numpy(index)] = values


class _StagedRows:
    """The old lm_head copied once to a device (read window by window), gathered there.

    Random row reads from the mapped file become one sequential read; the gather itself is
    a copy, so the bits are those of the CPU path.
    """

    def __init__(self, rows: _Rows, device: torch.device, cancel: threading.Event | None) -> None:
        import torch

        self.rows = rows
        self.device = device
        self.staged = torch.empty(tuple(rows.shape), dtype=rows.dtype, device=device)
        for lo, hi in rows.windows():
            _check_cancel(cancel)
            self.staged[lo:hi].copy_(rows.read(lo, hi))

    def gather(self, rows: np.ndarray, cancel: threading.Event | None = None) -> torch.Tensor:
        import torch

        index = torch.from_numpy(rows).to(self.device)
        return self.staged.index_select(0, index).cpu()


def _check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("remap cancelled")


def _as_bytes(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's bytes as a flat uint8 array (a view when the tensor is contiguous)."""
    import torch

    flat = tensor.contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy() if flat.numel() else np.empty(0, dtype=np.uint8)


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality (NaN payloads and signed zeros included), not float equality."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    x, y = _as_bytes(a), _as_bytes(b)
    if x.size % 8 == 0 and x.ctypes.data % 8 == 0 and y.ctypes.data % 8 == 0:
        x, y = x.view(np.uint64), y.view(np.uint64)  # eight bytes per comparison: ~4x faster
    return np.array_equal(x, y)


def _equal_bytes(x: np.ndarray, y: np.ndarray) -> bool:
    """Two contiguous uint8 arrays hold the same bytes."""
    if x.size != y.size:
        return False
    if _MEMCMP is not None:
        return x.size == 0 or _MEMCMP(x.ctypes.data, y.ctypes.data, x.size) == 0
    return np.array_equal(x, y)


@contextmanager
def _mapped(fd: int, offset: int, length: int) -> Iterator[np.ndarray]:
    """Bytes ``offset..offset+length`` of a file as a read-only uint8 array over a fresh memory map.

    The map is closed on exit, which drops the pages it touched from the process's memory (they
    stay in the page cache): the caller must keep no view of the array beyond the ``with``.
    """
    if length == 0:
        yield np.empty(0, dtype=np.uint8)
        return
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    mapped = mmap.mmap(fd, offset + length - start, access=mmap.ACCESS_READ, offset=start)
    try:
        yield np.frombuffer(mapped, dtype=np.uint8, count=length, offset=offset - start)
    finally:
        mapped.close()


def _same_file_bytes(
    fd_a: int,
    offset_a: int,
    fd_b: int,
    offset_b: int,
    length: int,
    cancel: threading.Event | None,
    progress: _Progress | None,
    phase: str,
) -> bool:
    """Two byte ranges of files are equal, compared a window at a time through memory maps."""
    for position in range(0, length, WINDOW_BYTES):
        _check_cancel(cancel)
        n = min(WINDOW_BYTES, length - position)
        with _mapped(fd_a, offset_a + position, n) as a, _mapped(fd_b, offset_b + position, n) as b:
            same = _equal_bytes(a, b)
            del a, b
        if not same:
            return False
        if progress is not None:
            progress.advance(n, phase, _VERIFY_SPAN)
    return True


# ---------------------------------------------------------------------------------------------
# Writing: a streamed safetensors file. safetensors' own save_file needs every tensor in
# memory at once; the format is a u64 header length, a JSON header and the raw bytes
# (https://github.com/huggingface/safetensors, README "Format"), so it is written directly.


def _write_at(fd: int, data, offset: int) -> None:
    """Every byte of ``data`` at ``offset``.

    With ``_copy_range`` the only two places output bytes go to disk (tests inject faults in both).
    """
    view = memoryview(data).cast("B")
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def _copy_range(source_fd: int, target_fd: int, source_offset: int, target_offset: int, length: int) -> None:
    """Copy bytes file to file inside the kernel (``copy_file_range``: no trip through user memory,
    what ``cp`` does); raises ``_NoInKernelCopy`` where the filesystem pair cannot."""
    if not hasattr(os, "copy_file_range"):  # Linux only
        raise _NoInKernelCopy
    while length:
        try:
            copied = os.copy_file_range(source_fd, target_fd, length, source_offset, target_offset)
        except OSError as err:
            if err.errno in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
                raise _NoInKernelCopy from err
            raise
        if copied == 0:
            raise _NoInKernelCopy
        source_offset += copied
        target_offset += copied
        length -= copied


class _NoInKernelCopy(Exception):
    """copy_file_range is unavailable here; the tensor is streamed through memory instead."""


def _safetensors_extents(checkpoint, file: Path) -> dict[str, tuple[int, int]]:
    """Absolute byte range of each tensor's data in one safetensors file of the checkpoint.

    The reader (formats/safe_torch.py) has already bounds-checked this header and gives names,
    shapes and dtypes, but keeps no offsets, which an in-kernel copy needs; they are read here
    from the same header and kept only where they agree with the reader's sizes. Every byte
    copied this way is re-read through safetensors by the verification.
    """
    with open(file, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    extents = {}
    for name, entry in header.items():
        info = checkpoint.tensors.get(name)
        if name == "__metadata__" or info is None or info.file != file:
            continue
        begin, end = entry["data_offsets"]
        if end - begin == _Entry(name, info.dtype, tuple(info.shape)).nbytes:
            extents[name] = (8 + length + begin, 8 + length + end)
    return extents


def _libc_function(name: str, argtypes: tuple, restype=ctypes.c_int) -> Callable[..., int] | None:
    """A C library function through ctypes, or None where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        function = getattr(libc, name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = restype
    return function


# Linux ``sync_file_range``: start writeback of a range, do not wait.
_SYNC_FILE_RANGE = (
    _libc_function("sync_file_range", (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint))
    if sys.platform.startswith("linux")
    else None
)
# ``memcmp`` compares mapped pages at memory speed, with no temporary array (np.array_equal makes one).
_MEMCMP = _libc_function("memcmp", (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t))
_SYNC_FILE_RANGE_WRITE = 2


class _Writeback(threading.Thread):
    """Lets the disk start on bytes just written, so the final fsync has little left to wait for.

    Without this the kernel holds a GB-sized write in the page cache until the fsync (dirty
    pages below the background threshold are not written for ~30 s), and the disk idles while
    the output is verified. ``sync_file_range`` blocks while the device's queue is full, so it
    is called from this thread and the writing goes on. A hint only: failures are ignored, the
    fsync is what counts. ``finish`` before the file is closed.
    """

    def __init__(self, fd: int) -> None:
        super().__init__(name="triage-remap-writeback", daemon=True)
        self.fd = fd
        self.ranges: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
        if _SYNC_FILE_RANGE is not None:
            self.start()

    def add(self, offset: int, length: int) -> None:
        if self.is_alive():
            self.ranges.put((offset, length))

    def run(self) -> None:
        sync_file_range = _SYNC_FILE_RANGE
        if sync_file_range is None:  # never started without it (__init__)
            return
        while (written := self.ranges.get()) is not None:
            sync_file_range(self.fd, *written, _SYNC_FILE_RANGE_WRITE)

    def finish(self) -> None:
        if self.is_alive():
            self.ranges.put(None)
            self.join()


def _read_ahead(path: Path) -> None:
    """Ask the kernel to start reading a file into the page cache (a hint; never fails)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    except (OSError, AttributeError):
        pass
    finally:
        os.close(fd)


def _free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize


@dataclass(frozen=True)
class _Entry:
    name: str
    dtype: str  # torch dtype name, as TensorInfo spells it
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * _TORCH_DTYPE_TO_SAFETENSORS[self.dtype][1]


class _SafetensorsWriter:
    """One output file: header first, then each tensor's bytes at its offset."""

    def __init__(self, path: Path, entries: list[_Entry], metadata: dict[str, str]) -> None:
        self.path = path
        # Largest items first keeps every tensor aligned to its element size, as safetensors orders them.
        self.entries = sorted(entries, key=lambda e: (-_TORCH_DTYPE_TO_SAFETENSORS[e.dtype][1], e.name))
        self.offsets: dict[str, int] = {}
        position = 0
        for entry in self.entries:
            self.offsets[entry.name] = position
            position += entry.nbytes
        self.data_bytes = position
        self.header = self._header(metadata)
        self.data_start = 8 + len(self.header)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)  # read back for the digest
        self.writeback = _Writeback(self.fd)
        try:
            try:
                # Reserve the blocks now: a full disk fails here, before any data is written.
                os.posix_fallocate(self.fd, 0, self.data_start + self.data_bytes)
            except OSError as err:
                if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
            self.write_header(metadata)
        except BaseException:
            self.close()
            raise

    def _header(self, metadata: dict[str, str]) -> bytes:
        header: dict[str, Any] = {"__metadata__": metadata}
        for entry in self.entries:
            begin = self.offsets[entry.name]
            header[entry.name] = {
                "dtype": _TORCH_DTYPE_TO_SAFETENSORS[entry.dtype][0],
                "shape": list(entry.shape),
                "data_offsets": [begin, begin + entry.nbytes],
            }
        raw = json.dumps(header, separators=(",", ":")).encode()
        return raw + b" " * (-len(raw) % 8)

    def write_header(self, metadata: dict[str, str]) -> None:
        """(Re)write the header; a rewrite must keep its length (digests filled into placeholders)."""
        header = self._header(metadata)
        if len(header) != len(self.header):
            raise RuntimeError("safetensors header changed length on rewrite")
        self.header = header
        _write_at(self.fd, len(header).to_bytes(8, "little") + header, 0)

    def start_of(self, name: str) -> int:
        return self.data_start + self.offsets[name]

    def write(self, name: str, offset: int, data: np.ndarray) -> None:
        start = self.data_start + self.offsets[name] + offset
        _write_at(self.fd, data, start)
        self.writeback.add(start, data.nbytes)

    def copy(self, name: str, offset: int, source_fd: int, source_offset: int, length: int) -> None:
        start = self.data_start + self.offsets[name] + offset
        _copy_range(source_fd, self.fd, source_offset, start, length)
        self.writeback.add(start, length)

    def close(self) -> None:
        self.writeback.finish()  # it uses the descriptor
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _write_small(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _write_at(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# The temporary directory beside the output, and its clean-up after a killed run.


def _temp_prefix(output: Path) -> str:
    return f".{output.name}.triage-tmp-"


def _aside_prefix(output: Path) -> str:
    return f".{output.name}.triage-old-"


def _umask() -> int:
    """The process umask, read without setting it (os.umask would race other threads, e.g. the TUI's)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def _lock_dir(path: Path) -> int | None:
    """An exclusive flock on a directory, or None when another process holds it (it is alive)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def clean_stale_temporaries(output: Path) -> list[Path]:
    """Remove what killed runs left beside ``output``; a live run's directory is locked and kept."""
    removed: list[Path] = []
    parent = output.parent
    if not parent.is_dir():
        return removed
    prefixes = (_temp_prefix(output), _aside_prefix(output))
    for name in os.listdir(parent):  # not glob: an output name may hold [ or *
        candidate = parent / name
        if name.startswith(prefixes) and candidate.is_dir() and not candidate.is_symlink():
            fd = _lock_dir(candidate)
            if fd is None:
                continue
            try:
                shutil.rmtree(candidate, ignore_errors=True)
                removed.append(candidate)
            finally:
                os.close(fd)
    return removed


class _TempOutput:
    """A locked sibling temporary directory that becomes ``output`` by rename, or disappears."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.path = Path(tempfile.mkdtemp(prefix=_temp_prefix(output), dir=output.parent))
        self.fd = _lock_dir(self.path)
        if self.fd is None:  # a concurrent clean-up took it between mkdtemp and the lock
            raise BadInput(self.path, "temporary directory taken by another process; run again")
        self.committed = False

    def commit(self, replace: bool) -> None:
        """fsync the directory, rename it into place (the old output aside first), fsync the parent."""
        os.chmod(self.path, 0o777 & ~_umask())  # mkdtemp made it 0700
        _fsync_path(self.path)
        aside = aside_fd = None
        if replace and self.output.exists():
            aside = Path(tempfile.mkdtemp(prefix=_aside_prefix(self.output), dir=self.output.parent))
            aside_fd = _lock_dir(aside)  # locked like the temporary one: a concurrent clean-up leaves it
            os.rename(self.output, aside / self.output.name)
        try:
            try:
                os.rename(self.path, self.output)
            except BaseException as err:  # Ctrl-C included: the old output goes back where it was
                if aside is not None:
                    os.rename(aside / self.output.name, self.output)
                    shutil.rmtree(aside, ignore_errors=True)
                if isinstance(err, OSError) and err.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise BadInput(self.output, "appeared while the remap was writing; nothing was replaced") from None
                raise
            self.committed = True
            _fsync_path(self.output.parent)
            if aside is not None:
                shutil.rmtree(aside, ignore_errors=True)
        finally:
            if aside_fd is not None:
                os.close(aside_fd)

    def close(self) -> None:
        if not self.committed:
            shutil.rmtree(self.path, ignore_errors=True)
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _check_output_free(output: Path, force: bool) -> bool:
    """True when ``output`` exists and --force allows replacing it; BadInput when it may not be touched."""
    if not output.exists() and not output.is_symlink():
        if not output.parent.is_dir():
            raise BadInput(output.parent, "no such directory to write the output into")
        return False
    if not force:
        raise BadInput(output, "already exists; pass --force to replace it (nothing was written)")
    if output.is_symlink() or not output.is_dir():
        raise BadInput(output, "exists and is not a directory; refusing to replace it even with --force")
    present = set(os.listdir(output))
    if not present:
        return True
    written = _files_triage_wrote(output)
    if written is None:
        raise BadInput(
            output,
            f"exists and holds no {PROVENANCE_FILE} that triage wrote: not a triage output; "
            "refusing to replace it even with --force",
        )
    others = sorted(present - written)
    if others:
        more = f" and {len(others) - 5} more" if len(others) > 5 else ""
        shown = ", ".join(repr(name) for name in others[:5]) + more
        raise BadInput(
            output,
            f"holds {len(others)} file(s) triage did not write ({shown}); refusing to replace "
            "it even with --force: move them out first",
        )
    return True


def _files_triage_wrote(output: Path) -> set[str] | None:
    """The names an earlier triage run wrote into ``output``, from its provenance file; None when there
    is none that triage wrote (a symlink, not JSON, not triage's, no file list: a user's file)."""
    for name in (PROVENANCE_FILE, KEPT_MAPPING_PROVENANCE_FILE):
        path = output / name
        try:
            if not _is_regular_file(path) or path.stat().st_size > 1 << 20:
                continue
            provenance = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(provenance, dict) or provenance.get("tool") != "triage":
            continue
        files = provenance.get("files")
        if isinstance(files, list) and all(isinstance(f, str) for f in files) and name in files:
            return set(files)
    return None


def _is_regular_file(path: Path) -> bool:
    """A regular file itself, not a symlink to one."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _write_error(err: OSError, output: Path) -> BadInput:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return BadInput(output.parent, f"no space left on the device while writing {output.name}; nothing was written")
    return BadInput(output.parent, f"cannot write {output.name}: {err.strerror or err}; nothing was written")


# ---------------------------------------------------------------------------------------------
# The remap itself.


@dataclass(frozen=True)
class RemapReport:
    """What a remap wrote and how it was checked."""

    source: Path
    output: Path
    mapping: Path
    draft_vocab_size: int
    rows_copied: int
    rows_initialized: int
    init: str
    verified: bool
    written_as: str | None
    accuracy_before: float | None
    accuracy_after: float | None
    accuracy_device: str | None = None
    mapping_sha256: str = ""
    source_blake3: dict[str, str] = field(default_factory=dict)  # of each weights file, as it was read and copied
    files: tuple[str, ...] = ()
    replaced: bool = False
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "output": str(self.output),
            "mapping": str(self.mapping),
            "draft_vocab_size": self.draft_vocab_size,
            "rows_copied": self.rows_copied,
            "rows_initialized": self.rows_initialized,
            "init": self.init,
            "verified": self.verified,
            "written_as": self.written_as,
            "accuracy_before": self.accuracy_before,
            "accuracy_after": self.accuracy_after,
            "accuracy_device": self.accuracy_device,
            "mapping_sha256": self.mapping_sha256,
            "source_blake3": dict(self.source_blake3),
            "files": list(self.files),
            "replaced": self.replaced,
            "notes": list(self.notes),
        }


def _output_entries(plan: RemapPlan) -> dict[str, list[_Entry]]:
    """Output file name -> tensors it holds: the source's files and names, lm_head/d2t/t2d resized."""
    checkpoint = plan.checkpoint
    lm_head_name = plan.lm_head_name
    width = checkpoint.tensors[lm_head_name].shape[1]
    run = plan.run_mapping
    files: dict[str, list[_Entry]] = {}

    def file_of(name: str) -> str:
        if checkpoint.file_kind == "bin":
            return OUTPUT_WEIGHTS
        return checkpoint.tensors[name].file.name

    for name, info in checkpoint.tensors.items():
        if name in ("d2t", "t2d"):
            continue
        shape = (run.draft_vocab_size, width) if name == lm_head_name else tuple(info.shape)
        files.setdefault(file_of(name), []).append(_Entry(name, info.dtype, shape))
    for name, dtype, shape in (("d2t", "int64", (run.draft_vocab_size,)), ("t2d", "bool", (run.target_vocab_size,))):
        home = name if name in checkpoint.tensors else lm_head_name
        files.setdefault(file_of(home), []).append(_Entry(name, dtype, shape))
    return files


def _updated_config(plan: RemapPlan, notes: list[str]) -> dict | None:
    config = plan.checkpoint.config
    if not (plan.source / "config.json").is_file():
        notes.append("The source has no config.json; none is written.")
        return None
    config = json.loads(json.dumps(config))  # a deep copy that keeps key order
    run = plan.run_mapping
    config["draft_vocab_size"] = run.draft_vocab_size
    layer = config.get("transformer_layer_config")
    for holder in (config, layer if isinstance(layer, dict) else {}):
        if "vocab_size" in holder and holder["vocab_size"] != run.target_vocab_size:
            notes.append(
                f"config.json vocab_size {holder['vocab_size']} -> {run.target_vocab_size} (the run's target vocab)."
            )
            holder["vocab_size"] = run.target_vocab_size
    if "vocab_size" not in config and not isinstance(layer, dict) and plan.checkpoint.target_vocab_size is None:
        config["vocab_size"] = run.target_vocab_size
        notes.append(f"config.json gains vocab_size {run.target_vocab_size} from the run's mapping.")
    return config


@dataclass(frozen=True)
class _Extra:
    """A file beside the weights that is carried into the output (tokenizer, README, generation config)."""

    path: Path  # as listed in the checkpoint directory
    real: Path  # the file itself (a symlink resolved, never to outside the checkpoint)
    mode: int  # permission bits, kept on the copy
    size: int
    allocated: int  # bytes it occupies (a sparse file's holes stay holes in the copy)


def _extra_files(plan: RemapPlan) -> tuple[list[_Extra], list[str], list[str]]:
    """The files carried over; the names not carried over (weights in other forms, pickles); the
    symlinks that point out of the checkpoint (never followed: a link to a private file must not
    become a readable copy)."""
    weights = {f.name for f in plan.checkpoint.files}
    # A Hugging Face cache snapshot is a directory of links into its repository's blobs/.
    blobs = plan.source.parent.parent / "blobs" if plan.source.parent.name == "snapshots" else None
    copied, skipped, outside = [], [], []
    for path in sorted(plan.source.iterdir()):
        name = path.name
        if name in weights or name in ("config.json", PROVENANCE_FILE) or name.startswith("."):
            continue
        real = Path(os.path.realpath(path))
        if path.is_symlink() and not (_is_within(real, plan.source) or (blobs is not None and _is_within(real, blobs))):
            outside.append(name)
            continue
        try:
            info = os.stat(real)
        except OSError:
            continue  # a dangling link: nothing to carry
        if not stat.S_ISREG(info.st_mode):
            continue
        if name.endswith(_NOT_COPIED_SUFFIXES):
            skipped.append(name)
        else:
            copied.append(
                _Extra(
                    path,
                    real,
                    stat.S_IMODE(info.st_mode) & 0o777,
                    info.st_size,
                    min(info.st_size, info.st_blocks * 512),
                )
            )
    return copied, skipped, outside


def _data_segments(fd: int, size: int) -> list[tuple[int, int]]:
    """The byte ranges of a file that hold data (SEEK_DATA/SEEK_HOLE); the rest are holes."""
    segments, position = [], 0
    while position < size:
        try:
            start = os.lseek(fd, position, os.SEEK_DATA)
        except OSError as err:
            if err.errno == errno.ENXIO:  # only a hole from here to the end
                break
            if err.errno in (errno.EINVAL, errno.EOPNOTSUPP):  # a filesystem that cannot tell: all data
                return [(position, size)]
            raise
        end = min(size, os.lseek(fd, start, os.SEEK_HOLE))
        segments.append((start, end))
        position = end
    return segments


def _copy_extra(extra: _Extra, target: Path, cancel: threading.Event | None) -> int:
    """Stream one carried-over file into ``target`` with its mode and holes, then compare the two;
    returns the bytes compared. Read errors name the source file."""
    try:
        source_fd = os.open(extra.real, os.O_RDONLY)
    except OSError as err:
        raise BadInput(extra.path, f"cannot read: {err.strerror or err}; nothing was written") from None
    try:
        target_fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(target_fd, extra.mode)
            segments = _data_segments(source_fd, extra.size)
            for begin, end in segments:
                for offset in range(begin, end, WINDOW_BYTES):
                    _check_cancel(cancel)
                    length = min(WINDOW_BYTES, end - offset)
                    try:
                        _copy_range(source_fd, target_fd, offset, offset, length)
                    except _NoInKernelCopy:
                        with _mapped(source_fd, offset, length) as data:
                            _write_at(target_fd, data, offset)
                            del data
            os.ftruncate(target_fd, extra.size)
            os.fsync(target_fd)
            for begin, end in segments:
                if not _same_file_bytes(source_fd, begin, target_fd, begin, end - begin, cancel, None, ""):
                    raise BadInput(
                        target.parent,
                        f"verification failed: {extra.path.name} differs from the source; nothing was written",
                    )
        finally:
            os.close(target_fd)
    except OSError as err:
        if err.filename is None and err.errno in (errno.EACCES, errno.EIO):
            raise BadInput(extra.path, f"cannot read: {err.strerror or err}; nothing was written") from None
        raise
    finally:
        os.close(source_fd)
    return sum(end - begin for begin, end in segments)


# lm_head dtypes numpy can sum and round to (bf16 through its float32 top half); others go through torch.
_NUMPY_HEAD_DTYPES = {"bfloat16": "<u2", "float16": "<f2", "float32": "<f4", "float64": "<f8"}


def _column_sum(rows: np.ndarray, dtype: str) -> np.ndarray:
    """Sum over the rows (a [n, row_bytes] uint8 array) in float64."""
    if dtype == "bfloat16":
        # bf16 is the top half of a float32: widening by a shift is exact
        wide = rows.view("<u2").astype(np.uint32)
        wide <<= 16
        values = wide.view(np.float32)
    else:
        values = rows.view(_NUMPY_HEAD_DTYPES[dtype])
    return np.add.reduce(values, axis=0, dtype=np.float64)


def _float64_to_bytes(values: np.ndarray, dtype: str) -> np.ndarray:
    """``torch.from_numpy(values).to(dtype)``'s bytes: float64 goes to float32 first, then rounds to
    nearest even (c10's BFloat16/Half are built from a float), NaN as torch writes it."""
    if dtype not in _NUMPY_HEAD_DTYPES:
        import torch

        return _as_bytes(torch.from_numpy(values).to(getattr(torch, dtype)))
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


class _InitRows:
    """Bytes of the initialised rows, computed once and used for writing and for verification.

    The mean's column sum comes either from the single pass over the source (``add``) or, for a
    source read through torch, from a thread summing the old rows while the rest is copied.
    """

    def __init__(self, plan: RemapPlan, old: _Rows | None) -> None:
        self.plan = plan
        info = plan.checkpoint.tensors[plan.lm_head_name]
        self.dtype = info.dtype
        self.old_rows, self.width = info.shape
        self.row_bytes = _Entry("row", self.dtype, (self.width,)).nbytes
        self.needs_sum = plan.init == "mean" and plan.rows_initialized > 0
        self._sum = np.zeros(self.width, dtype=np.float64)
        self._sum_thread = None
        self._mean: np.ndarray | None = None
        self._stop = threading.Event()
        if self.needs_sum and old is not None:
            self._sum_thread = _Background("triage-remap-mean", lambda: old.column_sum(self._stop))
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
            self._sum += _column_sum(rows, self.dtype)

    def mean(self) -> np.ndarray:
        if self._mean is None:
            total = self._sum_thread.result() if self._sum_thread is not None else self._sum
            self._mean = _float64_to_bytes(total / max(1, self.old_rows), self.dtype)
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
        return _as_bytes(head).reshape(positions.size, self.row_bytes)

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


def _lm_head_chunk(
    plan: RemapPlan, gather, init_rows: _InitRows, lo: int, hi: int, cancel: threading.Event | None
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
        _put(chunk, copied_at, gather(sources[copied_at], cancel))
    init_at = np.flatnonzero(~copied)
    _put(chunk, init_at, init_rows.rows(init_at + lo))
    return chunk


def _use_gpu(device: str | torch.device, lm_head_bytes: int) -> torch.device | None:
    """The GPU to gather on: only a CUDA device, and only for a head worth the copy."""
    resolved = resolve_device(device)
    return resolved if resolved.type == "cuda" and lm_head_bytes >= GPU_MIN_BYTES else None


class _Progress:
    """Bytes done in a phase, reported as a fraction of that phase's span of [0, 1]."""

    def __init__(self, callback: Progress | None, total_bytes: int) -> None:
        self.callback = callback
        self.total = max(1, total_bytes)
        self.done = 0

    def advance(self, nbytes: int, phase: str, span: tuple[float, float]) -> None:
        self.done += nbytes
        if self.callback is not None:
            lo, hi = span
            self.callback(lo + (hi - lo) * min(1.0, self.done / self.total), phase)

    def reset(self) -> None:
        self.done = 0


_WRITE_SPAN = (0.0, 0.55)
_VERIFY_SPAN = (0.55, 0.85)


def _copy_tensor(
    checkpoint,
    entry: _Entry,
    writer: _SafetensorsWriter,
    extents: dict[str, tuple[int, int]],
    progress: _Progress,
    cancel: threading.Event | None,
) -> None:
    """An unchanged tensor: copied in the kernel when its byte range is known, else streamed by windows."""
    if entry.name in extents:
        begin, end = extents[entry.name]
        fd = os.open(checkpoint.tensors[entry.name].file, os.O_RDONLY)
        try:
            for offset in range(0, end - begin, WINDOW_BYTES):
                _check_cancel(cancel)
                length = min(WINDOW_BYTES, end - begin - offset)
                writer.copy(entry.name, offset, fd, begin + offset, length)
                progress.advance(length, f"copying {entry.name}", _WRITE_SPAN)
            return
        except _NoInKernelCopy:
            pass  # the whole tensor again, through memory
        finally:
            os.close(fd)
    rows = _Rows(checkpoint, entry.name)
    for lo, hi in rows.windows():
        _check_cancel(cancel)
        data = _as_bytes(rows.read(lo, hi))
        writer.write(entry.name, lo * rows.row_bytes, data)
        progress.advance(data.size, f"copying {entry.name}", _WRITE_SPAN)
        del data


def _open_writers(
    temp: Path, files: dict[str, list[_Entry]], metadata: dict[str, str], run: VocabMapping
) -> dict[str, _SafetensorsWriter]:
    """Every output file, header first (digest placeholders), with the run's d2t/t2d written."""
    writers: dict[str, _SafetensorsWriter] = {}
    try:
        for file_name, entries in files.items():
            writers[file_name] = _SafetensorsWriter(temp / file_name, entries, metadata)
        for writer in writers.values():
            for entry in writer.entries:
                if entry.name == "d2t":
                    writer.write("d2t", 0, run.d2t().astype(np.int64))
                elif entry.name == "t2d":
                    writer.write("t2d", 0, run.t2d().view(np.uint8))
    except BaseException:
        for writer in writers.values():
            writer.close()
        raise
    return writers


def _write_tensors(
    plan: RemapPlan,
    writers: dict[str, _SafetensorsWriter],
    gather,
    init_rows: _InitRows,
    progress: _Progress,
    cancel: threading.Event | None,
) -> None:
    """The path through torch (.bin sources, lm_head dtypes numpy lacks): each tensor goes to its own
    offset, so order is free: the lm_head comes last, once the mean (summed in a thread) is ready."""
    checkpoint = plan.checkpoint
    lm_head_name = plan.lm_head_name
    extents = _checkpoint_extents(checkpoint)
    head_writer = next(w for w in writers.values() if any(e.name == lm_head_name for e in w.entries))
    for writer in writers.values():
        for entry in writer.entries:
            if entry.name not in (lm_head_name, "d2t", "t2d"):
                _copy_tensor(checkpoint, entry, writer, extents, progress, cancel)
    entry = next(e for e in head_writer.entries if e.name == lm_head_name)
    row_bytes = entry.nbytes // max(1, entry.shape[0])
    step = max(1, WINDOW_BYTES // max(1, row_bytes))
    for lo in range(0, entry.shape[0], step):
        hi = min(entry.shape[0], lo + step)
        _check_cancel(cancel)
        chunk = _lm_head_chunk(plan, gather, init_rows, lo, hi, cancel)
        head_writer.write(entry.name, lo * row_bytes, _as_bytes(chunk))
        progress.advance(chunk.numel() * chunk.element_size(), "writing lm_head", _WRITE_SPAN)


# ---------------------------------------------------------------------------------------------
# The single pass over a safetensors source: every byte is read once, in file order, into a
# private buffer, hashed (BLAKE3, in a thread) and written from that same buffer, so the digest
# recorded is that of the bytes copied. The old lm_head's rows go to their new positions as they
# pass (each old row feeds at most one new row), and the mean of the old rows is summed on the way.


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
                        with _mapped(*what) as data:
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


def _pread_into(fd: int, buffer: bytearray, length: int, offset: int) -> memoryview:
    view = memoryview(buffer)[:length]
    got = 0
    while got < length:
        n = os.preadv(fd, [view[got:]], offset + got)
        if n == 0:
            raise _SourceChanged
        got += n
    return view


class _SourceChanged(Exception):
    """The source file no longer is what the plan read (shorter, or another header)."""


def _source_layout(plan: RemapPlan, file: Path, header: bytes, size: int) -> list[tuple[str, int, int]]:
    """(name, begin, end) of each tensor in ``file``, from the header bytes the pass read; they must
    describe the tensors the plan was made from."""
    try:
        entries = json.loads(header)
    except ValueError:
        raise _SourceChanged from None
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
        ):
            raise _SourceChanged
        begin, end = entry["data_offsets"]
        layout.append((name, start + begin, start + end))
    layout.sort(key=lambda item: item[1])
    if start + sum(end - begin for _, begin, end in layout) != size or len(layout) != sum(
        1 for info in plan.checkpoint.tensors.values() if info.file == file
    ):
        raise _SourceChanged
    return layout


def _stream_source(
    plan: RemapPlan,
    writers: dict[str, _SafetensorsWriter],
    init_rows: _InitRows,
    progress: _Progress,
    cancel: threading.Event | None,
) -> dict[str, str]:
    """Copy every unchanged tensor and move the lm_head rows, reading each source file once;
    returns the BLAKE3 of each file as read."""
    import blake3

    lm_head_name = plan.lm_head_name
    writer_of = {entry.name: writer for writer in writers.values() for entry in writer.entries}
    row_bytes = init_rows.row_bytes
    window_rows = max(1, WINDOW_BYTES // row_bytes)
    new_position = np.full(init_rows.old_rows, -1, dtype=np.int64)
    copied = np.flatnonzero(plan.source_rows >= 0)
    new_position[plan.source_rows[copied]] = copied
    head_writer = writer_of[lm_head_name]
    digests: dict[str, str] = {}
    in_kernel = True
    pipe = _HashPipe(max(WINDOW_BYTES, window_rows * row_bytes))
    try:
        for file in plan.checkpoint.files:
            hasher = blake3.blake3()
            with _opened(file) as fd:
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                except (OSError, AttributeError):
                    pass
                size = os.fstat(fd).st_size
                try:
                    i, buffer = pipe.buffer()
                    prefix = bytes(_pread_into(fd, buffer, 8, 0))
                    header_length = int.from_bytes(prefix, "little")
                    if header_length > size - 8:
                        raise _SourceChanged
                    header = bytes(_pread_into(fd, buffer, header_length, 8))
                    layout = _source_layout(plan, file, header, size)
                    hasher.update(prefix)
                    hasher.update(header)
                    for name, begin, end in layout:
                        step = window_rows * row_bytes if name == lm_head_name else WINDOW_BYTES
                        for offset in range(begin, end, step):
                            _check_cancel(cancel)
                            length = min(step, end - offset)
                            if in_kernel and name not in (lm_head_name, "d2t", "t2d"):
                                # copied inside the kernel (no trip through this process), then hashed
                                # from the output file: the digest is of the bytes as copied
                                writer = writer_of[name]
                                try:
                                    writer.copy(name, offset - begin, fd, offset, length)
                                    pipe.hash_range(hasher, writer.fd, writer.start_of(name) + offset - begin, length)
                                    progress.advance(length, f"copying {name}", _WRITE_SPAN)
                                    continue
                                except _NoInKernelCopy:
                                    in_kernel = False  # this window and the rest through memory
                            i, buffer = pipe.buffer()
                            view = _pread_into(fd, buffer, length, offset)
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
                            progress.advance(length, f"copying {name}", _WRITE_SPAN)
                            del view
                    pipe.drain()
                except _SourceChanged:
                    raise BadInput(
                        plan.source,
                        "the checkpoint's weights changed while it was being remapped; "
                        "nothing was written (run again once nothing writes to it)",
                    ) from None
            digests[file.name] = hasher.hexdigest()
    finally:
        pipe.close()
    initialised = np.flatnonzero(plan.source_rows < 0)
    for start in range(0, initialised.size, window_rows):
        _check_cancel(cancel)
        positions = initialised[start : start + window_rows]
        _write_runs(head_writer, lm_head_name, positions, init_rows.rows_bytes(positions), row_bytes)
    return digests


def _scatter_rows(
    writer: _SafetensorsWriter, name: str, rows: np.ndarray, positions: np.ndarray, row_bytes: int
) -> None:
    """Write old rows to their new positions (-1: the row is not kept)."""
    kept = np.flatnonzero(positions >= 0)
    if not kept.size:
        return
    order = np.argsort(positions[kept], kind="stable")
    source = kept[order]
    data = rows[int(source[0]) : int(source[-1]) + 1] if _is_range(source) else rows[source]
    _write_runs(writer, name, positions[source], data, row_bytes)


def _write_runs(writer: _SafetensorsWriter, name: str, positions: np.ndarray, data: np.ndarray, row_bytes: int) -> None:
    """``data[k]`` to row ``positions[k]`` (ascending), one write per run of consecutive rows."""
    breaks = np.flatnonzero(np.diff(positions) != 1) + 1
    for a, b in zip([0, *breaks.tolist()], [*breaks.tolist(), positions.size], strict=True):
        writer.write(name, int(positions[a]) * row_bytes, data[a:b])


def _safetensors_metadata(path: Path) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file, from its header (no torch)."""
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
    found = header.get("__metadata__") if isinstance(header, dict) else None
    return dict(found) if isinstance(found, dict) else {}


def _verify_metadata(plan: RemapPlan, temp: Path, files: dict[str, list[_Entry]], metadata: dict[str, str]) -> None:
    """The provenance reads back from every output file's header."""
    for file_name in files:
        if _safetensors_metadata(temp / file_name) != metadata:
            raise BadInput(
                plan.output,
                f"verification failed: {file_name}: provenance metadata does not read back; nothing was written",
            )


def _verify(
    plan: RemapPlan,
    temp: Path,
    files: dict[str, list[_Entry]],
    init_rows: _InitRows,
    progress: _Progress,
    cancel: threading.Event | None,
) -> int:
    """Re-read the output through the program's reader and compare it with the source; returns bytes compared.

    Raises BadInput naming the first difference: the output is then removed, never renamed into place.
    """

    def fail(what: str) -> BadInput:
        return BadInput(plan.output, f"verification failed: {what}; nothing was written")

    try:
        written = read_checkpoint(temp)
    except BadInput as err:
        raise fail(f"the output does not read back ({err.what})") from None
    expected = {entry.name: entry for entries in files.values() for entry in entries}
    if set(written.tensors) != set(expected):
        raise fail(f"tensor names differ: {sorted(set(written.tensors) ^ set(expected))[:5]}")
    for name, entry in expected.items():
        info = written.tensors[name]
        if (info.dtype, tuple(info.shape)) != (entry.dtype, entry.shape):
            raise fail(
                f"{name} reads back as {info.dtype} {list(info.shape)}, expected {entry.dtype} {list(entry.shape)}"
            )
    run = plan.run_mapping
    source_extents = _checkpoint_extents(plan.checkpoint)
    written_extents = _checkpoint_extents(written)
    compared = 0
    for name, want in (("d2t", run.d2t().astype("<i8").view(np.uint8)), ("t2d", run.t2d().astype(bool).view(np.uint8))):
        begin, end = written_extents[name]
        with _opened(written.tensors[name].file) as fd, _mapped(fd, begin, end - begin) as got:
            same = _equal_bytes(got, want)
            del got
        if not same:
            raise fail("d2t/t2d differ from the run's mapping")
        compared += want.size
    if (
        written.mapping is None
        or not np.array_equal(written.mapping.hot_ids, run.hot_ids)
        or written.mapping.target_vocab_size != run.target_vocab_size
    ):
        raise fail("the output's d2t/t2d do not read back as the run's mapping")

    lm_head_name = plan.lm_head_name
    if lm_head_name in source_extents and lm_head_name in written_extents:
        compared += _verify_lm_head_mapped(
            plan, written, source_extents, written_extents, init_rows, fail, progress, cancel
        )
    else:
        compared += _verify_lm_head_rows(plan, written, init_rows, fail, progress, cancel)

    for name in expected:
        if name in (lm_head_name, "d2t", "t2d"):
            continue
        if name in source_extents and name in written_extents:
            (old_begin, old_end), (new_begin, _) = source_extents[name], written_extents[name]
            with _opened(plan.checkpoint.tensors[name].file) as old_fd, _opened(written.tensors[name].file) as new_fd:
                if not _same_file_bytes(
                    old_fd, old_begin, new_fd, new_begin, old_end - old_begin, cancel, progress, f"verifying {name}"
                ):
                    raise fail(f"{name} differs from the source")
            compared += old_end - old_begin
            continue
        old, new = _Rows(plan.checkpoint, name), _Rows(written, name)
        for lo, hi in old.windows():
            _check_cancel(cancel)
            a, b = old.read(lo, hi), new.read(lo, hi)
            if not _same_bytes(a, b):
                raise fail(f"{name} differs from the source")
            compared += _as_bytes(a).size
            progress.advance(_as_bytes(a).size, f"verifying {name}", _VERIFY_SPAN)
            del a, b
    return compared


def _checkpoint_extents(checkpoint) -> dict[str, tuple[int, int]]:
    """Byte range of each tensor in a safetensors checkpoint's files; empty for a .bin checkpoint."""
    extents: dict[str, tuple[int, int]] = {}
    if checkpoint.file_kind == "safetensors":
        for file in checkpoint.files:
            extents.update(_safetensors_extents(checkpoint, file))
    return extents


@contextmanager
def _opened(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd
    finally:
        os.close(fd)


def _verify_lm_head_mapped(
    plan: RemapPlan,
    written,
    source_extents,
    written_extents,
    init_rows: _InitRows,
    fail,
    progress: _Progress,
    cancel: threading.Event | None,
) -> int:
    """Each window of the new lm_head, read from the output file, against the rows it should hold.

    The expected rows are taken here from the source's bytes with numpy (the write gathered them
    with torch, maybe on a GPU), and the initialised rows are the ones the plan's init gives.
    """
    name = plan.lm_head_name
    old_rows, width = plan.checkpoint.tensors[name].shape
    row_bytes = _Entry(name, plan.checkpoint.tensors[name].dtype, (1, width)).nbytes
    (old_begin, old_end), (new_begin, new_end) = source_extents[name], written_extents[name]
    new_rows = (new_end - new_begin) // max(1, row_bytes)
    window_rows = max(1, WINDOW_BYTES // max(1, row_bytes))
    with _opened(plan.checkpoint.tensors[name].file) as old_fd, _opened(written.tensors[name].file) as new_fd:
        for lo in range(0, new_rows, window_rows):
            _check_cancel(cancel)
            hi = min(new_rows, lo + window_rows)
            sources = plan.source_rows[lo:hi]
            copied = np.flatnonzero(sources >= 0)
            initialised = np.flatnonzero(sources < 0)
            want = np.empty((hi - lo, row_bytes), dtype=np.uint8)
            if copied.size:
                # the whole old head mapped afresh per window: only the rows taken are touched, and
                # closing the map drops them from this process's memory
                with _mapped(old_fd, old_begin, old_end - old_begin) as old:
                    want[copied] = old.reshape(old_rows, row_bytes)[sources[copied]]
                    del old
            if initialised.size:
                want[initialised] = init_rows.rows_bytes(initialised + lo)
            with _mapped(new_fd, new_begin + lo * row_bytes, (hi - lo) * row_bytes) as got:
                same = _equal_bytes(got, want.reshape(-1))
                if not same:
                    wrong = lo + int(np.flatnonzero(np.any(got.reshape(-1, row_bytes) != want, axis=1))[0])
                del got
            if not same:
                if plan.source_rows[wrong] >= 0:
                    raise fail(
                        f"lm_head row {wrong} differs from row {int(plan.source_rows[wrong])} of the source "
                        "lm_head it copies"
                    )
                raise fail(f"initialised lm_head row {wrong} is not the {plan.init} row meant for it")
            progress.advance(want.nbytes, "verifying lm_head", _VERIFY_SPAN)
            del want
    return new_rows * row_bytes


def _verify_lm_head_rows(
    plan: RemapPlan, written, init_rows: _InitRows, fail, progress: _Progress, cancel: threading.Event | None
) -> int:
    """The lm_head check for a source read through torch (.bin): each window of the old head against
    the output rows that should hold it."""
    compared = 0
    lm_head_name = plan.lm_head_name
    old_head, new_head = _Rows(plan.checkpoint, lm_head_name), _Rows(written, lm_head_name)
    copied_new = np.flatnonzero(plan.source_rows >= 0)
    by_source = copied_new[np.argsort(plan.source_rows[copied_new], kind="stable")]
    sources = plan.source_rows[by_source]
    for lo, hi in old_head.windows():
        _check_cancel(cancel)
        positions = by_source[np.searchsorted(sources, lo) : np.searchsorted(sources, hi)]
        if not positions.size:
            continue
        want = _take(old_head.read(lo, hi), plan.source_rows[positions] - lo)
        got = new_head.gather(positions, cancel)
        if not _same_bytes(got, want):
            first = next(i for i in range(positions.size) if not _same_bytes(got[i], want[i]))
            raise fail(
                f"lm_head row {int(positions[first])} differs from row "
                f"{int(plan.source_rows[positions[first]])} of the source lm_head it copies"
            )
        compared += _as_bytes(got).size
        progress.advance(_as_bytes(got).size, "verifying lm_head", _VERIFY_SPAN)
        del want, got
    initialised = np.flatnonzero(plan.source_rows < 0)
    for start in range(0, initialised.size, new_head.window_rows):
        _check_cancel(cancel)
        positions = initialised[start : start + new_head.window_rows]
        got = new_head.gather(positions, cancel)
        if not _same_bytes(got, init_rows.rows(positions)):
            raise fail(
                f"an initialised lm_head row among {int(positions[0])}..{int(positions[-1])} is not the "
                f"{plan.init} row meant for it"
            )
        compared += _as_bytes(got).size
        progress.advance(_as_bytes(got).size, "verifying lm_head", _VERIFY_SPAN)
    return compared


def _fsync_all(writers: dict[str, _SafetensorsWriter]) -> None:
    for writer in writers.values():
        os.fsync(writer.fd)


class _Background(threading.Thread):
    """A function run in a thread whose exception is re-raised by ``result()``."""

    def __init__(self, name: str, function: Callable[[], Any]) -> None:
        super().__init__(name=name, daemon=True)
        self.function = function
        self.value: Any = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.value = self.function()
        except BaseException as err:  # noqa: BLE001 - handed to the caller by result()
            self.error = err

    def result(self) -> Any:
        self.join()
        if self.error is not None:
            raise self.error
        return self.value


def _provenance(plan: RemapPlan, digests: dict[str, str], notes: list[str]) -> dict[str, Any]:
    return {
        "tool": "triage",
        "version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "source": str(plan.source),
        "source_file_kind": plan.checkpoint.file_kind,
        "source_layout": plan.checkpoint.layout,
        "source_blake3": dict(digests),
        "mapping": str(plan.mapping_path),
        "mapping_sha256": plan.mapping_sha256,
        "mapping_sha256_of": plan.mapping_sha256_of,
        "draft_vocab_size": plan.draft_vocab_size,
        "target_vocab_size": plan.run_mapping.target_vocab_size,
        "rows_copied": plan.rows_copied,
        "rows_initialized": plan.rows_initialized,
        "init": plan.init,
        "init_from": plan.init_from,
        "written_as": plan.written_as,
        "notes": list(notes),
    }


def _metadata(plan: RemapPlan, source_metadata: dict[str, str], digests: dict[str, str]) -> dict[str, str]:
    """safetensors metadata: the source's own keys plus the provenance, as strings."""
    metadata = dict(source_metadata)
    metadata.setdefault("format", "pt")
    metadata.update(
        {
            "triage.version": __version__,
            "triage.source": str(plan.source),
            "triage.source_blake3": json.dumps(digests, sort_keys=True),
            "triage.mapping": str(plan.mapping_path),
            "triage.mapping_sha256": plan.mapping_sha256,
            "triage.rows_copied": str(plan.rows_copied),
            "triage.rows_initialized": str(plan.rows_initialized),
            "triage.init": plan.init,
        }
    )
    return metadata


def _source_metadata(plan: RemapPlan) -> dict[str, str]:
    if plan.checkpoint.file_kind != "safetensors":
        return {}
    found = _safetensors_metadata(plan.checkpoint.files[0])
    return {k: v for k, v in found.items() if isinstance(v, str) and not k.startswith("triage.")}


def _write_index(plan: RemapPlan, temp: Path, files: dict[str, list[_Entry]]) -> None:
    """A sharded source keeps its shards; its index is rewritten with the new total size."""
    index = plan.source / "model.safetensors.index.json"
    if plan.checkpoint.file_kind != "safetensors" or not index.is_file():
        return
    original = json.loads(index.read_text(encoding="utf-8"))
    metadata = dict(original.get("metadata") or {})
    metadata["total_size"] = sum(e.nbytes for entries in files.values() for e in entries)
    weight_map = {e.name: file_name for file_name, entries in files.items() for e in entries}
    _write_small(
        temp / index.name, json.dumps({**original, "metadata": metadata, "weight_map": weight_map}, indent=2).encode()
    )


def _replay_accuracy(
    checkpoint, dumps, target, mapping: VocabMapping, device: str, max_tokens: int, notes: list[str]
) -> float | None:
    """Top-1 accuracy of the drafter's first step on the dumps, read through ``mapping`` (checks/replay).

    The proof is a measurement beside the fix: when the dumps do not fit the drafter, the note
    says why and the remap goes on.
    """
    from triage_tui.core.checks.replay import replay_accuracy
    from triage_tui.core.drafter import load_drafter

    try:
        drafter = load_drafter(checkpoint, device="cpu")
        return replay_accuracy(drafter, dumps, target, mapping, device=device, max_tokens=max_tokens)
    except BadInput as err:
        notes.append(f"Accuracy not measured: {err.line()}")
        return None


def _streams(plan: RemapPlan) -> bool:
    """The single pass (no torch) applies: a safetensors source whose lm_head numpy can sum."""
    checkpoint = plan.checkpoint
    return checkpoint.file_kind == "safetensors" and checkpoint.tensors[plan.lm_head_name].dtype in _NUMPY_HEAD_DTYPES


def execute_remap(
    plan: RemapPlan,
    *,
    data: str | Path | None = None,
    force: bool = False,
    device: str = "auto",
    max_tokens: int = 4096,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> RemapReport:
    """Write, verify and move into place the checkpoint ``plan`` describes."""
    output = plan.output
    replace = _check_output_free(output, force)
    _check_unchanged(plan)
    dumps = None
    if data is not None:
        from triage_tui.core.formats.hidden_states import read_dumps

        dumps = read_dumps(data)
    files = _output_entries(plan)
    try:
        extras, skipped, outside = _extra_files(plan)
    except OSError as err:
        raise _read_error(err, plan.source) from None
    total = sum(e.nbytes for entries in files.values() for e in entries) + sum(e.allocated for e in extras)
    try:
        clean_stale_temporaries(output)
        free = _free_bytes(output.parent)
    except OSError as err:
        raise _write_error(err, output) from None
    if free < total + (1 << 20):
        raise BadInput(
            output.parent,
            f"needs {total / 1e9:.2f} GB for {output.name} but only {free / 1e9:.2f} GB is free; nothing was written",
        )
    notes = list(plan.notes)
    report_progress = _Progress(progress, total)
    streamed = _streams(plan)
    accuracy_before = accuracy_after = accuracy_device = None
    for file in plan.checkpoint.files:  # a cold source is read ahead while the plan's first steps run
        _read_ahead(file)
    try:
        temp = _TempOutput(output)
    except OSError as err:
        raise _write_error(err, output) from None
    # A source read through torch is hashed apart from the copy, once while it is written and once
    # after the verification: the two digests must agree.
    hashing = (
        None
        if streamed
        else _Background(
            "triage-remap-blake3", lambda: {file.name: _file_blake3(file) for file in plan.checkpoint.files}
        )
    )
    writers: dict[str, _SafetensorsWriter] = {}
    init_rows = syncing = None
    replay = dumps is not None and plan.target_model is not None
    try:
        if replay:
            if progress:
                progress(0.0, "replay on the source checkpoint")
            accuracy_before = _replay_accuracy(
                plan.checkpoint, dumps, plan.target_model, plan.run_mapping, device, max_tokens, notes
            )
            replay = accuracy_before is not None
        elif dumps is not None:
            notes.append("Accuracy not measured: the replay needs --target as well as --data.")
        old_head = None if streamed else _Rows(plan.checkpoint, plan.lm_head_name)
        init_rows = _InitRows(plan, old_head)
        source_metadata = _source_metadata(plan)
        placeholder = {file.name: "0" * 64 for file in plan.checkpoint.files}
        try:
            writers = _open_writers(temp.path, files, _metadata(plan, source_metadata, placeholder), plan.run_mapping)
            if old_head is None:  # streamed: the single pass reads the source itself
                digests = _stream_source(plan, writers, init_rows, report_progress, cancel)
            else:
                gpu = _use_gpu(device, old_head.row_bytes * old_head.shape[0])
                gather = _StagedRows(old_head, gpu, cancel).gather if gpu is not None else old_head.gather
                _write_tensors(plan, writers, gather, init_rows, report_progress, cancel)
            # The data goes to disk while it is re-read for verification; nothing is renamed before both end.
            syncing = _Background("triage-remap-fsync", lambda: _fsync_all(writers))
            config = _updated_config(plan, notes)
            if config is not None:
                _write_small(temp.path / "config.json", (json.dumps(config, indent=2) + "\n").encode())
            _write_index(plan, temp.path, files)
            for extra in extras:
                _copy_extra(extra, temp.path / extra.path.name, cancel)
            if skipped:
                notes.append(
                    "Not carried over: " + ", ".join(skipped) + " (weights in another form, or pickled "
                    "training state, which holds lm_head moments in the old row order)."
                )
            if outside:
                notes.append(
                    "Not carried over: " + ", ".join(outside) + " (symlinks to outside the checkpoint, never followed)."
                )
            report_progress.reset()
            compared = _verify(plan, temp.path, files, init_rows, report_progress, cancel)
            if hashing is not None:  # not streamed: the source was hashed apart from the copy
                digests = hashing.result()
                if {file.name: _file_blake3(file) for file in plan.checkpoint.files} != digests:
                    raise BadInput(
                        plan.source,
                        "the checkpoint's weights changed while it was being remapped; "
                        "nothing was written (run again once nothing writes to it)",
                    )
            _check_unchanged(plan)
            # The source's digest goes into the headers' placeholders last.
            metadata = _metadata(plan, source_metadata, digests)
            syncing.result()
            for writer in writers.values():
                writer.write_header(metadata)
                os.fsync(writer.fd)
            _verify_metadata(plan, temp.path, files, metadata)
        except OSError as err:
            raise _write_error(err, output) from None
        if replay:
            if progress:
                progress(0.9, "replay on the remapped checkpoint")
            accuracy_after = _replay_accuracy(
                read_checkpoint(temp.path), dumps, plan.target_model, plan.run_mapping, device, max_tokens, notes
            )
            accuracy_device = str(resolve_device(device))
        provenance = _provenance(plan, digests, notes)
        provenance.update(
            bytes_verified=compared,
            accuracy_before=accuracy_before,
            accuracy_after=accuracy_after,
            files=sorted([p.name for p in temp.path.iterdir()] + [PROVENANCE_FILE]),
        )
        try:
            _write_small(temp.path / PROVENANCE_FILE, (json.dumps(provenance, indent=2) + "\n").encode())
            temp.commit(replace)
        except OSError as err:
            raise _write_error(err, output) from None
    finally:
        if hashing is not None:
            hashing.join()
        if init_rows is not None:
            init_rows.close()
        if syncing is not None:
            syncing.join()  # before the files it syncs are closed
        for writer in writers.values():
            writer.close()
        temp.close()
    if progress:
        progress(1.0, "done")
    return RemapReport(
        source=plan.source,
        output=output,
        mapping=plan.mapping_path,
        draft_vocab_size=plan.draft_vocab_size,
        rows_copied=plan.rows_copied,
        rows_initialized=plan.rows_initialized,
        init=plan.init,
        verified=True,
        written_as=plan.written_as,
        accuracy_before=accuracy_before,
        accuracy_after=accuracy_after,
        accuracy_device=accuracy_device,
        mapping_sha256=plan.mapping_sha256,
        source_blake3=dict(digests),
        files=tuple(provenance["files"]),
        replaced=replace,
        notes=tuple(notes),
    )


def remap_checkpoint(
    checkpoint_path: str | Path,
    mapping_path: str | Path,
    *,
    out: str | Path | None = None,
    init: str | None = None,
    target: str | Path | None = None,
    data: str | Path | None = None,
    force: bool = False,
    device: str = "auto",
    max_tokens: int = 4096,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> RemapReport:
    """Plan and write a remapped checkpoint (``triage remap``)."""
    plan = plan_remap(checkpoint_path, mapping_path, out=out, init=init, target=target)
    return execute_remap(
        plan, data=data, force=force, device=device, max_tokens=max_tokens, progress=progress, cancel=cancel
    )


# ---------------------------------------------------------------------------------------------
# The opposite fix: keep the weights, hand the trainer the checkpoint's own mapping.


@dataclass(frozen=True)
class KeptMapping:
    """The checkpoint's own mapping, written for a trainer to load."""

    source: Path
    output: Path
    files: tuple[Path, ...]
    draft_vocab_size: int
    target_vocab_size: int
    mapping_sha256: str  # VocabMapping.sha256(): what the mapping means
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "output": str(self.output),
            "files": [str(f) for f in self.files],
            "draft_vocab_size": self.draft_vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "mapping_sha256": self.mapping_sha256,
            "notes": list(self.notes),
        }


def keep_checkpoint_mapping(
    checkpoint_path: str | Path, out_dir: str | Path | None = None, *, force: bool = False
) -> KeptMapping:
    """Write the checkpoint's d2t/t2d as ``vocab_mapping.pt`` (SpecForge ``vocab_mapping_path``) and
    ``d2t.npy``/``t2d.npy`` (speculators ``--d2t-path``/``--t2d-path``); the weights are not touched."""
    checkpoint = read_checkpoint(checkpoint_path)
    source = checkpoint.path.resolve()
    mapping = checkpoint.mapping
    if mapping is None:
        raise BadInput(
            source, "checkpoint has no d2t buffer, so no mapping of its own to keep (engines read it as identity)"
        )
    notes = []
    if not mapping.is_ascending():
        # SpecForge classic `specforge/core/eagle3.py`, `_compute_target_p`: SpecForge/EAGLE build targets with
        # logits[..., t2d] (ascending id order).
        notes.append(
            "The checkpoint's draft order is not ascending by target id (frequency order, as modelopt "
            "writes): a trainer that builds targets with logits[..., t2d] (SpecForge, EAGLE, "
            "speculators) would misalign its rows; remap instead."
        )
    output = Path(out_dir).resolve() if out_dir is not None else source.parent / f"{source.name}-vocab-mapping"
    _check_output_location(output, source, [source])
    replace = _check_output_free(output, force)
    clean_stale_temporaries(output)
    temp = _TempOutput(output)
    try:
        try:
            written = [
                write_mapping_pt(mapping, temp.path / "vocab_mapping.pt"),
                *write_mapping_npy(mapping, temp.path),
            ]
            for path in written:
                os.chmod(path, 0o666 & ~_umask())  # written through mkstemp, which makes them 0600
                _fsync_path(path)
            for path in written:
                back = read_mapping(path, target_vocab_size=mapping.target_vocab_size)
                if (
                    not np.array_equal(back.hot_ids, mapping.hot_ids)
                    or back.target_vocab_size != mapping.target_vocab_size
                ):
                    raise BadInput(
                        output,
                        f"verification failed: {path.name} does not read back as the "
                        "checkpoint's mapping; nothing was written",
                    )
            provenance = {
                "tool": "triage",
                "version": __version__,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "source": str(source),
                "source_blake3": {f.name: _file_blake3(f) for f in checkpoint.files},
                "mapping_sha256": mapping.sha256(),
                "draft_vocab_size": mapping.draft_vocab_size,
                "target_vocab_size": mapping.target_vocab_size,
                "notes": notes,
                "files": sorted([p.name for p in written] + [KEPT_MAPPING_PROVENANCE_FILE]),
            }
            _write_small(temp.path / KEPT_MAPPING_PROVENANCE_FILE, (json.dumps(provenance, indent=2) + "\n").encode())
            temp.commit(replace)
        except OSError as err:
            raise _write_error(err, output) from None
        except RuntimeError as err:  # torch.save reports a failed write as RuntimeError
            raise BadInput(output.parent, f"cannot write {output.name}: {err}; nothing was written") from None
    finally:
        temp.close()
    files = tuple(output / p.name for p in written)
    return KeptMapping(
        source=source,
        output=output,
        files=files,
        draft_vocab_size=mapping.draft_vocab_size,
        target_vocab_size=mapping.target_vocab_size,
        mapping_sha256=mapping.sha256(),
        notes=tuple(notes),
    )
