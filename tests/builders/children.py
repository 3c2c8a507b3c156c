"""Trainer-like child processes for the run-state tests: real writers, really alive, stopped or dead.

Each child is a Python process of its own, started here and always ended by the test that started
it (``ended``): a SummaryWriter writing in a loop, a process holding a console log open, one that
crashes with a traceback. A test waits on what it needs (points in the event file, the kernel
reporting a SIGSTOP), never on an amount of time.

``finished`` runs a builder in a child that has exited when it returns: the runs the builders
write are finished runs, as a trainer's are once it ended. Written by the test's own process, an
event file's name would name a process that is alive (torch's writer puts its pid there), and a
`triage scan` run beside it, or another xdist worker reading a shared fixture, would rightly take
the test for a live writer of the run.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from builders.waiting import out_of_patience

REPO = Path(__file__).resolve().parents[2]

# torch's SummaryWriter (tensorboard's EventFileWriter, no TensorFlow) writing train/ploss_0 as a
# trainer does: a point, a flush, the next step. ``host`` renames this node for the writer (the
# file name then says another host wrote it); the pace is the child's own, the test never waits on it.
SUMMARY_WRITER_LOOP = """
import socket, sys, time
if len(sys.argv) > 2:
    socket.gethostname = lambda: sys.argv[2]
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter(log_dir=sys.argv[1], flush_secs=1)
step = 0
while True:
    writer.add_scalar("train/ploss_0", 10.0 - step * 0.01, global_step=step)
    writer.flush()
    step += 1
    time.sleep(0.02)
"""

# Waits for its stdin to close (the test's signal to go), doing nothing else.
IDLE = "import sys; sys.stdin.read()"


def start(code: str, *args: str, cwd: Path | None = None, stdout=None, stderr=None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=stdout if stdout is not None else subprocess.DEVNULL,
        stderr=stderr if stderr is not None else subprocess.DEVNULL,
        env=env,
    )


@contextmanager
def ended(child: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """The child, killed (continued first if stopped) and reaped when the block ends."""
    try:
        yield child
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGCONT)
            child.kill()
        child.wait()
        if child.stdin is not None:
            child.stdin.close()


def wait_until(predicate: Callable[[], object], what: str, seconds: float = 60.0) -> None:
    """Return once ``predicate()`` holds (checked every few ms); fail after ``seconds`` (scaled by the load)."""
    started = time.monotonic()
    while not predicate():
        if out_of_patience(started, seconds):
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def process_state(pid: int) -> str | None:
    """The state letter /proc/PID/stat shows (T: stopped), None once the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()[0]


# A fork server, started once per test process with torch's writer imported in it: each `finished`
# call forks a child of it (a process of one thread: safe to fork) in tens of milliseconds instead
# of a fresh interpreter's two seconds of importing torch. The builders themselves are imported in
# the child by name (the server's preload cannot see tests/ on the path; the child is given it).
_SERVER = multiprocessing.get_context("forkserver")
_SERVER.set_forkserver_preload(["torch.utils.tensorboard"])

T = TypeVar("T")


def _call(connection, function: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    try:
        result = (True, function(*args, **kwargs))
    except BaseException as err:  # noqa: BLE001 - handed to the parent, raised there
        result = (False, err)
    connection.send(result)
    connection.close()


def finished(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)`` in a child process, which has exited (and been reaped) when
    this returns its result or raises its exception. ``function`` is a module-level function of
    builders (the child imports it by name); its arguments and result are pickled."""
    receive, send = _SERVER.Pipe(duplex=False)
    child = _SERVER.Process(target=_call, args=(send, function, args, kwargs))
    child.start()
    send.close()
    try:
        ok, result = receive.recv()
    except EOFError:
        ok, result = False, AssertionError(f"the builder's child died before answering: {function.__name__}")
    child.join()
    receive.close()
    if not ok:
        raise result
    return result
