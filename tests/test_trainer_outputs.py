"""Trainers' saved state read into typed results: HF Trainer's ``checkpoint-N/trainer_state.json``
(a real Trainer run's) and SpecForge's output directory (its ``CheckpointManager``'s); the names
discovery will use for them; ``[logs] console`` in triage.toml; ``series.overlay``, the merge of
two sources of one metric."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from builders.consoles import console_runs
from triage_tui.core.errors import BadInput
from triage_tui.core.formats import trainer_state
from triage_tui.core.formats.specforge_output import read_best_meta
from triage_tui.core.formats.trainer_state import read_trainer_state
from triage_tui.core.read.runs.manifest import load_manifest
from triage_tui.core.read.runs.names import is_console_log_name, specforge_run_id
from triage_tui.core.series import ScalarSeries, overlay


@pytest.fixture(scope="module")
def runs():
    return console_runs()


# --------------------------------------------------------------------------- trainer_state.json


def test_the_newest_checkpoint_holds_the_whole_logged_history(runs):
    hf = runs.hf_unbuffered
    names = os.listdir(hf.output)
    assert sorted(names) == ["checkpoint-10", "checkpoint-12", "checkpoint-5"]
    path = hf.output / "checkpoint-12" / "trainer_state.json"
    state = read_trainer_state(path)
    raw = json.loads(path.read_text())  # the oracle: the file as json reads it
    assert (state.global_step, state.max_steps, state.logging_steps, state.eval_steps, state.save_steps) == (
        12,
        12,
        2,
        6,
        5,
    )
    assert state.skipped_entries == 0 and len(state.log_history) == len(raw["log_history"])
    scalars = state.scalars()
    losses = [(e["step"], e["loss"]) for e in raw["log_history"] if "loss" in e]
    assert scalars.series["loss"].steps.tolist() == [s for s, _ in losses] == list(range(2, 13, 2))
    assert scalars.series["loss"].values.tolist() == [v for _, v in losses]  # exact, unrounded
    assert scalars.series["eval_loss"].steps.tolist() == [6, 12]
    assert "step" not in scalars.series
    assert set(scalars.series["loss"].wall_times.tolist()) == {os.stat(path).st_mtime}
    # Up to that save only: the summary HF logs after the last checkpoint is not in it.
    assert "train_runtime" not in scalars.series
    earlier = read_trainer_state(hf.output / "checkpoint-5" / "trainer_state.json")
    assert earlier.global_step == 5 and earlier.scalars().series["loss"].steps.tolist() == [2, 4]


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ('{"global_step": 3, "log_history": [', "not valid JSON"),
        ("[1, 2]", "not an object"),
        ('{"global_step": -1, "log_history": []}', "global_step"),
        ('{"global_step": 2.5, "log_history": []}', "global_step"),
        ('{"global_step": 3, "log_history": {}}', "log_history is not a list"),
        ('{"global_step": 3, "log_history": [], "x": ' + "[" * 40 + "]" * 40 + "}", "nested deeper than 32"),
        ('{"global_step": 3, "log_history": [{"step": 1, "loss": ' + "9" * 5000 + "}]}", "not valid JSON here"),
        (b"\xff\xfe\x00garbage", "not valid JSON"),
    ],
)
def test_a_bad_trainer_state_is_one_line_naming_the_file(tmp_path, text, what):
    path = tmp_path / "trainer_state.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(BadInput, match=what) as caught:
        read_trainer_state(path)
    assert caught.value.path == str(path)


def test_a_trainer_state_larger_than_the_bound_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(trainer_state, "MAX_BYTES", 64)
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 1, "log_history": [{"step": 1, "loss": 1.0}] * 10}))
    with pytest.raises(BadInput, match="larger than 64 bytes"):
        read_trainer_state(path)


def test_entries_without_a_step_are_skipped_and_counted_non_finite_values_kept(tmp_path):
    path = tmp_path / "trainer_state.json"
    # json.dumps writes NaN and Infinity as HF's save_to_json does.
    history = [
        {"step": 1, "loss": float("nan")},
        {"loss": 2.0},
        "x",
        {"step": "2", "loss": 1.0},
        {"step": 3, "loss": float("inf"), "flag": True},
    ]
    path.write_text(json.dumps({"global_step": 3, "logging_steps": 0.5, "log_history": history}))
    state = read_trainer_state(path)
    assert state.skipped_entries == 3 and state.logging_steps is None  # a ratio HF resolves itself
    loss = state.scalars().series["loss"]
    assert loss.steps.tolist() == [1, 3] and math.isnan(loss.values[0]) and loss.values[1] == math.inf
    assert "flag" not in state.scalars().series


# --------------------------------------------------------------------------- SpecForge's output directory


def test_specforge_best_meta_and_pointers_as_its_checkpoint_manager_wrote_them(runs):
    sf = runs.specforge
    names = os.listdir(sf.output)
    # What its CheckpointManager wrote: three saves, -latest at the last, -best at step 20.
    assert {name for name in names if "-step" in name} == {f"{sf.run_id}-step{step}" for step in (10, 20, 30)}
    assert os.readlink(sf.output / f"{sf.run_id}-latest") == f"{sf.run_id}-step30"
    assert os.readlink(sf.output / f"{sf.run_id}-best") == f"{sf.run_id}-step20"
    best = read_best_meta(sf.output / f"{sf.run_id}.best_meta.json")
    raw = json.loads((sf.output / f"{sf.run_id}.best_meta.json").read_text())
    assert (best.run_id, best.step, best.score, best.metric) == (sf.run_id, 20, raw["score"], "eval/simulated_acc_len")
    assert best.checkpoint == sf.output / f"{sf.run_id}-step20" and best.complete
    metrics = dict(best.metrics)
    assert metrics["eval/per_position_acc/1"] == raw["metrics"]["eval/per_position_acc"][1]
    assert metrics["eval/simulated_acc_len"] == best.score
    # The best step is the evaluation the console shows highest (best is not the latest here).
    from triage_tui.core.read.console.reader import ConsoleLogs

    logs = ConsoleLogs()
    logs.set_files([sf.console])
    logs.poll()
    evals = logs.scalars.series["eval/simulated_acc_len"]
    assert int(evals.steps[int(np.argmax(evals.values))]) == best.step
    assert {specforge_run_id(name) for name in names if name != "train.log"} == {sf.run_id}


@pytest.mark.parametrize(
    ("document", "what"),
    [
        ({"run_id": "r", "step": 5, "score": float("nan"), "metric": "m"}, "score"),
        ({"run_id": "r", "step": "5", "score": 1.0, "metric": "m"}, "step"),
        ({"step": 5, "score": 1.0, "metric": "m"}, "run_id"),
        ([1], "not an object"),
    ],
)
def test_a_bad_best_meta_is_one_line_naming_the_file(tmp_path, document, what):
    path = tmp_path / "r.best_meta.json"
    path.write_text(json.dumps(document))
    with pytest.raises(BadInput, match=what) as caught:
        read_best_meta(path)
    assert caught.value.path == str(path)


# --------------------------------------------------------------------------- names and triage.toml


def test_console_names_as_the_tools_write_them():
    for name in ("train.log", "nohup.out", "slurm-4242.out", "slurm-4242_7.out", "run.out"):
        assert is_console_log_name(name), name
    for name in ("events.out.tfevents.1700000000.host", "run-abc.wandb", ".train.log", "train.log.1", "log"):
        assert not is_console_log_name(name), name
    assert specforge_run_id("k2-eagle3-step120") == "k2-eagle3"
    assert specforge_run_id("k2-eagle3.best_meta.json") == "k2-eagle3"
    assert specforge_run_id("k2-eagle3-latest") == "k2-eagle3" and specforge_run_id("checkpoint-5") is None


def test_another_users_manifest_names_no_console_outside_its_run(tmp_path):
    """The trust rule (docs/contracts.md): a path outside the run in a triage.toml another user owns
    is not read, and the run says so."""
    run = tmp_path / "run"
    run.mkdir()
    manifest = run / "triage.toml"
    manifest.write_text('[logs]\nconsole = ["train.log", "../elsewhere/slurm-1.out"]\n')
    try:
        os.chown(manifest, 65534, -1)
    except PermissionError:
        pytest.skip("chown to another uid needs root (or CAP_CHOWN) here: the ownership rule cannot be exercised")
    read = load_manifest(manifest)
    assert read.console_logs == (run / "train.log",)
    (line,) = read.untrusted
    assert line.startswith(f"[logs] console {tmp_path / 'elsewhere' / 'slurm-1.out'} not read: outside the run")


def test_the_manifest_names_console_logs(tmp_path):
    manifest = tmp_path / "triage.toml"
    manifest.write_text('[logs]\nconsole = ["train.log", "~/jobs/slurm-1.out"]\n')
    assert load_manifest(manifest).console_logs == (tmp_path / "train.log", Path.home() / "jobs" / "slurm-1.out")
    manifest.write_text('[logs]\nconsole = "nohup.out"\n')
    assert load_manifest(manifest).console_logs == (tmp_path / "nohup.out",)
    for bad, what in (
        ('[logs]\nconsol = ["x"]\n', "unknown key"),
        ("[logs]\nconsole = [1]\n", "list of path strings"),
        ('logs = "x"\n', "must be a table"),
    ):
        manifest.write_text(bad)
        with pytest.raises(BadInput, match=what):
            load_manifest(manifest)


# --------------------------------------------------------------------------- one metric from two sources


def _series(steps, values, tag="loss") -> ScalarSeries:
    found = ScalarSeries(tag)
    found.extend(np.asarray(steps, np.int64), np.zeros(len(steps)), np.asarray(values, np.float64))
    return found


def test_overlay_keeps_the_base_only_where_the_top_has_no_range():
    history = _series([1, 2, 3, 4, 5, 6], [10, 20, 30, 40, 50, 60])
    live = _series([3, 5, 7], [3.5, 5.5, 7.5])
    merged = overlay(history, live)
    assert merged.steps.tolist() == [1, 2, 3, 5, 7] and merged.values.tolist() == [10, 20, 3.5, 5.5, 7.5]
    assert merged.restarts == ()
    assert overlay(history, live, resume=True).restarts == (3,)  # a later writer's different points
    copy = overlay(history, _series([2, 3], [20, 30]), resume=True)
    assert copy.restarts == () and copy.steps.tolist() == [1, 2, 3, 4, 5, 6]  # a copy: nothing added
    assert overlay(_series([], []), live).steps.tolist() == [3, 5, 7]
    assert overlay(history, _series([], [])).values.tolist() == [10, 20, 30, 40, 50, 60]
    assert len(history) == 6 and len(live) == 3  # the inputs are left as they were
