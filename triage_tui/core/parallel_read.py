"""Reading many runs' event files on two cores: helper processes read runs while this one reads others, or none.

The reader is numpy-vectorised but drives numpy from Python between its loops, so a second
thread gains little under the GIL; a second process does. A sweep's first load (100 runs x
100k points: ~5 s on one core) is where it pays; a watch's later polls read a few appended
bytes and stay in-process.

A helper is a fork of this process while it has one thread (``scan``; the TUI before it imports
Textual), which has numpy and the reader imported already, or else a fresh interpreter (``python -m
triage_tui.core.parallel_read``, ~0.26 s of CPU to start): the TUI polls from a worker thread, and
forking a threaded process can deadlock the child. It
gets a run's ``RunEvents`` before anything is read (its file list), polls it, and sends it back
whole (series, file offsets, learned templates), so the next poll in this process only reads what
was appended since. ``scan`` reads runs from the front of the list while one helper takes them
from the back. The TUI leaves every run to one helper per core (up to four): parsing in its own process would
hold the GIL its UI thread needs, and its worker thread has each run's flags to compute as runs
come back. If a helper cannot start or dies, this process reads whatever it had not returned, so
the result is the same either way.

The TUI starts its helpers before it imports Textual (``start_helpers_early``): forks, ready at once
and waiting on their pipes, or where a fork is not to be had, fresh interpreters that start up while
Textual is imported. The first ``read_runs`` adopts them.

Messages on a helper's stdin/stdout: a pickle (protocol 5) whose arrays travel out of band,
as ``u64 pickle length | u64 buffer count | u64 length of each buffer | pickle | buffers``,
little-endian; ours (``(index, RunEvents)``) in, ``(index, RunEvents)`` or ``(index, None)`` (it
failed on that run) out. Both ends are this module's code, so the pickles are trusted.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

import numpy as np

from triage_tui.core import fileio
from triage_tui.core.events.reader import RunEvents
from triage_tui.core.processes import can_fork as _can_fork  # names tests replace
from triage_tui.core.processes import cores as _cores
from triage_tui.core.runs.names import is_event_file_name

__all__ = ["read_runs", "start_helpers_early", "worth_a_helper"]

# Below this much unread data the helper's start-up (an interpreter and numpy: ~0.3 s) costs
# more than the second core saves.
MIN_PARALLEL_BYTES = 48 << 20
_IN_FLIGHT = 2  # runs handed to each helper ahead, so it never waits for this process
# here=False: at most this many helpers. This process still takes in every run and computes its
# flags on one thread (~1.8 CPU-s for 100 runs x 100k points, against ~5.4 s of parsing in the
# helpers): past ~3 helpers it is the slowest part, and each helper is an interpreter's memory.
_MAX_HELPERS = 4


def worth_a_helper(runs: Sequence[RunEvents], min_bytes: int = MIN_PARALLEL_BYTES) -> bool:
    """Whether reading `runs` on two cores is worth starting a helper process."""
    if len(runs) < 2 or _cores() < 2:
        return False
    return sum(r.unread_bytes() for r in runs) >= min_bytes


def read_runs(
    runs: list[RunEvents],
    on_read: Callable[[int, RunEvents], object],
    helper_command: Sequence[str] | None = None,
    *,
    here: bool = True,
) -> None:
    """Poll every run of `runs` once, on two cores; `on_read(i, events)` as each is done.

    ``here=True`` (``scan``: this process has nothing else to do): this process reads from the
    front of the list, one helper from the back. ``here=False`` (the TUI): one helper per core (at
    most _MAX_HELPERS) reads every run and this process only takes them in, so its other threads
    (the UI's) never share the GIL with parsing; it reads a run itself only when every helper is gone.

    `events` is `runs[i]` itself, or a helper's copy of it after its poll: the caller keeps the
    object it is given. Called from one thread; `on_read` runs on it.
    """
    answers: queue.Queue = queue.Queue()
    wanted = 1 if here else min(_cores(), _MAX_HELPERS)
    procs = _EARLY.claim(wanted) if helper_command is None else []
    # Every helper before any drain thread: while this process has one thread, they are forks.
    procs += [proc for proc in (_start_process(helper_command) for _ in range(wanted - len(procs))) if proc]
    helpers = [_Helper(proc, answers) for proc in procs]
    front, back = 0, len(runs)  # this process reads [front, ...), the helpers (..., back)
    sent: dict[int, _Helper] = {}  # run index -> the helper reading it

    def read_here(index: int) -> None:
        runs[index].poll()
        on_read(index, runs[index])

    try:
        while front < back or sent:
            live = [helper for helper in helpers if not helper.dead]
            for helper in live:
                while front < back and sum(h is helper for h in sent.values()) < _IN_FLIGHT:
                    back -= 1
                    if not helper.send(back, runs[back]):
                        back += 1
                        break
                    sent[back] = helper
            for index in sorted(i for i, helper in sent.items() if helper.dead):
                del sent[index]  # its helper is gone: what it had not returned is read here
                read_here(index)
            if not any(not helper.dead for helper in helpers):
                while front < back:
                    read_here(front)
                    front += 1
                continue
            if here and front >= back:
                queued = [i for i, helper in sent.items() if sum(h is helper for h in sent.values()) > 1]
                if queued:
                    # Nothing left here but runs still queued behind another for a helper: take back
                    # the last one sent (it has not started on it), so a helper slow to start costs
                    # no more than reading alone. Its answer for that run, if one comes, is dropped.
                    index = min(queued)
                    del sent[index]
                    read_here(index)
                    continue
            for helper, answered, events in _answers(answers, block=not (here and front < back)):
                if answered is None:  # that helper's stdout closed: it exited or died
                    helper.dead = True
                elif sent.get(answered) is helper:
                    del sent[answered]
                    if events is None:  # it failed on that run: read it here
                        read_here(answered)
                    else:
                        on_read(answered, events)
            if here and front < back:
                read_here(front)
                front += 1
    finally:
        for helper in helpers:
            helper.close()


def _answers(answers: queue.Queue, block: bool) -> list[tuple[_Helper, int | None, RunEvents | None]]:
    """What the helpers sent: waits for the first when `block`, then takes what is there."""
    out = []
    try:
        out.append(answers.get(block=block))
        while True:
            out.append(answers.get_nowait())
    except queue.Empty:
        pass
    return out


class _Helper:
    """A helper process and the thread that drains its answers into the shared queue (so it never
    blocks on a full pipe): ``(helper, index, events)``, then ``(helper, None, None)`` once it is gone."""

    def __init__(self, proc: subprocess.Popen | _Forked, answers: queue.Queue) -> None:
        self.proc = proc
        _widen(proc.stdout)
        self.answers = answers
        self.dead = False
        self._drain = threading.Thread(target=self._read_answers, name="triage-read-helper", daemon=True)
        self._drain.start()

    def send(self, index: int, events: RunEvents) -> bool:
        try:
            _write_message(self.proc.stdin, (index, events))
            return True
        except (OSError, ValueError):
            self.dead = True
            return False

    def _read_answers(self) -> None:
        try:
            while True:
                item = _read_message(self.proc.stdout)
                if item is None:
                    break
                index, events = item
                self.answers.put((self, index, events))
        except (OSError, EOFError, ValueError, pickle.UnpicklingError):
            pass  # a torn or unreadable answer: the helper is as good as dead
        self.answers.put((self, None, None))

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:  # always a pipe (started with stdin=PIPE); Popen types it optional
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._drain.join(timeout=5)


# glibc's malloc in a helper: big blocks from the heap, kept when freed. Its default gives each
# block over ~32 MiB (and, after a trim, any) fresh pages from the kernel, so every run read
# faulted its buffers in anew: ~4 000 page faults a 100k-point run, a sixth of the helper's CPU.
# A helper lives for one load; its memory goes back when it exits. (mmap threshold, trim
# threshold, top pad): set by GLIBC_TUNABLES in a fresh interpreter, by mallopt in a fork, where
# the threshold's most is 32 MiB.
_HELPER_MALLOC = (1 << 30, 1 << 30, 64 << 20)
_FORKED_MMAP_THRESHOLD = 32 << 20


# A run comes back as a ~2.4 MB pickle (100k points). Through a pipe of 64 KiB, the thread that
# reads it needs the GIL once a 64 KiB piece, and while the UI thread holds it (the TUI starting up)
# the helper waits on a full pipe: a 100-run sweep's helpers sat half idle for ~0.5 s. 1 MiB is
# the most an unprivileged process may ask (/proc/sys/fs/pipe-max-size).
_PIPE_BYTES = 1 << 20


def _widen(stream) -> None:
    try:
        fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    except (OSError, AttributeError, ValueError):  # not Linux, or over the limit: the default size
        pass


def _start_process(command: Sequence[str] | None = None) -> subprocess.Popen | _Forked | None:
    """A helper process: a fork while this process has one thread (and no other command is
    asked for), else a fresh interpreter; None if neither starts."""
    if command is None and _can_fork():
        return _fork()
    return _spawn(command)


class _Forked:
    """A helper forked from this process, with the part of Popen's interface helpers use."""

    def __init__(self, pid: int, stdin, stdout) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"helper {self.pid}", timeout or 0.0)
            time.sleep(0.005)
        return self.returncode or 0

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


