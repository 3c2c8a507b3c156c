"""Waiting on conditions, never on amounts of time, on a machine that may be very busy.

A test waits for what it needs (a poll taken in, a screen pushed, checks finished); the bound
only turns a hang into a failure. On a shared CI box at load 20 a thread gets a tenth of a
core, so the bound grows with the load measured while waiting: it is checked against
``seconds * load_factor()`` at every turn, not fixed when the wait starts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def load_factor() -> float:
    """How much slower than a quiet machine this one is now: runnable tasks per core, at least 1."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # not every platform has it
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


def out_of_patience(started: float, seconds: float) -> bool:
    """True once more than ``seconds`` (scaled by the load now) have passed since ``started`` (monotonic)."""
    return time.monotonic() - started > seconds * load_factor()


async def wait_for(pilot, predicate: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> float:
    """Pause the pilot until ``predicate()`` holds; returns the seconds it took.

    ``timeout`` is for a quiet machine and scales with the load (``load_factor``).
    """
    start = time.monotonic()
    while not predicate():
        if out_of_patience(start, timeout):
            raise AssertionError(
                f"timed out after {time.monotonic() - start:.0f}s (load factor {load_factor():.1f}) waiting for {what}"
            )
        await pilot.pause(0.05)
    return time.monotonic() - start
