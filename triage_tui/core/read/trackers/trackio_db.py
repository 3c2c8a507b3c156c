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
from itertools import chain
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


# A poll reads the run's rows past the last id read, at most MAX_ROWS_PER_POLL of them: how many
# there are and the last one's id, then the rows up to it (``{window}``), in one read transaction.
_COUNT = "SELECT count(*), max(rowid) FROM metrics WHERE {where} AND rowid > :after"
_LAST = "SELECT rowid FROM metrics WHERE {where} AND rowid > :after ORDER BY rowid LIMIT 1 OFFSET :offset"
_WINDOW = "{where} AND rowid > :after AND rowid <= :last"
# The rows joined by SQLite, a column a text (row ids, steps, times, the logged dicts' JSON), and
# how many rows have an integer step, a text time and a dict no longer than MAX_JSON_CHARS. Joined,
# the rows come to Python as one value where a row at a time costs more than decoding it (a run's
# rows come in the index's order, by time: their ids say their order). Every aggregate steps through
# the same rows in the same order, so the n-th item of each is one row's (a NULL, skipped, makes one
# column short). The texts are joined by a control character, which JSON holds nowhere, not even in
# a string: a row's JSON cannot run into the next one's.
_SEPARATOR = "\x1f"
# The fast path's switch: False reads every poll a row at a time (``_ROWS``, ``_batch``), the plain
# path the joined read falls back to; tests flip it to check that both give the same points.
JOINED_READ = True
_JOINED = """
SELECT group_concat(rowid), group_concat(step), group_concat({timestamp}, char(31)),
  group_concat(metrics, char(31)),
  sum(typeof(step) = 'integer' AND step >= 0 AND typeof({timestamp}) = 'text'
    AND length(CAST(metrics AS BLOB)) <= :longest)
FROM metrics WHERE {window}
"""
# A row at a time, where one row is not as trackio writes it: (rowid, step or -1 where it is none,
# timestamp, the logged dict's JSON or NULL where it is no text or over MAX_JSON_CHARS). trackio
# writes the dict as orjson's bytes, a BLOB: read as the UTF-8 text it is.
_ROWS = """
SELECT rowid, CASE WHEN typeof(step) = 'integer' AND step >= 0 THEN step ELSE -1 END, {timestamp},
  CASE WHEN typeof(metrics) IN ('text', 'blob') AND length(CAST(metrics AS BLOB)) <= :longest
    THEN CAST(metrics AS TEXT) END
FROM metrics WHERE {window} ORDER BY rowid
"""
# trackio writes infinities and NaN as these strings (utils.py ``serialize_values``).
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# json's own C scanner, called as JSONDecoder.decode calls it, less the two whitespace regexes it
# runs about every call: trackio's JSON (orjson's) has no whitespace around it; a text that has
# some is decoded the usual way.
_DECODER = json.JSONDecoder()
_scan = _DECODER.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__
_ABSENT = object()  # a row that did not log the name
_NOT_A_TIME = np.iinfo(np.int64).min  # numpy's NaT as int64


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
            walls[micros == _NOT_A_TIME] = np.nan
            return walls
    return np.array([_wall(stamp) if stamp is not None else 0.0 for stamp in stamps], np.float64)  # None -> NaN


def _scalar(raw: object) -> float | None:
    """A logged value as ``number`` reads it, trackio's three strings too; None where it is no scalar
    (a bool, JSON's true; media, a table, a histogram: a nested value)."""
    if type(raw) is float:
        return raw
    if type(raw) is int:
        return float(raw) if abs(raw) < 1 << 1023 else None
    if type(raw) is str:
        return _SPECIAL.get(raw)
    return None


def _points(steps: np.ndarray, walls: np.ndarray, logged: list[dict]) -> PointBatch:
    """The points of whole rows (their steps, times and logged dicts, in order) by metric name, a
    name at a time. Every value is checked: a name's values that are all floats (a training loop's
    usual dict) at once, by their types; any other name's one at a time by ``_scalar``."""
    batch = PointBatch()
    for name in dict.fromkeys(chain.from_iterable(logged)):
        if metric_name(name) is None:
            continue
        column = [row.get(name, _ABSENT) for row in logged]
        if set(map(type, column)) == {float}:
            batch.add_columns(name, steps, walls, np.array(column, np.float64))
            continue
        chosen, values = [], []
        for index, raw in enumerate(column):
            value = _scalar(raw)
            if value is not None:
                chosen.append(index)
                values.append(value)
        rows = np.array(chosen, np.int64)
        batch.add_columns(name, steps[rows], walls[rows], np.array(values, np.float64))
    return batch


