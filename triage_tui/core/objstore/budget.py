"""What one pass over a bucket may spend, and the pool that sends every request under a cap.

A ``PassBudget`` is a pass's deadline, its byte budget and a stop signal (the TUI quitting). The
deadline is a silence's: each answer of the pass moves it on, up to the pass's bound, so that a pass
over a big prefix on a slow server ends when the server stops answering, not half-way through its
fetches (a 10 000-run bucket at ~180 GETs a second needs about two minutes of them). The
code that runs a pass says so with ``spending(budget)`` on each thread that works for it; every
store call made on that thread then ends by the pass's deadline and at once when it is stopped,
however the server behaves (``store.Store._call`` reads ``current()``). No function signature
between the mirror and the client carries it.

``RequestPool`` sends the requests: at most ``tuning.MAX_IN_FLIGHT`` at once in all, on daemon
threads. A caller waits for its request no longer than its deadline; a request abandoned so keeps
its thread until the client's own timeout ends it (``tuning.REQUEST_TIMEOUT_SECS``), and, being a
daemon, never holds the process's exit (``concurrent.futures``' pools are joined at exit: a
server that never answers would hold ``q`` for as long).
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from triage_tui.core.objstore import tuning

T = TypeVar("T")


@dataclass
class PassBudget:
    """One pass's limits: ``deadline`` (``time.monotonic()`` seconds), ``max_bytes`` of object
    bodies, ``stop`` (set: every call of the pass ends now). Shared by the pass's threads.
    ``answered()`` moves the deadline to ``quiet_secs`` after the answer, never past ``ends_by``."""

    deadline: float
    max_bytes: int
    stop: threading.Event | None = None
    spent_bytes: int = 0
    quiet_secs: float = 0.0  # 0: the deadline never moves
    ends_by: float = math.inf
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def starting_now(cls, stop: threading.Event | None = None) -> PassBudget:
        """A pass beginning now: it ends ``tuning.PASS_DEADLINE_SECS`` after its last answer (or its
        start), by ``tuning.PASS_MAX_SECS`` at the latest, and fetches ``tuning.PASS_MAX_BYTES``."""
        now = time.monotonic()
        return cls(
            now + tuning.PASS_DEADLINE_SECS,
            tuning.PASS_MAX_BYTES,
            stop,
            quiet_secs=tuning.PASS_DEADLINE_SECS,
            ends_by=now + tuning.PASS_MAX_SECS,
        )

    def answered(self) -> None:
        """A request of the pass was answered: the pass goes on at least ``quiet_secs`` from now."""
        if self.quiet_secs <= 0:
            return
        moved = min(self.ends_by, time.monotonic() + self.quiet_secs)
        with self._lock:
            self.deadline = max(self.deadline, moved)

    def cut_short(self) -> bool:
        """Whether the pass ran into its deadline, its byte budget or its stop."""
        return self.expired() or self.spent_bytes >= self.max_bytes or self.stopped()

    def stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def grant(self, wanted: int) -> int:
        """Up to ``wanted`` bytes taken from what the pass has left (0 when spent)."""
        with self._lock:
            granted = max(0, min(wanted, self.max_bytes - self.spent_bytes))
            self.spent_bytes += granted
            return granted

    def refund(self, unused: int) -> None:
        """Bytes granted but not received (the object was shorter, or the read failed)."""
        with self._lock:
            self.spent_bytes -= max(0, unused)


class KeySink:
    """The keys of one listing try as its pages arrive: it holds at most ``tuning.MAX_LISTED_KEYS``
    and asks the client to stop there, or as soon as the try is abandoned (its deadline passed)."""

    def __init__(self) -> None:
        self.found: list[Any] = []
        self.full = False
        self.abandoned = False

    def add(self, metas: list[Any]) -> bool:
        """Keep ``metas`` (as many as fit); whether the client should list on."""
        if self.abandoned:
            return False
        room = tuning.MAX_LISTED_KEYS - len(self.found)
        if len(metas) > room:
            self.found += metas[: max(0, room)]
            self.full = True
            return False
        self.found += metas
        return True


class ListingProgress:
    """What a listing still under way holds so far: the keys of its current try, in the order
    listed (a try after a failed one lists again from the start)."""

    def __init__(self) -> None:
        self.sink: KeySink | None = None

    def keys_so_far(self) -> list[Any]:
        sink = self.sink
        return list(sink.found) if sink is not None else []


_CURRENT = threading.local()


@contextmanager
def spending(budget: PassBudget | None) -> Iterator[None]:
    """The store calls made on this thread within the block are under ``budget``."""
    before = getattr(_CURRENT, "budget", None)
    _CURRENT.budget = budget
    try:
        yield
    finally:
        _CURRENT.budget = before


def current() -> PassBudget | None:
    """The budget of the pass this thread works for; None outside any pass (a check's reads)."""
    return getattr(_CURRENT, "budget", None)


def ends_at(limit: float, spending: PassBudget | None) -> float:
    """The earlier of a call's own ``limit`` and its pass's deadline as it stands now (it moves on
    with each answer of the pass)."""
    return limit if spending is None else min(limit, spending.deadline)


def answered_by(future: Future[Any], limit: float, spending: PassBudget | None) -> bool:
    """Whether ``future`` is done by ``limit`` (``time.monotonic()``) and by the pass's deadline as
    it moves, looking at the pass's stop every 0.1 s; a request not sent by then is never sent."""
    while True:
        left = ends_at(limit, spending) - time.monotonic()
        if left <= 0 or (spending is not None and spending.stopped()):
            future.cancel()
            return future.done() and not future.cancelled()
        done, _ = wait([future], timeout=min(left, 0.1) if spending is not None else left)
        if done:
            return True


class RequestPool:
    """At most ``size`` calls running at once, on daemon threads started as needed."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]]] = queue.SimpleQueue()
        self._threads = 0
        self._idle = 0
        self._pending = 0  # submitted, not yet taken by a thread
        self._lock = threading.Lock()

    def submit(self, call: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        self._queue.put((future, call))
        with self._lock:
            self._pending += 1
            if self._pending > self._idle and self._threads < self.size:
                self._threads += 1
                threading.Thread(target=self._work, name="triage-objstore", daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            future, call = self._queue.get()
            with self._lock:
                self._idle -= 1
                self._pending -= 1
            if not future.set_running_or_notify_cancel():
                continue  # its caller gave up before it was sent: never sent
            try:
                result = call()
            except BaseException as err:  # noqa: BLE001 - handed to the caller, who classifies it
                future.set_exception(err)
            else:
                future.set_result(result)
