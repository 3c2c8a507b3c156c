"""`python -m triage_tui remap` killed with SIGKILL at random moments: never a half-written output.

A parent (this test) starts the real command on a ~150 MB checkpoint and kills it at random
times, some measured from the start and some from the moment its temporary directory
appears (so that they land while it writes, syncs or verifies). After every kill the
output is either absent or complete and verified, the source's hash is unchanged, and the
next run removes what the killed one left. The seed is printed on failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from builders.drafter import drafter_config, drafter_state, write_drafter
from builders.mappings import story_mappings
from triage_tui.core.formats.mapping import write_mapping_pt

HIDDEN = 1024  # lm_head [32 000, 1024] float32 = 131 MB: long enough to kill mid-write
REPO = Path(__file__).resolve().parents[1]


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if ".triage-" in p.name)


def start(source: Path, mapping: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "triage_tui",
            "remap",
            str(source),
            "--mapping",
            str(mapping),
            "--out",
            str(out),
            "--force",
            "--device",
            "cpu",
            "--json",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 60.0) -> float:
    """Seconds until ``predicate()`` holds (polled every 2 ms); inf if the process ended first."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate():
            return time.monotonic() - t0
        if proc.poll() is not None:
            return float("inf")
        time.sleep(0.002)
    raise AssertionError("timed out")


def assert_complete(out: Path, state: dict, rows: np.ndarray, run_d2t: np.ndarray) -> None:
    """The output, read with safetensors itself, is the full remap."""
    assert json.loads((out / "triage-remap.json").read_text())["rows_copied"] == int(np.count_nonzero(rows >= 0))
    written = load_file(str(out / "model.safetensors"))
    copied = np.flatnonzero(rows >= 0)
    assert torch.equal(written["lm_head.weight"][copied], state["lm_head.weight"][rows[copied]])
    assert np.array_equal(written["d2t"].numpy(), run_d2t)
    for name, tensor in state.items():
        if name not in ("lm_head.weight", "d2t", "t2d"):
            assert torch.equal(written[name], tensor), name


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill")
    ckpt_mapping, run_mapping = story_mappings()
    state = drafter_state("specforge", ckpt_mapping, hidden=HIDDEN)
    source = write_drafter(root / "drafter", state, drafter_config("specforge", hidden=HIDDEN))
    mapping = write_mapping_pt(run_mapping, root / "run.pt")
    where = {int(t): i for i, t in enumerate(ckpt_mapping.hot_ids)}
    rows = np.array([where.get(int(t), -1) for t in run_mapping.hot_ids])
    return {
        "root": root,
        "source": source,
        "mapping": mapping,
        "state": state,
        "rows": rows,
        "run_d2t": run_mapping.d2t(),
    }


def test_sigkill_at_random_moments(big):
    root, source, mapping, out = big["root"], big["source"], big["mapping"], big["root"] / "out"
    source_digest = file_digest(source / "model.safetensors")
    seed = int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)

    # One full run, timed: when its temporary directory appears and when the output does.
    proc = start(source, mapping, out)
    t_temp = wait_for(lambda: bool(leftovers(root)), proc)
    t_out = wait_for(out.exists, proc)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr.decode()
    assert json.loads(stdout)["verified"] is True
    assert_complete(out, big["state"], big["rows"], big["run_d2t"])
    total = t_temp + t_out
    assert t_out > 0.05, f"the write took {t_out:.3f} s: too fast to kill mid-write"

    outcomes = []
    for i in range(4):
        if i % 2 == 0 and out.exists():  # half the kills with no earlier output to replace
            shutil.rmtree(out)
        proc = start(source, mapping, out)
        if i in (1, 2):  # anywhere from the start (import, plan, write, verify, rename)
            time.sleep(rng.uniform(0, 1.1 * total))
            when = "from start"
        else:  # while the temporary directory exists: writing, syncing, verifying
            wait_for(lambda: bool(leftovers(root)), proc)
            # Within the first third of the write window: the timed run above was the first, cold
            # one, and a warm rerun can finish its write well inside t_out (seen: both "from temp"
            # kills of a run landing after the rename).
            time.sleep(rng.uniform(0, 0.3 * t_out))
            when = "from temp"
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        stale = leftovers(root)
        outcomes.append((when, proc.returncode, bool(stale), out.exists()))
        context = f"seed {seed}, kill {i} ({when}): {outcomes[-1]}"
        assert file_digest(source / "model.safetensors") == source_digest, context
        if out.exists():
            assert_complete(out, big["state"], big["rows"], big["run_d2t"])
        assert all(name.startswith(".out.triage-") for name in stale), context

    print(f"seed {seed}: full run temp after {t_temp:.2f} s, output {t_out:.2f} s later; kills: {outcomes}")
    # Killed mid-write at least once (a temporary directory was left), and the next run cleans up.
    assert any(left for _, _, left, _ in outcomes), f"seed {seed}: no kill landed mid-write: {outcomes}"
    proc = start(source, mapping, out)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr.decode()
    assert leftovers(root) == []
    assert_complete(out, big["state"], big["rows"], big["run_d2t"])
    assert file_digest(source / "model.safetensors") == source_digest
