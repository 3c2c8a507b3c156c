"""A one-shot poll's runs read in forked worker processes, on the cores a node has.

Reading a run (its event file's decode) and judging it (a dozen analyses) hold the GIL: about
2 ms a run, so `scan` of 10 000 local runs is ~20 s on one core whatever the machine has. A
training node has tens of cores; rustboard reads runs on several threads. Here the runs are
split in chunks among worker processes forked after discovery: each starts with the watcher as
the parent left it (the runs found, the processes scanned: nothing walked or imported again),
reads its chunks and sends their statuses back pickled.

Forking is only safe from a process with one thread (a thread holding a lock at the fork leaves
that lock held for ever in the child), and only done on Linux, where `fork` is the usual start
method. Elsewhere, with one CPU, or for few items, the items are done here, one after another: the
plain path, which the parallel one must equal (tests/test_scan_processes.py). A worker that dies
(killed, out of memory) or cannot be started (a fork refused) costs nothing but time: what was not
sent back is done here.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

# Below this many items the workers' start (a fork of a big process, ~10 ms each) and the pickling
# cost more than they save.
MIN_ITEMS = 64
# Items per task: small enough that the cores finish together, large enough that a task's round
# trip (~1 ms) is small beside its ~2 ms an item.
CHUNKS_PER_WORKER = 8
MIN_CHUNK = 16
# The most workers a fan-out starts by default: past this, the serial part (discovery, ~0.4 ms a
# run) is most of a scan, and a node's cores are its trainer's.
DEFAULT_MAX_WORKERS = 16

# The work of the fan-out under way, set before the pool forks: the workers inherit it.
_WORK: Callable[[int], Any] | None = None


def default_workers() -> int:
    """The CPUs this process may run on (its affinity: a container's or taskset's share), at most
    ``DEFAULT_MAX_WORKERS``."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 1
    return min(usable, DEFAULT_MAX_WORKERS)


def can_fork(items: int, workers: int) -> bool:
    """Whether ``items`` would be done in ``workers`` forked processes (else here, in order)."""
    return (
        workers > 1
        and items >= MIN_ITEMS
        and sys.platform.startswith("linux")
        and threading.active_count() == 1
        and "fork" in multiprocessing.get_all_start_methods()
    )


def done_everywhere(items: int, work: Callable[[int], Any], workers: int) -> Iterator[tuple[int, Any]]:
    """``(i, work(i))`` for every i in range(items), in no set order: in up to ``workers`` forked
    processes where ``can_fork``, else here. ``work`` runs in a child that shares nothing back but
    its result, which must pickle."""
    if not can_fork(items, workers):
        yield from ((i, work(i)) for i in range(items))
        return
    global _WORK
    size = max(MIN_CHUNK, -(-items // (workers * CHUNKS_PER_WORKER)))
    chunks = [(start, min(items, start + size)) for start in range(0, items, size)]
    missing: list[tuple[int, int]] = []
    _WORK = work
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(max_workers=min(workers, len(chunks)), mp_context=context, initializer=_in_worker)
    try:
        tasks: list[tuple[tuple[int, int], Future[list[Any]]]] = []
        for chunk in chunks:
            try:
                tasks.append((chunk, pool.submit(_do_chunk, *chunk)))  # the first forks the workers
            except Exception:  # noqa: BLE001 - no worker could start (a fork refused under a pid limit)
                missing.append(chunk)
        for chunk, task in tasks:
            try:
                results = task.result()
            except Exception:  # noqa: BLE001 - a worker died (BrokenProcessPool) or its result would not pickle
                missing.append(chunk)  # done here below, as the plain path does it
                continue
            yield from zip(range(*chunk), results, strict=True)
    finally:
        # Ctrl-C (or a consumer that stops early): the chunks not begun are dropped, not waited for
        pool.shutdown(wait=True, cancel_futures=True)
        _WORK = None
    for chunk in missing:
        yield from ((i, work(i)) for i in range(*chunk))


def _in_worker() -> None:
    """A worker leaves Ctrl-C to its parent, which stops them (one traceback per worker otherwise)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _do_chunk(start: int, stop: int) -> list[Any]:
    """In a worker: the work of items [start, stop)."""
    assert _WORK is not None  # set by the parent before it forked
    return [_WORK(i) for i in range(start, stop)]
