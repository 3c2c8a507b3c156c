"""The one temporary directory of this process for what is fetched from buckets, removed however
the process ends.

Mirrored run trees (``runs/remote.py``) and sparse files of remote checkpoints (``sparse``) live
below it. It is removed three ways, so that nothing survives any command: ``remove()`` (called
by ``cli`` before a command's fast exit, which skips ``atexit``), ``atexit`` (a normal exit, an
exception, Ctrl-C's KeyboardInterrupt) and a guard process started with the directory, which
waits for this process's end on a pipe and removes the directory then: a SIGTERM, a SIGKILL or
``os._exit`` runs no Python code here, but the kernel closes the pipe whatever ends the process.
The guard is in a session of its own (Ctrl-C in the terminal, sent to the foreground process
group, does not end it first) and holds none of our output streams (a ``| head`` sees EOF when
we exit, not when it does).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

PREFIX = "triage-scratch-"

# -I -S: no site, no environment, no user packages: the guard starts in ~10 ms and imports shutil only.
_GUARD = """
import shutil, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
sys.stdin.buffer.read()
shutil.rmtree(sys.argv[1], ignore_errors=True)
"""

_DIR: Path | None = None
_GUARD_PROCESS: subprocess.Popen | None = None
_LOCK = threading.Lock()
_NAMED: set[str] = set()  # local roots of the URLs the user named (mark_named)


def scratch_dir() -> Path:
    """This process's scratch directory (in the temp dir, created on first use, guarded)."""
    global _DIR, _GUARD_PROCESS
    with _LOCK:
        if _DIR is None or not _DIR.is_dir():
            made = Path(os.path.abspath(tempfile.mkdtemp(prefix=PREFIX)))
            try:
                _GUARD_PROCESS = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _GUARD, str(made)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError:
                _GUARD_PROCESS = None  # no process to spare: atexit and remove() still run
            if _DIR is None:
                atexit.register(remove)
            _DIR = made
        return _DIR


def holds(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` lies in the scratch directory: a file fetched from a bucket, nobody's own."""
    if _DIR is None:
        return False
    text = os.path.abspath(path)
    base = str(_DIR)
    return text == base or text.startswith(base + os.sep)


def mark_named(path: str | os.PathLike[str]) -> None:
    """Record ``path`` (in the scratch directory) as where a URL the user named is mirrored: the
    bound of what a file fetched below it may name (``named_root``)."""
    with _LOCK:
        _NAMED.add(os.path.abspath(path))


def named_root(path: str | os.PathLike[str]) -> str | None:
    """The innermost mirror of a URL the user named that holds ``path``; None when none does."""
    text = os.path.abspath(path)
    with _LOCK:
        found = [root for root in _NAMED if text == root or text.startswith(root + os.sep)]
    return max(found, key=len) if found else None


def remove() -> None:
    """Remove the scratch directory now and let its guard go (a later ``scratch_dir`` makes another)."""
    global _DIR, _GUARD_PROCESS
    with _LOCK:
        if _DIR is not None:
            shutil.rmtree(_DIR, ignore_errors=True)
        guard, _GUARD_PROCESS = _GUARD_PROCESS, None
    if guard is not None:
        try:
            if guard.stdin is not None:
                guard.stdin.close()
            guard.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass  # it removes a directory already gone and ends by itself
