"""The warm-up holds the chance rules back for a drafter trained from scratch, and never hides a
run that has not left chance since its first point (docs/formats.md §3, `chance_from_start`).
Runs written with torch's SummaryWriter, judged on the product's path (`scan`'s watcher)."""

from __future__ import annotations

import math
from pathlib import Path

from builders.tensorboard import write_scalars
from triage_tui.core.watch.watcher import Watcher

LN_V = math.log(32_000)


def _report(run: Path) -> dict:
    (status,) = Watcher([run], use_watchdog=False, strict=True).poll_once()
    return {"status": status.status, "shown": status.shown_status, "flags": {f.kind: f for f in status.flags}}


def test_forty_steps_at_chance_are_said_inside_the_warm_up(tmp_path):
    write_scalars(
        tmp_path / "run",
        {"train/loss": [(s, LN_V + 0.01) for s in range(1, 41)], "train/acc_0": [(s, 0.0) for s in range(1, 41)]},
    )
    report = _report(tmp_path / "run")
    assert {"warming_up", "chance_from_start"} <= set(report["flags"])
    assert report["status"] == report["shown"] == "warning"
    flag = report["flags"]["chance_from_start"]
    assert (flag.severity, flag.tag, flag.step) == ("warning", "train/loss", 40)
    assert "40 points to step 40" in flag.message and "ln 32000 = 10.37" in flag.message


def test_a_fresh_run_that_leaves_chance_only_warms_up(tmp_path):
    losses = [(s, LN_V - 0.1 * s) for s in range(1, 41)]  # 10.27 -> 6.37: out of the band by step 11
    write_scalars(tmp_path / "run", {"train/loss": losses})
    report = _report(tmp_path / "run")
    assert set(report["flags"]) == {"warming_up"} and report["shown"] == "warming"


def test_fewer_than_five_points_say_nothing_yet(tmp_path):
    write_scalars(tmp_path / "run", {"train/loss": [(s, LN_V) for s in range(1, 5)]})
    assert "chance_from_start" not in _report(tmp_path / "run")["flags"]


def test_a_run_that_logs_only_accuracy_at_zero_is_said(tmp_path):
    write_scalars(tmp_path / "run", {"train/acc_0": [(s, 0.0) for s in range(80)]})
    flag = _report(tmp_path / "run")["flags"]["chance_from_start"]
    assert flag.tag == "train/acc_0" and "80 points to step 79 is below 10 %" in flag.message


def test_past_the_warm_up_the_chance_rule_takes_over(tmp_path):
    write_scalars(tmp_path / "run", {"train/loss": [(s, LN_V + 0.01) for s in range(0, 300, 5)]})
    flags = _report(tmp_path / "run")["flags"]
    assert "loss_at_chance" in flags and "chance_from_start" not in flags and "warming_up" not in flags
