"""The trackers' own records (core/read/trackers/): every value each one logged, read back exact.

The fixtures under tests/fixtures/trackers/ were written by the trackers' own code
(scripts/make_tracker_fixtures.py; VERSIONS names the releases): a tiny LM with a 32 000-token
vocab, one run at chance (ln 32 000 ≈ 10.37) and one healthy, logged through MLflow (a SQLite
store and a file store), trackio, Lightning's CSVLogger, torchtune's DiskLogger, NeMo
Automodel's MetricLogger, and the nanoGPT and nanochat consoles. ``expected.json`` holds what the
script logged: the oracle.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from triage_tui.core.read.trackers import (
    csv_metrics,
    mlflow_db,
    mlflow_files,
    nanogpt_log,
    nemo_jsonl,
    torchtune_log,
    trackio_db,
)
from triage_tui.core.series import RunScalars

FIXTURES = Path(__file__).parent / "fixtures" / "trackers"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
CHANCE = math.log(32_000)


def _points(scalars: RunScalars, tag: str) -> list[tuple[int, float | None]]:
    series = scalars.get(tag)
    assert series is not None, f"{tag} not among {scalars.tags()}"
    return [(int(s), None if math.isnan(v) else float(v)) for s, v in zip(series.steps, series.values, strict=True)]


def _expected(
    run: str, tag: str, *, decimals: int | None = None, step_offset: int = 0
) -> list[tuple[int, float | None]]:
    points = [(s + step_offset, v) for s, v in EXPECTED[run][tag]]
    if decimals is not None:
        points = [(s, float(f"{v:.{decimals}f}")) for s, v in points]
    return points


# --- MLflow, SQLite store -----------------------------------------------------------------


def test_an_mlflow_store_yields_each_run_named_as_mlflow_names_it_with_its_status():
    refs = mlflow_db.list_runs(FIXTURES / "mlflow-sqlite" / "mlflow.db")
    assert sorted((ref.label, ref.status) for ref in refs) == [
        ("tiny-lm/chance", "FAILED"),
        ("tiny-lm/healthy", "FINISHED"),
    ]


@pytest.mark.parametrize("run", ["chance", "healthy"])
def test_an_mlflow_run_reads_every_logged_value_exact_nan_included(run):
    store = FIXTURES / "mlflow-sqlite" / "mlflow.db"
    ref = next(ref for ref in mlflow_db.list_runs(store) if ref.name == run)
    source = mlflow_db.MlflowDbRun(store, ref.run_id)
    source.poll()
    assert sorted(source.scalars.tags()) == sorted(EXPECTED[run])
    for tag in EXPECTED[run]:
        assert _points(source.scalars, tag) == _expected(run, tag)
    assert source.status == ref.status and not source.damaged
    first = source.scalars.get("train/loss").values[0]
    assert abs(first - CHANCE) < 1e-5  # every logit equal at step 0: the chance line itself


def test_a_poll_of_an_unchanged_mlflow_store_reads_no_rows_and_leaves_its_files_as_they_were(tmp_path):
    store = tmp_path / "mlflow.db"
    shutil.copy2(FIXTURES / "mlflow-sqlite" / "mlflow.db", store)
    before = (store.read_bytes(), store.stat().st_mtime_ns, sorted(p.name for p in tmp_path.iterdir()))
    sources = [mlflow_db.MlflowDbRun(store, ref.run_id) for ref in mlflow_db.list_runs(store)]
    for source in sources:
        source.poll()
    read = [source.rows_read for source in sources]
    assert all(read)
    for source in sources:
        assert source.poll().records == 0
    assert [source.rows_read for source in sources] == read
    assert (store.read_bytes(), store.stat().st_mtime_ns, sorted(p.name for p in tmp_path.iterdir())) == before


def _insert_metric(db: Path, run_id: str, key: str, value: float, step: int, *, journal: str = "delete") -> None:
    """A row as MLflow's SqlAlchemyStore inserts it (models.SqlMetric: NaN as 0 with is_nan)."""
    import sqlite3

    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(f"PRAGMA journal_mode = {journal}")
    nan = math.isnan(value)
    conn.execute(
        "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES (?, ?, ?, ?, ?, ?)",
        (key, 0.0 if nan else value, 1_760_000_100_000 + step, run_id, step, nan),
    )
    conn.close()


