"""The output re-read through the program's reader and compared with the source, before any rename.

Raises BadInput naming the first difference; the output is then removed, never renamed into place.
Unchanged tensors are compared byte range to byte range (memory-mapped windows); the lm_head's
copied rows run by run against the source's rows, its initialised rows against the plan's init.
After the single pass the source is also hashed, in file order, by a thread behind the comparison
(``HashBehind``): every byte the output depends on is compared with the output (or, for the dropped
rows the mean was summed from, with their digest as the pass read them) before it is hashed, so the
BLAKE3 recorded is that of a source whose remap is exactly the output.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from triage_tui.core import fileio
from triage_tui.core.errors import BadInput
from triage_tui.core.fix.remap import tuning
from triage_tui.core.fix.remap.digest import SourceRead, dropped_rows_hasher, hash_dropped_rows
from triage_tui.core.fix.remap.job import VERIFY_SPAN, Background, PhaseProgress, check_cancel
from triage_tui.core.fix.remap.plan import RemapPlan, source_changed
from triage_tui.core.fix.remap.rows import InitRows, Rows, as_bytes, same_bytes, same_file_bytes, take
from triage_tui.core.fix.remap.writer import Entry, safetensors_metadata
from triage_tui.core.formats.checkpoint import read_checkpoint


def verify_metadata(plan: RemapPlan, temp: Path, files: dict[str, list[Entry]], metadata: dict[str, str]) -> None:
    """The provenance reads back from every output file's header."""
    for file_name in files:
        if safetensors_metadata(temp / file_name) != metadata:
            raise BadInput(
                plan.output,
                f"verification failed: {file_name}: provenance metadata does not read back; nothing was written",
            )


