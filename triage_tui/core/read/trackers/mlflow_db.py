"""MLflow's SQL tracking store in a SQLite file (``mlflow.db``) as scalar sources, one per run.

Since MLflow 3.7 the default tracking URI is ``sqlite:///mlflow.db`` in the working directory
(mlflow/environment_variables.py, mlflow/tracking/_tracking_service/utils.py). Its tables
(mlflow/store/tracking/dbmodels/models.py): ``experiments(experiment_id, name, ...)``,
``runs(run_uuid, name, status, start_time, end_time, lifecycle_stage, experiment_id, ...)`` and
``metrics(key, value, timestamp, step, is_nan, run_uuid)``, one row per logged point. MLflow
stores a NaN as value 0 with ``is_nan`` set and an infinity as the largest finite double of its
sign (``SqlAlchemyStore._get_metric_value_details``); read back, as ``MlflowClient`` returns it,
a NaN row is NaN. ``timestamp`` is milliseconds since the epoch.

One database holds many runs: ``list_runs`` names each (``<experiment>/<run name>``, as MLflow's UI
does) with its status, and ``MlflowDbRun`` reads one run's rows incrementally: the rows past the
last rowid read, at most ``tuning.MAX_ROWS_PER_POLL`` a poll, and none at all while the store's
files are unchanged and the run was read to its end.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triage_tui.core.errors import BadInput
from triage_tui.core.read.trackers import sqlite_ro, tuning
from triage_tui.core.read.trackers.points import PointBatch, metric_name, step_of
from triage_tui.core.series import ReadStats, RunScalars

KIND = "mlflow"
DB_NAME = "mlflow.db"
# The tables and columns read; a store without them is a schema this reader does not know.
REQUIRED = {
    "experiments": frozenset({"experiment_id", "name"}),
    "runs": frozenset({"run_uuid", "status", "experiment_id"}),
    "metrics": frozenset({"key", "value", "timestamp", "step", "run_uuid"}),
}
# MLflow's RunStatus names (mlflow/entities/run_status.py), and what each says of the run.
ENDED = frozenset({"FINISHED"})
FAILED = frozenset({"FAILED"})
# KILLED is set on purpose, never by a crash: a cancelled project or job run (mlflow-skinny 3.18.0,
# mlflow/projects/kubernetes.py ``cancel``), ``MlflowClient.set_terminated(status="KILLED")``, and
# every trial an Optuna study prunes (mlflow/optuna/storage.py maps TrialState.PRUNED to KILLED).
STOPPED = frozenset({"KILLED"})
RUNNING = frozenset({"RUNNING"})  # no end recorded yet


@dataclass(frozen=True)
class MlflowRunRef:
    """One run of a store, as MLflow names it."""

    store: Path
    run_id: str
    experiment: str
    name: str
    status: str  # RUNNING, SCHEDULED, FINISHED, FAILED, KILLED (or what a damaged row says)
    start_ms: int | None
    end_ms: int | None

    @property
    def label(self) -> str:
        """``<experiment>/<run name>``: how MLflow's UI lists it."""
        return f"{self.experiment}/{self.name}"


def _schema(conn, path: Path) -> frozenset[str]:
    tables = sqlite_ro.tables_of(conn)
    for table, needed in REQUIRED.items():
        if table not in tables:
            raise BadInput(path, f"holds no MLflow {table} table: not an MLflow tracking store")
        missing = needed - sqlite_ro.columns_of(conn, table)
        if missing:
            raise BadInput(
                path, f"its MLflow {table} table has no {', '.join(sorted(missing))}: a schema not known here"
            )
    return sqlite_ro.columns_of(conn, "runs") | {f"metrics.{c}" for c in sqlite_ro.columns_of(conn, "metrics")}


def list_runs(path: Path) -> tuple[MlflowRunRef, ...]:
    """Every run of the store not deleted, oldest first. Raises BadInput (not a store it can read)
    or sqlite_ro.Locked (its writer held the lock: ask again later)."""
    with sqlite_ro.reading(path) as conn:
        columns = _schema(conn, path)
        name = "r.name" if "name" in columns else "NULL"
        times = "r.start_time, r.end_time" if {"start_time", "end_time"} <= columns else "NULL, NULL"
        alive = (
            "WHERE r.lifecycle_stage IS NULL OR r.lifecycle_stage != 'deleted'" if "lifecycle_stage" in columns else ""
        )
        rows = conn.execute(
            f"SELECT r.run_uuid, {name}, r.status, {times}, e.name FROM runs r "
            f"LEFT JOIN experiments e ON r.experiment_id = e.experiment_id {alive} ORDER BY r.rowid"
        ).fetchall()
    refs = []
    for run_id, run_name, status, start, end, experiment in rows:
        if not isinstance(run_id, str) or not run_id:
            continue
        refs.append(
            MlflowRunRef(
                store=path,
                run_id=run_id,
                experiment=experiment if isinstance(experiment, str) else "?",
                name=run_name if isinstance(run_name, str) and run_name else run_id,
                status=status if isinstance(status, str) else "?",
                start_ms=step_of(start),
                end_ms=step_of(end),
            )
        )
    return tuple(refs)


