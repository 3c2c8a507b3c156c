"""The best checkpoint (core.watch.best_checkpoint) on event files the real writers wrote: SpecForge's own
tracker (DeepSpec #84's acceptance peaking while the loss falls), torch's SummaryWriter (SpecForge's
per-position evaluation accuracies, ModelOpt's validate_ar under HF Trainer's checkpoint-N names),
read back through discovery and the event reader as the watcher reads them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from builders.tensorboard import write_drafter_checkpoint, write_scalars
from builders.trainers import specforge_log
from triage_tui.core.metric_names import match_trainer
from triage_tui.core.read.events.reader import RunEvents
from triage_tui.core.read.runs.discover import discover_runs
from triage_tui.core.watch.best_checkpoint import best_checkpoint

# DeepSpec #84's Eagle3 numbers: accept length 3.28, 3.34, 3.34, 3.24, 3.18 while the loss falls.
EVAL_STEPS = (2080, 5980, 11960, 19760, 26000)
ACCEPT = (3.28, 3.34, 3.34, 3.24, 3.18)


def best_of(path: Path):
    (run,) = discover_runs([path])
    events = RunEvents()
    events.set_files(run.event_files)
    events.poll()
    trainer = match_trainer(events.scalars.tags())
    return best_checkpoint(events.scalars, trainer, run.artifacts.checkpoints), run


def specforge_eval_run(output: Path, accept=ACCEPT, checkpoints=(5000, 12000, 20000)) -> None:
    rows = [(step, {"train/loss": 1.5 + 1.2 * math.exp(-step / 8000)}) for step in range(0, 26001, 260)]
    rows += [(step, {"eval/simulated_acc_len": value}) for step, value in zip(EVAL_STEPS, accept, strict=True)]
    specforge_log(output, sorted(rows, key=lambda row: row[0]))
    for step in checkpoints:
        write_drafter_checkpoint(output / f"epoch_{step // 2600}_step_{step}", draft_vocab=64)


def test_the_peak_of_simulated_acceptance_and_the_checkpoint_nearest_it(tmp_path):
    specforge_eval_run(tmp_path / "out")
    best, run = best_of(tmp_path / "out")
    assert best is not None
    assert (best.metric, best.step, best.value) == ("eval/simulated_acc_len", 11960, pytest.approx(3.34))
    assert not best.estimated and best.held_out and best.evaluations == 5
    assert best.checkpoint == run.path / "epoch_4_step_12000" and best.checkpoint_step == 12000
    assert best.last_checkpoint == run.path / "epoch_7_step_20000"
    assert best.past_peak
    document = json.loads(json.dumps(best.to_json()))
    assert {k: document[k] for k in ("step", "value", "metric", "checkpoint")} == {
        "step": 11960,
        "value": pytest.approx(3.34),
        "metric": "eval/simulated_acc_len",
        "checkpoint": str(run.path / "epoch_4_step_12000"),
    }
    assert document["past_peak"] is True and document["last_value"] == pytest.approx(3.18)
    assert "the last checkpoint, epoch_7_step_20000, is past the peak" in best.describe()


def test_still_rising_the_last_checkpoint_is_the_best(tmp_path):
    specforge_eval_run(tmp_path / "out", accept=(3.0, 3.1, 3.2, 3.25, 3.3), checkpoints=(12000, 26000))
    best, run = best_of(tmp_path / "out")
    assert best is not None and best.step == 26000 and best.checkpoint == run.path / "epoch_10_step_26000"
    assert not best.past_peak and "past the peak" not in best.describe()


def test_no_checkpoint_after_the_peak_is_not_past_it(tmp_path):
    """Acceptance fell after step 11960, but the last checkpoint is the one nearest the peak."""
    specforge_eval_run(tmp_path / "out", checkpoints=(5000, 12000))
    best, _ = best_of(tmp_path / "out")
    assert best is not None and best.checkpoint_step == 12000 and not best.past_peak


def test_estimated_from_specforges_held_out_per_position_accuracies(tmp_path):
    """SpecForge's evaluator logs eval/per_position_acc/{i}; the estimate is 1 + a0 + a0 a1 + a0 a1 a2."""
    accuracies = {100: (0.6, 0.5, 0.4), 200: (0.8, 0.7, 0.6), 300: (0.7, 0.6, 0.5)}
    series: dict[str, list[tuple[int, float]]] = {"train/loss": [(s, 2.0 - s / 1000) for s in range(0, 301, 50)]}
    for step, values in accuracies.items():
        for i, value in enumerate(values):
            series.setdefault(f"eval/per_position_acc/{i}", []).append((step, value))
    write_scalars(tmp_path / "out" / "runs", series)
    for step in (100, 300):
        write_drafter_checkpoint(tmp_path / "out" / f"epoch_0_step_{step}", draft_vocab=64)
    best, run = best_of(tmp_path / "out")
    assert best is not None
    assert best.metric == "eval/per_position_acc/{i}" and best.estimated and best.held_out
    a0, a1, a2 = accuracies[200]
    assert best.step == 200 and best.value == pytest.approx(1 + a0 + a0 * a1 + a0 * a1 * a2, rel=1e-6)
    # 100 and 300 are as near to 200: the earlier one, saved before the drafter got worse.
    assert best.checkpoint == run.path / "epoch_0_step_100" and best.past_peak


