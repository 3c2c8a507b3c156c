"""A big event file's first read on two cores: a forked child decodes the second half, this process the first.

For a process that reads a file once and has nothing else to do meanwhile (``triage scalars``):
decoding is ~85 % of a read (framing and templates, ~0.3 s for 1 M records), and the two halves
of a file decode independently once it is known where a record starts near the middle. The
child only decodes; this process stores its points after its own, in file order, so restart
purges, first plugins, restarts and every point are those of a read front to back.

Where the halves meet: ``boundary`` finds, near the middle, the first offset from which eight
records follow one another with valid length and data CRCs. The child's records are used only if
this process's read of ``[offset, boundary)`` ended exactly there with no damage on the way: a
read front to back then reaches the boundary as a record start too, and from there reads what
the child read. Damage in the first half (a resync there may pick another record than a read
that sees past the boundary would) makes ``read_split`` answer UNCLEAN, and the caller reads the
run again front to back: rare, and exact.

Only where a fork is safe (core/processes.py: one thread, Linux), never from the TUI's watcher.
The child reopens the file (the descriptor's offset is shared across a fork) and checks it is the
same inode; anything unexpected in the child, or the child's death, leaves the second half to this
process, as without a split. The child's answer is a pickle in a file in memory (memfd) written by
this module's own code in a fork of this process, read once the child has exited.
"""

from __future__ import annotations

import enum
import mmap
import os
import pickle
import signal
import tempfile
from collections.abc import Callable
from typing import IO, NoReturn

from triage_tui.core import fileio, processes
from triage_tui.core.events import tuning
from triage_tui.core.events.decode import Chunk, Decoder
from triage_tui.core.events.event_file import FileState, Take, read_appended
from triage_tui.core.events.framing import Frames, chain_start
from triage_tui.core.series import ReadStats

_CHAIN = 8  # records that must follow one another from a boundary


class Split(enum.Enum):
    NONE = "not split: the caller reads the file as usual"
    PART = "the first part read here; the caller reads on from state.offset"
    WHOLE = "both parts read: the file read as far as a read front to back would"
    UNCLEAN = "damage in the first part: the caller must read the run again without splitting"


def worth_splitting(state: FileState, size: int) -> bool:
    return size - state.offset >= tuning.SPLIT_MIN_BYTES and processes.can_fork() and processes.cores() > 1


def boundary(fd: int, near: int, size: int) -> int | None:
    """A record boundary in [near, near + SPLIT_PROBE) from which records chain on, or None."""
    length = min(tuning.SPLIT_PROBE, size - near)
    if length < 16:
        return None
    buf = bytearray(length + 16)
    try:
        fileio.pread_into(fd, buf, length, near)
    except (OSError, fileio.ShortRead):
        return None
    found = chain_start(buf, length, _CHAIN, at_end=near + length == size)
    return None if found is None else near + found


Decode = Callable[[bytearray, Frames, ReadStats], Chunk]
Store = Callable[[Chunk, FileState, ReadStats], None]


def read_split(
    handle: IO[bytes],
    state: FileState,
    size: int,
    stats: ReadStats,
    *,
    take: Take,
    decode: Decode,
    store: Store,
    decoder: Decoder,
) -> Split:
    """Read [state.offset, size) in two parts: this process ``take``s the first (decodes and
    stores it), a forked child ``decode``s the second with its copy of ``decoder``, and its
    chunks are then given this process's tag ids and ``store``d, in file order."""
    middle = boundary(handle.fileno(), state.offset + (size - state.offset) // 2, size)
    if middle is None:
        return Split.NONE
    known = len(decoder.tags)  # tag ids below it mean the same tag in both processes
    try:
        scratch = _scratch_file()
    except OSError:
        return Split.NONE
    with scratch:
        try:
            pid = os.fork()
        except OSError:
            return Split.NONE
        if pid == 0:
            _child(state, middle, size, decode, decoder, known, scratch.fileno(), os.fstat(handle.fileno()))
        status = None
        try:
            damage = (stats.corrupt_records, stats.skipped_bytes)
            read_appended(handle, state, middle, stats, take)
            if state.offset != middle or (stats.corrupt_records, stats.skipped_bytes) != damage:
                return Split.UNCLEAN
            status = os.waitpid(pid, 0)[1]
        finally:
            if status is None:  # not needed (or this process was interrupted): its answer is not read
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            return Split.PART
        with mmap.mmap(scratch.fileno(), 0, access=mmap.ACCESS_READ) as answer:
            # The summary last, where the trailer says; then the chunks one at a time from the
            # start, each stored before the next is loaded (a 2 GB file's half is ~1 GB of points).
            summary_at = int.from_bytes(answer[-8:], "little")
            offset, part_stats, new_tags, count, damaged_from = pickle.loads(answer[summary_at:-8])
            stats.add_counts(part_stats)
            answer.seek(0)
            for _ in range(count):
                chunk = pickle.load(answer)
                decoder.adopt(chunk, new_tags, known)
                store(chunk, state, stats)
    state.offset, state.damaged_from = offset, damaged_from
    return Split.WHOLE


def _child(
    state: FileState,
    start: int,
    size: int,
    decode: Decode,
    decoder: Decoder,
    known: int,
    answer: int,
    parent_stat: os.stat_result,
) -> NoReturn:
    """The forked child: decode [start, size) of the same file, send it back, exit."""
    code = 1
    try:
        with fileio.open_polled(state.path, buffering=0) as handle:
            st = os.fstat(handle.fileno())
            if (st.st_dev, st.st_ino) == (parent_stat.st_dev, parent_stat.st_ino):
                part = FileState(state.path, offset=start)
                part_stats = ReadStats()
                count = 0
                with open(answer, "wb", closefd=False) as out:
                    # Each window's chunk as it is decoded, grouped by tag (the sort storing takes,
                    # done here while the parent reads) and written: the arrays' bytes go straight
                    # to the file. Then the summary, and where it starts.

                    def send(buf, frames, _, window_stats) -> None:
                        nonlocal count
                        chunk = decode(buf, frames, window_stats)
                        chunk.group()
                        pickle.dump(chunk, out, protocol=5)
                        count += 1

                    read_appended(handle, part, size, part_stats, send)
                    summary_at = out.tell()
                    pickle.dump(
                        (part.offset, part_stats, decoder.tags[known:], count, part.damaged_from), out, protocol=5
                    )
                    out.write(summary_at.to_bytes(8, "little"))
                code = 0
    except BaseException:  # noqa: BLE001 - whatever it was (a full disk, Ctrl-C), the parent reads the rest itself
        pass
    finally:
        os._exit(code)


def _scratch_file() -> IO[bytes]:
    """Where the child leaves its answer: a file in memory (memfd), else an unlinked temporary file."""
    if hasattr(os, "memfd_create"):
        return open(os.memfd_create("triage-split-read", os.MFD_CLOEXEC), "r+b", buffering=0)
    return tempfile.TemporaryFile(buffering=0)