def verify(
    plan: RemapPlan,
    temp: Path,
    files: dict[str, list[Entry]],
    init_rows: InitRows,
    progress: PhaseProgress,
    cancel: threading.Event | None,
    source_read: dict[str, SourceRead] | None = None,
) -> tuple[int, dict[str, str] | None]:
    """Re-read the output through the program's reader and compare it with the source; returns bytes
    compared and, after the single pass (``source_read``), the BLAKE3 of each source file as compared.

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
    source_extents = _extents(plan.checkpoint)
    written_extents = _extents(written)
    compared = 0
    for name, want in (("d2t", run.d2t().astype("<i8").view(np.uint8)), ("t2d", run.t2d().astype(bool).view(np.uint8))):
        begin, end = written_extents[name]
        with fileio.opened(written.tensors[name].file) as fd, fileio.mapped(fd, begin, end - begin) as got:
            same = fileio.equal_bytes(got, want)
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

    if source_read is not None:
        streamed, digests = _verify_streamed(
            plan, written, expected, source_read, source_extents, written_extents, init_rows, fail, progress, cancel
        )
        return compared + streamed, digests

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
            with (
                fileio.opened(plan.checkpoint.tensors[name].file) as old_fd,
                fileio.opened(written.tensors[name].file) as new_fd,
            ):
                if not same_file_bytes(
                    old_fd, old_begin, new_fd, new_begin, old_end - old_begin, cancel, progress, f"verifying {name}"
                ):
                    raise fail(f"{name} differs from the source")
            compared += old_end - old_begin
            continue
        old, new = Rows(plan.checkpoint, name), Rows(written, name)
        for lo, hi in old.windows():
            check_cancel(cancel)
            a, b = old.read(lo, hi), new.read(lo, hi)
            if not same_bytes(a, b):
                raise fail(f"{name} differs from the source")
            compared += as_bytes(a).size
            progress.advance(as_bytes(a).size, f"verifying {name}", VERIFY_SPAN)
            del a, b
    return compared, None


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


def _verify_streamed(
    plan: RemapPlan,
    written,
    expected,
    source_read: dict[str, SourceRead],
    source_extents,
    written_extents,
    init_rows: InitRows,
    fail,
    progress: PhaseProgress,
    cancel: threading.Event | None,
) -> tuple[int, dict[str, str]]:
    """Each source file in file order: its header as the single pass read it, each unchanged tensor
    compared with the output window by window, the lm_head's rows compared (its dropped rows against
    their digest), d2t/t2d (replaced) compared with nothing; a thread hashes behind the comparison,
    in file order, each range once it compared equal (``HashBehind``)."""
    lm_head_name = plan.lm_head_name
    compared = 0
    digests: dict[str, str] = {}
    for file in plan.checkpoint.files:
        read = source_read[file.name]
        layout = sorted(
            (info.data[0], name) for name, info in plan.checkpoint.tensors.items() if info.file == file and info.data
        )
        with fileio.opened(file) as old_fd:
            # a file cut short would fault its memory maps; one of another header holds other tensors
            if (
                os.fstat(old_fd).st_size != read.size
                or bytes(fileio.pread_into(old_fd, bytearray(len(read.head)), len(read.head), 0)) != read.head
            ):
                raise source_changed(plan)
            behind = HashBehind()
            try:
                behind.then(partial(_feed, read.head))
                hash_range = partial(_hash_behind, behind, old_fd)
                for _, name in layout:
                    old_begin, old_end = source_extents[name]
                    if name == lm_head_name:
                        compared += _verify_lm_head_mapped(
                            plan, written, source_extents, written_extents, init_rows, fail, progress, cancel
                        )
                        behind.then(
                            partial(
                                _hash_head,
                                plan,
                                old_fd,
                                old_begin,
                                old_end,
                                init_rows,
                                read=read,
                                fail=fail,
                                cancel=behind.stop,
                            )
                        )
                    elif name in ("d2t", "t2d"):  # replaced by the run's: hashed, compared with nothing
                        hash_range(old_begin, old_end - old_begin)
                    else:
                        if name not in expected or name not in written_extents:
                            raise fail(f"{name} is missing from the output")
                        (new_begin, _) = written_extents[name]
                        with fileio.opened(written.tensors[name].file) as new_fd:
                            if not same_file_bytes(
                                old_fd,
                                old_begin,
                                new_fd,
                                new_begin,
                                old_end - old_begin,
                                cancel,
                                progress,
                                f"verifying {name}",
                                hash_range,
                            ):
                                raise fail(f"{name} differs from the source")
                        compared += old_end - old_begin
                digests[file.name] = behind.hexdigest()
            finally:
                behind.close()  # before old_fd, which its steps read, is closed
    return compared, digests


def _feed(data: bytes, hasher) -> None:
    hasher.update(data)


def _hash_behind(behind: HashBehind, fd: int, offset: int, length: int) -> None:
    """Queue ``length`` bytes of ``fd`` at ``offset`` (just compared equal) for the hashing thread."""
    behind.then(partial(_hash_range, fd, offset, length, cancel=behind.stop))


def _hash_range(fd: int, offset: int, length: int, hasher, cancel: threading.Event | None) -> None:
    for position in range(0, length, tuning.WINDOW_BYTES):
        check_cancel(cancel)
        with fileio.mapped(fd, offset + position, min(tuning.WINDOW_BYTES, length - position)) as data:
            hasher.update(data.data)  # the array's memoryview: numpy types its buffer only on 3.12+
            del data


def _hash_head(
    plan: RemapPlan,
    fd: int,
    begin: int,
    end: int,
    init_rows: InitRows,
    hasher,
    read: SourceRead,
    fail,
    cancel: threading.Event | None,
) -> None:
    """Hash the old lm_head (its kept rows were just compared with the output) and hold the rows no
    new row copies to the digest the single pass took of them, when the mean was summed from them."""
    row_bytes = init_rows.row_bytes
    window_rows = max(1, tuning.WINDOW_BYTES // row_bytes)
    new_position = np.full(init_rows.old_rows, -1, dtype=np.int64)
    kept = np.flatnonzero(plan.source_rows >= 0)
    new_position[plan.source_rows[kept]] = kept
    dropped = dropped_rows_hasher(init_rows.needs_sum)
    for first in range(0, init_rows.old_rows, window_rows):
        check_cancel(cancel)
        n = min(window_rows, init_rows.old_rows - first)
        with fileio.mapped(fd, begin + first * row_bytes, n * row_bytes) as data:
            hasher.update(data.data)
            if dropped is not None:
                hash_dropped_rows(dropped, data.reshape(n, row_bytes), new_position[first : first + n])
            del data
    if dropped is not None and dropped.hexdigest() != read.dropped:
        raise fail(f"{plan.lm_head_name}: rows the mean was taken over changed in the source")


def _extents(checkpoint) -> dict[str, tuple[int, int]]:
    """Byte range of each tensor in a safetensors checkpoint's files; empty for a .bin checkpoint."""
    return {name: info.data for name, info in checkpoint.tensors.items() if info.data is not None}


