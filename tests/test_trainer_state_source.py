"""HF Trainer's ``checkpoint-N/trainer_state.json`` as a run's scalar source: discovery, `scan` and
``RunSources``. The runs are a real ``transformers.Trainer``'s (builders/consoles.py: no tracker,
``report_to=[]``, its console beside it), copied where a test changes them."""

from __future__ import annotations

import io
import json
import os
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from builders.check_run import write_events
from builders.consoles import console_runs
from triage_tui import cli
from triage_tui.core.read.console.steps import INFERRED, TRAINER_STATE
from triage_tui.core.read.runs.discover import discover_runs
from triage_tui.core.read.source_kinds import trainer_state as trainer_state_kind
from triage_tui.core.read.sources import RunSources


@pytest.fixture(scope="module")
def runs():
    return console_runs()


def _scan(*paths: Path) -> tuple[int, list[dict]]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["scan", *map(str, paths), "--json", "--poll"])
    assert "Traceback" not in err.getvalue()
    return code, json.loads(out.getvalue())["runs"]


def _newest(output: Path) -> Path:
    return output / "checkpoint-12" / "trainer_state.json"


def _logged(path: Path, key: str) -> list[tuple[int, float]]:
    """The oracle: the entries of the file's log_history holding `key`, as json reads them."""
    return [(e["step"], e[key]) for e in json.loads(path.read_text())["log_history"] if key in e]


def _sources(info) -> RunSources:
    sources = RunSources()
    sources.set_files(info.scalar_files)
    return sources


def test_an_hf_run_without_a_tracker_is_a_run_read_from_its_newest_trainer_state(runs):
    output = runs.hf_unbuffered.output  # report_to=[]: no event file, no W&B file
    (info,) = discover_runs([output.parent])
    assert info.path == output and not info.event_files and not info.console_files
    assert info.artifacts.trainer_state == _newest(output)  # checkpoint-12, not checkpoint-5 by name
    assert info.sources == ("trainer_state",)

    code, (run,) = _scan(output.parent)
    losses = _logged(_newest(output), "loss")
    assert run["sources"] == ["trainer_state"] and run["errors"] == []
    assert run["metrics"]["loss"]["tag"] == "loss"
    assert run["metrics"]["loss"]["count"] == len(losses) == 6
    assert run["metrics"]["loss"]["last"] == losses[-1][1]
    assert run["last_step"] == json.loads(_newest(output).read_text())["global_step"] == 12
    assert run["trainer"] == "hf-trainer" and run["status"] != "error" and code in (0, 1)


def test_the_console_gets_the_trainer_state_whose_history_is_the_metric_and_the_console_its_alternative(runs, tmp_path):
    hf = runs.hf_buffered  # stdout block-buffered: the console alone cannot place its dicts
    out = tmp_path / "out"
    shutil.copytree(hf.output, out)
    shutil.copy2(hf.log, out / "train.log")  # `> $OUTPUT_DIR/train.log 2>&1`

    (info,) = discover_runs([tmp_path])
    assert info.sources == ("console", "trainer_state")
    sources = _sources(info)
    sources.poll()
    sources.poll()
    assert sources.errors == ()
    scalars = sources.scalars.series
    # The console's dicts at the steps the trainer logged them (inferred 1..6 without the state),
    # kept as the alternative of the loss the saved history gives exactly.
    logged = _logged(_newest(out), "loss")
    assert scalars["console/loss"].steps.tolist() == [step for step, _ in logged]
    assert list(zip(scalars["loss"].steps.tolist(), scalars["loss"].values.tolist(), strict=True)) == logged
    assert trainer_state_kind.KIND.prefix + "loss" not in scalars
    assert sources.scalars.alternatives["console/loss"] == "loss"
    assert "trainer_state/train_loss" not in scalars and scalars["train_loss"].steps.tolist() == [12]
    (note,) = sources.console.notes()
    assert f"{TRAINER_STATE}" in note and f"6 {INFERRED}" not in note

    _, (run,) = _scan(tmp_path)
    assert run["sources"] == ["console", "trainer_state"] and run["errors"] == []
    assert run["metrics"]["loss"]["tag"] == "loss" and run["metrics"]["loss"]["count"] == 6
    assert run["last_step"] == 12


