"""`triage demo`: the live fine-tune with the mapping bug, flagged, checked, remapped, recovered.

All end to end with the real trainer process, Watcher, diagnose(), remap and (in one test)
the real TUI driven by key presses. The slow ones each start a training process.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builders.waiting import load_factor, out_of_patience
from triage_tui import cli
from triage_tui.samples.demo import FLAG_BY_STEP, RECOVERY_STEPS, STALL_SECONDS, TrainerProcess, demo_app, prepare_demo

LN_V = math.log(32_000)


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains ``text`` (the demo trainer names its root on its command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and "triage_tui.samples.demo" in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its new parent to reap it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_headless_demo_flags_checks_remaps_and_the_loss_falls(tmp_path, capsys):
    # The story's budgets are trainer steps (FLAG_BY_STEP, RECOVERY_STEPS), so a busy machine only
    # makes it slower; --timeout is a bound on a hang, far beyond the ~40 s of a quiet machine.
    status = cli.main(["demo", "--no-tui", "--workdir", str(tmp_path), "--timeout", "3600"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "flag loss_above_chance" in out
    flag_step = int(re.search(r"flag loss_above_chance: \S+ = [\d.]+ at step (\d+)", out).group(1))
    assert flag_step <= FLAG_BY_STEP
    assert re.search(r"check: vocab_mapping_mismatch scores (0\.9\d|1\.00)", out), out
    own, run = map(float, re.search(r"predicts ([\d.]+)% .* own mapping, ([\d.]+)% under the run's", out).groups())
    assert own > 30.0 > 10.0 > run
    assert "trainer reloaded from drafter-a-remapped-" in out
    before, after = map(float, re.search(r"averaged ([\d.]+) over .* and ([\d.]+) over the last 5", out).groups())
    assert before > LN_V > after
    remapped = list((tmp_path / "_drafters").glob("drafter-a-remapped-*"))
    assert len(remapped) == 1 and (remapped[0] / "model.safetensors").is_file()
    assert not processes_mentioning(str(tmp_path)), "the trainer outlived the demo"


def test_demo_refuses_a_workdir_that_is_not_empty(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert cli.main(["demo", "--no-tui", "--workdir", str(tmp_path)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.slow
def test_trainer_exits_when_its_parent_dies(tmp_path):
    layout = prepare_demo(tmp_path)
    # A stand-in parent that starts the trainer and is then killed without a chance to clean up.
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from triage_tui.samples.demo import DemoLayout, TrainerProcess; "
            "t = TrainerProcess(DemoLayout(Path(sys.argv[1]))); "
            "print(t.wait_for('started', float(sys.argv[2])) is not None, t.proc.pid, flush=True); time.sleep(600)",
            str(tmp_path),
            str(120 * load_factor()),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    started, pid = parent.stdout.readline().split()
    assert started == "True"
    pid = int(pid)
    assert pid in processes_mentioning(str(tmp_path))
    parent.kill()
    parent.wait()
    # It checks its parent before every step: one step, however slow the machine makes it.
    orphaned = time.monotonic()
    while alive(pid) and not out_of_patience(orphaned, 30):
        time.sleep(0.2)
    assert not alive(pid), "the orphaned trainer kept running"
    assert (layout.run / "runs").is_dir()


@pytest.mark.slow
async def test_demo_in_the_tui_check_key_remap_key_and_recovery(tmp_path):
    from triage_tui.tui.screens.remap import ConfirmRemapScreen

    layout = prepare_demo(tmp_path)
    trainer = TrainerProcess(layout, step_delay=0.0)
    try:
        assert trainer.wait_for("started", 120 * load_factor()) is not None
        app = demo_app(layout, poll_interval=0.2, use_watchdog=False, device="cpu")
        app.animation_level = "none"
        async with app.run_test(size=(120, 40)) as pilot:

            def step() -> int | None:
                return app.rows[0].last_step if app.rows else None

            async def until(predicate, what: str, *, within_steps: int | None = None, seconds: float = 120) -> None:
                """Wait for ``predicate``. With ``within_steps``: due before the trainer (as the app shows
                it) has gone that many steps further, however long the steps take; a stall is a
                failure. Without: due within ``seconds`` on a quiet machine (scaled by the load)."""
                start, first, last, moved = time.monotonic(), step(), step(), time.monotonic()
                while not predicate():
                    now = step()
                    if within_steps is None:
                        assert not out_of_patience(start, seconds), f"timed out waiting for {what}"
                    else:
                        if now != last:
                            last, moved = now, time.monotonic()
                        assert now is None or now - (first or 0) <= within_steps, f"{what}: not by step {now}"
                        assert time.monotonic() - moved < STALL_SECONDS, f"{what}: no new step since {now}"
                    await pilot.pause(0.2)

            await until(
                lambda: app.rows and "loss_above_chance" in app.rows[0].critical_kinds,
                "the loss flag",
                within_steps=FLAG_BY_STEP,
            )
            await pilot.press("c")
            run = app.rows[0].path
            await until(lambda: app.checks_running_for is None and run in app.diagnoses, "checks")
            assert app.diagnoses[run].hypotheses[0].id == "vocab_mapping_mismatch"
            await pilot.press("m")
            await until(lambda: isinstance(app.screen, ConfirmRemapScreen), "the remap dialog")
            await pilot.press("y")
            await until(lambda: run in app.remap_reports, "the remap")
            assert app.remap_reports[run].verified
            reloaded = trainer.wait_for("reloaded", STALL_SECONDS)
            assert reloaded is not None and "drafter-a-remapped-" in reloaded["checkpoint"]
            await until(
                lambda: (
                    app.rows[0].last_step is not None
                    and app.rows[0].last_step > int(reloaded["step"])
                    and app.rows[0].loss_last is not None
                    and app.rows[0].loss_last < LN_V
                    and "loss_above_chance" not in app.rows[0].critical_kinds
                ),
                "the loss to fall",
                within_steps=RECOVERY_STEPS,
            )
    finally:
        trainer.stop()
    assert not processes_mentioning(str(tmp_path))