def _verify_lm_head_mapped(
    plan: RemapPlan,
    written,
    source_extents,
    written_extents,
    init_rows: InitRows,
    fail,
    progress: PhaseProgress,
    cancel: threading.Event | None,
) -> int:
    """Each window of the new lm_head, read from the output file, against the rows it should hold.

    Copied rows are compared with the source's bytes run by run (rows consecutive in both files: one
    ``memcmp`` each, nothing gathered; the write moved them inside the kernel, or with torch), and the
    initialised rows with the ones the plan's init gives.
    """
    name = plan.lm_head_name
    old_rows, width = plan.checkpoint.tensors[name].shape
    row_bytes = Entry(name, plan.checkpoint.tensors[name].dtype, (1, width)).nbytes
    (old_begin, old_end), (new_begin, new_end) = source_extents[name], written_extents[name]
    new_rows = (new_end - new_begin) // max(1, row_bytes)
    window_rows = max(1, tuning.WINDOW_BYTES // max(1, row_bytes))
    with (
        fileio.opened(plan.checkpoint.tensors[name].file) as old_fd,
        fileio.opened(written.tensors[name].file) as new_fd,
    ):
        for lo in range(0, new_rows, window_rows):
            check_cancel(cancel)
            hi = min(new_rows, lo + window_rows)
            sources = plan.source_rows[lo:hi]
            with fileio.mapped(new_fd, new_begin + lo * row_bytes, (hi - lo) * row_bytes) as got:
                got_rows = got.reshape(hi - lo, row_bytes)
                wrong = _first_wrong_copied(old_fd, old_begin, old_end, old_rows, row_bytes, sources, got_rows)
                if wrong is None:
                    wrong = _first_wrong_initialised(init_rows, lo, sources, got_rows)
                del got, got_rows
            if wrong is not None:
                at = lo + wrong
                if plan.source_rows[at] >= 0:
                    raise fail(
                        f"lm_head row {at} differs from row {int(plan.source_rows[at])} of the source lm_head it copies"
                    )
                raise fail(f"initialised lm_head row {at} is not the {plan.init} row meant for it")
            progress.advance((hi - lo) * row_bytes, "verifying lm_head", VERIFY_SPAN)
    return new_rows * row_bytes


def _runs(index: np.ndarray, values: np.ndarray) -> list[tuple[int, int]]:
    """[a, b) spans of ``index`` where both ``index`` and ``values`` go up by one."""
    if not index.size:
        return []
    breaks = (np.flatnonzero((np.diff(index) != 1) | (np.diff(values) != 1)) + 1).tolist()
    return list(zip([0, *breaks], [*breaks, index.size], strict=True))


def _first_wrong_copied(
    old_fd: int, old_begin: int, old_end: int, old_rows: int, row_bytes: int, sources: np.ndarray, got: np.ndarray
) -> int | None:
    """The first row of ``got`` (uint8 [n, row_bytes]) that is not the source row ``sources`` names, or None."""
    copied = np.flatnonzero(sources >= 0)
    if not copied.size:
        return None
    # the whole old head mapped afresh per window: only the rows compared are touched, and closing
    # the map drops them from this process's memory
    with fileio.mapped(old_fd, old_begin, old_end - old_begin) as old:
        old_head = old.reshape(old_rows, row_bytes)
        wrong = None
        for a, b in _runs(copied, sources[copied]):
            first, source = int(copied[a]), int(sources[copied[a]])
            if not fileio.equal_bytes(
                got[first : first + b - a].reshape(-1), old_head[source : source + b - a].reshape(-1)
            ):
                wrong = next(
                    int(row) for row in copied[a:b] if not fileio.equal_bytes(got[row], old_head[int(sources[row])])
                )
                break
        del old, old_head
    return wrong


def _first_wrong_initialised(init_rows: InitRows, lo: int, sources: np.ndarray, got: np.ndarray) -> int | None:
    """The first initialised row of ``got`` (new rows ``lo``...) that is not the init's row for it, or None."""
    initialised = np.flatnonzero(sources < 0)
    for a, b in _runs(initialised, initialised):
        rows = initialised[a:b]
        want = init_rows.rows_bytes(rows + lo)
        first = int(rows[0])
        if not fileio.equal_bytes(got[first : first + rows.size].reshape(-1), want.reshape(-1)):
            return next(int(row) for k, row in enumerate(rows) if not fileio.equal_bytes(got[row], want[k]))
    return None


def _verify_lm_head_rows(
    plan: RemapPlan, written, init_rows: InitRows, fail, progress: PhaseProgress, cancel: threading.Event | None
) -> int:
    """The lm_head check for a source read through torch (.bin): each window of the old head against
    the output rows that should hold it."""
    compared = 0
    lm_head_name = plan.lm_head_name
    old_head, new_head = Rows(plan.checkpoint, lm_head_name), Rows(written, lm_head_name)
    copied_new = np.flatnonzero(plan.source_rows >= 0)
    by_source = copied_new[np.argsort(plan.source_rows[copied_new], kind="stable")]
    sources = plan.source_rows[by_source]
    for lo, hi in old_head.windows():
        check_cancel(cancel)
        positions = by_source[np.searchsorted(sources, lo) : np.searchsorted(sources, hi)]
        if not positions.size:
            continue
        want = take(old_head.read(lo, hi), plan.source_rows[positions] - lo)
        got = new_head.gather(positions, cancel)
        if not same_bytes(got, want):
            first = next(i for i in range(positions.size) if not same_bytes(got[i], want[i]))
            raise fail(
                f"lm_head row {int(positions[first])} differs from row "
                f"{int(plan.source_rows[positions[first]])} of the source lm_head it copies"
            )
        compared += as_bytes(got).size
        progress.advance(as_bytes(got).size, "verifying lm_head", VERIFY_SPAN)
        del want, got
    initialised = np.flatnonzero(plan.source_rows < 0)
    for start in range(0, initialised.size, new_head.window_rows):
        check_cancel(cancel)
        positions = initialised[start : start + new_head.window_rows]
        got = new_head.gather(positions, cancel)
        if not same_bytes(got, init_rows.rows(positions)):
            raise fail(
                f"an initialised lm_head row among {int(positions[0])}..{int(positions[-1])} is not the "
                f"{plan.init} row meant for it"
            )
        compared += as_bytes(got).size
        progress.advance(as_bytes(got).size, "verifying lm_head", VERIFY_SPAN)
    return compared
