"""`triage scan` as a user runs it: a subprocess, its stdout, stderr and exit status."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from builders.curves import STEPS, T0, story_series
from builders.tensorboard import write_scalars

ROOT = Path(__file__).resolve().parents[1]


def scan(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "triage_tui", "scan", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )


def write_series(log_dir: Path, series: dict[str, np.ndarray]) -> None:
    write_scalars(
        log_dir,
        {tag: list(zip(STEPS.tolist(), values.tolist(), strict=True)) for tag, values in series.items()},
        wall_time=T0,
    )


def healthy_series() -> dict[str, np.ndarray]:
    return {"train/ploss_0": 3.0 + 7.4 * np.exp(-STEPS / 300.0), "train/acc_0": 0.7 * (1 - np.exp(-STEPS / 300.0))}


def test_json_shape_and_exit_1_for_the_story_run(tmp_path):
    write_series(tmp_path / "k2-finetune" / "runs", story_series())
    write_series(tmp_path / "healthy", healthy_series())

    result = scan(tmp_path, "--json")

    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert list(document) == ["runs"]
    runs = {run["name"]: run for run in document["runs"]}
    assert set(runs) == {"k2-finetune/runs", "healthy"}
    story = runs["k2-finetune/runs"]
    assert story["status"] == "critical"
    assert story["vocab_size"] == 32_000 and story["vocab_size_source"] == "default"
    assert story["chance_loss"] == math.log(32_000)
    assert story["last_step"] == 2000
    assert story["metrics"]["loss"]["tag"] == "train/ploss_0" and story["metrics"]["loss"]["count"] == 41
    assert {f["kind"] for f in story["flags"]} >= {"loss_above_chance", "accuracy_at_chance"}
    # Written "in 2023" by a writer that has exited: ended, no stall flag (a post-mortem), so the run is ok.
    assert runs["healthy"]["status"] == "ok"
    assert runs["healthy"]["state"] == "ended" and runs["healthy"]["writer"] is None
    assert runs["healthy"]["state_reason"] == "no process of this node writes it"
    assert {(f["kind"], f["severity"]) for f in runs["healthy"]["flags"]} <= {("plateau", "info")}


def test_exit_0_when_no_run_is_critical_and_one_line_per_run(tmp_path):
    write_series(tmp_path / "a", healthy_series())
    write_series(tmp_path / "b", healthy_series())
    result = scan(tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].split()[1] == "a" and "step 2000" in lines[0]
    assert re.search(r"train/ploss_0 3\.0\d* vs ln 32000 = 10\.37", lines[0])
    assert "stalled" not in lines[0]  # its writer ended long ago: nothing to warn about


def test_human_line_names_the_flags(tmp_path):
    write_series(tmp_path / "k2", story_series())
    result = scan(tmp_path / "k2")
    assert result.returncode == 1
    (line,) = result.stdout.splitlines()
    assert "vs ln 32000 = 10.37" in line and "loss_above_chance" in line and "accuracy_at_chance" in line


def test_scan_writes_status_and_accuracy_as_the_tui_does(tmp_path):
    """One symbol set and one number format: the glyph of the TUI's runs table, accuracy in percent."""
    from triage_tui.core.watch.watcher import Watcher
    from triage_tui.tui.view_data import RowCache
    from triage_tui.tui.widgets.runs_table import row_cells

    write_series(tmp_path / "k2", story_series())
    write_series(tmp_path / "healthy", healthy_series())
    lines = {line.split()[1]: line for line in scan(tmp_path).stdout.splitlines()}
    statuses = {s.info.name: s for s in Watcher([tmp_path], use_watchdog=False).poll_once()}
    for name, line in lines.items():
        glyph, _, _, _, _, _, accuracy, _ = (cell.plain for cell in row_cells(RowCache().row(statuses[name]), 0.0))
        assert line.startswith(f"{glyph} {name}"), (glyph, line)
        assert re.search(rf"train/acc_0 {re.escape(accuracy)}(\s|$)", line), (accuracy, line)
        assert accuracy.endswith("%")
    assert lines["k2"].startswith("✖") and lines["healthy"].startswith("●")


