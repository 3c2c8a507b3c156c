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
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from triage_tui.core.errors import BadInput
from triage_tui.core.read.trackers import sqlite_ro, tuning
from triage_tui.core.read.trackers.points import PointBatch, metric_name
from triage_tui.core.series import ReadStats, RunScalars

KIND = "trackio"
DB_SUFFIX = ".db"
LOCK_SUFFIX = ".lock"
LEGACY_DB_NAME = "trackio.db"  # every project in one file, a project column
REQUIRED = frozenset({"run_name", "step", "metrics"})


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


# A poll's rows, past the last id read, in the order logged: (rowid, step or -1 where it is none,
# timestamp, the logged dict's JSON or NULL where it is no text or over MAX_JSON_CHARS). trackio
# writes the dict as orjson's bytes, a BLOB: read as the UTF-8 text it is.
_ROWS = """
SELECT rowid, CASE WHEN typeof(step) = 'integer' AND step >= 0 THEN step ELSE -1 END, {timestamp},
  CASE WHEN typeof(metrics) IN ('text', 'blob') AND length(CAST(metrics AS BLOB)) <= :longest
    THEN CAST(metrics AS TEXT) END
FROM metrics WHERE {where} AND rowid > :after ORDER BY rowid LIMIT :rows
"""
# trackio writes infinities and NaN as these strings (utils.py ``serialize_values``).
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# json's own C scanner, called as JSONDecoder.decode calls it, less the two whitespace regexes it
# runs about every call: trackio's JSON (orjson's) has no whitespace around it; a text that has
# some is decoded the usual way.
_DECODER = json.JSONDecoder()
_scan = _DECODER.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__


def _logged(text: str | None) -> dict | None:
    """One row's logged dict, or None where it is no JSON object."""
    if text is None:
        return None
    try:
        logged, end = _scan(text, 0)
        if end != len(text):
            raise ValueError
    except (StopIteration, ValueError):
        try:
            logged = _DECODER.decode(text)
        except (ValueError, RecursionError):
            return None
    except RecursionError:
        return None
    return logged if type(logged) is dict else None


def _walls(stamps: Sequence[object]) -> np.ndarray:
    """Each row's time as ``_wall`` reads it, NaN where it is none. trackio's own form
    (``datetime.now(timezone.utc).isoformat()``, ``...+00:00``) on every row is parsed by numpy whole:
    whole microseconds over 1e6, as Python's ``timestamp()`` computes them."""
    if all(type(stamp) is str and len(stamp) <= 64 and stamp.endswith("+00:00") for stamp in stamps):
        try:
            micros = np.array([str(stamp)[:-6] for stamp in stamps], "datetime64[us]").astype(np.int64)
        except ValueError:
            pass  # one that is no time: each read alone
        else:
            walls = micros / 1e6
            walls[micros == np.iinfo(np.int64).min] = np.nan  # "NaT"
            return walls
    return np.array([_wall(stamp) if stamp is not None else 0.0 for stamp in stamps], np.float64)  # None -> NaN


def _batch(rows: list[tuple]) -> tuple[PointBatch, int]:
    """The rows' points by metric name, as columns, and how many rows were not whole (no step, no
    dict, a timestamp that is none). Each value is checked as ``number`` checks it (a bool, a nested
    value, a string but trackio's three are no number); the loop is the one place a value is looked at."""
    batch = PointBatch()
    if not rows:
        return batch, 0
    _rowids, step_values, stamps, texts = zip(*rows, strict=True)
    wall_column = _walls(stamps)
    walls_ok = (~np.isnan(wall_column)).tolist()
    indices: dict[str, list[int]] = {}
    values: dict[str, list[float]] = {}
    bad = 0
    for index, (step, text) in enumerate(zip(step_values, texts, strict=True)):
        logged = _logged(text)
        if step < 0 or logged is None or not walls_ok[index]:
            bad += 1
            continue
        for key, raw in logged.items():
            kind = type(raw)
            if kind is float:
                value = raw
            elif kind is int:
                if abs(raw) >= 1 << 1023:
                    continue
                value = float(raw)
            elif kind is str and raw in _SPECIAL:
                value = _SPECIAL[raw]
            else:
                continue  # a bool (JSON's true), media, a table, a histogram: no scalar
            column = values.get(key)
            if column is None:
                if metric_name(key) is None:
                    continue
                column, indices[key] = values.setdefault(key, []), []
            column.append(value)
            indices[key].append(index)
    step_column = np.array(step_values, np.int64)
    for key, column in values.items():
        chosen = np.array(indices[key], np.int64)
        batch.add_columns(key, step_column[chosen], wall_column[chosen], np.array(column, np.float64))
    return batch, bad


class TrackioRun:
    """One run of a trackio project database, read incrementally (the ``ScalarSource`` protocol)."""

    kind = KIND

    def __init__(self, store: Path, run: str, project: str | None = None, prefix: str = "") -> None:
        self.store, self.run, self.project, self.prefix = store, run, project, prefix
        self.scalars = RunScalars()
        self.problems: dict[Path, str] = {}
        self.damaged: dict[Path, int] = {}
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
                columns = _columns(conn, self.store)
                timestamp = "timestamp" if "timestamp" in columns else "NULL"
                where = f"{_run_column(columns)} = :run"
                if "project" in columns and self.project is not None:
                    where += " AND project = :project"
                rows = conn.execute(
                    _ROWS.format(timestamp=timestamp, where=where),
                    {
                        "run": self.run,
                        "project": self.project,
                        "after": self._tail.last_row,
                        "rows": tuning.MAX_ROWS_PER_POLL,
                        "longest": tuning.MAX_JSON_CHARS,
                    },
                ).fetchall()
        except sqlite_ro.Locked:
            self._tail.locked()
            return ReadStats()
        self._tail.took(key, rows, tuning.MAX_ROWS_PER_POLL)
        records = len(rows)
        batch, bad = _batch(rows)
        if bad:
            self.damaged[self.store] = self.damaged.get(self.store, 0) + bad
        added = batch.append_to(self.scalars, self.prefix)
        return ReadStats(files=1, records=records, scalars=added, corrupt_records=bad)
