"""The trackers' sources (core/read/trackers/) against damaged, foreign, huge and locked records.

Every attack starts from a file the tracker's own code wrote (tests/fixtures/trackers/). A source
meets it with its points, damage counted on the file, or one ``BadInput`` naming the file: never
another exception, never a hang, never memory that grows with the file, and never a byte of the
tracker's files changed.
"""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import tracemalloc
from pathlib import Path

import pytest

from triage_tui.core.errors import BadInput
from triage_tui.core.read.trackers import (
    csv_metrics,
    mlflow_db,
    nanogpt_log,
    nemo_jsonl,
    torchtune_log,
    trackio_db,
    tuning,
)

FIXTURES = Path(__file__).parent / "fixtures" / "trackers"
MLFLOW_DB = FIXTURES / "mlflow-sqlite" / "mlflow.db"
TRACKIO_DB = FIXTURES / "trackio" / "tiny-lm.db"
# Offsets attacked in a store: SQLite's header (the first 100 bytes), then points spread over the file.
ATTACKS = 48


def _offsets(size: int) -> list[int]:
    return sorted({*range(0, 100, 7), *range(0, size, max(1, size // ATTACKS))})


def _read_store(kind: str, path: Path) -> int:
    """Every run of the store listed and polled as a watcher would; the points read."""
    lister, source = (
        (mlflow_db.list_runs, lambda ref: mlflow_db.MlflowDbRun(path, ref.run_id))
        if kind == "mlflow"
        else (trackio_db.list_runs, lambda ref: trackio_db.TrackioRun(path, ref.run))
    )
    points = 0
    for ref in lister(path):
        run = source(ref)
        run.poll()
        points += run.scalars.points
    return points


@pytest.mark.parametrize(("kind", "original"), [("mlflow", MLFLOW_DB), ("trackio", TRACKIO_DB)])
def test_a_store_cut_or_bit_flipped_is_read_or_refused_in_one_line(kind, original, tmp_path):
    data = original.read_bytes()
    outcomes = {"read": 0, "refused": 0}
    for offset in _offsets(len(data)):
        for variant, damaged in (("cut", data[:offset]), ("flip", _flip(data, offset))):
            path = tmp_path / f"{variant}-{offset}.db"
            path.write_bytes(damaged)
            try:
                _read_store(kind, path)
            except BadInput as err:
                assert err.path == str(path) and "\n" not in err.what
                outcomes["refused"] += 1
            else:
                outcomes["read"] += 1
            assert path.read_bytes() == damaged
            path.unlink()
    assert outcomes["read"] and outcomes["refused"]  # both happen: the attacks reach the data


def _flip(data: bytes, offset: int) -> bytes:
    if offset >= len(data):
        return data
    return data[:offset] + bytes([data[offset] ^ 0x10]) + data[offset + 1 :]


def test_an_mlflow_store_of_an_older_schema_is_read_and_one_of_an_unknown_one_refused(tmp_path):
    old = tmp_path / "old.db"
    shutil.copy2(MLFLOW_DB, old)
    conn = sqlite3.connect(old, isolation_level=None)
    # MLflow before 1.0 had no is_nan column
    conn.execute("CREATE TABLE old_metrics AS SELECT key, value, timestamp, run_uuid, step FROM metrics")
    conn.execute("DROP TABLE metrics")
    conn.execute("ALTER TABLE old_metrics RENAME TO metrics")
    conn.close()
    assert _read_store("mlflow", old) > 0
    foreign = tmp_path / "foreign.db"
    shutil.copy2(MLFLOW_DB, foreign)
    conn = sqlite3.connect(foreign, isolation_level=None)
    conn.execute("ALTER TABLE metrics RENAME COLUMN step TO iteration")
    conn.close()
    with pytest.raises(BadInput, match="metrics table has no step"):
        _read_store("mlflow", foreign)
    with pytest.raises(BadInput, match="no MLflow experiments table"):
        _read_store("mlflow", TRACKIO_DB)


def test_trackio_stores_of_older_releases_are_read(tmp_path):
    """Before run ids a run was its name; the oldest kept every project in one file with a project column."""
    legacy = tmp_path / "trackio.db"
    conn = sqlite3.connect(legacy, isolation_level=None)
    conn.execute(
        "CREATE TABLE metrics (id INTEGER PRIMARY KEY, timestamp TEXT, project TEXT, run_name TEXT, "
        "step INT, metrics TEXT)"
    )
    source_rows = (
        sqlite3.connect(f"file:{TRACKIO_DB}?mode=ro&immutable=1", uri=True)
        .execute("SELECT timestamp, run_name, step, metrics FROM metrics")
        .fetchall()
    )
    for project in ("a", "b"):
        conn.executemany(
            "INSERT INTO metrics (timestamp, project, run_name, step, metrics) VALUES (?, ?, ?, ?, ?)",
            [(t, project, r, s, m) for t, r, s, m in source_rows],
        )
    conn.close()
    refs = trackio_db.list_runs(legacy)
    assert [ref.label for ref in refs] == ["a/chance", "a/healthy", "b/chance", "b/healthy"]
    run = trackio_db.TrackioRun(legacy, refs[2].run, project=refs[2].project)
    run.poll()
    fresh = trackio_db.TrackioRun(TRACKIO_DB, trackio_db.list_runs(TRACKIO_DB)[0].run)
    fresh.poll()
    assert list(run.scalars.get("train/loss").values) == list(fresh.scalars.get("train/loss").values)


def test_a_crashed_writers_hot_journal_is_refused_and_left_where_it_was(tmp_path):
    """A rollback-journal store whose writer died mid-transaction: only a writer may roll it back."""
    live = tmp_path / "live" / "mlflow.db"
    live.parent.mkdir()
    shutil.copy2(MLFLOW_DB, live)
    writer = sqlite3.connect(live, isolation_level=None)
    writer.execute("PRAGMA journal_mode = DELETE")
    writer.execute("PRAGMA cache_size = 1")  # pages spill to the file before the commit
    writer.execute("BEGIN")
    run_id = writer.execute("SELECT run_uuid FROM runs LIMIT 1").fetchone()[0]
    writer.executemany(
        "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES ('x', 1.0, 1, ?, ?, 0)",
        [(run_id, step) for step in range(20_000)],
    )
    crashed = tmp_path / "crashed"
    shutil.copytree(live.parent, crashed)  # what a power cut leaves: the store and its hot journal
    writer.execute("ROLLBACK")
    writer.close()
    store, journal = crashed / "mlflow.db", crashed / "mlflow.db-journal"
    assert journal.stat().st_size > 0
    before = {p.name: p.read_bytes() for p in crashed.iterdir()}
    with pytest.raises(BadInput):
        _read_store("mlflow", store)
    assert {p.name: p.read_bytes() for p in crashed.iterdir()} == before


def test_a_million_rows_are_read_a_bounded_batch_a_poll(tmp_path, monkeypatch):
    store = tmp_path / "mlflow.db"
    shutil.copy2(MLFLOW_DB, store)
    run_id = mlflow_db.list_runs(store)[0].run_id
    conn = sqlite3.connect(store, isolation_level=None)
    conn.execute("PRAGMA journal_mode = OFF")
    # MLflow's metrics table without its two composite indexes (writing them a million times is
    # most of a minute here); the index a run's rows are found by, index_metrics_run_uuid, kept.
    conn.execute("CREATE TABLE bare AS SELECT * FROM metrics")
    conn.execute("DROP TABLE metrics")
    conn.execute("ALTER TABLE bare RENAME TO metrics")
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 999999) "
        "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) SELECT 'big', i * 0.5, i, ?, i, 0 FROM n",
        (run_id,),
    )
    conn.execute("CREATE INDEX index_metrics_run_uuid ON metrics (run_uuid)")
    conn.close()
    monkeypatch.setattr(tuning, "MAX_ROWS_PER_POLL", 400_000)
    source = mlflow_db.MlflowDbRun(store, run_id)
    first = source.poll()
    assert first.records == 400_000
    while source.poll().records:
        pass
    big = source.scalars.get("big")
    assert len(big) == 1_000_000 and big.values[-1] == 999_999 * 0.5 and big.steps[-1] == 999_999


def _line_sources(directory: Path) -> list[tuple[str, object]]:
    csv = csv_metrics.CsvMetrics()
    csv.set_files([directory / "metrics.csv"])
    tune = torchtune_log.disk_logs()
    tune.set_files([directory / "log_1.txt"])
    console = nanogpt_log.consoles()
    console.set_files([directory / "train.log"])
    nemo = nemo_jsonl.metric_logs()
    nemo.set_files([directory / "training.jsonl"])
    return [("metrics.csv", csv), ("log_1.txt", tune), ("train.log", console), ("training.jsonl", nemo)]


def test_a_200_mb_line_is_dropped_as_damage_in_bounded_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "MAX_READ_BYTES", 8 << 20)
    # The two ways a file is read: CsvMetrics' own loop, and line_log's (torchtune, nanoGPT, NeMo).
    heads = {"metrics.csv": b"epoch,step,loss\n0,1,10.37\n", "log_1.txt": b"Step 1 | loss:10.37 \n"}
    for name, head in heads.items():
        path = tmp_path / name
        path.write_bytes(head + b"9" * 1024)
        with path.open("r+b") as handle:
            handle.truncate(200 << 20)  # a 200 MB line of NULs after it (sparse), no newline
        with path.open("ab") as handle:
            handle.write(b"\n" + head.splitlines(keepends=True)[-1].replace(b"1", b"2", 1))
    for name, source in _line_sources(tmp_path):
        if name not in heads:
            continue
        tracemalloc.start()
        polls = 0
        while True:
            polls += 1
            if not source.poll().bytes_read or polls > 100:  # type: ignore[attr-defined]
                break
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 4 * tuning.MAX_READ_BYTES, (name, peak)
        scalars = source.scalars  # type: ignore[attr-defined]
        assert scalars.points >= 2, name  # the line before it and the line after it
        assert sum(source.damaged.values()) == 1, (name, source.damaged)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["metrics.csv", "log_1.txt", "train.log", "training.jsonl"])