def test_modelopt_validate_ar_with_hf_trainer_checkpoints(tmp_path):
    """ModelOpt's AR validation logged beside HF Trainer's loss; checkpoints named checkpoint-N."""
    output = tmp_path / "hf-out"
    write_scalars(
        output / "runs" / "Jun01_node",
        {
            "train/loss": [(s, 3.0 - s / 100) for s in range(10, 201, 10)],
            "train_acc/parallel_0_step_0": [(s, 0.5) for s in range(10, 201, 10)],
            "validate_ar": [(50, 2.1), (100, 2.6), (150, 2.4), (200, 2.3)],
            "estimated_training_ar": [(s, 1.5 + s / 400) for s in range(10, 201, 10)],
        },
    )
    for step in (100, 200):
        write_drafter_checkpoint(output / f"checkpoint-{step}", draft_vocab=64)
    best, run = best_of(output)
    assert best is not None and best.metric == "validate_ar" and best.held_out and not best.estimated
    assert (best.step, best.value) == (100, pytest.approx(2.6))
    assert best.checkpoint == run.path / "checkpoint-100" and best.past_peak


def test_training_time_estimate_when_nothing_is_held_out(tmp_path):
    write_scalars(
        tmp_path / "out" / "runs",
        {"train/ploss_0": [(s, 2.0) for s in (10, 20, 30)], "train/acc_0": [(10, 0.5), (20, 0.6), (30, 0.7)]},
    )
    best, _ = best_of(tmp_path / "out")
    assert best is not None and best.metric == "train/acc_{i}" and best.estimated and not best.held_out
    assert best.step == 30 and best.value == pytest.approx(1.7)
    assert best.checkpoint is None and not best.past_peak
    assert "a training-time estimate" in best.describe()


@pytest.mark.parametrize(
    "series",
    [
        {"train/loss": [(0, 3.0), (10, 2.0)]},  # no acceptance at all
        {"train/loss": [(0, 3.0), (10, 2.0)], "eval/simulated_acc_len": [(10, 3.1)]},  # one evaluation
        {"eval/simulated_acc_len": [(10, float("nan")), (20, float("nan"))]},  # nothing finite
    ],
)
def test_nothing_to_choose_from(tmp_path, series):
    write_scalars(tmp_path / "out" / "runs", series)
    best, _ = best_of(tmp_path / "out")
    assert best is None


def test_scan_says_the_best_checkpoint_of_each_run_and_null_where_there_is_none(tmp_path, capsys):
    """The product's path: `scan --json`'s `best`, from the same derivation the TUI's watcher runs."""
    from triage_tui import cli

    specforge_eval_run(tmp_path / "tree" / "peaked")
    write_scalars(tmp_path / "tree" / "plain", {"train/loss": [(s, 2.0) for s in range(0, 200, 10)]})
    assert cli.main(["scan", str(tmp_path / "tree"), "--json", "--poll"]) in (0, 1)
    runs = {run["name"]: run for run in json.loads(capsys.readouterr().out)["runs"]}
    best = runs["peaked"]["best"]
    assert (best["metric"], best["step"], best["checkpoint_step"]) == ("eval/simulated_acc_len", 11960, 12000)
    assert best["checkpoint"] == str(tmp_path / "tree" / "peaked" / "epoch_4_step_12000") and best["past_peak"] is True
    assert runs["plain"]["best"] is None


# --------------------------------------------------------------------------- SpecForge's own record


@pytest.fixture(scope="module")
def specforge_output(tmp_path_factory):
    """``specforge train``'s output directory as its own TrainerController, Evaluator and
    CheckpointManager leave it (builders.trainers): console, checkpoints, pointers, best_meta.json."""
    from builders.trainers import specforge_train_output

    return specforge_train_output(tmp_path_factory.mktemp("specforge"))


def _copy(output, to: Path) -> Path:
    import shutil

    shutil.copytree(output.output, to, symlinks=True)
    return to