_forked: list[_Forked] = []  # this process's ends of every forked helper's pipes, closed in the next fork


def _fork() -> _Forked | None:
    to_child, from_child = os.pipe(), os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (*to_child, *from_child):
            os.close(fd)
        return None
    if pid == 0:
        mine = (to_child[0], from_child[1])
        others = [f.fileno() for helper in _forked for f in (helper.stdin, helper.stdout) if not f.closed]
        _serve_forked(*mine, [fd for fd in (to_child[1], from_child[0], *others) if fd not in mine])
    os.close(to_child[0])
    os.close(from_child[1])
    helper = _Forked(pid, open(to_child[1], "wb"), open(from_child[0], "rb"))  # noqa: SIM115 - the helper holds them
    _forked[:] = [h for h in _forked if h.poll() is None] + [helper]
    return helper


def _serve_forked(stdin_fd: int, stdout_fd: int, close: list[int]) -> NoReturn:
    """A forked helper: off the terminal (its Ctrl-C, its screen), serve until stdin closes, exit."""
    code = 1
    try:
        os.setsid()
        for fd in close:
            os.close(fd)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        fileio.keep_freed_heap(_FORKED_MMAP_THRESHOLD, *_HELPER_MALLOC[1:])
        with open(stdin_fd, "rb") as stdin, open(stdout_fd, "wb") as stdout:
            _serve(stdin, stdout)
        code = 0
    except BaseException:  # noqa: BLE001 - whatever it was, the parent reads what this one did not return
        pass
    finally:
        os._exit(code)