def test_vocab_size_flag_moves_the_chance_line(tmp_path):
    write_series(tmp_path / "r", {"train/ploss_0": np.full(len(STEPS), math.log(32_000))})
    at_chance = json.loads(scan(tmp_path, "--json").stdout)["runs"][0]
    assert [f["kind"] for f in at_chance["flags"]][:1] == ["loss_at_chance"]
    result = scan(tmp_path, "--json", "--vocab-size", "4000", "--poll")
    run = json.loads(result.stdout)["runs"][0]
    assert run["vocab_size"] == 4000 and run["vocab_size_source"] == "flag"
    assert "loss_above_chance" in {f["kind"] for f in run["flags"]}


def test_missing_path_is_exit_2_with_one_line(tmp_path):
    result = scan(tmp_path / "no-such-run")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"triage: {tmp_path / 'no-such-run'}: no such file or directory"]


def test_malformed_manifest_is_an_error_of_its_run_exit_1_naming_the_file(tmp_path):
    write_series(tmp_path / "r", healthy_series())
    manifest = tmp_path / "r" / "triage.toml"
    manifest.write_text("[run]\nvocab_size = [32000]\n")
    before = manifest.read_bytes()
    result = scan(tmp_path, "--json")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    (error,) = run["errors"]
    assert error["source"] == "manifest" and error["path"] == str(manifest) and "vocab_size" in error["message"]
    assert run["metrics"]["loss"]["count"] > 0  # its event files are still read
    assert manifest.read_bytes() == before


def test_empty_directory_is_exit_2_with_what_was_looked_for(tmp_path):
    # A mistyped directory must not pass a CI gate: nothing found is no "all healthy".
    result = scan(tmp_path)
    assert result.returncode == 2 and result.stdout == "" and "no run here or below: looked for" in result.stderr
    assert json.loads(scan(tmp_path, "--json").stdout) == {"runs": []}


