"""Reading a trackio project: triage's reader against trackio's own.

The project: ``<project>.db`` with --runs runs of --points logged steps each, every step
``{"train/loss": ..., "lr": ...}``, written by trackio itself (``SQLiteStorage.bulk_log``, the call
its ``trackio.log`` batches into, one call a run), in a temporary ``TRACKIO_DIR``.

Methods, same process, page cache warm, best of --repeat:
- triage: ``trackio_db.list_runs`` then ``TrackioRun.poll()`` for every run (core/read/trackers/trackio_db.py);
- triage's plain path: the same with ``trackio_db.JOINED_READ = False`` (a row at a time), the
  fast path's gain on it;
- trackio: ``SQLiteStorage.get_run_records`` then ``SQLiteStorage.get_logs`` for every run (what its
  dashboard and ``trackio`` scripts call; its read cache is on only on Spaces, so every read reads).
Every point of both is compared (they must be identical). Then a poll of every run of the
unchanged project: the rows it reads (none) and its time.

Needs trackio, which the test extra does not install: run it from a venv that has it, e.g.

    /tmp/trk-venv/bin/python benchmarks/bench_trackio.py               # 20 runs x 10 000 steps
    /tmp/trk-venv/bin/python benchmarks/bench_trackio.py --runs 4 --points 1000 --dry-run
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

import record  # noqa: E402 - benchmarks/, found through the sys.path entry above
import store_bench  # noqa: E402 - benchmarks/, as record
from triage_tui.core.read.trackers import trackio_db  # noqa: E402 - after the sys.path entry

PROJECT = "bench"
TAGS = ("train/loss", "lr")


def build(runs: int, points: int) -> None:
    from trackio.sqlite_storage import SQLiteStorage

    for n in range(runs):
        logged = [
            {"train/loss": 10.37 * math.exp(-step / points) + n * 1e-3, "lr": 1e-4 * (step + 1) / points}
            for step in range(points)
        ]
        # As trackio stamps them (datetime.now(timezone.utc).isoformat()), 50 ms apart, in order
        # (its get_logs orders by timestamp, then id).
        stamps = [datetime.fromtimestamp(1_796_600_000 + step / 20, timezone.utc).isoformat() for step in range(points)]
        SQLiteStorage.bulk_log(PROJECT, f"run-{n:03d}", logged, steps=list(range(points)), timestamps=stamps)


def read_triage(store: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    out = {}
    for ref in trackio_db.list_runs(store):
        source = trackio_db.TrackioRun(store, ref.run)
        source.poll()
        out[ref.name] = {
            tag: list(zip(source.scalars.get(tag).steps.tolist(), source.scalars.get(tag).values.tolist(), strict=True))
            for tag in TAGS
        }
    return out


def read_trackio() -> dict[str, dict[str, list[tuple[int, float]]]]:
    from trackio.sqlite_storage import SQLiteStorage

    out = {}
    for run in SQLiteStorage.get_run_records(PROJECT):
        logs = SQLiteStorage.get_logs(PROJECT, run_id=run["id"])
        out[run["name"]] = {tag: [(log["step"], log[tag]) for log in logs if tag in log] for tag in TAGS}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--note", default="", help="printed under the table")
    parser.add_argument("--dry-run", action="store_true", help="print the record, append nothing")
    args = parser.parse_args()
    run = record.Run("trackio", dry_run=args.dry_run)
    with tempfile.TemporaryDirectory() as directory:
        os.environ["TRACKIO_DIR"] = directory  # read by trackio at import (trackio/utils.py _get_trackio_dir)
        import trackio

        build(args.runs, args.points)
        store = Path(directory) / f"{PROJECT}.db"
        trackio_db.list_runs(store)  # the page cache warm for both
        ours_s, ours = store_bench.best(lambda: read_triage(store), args.repeat)
        theirs_s, theirs = store_bench.best(read_trackio, args.repeat)
        assert ours == theirs, "triage and trackio read different points"
        trackio_db.JOINED_READ = False  # the plain path the joined read (the fast path) stands beside
        plain_s, plain = store_bench.best(lambda: read_triage(store), args.repeat)
        trackio_db.JOINED_READ = True
        assert plain == ours, "the joined read and the row-at-a-time read give different points"
        sources = [trackio_db.TrackioRun(store, ref.run) for ref in trackio_db.list_runs(store)]
        idle = store_bench.idle_poll(sources)
    what = f"first read of a trackio project, {args.runs} runs x {args.points:,} steps x {len(TAGS)} metrics"
    table, rows = store_bench.table_and_rows(
        what,
        tracker="trackio",
        ours=("`list_runs` + `TrackioRun.poll()`", ours_s),
        theirs=(f"trackio {trackio.__version__}", "`SQLiteStorage.get_run_records` + `get_logs`", theirs_s),
        idle=idle,
        unchanged="project",
    )
    rows[0]["plain_path"] = {"label": "a row at a time (`trackio_db.JOINED_READ = False`)", "seconds": plain_s}
    table += (
        f"\n\ntriage's plain path, a row at a time (`trackio_db.JOINED_READ = False`): {plain_s:.2f} s; "
        f"the joined read gains {plain_s / ours_s:.2f}x on it (the fast-path rule: 1.3x)."
    )
    run.save("trackio project", table, rows, args.note)


if __name__ == "__main__":
    main()
