"""What every step of a remap shares: cancellation, progress by phase, threads whose errors come back."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

Progress = Callable[[float, str], None]


class Cancelled(Exception):
    """The caller's cancel event was set; the temporary output has been removed."""


def check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("remap cancelled")


def count(n: int) -> str:
    """25750 -> '25 750' (the story's way of writing counts)."""
    return f"{n:,}".replace(",", " ")


class PhaseProgress:
    """Bytes done in a phase, reported as a fraction of that phase's span of [0, 1]."""

    def __init__(self, callback: Progress | None, total_bytes: int) -> None:
        self.callback = callback
        self.total = max(1, total_bytes)
        self.done = 0

    def advance(self, nbytes: int, phase: str, span: tuple[float, float]) -> None:
        self.done += nbytes
        if self.callback is not None:
            lo, hi = span
            self.callback(lo + (hi - lo) * min(1.0, self.done / self.total), phase)

    def reset(self) -> None:
        self.done = 0


WRITE_SPAN = (0.0, 0.55)
VERIFY_SPAN = (0.55, 0.85)


class Background(threading.Thread):
    """A function run in a thread whose exception is re-raised by ``result()``."""

    def __init__(self, name: str, function: Callable[[], Any]) -> None:
        super().__init__(name=name, daemon=True)
        self.function = function
        self.value: Any = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.value = self.function()
        except BaseException as err:  # noqa: BLE001 - handed to the caller by result()
            self.error = err

    def result(self) -> Any:
        self.join()
        if self.error is not None:
            raise self.error
        return self.value
