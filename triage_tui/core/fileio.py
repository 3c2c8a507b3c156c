"""Low-level file I/O that the scalar readers and the remap share, each thing done one way.

The C library is loaded once, on first use (``memcmp``, ``sync_file_range``, ``malloc_trim``);
holes of sparse files are found with ``SEEK_DATA``/``SEEK_HOLE``; writes and in-kernel copies
loop until every byte is on its way; ``fsync`` of a file or a directory; fresh memory maps that
are dropped after each window.

The fault-injection seams live here: tests replace ``open_polled``, ``read_into``, ``write_at``,
``copy_range`` and ``free_bytes`` to make a read or a write fail (or a file change) at a chosen
moment. Every caller reaches them as ``fileio.<name>`` (tests/test_layers.py refuses
``from triage_tui.core.fileio import <name>``), so a patch here is the one every caller sees,
wherever the calling code moves.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import mmap
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import numpy as np

# --- the C library, loaded once ------------------------------------------------------------------


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


@functools.cache
def libc_function(name: str, argtypes: tuple, restype=ctypes.c_int) -> Callable[..., int] | None:
    """A C library function through ctypes, or None where there is none (looked up once)."""
    libc = _libc()
    function = getattr(libc, name, None) if libc is not None else None
    if function is None:
        return None
    function.argtypes = argtypes
    function.restype = restype
    return function


def return_freed_heap() -> None:
    """Hand freed heap pages back to the OS (glibc's ``malloc_trim``; a no-op elsewhere)."""
    trim = libc_function("malloc_trim", (ctypes.c_size_t,))
    if trim is not None:
        trim(0)


def equal_bytes(x: np.ndarray, y: np.ndarray) -> bool:
    """Two contiguous uint8 arrays hold the same bytes.

    ``memcmp`` compares mapped pages at memory speed, with no temporary array (np.array_equal makes one).
    """
    if x.size != y.size:
        return False
    memcmp = libc_function("memcmp", (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t))
    if memcmp is not None:
        return x.size == 0 or memcmp(x.ctypes.data, y.ctypes.data, x.size) == 0
    return np.array_equal(x, y)


# --- reading what a writer is still appending to -------------------------------------------------


def _nonblocking(path, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)


def open_polled(path: Path, buffering: int = -1) -> IO[bytes]:
    """Open a file another process may still be writing, for reading (a seam: tests deny it here).

    O_NONBLOCK: opening a FIFO named like a log file must not hang the poll.
    """
    return open(path, "rb", buffering=buffering, opener=_nonblocking)


def read_into(handle, view: memoryview) -> int:
    """readinto until ``view`` is full or the file ends (one read() returns at most ~2 GiB); a seam."""
    n = 0
    while n < len(view):
        got = handle.readinto(view[n:])
        if not got:
            break
        n += got
    return n


_ZERO_SCAN = 16 << 20  # bytes looked at per step when skipping a run of zeros


def next_nonzero(fd: int, start: int, size: int) -> int | None:
    """Offset of the first non-zero byte in [start, size), or None; holes of a sparse file cost nothing."""
    pos = start
    while pos < size:
        try:
            pos = os.lseek(fd, pos, os.SEEK_DATA)  # skips a hole (all zeros) without reading it
        except OSError as err:
            if err.errno == errno.ENXIO:
                return None  # only a hole until the end
        if pos >= size:
            return None
        chunk = np.frombuffer(os.pread(fd, min(_ZERO_SCAN, size - pos), pos), np.uint8)
        if not chunk.size:
            return None
        nonzero = chunk != 0
        if nonzero.any():
            return pos + int(nonzero.argmax())
        pos += chunk.size
    return None


def hole_at(fd: int, pos: int, size: int) -> int:
    """Where the next hole of a sparse file starts at or after ``pos`` (``size`` when none, or unknown)."""
    try:
        return min(os.lseek(fd, pos, os.SEEK_HOLE), size)
    except OSError:
        return size


def data_segments(fd: int, size: int) -> list[tuple[int, int]]:
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


class ShortRead(Exception):
    """The file ended before the bytes asked for (it shrank since it was measured)."""


def pread_into(fd: int, buffer: bytearray, length: int, offset: int) -> memoryview:
    """Exactly ``length`` bytes at ``offset`` into ``buffer``; ShortRead when the file ends first."""
    view = memoryview(buffer)[:length]
    got = 0
    while got < length:
        n = os.preadv(fd, [view[got:]], offset + got)
        if n == 0:
            raise ShortRead
        got += n
    return view


@contextmanager
def opened(path: Path) -> Iterator[int]:
    """A read-only descriptor, closed on exit."""
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def mapped(fd: int, offset: int, length: int) -> Iterator[np.ndarray]:
    """Bytes ``offset..offset+length`` of a file as a read-only uint8 array over a fresh memory map.

    The map is closed on exit, which drops the pages it touched from the process's memory (they
    stay in the page cache): the caller must keep no view of the array beyond the ``with``.
    """
    if length == 0:
        yield np.empty(0, dtype=np.uint8)
        return
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    region = mmap.mmap(fd, offset + length - start, access=mmap.ACCESS_READ, offset=start)
    try:
        yield np.frombuffer(region, dtype=np.uint8, count=length, offset=offset - start)
    finally:
        region.close()


def read_ahead(path: Path) -> None:
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


def read_sequentially(fd: int) -> None:
    """Tell the kernel a file is read once, front to back (larger read-ahead; a hint)."""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except (OSError, AttributeError):
        pass


# --- writing, durably ------------------------------------------------------------------------------


def write_at(fd: int, data, offset: int) -> None:
    """Every byte of ``data`` at ``offset``; a seam.

    With ``copy_range`` the only two places the remap's output bytes go to disk (tests inject faults in both).
    """
    view = memoryview(data).cast("B")
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


class NoInKernelCopy(Exception):
    """copy_file_range is unavailable here; the caller streams the bytes through memory instead."""


def copy_range(source_fd: int, target_fd: int, source_offset: int, target_offset: int, length: int) -> None:
    """Copy bytes file to file inside the kernel (``copy_file_range``: no trip through user memory,
    what ``cp`` does); raises ``NoInKernelCopy`` where the filesystem pair cannot. A seam."""
    if not hasattr(os, "copy_file_range"):  # Linux only
        raise NoInKernelCopy
    while length:
        try:
            copied = os.copy_file_range(source_fd, target_fd, length, source_offset, target_offset)
        except OSError as err:
            if err.errno in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
                raise NoInKernelCopy from err
            raise
        if copied == 0:
            raise NoInKernelCopy
        source_offset += copied
        target_offset += copied
        length -= copied


def write_small(path: Path, data: bytes) -> None:
    """A new file (never an existing one) holding ``data``, fsynced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_at(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (a rename is durable once its directory is)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem of ``directory``; a seam."""
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize


_SYNC_FILE_RANGE_WRITE = 2


class Writeback(threading.Thread):
    """Lets the disk start on bytes just written, so the final fsync has little left to wait for.

    Without this the kernel holds a GB-sized write in the page cache until the fsync (dirty
    pages below the background threshold are not written for ~30 s), and the disk idles while
    the output is verified. Linux's ``sync_file_range`` blocks while the device's queue is full,
    so it is called from this thread and the writing goes on. A hint only: failures are ignored,
    the fsync is what counts. ``finish`` before the file is closed.
    """

    def __init__(self, fd: int) -> None:
        super().__init__(name="triage-writeback", daemon=True)
        self.fd = fd
        self.ranges: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
        self.sync_file_range = (
            libc_function("sync_file_range", (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint))
            if sys.platform.startswith("linux")
            else None
        )
        if self.sync_file_range is not None:
            self.start()

    def add(self, offset: int, length: int) -> None:
        if self.is_alive():
            self.ranges.put((offset, length))

    def run(self) -> None:
        sync_file_range = self.sync_file_range
        if sync_file_range is None:  # never started without it (__init__)
            return
        while (written := self.ranges.get()) is not None:
            sync_file_range(self.fd, *written, _SYNC_FILE_RANGE_WRITE)

    def finish(self) -> None:
        if self.is_alive():
            self.ranges.put(None)
            self.join()
