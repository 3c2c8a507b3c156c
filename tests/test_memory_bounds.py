"""Memory follows what is shown, not the size of what is read: each command's peak resident memory,
measured in a child process of its own, stays under 10 times the largest file it reads and under
1 GiB for one file's metadata; a file with one value no trainer writes is refused in one line.

The files are written by the real writers: transformers' ``TrainerState.save_to_json``,
safetensors' ``save_file``; the oracle is what a user counts in the file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from builders.peak_memory import triage_peak

GIB = 1 << 30
HOUR = 3600.0


def _hf_trainer_state(run: Path, entries: int, **fields) -> Path:
    """An HF Trainer checkpoint's trainer_state.json holding ``entries`` training logs, written by
    transformers' own TrainerState.save_to_json (indent 2, keys sorted), as HF Trainer saves it."""
    from transformers import TrainerState

    history = [
        {"epoch": step / entries, "grad_norm": 0.75, "learning_rate": 2e-5, "loss": 10.0 - step / entries, "step": step}
        for step in range(1, entries + 1)
    ]
    path = run / f"checkpoint-{entries}" / "trainer_state.json"
    path.parent.mkdir(parents=True)
    TrainerState(global_step=entries, max_steps=entries, log_history=history, **fields).save_to_json(str(path))
    os.utime(path, (time.time() - HOUR,) * 2)  # a finished run's last save
    return path


@pytest.mark.slow
def test_a_large_trainer_state_is_read_in_memory_that_follows_its_numbers(tmp_path):
    entries = 450_000  # ~65 MB as HF writes it
    path = _hf_trainer_state(tmp_path / "out", entries)
    size = path.stat().st_size
    assert size > 60 << 20

    done = triage_peak("scan", tmp_path, "--json", "--poll")
    assert done.returncode in (0, 1), done.stderr
    (run,) = json.loads(done.stdout)["runs"]
    assert run["last_step"] == entries and run["metrics"]["loss"]["count"] == entries
    # A logged number is held in columns (~20 bytes), not as the dicts json makes of the text.
    assert done.peak < 5 * size, (done.peak, size)


def test_one_huge_value_in_a_trainer_state_is_refused_in_bounded_memory(tmp_path):
    note = "x" * (20 << 20)  # one string of 20 MB: HF writes no value near this long
    path = _hf_trainer_state(tmp_path / "out", 10, trial_params={"note": note})
    size = path.stat().st_size

    done = triage_peak("scan", tmp_path, "--json", "--poll")
    assert done.returncode == 1, done.stderr
    (run,) = json.loads(done.stdout)["runs"]
    (error,) = run["errors"]  # one line naming the file and what is wrong with it
    assert error["path"] == str(path) and "longer than" in error["message"], error
    assert done.peak < 10 * size and done.peak < GIB, (done.peak, size)
