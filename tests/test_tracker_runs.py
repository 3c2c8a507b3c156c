"""A tracker's store of several runs is that many runs: each in ``scan``, the watcher's list,
``scalars`` and ``check``, named as its tracker names it, its state from the store's status.

The stores are tests/fixtures/trackers/ (written by MLflow's and trackio's own code,
scripts/make_tracker_fixtures.py): two runs each, ``chance`` (MLflow: ended FAILED) and
``healthy`` (FINISHED). The run ids a store's path is joined with are read from the store itself
(the standard library's sqlite3; MLflow's meta.yaml), the values from ``expected.json``.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import sqlite3
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from triage_tui import cli
from triage_tui.core.read.trackers.stores import path_segment
from triage_tui.core.watch.watcher import Watcher

FIXTURES = Path(__file__).parent / "fixtures" / "trackers"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
CHANCE_FLAGS = {"chance_from_start", "loss_at_chance", "loss_above_chance"}


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(list(argv))
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return code, out.getvalue(), err.getvalue()


def _scan(*paths: Path) -> tuple[int, list[dict]]:
    code, out, _err = _run("scan", *map(str, paths), "--json")
    return code, json.loads(out)["runs"]


def _files(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def _sql(store: Path, query: str) -> list[tuple]:
    # immutable: a read-only connection to a WAL store (trackio's) would leave its -shm behind
    with sqlite3.connect(f"file:{store}?mode=ro&immutable=1", uri=True) as conn:
        return conn.execute(query).fetchall()


def _run_paths(tmp_path: Path, directory: str) -> dict[str, Path]:
    """Each run's path as the store names it: the store joined with the run's id (MLflow's run_uuid,
    trackio's run_id), or the run's directory in MLflow's file store."""
    root = tmp_path / directory
    if directory == "mlflow-sqlite":
        store = root / "mlflow.db"
        return {name: store / run_id for run_id, name in _sql(store, "SELECT run_uuid, name FROM runs")}
    if directory == "trackio":
        store = root / "tiny-lm.db"
        return {name: store / run_id for run_id, name in _sql(store, "SELECT DISTINCT run_id, run_name FROM metrics")}
    import yaml

    return {
        yaml.safe_load(meta.read_text())["run_name"]: meta.parent for meta in (root / "mlruns").glob("*/*/meta.yaml")
    }


@pytest.mark.parametrize("directory", ["mlflow-sqlite", "mlflow-files", "trackio"])
def test_each_run_of_a_store_is_a_run_of_its_own_named_as_its_tracker_names_it(tmp_path, directory):
    shutil.copytree(FIXTURES / directory, tmp_path / directory, copy_function=shutil.copy2)
    before = _files(tmp_path)
    code, runs = _scan(tmp_path)
    paths = _run_paths(tmp_path, directory)
    by_name = {run["name"]: run for run in runs}
    assert sorted(by_name) == [f"{directory}/tiny-lm/chance", f"{directory}/tiny-lm/healthy"]
    for name in ("chance", "healthy"):
        run = by_name[f"{directory}/tiny-lm/{name}"]
        assert Path(run["path"]) == paths[name] and run["errors"] == []
        assert run["metrics"]["loss"]["tag"] == "train/loss"  # its own names, no store label in front
        assert run["metrics"]["loss"]["count"] == len(EXPECTED[name]["train/loss"])
        assert run["metrics"]["loss"]["min"] == min(v for _s, v in EXPECTED[name]["train/loss"])
    chance, healthy = by_name[f"{directory}/tiny-lm/chance"], by_name[f"{directory}/tiny-lm/healthy"]
    assert {flag["kind"] for flag in chance["flags"]} & CHANCE_FLAGS and chance["status"] != "ok"
    assert not {flag["kind"] for flag in healthy["flags"]} & CHANCE_FLAGS
    if directory.startswith("mlflow"):  # MLflow's status: chance FAILED, healthy FINISHED
        assert chance["state"] == "crashed" and healthy["state"] == "ended" and code == 1
    # Watched from the store's own directory, a run is named as the tracker names it, nothing before.
    _code, runs = _scan(tmp_path / directory)
    assert sorted(run["name"] for run in runs) == ["tiny-lm/chance", "tiny-lm/healthy"]
    assert _files(tmp_path) == before


def test_a_stores_run_is_addressed_by_its_path_in_scalars_and_check(tmp_path):
    shutil.copytree(FIXTURES / "mlflow-sqlite", tmp_path / "m", copy_function=shutil.copy2)
    store = tmp_path / "m" / "mlflow.db"
    ids = {name: run_id for run_id, name in _sql(store, "SELECT run_uuid, name FROM runs")}
    run = store / ids["healthy"]
    code, out, _err = _run("scalars", str(run), "--tag", "train/loss")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [(int(r["step"]), float(r["value"])) for r in rows] == [
        tuple(p) for p in EXPECTED["healthy"]["train/loss"]
    ]
    assert {r["tag"] for r in rows} == {"train/loss"}
    code, out, err = _run("check", str(store / ids["chance"]), "--json")
    report = json.loads(out)  # the run found: its crash said; nothing else to check in it (exit 2, said)
    assert (
        report["run"] == str(store / ids["chance"])
        and report["crash"]["line"] == "MLflow recorded tiny-lm/chance FAILED"
    )
    assert code == 2 and "nothing was checked" in err
    code, _out, err = _run("scalars", str(store / "no-such-run"))
    assert code == 2 and "no such file or directory" in err


def test_the_directory_keeps_its_other_sources_as_a_run_beside_the_stores_runs(tmp_path):
    """A nanoGPT console and checkpoint beside an mlflow.db of two runs: three runs, none merged."""
    shutil.copytree(FIXTURES / "mlflow-sqlite", tmp_path / "w", copy_function=shutil.copy2)
    for name in ("train.log", "ckpt.pt"):
        shutil.copy2(FIXTURES / "nanogpt" / "chance" / name, tmp_path / "w" / name)
    _code, runs = _scan(tmp_path / "w")
    by_name = {run["name"]: run for run in runs}
    assert sorted(by_name) == ["tiny-lm/chance", "tiny-lm/healthy", "w"]
    assert "nanogpt" in by_name["w"]["sources"] and "mlflow" not in by_name["w"]["sources"]
    assert by_name["tiny-lm/healthy"]["sources"] == ["mlflow"] and by_name["tiny-lm/chance"]["state"] == "crashed"


def test_a_store_of_one_run_stays_one_source_of_its_directorys_run(tmp_path):
    """A store holding one run is not split: the directory is the run, named as before."""
    shutil.copytree(FIXTURES / "mlflow-sqlite", tmp_path / "one", copy_function=shutil.copy2)
    store = tmp_path / "one" / "mlflow.db"
    with sqlite3.connect(store) as conn:  # the healthy run deleted, as `mlflow gc` would
        (run_id,) = conn.execute("SELECT run_uuid FROM runs WHERE name = 'healthy'").fetchone()
        for table in ("metrics", "latest_metrics", "params", "tags", "runs"):
            conn.execute(f"DELETE FROM {table} WHERE run_uuid = ?", (run_id,))
    _code, (run,) = _scan(tmp_path / "one")
    assert run["name"] == "one" and Path(run["path"]) == tmp_path / "one" and run["sources"] == ["mlflow"]
    assert run["metrics"]["loss"]["tag"] == "train/loss" and run["state"] == "crashed"


def test_the_watcher_lists_each_run_and_a_run_started_since_appears_at_the_next_rescan(tmp_path):
    shutil.copytree(FIXTURES / "mlflow-sqlite", tmp_path / "m", copy_function=shutil.copy2)
    store = tmp_path / "m" / "mlflow.db"
    watcher = Watcher([tmp_path], use_watchdog=False, rescan_interval=0.0)
    first = watcher.poll_once()
    assert sorted(s.info.name for s in first) == ["m/tiny-lm/chance", "m/tiny-lm/healthy"]
    assert len({s.info.path for s in first}) == 2
    with sqlite3.connect(store) as conn:  # a third run, the healthy one's rows logged again under a new id
        (old,) = conn.execute("SELECT run_uuid FROM runs WHERE name = 'healthy'").fetchone()
        columns = [row[1] for row in conn.execute("PRAGMA table_info(runs)")]
        picked = ", ".join("'again'" if c == "name" else "'f' || run_uuid" if c == "run_uuid" else c for c in columns)
        conn.execute(f"INSERT INTO runs ({', '.join(columns)}) SELECT {picked} FROM runs WHERE run_uuid = ?", (old,))
        conn.execute(
            "INSERT INTO metrics (key, value, timestamp, step, is_nan, run_uuid) "
            "SELECT key, value, timestamp, step, is_nan, 'f' || run_uuid FROM metrics WHERE run_uuid = ?",
            (old,),
        )
    second = {s.info.name: s for s in watcher.poll_once()}
    assert sorted(second) == ["m/tiny-lm/again", "m/tiny-lm/chance", "m/tiny-lm/healthy"]
    assert second["m/tiny-lm/again"].info.path == store / f"f{old}"
    assert second["m/tiny-lm/again"].metrics.loss.count == len(EXPECTED["healthy"]["train/loss"])
    assert second["m/tiny-lm/healthy"] is not None and second["m/tiny-lm/chance"].state.state == "crashed"


def test_a_stores_recorded_end_comes_before_a_process_holding_the_store_open(tmp_path):
    """One process writing a store of several runs writes one of them: a run the store records
    FINISHED is ended even while that process holds the store open; without the store's word first
    (a run of its own directory) that process is its writer."""
    from triage_tui.core.watch.process_table import Process, ProcessTable
    from triage_tui.core.watch.run_state import run_state
    from triage_tui.core.watch.signals.stall import Activity

    store = tmp_path / "mlflow.db"
    store.write_bytes(b"")
    writer = Process(4242, "python", "S", 0.0, ("python", "train.py"), str(tmp_path), (str(store),))
    table = ProcessTable({4242: writer}, "here", True)
    activity = Activity(1000.0, 10.0, 10.0)
    recorded = ("ended", "MLflow recorded the run FINISHED")
    first = run_state(
        tmp_path, processes=table, activity=activity, now=1010.0, recorded_end=recorded, recorded_end_first=True
    )
    assert first.state == "ended" and first.reason == "MLflow recorded the run FINISHED"
    alone = run_state(tmp_path, processes=table, activity=activity, now=1010.0, recorded_end=recorded)
    assert alone.state == "live" and alone.writer is not None and alone.writer.pid == 4242


@pytest.mark.parametrize(
    ("name", "segment"),
    [
        ("..", "%2E%2E"),
        (".", "%2E"),
        ("a/b", "a%2Fb"),
        ("", "%00"),
        ("\x1b[31mx", "%1B[31mx"),
        ("brave-sun-1", "brave-sun-1"),
    ],
)
def test_a_runs_name_is_one_path_segment_below_its_store(name, segment):
    assert path_segment(name) == segment and "/" not in path_segment(name)


@pytest.mark.parametrize("variable", ["TRACKIO_DIR", "HF_HOME"])
def test_trackios_own_directory_is_read_when_named_and_said_where_a_scan_finds_nothing(tmp_path, monkeypatch, variable):
    """trackio writes to TRACKIO_DIR, else $HF_HOME/trackio (trackio/utils.py ``_get_trackio_dir``),
    not to the run's output directory: a scan of the output directory says where its projects are."""
    home = tmp_path / "hf"
    projects = home / "trackio"
    shutil.copytree(FIXTURES / "trackio", projects, copy_function=shutil.copy2)
    monkeypatch.delenv("TRACKIO_DIR", raising=False)
    monkeypatch.setenv(variable, str(projects if variable == "TRACKIO_DIR" else home))
    (tmp_path / "out").mkdir()
    code, out, err = _run("scan", str(tmp_path / "out"), "--json")
    assert code == 2 and json.loads(out)["runs"] == []
    assert f"trackio keeps its projects in {projects} (1 there): `triage scan {projects}` reads them" in err
    _code, runs = _scan(projects)
    assert sorted(run["name"] for run in runs) == ["tiny-lm/chance", "tiny-lm/healthy"]
    code, _out, err = _run("scan", str(tmp_path))  # watched from above: its projects are found, nothing said
    assert "trackio keeps" not in err


def test_a_database_without_trackios_lock_beside_it_makes_no_run(tmp_path):
    """Many tools keep a ``.db``; trackio's project is one beside its ``<project>.lock``."""
    (tmp_path / "cache").mkdir()
    shutil.copy2(FIXTURES / "trackio" / "tiny-lm.db", tmp_path / "cache" / "tiny-lm.db")
    code, runs = _scan(tmp_path)
    assert runs == [] and code == 2


@pytest.mark.parametrize("forms", ["trackio's", "mixed"])
def test_a_trackio_rows_time_is_read_to_the_microsecond_as_python_reads_it(tmp_path, forms):
    """trackio stamps each row ``datetime.now(timezone.utc).isoformat()``; read back, a row's time is
    what ``datetime.fromisoformat(...).timestamp()`` gives, another form of timestamp too."""
    import random
    from datetime import datetime, timezone

    from triage_tui.core.read.trackers import trackio_db

    store = tmp_path / "tiny-lm.db"
    shutil.copy2(FIXTURES / "trackio" / "tiny-lm.db", store)
    rng = random.Random(0)
    with sqlite3.connect(store) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM metrics ORDER BY id")]
        stamps = {}
        for n, row_id in enumerate(ids):
            when = datetime.fromtimestamp(rng.uniform(1e9, 4e9), timezone.utc)
            stamp = (
                when.isoformat()
                if n % 5 or forms == "trackio's"
                else when.replace(microsecond=0).isoformat()  # a whole second
                if n % 10
                else when.replace(tzinfo=None).isoformat(sep=" ")  # not trackio's
            )
            stamps[row_id] = stamp
            conn.execute("UPDATE metrics SET timestamp = ? WHERE id = ?", (stamp, row_id))
        runs = dict(conn.execute("SELECT id, run_id FROM metrics"))
    for ref in trackio_db.list_runs(store):
        source = trackio_db.TrackioRun(store, ref.run)
        source.poll()
        wanted = [
            datetime.fromisoformat(stamps[i]).replace(tzinfo=timezone.utc).timestamp()
            for i in ids
            if runs[i] == ref.run
        ]
        assert source.scalars.get("train/loss").wall_times.tolist() == wanted


def test_a_store_given_alone_is_its_runs(tmp_path):
    shutil.copytree(FIXTURES / "mlflow-sqlite", tmp_path / "m", copy_function=shutil.copy2)
    store = tmp_path / "m" / "mlflow.db"
    _code, runs = _scan(store)
    ids = {name: run_id for run_id, name in _sql(store, "SELECT run_uuid, name FROM runs")}
    assert {run["name"]: Path(run["path"]) for run in runs} == {
        f"tiny-lm/{name}": store / run_id for name, run_id in ids.items()
    }


@pytest.mark.parametrize("directory", ["mlflow-sqlite-unfinished", "mlflow-files-unfinished"])
def test_mlflow_runs_that_did_not_finish_say_so_and_why(tmp_path, directory):
    """MLflow's own code wrote two runs that stopped after 10 steps: ``killed`` ended by
    ``mlflow.end_run(status="KILLED")``, ``running`` left RUNNING by a writer killed with SIGKILL
    (MLflow ends the run of any process that exits otherwise). ``killed`` ended, no crash: MLflow
    sets KILLED on purpose (a cancel, a pruned Optuna trial), and it says so; ``running`` is crashed
    where the store is a database (its writer holds it open while it lives), and scan exits 1, and
    unknown in a file store (a live writer holds no file of it open between points)."""
    shutil.copytree(FIXTURES / directory, tmp_path / directory, copy_function=shutil.copy2)
    before = _files(tmp_path)
    code, runs = _scan(tmp_path / directory)
    by_name = {run["name"]: run for run in runs}
    assert sorted(by_name) == ["tiny-lm/killed", "tiny-lm/running"]
    assert code == (1 if directory == "mlflow-sqlite-unfinished" else 0)
    for run in runs:
        assert run["metrics"]["loss"]["count"] == 10 and run["errors"] == []
        assert run["metrics"]["loss"]["min"] == min(v for _s, v in EXPECTED["healthy"]["train/loss"][:10])
        assert run["writer"] is None
    killed, running = by_name["tiny-lm/killed"], by_name["tiny-lm/running"]
    assert killed["state"] == "ended" and "crashed" not in {flag["kind"] for flag in killed["flags"]}
    assert killed["state_reason"] == (
        "MLflow recorded tiny-lm/killed KILLED: stopped on purpose before it finished "
        "(a cancelled run or a pruned trial), not a crash"
    )
    assert killed["crash_line"] is None
    if directory == "mlflow-sqlite-unfinished":
        assert running["state"] == "crashed" and running["crash_line"] == running["state_reason"]
        assert running["state_reason"] == (
            "MLflow records tiny-lm/running RUNNING, but no process of this node writes it: "
            "its writer died without ending the run"
        )
    else:
        assert running["state"] == "unknown" and running["crash_line"] is None
        assert "crashed" not in {flag["kind"] for flag in running["flags"]}
        assert running["state_reason"] == (
            "MLflow records tiny-lm/running RUNNING; its file store is open only while a point is appended, "
            "so its writer is not seen"
        )
    assert _files(tmp_path) == before


def test_an_mlflow_run_recorded_running_is_its_writers_while_a_process_holds_the_store(tmp_path):
    """RUNNING is a crash only where nothing writes the store: a process holding it open is the
    run's writer, and the run's silence since its last point decides (stalled here: its points are old)."""
    import subprocess
    import sys

    shutil.copytree(FIXTURES / "mlflow-sqlite-unfinished", tmp_path / "m", copy_function=shutil.copy2)
    store = tmp_path / "m" / "mlflow.db"
    hold = "import sys, time; f = open(sys.argv[1], 'r+b'); print(flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", hold, store], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline()  # the store is open
        _code, runs = _scan(tmp_path / "m")
    finally:
        holder.kill()
        holder.wait()
    run = next(run for run in runs if run["name"] == "tiny-lm/running")
    assert run["state"] == "stalled" and run["writer"]["pid"] == holder.pid