def _scan_run(path: Path, capsys) -> tuple[int, dict]:
    from triage_tui import cli

    code = cli.main(["scan", str(path), "--json", "--poll"])
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    return code, run


def test_scan_keeps_specforges_record_of_its_best_step_beside_the_curves_best(specforge_output, tmp_path, capsys):
    out = _copy(specforge_output, tmp_path / "output")
    meta = json.loads((out / "k2-eagle3.best_meta.json").read_text())
    _, run = _scan_run(out, capsys)
    best = run["best"]
    assert best["evaluations"] == 3 and best["step"] == meta["step"] == 20
    assert best["recorded"] == {
        "path": str(out / "k2-eagle3.best_meta.json"),
        "step": 20,
        "score": meta["score"],
        "metric": "eval/simulated_acc_len",
        "checkpoint": str(out / "k2-eagle3-step20"),
        "complete": True,
    }
    assert run["errors"] == []


def test_a_console_without_its_evaluations_takes_the_best_from_specforges_record(specforge_output, tmp_path, capsys):
    out = _copy(specforge_output, tmp_path / "output")
    console = out / "train.log"
    lines = console.read_text().splitlines(keepends=True)
    console.write_text("".join(line for line in lines if "eval/" not in line))
    _, run = _scan_run(out, capsys)
    best = run["best"]
    assert (best["step"], best["evaluations"], best["last_step"], best["last_value"]) == (20, 0, None, None)
    assert best["checkpoint"] == str(out / "k2-eagle3-step20") and best["checkpoint_step"] == 20
    assert best["last_checkpoint"] == str(out / "k2-eagle3-step30")
    assert best["past_peak"] is False  # nothing says the evaluations after step 20 fell
    assert best["value"] == json.loads((out / "k2-eagle3.best_meta.json").read_text())["score"]


def test_a_record_that_disagrees_with_the_curves_is_said(specforge_output, tmp_path):
    from triage_tui.core.formats.specforge_output import read_best_meta
    from triage_tui.core.read.console.reader import ConsoleLogs

    out = _copy(specforge_output, tmp_path / "output")
    meta_path = out / "k2-eagle3.best_meta.json"
    meta = json.loads(meta_path.read_text())
    meta["step"] = 30  # a best_meta.json from before a rewind, say: the curves peak at 20
    meta_path.write_text(json.dumps(meta))
    logs = ConsoleLogs()
    logs.set_files([out / "train.log"])
    logs.poll()
    (run,) = discover_runs([out])
    best = best_checkpoint(
        logs.scalars, match_trainer(logs.scalars.tags()), run.artifacts.checkpoints, recorded=read_best_meta(meta_path)
    )
    assert best is not None and best.step == 20
    assert "k2-eagle3.best_meta.json records step 30" in best.describe()


def test_an_unreadable_record_is_an_error_of_its_run_and_the_curves_best_stands(specforge_output, tmp_path, capsys):
    out = _copy(specforge_output, tmp_path / "output")
    meta_path = out / "k2-eagle3.best_meta.json"
    meta_path.write_text(meta_path.read_text()[:40])  # a save cut short
    code, run = _scan_run(out, capsys)
    assert code == 1
    assert [(e["source"], e["path"]) for e in run["errors"]] == [("specforge", str(meta_path))]
    assert run["best"]["step"] == 20 and run["best"]["recorded"] is None and run["best"]["evaluations"] == 3


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"run_id": "../../../../x", "step": 100}, "is not 'k2-eagle3', the run its name says"),
        ({"score": 1e308}, "score 1e+308 of eval/simulated_acc_len lies outside [0, "),
        ({"score": -5}, "score -5 of eval/simulated_acc_len lies outside [0, "),
        ({"step": 2**63 - 1}, "step is 9223372036854775807 (a step lies in [0, 2^53 - 1])"),
    ],
    ids=["checkpoint-outside-the-run", "score-1e308", "score-negative", "step-int64-max"],
)
def test_an_impossible_record_is_an_error_of_its_run_never_its_best(specforge_output, tmp_path, capsys, change, said):
    """A best_meta.json whose checkpoint lies outside the run, whose score no acceptance length can
    be, or whose step is int64's maximum: one error of its run naming the file and the number; the
    best shown is the curves' own (step 20), and with the evaluations cut from the console, the
    training-time estimate's, never the record's."""
    out = _copy(specforge_output, tmp_path / "output")
    meta_path = out / "k2-eagle3.best_meta.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), **change}, indent=2))
    code, run = _scan_run(out, capsys)
    assert code == 1
    ((source, path, error),) = [(e["source"], e["path"], e["message"]) for e in run["errors"]]
    assert (source, path) == ("specforge", str(meta_path)) and said in error, error
    assert run["best"]["step"] == 20 and run["best"]["recorded"] is None
    console = out / "train.log"
    console.write_text("".join(line for line in console.read_text().splitlines(True) if "eval/" not in line))
    _, run = _scan_run(out, capsys)
    assert [e["source"] for e in run["errors"]] == ["specforge"]
    assert run["best"]["recorded"] is None and run["best"]["held_out"] is False  # the training estimate's


