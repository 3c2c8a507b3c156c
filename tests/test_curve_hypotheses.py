"""`triage check --json` on runs whose curves show a cause (core.watch.curve_shapes -> core.diagnose.hypotheses):
each run written by the real writers ranks its cause first (exit 1), with its numbers and links, and
its healthy twin scores it below 0.5."""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
import types
from pathlib import Path

import pytest

from builders.samples import copy_samples
from builders.trainers import speculators_run as speculators_layout

HEALTHY_MAPPING = "cache/vocab_mapping/76a493ec79f30af08f5a76e2385ee8f4.pt"
V = 32_000


def check(run: Path, triage, *, text: bool = False) -> tuple[int, dict, str]:
    """`triage check RUN [--json] --device cpu`, in this process (the worker has torch imported)."""
    done = triage("check", run, "--device", "cpu", *([] if text else ["--json"]))
    if text:
        return done.returncode, {"text": done.stdout}, done.stderr
    document = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, document, done.stderr


def scores(document: dict) -> dict[str, float]:
    return {h["id"]: h["score"] for h in document["hypotheses"]}


def specforge_log(output: Path, rows) -> None:
    """SpecForge 0.2.0's own TensorboardTracker (``<output_dir>/runs/``)."""
    from specforge.tracker import TensorboardTracker

    tracker = TensorboardTracker(types.SimpleNamespace(), str(output))
    for step, values in rows:
        tracker.log(values, step=step)
    tracker.close()


# ----------------------------------------------------------------- warm start


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> Path:
    """The committed healthy run: its step-200 drafter predicts its dumps well (replay ~66 %)."""
    return copy_samples(tmp_path_factory.mktemp("samples"), ("healthy",))


def fine_tune(samples: Path, name: str, first_accuracy: float) -> Path:
    """A fine-tune that names healthy's drafter as its start (triage.toml), on healthy's dumps with
    healthy's mapping; its SpecForge tracker logs an accuracy that starts at `first_accuracy`."""
    run = samples / name
    run.mkdir()
    (run / "triage.toml").write_text(
        "[run]\n"
        'checkpoint = "../healthy/epoch_0_step_200"\n'
        f'mapping = "../healthy/{HEALTHY_MAPPING}"\n'
        'data = "../healthy/hidden_states"\n'
        'target = "../_target"\n'
    )
    rows = []
    for step in range(0, 400, 10):
        accuracy = first_accuracy + (0.66 - first_accuracy) * step / 4000
        rows.append((step, {"train/acc_0": accuracy, "train/ploss_0": math.log(V) * (1 - accuracy)}))
    specforge_log(run, rows)
    return run


def test_a_fine_tune_that_starts_near_zero_from_a_good_drafter_is_warm_start_broken(samples, triage):
    code, document, stderr = check(fine_tune(samples, "ft-cold", 0.003), triage)
    assert code == 1, stderr
    top = document["hypotheses"][0]
    assert top["id"] == "warm_start_broken" and top["score"] >= 0.5, scores(document)
    assert "https://github.com/sgl-project/SpecForge/issues/300" in top["links"]
    # The replay's top-1 of the starting checkpoint, as the line names it: a good drafter's (the
    # committed samples give about 66 %, the figure moving a few tenths from one CPU's build to another's).
    replayed = [re.search(r"at (\d+\.\d)% top-1", line) for line in top["evidence"] if "starts at 0.6 %" in line]
    assert replayed and replayed[0] and float(replayed[0].group(1)) >= 50, top["evidence"]
    code, output, _ = check(samples / "ft-cold", triage, text=True)
    lines = output["text"].splitlines()
    first = lines.index("hypotheses (best first)") + 1
    assert code == 1 and lines[first].startswith("! 0.79  warm_start_broken"), lines[first]
    assert "        known from https://github.com/sgl-project/SpecForge/issues/300" in lines


def test_a_fine_tune_that_starts_where_its_drafter_is_scores_nothing(samples, triage):
    code, document, stderr = check(fine_tune(samples, "ft-warm", 0.62), triage)
    assert code == 0, (stderr, scores(document))
    assert scores(document)["warm_start_broken"] == 0.0
    assert all(score < 0.5 for score in scores(document).values())


