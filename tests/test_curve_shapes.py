"""Curve-shape flags (core.watch.curve_shapes) on runs written by the real writers: SpecForge's
TensorboardTracker, speculators' TensorBoardHandler, torch's and tensorboardX's SummaryWriter,
read back through the watcher as `triage scan` and the TUI read them."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import numpy as np
import pytest
import tensorboardX
from torch.utils.tensorboard import SummaryWriter

from builders.tensorboard import write_drafter_checkpoint
from builders.trainers import specforge_log
from triage_tui.core.watch import curve_shapes
from triage_tui.core.watch.curve_shapes import checkpoint_step
from triage_tui.core.watch.signals.flags import Flag
from triage_tui.core.watch.watcher import Watcher

V = 32_000


def speculators_log(root: Path, rows: list[tuple[int, dict[str, dict[str, float]]]], run: str = "ft") -> None:
    """speculators 0.9.0's TensorBoardHandler: ``<log_dir>/<run_name>/``, nested dicts flattened."""
    from speculators.train.logger import TensorBoardHandler

    handler = TensorBoardHandler(run_name=run, log_dir=str(root / "logs"))
    record = logging.LogRecord("speculators.metrics", logging.INFO, __file__, 0, {}, None, None)
    for step, values in rows:
        record.msg = values
        record.step = step
        handler.emit(record)
    handler.close()


def status_of(path: Path):
    (status,) = Watcher([path], use_watchdog=False, strict=True).poll_once()
    return status


def kinds(status) -> dict[str, Flag]:
    return {flag.kind: flag for flag in status.flags}


# ----------------------------------------------------------------- TTT positions


def ttt_rows(position1: float, steps=range(0, 2050, 50), positions: int = 7) -> list[tuple[int, dict[str, float]]]:
    """SpecForge per-position metrics: acc_0 rising to 0.7, later positions at `position1` x acc_0."""
    rows = []
    for step in steps:
        acc0 = 0.7 * (1 - math.exp(-step / 300))
        values = {"train/acc_0": acc0, "train/ploss_0": 10.37 - 7 * acc0}
        for i in range(1, positions):
            values[f"train/acc_{i}"] = acc0 * position1 * 0.9 ** (i - 1)
            values[f"train/ploss_{i}"] = 10.37 - 7 * acc0 * position1
        rows.append((step, values))
    return rows


def test_specforge_later_positions_collapsed_is_a_critical_flag(tmp_path):
    specforge_log(tmp_path / "out", ttt_rows(0.03))
    status = status_of(tmp_path / "out")
    flag = kinds(status)["ttt_position_collapse"]
    assert flag.severity == "critical" and flag.tag == "train/acc_1"
    assert "train/acc_1 = 2.1 % against train/acc_0 = 69.7 % (smoothed, at step 2000" in flag.message
    assert status.status == "critical"


def test_specforge_healthy_positions_raise_nothing(tmp_path):
    specforge_log(tmp_path / "out", ttt_rows(0.9))
    assert "ttt_position_collapse" not in kinds(status_of(tmp_path / "out"))


def test_speculators_cond_acc_collapse_after_position_0(tmp_path):
    """speculators logs full_acc_k and cond_acc_k: position 1 collapsed in both."""
    rows = []
    for step in range(0, 400, 10):
        acc0 = 0.6 * (1 - math.exp(-step / 60))
        rows.append(
            (
                step,
                {
                    "train": {
                        "loss_0": 10.37 - 8 * acc0,
                        "loss_1": 10.3,
                        "full_acc_0": acc0,
                        "cond_acc_0": acc0,
                        "full_acc_1": 0.002,
                        "cond_acc_1": 0.004,
                    }
                },
            )
        )
    speculators_log(tmp_path, rows)
    flag = kinds(status_of(tmp_path))["ttt_position_collapse"]
    assert flag.tag == "train/full_acc_1"


@pytest.mark.parametrize(
    ("position0", "ratio", "flagged"),
    [(0.6, 0.24, True), (0.6, 0.26, False), (0.21, 0.1, True), (0.19, 0.1, False)],
)
def test_collapse_boundaries(tmp_path, position0, ratio, flagged):
    """POSITION_COLLAPSE_RATIO (0.25 x position 0) and POSITION0_FINE (20 %) on flat curves."""
    rows = [(s, {"train/acc_0": position0, "train/acc_1": position0 * ratio}) for s in range(0, 1000, 50)]
    specforge_log(tmp_path / "out", rows)
    assert ("ttt_position_collapse" in kinds(status_of(tmp_path / "out"))) is flagged
    assert curve_shapes.POSITION_COLLAPSE_RATIO == 0.25 and curve_shapes.POSITION0_FINE == 0.20


