"""What the tracker-store benchmarks (bench_mlflow.py, bench_trackio.py) share: the best of a few
timed reads, a poll of every run of an unchanged store, and the record of both beside the tracker's
own reader."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol


class PolledSource(Protocol):
    @property
    def rows_read(self) -> int: ...

    def poll(self) -> Any: ...


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The fastest of ``repeat`` calls of ``fn`` (seconds) and what the last call returned."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def idle_poll(sources: Sequence[PolledSource]) -> tuple[float, int]:
    """Each source polled once to its end, then again: the second pass's seconds and rows read."""
    for source in sources:
        source.poll()
    read = sum(source.rows_read for source in sources)
    start = time.perf_counter()
    for source in sources:
        source.poll()
    return time.perf_counter() - start, sum(source.rows_read for source in sources) - read


def table_and_rows(
    what: str,
    *,
    tracker: str,
    ours: tuple[str, float],
    theirs: tuple[str, str, float],
    idle: tuple[float, int],
    unchanged: str,
) -> tuple[str, list[dict]]:
    """The markdown table and the record rows: triage's read (label, seconds) beside the tracker's
    own (name with version, label, seconds), and the idle poll (seconds, rows read)."""
    (our_label, ours_s), (their_name, their_label, theirs_s), (idle_s, idle_rows) = ours, theirs, idle
    table = "\n".join(
        [
            f"| what | triage | {tracker} | {tracker} ÷ triage |",
            "|---|---|---|---|",
            f"| {what} | {ours_s:.2f} s | {theirs_s:.2f} s | **{theirs_s / ours_s:.1f}** |",
            f"| a poll of every run of the unchanged {unchanged} "
            f"| {idle_s * 1000:.1f} ms, {idle_rows} rows read | – | – |",
        ]
    )
    rows = [
        {
            "what": what,
            "triage": {"name": "triage", "label": our_label, "seconds": round(ours_s, 3)},
            "other": {"name": their_name, "label": their_label, "seconds": round(theirs_s, 3)},
            "idle_poll": {"seconds": round(idle_s, 4), "rows_read": idle_rows},
        }
    ]
    return table, rows
