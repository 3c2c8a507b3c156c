"""W&B runs read from disk: real offline runs written by the wandb package, compared point for point
with W&B's own reader, read live while being written, after a SIGKILL, damaged, and with define_metric."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from builders.tensorboard import write_drafter_checkpoint, write_scalars
from builders.waiting import out_of_patience, wait_for
from builders.wandb_runs import (
    HOSTILE_RECORDS,
    REPO,
    config_record,
    frame_records,
    history_record,
    leet_points,
    offline_env,
    records_of,
    run_file,
    same_points,
    start_script,
    with_record,
    write_run,
    write_step_metric_run,
)
from triage_tui.core.read.runs.discover import discover_runs
from triage_tui.core.read.sources import RunSources
from triage_tui.core.read.wandb.history import WandbHistory
from triage_tui.core.watch.watcher import Watcher

V = 32_000
LN_V = math.log(V)


def read(path: Path, prefix: str = "") -> WandbHistory:
    history = WandbHistory(prefix)
    history.set_files([path])
    history.poll()
    return history


def points_of(history: WandbHistory) -> dict[str, list[tuple[int, float, float]]]:
    out = {}
    for tag in history.scalars.tags():
        steps, walls, values = history.scalars.series[tag].columns()
        out[tag] = list(zip(steps.tolist(), walls.tolist(), values.tolist(), strict=True))
    return out


@pytest.fixture(scope="module")
def story_run(tmp_path_factory) -> Path:
    """A SpecForge-named offline run at chance (the founding story's numbers), NaN and inf included."""
    directory = tmp_path_factory.mktemp("story")
    rows, steps = [], []
    for n in range(40):
        row: dict[str, Any] = {f"train/ploss_{i}": 18.0 + 0.05 * ((n * 7 + i) % 11) + 0.3 * i for i in range(7)}
        row.update({f"train/acc_{i}": 0.02 + 0.001 * ((n + i) % 5) for i in range(7)})
        row["train/loss"] = sum(0.8**i * row[f"train/ploss_{i}"] for i in range(7))
        row["train/lr"] = 1e-4
        row["note"] = "text is not a scalar"
        row["flag"] = True
        row["nested"] = {"grad_norm": 1.0 + n / 3}
        if n == 30:
            row["train/grad_norm"] = float("nan")
        if n == 31:
            row["train/grad_norm"] = float("inf")
        rows.append(row)
        steps.append(50 * n)
    write_run(directory, rows, steps=steps, config={"model": {"draft_vocab_size": V}, "lr": 1e-4})
    return directory


def test_points_are_exactly_what_wandbs_own_reader_yields(story_run):
    path = run_file(story_run)
    history = read(path)
    mine = points_of(history)
    theirs = leet_points(path)
    assert set(mine) == set(theirs)
    assert "nested.grad_norm" in mine and "note" not in mine and "flag" not in mine and "_runtime" not in mine
    for tag in theirs:
        assert same_points(mine[tag], theirs[tag]), tag
    grad = {s: v for s, _, v in mine["train/grad_norm"]}
    assert math.isnan(grad[1500]) and grad[1550] == math.inf
    assert history.totals.corrupt_records == 0 and history.totals.pending_bytes == 0
    assert history.config["model"] == {"draft_vocab_size": V}


def test_scan_flags_a_wandb_run_like_a_tensorboard_run(story_run):
    (status,) = Watcher([story_run], use_watchdog=False, strict=True).poll_once(now=time.time())
    document = status.to_json()
    assert document["sources"] == ["wandb"] and document["trainer"] == "specforge"
    assert document["vocab_size"] == V and document["vocab_size_source"] == "wandb config"
    assert document["metrics"]["loss"]["tag"] == "train/ploss_0"
    assert [p["position"] for p in document["metrics"]["per_position_accuracy"]] == list(range(7))
    kinds = {flag["kind"] for flag in document["flags"]}
    assert {"loss_above_chance", "accuracy_at_chance"} <= kinds and status.status == "critical"


def test_scalars_command_exports_the_wandb_points(story_run):
    env = {**offline_env(), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "triage_tui", "scalars", str(story_run), "--format", "json", "--tag", "train/*"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    tags = json.loads(proc.stdout)["tags"]
    theirs = leet_points(run_file(story_run))
    for tag, series in tags.items():
        values = [float(v) for v in series["values"]]
        assert same_points(list(zip(series["steps"], series["wall_times"], values, strict=True)), theirs[tag]), tag
    assert set(tags) == {t for t in theirs if t.startswith("train/")}


# ----------------------------------------------------------------- define_metric


def test_define_metric_step_keys(tmp_path):
    """HF Trainer's WandbCallback: every key against train/global_step; one key against its own step."""
    rows = []
    for n in range(5):
        rows.append({"train/loss": 10.0 - n, "train/global_step": 100 * n})
        rows.append({"eval/acc": 0.1 * n, "eval/step": n})
    rows.append({"late/metric": 1.0})  # before any late/step: W&B's step_sync fills in late/step = 0
    rows.append({"unsynced/metric": 2.0})  # step_sync off and no unsynced/step: no step to key it by
    path = write_run(
        tmp_path,
        rows,
        define=[
            ("train/global_step", None, None),
            ("*", "train/global_step", None),
            ("eval/acc", "eval/step", None),
            ("late/metric", "late/step", None),
            ("unsynced/metric", "unsynced/step", False),
        ],
    )
    history = read(path)
    mine = points_of(history)
    assert [s for s, _, _ in mine["train/loss"]] == [0, 100, 200, 300, 400]
    assert [s for s, _, _ in mine["eval/acc"]] == [0, 1, 2, 3, 4]
    # The step metric itself is against _step (rows 0, 2, 4, ... logged it; step_sync repeats it in the others).
    assert [s for s, _, _ in mine["train/global_step"]][:2] == [0, 1]
    assert [s for s, _, _ in mine["late/metric"]] == [0]
    assert "unsynced/metric" not in mine and history.unkeyed_points >= 1
    # Values are exactly W&B's; only the x-axis differs from _step.
    theirs = leet_points(path)
    assert [v for _, _, v in mine["train/loss"]] == [v for _, _, v in theirs["train/loss"]]


# ----------------------------------------------------------------- a run being written


LIVE_WRITER = """
run = init(sys.argv[1], flush=0.05, config={"draft_vocab_size": 32000})
for line in sys.stdin:
    n = int(line)
    # commit=True, as SpecForge's WandbTracker does: with an explicit step W&B otherwise keeps the
    # newest row in memory until the next step arrives.
    run.log({"train/ploss_0": 10.37 + 0.01 * (n % 3), "train/acc_0": 0.0001}, step=50 * n, commit=True)
    print(n, flush=True)
run.finish()
"""


def test_a_live_run_is_read_as_it_grows_and_flagged(tmp_path):
    proc = start_script(LIVE_WRITER, str(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    clock = [2_000_000_000.0]
    watcher = Watcher([tmp_path], use_watchdog=False, rescan_interval=0.0, clock=lambda: clock[0])
    try:
        seen_counts = []
        for n in range(24):
            proc.stdin.write(f"{n}\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == str(n)
            count = _wait_for_points(watcher, n + 1)
            seen_counts.append(count)
        (status,) = watcher.poll_once()
        assert status.info.sources == ("wandb",) and status.last_step == 50 * 23
        assert status.metrics.loss.tag == "train/ploss_0" and status.metrics.loss.count == 24
        assert "loss_at_chance" in {flag.kind for flag in status.flags}
        reader = watcher._runs[status.info.path].events
        assert reader.wandb.newest.totals.corrupt_records == 0  # a tail being written is never damage
        assert seen_counts == list(range(1, 25))
        proc.stdin.close()
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_for_points(watcher: Watcher, count: int, deadline: float = 60.0) -> int:
    """Poll until the run shows `count` points of train/ploss_0 (the writer's service writes on its own time)."""
    start = time.monotonic()
    while not out_of_patience(start, deadline):
        statuses = watcher.poll_once()
        if statuses:
            metric = statuses[0].metrics.loss
            if metric is not None and metric.count >= count:
                return metric.count
        time.sleep(0.02)
    raise AssertionError(f"the run never showed {count} points")


# ----------------------------------------------------------------- killed, half-written, damaged


KILLED_WRITER = """
run = init(sys.argv[1], flush=0.02)
n = 0
while True:
    # Rows of ~6 KB: records that span 32 KiB blocks (FIRST/MIDDLE/LAST chunks).
    run.log({**{f"train/ploss_{i}": n + i / 1000 for i in range(250)}, "marker": n}, step=n)
    n += 1
"""


def test_a_run_killed_mid_write(tmp_path):
    proc = start_script(KILLED_WRITER, str(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        start = time.monotonic()
        while not out_of_patience(start, 120):
            files = list(tmp_path.glob("wandb/*run-*/run-*.wandb"))
            if files and files[0].stat().st_size > 200_000:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the writer never wrote 200 kB")
    finally:
        # The child and its wandb-core service (which runs in a session of its own), mid-write.
        for pid in [proc.pid, *_descendants(proc.pid)]:
            os.kill(pid, signal.SIGKILL)
        proc.wait()
    path = run_file(tmp_path)
    history = read(path)
    assert history.totals.corrupt_records == 0
    mine = points_of(history)
    theirs = leet_points(path)
    assert same_points(mine["marker"], theirs["marker"]) and len(mine["marker"]) >= 10
    assert [s for s, _, _ in mine["marker"]] == list(range(len(mine["marker"])))


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc: parent ids)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found.extend(children)
        frontier = children
    return found


def _history_offsets(path: Path) -> list[tuple[int, int]]:
    """(start, end) file offsets of each history record of an undamaged run file."""
    from triage_tui.core.read.wandb.framing import WANDB_HEADER, frame
    from triage_tui.core.read.wandb.records import wandb_protos

    base = len(WANDB_HEADER)
    framed = frame(path.read_bytes()[base:], base)
    starts = [0] + framed.ends[:-1]
    return [
        (base + a, base + b)
        for a, b, payload in zip(starts, framed.ends, framed.records, strict=True)
        if wandb_protos().Record.FromString(payload).WhichOneof("record_type") == "history"
    ]


def test_a_half_written_tail_waits_then_completes(story_run, tmp_path):
    source = run_file(story_run).read_bytes()
    spans = _history_offsets(run_file(story_run))
    start, end = spans[10]
    live = tmp_path / "run-x.wandb"
    live.write_bytes(source[: start + (end - start) // 2])  # the 11th row half written
    history = WandbHistory()
    history.set_files([live])
    stats = history.poll()
    assert len(history.scalars.series["train/ploss_0"]) == 10
    assert stats.corrupt_records == 0 and stats.pending_bytes > 0
    with open(live, "ab") as handle:
        handle.write(source[start + (end - start) // 2 :])
    stats = history.poll()
    assert len(history.scalars.series["train/ploss_0"]) == 40 and stats.corrupt_records == 0
    whole = points_of(read(run_file(story_run)))
    assert all(same_points(series, whole[tag]) for tag, series in points_of(history).items())


def test_a_damaged_record_is_skipped_and_reported(story_run, tmp_path):
    path = run_file(story_run)
    spans = _history_offsets(path)
    data = bytearray(path.read_bytes())
    start, end = spans[5]
    data[start + (end - start) // 2] ^= 0xFF  # one flipped byte inside the 6th row
    damaged = tmp_path / "run-y.wandb"
    damaged.write_bytes(bytes(data))
    history = read(damaged)
    assert history.totals.corrupt_records == 1
    steps = [s for s, _, _ in points_of(history)["train/ploss_0"]]
    assert steps == [50 * n for n in range(40) if n != 5]
    env = {**offline_env(), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "triage_tui", "scalars", str(damaged), "--tag", "train/ploss_0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0 and "skipped 1 damaged record" in proc.stderr
    assert len(proc.stdout.splitlines()) == 1 + 39
    # scan: the run carries the same damaged_records warning an event file's damage gives.
    (status,) = Watcher([damaged], use_watchdog=False).poll_once(now=time.time())
    (flag,) = [f for f in status.flags if f.kind == "damaged_records"]
    assert flag.value == 1 and "run-y.wandb" in flag.message


def test_a_file_that_is_not_a_wandb_run(tmp_path):
    bogus = tmp_path / "run-z.wandb"
    bogus.write_bytes(b"not a run file at all")
    history = read(bogus)
    assert history.problems[bogus].startswith("not a W&B run file")
    env = {**offline_env(), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "triage_tui", "scalars", str(bogus)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not a W&B run file" in proc.stderr


# ----------------------------------------------------------------- discovery: one run, both sources


def test_a_run_with_both_sources_is_one_run(tmp_path):
    out = tmp_path / "out"
    write_drafter_checkpoint(out / "epoch_0_step_100")
    write_scalars(out / "runs", {"train/ploss_0": [(0, 10.4), (50, 9.0)]})
    write_run(out, [{"train/ploss_0": 10.4}, {"train/ploss_0": 9.5}], steps=[0, 50])
    (info,) = discover_runs([tmp_path])
    assert info.path == out and info.sources == ("tensorboard", "wandb")
    reader = RunSources()
    reader.set_files([("tensorboard", info.event_files), ("wandb", info.wandb_files)])
    reader.poll()
    assert reader.scalars.tags() == ["train/ploss_0", "wandb/train/ploss_0"]
    assert reader.scalars.series["wandb/train/ploss_0"].values.tolist() == [10.4, 9.5]
    (status,) = Watcher([tmp_path], use_watchdog=False, strict=True).poll_once()
    assert status.to_json()["sources"] == ["tensorboard", "wandb"]
    assert status.metrics.loss.tag == "train/ploss_0"
    # Pointed at the W&B directory or one W&B run in it, triage shows the output dir's run.
    for inner in (out / "wandb", info.wandb_files[0].parent):
        (inside,) = discover_runs([inner])
        assert inside.path == out and inside.sources == ("tensorboard", "wandb")


def test_without_the_wandb_package_a_wandb_run_says_why(story_run):
    """The extra absent: the run is listed with a one-line reason, nothing crashes."""
    code = (
        "import sys, json; sys.modules['wandb'] = None\n"
        "from triage_tui.core.watch.watcher import Watcher\n"
        f"(s,) = Watcher([{str(story_run)!r}], use_watchdog=False).poll_once()\n"
        "print(json.dumps(s.to_json()))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**offline_env(), "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    # Nothing of the run could be read: status "error", the reason its error (the fault boundary).
    assert document["sources"] == ["wandb"] and document["status"] == "error"
    assert "triage-tui[wandb]" in document["source_errors"][0]
    (error,) = document["errors"]
    assert error["source"] == "wandb" and "triage-tui[wandb]" in error["message"]


# ----------------------------------------------------------------- the TUI


async def test_the_tui_shows_a_wandb_run_against_the_chance_line(story_run):
    """The TUI on a W&B-only run: flagged, its loss drawn under the chance line, its trainer named."""
    from triage_tui.tui.app import TriageApp
    from triage_tui.tui.widgets.loss_chart import LossChart

    app = TriageApp([story_run], poll_interval=0.2, use_watchdog=False, device="cpu")
    app.animation_level = "none"
    async with app.run_test(size=(80, 24)) as pilot:
        chart = app.main.query_one(LossChart)
        # A deadline only turns a hang into a failure; the wait is on the app's own polls.
        await wait_for(
            pilot, lambda: app.rows and chart.series and chart.series.last_step == 50 * 39, what="the W&B run's chart"
        )
        assert app.rows[0].status == "critical" and app.rows[0].vocab_size == V
        assert chart.series.tag == "train/ploss_0" and chart.series.chance_loss == pytest.approx(LN_V)
        assert "specforge" in str(app.main.query_one("#flags-pane").border_subtitle)


# ----------------------------------------------------------------- records with a right CRC and impossible contents


@pytest.fixture(scope="module")
def step_metric_run(tmp_path_factory) -> Path:
    """A healthy run (wandb's own writer) whose acc is logged against the step metric epoch_step."""
    directory = tmp_path_factory.mktemp("healthy")
    write_step_metric_run(directory)
    return directory


def test_the_builders_framing_is_wandbs(step_metric_run, tmp_path):
    """Hostile records are framed by the builder: its framing of a real run's records is byte for byte
    wandb-core's file, and a record spanning blocks (FIRST, MIDDLE, LAST) is read by W&B's own reader."""
    source = run_file(step_metric_run)
    records = records_of(source)
    assert frame_records(records) == source.read_bytes()
    note = json.dumps("x" * 100_000)  # a row of ~100 kB: four 32 KiB blocks
    wide = history_record(("loss", "2.5"), ("_step", "8"), ("_timestamp", "1700000000.5"), ("note", note), step=8)
    long_file = tmp_path / "run-long.wandb"
    long_file.write_bytes(frame_records([*records[:-1], wide, records[-1]]))
    theirs = leet_points(long_file)
    assert theirs["loss"][-1][::2] == (8, 2.5)
    assert points_of(read(long_file))["loss"] == theirs["loss"]


@pytest.mark.parametrize("kind", sorted(HOSTILE_RECORDS))
def test_an_impossible_record_is_damage_never_a_number(kind, step_metric_run, tmp_path, triage):
    healthy = run_file(step_metric_run)
    bad = with_record(
        healthy, tmp_path / "tree" / "bad" / healthy.relative_to(step_metric_run), HOSTILE_RECORDS[kind]()
    )
    shutil.copytree(step_metric_run, tmp_path / "tree" / "healthy", symlinks=True)  # wandb/latest-run

    history = read(bad)
    assert history.totals.corrupt_records == 1 and history.damaged == {bad: 1}
    assert history.problems == {} and history.unkeyed_points == 0
    expected = read(healthy)
    assert points_of(history) == points_of(expected)  # every good record read, nothing from the bad one
    assert history.config == expected.config

    proc = triage("scan", "--json", str(tmp_path / "tree"))
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    runs = {Path(r["path"]).relative_to(tmp_path / "tree").parts[0]: r for r in json.loads(proc.stdout)["runs"]}
    assert set(runs) == {"bad", "healthy"}
    (flag,) = [f for f in runs["bad"]["flags"] if f["kind"] == "damaged_records"]
    assert flag["value"] == 1
    alone = triage("scan", "--json", str(tmp_path / "tree" / "healthy"))
    assert alone.returncode == proc.returncode or runs["bad"]["status"] == "critical"
    (alone_run,) = json.loads(alone.stdout)["runs"]
    # Identical, but for the name: a run's name is its path from the directory scanned.
    assert runs["healthy"]["name"] == "healthy/" + alone_run["name"]
    assert {**alone_run, "name": None} == {**runs["healthy"], "name": None}

    scalars = triage("scalars", str(bad))
    assert scalars.returncode in (0, 1) and "Traceback" not in scalars.stderr, scalars.stderr[-2000:]
    assert "skipped 1 damaged record" in scalars.stderr


def test_records_near_the_bounds_are_read(step_metric_run, tmp_path):
    """What a writer can mean stays data: many brackets that nest shallowly, brackets inside a string,
    a key of exactly the bound, the largest int64 step, a fractional step metric (not a step: unkeyed)."""
    from triage_tui.core.read.wandb.records import INT64_MAX, MAX_JSON_DEPTH, MAX_KEY_CHARS

    healthy = run_file(step_metric_run)
    shallow = "[" + ",".join(["[1, 2]"] * 500) + "]"
    nested_config = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    wide_key = "k" * MAX_KEY_CHARS
    rows = [
        history_record(("pairs", shallow), ("text", json.dumps("[" * 5000)), ("ok", "1.5"), ("_step", "100"), step=100),
        history_record((wide_key, "2.5"), ("_step", str(INT64_MAX)), step=101),
        history_record(("acc", "0.5"), ("epoch_step", "2.5"), ("_step", "102"), step=102),
    ]
    records = records_of(healthy)
    path = tmp_path / "run-near.wandb"
    path.write_bytes(frame_records([*records[:-1], *rows, config_record("deep", nested_config), records[-1]]))
    history = read(path)
    assert history.totals.corrupt_records == 0
    mine = points_of(history)
    assert [(s, v) for s, _, v in mine["ok"]] == [(100, 1.5)]
    assert [(s, v) for s, _, v in mine[wide_key]] == [(INT64_MAX, 2.5)]
    assert history.unkeyed_points == 1 and len(mine["acc"]) == 8  # the healthy run's eight
    assert history.config["deep"] == json.loads(nested_config)