def test_position_1_still_climbing_is_left_alone(tmp_path):
    """Early in a from-scratch run position 0 learns first: no flag while position 1 rises."""
    rows = [(s, {"train/acc_0": 0.6, "train/acc_1": 0.007 * s / 50}) for s in range(0, 1000, 50)]
    specforge_log(tmp_path / "out", rows)
    assert "ttt_position_collapse" not in kinds(status_of(tmp_path / "out"))


# ----------------------------------------------------------------- resume


def loss_at(step: int) -> float:
    return 3.0 + 7.0 * math.exp(-step / 400)


def resumed_writer(monkeypatch, make, *args, **kwargs):
    """A writer opened an hour later, as a resumed process opens it: its file name (which carries the
    creation time in seconds, and orders the run's files) sorts after the dead process's file."""
    later = time.time() + 3600.0
    with monkeypatch.context() as patch:
        patch.setattr(time, "time", lambda: later)
        return make(*args, **kwargs)


def test_a_resume_whose_loss_jumps_is_flagged_at_the_resume_step(tmp_path, monkeypatch):
    """torch's writer ran to step 340; the resumed process (tensorboardX, a new event file) restarts
    at the checkpoint's step 200 with a loss back near chance."""
    runs = tmp_path / "out" / "runs"
    first = SummaryWriter(str(runs))
    for step in range(0, 350, 20):
        first.add_scalar("train/ploss_0", loss_at(step), step, walltime=1000.0 + step)
    first.close()
    second = resumed_writer(monkeypatch, tensorboardX.SummaryWriter, str(runs))
    for step in range(200, 500, 20):
        second.add_scalar("train/ploss_0", 9.5 - (step - 200) / 1000, step, walltime=5000.0 + step)
    second.close()
    assert len(list(runs.glob("*tfevents*"))) == 2
    flag = kinds(status_of(tmp_path / "out"))["resume_discontinuity"]
    assert flag.step == 200 and flag.severity == "warning" and flag.tag == "train/ploss_0"
    assert flag.value == pytest.approx(9.5 - loss_at(180), abs=1e-4)  # first point after minus last before
    assert "at step 200, where the run resumed" in flag.message


def test_a_resume_that_continues_the_curve_raises_nothing(tmp_path, monkeypatch):
    runs = tmp_path / "out" / "runs"
    for start, stop, wall in ((0, 350, 1000.0), (200, 500, 5000.0)):
        writer = SummaryWriter(str(runs)) if start == 0 else resumed_writer(monkeypatch, SummaryWriter, str(runs))
        for step in range(start, stop, 20):
            writer.add_scalar("train/ploss_0", loss_at(step), step, walltime=wall + step)
        writer.close()
    assert "resume_discontinuity" not in kinds(status_of(tmp_path / "out"))


def test_purge_step_and_a_repeated_step_are_resumes_too(tmp_path, monkeypatch):
    """SummaryWriter(purge_step=T) writes SessionLog.START; another run logs its resume step twice."""
    purged = tmp_path / "purged" / "runs"
    writer = SummaryWriter(str(purged))
    for step in range(0, 350, 20):
        writer.add_scalar("train/acc_0", 0.6 * (1 - math.exp(-step / 100)), step, walltime=1000.0 + step)
    writer.close()
    writer = resumed_writer(monkeypatch, SummaryWriter, str(purged), purge_step=200)
    for step in range(200, 500, 20):
        writer.add_scalar("train/acc_0", 0.05, step, walltime=5000.0 + step)
    writer.close()
    flag = kinds(status_of(tmp_path / "purged"))["resume_discontinuity"]
    assert (flag.step, flag.tag) == (200, "train/acc_0")

    repeated = tmp_path / "repeated" / "runs"
    for start, stop, offset in ((0, 220, 0.0), (200, 500, 6.0)):
        writer = (
            SummaryWriter(str(repeated)) if start == 0 else resumed_writer(monkeypatch, SummaryWriter, str(repeated))
        )
        for step in range(start, stop, 20):
            writer.add_scalar("train/ploss_0", loss_at(step) + offset, step, walltime=1000.0 + start * 10 + step)
        writer.close()
    assert kinds(status_of(tmp_path / "repeated"))["resume_discontinuity"].step == 200


