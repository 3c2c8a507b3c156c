"""``scan --json``'s ``trainer``: the framework a run's files and layout say wrote it (core/read/trackers/).

The layouts are the ones the trackers' own code wrote (tests/fixtures/trackers/) and, for the
scan, a Lightning TensorBoardLogger layout written with torch's SummaryWriter, whose metric names
alone (``train_loss``) read as HF Trainer's.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path, PurePath

import pytest

from builders.tensorboard import write_scalars
from triage_tui import cli
from triage_tui.core.read.trackers.frameworks import framework_of, trainer_of

FIXTURES = Path(__file__).parent / "fixtures" / "trackers"


@pytest.mark.parametrize(
    ("directory", "framework"),
    [
        ("lightning/tiny-lm-chance", "lightning"),
        ("torchtune/chance", "torchtune"),
        ("nemo-automodel/chance", "nemo-automodel"),
        ("nanogpt/chance", "nanogpt"),
        ("mlflow-sqlite", "mlflow"),
        ("mlflow-files", "mlflow"),
        ("trackio", "trackio"),
    ],
)
def test_each_trackers_own_layout_names_it(directory, framework):
    root = FIXTURES / directory
    assert framework_of(path for path in root.rglob("*") if path.is_file()) == framework


def test_a_trainers_layout_wins_over_its_metric_names_and_an_eagle_trainers_names_over_hf_trainers_layout():
    assert trainer_of("torchtune", "specforge", identified=True) == "torchtune"  # loss and lr read as SpecForge's
    assert trainer_of("lightning", "hf-trainer", identified=True) == "lightning"
    assert trainer_of("hf-trainer", "modelopt", identified=True) == "modelopt"  # ModelOpt trains on HF Trainer
    assert trainer_of("mlflow", "specforge", identified=True) == "specforge"  # the tracker stored it; SpecForge trained
    # train/loss, lr, grad_norm: names every trainer logs say nothing of who trained over a tracker's record
    assert trainer_of("mlflow", "specforge", identified=False) == "mlflow"
    assert trainer_of("trackio", "speculators", identified=False) == "trackio"
    assert trainer_of("mlflow", None, identified=False) == "mlflow"
    assert trainer_of(None, "hf-trainer", identified=False) == "hf-trainer"
    assert framework_of([PurePath("out/checkpoint-5/trainer_state.json"), PurePath("out/run.yaml")]) == "speculators"


def test_a_lightning_tensorboard_run_is_lightnings_in_scan_json(tmp_path):
    version = tmp_path / "lightning_logs" / "version_0"
    write_scalars(version, {"train_loss": [(s, 10.37) for s in range(0, 50, 10)], "epoch": [(40, 0.0)]})
    (version / "hparams.yaml").write_text("{}\n")
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        cli.main(["scan", str(tmp_path), "--json"])
    (run,) = json.loads(out.getvalue())["runs"]
    assert run["trainer"] == "lightning"
