"""A console where a progress meter shares its lines: every point the trainer printed is read.

SpecForge's trainer draws its tqdm bar on a terminal and prints ``step N: {...}`` between two
redraws; a redraw ends with no newline, so each step line starts right behind the bar's ``]``. The
consoles are written by SpecForge's own ``_logger`` and ``TrainerController`` bar on a
pseudo-terminal (builders/consoles.py), copied by torchrun's ``tail_logfile`` where a launcher
prefixes ranks. The oracle is what grep counts in the file.
"""

from __future__ import annotations

import csv
import io
import os
import re
import time
from pathlib import Path

import pytest

from builders.consoles import specforge_lines, specforge_meter_console, torchrun_tee

STEPS = 300
HOUR = 3600.0
_PRINTED = re.compile(r"step (\d+): \{'loss': ([^,]+),")


def _printed(log: Path, prefix: str = "") -> dict[int, float]:
    """Every (step, loss) SpecForge printed, as grep finds them (the last copy of a step wins)."""
    text = log.read_bytes().decode()
    return {int(step): float(loss) for step, loss in re.findall(re.escape(prefix) + r".*?" + _PRINTED.pattern, text)}


def _exported_loss(triage, run: Path) -> dict[int, float]:
    os.utime(run / "train.log", (time.time() - HOUR,) * 2)  # a finished run's log
    exported = triage("scalars", run, "--tag", "loss")
    assert exported.returncode == 0, exported.stderr
    rows = [row for row in csv.DictReader(io.StringIO(exported.stdout)) if row["tag"] == "loss"]
    values = {int(row["step"]): float(row["value"]) for row in rows}
    assert len(values) == len(rows)  # one point a step
    return values


@pytest.fixture(scope="module")
def meter_console(tmp_path_factory) -> Path:
    return specforge_meter_console(tmp_path_factory.mktemp("meter") / "train.log", STEPS)


def test_every_step_printed_behind_a_tqdm_redraw_is_read(tmp_path, triage, meter_console):
    run = tmp_path / "out"
    run.mkdir()
    log = run / "train.log"
    log.write_bytes(meter_console.read_bytes())
    text = log.read_text()
    assert len(re.findall(r"step/s\]step \d+: \{", text)) >= STEPS - 1  # the bar and the step share a line
    printed = _printed(log)
    assert sorted(printed) == list(range(1, STEPS + 1))
    assert _exported_loss(triage, run) == printed


def test_a_coloured_meter_copied_by_torchrun_with_rank_prefixes_loses_no_point(tmp_path, triage):
    worker = specforge_meter_console(tmp_path / "worker0" / "train.log", STEPS, colour="green")
    assert "\x1b[" in worker.read_text()  # tqdm's own colour escapes around the bar
    run = tmp_path / "out"
    run.mkdir()
    torchrun_tee(run / "train.log", [(0, worker)])
    assert (run / "train.log").read_text().count("[default0]:") >= STEPS
    printed = _printed(worker)
    assert len(printed) == STEPS
    assert _exported_loss(triage, run) == printed


def test_srun_labelled_ranks_read_rank_0_behind_its_meter(tmp_path, triage, meter_console):
    # ``srun --label``: every line of task N starts "N: "; rank 1 prints the same steps, no bar, and
    # other values (here: its own, to tell them apart), interleaved line by line with rank 0's.
    rank1 = specforge_lines([(step, {"loss": 99.0, "acc": 0.0}) for step in range(1, STEPS + 1)]).splitlines()
    rank0 = meter_console.read_bytes().decode().split("\n")
    run = tmp_path / "out"
    run.mkdir()
    with open(run / "train.log", "w", newline="") as out:
        for index, line in enumerate(rank0):
            if line:
                out.write(f"0: {line}\n")
            if index < len(rank1):
                out.write(f"1: {rank1[index]}\n")
    printed = _printed(meter_console)
    assert len(printed) == STEPS
    assert _exported_loss(triage, run) == printed