@pytest.mark.parametrize(("jump", "flagged"), [(0.45, False), (0.55, True)])
def test_resume_jump_boundary(tmp_path, monkeypatch, jump, flagged):
    """RESUME_LOSS_NATS: half a nat on a flat, noise-free loss of 1.0 (a tenth of it is 0.1)."""
    runs = tmp_path / "out" / "runs"
    for start, stop, level in ((0, 300, 1.0), (200, 400, 1.0 + jump)):
        writer = SummaryWriter(str(runs)) if start == 0 else resumed_writer(monkeypatch, SummaryWriter, str(runs))
        for step in range(start, stop, 20):
            writer.add_scalar("loss", level, step, walltime=1000.0 + start * 10 + step)
        writer.close()
    assert ("resume_discontinuity" in kinds(status_of(tmp_path / "out"))) is flagged
    assert curve_shapes.RESUME_LOSS_NATS == 0.5


# ----------------------------------------------------------------- evaluation peak

# DeepSpec #84's Eagle3 numbers: accept length 3.28, 3.34, 3.34, 3.24, 3.18 while the loss falls
# 2.69 -> 1.50 (epochs 0.8 ... 10 of 10 at 2600 steps an epoch).
EVAL_STEPS = (2080, 5980, 11960, 19760, 26000)
ACCEPT = (3.28, 3.34, 3.34, 3.24, 3.18)


def eval_run(output: Path, accept=ACCEPT) -> None:
    rows = [(step, {"train/loss": 1.5 + 1.2 * math.exp(-step / 8000)}) for step in range(0, 26001, 260)]
    rows += [(step, {"eval/simulated_acc_len": value}) for step, value in zip(EVAL_STEPS, accept, strict=True)]
    specforge_log(output, sorted(rows, key=lambda row: row[0]))
    for step in (5000, 12000, 20000):
        write_drafter_checkpoint(output / f"epoch_{step // 2600}_step_{step}", draft_vocab=64)


def test_acceptance_peaking_while_loss_falls_names_the_best_step_and_checkpoint(tmp_path):
    eval_run(tmp_path / "out")
    flag = kinds(status_of(tmp_path / "out"))["eval_peaked"]
    assert flag.severity == "warning" and flag.tag == "eval/simulated_acc_len"
    assert flag.step == 11960 and flag.value == pytest.approx(3.34)
    assert "fell to 3.18 (-4.8 %)" in flag.message
    assert "the checkpoint saved nearest it is epoch_4_step_12000 (step 12000)" in flag.message


def test_acceptance_still_rising_raises_nothing(tmp_path):
    eval_run(tmp_path / "out", accept=(3.0, 3.1, 3.2, 3.25, 3.3))
    assert "eval_peaked" not in kinds(status_of(tmp_path / "out"))


@pytest.mark.parametrize(("last", "flagged"), [(3.25, False), (3.23, True)])
def test_acceptance_drop_boundary(tmp_path, last, flagged):
    """EVAL_DROP_FRACTION: 3 % under the best (3.34 x 0.97 = 3.24)."""
    eval_run(tmp_path / "out", accept=(3.28, 3.34, 3.34, 3.30, last))
    assert ("eval_peaked" in kinds(status_of(tmp_path / "out"))) is flagged


def test_checkpoint_step_reads_the_trainers_names():
    assert checkpoint_step("out/epoch_0_step_200") == 200
    assert checkpoint_step("out/k2-ft-step100") == 100
    assert checkpoint_step("hf-out/checkpoint-8") == 8
    assert checkpoint_step("checkpoints/3") is None  # speculators: an epoch, not a step


# ----------------------------------------------------------------- run start


def test_run_start_on_accuracy_then_on_loss(tmp_path):
    specforge_log(tmp_path / "cold", [(s, {"train/acc_0": 0.003, "train/ploss_0": 10.3}) for s in range(0, 500, 50)])
    start = status_of(tmp_path / "cold").start
    assert (
        start.near_chance and start.accuracy == pytest.approx(0.003) and (start.first_step, start.last_step) == (0, 200)
    )
    specforge_log(tmp_path / "warm", [(s, {"train/acc_0": 0.55, "train/ploss_0": 2.0}) for s in range(0, 500, 50)])
    assert not status_of(tmp_path / "warm").start.near_chance
    specforge_log(tmp_path / "loss", [(s, {"train/ploss_0": np.log(V)}) for s in range(0, 500, 50)])
    start = status_of(tmp_path / "loss").start
    assert start.accuracy is None and start.near_chance


# ----------------------------------------------------------------- scan and the TUI


def test_scan_json_lists_the_curve_flags_and_exits_1(tmp_path, triage):
    specforge_log(tmp_path / "collapsed", ttt_rows(0.03))
    result = triage("scan", tmp_path, "--json")
    assert result.returncode == 1, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    flag = next(f for f in run["flags"] if f["kind"] == "ttt_position_collapse")
    assert flag["severity"] == "critical" and flag["tag"] == "train/acc_1" and flag["step"] == 200


