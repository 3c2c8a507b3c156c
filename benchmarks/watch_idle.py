"""Idle cost of watching N SpecForge-shaped output dirs: CPU seconds per wall second while nothing is written.

Each run dir holds what a SpecForge output dir holds beside its event file: runs/ (one event file,
16 tags x 400 points, as SpecForge logs them), two checkpoint dirs, the vocab-mapping cache dir
and a hidden-state dump dir of 50 files, so the rescans every few seconds walk a realistic tree
(bench_scale.py measures the same at 100 000 points per run). Written to
benchmarks/.work/watch_idle/ and deleted at the end. Watcher.run (poll 1 s, rescan 5 s) runs for
DURATION seconds after the first poll has ended, once polling only (--poll) and once with the
watchdog observer on (the TUI's default); reports process CPU time / wall time. The files are last
modified --idle-for seconds before (a minute: a sweep just written; days: one that ended, whose runs
are read less often, core/watch/read_schedule.py); --tree watches a tree already written instead
(bench_sweep's 10 000 runs).

    .venv/bin/python benchmarks/watch_idle.py [N=200] [DURATION=30] [--idle-for SECS] [--tree PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: E402
from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: E402

from triage_tui.core.read.runs.discover import discover_runs  # noqa: E402
from triage_tui.core.read.runs.listing import ListingCache  # noqa: E402
from triage_tui.core.watch.watcher import Watcher  # noqa: E402

WORK = REPO / "benchmarks" / ".work" / "watch_idle"


def write_run(out: Path, rng: np.random.Generator) -> None:
    (out / "runs").mkdir(parents=True)
    writer = EventFileWriter(str(out / "runs"))
    tags = [f"train/ploss_{i}" for i in range(7)] + [f"train/acc_{i}" for i in range(7)] + ["train/loss", "train/lr"]
    for step in range(0, 400 * 50, 50):
        values = [summary_pb2.Summary.Value(tag=t, simple_value=float(rng.random())) for t in tags]
        writer.add_event(event_pb2.Event(step=step, wall_time=1.7e9 + step, summary=summary_pb2.Summary(value=values)))
    writer.close()
    for ckpt in ("epoch_0_step_100", "epoch_0_step_200"):
        (out / ckpt).mkdir()
        (out / ckpt / "config.json").write_text(json.dumps({"draft_vocab_size": 32000}))
        (out / ckpt / "model.safetensors").write_bytes(b"x")
    (out / "cache" / "vocab_mapping").mkdir(parents=True)
    (out / "cache" / "vocab_mapping" / "abc.pt").write_bytes(b"x")
    rows = out / "hidden_states" / "rows_0-5000"
    rows.mkdir(parents=True)
    for i in range(50):
        (rows / f"data_{i}.ckpt").write_bytes(b"x")


def idle_percent(root: Path, duration: float, use_watchdog: bool) -> tuple[float, int]:
    watcher = Watcher([root], use_watchdog=use_watchdog, poll_interval=1.0, rescan_interval=5.0)
    stop = threading.Event()
    updates: list = []
    polls = 0
    real_poll = watcher.poll_once

    def counted(*args, **kwargs):
        nonlocal polls
        polls += 1
        return real_poll(*args, **kwargs)

    watcher.poll_once = counted  # type: ignore[method-assign]  # counting polls on this one instance
    thread = threading.Thread(target=watcher.run, args=(updates.append, stop))
    thread.start()
    # The first poll's end (a long one reports the runs read so far before it ends: a first update
    # is not yet idle), then the observer, started after it.
    while watcher.polls < 1:
        time.sleep(0.05)
    time.sleep(2.0)
    polls_before = polls
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(duration)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    polled = polls - polls_before
    stop.set()
    thread.join()
    return 100 * cpu / wall, polled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=int, nargs="?", default=200)
    parser.add_argument("seconds", type=float, nargs="?", default=30.0, help="idle seconds measured")
    parser.add_argument(
        "--idle-for", type=float, default=60.0, help="every file and directory last modified this many seconds ago"
    )
    parser.add_argument("--tree", type=Path, help="watch this tree (kept as it is) instead of writing one")
    args = parser.parse_args()
    n, duration = args.runs, args.seconds
    root = args.tree if args.tree is not None else WORK
    if args.tree is None:
        shutil.rmtree(WORK, ignore_errors=True)
    rng = np.random.default_rng(0)
    try:
        if args.tree is None:
            for i in range(n):
                write_run(WORK / f"run_{i:03d}", rng)
            past = time.time() - args.idle_for
            for d, _, files in os.walk(WORK):
                for name in [*files, ""]:
                    os.utime(os.path.join(d, name), (past, past))

        cache = ListingCache()
        t = time.perf_counter()
        n = len(discover_runs([root], cache=cache))
        cold = time.perf_counter() - t
        t = time.perf_counter()
        discover_runs([root], cache=cache)
        warm = time.perf_counter() - t
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(
            f"discovery of {n} runs: cold {cold * 1000:.1f} ms ({cache.scandirs} scandirs), cached {warm * 1000:.1f} ms"
        )
        for use_watchdog in (False, True):
            percent, polls = idle_percent(root, duration, use_watchdog)
            mode = "watchdog on" if use_watchdog else "--poll"
            print(
                f"idle watching {n} runs, {mode}: {percent:.2f} % of a core over {duration:.0f} s "
                f"({polls} polls; poll 1 s, rescan 5 s)"
            )
    finally:
        if args.tree is None:
            shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
