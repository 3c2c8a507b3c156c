"""`python -m triage_tui remap` killed with SIGKILL at random moments: never a half-written output.

A parent (this test) starts the real command on a ~150 MB checkpoint and kills it at points
of its progress, not of the clock: when its temporary directory appears, and when it has
written a random share of what a whole run writes (its write calls, /proc/PID/io ``wchar``;
the weights file is allocated whole up front, so its size says nothing). The process is
stopped (SIGSTOP) before it is looked at and killed, so a kill counted as landing while the
temporary directory existed did, on any machine. After every kill the output is either absent or complete
and verified, the source's hash is unchanged, and the next run removes what the killed one left.
The seed is printed on failure.
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
from builders.waiting import out_of_patience
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


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 60.0) -> bool:
    """True once ``predicate()`` holds (looked at every 2 ms); False if the process ended first.

    ``timeout`` is for a quiet machine (scaled by the load): only a hang reaches it.
    """
    t0 = time.monotonic()
    while not out_of_patience(t0, timeout):
        if predicate():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.002)
    raise AssertionError("timed out")


def written_bytes(pid: int) -> int:
    """What the process has passed to write calls so far (/proc/PID/io ``wchar``); 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


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

    # One full run: the output later kills may have to replace, and how much a whole run writes.
    proc = start(source, mapping, out)
    whole = 0
    while proc.poll() is None:
        whole = max(whole, written_bytes(proc.pid))
        time.sleep(0.002)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr.decode()
    assert json.loads(stdout)["verified"] is True
    assert_complete(out, big["state"], big["rows"], big["run_d2t"])
    assert whole > 100_000_000, f"a whole run was seen to write {whole} bytes"

    # Where each kill lands: the temporary directory just made, then random shares of the writing.
    points = [("staged", 0)] + [("writing", int(rng.uniform(0.1, 0.7) * whole)) for _ in range(3)]
    outcomes = []
    for i, (when, at) in enumerate(points):
        if i % 2 == 0 and out.exists():  # half the kills with no earlier output to replace
            shutil.rmtree(out)
        proc = start(source, mapping, out)
        reached = wait_for(lambda at=at, pid=proc.pid: bool(leftovers(root)) and written_bytes(pid) >= at, proc)
        proc.send_signal(signal.SIGSTOP)  # frozen where it is while it is looked at
        staging = leftovers(root)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        stale = leftovers(root)
        outcomes.append((when, at, reached, bool(stale), out.exists()))
        context = f"seed {seed}, kill {i}: {outcomes[-1]}"
        assert reached, context
        assert file_digest(source / "model.safetensors") == source_digest, context
        if out.exists():
            assert_complete(out, big["state"], big["rows"], big["run_d2t"])
        assert all(name.startswith(".out.triage-") for name in stale), context
        # Killed while its temporary directory existed, as seen with the process stopped: it is left
        # behind (for the next run to remove), and the output is the earlier one or none.
        assert staging and stale == staging, context

    print(f"seed {seed}: kills {outcomes}")
    # The next run cleans up what the killed ones left.
    proc = start(source, mapping, out)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr.decode()
    assert leftovers(root) == []
    assert_complete(out, big["state"], big["rows"], big["run_d2t"])
    assert file_digest(source / "model.safetensors") == source_digest