def test_lines_that_are_no_numbers_or_carry_markup_are_damage_of_their_file(name, tmp_path):
    bad = {
        "metrics.csv": b"epoch,step,[bold]loss[/]\n0,1,10.37\n0,x,1\n0,2,1_0\n0,3,\x1b[31m\n0,4,1e999999\n",
        "log_1.txt": b"Step 1 | [bold]loss[/]:10.37 \nStep 2 | loss:1_0 \nStep 3 | loss:\n",
        "train.log": b"iter 1: loss 10.3700, time 1.00ms, mfu 1.00%\niter 2: loss 1_0, time 1ms, mfu 1%\n",
        "training.jsonl": b'{"step": 1, "\\u001b[31mloss": 10.37}\n{"step": "2", "loss": 1}\n[1]\n{"step": 3\n',
    }[name]
    (tmp_path / name).write_bytes(bad)
    source = dict(_line_sources(tmp_path))[name]
    source.poll()  # type: ignore[attr-defined]
    assert source.scalars.points >= 1  # type: ignore[attr-defined]
    assert sum(source.damaged.values()) >= 1  # type: ignore[attr-defined]


# Rows of a trackio run rewritten: values of every kind in whole rows, then rows whose JSON is no
# dict alone (two halves of one, two in one row) beside them, and one with whitespace around.
_KINDS = {
    8: '{"train/loss":7}',
    9: '{"train/loss":"NaN","lr":2.0}',
    10: '{"train/loss":true}',
    11: '{"train/loss":{"value":1.0}}',
    12: '{"lr":3.0}',
}
_SPLIT = {
    3: '{"train/loss":[1',  # ... and the next row's text would close it
    4: "2]}",
    5: '{"lr":1.0}\n{"train/loss":2.0}',
    6: '{"lr":1.0}\x1f{"train/loss":2.0}',
    13: ' {"train/loss" : 1.25} ',
}