def test_a_row_the_trainer_commits_later_is_read_alone_at_the_next_poll(tmp_path):
    store = tmp_path / "mlflow.db"
    shutil.copy2(FIXTURES / "mlflow-sqlite" / "mlflow.db", store)
    ref = next(ref for ref in mlflow_db.list_runs(store) if ref.name == "healthy")
    source = mlflow_db.MlflowDbRun(store, ref.run_id)
    source.poll()
    read = source.rows_read
    _insert_metric(store, ref.run_id, "train/loss", 0.125, 40)
    _insert_metric(store, ref.run_id, "train/loss", math.nan, 41)
    source.poll()
    assert source.rows_read == read + 2
    assert _points(source.scalars, "train/loss")[-2:] == [(40, 0.125), (41, None)]


def test_rows_still_in_the_writers_wal_are_read_and_nothing_is_left_beside_the_store(tmp_path):
    import sqlite3

    store = tmp_path / "mlflow.db"
    shutil.copy2(FIXTURES / "mlflow-sqlite" / "mlflow.db", store)
    ref = next(ref for ref in mlflow_db.list_runs(store) if ref.name == "chance")
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")  # the rows stay in the -wal file
    writer.execute(
        "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES ('train/loss', 10.5, 1, ?, 99, 0)",
        (ref.run_id,),
    )
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "mlflow.db-wal" in names
    source = mlflow_db.MlflowDbRun(store, ref.run_id)
    source.poll()
    assert _points(source.scalars, "train/loss")[-1] == (99, 10.5)
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    writer.close()


def test_a_store_locked_by_its_writer_is_read_at_the_next_poll_not_failed(tmp_path, monkeypatch):
    import sqlite3

    from triage_tui.core.read.trackers import tuning

    monkeypatch.setattr(tuning, "BUSY_TIMEOUT_SECONDS", 0.01)
    store = tmp_path / "mlflow.db"
    shutil.copy2(FIXTURES / "mlflow-sqlite" / "mlflow.db", store)
    ref = next(ref for ref in mlflow_db.list_runs(store) if ref.name == "chance")
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")  # rollback journal: an exclusive lock keeps every reader out
    source = mlflow_db.MlflowDbRun(store, ref.run_id)
    assert source.poll().records == 0 and not source.scalars.tags()
    writer.execute("ROLLBACK")
    writer.close()
    source.poll()
    assert _points(source.scalars, "train/loss") == _expected("chance", "train/loss")


def test_a_store_locked_poll_after_poll_is_said_on_its_run(tmp_path, monkeypatch):
    import sqlite3

    from triage_tui.core.errors import BadInput
    from triage_tui.core.read.trackers import tuning

    monkeypatch.setattr(tuning, "BUSY_TIMEOUT_SECONDS", 0.001)
    monkeypatch.setattr(tuning, "LOCKED_POLLS_SAID", 3)
    store = tmp_path / "mlflow.db"
    shutil.copy2(FIXTURES / "mlflow-sqlite" / "mlflow.db", store)
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    source = mlflow_db.MlflowDbRun(store, "whatever")
    source.poll()
    source.poll()
    with pytest.raises(BadInput, match="locked by its writer for 3 polls"):
        source.poll()
    writer.close()


def test_a_run_logged_faster_than_one_poll_reads_is_caught_up_with_over_the_next_polls(tmp_path, monkeypatch):
    from triage_tui.core.read.trackers import tuning

    monkeypatch.setattr(tuning, "MAX_ROWS_PER_POLL", 7)
    store = FIXTURES / "mlflow-sqlite" / "mlflow.db"
    ref = next(ref for ref in mlflow_db.list_runs(store) if ref.name == "healthy")
    source = mlflow_db.MlflowDbRun(store, ref.run_id)
    polls = 0
    while source.poll().records:
        polls += 1
    assert polls == math.ceil(sum(len(v) for v in EXPECTED["healthy"].values()) / 7)
    assert _points(source.scalars, "train/loss") == _expected("healthy", "train/loss")


