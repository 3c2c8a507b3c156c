"""Whether this process may fork now, and on how many cores it may run: the one answer for every
piece that forks (the read helpers of core/parallel_read.py)."""

from __future__ import annotations

import os
import sys
import threading


def cores() -> int:
    """The cores this process may run on (its affinity mask), not the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def can_fork() -> bool:
    """A fork is safe now: this process has one thread (a fork of a threaded one can deadlock in
    the child on a lock another thread held), on Linux (elsewhere a fork of a process with numpy's
    BLAS loaded is not known to be safe)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1
