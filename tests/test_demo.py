"""`triage demo`: the live fine-tune with the mapping bug, flagged, checked, remapped, recovered.

All end to end with the real trainer process, Watcher, diagnose(), remap and (in one test)
the real TUI driven by key presses. The trainer is paced in each of them: it takes the steps
the story gives it (``run N`` on its stdin), so every turn is due by a trainer step, never by a
number of seconds, and a busy machine only makes a test slower. The one wall-clock bound,
STALL_SECONDS without a sign of life, turns a hang into a failure.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builders.events import read_event_file
from builders.waiting import wait_for
from triage_tui import cli
from triage_tui.core.watch.signals.chance import ChanceLine
from triage_tui.samples.demo import (
    BATCH_SIZE,
    FLAG_BY_STEP,
    RECOVERY_STEPS,
    STALL_SECONDS,
    TrainerProcess,
    cpu_compute_dtype,
    demo_app,
)
from triage_tui.samples.demo_layout import DEMO_RUN, DemoLayout, prepare_demo


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


def wait_for_exit(pid: int, ceiling: float) -> bool:
    """Block until ``pid`` (not our child) exits: its pidfd turns readable then. False after ``ceiling`` s."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], ceiling)[0])
    finally:
        os.close(fd)


def cpu_flags() -> set[str]:
    """The kernel's view of this CPU's instruction sets (/proc/cpuinfo), independent of torch's probe."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo to compare the probe with")
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def test_compute_dtype_is_bfloat16_only_where_the_cpu_has_bf16_instructions():
    native = bool({"avx512_bf16", "amx_bf16"} & cpu_flags())
    assert cpu_compute_dtype({}) == ("bfloat16" if native else "float32")
    # oneDNN capped below its first ISA with a bf16 dot product (as on an AVX2-only CPU): float32
    assert cpu_compute_dtype({"ONEDNN_MAX_CPU_ISA": "AVX2"}) == "float32"
    assert cpu_compute_dtype({"DNNL_MAX_CPU_ISA": "avx512_core_vnni"}) == "float32"
    assert cpu_compute_dtype({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}) == ("bfloat16" if native else "float32")


@pytest.fixture
def layout(tmp_path) -> DemoLayout:
    # a copy of sample_runs/' files (tests/test_samples.py checks that they are the generator's)
    return prepare_demo(tmp_path / "demo")


def test_the_paced_trainer_takes_the_steps_it_is_given_and_stops_when_told(layout, monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # the trainer as it runs on a CPU without bf16
    trainer = TrainerProcess(layout, paced=True)
    try:
        started = trainer.wait_until(lambda t: t.started, STALL_SECONDS)
        assert started is not None, layout.root.joinpath("trainer.log").read_text()
        assert (started["compute_dtype"], started["batch_size"]) == ("float32", BATCH_SIZE)
        assert trainer.wait_until(lambda t: t.waiting == 0, STALL_SECONDS), "it waits for its first order"
        trainer.allow(3)
        assert trainer.wait_until(lambda t: t.waiting == 3, STALL_SECONDS)
        events = next((layout.run / "runs").glob("events.out.tfevents.*"))
        assert read_event_file(events).get("train/ploss_0").steps.tolist() == [1, 2, 3]  # flushed every step
    finally:
        trainer.stop()
    assert trainer.wait_until(lambda t: t.exited, STALL_SECONDS)
    if trainer.proc.returncode == 0:  # it finished its wait in the grace period (else it was terminated)
        assert trainer.stopped is not None and trainer.stopped["reason"] == "stdin closed"
    assert not processes_mentioning(str(layout.root))


@pytest.mark.slow
def test_headless_demo_flags_checks_remaps_and_the_loss_falls(tmp_path, capsys):
    # The headless story paces its trainer: the flag is due by FLAG_BY_STEP, the recovery by
    # RECOVERY_STEPS after the reload; --timeout only bounds a hang.
    workdir = tmp_path / "demo"
    status = cli.main(["demo", "--no-tui", "--workdir", str(workdir), "--timeout", "3600"])
    out = capsys.readouterr().out
    assert status == 0, out
    flag_step = int(re.search(r"flag loss_above_chance: \S+ = [\d.]+ at step (\d+)", out).group(1))
    assert flag_step <= FLAG_BY_STEP
    assert re.search(r"check: vocab_mapping_mismatch scores (0\.9\d|1\.00)", out), out
    own, run = map(float, re.search(r"predicts ([\d.]+)% .* own mapping, ([\d.]+)% under the run's", out).groups())
    assert own > 30.0 > 10.0 > run
    reload_step = int(re.search(r"trainer reloaded from drafter-a-remapped-\w+ at step (\d+)", out).group(1))
    recovered = int(re.search(r"step (\d+): \S+ [\d.]+, under the chance line", out).group(1))
    assert reload_step < recovered <= reload_step + RECOVERY_STEPS
    remapped = list((workdir / "_drafters").glob("drafter-a-remapped-*"))
    assert len(remapped) == 1 and (remapped[0] / "model.safetensors").is_file()
    assert not processes_mentioning(str(workdir)), "the trainer outlived the demo"

    # The chance line it prints is the one `scan` (and the TUI, from the same RunStatus) shows for the run.
    assert cli.main(["scan", str(workdir / DEMO_RUN), "--json"]) in (0, 1)
    (scanned,) = json.loads(capsys.readouterr().out)["runs"]
    chance = ChanceLine(scanned["vocab_size"], scanned["valid_fraction"])
    assert chance.value == pytest.approx(scanned["chance_loss"])
    assert scanned["valid_fraction"] is not None, "the run's dumps give the masked-average line"
    before, after = map(float, re.search(r"averaged ([\d.]+) over .* and ([\d.]+) over the last 5", out).groups())
    assert f"above the chance line {chance.label()})" in out, out
    assert before > chance.value > after
    assert "ln 32000 = 10.37" not in out


def test_demo_refuses_a_workdir_that_is_not_empty(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert cli.main(["demo", "--no-tui", "--workdir", str(tmp_path)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.slow
def test_trainer_exits_when_its_parent_dies(layout):
    # A stand-in parent that starts the trainer and is then killed without a chance to clean up.
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys; from pathlib import Path; "
            "from triage_tui.samples.demo import TrainerProcess; "
            "from triage_tui.samples.demo_layout import DemoLayout; "
            "t = TrainerProcess(DemoLayout(Path(sys.argv[1]))); "
            "print(t.wait_until(lambda t: t.started, float(sys.argv[2])) is not None, t.proc.pid, flush=True); "
            "signal.pause()",
            str(layout.root),
            str(STALL_SECONDS),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    started, pid_text = parent.stdout.readline().split()
    assert started == "True"
    pid = int(pid_text)
    assert pid in processes_mentioning(str(layout.root))
    parent.kill()
    parent.wait()
    # Its stdin closes with the parent: it stops after the step it is in, however slow that step is.
    assert wait_for_exit(pid, STALL_SECONDS) and not alive(pid), "the orphaned trainer kept running"
    assert (layout.run / "runs").is_dir()


@pytest.mark.slow
async def test_demo_in_the_tui_check_key_remap_key_and_recovery(layout):
    from triage_tui.tui.screens.remap import ConfirmRemapScreen

    trainer = TrainerProcess(layout, paced=True)
    try:
        assert trainer.wait_until(lambda t: t.started, STALL_SECONDS) is not None
        app = demo_app(layout, poll_interval=0.2, use_watchdog=False, device="cpu")
        app.animation_level = "none"
        async with app.run_test(size=(120, 40)) as pilot:

            async def by_step(predicate, due_step: int, what: str) -> None:
                """Give the trainer steps up to ``due_step``; ``predicate`` must hold before the app has
                shown that step with the trainer waiting there. Only a hang (no new step) times out."""
                trainer.allow(due_step)
                last, moved = None, time.monotonic()
                while not predicate():
                    shown = app.rows[0].last_step if app.rows else None
                    assert not (trainer.waiting == due_step and shown == due_step), f"{what}: not by step {due_step}"
                    assert not trainer.exited, f"{what}: the trainer stopped at step {trainer.step}"
                    if (shown, trainer.step) != last:
                        last, moved = (shown, trainer.step), time.monotonic()
                    assert time.monotonic() - moved < STALL_SECONDS, f"{what}: no new step since {last}"
                    await pilot.pause(0.1)

            await by_step(
                lambda: app.rows and "loss_above_chance" in app.rows[0].critical_kinds, FLAG_BY_STEP, "the loss flag"
            )
            trainer.allow(trainer.step)  # held while the check and the remap run in the app
            await pilot.press("c")
            run = app.rows[0].path
            await wait_for(pilot, lambda: app.checks.running_for is None and run in app.checks.diagnoses, STALL_SECONDS)
            assert app.checks.diagnoses[run].hypotheses[0].id == "vocab_mapping_mismatch"
            await pilot.press("m")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmRemapScreen), STALL_SECONDS)
            await pilot.press("y")
            await wait_for(pilot, lambda: run in app.remap.reports, STALL_SECONDS)
            assert app.remap.reports[run].verified
            reloaded = trainer.wait_until(lambda t: t.reloads[-1] if t.reloads else None, STALL_SECONDS)
            assert reloaded is not None and "drafter-a-remapped-" in reloaded["checkpoint"]
            reload_step = int(reloaded["step"])

            def recovered() -> bool:
                row = app.rows[0]
                return (
                    row.last_step is not None
                    and row.last_step > reload_step
                    and row.loss_last is not None
                    and row.chance_loss is not None
                    and row.loss_last < row.chance_loss
                    and "loss_above_chance" not in row.critical_kinds
                )

            await by_step(recovered, reload_step + RECOVERY_STEPS, "the loss to fall")
    finally:
        trainer.stop()
    assert not processes_mentioning(str(layout.root))