def test_a_damaged_record_is_skipped_and_reported_not_read_as_a_wrong_number(tmp_path):
    """One flipped bit in train/lr's value (9.99e-05 -> ~3.4e+34 unchecked) must not reach the
    numbers: the record is dropped and the run carries a `damaged_records` warning."""
    steps = list(range(0, 400, 10))
    event_file = write_scalars(
        tmp_path / "run",
        {"train/lr": [(s, 9.99e-05) for s in steps], "train/ploss_0": [(s, 3.0) for s in steps]},
        wall_time=T0,
    )
    data = bytearray(event_file.read_bytes())
    from tensorboard.compat.proto import event_pb2

    from builders.events import records

    lr_records = [
        (pos, length) for pos, length in records(bytes(data)) if b"train/lr" in data[pos + 12 : pos + 12 + length]
    ]
    pos, length = lr_records[20]
    event = event_pb2.Event.FromString(bytes(data[pos + 12 : pos + 12 + length]))
    assert abs(event.summary.value[0].simple_value - 9.99e-05) < 1e-9
    data[pos + 12 + length - 1] ^= 0x40  # the float's top byte: its exponent
    event_file.write_bytes(bytes(data))

    result = scan(tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    assert run["status"] == "warning"
    (flag,) = [f for f in run["flags"] if f["kind"] == "damaged_records"]
    assert flag["severity"] == "warning" and flag["value"] == 1.0 and event_file.name in flag["message"]
    text = scan(tmp_path)
    assert text.returncode == 0 and "damaged_records" in text.stdout
    exported = subprocess.run(
        [sys.executable, "-m", "triage_tui", "scalars", str(tmp_path / "run"), "--tag", "train/lr", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert exported.returncode == 0 and "skipped 1 damaged record(s)" in exported.stderr
    values = json.loads(exported.stdout)["tags"]["train/lr"]["values"]
    assert len(values) == len(steps) - 1 and max(values) < 1e-3


# ----------------------------------------------------------------- the warm-up


def write_points(log_dir: Path, series: dict[str, list[float]], steps: list[int]) -> None:
    """A live run's points: written now (a run whose last point is days old is stalled, not warming up)."""
    write_scalars(log_dir, {tag: list(zip(steps, values, strict=True)) for tag, values in series.items()})


def test_a_run_above_chance_from_its_first_points_is_not_hidden_by_the_warm_up(tmp_path):
    """A live run logging every step, loss 10.4 -> 12.5 (above ln V) at 1 % accuracy over 39 steps:
    inside the warm-up by its steps, yet a loss above the chance band is wrong from the start."""
    steps = list(range(1, 40))
    losses = np.linspace(10.4, 12.5, len(steps)).tolist()
    write_points(tmp_path / "live", {"train/ploss_0": losses, "train/acc_0": [0.01] * len(steps)}, steps)

    result = scan(tmp_path, "--json")
    assert result.returncode == 1, result.stdout
    (run,) = json.loads(result.stdout)["runs"]
    flags = {flag["kind"]: flag for flag in run["flags"]}
    assert run["status"] == "critical" and flags["loss_above_chance"]["severity"] == "critical"
    assert "above ln 32000 = 10.37" in flags["loss_above_chance"]["message"]
    # Loss and accuracy *at* chance are still left to the warm-up, and the run says until when.
    assert "accuracy_at_chance" not in flags
    assert flags["warming_up"]["step"] == 101 and flags["warming_up"]["severity"] == "info"
    line = scan(tmp_path).stdout
    assert line.startswith("✖ live") and "loss_above_chance" in line


def test_a_run_inside_the_warm_up_says_so_and_until_when(tmp_path):
    """Three points of a from-scratch run near ln V: not judged yet, so not shown healthy either."""
    write_points(
        tmp_path / "fresh", {"train/ploss_0": [10.5, 10.3, 10.1], "train/acc_0": [0.0, 0.01, 0.02]}, [0, 10, 20]
    )

    result = scan(tmp_path, "--json")
    assert result.returncode == 0, result.stdout
    (run,) = json.loads(result.stdout)["runs"]
    assert run["status"] == "ok"
    (warming,) = [flag for flag in run["flags"] if flag["kind"] == "warming_up"]
    assert warming["step"] == 100 and warming["severity"] == "info"
    assert "warming up until step 100 (and 5 points); 3 points to step 20 so far" in warming["message"]
    line = scan(tmp_path).stdout
    assert line.startswith("◌ fresh") and "(warming_up)" in line, line


# ----------------------------------------------------------------- the run's state (its writer process)

# torch's SummaryWriter logging 20 points of a learning run, dated `sys.argv[2]` seconds back by the
# writer's own `walltime` (the silence a trainer stopped that long ago leaves, without waiting for
# it), then staying alive ("stay": until its stdin closes) or ending, crashed or not ("crash": a
# traceback, as a trainer's `> train.log 2>&1` holds it).
LOGGED_BACK = """
import sys, time
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter(log_dir=sys.argv[1], flush_secs=1)
start = time.time() - float(sys.argv[2])
for step in range(20):
    writer.add_scalar("train/ploss_0", 3.0 - step * 0.01, global_step=step * 10, walltime=start + step)
    print(f"step {step * 10} loss {3.0 - step * 0.01}", flush=True)
writer.flush()
if sys.argv[3] == "stay":
    sys.stdin.read()
elif sys.argv[3] == "crash":
    def optimizer_step():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    optimizer_step()
"""


def test_scan_says_whether_each_runs_writer_is_alive_here(tmp_path):
    """`triage scan --json` beside real writers: one writing now (live), one that exited ten minutes
    after its last point (ended: no warning, where the silence alone used to be one), one stopped
    with SIGSTOP ten minutes after its last point (stalled: critical, exit 1) and one that died with
    a traceback in its console log (crashed: critical, the line said)."""
    import signal

    from builders.children import SUMMARY_WRITER_LOOP, ended, process_state, start, wait_until
    from builders.events import find_event_files
    from triage_tui.core.read.events.reader import RunEvents

    def points(run: Path) -> int:
        events = RunEvents()
        events.set_files(find_event_files(run) if run.is_dir() else [])
        events.poll()
        series = events.scalars.get("train/ploss_0")
        return len(series) if series is not None else 0

    live, finished, stalled, crashed = (tmp_path / name for name in ("live", "ended", "stalled", "crashed"))
    assert start(LOGGED_BACK, str(finished), "600", "end").wait(timeout=120) == 0
    crashed.mkdir()
    with open(crashed / "train.log", "w") as log:
        assert start(LOGGED_BACK, str(crashed), "600", "crash", stdout=log, stderr=subprocess.STDOUT).wait(120) == 1
    with (
        ended(start(SUMMARY_WRITER_LOOP, str(live))) as writing,
        ended(start(LOGGED_BACK, str(stalled), "600", "stay")) as stopped,
    ):
        wait_until(lambda: points(live) >= 3 and points(stalled) == 20, "both writers' points")
        stopped.send_signal(signal.SIGSTOP)
        wait_until(lambda: process_state(stopped.pid) == "T", "the kernel to stop the writer")
        result = scan(tmp_path, "--json")
        line = scan(tmp_path).stdout
    assert result.returncode == 1, result.stderr
    runs = {run["name"]: run for run in json.loads(result.stdout)["runs"]}
    kinds = {name: {flag["kind"]: flag for flag in run["flags"]} for name, run in runs.items()}

    assert runs["live"]["state"] == "live"
    assert runs["live"]["writer"]["pid"] == writing.pid and runs["live"]["writer"]["evidence"] == "event file name"
    assert f"pid {writing.pid} named in events.out.tfevents." in runs["live"]["writer"]["detail"]
    assert not {"stalled", "crashed"} & set(kinds["live"])

    assert runs["ended"]["state"] == "ended" and runs["ended"]["writer"] is None
    assert "stalled" not in kinds["ended"] and runs["ended"]["status"] == "ok", kinds["ended"]

    assert runs["stalled"]["state"] == "stalled" and runs["stalled"]["status"] == "critical"
    assert runs["stalled"]["writer"]["pid"] == stopped.pid
    flag = kinds["stalled"]["stalled"]
    assert flag["severity"] == "critical" and flag["step"] == 190 and flag["value"] is None
    assert f"writer pid {stopped.pid} (python" in flag["message"] and "stopped (SIGSTOP or ctrl-Z)" in flag["message"]
    assert flag["message"] == runs["stalled"]["state_reason"]

    error = "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert runs["crashed"]["state"] == "crashed" and runs["crashed"]["crash_line"] == error
    assert kinds["crashed"]["crashed"]["severity"] == "critical" and error in kinds["crashed"]["crashed"]["message"]
    assert "stalled" not in kinds["crashed"] and "crashed" in line and "stalled" in line


def test_a_flag_kind_several_files_raise_is_named_once_with_its_count(tmp_path):
    """Two unreadable files of one run: its line names ``unreadable_file`` once, with how many, and
    ``scan --json`` keeps one flag a file (each with its own line)."""
    write_series(tmp_path / "r", healthy_series())
    (tmp_path / "r" / "triage.toml").write_text("[run]\nvocab_size = [32000]\n")
    state = tmp_path / "r" / "checkpoint-100" / "trainer_state.json"
    state.parent.mkdir()
    state.write_text('{"log_history": [{"step": 1, "loss": ')
    flags = [flag["kind"] for flag in json.loads(scan(tmp_path, "--json").stdout)["runs"][0]["flags"]]
    assert flags.count("unreadable_file") == 2
    (line,) = [line for line in scan(tmp_path).stdout.splitlines() if "unreadable_file" in line]
    assert line.count("unreadable_file") == 1 and "unreadable_file x2" in line