@pytest.mark.parametrize("changed", [_KINDS, {**_KINDS, **_SPLIT}], ids=["whole", "split"])
def test_a_trackio_row_is_read_alone_whatever_the_rows_beside_it_hold(tmp_path, changed):
    """A poll reads a run's rows joined into one text; no row's JSON may run into its neighbour's
    (two halves of one dict, two dicts in one row are damage, each on its own), and a value that is
    no float (an int, trackio's "NaN", JSON's true, a nested dict, an absent name) is read as in a
    row alone."""
    store = tmp_path / "tiny-lm.db"
    shutil.copy2(TRACKIO_DB, store)
    run = trackio_db.list_runs(store)[0].run
    with sqlite3.connect(store) as conn:
        rows = conn.execute("SELECT id, step, metrics FROM metrics WHERE run_id = ? ORDER BY id", (run,)).fetchall()
        for index, text in changed.items():
            conn.execute("UPDATE metrics SET metrics = ? WHERE id = ?", (text, rows[index][0]))
    source = trackio_db.TrackioRun(store, run)
    source.poll()
    step_of = [step for _id, step, _text in rows]
    damaged = [index for index in (3, 4, 5, 6) if index in changed]
    assert source.damaged == ({store: len(damaged)} if damaged else {})
    dropped = {step_of[index] for index in (10, 11, 12, *damaged)}
    wanted = {step: json.loads(text)["train/loss"] for _id, step, text in rows if step not in dropped}
    wanted.update({step_of[8]: 7.0, step_of[9]: "NaN"})
    if 13 in changed:
        wanted[step_of[13]] = 1.25
    series = source.scalars.get("train/loss")
    assert series.steps.tolist() == sorted(wanted)
    got = dict(zip(series.steps.tolist(), series.values.tolist(), strict=True))
    assert math.isnan(got[step_of[9]]) and {**got, step_of[9]: "NaN"} == wanted
    assert source.scalars.get("lr").values.tolist().count(3.0) == 1


