"""`triage remap` at the edges of what a checkpoint may be and of how a remap may end: a header over
32 MiB (safetensors allows 100 MB) written by safetensors itself, and the real command stopped by
SIGTERM mid-write: one line on stderr, nothing partial where the output goes.

Outputs are read back with safetensors' own ``safe_open``/``load_file``, never with the code under test."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from builders.drafter import drafter_config, drafter_state, write_drafter
from builders.mappings import DRAFT_VOCAB
from builders.remap import expected_source_rows, listing, tree_digest
from builders.waiting import out_of_patience
from triage_tui.core.formats.mapping import write_mapping_pt

REPO = Path(__file__).resolve().parents[1]
HEADER_OVER = 32 << 20
# Tensors of one element named at length: 20 000 of them make a header of ~36 MB.
EXTRA_TENSORS = 20_000
NAME_PAD = 1_800


def remap_argv(source: Path, mapping: Path, out: Path, *more: str) -> list[str]:
    argv = [sys.executable, "-m", "triage_tui", "remap", str(source), "--mapping", str(mapping)]
    return [*argv, "--out", str(out), "--device", "cpu", *more]


def header_length(path: Path) -> int:
    with open(path, "rb") as handle:
        return int.from_bytes(handle.read(8), "little")


def test_a_header_over_32_mib_is_remapped(tmp_path, story):
    ckpt_mapping, run_mapping = story
    state = drafter_state("specforge", ckpt_mapping, hidden=16)
    for i in range(EXTRA_TENSORS):
        state[f"extra.{'x' * NAME_PAD}.{i}"] = torch.tensor([float(i)])
    source = write_drafter(tmp_path / "drafter", state, drafter_config("specforge", hidden=16))
    assert HEADER_OVER < header_length(source / "model.safetensors") < 100_000_000
    mapping = write_mapping_pt(run_mapping, tmp_path / "run.pt")
    before = tree_digest(source)
    out = tmp_path / "out"
    done = subprocess.run(remap_argv(source, mapping, out, "--json"), capture_output=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert json.loads(done.stdout)["verified"] is True
    assert tree_digest(source) == before
    rows = expected_source_rows(ckpt_mapping, run_mapping)
    copied = np.flatnonzero(rows >= 0)
    with safe_open(str(out / "model.safetensors"), framework="pt") as written:
        assert set(written.keys()) == set(state)
        head = written.get_tensor("lm_head.weight")
        assert head.shape == (DRAFT_VOCAB, 16)
        assert torch.equal(head[copied], state["lm_head.weight"][rows[copied]])
        assert torch.equal(written.get_tensor("d2t"), torch.from_numpy(run_mapping.d2t()))
        for name in (f"extra.{'x' * NAME_PAD}.0", f"extra.{'x' * NAME_PAD}.{EXTRA_TENSORS - 1}"):
            assert torch.equal(written.get_tensor(name), state[name])
    assert header_length(out / "model.safetensors") > HEADER_OVER


HIDDEN = 1024  # lm_head [32 000, 1024] float32 = 131 MB: long enough to stop mid-write


@pytest.fixture(scope="module")
def big(tmp_path_factory, story):
    root = tmp_path_factory.mktemp("term")
    ckpt_mapping, run_mapping = story
    state = drafter_state("specforge", ckpt_mapping, hidden=HIDDEN)
    source = write_drafter(root / "drafter", state, drafter_config("specforge", hidden=HIDDEN))
    return root, source, write_mapping_pt(run_mapping, root / "run.pt")


def written_bytes(pid: int) -> int:
    """What the process has passed to write calls so far (/proc/PID/io ``wchar``); 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def staged(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if ".triage-" in p.name)


@pytest.mark.parametrize(
    ("earlier", "signals"),
    [(False, 1), (True, 1), (True, 2)],
    ids=["no-output-yet", "replacing-an-output", "twice"],
)
def test_sigterm_mid_write_says_one_line_and_leaves_nothing_partial(big, earlier, signals):
    """The first SIGTERM stops the remap at its next window, a second at once: either way one line on
    stderr, exit 143 as a shell reports a SIGTERM, the temporary directory gone, the source untouched,
    and where the output goes the earlier output whole or nothing."""
    root, source, mapping = big
    out = root / f"out-{earlier}-{signals}"
    if earlier:
        done = subprocess.run(remap_argv(source, mapping, out, "--init-missing", "zeros"), cwd=REPO, timeout=600)
        assert done.returncode == 0
    kept = tree_digest(out) if earlier else None
    source_before = tree_digest(source)
    argv = remap_argv(source, mapping, out, *(["--force"] if earlier else []))
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    started = time.monotonic()
    while not (staged(root) and written_bytes(proc.pid) > 20_000_000):
        assert proc.poll() is None, proc.communicate()
        assert not out_of_patience(started, 120), "the remap never began writing"
        time.sleep(0.002)
    proc.send_signal(signal.SIGSTOP)  # frozen mid-write while it is looked at
    assert staged(root), "the signal lands while the output is being written"
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    if signals == 2:
        proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    lines = stderr.decode().splitlines()
    assert proc.returncode == 128 + signal.SIGTERM, stderr.decode()
    assert len(lines) == 1 and lines[0].startswith("triage: remap stopped by SIGTERM"), lines
    assert stdout == b""
    assert staged(root) == [], "the temporary directory is removed on the way out"
    assert tree_digest(source) == source_before
    if earlier:
        assert tree_digest(out) == kept, "the earlier output stays whole"
    else:
        assert not out.exists()
    assert "drafter" in listing(root)