# --- MLflow, file store --------------------------------------------------------------------


@pytest.mark.parametrize("run", ["chance", "healthy"])
def test_an_mlflow_file_store_run_reads_every_logged_value_exact(run):
    refs = mlflow_files.list_file_runs(FIXTURES / "mlflow-files" / "mlruns")
    assert sorted(ref.label for ref in refs) == ["tiny-lm/chance", "tiny-lm/healthy"]
    ref = next(ref for ref in refs if ref.name == run)
    assert ref.status == ("FAILED" if run == "chance" else "FINISHED")
    source = mlflow_files.MlflowFileRun(ref.path)
    source.poll()
    assert sorted(source.scalars.tags()) == sorted(EXPECTED[run])
    for tag in EXPECTED[run]:
        assert _points(source.scalars, tag) == _expected(run, tag)
    assert not source.damaged and not source.problems


# --- trackio -------------------------------------------------------------------------------


@pytest.mark.parametrize("run", ["chance", "healthy"])
def test_a_trackio_project_yields_each_run_with_every_logged_value(run):
    store = FIXTURES / "trackio" / "tiny-lm.db"
    refs = trackio_db.list_runs(store)
    assert [ref.label for ref in refs] == ["tiny-lm/chance", "tiny-lm/healthy"]
    ref = next(ref for ref in refs if ref.name == run)
    source = trackio_db.TrackioRun(store, ref.run)
    source.poll()
    for tag in EXPECTED[run]:
        assert _points(source.scalars, tag) == _expected(run, tag)
    assert source.poll().records == 0 and not source.damaged


def test_trackio_keeps_its_projects_where_trackio_says(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "elsewhere"))
    assert trackio_db.default_dirs() == (tmp_path / "elsewhere",)
    monkeypatch.delenv("TRACKIO_DIR")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert trackio_db.default_dirs() == (tmp_path / "hf" / "trackio",)


# --- Lightning CSVLogger -------------------------------------------------------------------


@pytest.mark.parametrize("run", ["chance", "healthy"])
def test_a_lightning_csv_reads_every_logged_value_exact(run):
    source = csv_metrics.CsvMetrics()
    source.set_files([FIXTURES / "lightning" / f"tiny-lm-{run}" / "version_0" / "metrics.csv"])
    source.poll()
    for tag in EXPECTED[run]:
        assert _points(source.scalars, tag) == _expected(run, tag)
    assert not source.damaged