def test_beside_event_files_the_history_is_renamed_and_the_event_files_lead(runs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(runs.hf_unbuffered.output, out)
    (info,) = discover_runs([out])
    sources = _sources(info)
    sources.poll()
    assert "loss" in sources.scalars.series
    write_events(out / "runs", [2.0, 1.5, 1.2], [0.5, 0.6, 0.7])
    (info,) = discover_runs([out])
    assert info.sources == ("tensorboard", "trainer_state")
    calls = []
    real = trainer_state_kind.read_trainer_state
    trainer_state_kind.read_trainer_state = lambda path: calls.append(path) or real(path)
    try:
        sources.set_files([("tensorboard", info.event_files), ("trainer_state", (info.artifacts.trainer_state,))])
        sources.poll()
    finally:
        trainer_state_kind.read_trainer_state = real
    assert calls == []  # renamed, not read again
    tags = set(sources.scalars.series)
    assert "loss" not in tags and {"trainer_state/loss", "trainer_state/eval_loss"} <= tags

    _, (run,) = _scan(out)
    assert run["sources"] == ["tensorboard", "trainer_state"] and run["errors"] == []
    assert run["metrics"]["loss"]["count"] == 3 and not run["metrics"]["loss"]["tag"].startswith("trainer_state/")


def test_the_file_is_read_again_only_when_a_newer_one_lands_or_it_changes(runs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    shutil.copytree(runs.hf_unbuffered.output, out, ignore=shutil.ignore_patterns("checkpoint-12"))
    calls: list[Path] = []
    real = trainer_state_kind.read_trainer_state
    monkeypatch.setattr(trainer_state_kind, "read_trainer_state", lambda path: calls.append(path) or real(path))
    (info,) = discover_runs([out])
    assert info.artifacts.trainer_state == out / "checkpoint-10" / "trainer_state.json"
    sources = _sources(info)
    for _ in range(3):
        sources.poll()
    assert calls == [info.artifacts.trainer_state]
    assert sources.scalars.series["loss"].steps.tolist() == [2, 4, 6, 8, 10]

    shutil.copytree(runs.hf_unbuffered.output / "checkpoint-12", out / "checkpoint-12")
    (info,) = discover_runs([out])
    sources.set_files([("trainer_state", (info.artifacts.trainer_state,))])
    sources.poll()
    sources.poll()
    assert calls[1:] == [_newest(out)]
    assert sources.scalars.series["loss"].steps.tolist() == [2, 4, 6, 8, 10, 12]

    path = _newest(out)
    document = json.loads(path.read_text())
    document["log_history"] = document["log_history"][:1]
    path.write_text(json.dumps(document))
    sources.poll()
    assert calls[2:] == [path] and sources.scalars.series["loss"].steps.tolist() == [2]


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ('{"global_step": 12, "log_history": [', "not valid JSON"),
        ('{"global_step": -3, "log_history": []}', "global_step"),
        ('{"global_step": 12, "log_history": {"step": 2}}', "log_history is not a list"),
    ],
)
def test_a_broken_trainer_state_is_an_error_of_its_run_only(runs, tmp_path, text, what):
    bad = tmp_path / "bad"
    shutil.copytree(runs.hf_unbuffered.output, bad)
    _newest(bad).write_text(text)
    good = tmp_path / "good"
    shutil.copytree(runs.hf_unbuffered.output, good)

    _, found = _scan(tmp_path)
    by_name = {run["name"]: run for run in found}
    (error,) = by_name["bad"]["errors"]
    assert (error["source"], error["path"]) == ("trainer_state", str(_newest(bad))) and what in error["message"]
    assert by_name["bad"]["status"] == "error" and by_name["bad"]["sources"] == ["trainer_state"]
    # The one error, said once more as the line of its scalar source (read off `errors`, not kept twice).
    assert by_name["bad"]["source_errors"] == [f"{error['path']}: {error['message']}"]
    assert by_name["good"]["errors"] == [] and by_name["good"]["metrics"]["loss"]["count"] == 6

    # In the watcher: said at every poll until the file changes, then read.
    (info,) = discover_runs([bad])
    sources = _sources(info)
    for _ in range(2):
        sources.poll()
        assert [e.source for e in sources.errors] == ["trainer_state"]
    shutil.copy2(_newest(good), _newest(bad))
    os.utime(_newest(bad))
    sources.poll()
    assert sources.errors == () and len(sources.scalars.series["loss"]) == 6


def test_a_read_that_races_the_trainers_save_is_read_again_not_said(runs, tmp_path, monkeypatch):
    """HF Trainer rewrites trainer_state.json in place (open "w", one write): a read between the two
    sees a cut document. When the file changed under the read, it is read again at the next poll."""
    out = tmp_path / "out"
    shutil.copytree(runs.hf_unbuffered.output, out)
    path = _newest(out)
    whole = path.read_text()
    path.write_text(whole[: len(whole) // 2])  # the save has written half
    real = trainer_state_kind.read_trainer_state

    def read_during_the_save(at: Path):
        try:
            return real(at)
        finally:
            at.write_text(whole)  # ... and finishes while the half was being parsed
            os.utime(at, ns=(1, 1))  # a different mtime, whatever the clock's resolution

    monkeypatch.setattr(trainer_state_kind, "read_trainer_state", read_during_the_save)
    (info,) = discover_runs([out])
    sources = _sources(info)
    sources.poll()
    assert sources.errors == () and "loss" not in sources.scalars.series
    monkeypatch.setattr(trainer_state_kind, "read_trainer_state", real)
    sources.poll()
    assert sources.errors == () and len(sources.scalars.series["loss"]) == 6