def test_the_runs_own_later_checkpoint_is_not_its_start(samples, triage):
    """healthy names its own step-200 checkpoint: a from-scratch run started near zero, correctly."""
    code, document, stderr = check(samples / "healthy", triage)
    assert code == 0, (stderr, scores(document))
    warm = next(h for h in document["hypotheses"] if h["id"] == "warm_start_broken")
    assert warm["score"] == 0.0 and any("saved by this run" in line for line in warm["evidence"]), warm


# ----------------------------------------------------------------- TTT positions


def speculators_run(root: Path, *, collapsed: bool) -> Path:
    """A speculators 0.9.0 run (its checkpointer's epochs and mapping files, so the vocab check runs)
    whose TensorBoardHandler logged train/{loss,full_acc,cond_acc}_k for k < 3."""
    from speculators.train.logger import TensorBoardHandler

    handler = TensorBoardHandler(run_name="ttt", log_dir=str(speculators_logs(root)))
    record = logging.LogRecord("speculators.metrics", logging.INFO, __file__, 0, {}, None, None)
    for step in range(0, 600, 10):
        acc0 = 0.6 * (1 - math.exp(-step / 80))
        later = 0.01 if collapsed else 0.8 * acc0
        record.msg = {
            "train": {
                **{f"loss_{k}": math.log(V) * (1 - (acc0 if k == 0 else later)) for k in range(3)},
                **{f"full_acc_{k}": acc0 * (later / max(acc0, 1e-9)) ** k for k in range(3)},
                **{f"cond_acc_{k}": acc0 if k == 0 else later for k in range(3)},
            }
        }
        record.step = step
        handler.emit(record)
    handler.close()
    return root


def speculators_logs(root: Path) -> Path:
    """The layout of builders.trainers.speculators_run with its log dir emptied for another curve."""
    speculators_layout(root)
    shutil.rmtree(root / "logs")
    return root / "logs"


@pytest.mark.parametrize("collapsed", [True, False])
def test_ttt_position_collapse_is_ranked_first_only_when_the_positions_collapse(tmp_path, collapsed, triage):
    run = speculators_run(tmp_path / "run", collapsed=collapsed)
    code, document, stderr = check(run, triage)
    ttt = next(h for h in document["hypotheses"] if h["id"] == "ttt_position_collapse")
    assert "https://github.com/vllm-project/speculators/pull/818" in ttt["links"]
    if collapsed:
        assert code == 1, stderr
        assert document["hypotheses"][0]["id"] == "ttt_position_collapse" and ttt["score"] >= 0.5
        assert any("train/full_acc_1 = 1.0 %" in line for line in ttt["evidence"]), ttt["evidence"]
    else:
        assert code == 0, (stderr, scores(document))
        assert ttt["score"] == 0.0 and ttt["evidence"] == ["the per-position accuracies after position 0 hold up"]


# ----------------------------------------------------------------- NaN from the first step


def test_nan_from_the_first_step_is_told_apart_with_its_issue(tmp_path, triage):
    """speculators #238: num_layers 2, "loss turns to nan from the first step"."""
    from speculators.train.logger import TensorBoardHandler

    handler = TensorBoardHandler(run_name="nan", log_dir=str(speculators_logs(tmp_path)))
    record = logging.LogRecord("speculators.metrics", logging.INFO, __file__, 0, {}, None, None)
    for step in range(0, 100, 10):
        record.msg = {"train": {"loss_0": math.nan, "full_acc_0": 0.002, "cond_acc_0": 0.002, "loss_1": math.nan}}
        record.step = step
        handler.emit(record)
    handler.close()
    code, document, stderr = check(tmp_path, triage)
    assert code == 1, stderr
    top = document["hypotheses"][0]
    assert top["id"] == "non_finite" and top["score"] >= 0.9
    assert "https://github.com/vllm-project/speculators/issues/238" in top["links"]
    assert "first step" in top["title"]
    assert any("from its first logged step 0" in line for line in top["evidence"]), top["evidence"]