def _dicts(joined: str, count: int) -> list[dict] | None:
    """The ``count`` logged dicts of rows joined by ``_SEPARATOR``, each one a whole row's JSON object
    (orjson's, no whitespace); None where one is not (a row read alone says what it is)."""
    logged = []
    end = -1
    try:
        for _ in range(count):
            row, end = _scan(joined, end + 1)
            if type(row) is not dict or (end < len(joined) and joined[end] != _SEPARATOR):
                return None
            logged.append(row)
    except (StopIteration, ValueError, RecursionError):
        return None
    return logged if end == len(joined) else None


def _joined_walls(stamps: str, count: int) -> np.ndarray | None:
    """``count`` times joined by ``_SEPARATOR``, each in trackio's form (``...+00:00``, as ``_walls``
    reads them at once); None where one is not."""
    suffix = "+00:00"
    parts = stamps.split(_SEPARATOR)
    if len(parts) != count or stamps.count(suffix + _SEPARATOR) != count - 1 or not stamps.endswith(suffix):
        return None  # every part ends with the suffix: each one but the last is followed by a separator
    if max(map(len, parts)) > 64:
        return None
    try:
        micros = np.array(stamps[: -len(suffix)].split(suffix + _SEPARATOR), "datetime64[us]").astype(np.int64)
    except ValueError:
        return None  # a time that is no time
    return None if (micros == _NOT_A_TIME).any() else micros / 1e6


def _joined_batch(joined: tuple, count: int) -> PointBatch | None:
    """The points of ``count`` rows joined by SQLite (``_JOINED``), where every row is whole as trackio
    writes it; None where one is not: then the rows are read one at a time (``_batch``)."""
    ids, steps, stamps, texts, whole = joined
    if whole != count:
        return None
    order = np.argsort(np.fromstring(ids, np.int64, sep=","), kind="stable")
    step_column = np.fromstring(steps, np.int64, sep=",")
    walls = _joined_walls(stamps, count)
    if walls is None or not len(order) == len(step_column) == count:
        return None
    logged = _dicts(texts, count)
    if logged is None:
        return None
    return _points(step_column[order], walls[order], [logged[index] for index in order.tolist()])


def _batch(rows: list[tuple]) -> tuple[PointBatch, int]:
    """The rows' points by metric name, as columns, and how many rows were not whole (no step, no
    dict, a timestamp that is none)."""
    if not rows:
        return PointBatch(), 0
    _rowids, step_values, stamps, texts = zip(*rows, strict=True)
    wall_column = _walls(stamps)
    walls_ok = (~np.isnan(wall_column)).tolist()
    whole, logged = [], []
    for index, (step, text) in enumerate(zip(step_values, texts, strict=True)):
        row = _logged(text)
        if step >= 0 and row is not None and walls_ok[index]:
            whole.append(index)
            logged.append(row)
    chosen = np.array(whole, np.int64)
    return _points(np.array(step_values, np.int64)[chosen], wall_column[chosen], logged), len(rows) - len(whole)


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
                count, last, batch, bad = self._read(conn)
        except sqlite_ro.Locked:
            self._tail.locked()
            return ReadStats()
        self._tail.took_through(key, count, last, tuning.MAX_ROWS_PER_POLL)
        if bad:
            self.damaged[self.store] = self.damaged.get(self.store, 0) + bad
        added = batch.append_to(self.scalars, self.prefix)
        return ReadStats(files=1, records=count, scalars=added, corrupt_records=bad)

    def _read(self, conn) -> tuple[int, int, PointBatch, int]:
        """The rows past the last read, at most MAX_ROWS_PER_POLL: how many, the last one's id, their
        points and how many were not whole."""
        columns = _columns(conn, self.store)
        where = f"{_run_column(columns)} = :run"
        if "project" in columns and self.project is not None:
            where += " AND project = :project"
        params = {"run": self.run, "project": self.project, "after": self._tail.last_row}
        conn.execute("BEGIN")  # one snapshot: the rows counted are the rows read
        count, last = conn.execute(_COUNT.format(where=where), params).fetchone()
        if not count:
            return 0, self._tail.last_row, PointBatch(), 0
        if count > tuning.MAX_ROWS_PER_POLL:
            count, params["offset"] = tuning.MAX_ROWS_PER_POLL, tuning.MAX_ROWS_PER_POLL - 1
            (last,) = conn.execute(_LAST.format(where=where), params).fetchone()
        params.update(last=last, longest=tuning.MAX_JSON_CHARS)
        window = _WINDOW.format(where=where)
        timestamp = "timestamp" if "timestamp" in columns else "NULL"
        if JOINED_READ:
            joined = conn.execute(_JOINED.format(timestamp=timestamp, window=window), params).fetchone()
            batch = _joined_batch(joined, count)
            if batch is not None:
                return count, last, batch, 0
        rows = conn.execute(_ROWS.format(timestamp=timestamp, window=window), params).fetchall()
        return count, last, *_batch(rows)