@pytest.mark.parametrize("changed", [{}, _KINDS, {**_KINDS, **_SPLIT}], ids=["as-written", "kinds", "split"])
def test_a_trackio_poll_joined_or_a_row_at_a_time_gives_the_same_points(tmp_path, monkeypatch, changed):
    """The joined read (the fast path) and the row-at-a-time read (``JOINED_READ = False``, the plain
    path) give every run of the project the same series, steps, times, values and damage, on the rows
    trackio wrote and on the rewritten ones; polled in two windows, so the second poll starts past
    the first's last row."""
    store = tmp_path / "tiny-lm.db"
    shutil.copy2(TRACKIO_DB, store)
    runs = [ref.run for ref in trackio_db.list_runs(store)]
    with sqlite3.connect(store) as conn:
        ids = [row_id for (row_id,) in conn.execute("SELECT id FROM metrics WHERE run_id = ? ORDER BY id", (runs[0],))]
        for index, text in changed.items():
            conn.execute("UPDATE metrics SET metrics = ? WHERE id = ?", (text, ids[index]))

    def read(joined: bool) -> list[tuple]:
        monkeypatch.setattr(trackio_db, "JOINED_READ", joined)
        monkeypatch.setattr(trackio_db.tuning, "MAX_ROWS_PER_POLL", len(ids) // 2)
        out = []
        for run in runs:
            source = trackio_db.TrackioRun(store, run)
            source.poll()
            source.poll()
            columns = {tag: [c.tolist() for c in series.columns()] for tag, series in source.scalars.series.items()}
            out.append((run, json.dumps(columns, sort_keys=True), source.damaged))
        return out

    fast, plain = read(True), read(False)
    assert fast == plain
    assert sum(len(json.loads(columns)) for _run, columns, _damaged in plain) >= 2
