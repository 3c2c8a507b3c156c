"""Memory follows what is shown, not the size of what is read: each command's peak resident memory,
measured in a child process of its own, stays under 10 times the largest file it reads and under
1 GiB for one file's metadata; a file with one value no trainer writes is refused in one line.

The files are written by the real writers: transformers' ``TrainerState.save_to_json``,
safetensors' ``save_file``; the oracle is what a user counts in the file."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors import safe_open

from builders.peak_memory import REPO, triage_peak
from triage_tui.core.formats.trainer_state import read_trainer_state

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


_WRITE_MANY_TENSORS = """\
import json, sys
import numpy as np
from safetensors.numpy import save_file
sys.path.insert(0, "tests")
from builders.drafter import drafter_config, drafter_state
directory, extra = sys.argv[1], int(sys.argv[2])
state = {name: tensor.numpy() for name, tensor in drafter_state("specforge", None, hidden=16).items()}
one = np.zeros(1, np.float32)
for i in range(extra):
    state[f"extra.layers.{i}.self_attn.q_proj.lora.weight"] = one
save_file(state, directory + "/model.safetensors", metadata={"format": "pt"})
open(directory + "/config.json", "w").write(json.dumps(drafter_config("specforge", hidden=16)))
"""


@pytest.mark.slow
def test_a_header_of_700_000_tensors_is_checked_in_memory_under_10_times_the_file(tmp_path):
    # safetensors' own writer, in a child (it holds every array it writes); the format allows a
    # header of 100 MB, and 700 000 one-element tensors make one of ~78 MB.
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    subprocess.run(
        [sys.executable, "-c", _WRITE_MANY_TENSORS, str(drafter), "700000"], check=True, cwd=REPO, timeout=600
    )
    path = drafter / "model.safetensors"
    size = path.stat().st_size
    with open(path, "rb") as handle:
        assert 64 << 20 < int.from_bytes(handle.read(8), "little") < 100_000_000
    with safe_open(str(path), framework="numpy") as opened:
        stored = len(opened.keys())  # the oracle: safetensors' own count

    run = tmp_path / "run"
    run.mkdir()
    done = triage_peak("check", run, "--checkpoint", drafter, "--device", "cpu", "--json")
    assert done.returncode in (0, 1), done.stderr
    drafter_tensors = json.loads(done.stdout)["checks"]["drafter_tensors"]
    assert drafter_tensors["status"] == "pass" and drafter_tensors["stored"] == stored == 700_013
    assert done.peak < 10 * size and done.peak < GIB, (done.peak, size)


def test_a_history_read_a_value_at_a_time_is_the_one_json_reads(tmp_path):
    # Over a few MiB, so values, numbers and multi-byte characters fall across the reader's chunks.
    from transformers import TrainerState

    history = []
    for step in range(1, 30_001):
        entry = {"loss": 10.0 - step / 7e3, "grad_norm": float("nan") if step % 997 == 0 else step / 3, "step": step}
        if step % 10 == 0:
            entry["eval_précision_ü"] = step / 1e5  # a key of non-ASCII characters, 2 bytes each
        history.append(entry)
    path = tmp_path / "checkpoint-30000" / "trainer_state.json"
    path.parent.mkdir()
    TrainerState(global_step=30_000, log_history=history, trial_params={"名前": "é" * 1000}).save_to_json(str(path))
    assert path.stat().st_size > 2 << 20

    state = read_trainer_state(path)
    raw = json.loads(path.read_text())["log_history"]  # the oracle: the stdlib's reading of the whole file
    assert len(state.log_history) == len(raw) and state.skipped_entries == 0
    scalars = state.scalars()
    for key in ("loss", "grad_norm", "eval_précision_ü"):
        expected = [(e["step"], e[key]) for e in raw if key in e]
        got = list(zip(scalars.series[key].steps.tolist(), scalars.series[key].values.tolist(), strict=True))
        assert len(got) == len(expected)
        assert all(
            a == b and (x == y or (math.isnan(x) and math.isnan(y)))
            for (a, x), (b, y) in zip(got, expected, strict=True)
        )
    assert state.log_history[-1].step == 30_000 and dict(state.log_history[9].values)["eval_précision_ü"] == 1e-4
