"""trackio's project databases as scalar sources, one per run.

trackio (trackio/sqlite_storage.py, 0.43) keeps one SQLite file a project,
``<TRACKIO_DIR>/<project>.db`` (``TRACKIO_DIR``, else ``$HF_HOME/trackio``: trackio/utils.py
``_get_trackio_dir``), WAL journal, beside a ``<project>.lock`` its writers take. Table
``metrics(id, run_id, timestamp, run_name, step, metrics)``: one row a ``trackio.log`` call, the
logged dict as JSON in ``metrics``, infinities and NaN as the strings ``"Infinity"``,
``"-Infinity"`` and ``"NaN"`` (utils.py ``serialize_values``), ``timestamp`` ISO 8601. Releases
before ``run_id`` name a run by ``run_name`` alone; the oldest kept every project in one
``trackio.db`` with a ``project`` column: both are read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from triage_tui.core.errors import BadInput
from triage_tui.core.series import ReadStats, RunScalars
from triage_tui.core.trackers import sqlite_ro, tuning
from triage_tui.core.trackers.points import PointBatch, metric_name, number, step_of

KIND = "trackio"
DB_SUFFIX = ".db"
LOCK_SUFFIX = ".lock"
REQUIRED = frozenset({"run_name", "step", "metrics"})
_SPECIAL = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def default_dirs() -> tuple[Path, ...]:
    """Where trackio keeps its projects on this machine: ``TRACKIO_DIR``, else the HF cache's ``trackio/``."""
    named = os.environ.get("TRACKIO_DIR")
    if named:
        return (Path(named).expanduser(),)
    hf_home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
    )
    return (Path(hf_home).expanduser() / "trackio",)


@dataclass(frozen=True)
class TrackioRunRef:
    """One run of a project database, as trackio names it."""

    store: Path
    project: str
    run: str  # its run_id where the table has one, else its name
    name: str

    @property
    def label(self) -> str:
        return f"{self.project}/{self.name}"


def _columns(conn, path: Path) -> frozenset[str]:
    columns = sqlite_ro.columns_of(conn, "metrics")
    if not columns:
        raise BadInput(path, "holds no metrics table: not a trackio project")
    missing = REQUIRED - columns
    if missing:
        raise BadInput(path, f"its metrics table has no {', '.join(sorted(missing))}: a schema not known here")
    return columns


def _run_column(columns: frozenset[str]) -> str:
    return "run_id" if "run_id" in columns else "run_name"


def list_runs(path: Path) -> tuple[TrackioRunRef, ...]:
    """Every run of a project database, first logged first."""
    with sqlite_ro.reading(path) as conn:
        columns = _columns(conn, path)
        project = "project" if "project" in columns else "NULL"
        rows = conn.execute(
            f"SELECT {_run_column(columns)}, run_name, {project}, MIN(rowid) FROM metrics "
            f"GROUP BY {_run_column(columns)}, {project} ORDER BY MIN(rowid)"
        ).fetchall()
    refs = []
    for run, name, project_name, _first in rows:
        if not isinstance(run, str) or not run:
            continue
        refs.append(
            TrackioRunRef(
                store=path,
                project=project_name if isinstance(project_name, str) else path.stem,
                run=run,
                name=name if isinstance(name, str) and name else run,
            )
        )
    return tuple(refs)


def _wall(text: object) -> float | None:
    if not isinstance(text, str) or len(text) > 64:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)  # trackio writes UTC (datetime.now(timezone.utc))
    return when.timestamp()


def logged_values(text: object) -> list[tuple[str, float]] | None:
    """The scalar values of one logged dict (media, tables and histograms left out), or None if it is no dict."""
    if not isinstance(text, str | bytes) or len(text) > tuning.MAX_JSON_CHARS:
        return None
    try:
        logged = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(logged, dict):
        return None
    values = []
    for key, raw in logged.items():
        value = _SPECIAL.get(raw) if isinstance(raw, str) else number(raw)
        name = metric_name(key)
        if value is not None and name is not None:
            values.append((name, value))
    return values


class TrackioRun:
    """One run of a trackio project database, read incrementally (the ``ScalarSource`` protocol)."""

    kind = KIND

    def __init__(self, store: Path, run: str, project: str | None = None, prefix: str = "") -> None:
        self.store, self.run, self.project, self.prefix = store, run, project, prefix
        self.scalars = RunScalars()
        self.problems: dict[Path, str] = {}
        self.damaged: dict[Path, int] = {}
        self.rows_read = 0
        self._last_id = 0
        self._key: sqlite_ro.StoreKey | None = None
        self._caught_up = False
        self._locked = sqlite_ro.LockedPolls(store)

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.store,)

    def poll(self) -> ReadStats:
        key = sqlite_ro.store_key(self.store)
        if key == self._key and self._caught_up:
            return ReadStats()
        try:
            with sqlite_ro.reading(self.store) as conn:
                columns = _columns(conn, self.store)
                timestamp = "timestamp" if "timestamp" in columns else "NULL"
                where = f"{_run_column(columns)} = ?"
                args: tuple = (self.run,)
                if "project" in columns and self.project is not None:
                    where, args = where + " AND project = ?", args + (self.project,)
                rows = conn.execute(
                    f"SELECT rowid, step, {timestamp}, metrics FROM metrics WHERE {where} AND rowid > ? "
                    "ORDER BY rowid LIMIT ?",
                    (*args, self._last_id, tuning.MAX_ROWS_PER_POLL),
                ).fetchall()
        except sqlite_ro.Locked:
            self._locked.locked()
            return ReadStats()
        self._locked.read()
        self._key, self._caught_up = key, len(rows) < tuning.MAX_ROWS_PER_POLL
        if rows:
            self._last_id = rows[-1][0]
        self.rows_read += len(rows)
        batch, bad = PointBatch(), 0
        for _rowid, step_value, timestamp_text, text in rows:
            step, values = step_of(step_value), logged_values(text)
            wall = _wall(timestamp_text) if timestamp_text is not None else 0.0
            if step is None or values is None or wall is None:
                bad += 1
                continue
            for name, value in values:
                batch.add(name, step, wall, value)
        if bad:
            self.damaged[self.store] = self.damaged.get(self.store, 0) + bad
        added = batch.append_to(self.scalars, self.prefix)
        return ReadStats(files=1, records=len(rows), scalars=added, corrupt_records=bad)
