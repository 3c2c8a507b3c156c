"""``triage`` run in a child process of its own, with the peak resident memory it reached.

The peak is the kernel's VmHWM of the child's own address space, read by the child as it ends:
``ru_maxrss`` of RUSAGE_CHILDREN would be the largest of every child this test process ever
waited for (pytest's workers fork, and a forked child starts at its parent's size).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = """\
import contextlib, io, re, sys
from triage_tui import cli
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        code = cli.main(sys.argv[1:])
    except SystemExit as exit_:
        code = exit_.code
peak = re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read())
sys.__stdout__.write(f"{int(peak.group(1)) * 1024}\\n{code}\\n{len(out.getvalue())}\\n{out.getvalue()}{err.getvalue()}")
"""


@dataclass(frozen=True)
class PeakRun:
    """What one command printed, its exit status and its peak resident memory in bytes."""

    returncode: int
    stdout: str
    stderr: str
    peak: int


def triage_peak(*args: str | Path, timeout: float = 600) -> PeakRun:
    """``triage ARGS`` in a fresh interpreter: what it printed, its exit status, its peak RSS."""
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    peak, code, length, rest = done.stdout.split("\n", 3)
    return PeakRun(int(code), rest[: int(length)], rest[int(length) :], int(peak))