@pytest.mark.parametrize(
    ("bad_point", "said"),
    [
        ((20, 50.0), "eval/simulated_acc_len is 50 at step 20: an acceptance length lies in [0, 4] (3 draft"),
        ((20, -5.0), "eval/simulated_acc_len is -5 at step 20: an acceptance length lies in [0, 4] (3 draft"),
        ((2**63 - 1, 2.9), "eval/simulated_acc_len is logged at step 9223372036854775807: a step lies in [0, 2^53"),
    ],
    ids=["50-with-3-positions", "negative", "step-int64-max"],
)
def test_an_impossible_acceptance_length_is_flagged_and_never_the_best(tmp_path, capsys, bad_point, said):
    """SpecForge's evaluation series (torch's SummaryWriter) with one point no acceptance length can
    be, beside the evaluation's three per-position accuracies: the series is not believed (a warning
    says which number and why), and the best comes from the per-position estimate."""
    from triage_tui import cli

    run = tmp_path / "run"
    points = [(10, 2.1), (30, 2.4), bad_point]
    accuracies = {f"eval/per_position_acc/{i}": [(s, 0.8 - 0.1 * i) for s in (10, 20, 30)] for i in range(3)}
    write_scalars(
        run,
        {
            "train/ploss_0": [(s, 3.0 - s / 100) for s in range(0, 40, 5)],
            "eval/simulated_acc_len": sorted(points),
            **accuracies,
        },
    )
    cli.main(["scan", str(run), "--json", "--poll"])
    (found,) = json.loads(capsys.readouterr().out)["runs"]
    best = found["best"]
    assert best["metric"] == "eval/per_position_acc/{i}" and best["estimated"] is True, best
    assert 1.0 <= best["value"] <= 4.0
    (flag,) = [f for f in found["flags"] if f["kind"] == "impossible_values"]
    assert flag["severity"] == "warning" and flag["tag"] == "eval/simulated_acc_len"
    assert said in flag["message"] and flag["message"].endswith("not used for the best checkpoint")


def test_check_ranks_past_the_acceptance_peak_from_the_runs_own_evaluations(tmp_path, capsys):
    """The product's path: `check` hands the run's held-out acceptance history to the hypotheses."""
    from triage_tui import cli
    from triage_tui.core.diagnose.hypotheses.curves import W_PAST_PEAK

    specforge_eval_run(tmp_path / "out")
    assert cli.main(["check", str(tmp_path / "out"), "--json"]) == 1  # a likely cause: exit 1
    document = json.loads(capsys.readouterr().out)
    top = document["hypotheses"][0]
    assert top["id"] == "past_acceptance_peak" and top["score"] == pytest.approx(W_PAST_PEAK)
    assert any(str(tmp_path / "out" / "epoch_4_step_12000") in line for line in top["evidence"])


def test_an_acceptance_length_is_never_taken_for_an_accuracy(tmp_path, capsys):
    """``eval/simulated_acc_len`` holds "_acc_" but counts tokens (3.3), not a fraction: reading it
    as the run's accuracy put a 3.3 % "start near chance" in the warm-start evidence."""
    from triage_tui import cli

    specforge_eval_run(tmp_path / "out")
    cli.main(["scan", str(tmp_path / "out"), "--json"])
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["metrics"]["accuracy"] is None
    assert run["metrics"]["acceptance_length"]["tag"] == "eval/simulated_acc_len"


async def test_the_tui_shows_where_the_acceptance_peaked_and_the_checkpoint_nearest_it(tmp_path):
    from builders.pilot import loaded, make_app, screen_text

    specforge_eval_run(tmp_path / "out")
    app = make_app(tmp_path / "out", readonly=True)
    async with app.run_test(size=(200, 48)) as pilot:
        await loaded(pilot)
        text = "\n".join(screen_text(app))
    # The flags pane wraps the line: its start on screen, the whole of it in what the pane was given.
    assert "acceptance  best 3.34 at step 11960 (eval/simulated_acc_len)" in text
    best = app.flags_state.best
    assert best is not None and "nearest checkpoint epoch_4_step_12000 (step 12000)" in best
    assert "the last checkpoint, epoch_7_step_20000, is past the peak" in best
