"""Reading an MLflow SQLite store: triage's reader against MLflow's own client.

The store: ``mlflow.db`` with --runs runs of --points points each (``train/loss``), its schema made
by MLflow itself (``mlflow.set_tracking_uri("sqlite:///...")``, one experiment, the runs started and
ended through ``mlflow``), the points inserted as ``SqlAlchemyStore.log_batch`` inserts them
(columns key, value, timestamp, run_uuid, step, is_nan), in one transaction, for speed of setup.

Methods, same process, page cache warm, best of --repeat:
- triage: ``mlflow_db.list_runs`` then ``MlflowDbRun.poll()`` for every run (core/read/trackers/mlflow_db.py);
- MLflow: ``MlflowClient.search_runs`` then ``get_metric_history`` for every run: what a user's
  script calls to get the numbers.
Every point of both is compared (they must be identical). Then a poll of every run of the
unchanged store: the rows it reads (none) and its time.

Needs mlflow, which the test extra does not install: run it from a venv that has it, e.g.

    /tmp/trk-venv/bin/python benchmarks/bench_mlflow.py               # 100 runs x 10 000 points
    /tmp/trk-venv/bin/python benchmarks/bench_mlflow.py --runs 10 --points 1000 --dry-run
"""

from __future__ import annotations

import argparse
import math
import sqlite3
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

import record  # noqa: E402 - benchmarks/, found through the sys.path entry above
import store_bench  # noqa: E402 - benchmarks/, as record
from triage_tui.core.read.trackers import mlflow_db  # noqa: E402 - after the sys.path entry


def build(store: Path, runs: int, points: int) -> None:
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{store}")
    mlflow.set_experiment("bench")
    ids = []
    for n in range(runs):
        with mlflow.start_run(run_name=f"run-{n:03d}") as run:
            ids.append(run.info.run_id)
    conn = sqlite3.connect(store, isolation_level=None)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES ('train/loss', ?, ?, ?, ?, 0)",
        (
            (10.37 * math.exp(-step / points) + n * 1e-3, 1_760_000_000_000 + step, run_id, step)
            for n, run_id in enumerate(ids)
            for step in range(points)
        ),
    )
    conn.execute("COMMIT")
    conn.close()


def read_triage(store: Path) -> dict[str, list[tuple[int, float]]]:
    out = {}
    for ref in mlflow_db.list_runs(store):
        source = mlflow_db.MlflowDbRun(store, ref.run_id)
        source.poll()
        series = source.scalars.get("train/loss")
        out[ref.run_id] = list(zip(series.steps.tolist(), series.values.tolist(), strict=True))
    return out


def read_mlflow(store: Path) -> dict[str, list[tuple[int, float]]]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("bench")
    out = {}
    for run in client.search_runs([experiment.experiment_id], max_results=50_000):
        # The key is known: the points were inserted as log_batch inserts them, latest_metrics left
        # as it was, so run.data.metrics does not list it.
        history = client.get_metric_history(run.info.run_id, "train/loss")
        out[run.info.run_id] = sorted((m.step, m.value) for m in history)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dry-run", action="store_true", help="print the record, append nothing")
    args = parser.parse_args()
    import mlflow

    run = record.Run("mlflow", dry_run=args.dry_run)
    with tempfile.TemporaryDirectory() as directory:
        store = Path(directory) / "mlflow.db"
        build(store, args.runs, args.points)
        mlflow_db.list_runs(store)  # the page cache warm for both
        ours_s, ours = store_bench.best(lambda: read_triage(store), args.repeat)
        theirs_s, theirs = store_bench.best(lambda: read_mlflow(store), args.repeat)
        assert ours == theirs, "triage and MLflow read different points"
        sources = [mlflow_db.MlflowDbRun(store, ref.run_id) for ref in mlflow_db.list_runs(store)]
        idle = store_bench.idle_poll(sources)
    what = f"first read of an MLflow SQLite store, {args.runs} runs x {args.points:,} points"
    table, rows = store_bench.table_and_rows(
        what,
        tracker="MLflow",
        ours=("`list_runs` + `MlflowDbRun.poll()`", ours_s),
        theirs=(f"mlflow {mlflow.__version__}", "`MlflowClient.search_runs` + `get_metric_history`", theirs_s),
        idle=idle,
        unchanged="store",
    )
    run.save("MLflow SQLite store", table, rows)


if __name__ == "__main__":
    main()
