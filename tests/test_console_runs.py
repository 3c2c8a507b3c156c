"""Training consoles as a run's scalar source in discovery, `scan` and the watcher.

SpecForge's default is tracking off: its only curves are the lines its console logger prints,
redirected to a file beside the checkpoints. Those lines are printed here by SpecForge's own
``_logger`` (builders/consoles.py), the checkpoints written as its trainer lays them out.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from builders.check_run import write_events
from builders.consoles import rank0_traceback_console, specforge_lines, torchrun_tee
from builders.tensorboard import DRAFT_VOCAB, write_drafter_checkpoint, write_scalars
from triage_tui import cli

STEPS = list(range(5, 605, 5))  # 120 records: past the warm-up, so the chance rule judges them


def _chance_metrics(step: int) -> dict:
    """A run stuck at chance over the draft vocab (the case this product exists for)."""
    ploss = math.log(DRAFT_VOCAB) + 0.02 * math.sin(step)
    return {"loss": ploss, "ploss_0": ploss, "acc_0": 1 / DRAFT_VOCAB, "grad_norm": 1.5, "lr": 1e-4}


def _specforge_output(out: Path) -> Path:
    write_drafter_checkpoint(out / "llama3-eagle3-step300")
    write_drafter_checkpoint(out / "llama3-eagle3-step600")
    log = out / "train.log"
    log.write_text(specforge_lines([(step, _chance_metrics(step)) for step in STEPS]))
    return log


def _scan(path: Path, errors: list[str] | None = None) -> tuple[int, list[dict]]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["scan", str(path), "--json", "--poll"])
    assert "Traceback" not in err.getvalue()
    if errors is not None:
        errors += err.getvalue().splitlines()
    return code, json.loads(out.getvalue())["runs"]


def test_a_console_only_specforge_run_is_found_read_and_flagged_at_chance(tmp_path):
    _specforge_output(tmp_path / "out")
    code, runs = _scan(tmp_path)
    (run,) = runs
    assert run["path"] == str(tmp_path / "out") and run["sources"] == ["console"]
    assert run["errors"] == []
    loss = run["metrics"]["loss"]
    assert loss["count"] == len(STEPS) and not loss["tag"].startswith("console/")
    assert run["last_step"] == STEPS[-1]
    kinds = {flag["kind"] for flag in run["flags"]}
    assert "loss_at_chance" in kinds, run["flags"]
    assert code == 1 and run["status"] == "critical"


def test_a_console_beside_event_files_is_read_under_console_and_the_event_files_lead(tmp_path):
    out = tmp_path / "out"
    write_drafter_checkpoint(out / "llama3-eagle3-step300")
    write_events(out / "runs", [2.0, 1.5, 1.2], [0.5, 0.6, 0.7])
    (out / "train.log").write_text(specforge_lines([(step, _chance_metrics(step)) for step in STEPS]))
    _, runs = _scan(tmp_path)
    (run,) = runs
    assert run["sources"] == ["tensorboard", "console"] and run["errors"] == []
    assert run["metrics"]["loss"]["count"] == 3 and not run["metrics"]["loss"]["tag"].startswith("console/")


def test_a_log_file_with_no_checkpoints_beside_it_makes_no_run(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "build.log").write_text("gcc -O2 ...\n")
    said: list[str] = []
    assert _scan(tmp_path, said) == (2, [])  # nothing found is no pass: a CI gate must not take it for one
    (line,) = said
    assert line.startswith(f"triage scan: {tmp_path}: no run here or below")
    for looked_for in ("*tfevents*", "run-*.wandb", "*.log", "trainer_state.json", "triage.toml"):
        assert looked_for in line


def test_a_directory_holding_only_a_specforge_console_is_a_run(tmp_path):
    # SpecForge with tracking off (its default), before its first checkpoint: train.log is all there is.
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.log").write_text(specforge_lines([(step, _chance_metrics(step)) for step in STEPS]))
    code, runs = _scan(tmp_path)
    (run,) = runs
    assert run["path"] == str(out) and run["sources"] == ["console"]
    assert run["last_step"] == STEPS[-1] and run["metrics"]["loss"]["count"] == len(STEPS)
    assert code == 1  # at chance: critical


def test_the_serving_log_a_triage_toml_names_is_not_read_as_the_trainers_console(tmp_path):
    out = tmp_path / "out"
    _specforge_output(out)
    (out / "serve.log").write_text("INFO Avg Draft acceptance rate: 10.0%\n")
    (out / "triage.toml").write_text('[serving]\nlogs = ["serve.log"]\n[logs]\nconsole = ["train.log"]\n')
    _, runs = _scan(tmp_path)
    (run,) = runs
    assert run["sources"] == ["console"] and run["metrics"]["loss"]["count"] == len(STEPS)
    assert run["errors"] == [] and not any("serve.log" in flag["message"] for flag in run["flags"])


def test_specforge_usual_layout_takes_the_console_as_the_runs_and_check_names_its_crash_first(tmp_path, triage):
    # `specforge train` with tracking on tensorboard, before its first checkpoint: events in out/runs/,
    # the console the user redirected in out/train.log. The worker died with a CUDA error.
    out = tmp_path / "out"
    write_scalars(out / "runs", {"train/loss": [(step, 2.0 - step / 1000) for step in range(0, 30, 3)]})
    log = rank0_traceback_console(out, specforge_lines([(3, {"loss": 1.9}), (27, {"loss": 1.7})]))
    log.rename(out / "train.log")
    (out / "store").unlink(missing_ok=True)  # the process group's rendezvous file, not the trainer's
    cause = "CUDA error: an illegal memory access was encountered"

    code, runs = _scan(tmp_path)
    (run,) = runs
    assert run["path"] == str(out) and run["sources"] == ["tensorboard", "console"]
    assert run["state"] == "crashed" and cause in run["crash_line"]
    assert code == 1

    text = triage("check", out)
    first = text.stdout.splitlines()[0]
    assert first.startswith(f"crashed: {run['crash_line']}  (last logged step 27, ")
    document = json.loads(triage("check", out, "--json").stdout)
    assert list(document)[0] == "crash"
    crash = document["crash"]
    assert crash["line"] == run["crash_line"] and crash["step"] == 27
    assert abs(crash["time"] - (out / "runs").stat().st_mtime) < 3600


def test_a_crash_is_named_by_its_exception_line_not_the_raise_that_quotes_it(tmp_path, triage):
    # A real Python traceback: the frame's source line quotes the error it raises, as a trainer's
    # guard does; the crash is the exception line the traceback ends in (what `tail -1` shows).
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.py").write_text(
        "from specforge.training.assembly import _logger\n"
        "def allocate(step, gib):\n"
        '    raise RuntimeError(f"CUDA out of memory. Tried to allocate {gib:.2f} GiB (step {step})")\n'
        "for step in range(1, 8):\n"
        "    _logger({'loss': 10.4, 'acc': 0.0}, step)\n"
        "allocate(step, 2)\n"
    )
    with open(out / "train.log", "wb") as log:
        done = subprocess.run([sys.executable, "train.py"], cwd=out, stdout=log, stderr=subprocess.STDOUT, timeout=300)
    assert done.returncode == 1
    (out / "train.py").unlink()
    text = (out / "train.log").read_text()
    assert '    raise RuntimeError(f"CUDA out of memory.' in text  # the frame quoting the error
    exception = text.splitlines()[-1]
    assert exception == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (step 7)"

    code, (run,) = _scan(tmp_path)
    assert run["state"] == "crashed" and run["crash_line"] == exception and code == 1
    first = triage("check", out).stdout.splitlines()[0]
    assert first.startswith(f"crashed: {exception}  (last logged step 7, ")
    crash = json.loads(triage("check", out, "--json").stdout)["crash"]
    assert crash["line"] == exception and crash["step"] == 7
    assert abs(crash["time"] - (out / "train.log").stat().st_mtime) < 60


def test_scan_and_check_say_what_was_read_of_a_console_holding_two_ranks_lines(tmp_path, triage):
    # torchrun --tee copied both workers' SpecForge lines into one log; its name holds an escape.
    workers = tmp_path / "workers"
    workers.mkdir()
    ranks = []
    for rank in (0, 1):
        path = workers / f"{rank}_stdout.log"
        path.write_text(specforge_lines([(step, _chance_metrics(step)) for step in STEPS[:10]]))
        ranks.append((rank, path))
    out = tmp_path / "out"
    write_drafter_checkpoint(out / "llama3-eagle3-step300")
    name = "\x1b[2Jtrain.log"
    torchrun_tee(out / name, ranks)
    said = "rank 0's lines; 10 line(s) of other ranks skipped"

    _, (run,) = _scan(out)
    (note,) = run["source_notes"]
    assert note.startswith(f"{name}: ") and note.endswith(said)  # JSON carries the name as it is
    assert run["last_step"] == STEPS[9] and run["metrics"]["loss"]["count"] == 10  # rank 0's only

    document = json.loads(triage("check", out, "--json").stdout)
    assert document["source_notes"] == [note]
    text = triage("check", out).stdout
    (line,) = [line for line in text.splitlines() if line.startswith("  read ")]
    assert line.startswith("  read       ^[[2Jtrain.log: ") and line.endswith(said)
    assert "\x1b" not in text  # the file's name cannot clear the user's terminal