# A poll's rows, past the last rowid read, in the order logged: (rowid, key, value, timestamp, step).
# SQLite types each value as stored, so a damaged or foreign row may hold text where a number
# belongs: such a row's step is read as -1 (counted, never read). A NaN (MLflow keeps it as value 0
# with is_nan set) is read as NULL, which numpy takes as NaN. Five columns, not eight: on a
# million rows the Python objects the driver makes are most of the time. Every number is checked
# here, in SQL, so the columns convert to numpy whole.
_ROWS = """
SELECT rowid, key,
  CASE WHEN {nan} THEN NULL WHEN typeof(value) IN ('real', 'integer') THEN value ELSE 0.0 END,
  CASE WHEN typeof(timestamp) IN ('real', 'integer') THEN timestamp ELSE 0 END,
  CASE WHEN typeof(step) = 'integer' AND step >= 0 AND typeof(value) IN ('real', 'integer')
    AND typeof(timestamp) IN ('real', 'integer') AND typeof(key) = 'text' AND length(key) BETWEEN 1 AND ?
  THEN step ELSE -1 END
FROM metrics WHERE run_uuid = ? AND rowid > ? ORDER BY rowid LIMIT ?
"""


def _batch(rows: list[tuple]) -> tuple[PointBatch, int]:
    """The rows' points by metric name, as columns (a million rows a poll stay cheap); the rows not whole."""
    batch = PointBatch()
    if not rows:
        return batch, 0
    _rowids, keys, values, stamps, steps = zip(*rows, strict=True)
    step_column = np.array(steps, np.int64)
    ok = step_column >= 0
    value_column = np.array(values, np.float64)  # None (a NaN row) -> NaN
    wall_column = np.array(stamps, np.float64) / 1000.0
    codes: dict[object, int] = {}
    code_column = np.array([codes.setdefault(key, len(codes)) for key in keys], np.int64)
    for key, code in codes.items():
        name = metric_name(key)
        if name is not None:
            chosen = (code_column == code) & ok
            batch.add_columns(name, step_column[chosen], wall_column[chosen], value_column[chosen])
    return batch, len(rows) - batch.points


class MlflowDbRun:
    """One run of an MLflow SQLite store, read incrementally (the ``ScalarSource`` protocol)."""

    kind = KIND

    def __init__(self, store: Path, run_id: str, prefix: str = "") -> None:
        self.store, self.run_id, self.prefix = store, run_id, prefix
        self.scalars = RunScalars()
        self.problems: dict[Path, str] = {}
        self.damaged: dict[Path, int] = {}
        self.status: str | None = None  # the run's status as of the last poll that read the store
        self.end_ms: int | None = None
        self._tail = sqlite_ro.RowTail(store)

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.store,)

    @property
    def rows_read(self) -> int:
        """Rows fetched from the store so far (a poll of an unchanged store adds none)."""
        return self._tail.rows_read

    def poll(self) -> ReadStats:
        key = self._tail.changed()
        if key is None:
            return ReadStats()
        try:
            with sqlite_ro.reading(self.store) as conn:
                columns = _schema(conn, self.store)
                status = conn.execute(
                    "SELECT status, end_time FROM runs WHERE run_uuid = ?"
                    if "end_time" in columns
                    else "SELECT status, NULL FROM runs WHERE run_uuid = ?",
                    (self.run_id,),
                ).fetchone()
                rows = conn.execute(
                    _ROWS.format(nan="is_nan" if "metrics.is_nan" in columns else "0"),
                    (tuning.MAX_NAME_CHARS, self.run_id, self._tail.last_row, tuning.MAX_ROWS_PER_POLL),
                ).fetchall()
        except sqlite_ro.Locked:
            self._tail.locked()
            return ReadStats()
        if status is None:
            raise BadInput(self.store, f"holds no run {self.run_id!r} (any more)")
        self.status = status[0] if isinstance(status[0], str) else None
        self.end_ms = step_of(status[1])
        self._tail.took(key, rows, tuning.MAX_ROWS_PER_POLL)
        batch, bad = _batch(rows)
        if bad:
            self.damaged[self.store] = self.damaged.get(self.store, 0) + bad
        added = batch.append_to(self.scalars, self.prefix)
        return ReadStats(files=1, records=len(rows), scalars=added, corrupt_records=bad)