def _spawn(command: Sequence[str] | None = None) -> subprocess.Popen | None:
    root = str(Path(__file__).resolve().parents[2])  # the directory holding triage_tui
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
        "GLIBC_TUNABLES": ":".join(
            filter(
                None,
                [
                    os.environ.get("GLIBC_TUNABLES"),
                    "glibc.malloc.mmap_threshold={}:glibc.malloc.trim_threshold={}:glibc.malloc.top_pad={}".format(
                        *_HELPER_MALLOC
                    ),
                ],
            )
        ),
    }
    try:
        return subprocess.Popen(
            list(command or [sys.executable, "-m", "triage_tui.core.parallel_read"]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C in the terminal is this process's to handle
        )
    except OSError:
        return None


class _EarlyHelpers:
    """Helpers started before anything asked for them, until the first ``read_runs`` claims them.

    A helper waits on its stdin and exits when it closes: one never claimed ends with this process
    at the latest, or when ``release`` (the watcher's first poll is over) closes it. Forks are
    made at once, without looking at the tree (a fork costs ~1 ms and nothing while it waits);
    fresh interpreters (~0.26 s of CPU each) only once a walk finds ``min_bytes`` of event files.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen | _Forked] = []
        self._done = True  # claimed or released (or never asked for): no more are started

    def start(self, paths: Sequence[str | Path], min_bytes: int) -> None:
        with self._lock:
            self._done = False
        if _can_fork():
            for _ in range(min(_cores(), _MAX_HELPERS)):
                proc = _fork()
                if proc is None:
                    break
                self._procs.append(proc)
            return
        threading.Thread(
            target=self._start, args=(list(paths), min_bytes), name="triage-early-helpers", daemon=True
        ).start()

    def _start(self, paths: list[str | Path], min_bytes: int) -> None:
        if not _holds_at_least(paths, min_bytes):
            return
        for _ in range(min(_cores(), _MAX_HELPERS)):
            with self._lock:
                if self._done:
                    return
                proc = _spawn()
                if proc is None:
                    return
                self._procs.append(proc)

    def claim(self, count: int) -> list[subprocess.Popen | _Forked]:
        with self._lock:
            self._done = True
            claimed, rest = self._procs[:count], self._procs[count:]
            self._procs = []
        _close_unclaimed(rest)
        return claimed

    def release(self) -> None:
        _close_unclaimed(self.claim(0))


def _close_unclaimed(procs: list[subprocess.Popen | _Forked]) -> None:
    for proc in procs:
        if proc.stdin is not None:  # always a pipe; Popen types it optional
            proc.stdin.close()  # it exits at the end of its input
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_EARLY = _EarlyHelpers()


def start_helpers_early(paths: Sequence[str | Path], min_bytes: int = MIN_PARALLEL_BYTES) -> None:
    """Start the helpers of a sweep's first load now, in the background, if `paths` hold at least
    `min_bytes` of event files (what ``worth_a_helper`` will find): they start up while the caller
    does (the TUI imports Textual) and ``read_runs`` adopts them. ``release_early_helpers`` ends
    the ones it did not need."""
    if _cores() >= 2:
        _EARLY.start(paths, min_bytes)


def release_early_helpers() -> None:
    """Close the early helpers no ``read_runs`` claimed (after the watcher's first poll); no more start."""
    _EARLY.release()


def _holds_at_least(paths: Sequence[str | Path], min_bytes: int) -> bool:
    """Whether the event files below `paths` (hidden directories and links skipped, as discovery
    does) hold at least `min_bytes`; stops walking as soon as they do."""
    total = 0
    for path in paths:
        for root, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in files:
                if is_event_file_name(name):
                    try:
                        total += os.lstat(os.path.join(root, name)).st_size
                    except OSError:
                        continue
                    if total >= min_bytes:
                        return True
    return False


def _write_message(stream, obj) -> None:
    # A run's series arrays (~2.4 MB for 100k points) are written from where they lie, and read
    # below straight into arrays of their own: pickling them in band copied each twice more
    # (into the pickle, out of it): pickle.dumps 2.2 ms and loads 1.9 ms a 100k-point run.
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [buffer.raw() for buffer in buffers]
    stream.write(struct.pack(f"<QQ{len(raws)}Q", len(data), len(raws), *(raw.nbytes for raw in raws)))
    stream.write(data)
    for raw in raws:
        stream.write(raw)
    stream.flush()


def _read_message(stream):
    header = stream.read(16)
    if len(header) < 16:
        return None
    size, count = struct.unpack("<QQ", header)
    sizes_bytes = stream.read(8 * count)
    data = stream.read(size)
    if len(sizes_bytes) < 8 * count or len(data) < size:
        return None
    buffers = []
    for length in struct.unpack(f"<{count}Q", sizes_bytes):
        # One array per buffer, not one block for them all: an array the series outgrows is freed
        # alone. np.empty, unlike bytearray, does not write the pages before the pipe fills them.
        buffer = np.empty(length, np.uint8)
        if stream.readinto(buffer) != length:
            return None
        buffers.append(buffer)
    return pickle.loads(data, buffers=buffers)


def _serve(stdin, stdout) -> None:
    """The helper: poll each RunEvents it is sent and send it back, until stdin closes."""
    while True:
        message = _read_message(stdin)
        if message is None:
            return
        index, events = message
        try:
            events.poll(return_memory=False)
        except Exception:  # noqa: BLE001 - whatever it was, the parent reads that run itself
            events = None
        _write_message(stdout, (index, events))


if __name__ == "__main__":
    _serve(sys.stdin.buffer, sys.stdout.buffer)