async def test_the_tui_flags_pane_shows_the_curve_flags(tmp_path):
    """The pane renders the core's flags generically: kind and message, one line each."""
    from builders.waiting import wait_for
    from triage_tui.tui.app import TriageApp

    specforge_log(tmp_path / "collapsed", ttt_rows(0.03))
    app = TriageApp([tmp_path], poll_interval=0.2, use_watchdog=False, device="cpu")
    app.animation_level = "none"
    async with app.run_test(size=(160, 48)) as pilot:
        flags = app.main.query_one("#flags")
        await wait_for(pilot, lambda: "ttt_position_collapse" in str(flags.render()), what="the curve flag")
        text = str(flags.render())
        assert "ttt_position_collapse" in text and "the later TTT positions do not learn" in text


@pytest.mark.parametrize(("first", "near"), [(0.049, True), (0.051, False), (4.9, True), (5.1, False)])
def test_run_start_boundary(tmp_path, first, near):
    """START_ACCURACY: 5 %, read as a fraction or, for a series logged in percent, as percent."""
    peak = 70.0 if first > 1 else 0.7  # a percent series reaches above 1
    rows = [(s, {"train/acc_0": first if s < 250 else peak}) for s in range(0, 500, 50)]
    specforge_log(tmp_path / "out", rows)
    assert status_of(tmp_path / "out").start.near_chance is near
    assert curve_shapes.START_ACCURACY == 0.05


def test_acceptance_peaking_while_the_loss_is_flat_raises_nothing(tmp_path):
    """Not DeepSpec #84's shape: the loss stopped falling too (a plateau, not over-training)."""
    rows = [(step, {"train/loss": 1.5}) for step in range(0, 26001, 260)]
    rows += [(step, {"eval/simulated_acc_len": value}) for step, value in zip(EVAL_STEPS, ACCEPT, strict=True)]
    specforge_log(tmp_path / "out", sorted(rows, key=lambda row: row[0]))
    assert "eval_peaked" not in kinds(status_of(tmp_path / "out"))


@pytest.mark.parametrize(("offset", "flagged"), [(5.0, True), (0.0, False)])
def test_a_new_event_file_that_goes_on_at_the_next_step_is_a_resume(tmp_path, monkeypatch, offset, flagged):
    """The dead process stopped right at its checkpoint (step 200); the resumed one opens a new file
    and goes on at 220: no step repeats, the new file alone marks the resume."""
    runs = tmp_path / "out" / "runs"
    for start, stop in ((0, 220), (220, 500)):
        writer = SummaryWriter(str(runs)) if start == 0 else resumed_writer(monkeypatch, SummaryWriter, str(runs))
        for step in range(start, stop, 20):
            writer.add_scalar("train/ploss_0", loss_at(step) + (offset if start else 0.0), step, walltime=1e3 + step)
        writer.close()
    found = kinds(status_of(tmp_path / "out")).get("resume_discontinuity")
    assert (found is not None and found.step == 220) is flagged


def test_position_1_gaining_late_on_position_0_is_left_alone(tmp_path):
    """The sample world's from-scratch shape: position 0 at 55 % from early on, position 1 starting
    late and climbing slowly in points (0.4 % -> 4 %) but fast against position 0: not a collapse."""
    rows = [(s, {"train/acc_0": 0.55, "train/acc_1": 0.004 * 1.06**s}) for s in range(41)]
    specforge_log(tmp_path / "out", rows)
    assert "ttt_position_collapse" not in kinds(status_of(tmp_path / "out"))
    assert curve_shapes.COLLAPSE_RATIO_GROWTH == 1.5


@pytest.mark.parametrize(("last_step", "flagged"), [(109, False), (111, True)])
def test_a_from_scratch_position_1_is_judged_after_ten_times_position_0s_start(tmp_path, last_step, flagged):
    """Position 0 fine from step 10 (after 10 steps): position 1 flat at 0.8 % is judged only once the
    stretch reaches 10 x 10 steps (COLLAPSE_SPAN_FACTOR), as in `triage samples --small`'s healthy run."""
    rows = [(s, {"train/acc_0": 0.0 if s < 10 else 0.6, "train/acc_1": 0.008}) for s in range(last_step + 1)]
    specforge_log(tmp_path / "out", rows)
    assert ("ttt_position_collapse" in kinds(status_of(tmp_path / "out"))) is flagged
    assert curve_shapes.COLLAPSE_SPAN_FACTOR == 10
