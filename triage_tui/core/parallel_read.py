"""Reading many runs' event files on two cores: a helper process reads some runs while this one reads others.

The reader is numpy-vectorised but drives numpy from Python between its loops, so a second
thread gains little under the GIL; a second process does. A sweep's first load (100 runs x
100k points: ~5 s on one core) is where it pays; a watch's later polls read a few appended
bytes and stay in-process.

The helper is a fresh interpreter (``python -m triage_tui.core.parallel_read``), never a fork:
the TUI polls from a worker thread, and forking a threaded process can deadlock the child. It
gets a run's ``RunEvents`` before anything is read (its file list), polls it, and sends it back
whole (series, file offsets, learned templates), so the next poll in this process only reads what
was appended since. This process reads runs from the front of the list while the helper takes
them from the back; if the helper cannot start or dies, this process reads whatever it had not
returned, so the result is the same either way.

Messages on the helper's stdin/stdout: an 8-byte little-endian length, then a pickle; ours
(``(index, RunEvents)``) in, ``(index, RunEvents)`` or ``(index, None)`` (it failed on that run)
out. Both ends are this module's code, so the pickles are trusted.
"""

from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from triage_tui.core.events.reader import RunEvents

__all__ = ["read_runs", "worth_a_helper"]

# Below this much unread data the helper's start-up (an interpreter and numpy: ~0.3 s) costs
# more than the second core saves.
MIN_PARALLEL_BYTES = 48 << 20
_IN_FLIGHT = 2  # runs handed to the helper ahead, so it never waits for this process


def worth_a_helper(runs: Sequence[RunEvents], min_bytes: int = MIN_PARALLEL_BYTES) -> bool:
    """Whether reading `runs` on two cores is worth starting a helper process."""
    if len(runs) < 2 or _cores() < 2:
        return False
    return sum(r.unread_bytes() for r in runs) >= min_bytes


def read_runs(
    runs: list[RunEvents], on_read: Callable[[int, RunEvents], None], helper_command: Sequence[str] | None = None
) -> None:
    """Poll every run of `runs` once, on two cores; `on_read(i, events)` as each is done.

    `events` is `runs[i]` itself, or the helper's copy of it after its poll: the caller keeps
    the object it is given. Called from one thread; `on_read` runs on it.
    """
    helper = _Helper.start(helper_command)
    front, back = 0, len(runs)  # this process reads [front, ...), the helper (..., back)
    sent: dict[int, RunEvents] = {}
    try:
        while front < back or sent:
            while helper is not None and len(sent) < _IN_FLIGHT and front < back:
                back -= 1
                if not helper.send(back, runs[back]):
                    back += 1
                    helper = None
                    break
                sent[back] = runs[back]
            if helper is not None and front >= back and len(sent) > 1:
                # Nothing left here but runs still queued for the helper: take back the last one
                # sent (it has not started on it), so a helper slow to start costs no more than
                # reading alone. Its answer for that run, if one comes, is dropped.
                index = min(sent)
                del sent[index]
                runs[index].poll()
                on_read(index, runs[index])
                continue
            if helper is not None:
                for index, events in helper.results(block=front >= back):
                    if index not in sent:
                        continue
                    del sent[index]
                    if events is None:  # it failed on that run: read it here
                        runs[index].poll()
                        events = runs[index]
                    on_read(index, events)
                if helper.dead:
                    helper = None
            if helper is None and sent:
                # The helper is gone: what it had not returned is read here.
                for index in sorted(sent):
                    runs[index].poll()
                    on_read(index, runs[index])
                sent.clear()
                continue
            if front < back:
                runs[front].poll()
                on_read(front, runs[front])
                front += 1
    finally:
        if helper is not None:
            helper.close()


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class _Helper:
    """The helper process and the thread that drains its answers (so it never blocks on a full pipe)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.answers: queue.Queue = queue.Queue()
        self.dead = False
        self._drain = threading.Thread(target=self._read_answers, name="triage-read-helper", daemon=True)
        self._drain.start()

    @classmethod
    def start(cls, command: Sequence[str] | None = None) -> _Helper | None:
        root = str(Path(__file__).resolve().parents[2])  # the directory holding triage_tui
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        try:
            proc = subprocess.Popen(
                list(command or [sys.executable, "-m", "triage_tui.core.parallel_read"]),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # Ctrl-C in the terminal is this process's to handle
            )
        except OSError:
            return None
        return cls(proc)

    def send(self, index: int, events: RunEvents) -> bool:
        try:
            _write_message(self.proc.stdin, (index, events))
            return True
        except (OSError, ValueError):
            self.dead = True
            return False

    def results(self, block: bool) -> list[tuple[int, RunEvents | None]]:
        out = []
        try:
            item = self.answers.get(block=block)
            while True:
                if item is None:  # the helper's stdout closed: it exited or died
                    self.dead = True
                    break
                out.append(item)
                item = self.answers.get_nowait()
        except queue.Empty:
            pass
        return out

    def _read_answers(self) -> None:
        try:
            while True:
                item = _read_message(self.proc.stdout)
                if item is None:
                    break
                self.answers.put(item)
        except (OSError, EOFError, ValueError, pickle.UnpicklingError):
            pass  # a torn or unreadable answer: the helper is as good as dead
        self.answers.put(None)

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


def _write_message(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(data).to_bytes(8, "little"))
    stream.write(data)
    stream.flush()


def _read_message(stream):
    header = stream.read(8)
    if len(header) < 8:
        return None
    size = int.from_bytes(header, "little")
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


def _serve(stdin, stdout) -> None:
    """The helper: poll each RunEvents it is sent and send it back, until stdin closes."""
    while True:
        message = _read_message(stdin)
        if message is None:
            return
        index, events = message
        try:
            events.poll()
        except Exception:  # noqa: BLE001 - whatever it was, the parent reads that run itself
            events = None
        _write_message(stdout, (index, events))


if __name__ == "__main__":
    _serve(sys.stdin.buffer, sys.stdout.buffer)
