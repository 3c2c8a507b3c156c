"""`triage scalars`: every point exact, csv and strict json, tag globs, runs as directories, bad input."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from builders.events import frame, reference_points, scalar_event
from triage_tui.cli import main


@pytest.fixture()
def run_dir(tmp_path):
    """A SpecForge-like run: losses and accuracies in <run>/runs/, a second writer, a hidden copy."""
    logdir = tmp_path / "run" / "runs"
    with SummaryWriter(log_dir=str(logdir)) as writer:
        for step in range(120):
            writer.add_scalar("train/ploss_0", 10.37 - step * 0.01, step, walltime=1.7e9 + step)
            writer.add_scalar("train/acc_0", step / 1000.0, step, walltime=1.7e9 + step)
    with SummaryWriter(log_dir=str(logdir)) as writer:
        for step, value in enumerate([1.0, math.nan, math.inf, -math.inf, 1e-300]):
            writer.add_scalar("eval/loss", value, step, walltime=1.8e9 + step, new_style=True, double_precision=True)
    hidden = tmp_path / "run" / ".trash"
    hidden.mkdir()
    (hidden / "events.out.tfevents.9.h").write_bytes(frame(scalar_event("ghost", 0, 1.0, 1.0).SerializeToString()))
    return tmp_path / "run"


def _cli(capsys, *argv):
    code = main(["scalars", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_csv_has_every_point_exactly(capsys, run_dir):
    code, out, err = _cli(capsys, run_dir)
    assert code == 0 and err == ""
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["tag", "step", "wall_time", "value"]
    want = reference_points(sorted(run_dir.glob("runs/*tfevents*")))
    got: dict[str, list] = {}
    for tag, step, wall, value in rows[1:]:
        got.setdefault(tag, []).append((int(step), float(wall), float(value)))
    assert sorted(got) == ["eval/loss", "train/acc_0", "train/ploss_0"]  # not the hidden dir's "ghost"
    for tag, points in want.items():
        assert [(s, w) for s, w, _ in got[tag]] == [(s, w) for s, w, _ in points]
        np.testing.assert_array_equal([v for *_, v in got[tag]], [v for *_, v in points])  # bit-exact via repr
    assert [r[3] for r in rows if r[0] == "eval/loss"] == ["1.0", "nan", "inf", "-inf", "1e-300"]


def test_json_is_strict_and_keeps_non_finite_values_as_strings(capsys, run_dir):
    code, out, _ = _cli(capsys, run_dir, "--format", "json", "--tag", "eval/*")

    def refuse(token):
        raise AssertionError(f"bare {token} in JSON")

    doc = json.loads(out, parse_constant=refuse)
    assert list(doc["tags"]) == ["eval/loss"]
    series = doc["tags"]["eval/loss"]
    assert series["steps"] == [0, 1, 2, 3, 4]
    assert series["values"] == [1.0, "NaN", "Infinity", "-Infinity", 1e-300]
    assert [float(v) for v in series["values"]][3] == -math.inf
    assert series["wall_times"] == [1.8e9 + s for s in range(5)]


def test_tag_globs_select_and_an_event_file_works_alone(capsys, run_dir):
    code, out, _ = _cli(capsys, run_dir, "--tag", "train/acc_*", "--tag", "nothing*")
    tags = {row[0] for row in list(csv.reader(io.StringIO(out)))[1:]}
    assert code == 0 and tags == {"train/acc_0"}
    # The first writer's file, the bigger one: by name, a process's eleventh writer (".10") sorts
    # before its tenth (".9"), and the suite's workers make many.
    first = max((run_dir / "runs").glob("*tfevents*"), key=lambda path: path.stat().st_size)
    code, out, _ = _cli(capsys, first, "--format", "json")
    assert code == 0 and sorted(json.loads(out)["tags"]) == ["train/acc_0", "train/ploss_0"]
    code, out, err = _cli(capsys, run_dir, "--tag", "nope")
    assert code == 0 and out == "tag,step,wall_time,value\n" and "no tag matches nope" in err


def test_damaged_records_are_reported_on_stderr(capsys, tmp_path):
    good = [frame(scalar_event("loss", s, float(s), 1e9 + s).SerializeToString()) for s in range(20)]
    at = good[10].index(b"loss")
    good[10] = good[10][:at] + b"l0ss" + good[10][at + 4 :]  # a flipped tag byte: the data CRC fails
    path = tmp_path / "events.out.tfevents.1.h"
    path.write_bytes(b"".join(good))
    code, out, err = _cli(capsys, path)
    assert code == 0
    assert len(out.splitlines()) == 1 + 19
    assert err.strip() == f"triage scalars: {path}: skipped 1 damaged record(s), 0 byte(s)"


@pytest.mark.parametrize(
    "make, what",
    [
        (lambda p: p / "missing", "no such file or directory"),
        (lambda p: p, "no event files (*tfevents*) or W&B run files (run-*.wandb) below it"),
        (
            lambda p: (p / "notes.txt").write_text("hello, not a record\n" * 3) and p / "notes.txt",
            "not a TensorBoard event file: no valid record in it",
        ),
        (
            lambda p: os.mkfifo(p / "events.out.tfevents.fifo") or p / "events.out.tfevents.fifo",
            "not a regular file or a directory",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, make, what):
    path = make(tmp_path)
    code, out, err = _cli(capsys, path)
    assert code == 2 and out == ""
    assert err == f"triage: {path}: {what}\n"


def test_end_to_end_through_python_m(run_dir, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "triage_tui", "scalars", str(run_dir), "--tag", "train/ploss_0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 121 and lines[1] == "train/ploss_0,0,1700000000.0,10.369999885559082"
    missing = subprocess.run(
        [sys.executable, "-m", "triage_tui", "scalars", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and missing.stderr == f"triage: {tmp_path / 'nope'}: no such file or directory\n"


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_output_is_the_same_in_small_pieces(capsys, monkeypatch, run_dir, tmp_path, fmt):
    from triage_tui.commands import scalars

    code, whole, _ = _cli(capsys, run_dir, "--format", fmt)
    monkeypatch.setattr(scalars, "_PIECE_ROWS", 7)  # many pieces: a series' rows cut in several
    with open(tmp_path / "out", "w", encoding="utf-8") as out:
        monkeypatch.setattr(sys, "stdout", out)
        code_pieces = main(["scalars", str(run_dir), "--format", fmt])
    assert code == code_pieces == 0
    assert (tmp_path / "out").read_text(encoding="utf-8") == whole
    if fmt == "json":
        first = json.loads(whole)["tags"]["train/acc_0"]["values"][:3]
        assert first == [0.0, float(np.float32(0.001)), float(np.float32(0.002))]


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_the_plain_path_writes_the_same_bytes(capsys, monkeypatch, run_dir, fmt):
    """csv.writer + repr and json.dumps (the plain path benchmarks/ab.py measures the numpy formatter
    against) write what the fast path writes, byte for byte."""
    from triage_tui.commands import scalars

    with SummaryWriter(log_dir=str(run_dir / "runs")) as writer:  # a tag csv must quote, one JSON escapes
        for step, value in enumerate([0.1, 1e16, -2.5e-5, 123456789.0, math.nan]):
            writer.add_scalar('a,"b', value, step, walltime=1.9e9 + step / 3)
            writer.add_scalar("lösung/ä", -value, step, walltime=1.9e9 + step / 7)
    code, fast, _ = _cli(capsys, run_dir, "--format", fmt)
    monkeypatch.setattr(scalars, "PLAIN_TEXT", True)
    monkeypatch.setattr(scalars, "join_rows", lambda *a: pytest.fail("the plain path formats with numpy"))
    code_plain, plain, _ = _cli(capsys, run_dir, "--format", fmt)
    assert code == code_plain == 0
    assert plain == fast
    assert '"a,""b"' in fast if fmt == "csv" else '"l\\u00f6sung/\\u00e4"' in fast


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_reader_that_stops_early_gets_no_traceback(tmp_path, fmt):
    """`triage scalars RUN | head -c 20`: the pipe closes early; triage ends quietly with 141 (128 + SIGPIPE)."""
    logdir = tmp_path / "run" / "runs"
    with SummaryWriter(log_dir=str(logdir)) as writer:
        for step in range(20_000):  # far more than a pipe buffer holds
            writer.add_scalar("train/ploss_0", 10.0 - step * 1e-4, step, walltime=1.7e9 + step)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    script = (
        "import sys; import triage_tui.commands.scalars as s; from triage_tui.cli import main; "
        "s._PIECE_ROWS = 1000; "
        "sys.exit(main(sys.argv[1:]))"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script, "scalars", str(tmp_path / "run"), "--format", fmt],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert len(process.stdout.read(20)) == 20
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert stderr == ""


def test_a_console_only_run_exports_its_console_points(capsys, tmp_path):
    """SpecForge's default keeps no tracker: its curves are the console lines beside its checkpoints
    (printed here by specforge's own console logger)."""
    from builders.consoles import specforge_lines
    from builders.tensorboard import write_drafter_checkpoint

    out = tmp_path / "out"
    write_drafter_checkpoint(out / "run-step100", draft_vocab=8, hidden=4)
    (out / "train.log").write_text(specforge_lines([(step, {"loss": 10.0 - step / 100}) for step in range(5, 105, 5)]))
    code, text, err = _cli(capsys, out, "--format", "json")
    assert code == 0 and err == ""
    loss = json.loads(text)["tags"]["loss"]
    assert loss["steps"] == list(range(5, 105, 5)) and loss["values"][-1] == pytest.approx(9.0)


def test_a_reader_that_fails_outright_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch):
    """The fault boundary keeps a reader's failure on its run; `scalars` of that run still says it."""
    from builders.tensorboard import write_scalars
    from triage_tui.core.read.events.reader import RunEvents

    run = tmp_path / "run"
    write_scalars(run, {"train/loss": [(0, 2.0), (10, 1.5)]})

    def failing_poll(self, **kwargs):
        raise RuntimeError("a reader bug")

    monkeypatch.setattr(RunEvents, "poll", failing_poll)
    code, text, err = _cli(capsys, run)
    assert code == 2 and text == ""
    assert err.strip().splitlines() == [f"triage: {run}: cannot read its scalars: RuntimeError: a reader bug"]