def test_a_lightning_csv_rewritten_wider_while_watched_is_read_again_whole(tmp_path):
    """The real file before and after CSVLogger rewrote it with the wider header (val/loss appeared)."""
    path = tmp_path / "metrics.csv"
    shutil.copyfile(FIXTURES / "lightning" / "chance-before-rewrite.csv", path)
    source = csv_metrics.CsvMetrics()
    source.set_files([path])
    source.poll()
    assert "val/loss" not in source.scalars.tags()
    assert _points(source.scalars, "train/loss") == _expected("chance", "train/loss")[:10]
    final = (FIXTURES / "lightning" / "tiny-lm-chance" / "version_0" / "metrics.csv").read_bytes()
    path.write_bytes(final[: len(final) // 2])  # caught half-way through the rewrite (not atomic)
    source.poll()
    path.write_bytes(final)
    source.poll()
    for tag in EXPECTED["chance"]:
        assert _points(source.scalars, tag) == _expected("chance", tag)
    assert not source.scalars.get("train/loss").restarts and not source.damaged


def test_a_deepspeed_csv_with_its_header_again_after_a_restart_reads_the_restart_as_one():
    """deepspeed/monitor/csv_monitor.py: ``step,<name>`` written again by the new process."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "Train_Samples_train_loss.csv"
        path.write_text("step,train_loss\n10,10.37\n20,10.36\n30,10.35\nstep,train_loss\n20,9.5\n30,9.25\n")
        source = csv_metrics.CsvMetrics("deepspeed")
        source.set_files([path])
        source.poll()
        assert _points(source.scalars, "train_loss") == [(10, 10.37), (20, 9.5), (30, 9.25)]
        assert source.scalars.get("train_loss").restarts == (20,) and not source.damaged


# --- text logs and JSON lines --------------------------------------------------------------


@pytest.mark.parametrize("run", ["chance", "healthy"])
def test_torchtune_disk_logger_lines_read_exact(run):
    source = torchtune_log.disk_logs()
    source.set_files(sorted((FIXTURES / "torchtune" / run).glob("log_*.txt")))
    source.poll()
    assert _points(source.scalars, "loss") == _expected(run, "train/loss", step_offset=1)
    assert _points(source.scalars, "lr") == _expected(run, "lr", step_offset=1)
    assert not source.damaged


@pytest.mark.parametrize("run", ["chance", "healthy"])
def test_nanogpt_console_lines_read_as_printed(run):
    source = nanogpt_log.consoles()
    source.set_files([FIXTURES / "nanogpt" / run / "train.log"])
    source.poll()
    assert _points(source.scalars, "loss") == _expected(run, "train/loss", decimals=4)
    assert _points(source.scalars, "train/loss") == _expected(run, "train/loss", decimals=4)[::10]
    assert len(source.scalars.get("mfu")) == len(EXPECTED[run]["train/loss"]) and not source.damaged


@pytest.mark.parametrize("run", ["chance", "healthy"])
def test_nanochat_console_lines_read_as_printed(run):
    source = nanogpt_log.consoles()
    source.set_files([FIXTURES / "nanochat" / run / "train.log"])
    source.poll()
    assert _points(source.scalars, "loss") == _expected(run, "train/loss", decimals=6)
    assert set(source.scalars.tags()) == {"loss", "lrm", "dt_ms", "tok_per_sec", "mfu", "total_time_m", "val/bpb"}
    assert _points(source.scalars, "tok_per_sec")[0] == (0, 524288.0)


def test_progress_meters_and_colours_sharing_a_console_line_lose_no_point(tmp_path):
    path = tmp_path / "train.log"
    lines = (FIXTURES / "nanogpt" / "chance" / "train.log").read_text().splitlines()
    meter = "\r 45%|####5     | 9/20 [00:01<00:01]"
    path.write_text(
        "".join(f"\x1b[32m{line}\x1b[0m{meter}\r" if i % 3 else f"{line}\n" for i, line in enumerate(lines))
    )
    source = nanogpt_log.consoles()
    source.set_files([path])
    source.poll()
    source.set_files([path])
    assert _points(source.scalars, "loss") == _expected("chance", "train/loss", decimals=4)


@pytest.mark.parametrize("run", ["chance", "healthy"])
def test_nemo_automodel_jsonl_reads_training_and_validation_exact(run):
    directory = FIXTURES / "nemo-automodel" / run / "checkpoints"
    source = nemo_jsonl.metric_logs()
    source.set_files([directory / "training.jsonl", directory / "validation.jsonl"])
    source.poll()
    assert _points(source.scalars, "loss") == _expected(run, "train/loss")
    assert _points(source.scalars, "val/val_loss") == _expected(run, "val/loss")
    assert not source.damaged


def test_a_log_appended_while_watched_is_read_from_where_the_last_poll_stopped(tmp_path):
    path = tmp_path / "log_1760000000.txt"
    lines = (FIXTURES / "torchtune" / "chance" / "log_1760000000.txt").read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:5]) + lines[5][:7])  # a line half-written
    source = torchtune_log.disk_logs()
    source.set_files([path])
    source.poll()
    assert len(source.scalars.get("loss")) == 5
    with path.open("ab") as handle:
        handle.write(lines[5][7:] + b"".join(lines[6:]))
    source.poll()
    assert _points(source.scalars, "loss") == _expected("chance", "train/loss", step_offset=1)
    assert np.all(np.diff(source.scalars.get("loss").steps) == 1)


def test_a_store_of_several_runs_read_where_it_lies_names_each_runs_series_and_says_its_status():
    from triage_tui.core.read.trackers import stores

    source = stores.StoreRuns(stores.MLFLOW)
    source.set_files([FIXTURES / "mlflow-sqlite" / "mlflow.db"])
    source.poll()
    assert source.states == {"tiny-lm/chance": "FAILED", "tiny-lm/healthy": "FINISHED"}
    for run in ("chance", "healthy"):
        assert _points(source.scalars, f"tiny-lm/{run}/train/loss") == _expected(run, "train/loss")
    assert source.poll().records == 0
    trackio = stores.StoreRuns(stores.TRACKIO)
    trackio.set_files([FIXTURES / "trackio" / "tiny-lm.db"])
    trackio.poll()
    assert _points(trackio.scalars, "tiny-lm/healthy/val/loss") == _expected("healthy", "val/loss")


def test_mlflows_recorded_status_gives_the_state_where_no_writer_is_visible(tmp_path):
    from triage_tui.core.read.trackers import stores
    from triage_tui.core.watch.process_table import ProcessTable
    from triage_tui.core.watch.run_state import run_state
    from triage_tui.core.watch.signals.stall import Activity

    source = stores.StoreRuns(stores.MLFLOW)
    source.set_files([FIXTURES / "mlflow-sqlite" / "mlflow.db"])
    source.poll()
    no_writer = ProcessTable({}, "here", True)
    activity = Activity(1000.0, 10.0, 10.0)
    crashed = run_state(
        tmp_path, processes=no_writer, activity=activity, now=1600.0, recorded_end=stores.recorded_end(source.states)
    )
    assert crashed.state == "crashed" and crashed.reason == "MLflow recorded tiny-lm/chance FAILED"
    healthy = {"tiny-lm/healthy": source.states["tiny-lm/healthy"]}
    ended = run_state(
        tmp_path, processes=no_writer, activity=activity, now=1600.0, recorded_end=stores.recorded_end(healthy)
    )
    assert ended.state == "ended" and ended.reason == "MLflow recorded the run FINISHED"
    assert stores.recorded_end({"a/b": "RUNNING"}) is None


def test_a_wal_store_whose_writer_closed_is_read_without_a_file_left_beside_it(tmp_path):
    """trackio's stores are WAL databases: a read-only connection to one whose writer has closed
    would create its -wal and -shm and leave them; the reader leaves the directory as it was."""
    store = tmp_path / "tiny-lm.db"
    shutil.copy2(FIXTURES / "trackio" / "tiny-lm.db", store)
    assert store.read_bytes()[18] == 2  # trackio writes WAL
    before = (store.read_bytes(), store.stat().st_mtime_ns, sorted(p.name for p in tmp_path.iterdir()))
    for ref in trackio_db.list_runs(store):
        source = trackio_db.TrackioRun(store, ref.run)
        source.poll()
        assert source.scalars.points
    assert (store.read_bytes(), store.stat().st_mtime_ns, sorted(p.name for p in tmp_path.iterdir())) == before


def test_the_batterys_tracker_files_are_byte_for_byte_what_the_trackers_wrote():
    """tests/builders/trackers.py against the files Lightning and torchtune wrote themselves."""
    from builders.trackers import disk_logger, lightning_csv

    for run in ("chance", "healthy"):
        logged = EXPECTED[run]
        train = [
            (step, {"epoch": 0, **{tag: dict(map(tuple, logged[tag]))[step] for tag in logged if tag != "val/loss"}})
            for step in range(len(logged["train/loss"]))
        ]
        rows = []
        for step, row in train:
            rows.append((step, {k: (math.nan if v is None else v) for k, v in row.items()}))
            if step in dict(map(tuple, logged["val/loss"])):
                rows.append((step, {"val/loss": dict(map(tuple, logged["val/loss"]))[step], "epoch": 0}))
        written = (FIXTURES / "lightning" / f"tiny-lm-{run}" / "version_0" / "metrics.csv").read_bytes()
        assert lightning_csv(rows) == written
        tune = [
            (s + 1, {"loss": v, "lr": logged["lr"][s][1], "tokens_per_second_per_gpu": 1234.5})
            for s, v in logged["train/loss"]
        ]
        assert disk_logger(tune) == (FIXTURES / "torchtune" / run / "log_1760000000.txt").read_bytes()
