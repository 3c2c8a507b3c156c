"""Nothing a bucket's run fetched survives the command, however it ends: each `triage` here is a
process of its own (``python -m triage_tui``, as a user runs it) with TMPDIR pointing at a test
directory, against moto's real S3 server (builders/object_store.py); after it ends, normally, with
exit 2, killed by SIGTERM or interrupted by Ctrl-C in the middle of a scan, that directory is empty.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builders.children import REPO
from builders.object_store import upload_tree
from builders.samples import copy_samples
from builders.waiting import out_of_patience
from triage_tui.core.objstore import scratch

# obstore installs on Python 3.11 and later (the test extra); every other package here is imported hard.
pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="obstore needs Python 3.11")


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    return copy_samples(tmp_path_factory.mktemp("samples") / "sample_runs")


@pytest.fixture
def temp(tmp_path) -> Path:
    """The command's temp dir (TMPDIR), empty at the start."""
    path = tmp_path / "tmp"
    path.mkdir()
    return path


def _env(temp: Path) -> dict[str, str]:
    # The object cache is documented and size-capped (objstore/cache.py): kept out of the temp dir.
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TMPDIR": str(temp),
        "XDG_CACHE_HOME": str(temp.parent / "cache"),
    }


def _triage(temp: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "triage_tui", *argv],
        env=_env(temp),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _left(temp: Path) -> list[str]:
    # os.walk, not rglob: the guard may be removing the tree while it is listed, and a directory
    # gone between its listing and its scan is simply not there (rglob raises FileNotFoundError).
    left = []
    for parent, dirs, files in os.walk(temp):
        left += [str((Path(parent) / name).relative_to(temp)) for name in dirs + files]
    return sorted(left)


def _empty_soon(temp: Path, seconds: float = 10.0) -> list[str]:
    """What is left in ``temp`` once it is empty or ``seconds`` (scaled by the load) have passed."""
    started = time.monotonic()
    while _left(temp) and not out_of_patience(started, seconds):
        time.sleep(0.05)
    return _left(temp)


@pytest.fixture
def uploaded(bucket, samples) -> str:
    name, client, _ = bucket
    upload_tree(client, name, "team/sample_runs", samples)
    client.put_object(Bucket=name, Key="team/configs-only/config.json", Body=b'{"vocab_size": 32000}')
    return f"s3://{name}/team"


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (("scan", "{url}/sample_runs"), 1),  # the samples hold critical runs
        (("scan", "--json", "{url}/sample_runs"), 1),
        (("scalars", "{url}/sample_runs/healthy"), 0),
        (("scalars", "{url}/configs-only"), 2),  # mirrored, then refused: no scalar file under it
    ],
)
def test_nothing_is_left_in_the_temp_dir(uploaded, temp, argv, code):
    done = _triage(temp, *(arg.format(url=uploaded) for arg in argv))
    assert done.returncode == code, done.stderr
    # The command's own end removes it (no waiting on the guard): empty as soon as it returns.
    assert _left(temp) == []


def test_a_check_leaves_no_sparse_checkpoint_behind(uploaded, temp):
    runs = f"{uploaded}/sample_runs"
    inputs = ["--checkpoint", f"{runs}/_drafters/drafter-a", "--target", f"{runs}/_target"]
    done = _triage(temp, "check", "--json", "--device", "cpu", *inputs, f"{runs}/vocab-mismatch")
    assert done.returncode == 1, done.stderr  # the checkpoint was read: the mismatch found
    assert _left(temp) == []


def _scan_stopped_mid_way(bucket, uploaded: str, temp: Path, how: signal.Signals) -> subprocess.Popen:
    """A scan whose requests the proxy holds unanswered once its mirror exists, then sent ``how``."""
    _, _, proxy = bucket
    proxy.stall_next(10_000)  # every request from now on waits
    process = subprocess.Popen(
        [sys.executable, "-m", "triage_tui", "scan", f"{uploaded}/sample_runs"],
        env=_env(temp),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        started = time.monotonic()
        # The scratch directory, not any entry: Python's tempfile first probes the temp dir with a
        # file of its own (open, write, unlink), and a SIGTERM sent while that probe stands, which
        # a loaded machine made long enough to see, leaves it behind whatever triage does.
        while not any(path.name.startswith(scratch.PREFIX) for path in temp.iterdir()):
            assert process.poll() is None, "the scan ended before it listed"
            assert not out_of_patience(started, 60), "no mirror directory appeared"
            time.sleep(0.05)
        process.send_signal(how)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        proxy.stall_next(0)
        proxy.release()
    return process


def test_a_scan_killed_by_sigterm_mid_way_leaves_nothing(bucket, uploaded, temp):
    process = _scan_stopped_mid_way(bucket, uploaded, temp, signal.SIGTERM)
    assert process.returncode == -signal.SIGTERM
    assert _empty_soon(temp) == []


def test_a_scan_interrupted_by_ctrl_c_mid_way_leaves_nothing(bucket, uploaded, temp):
    process = _scan_stopped_mid_way(bucket, uploaded, temp, signal.SIGINT)
    assert process.returncode != 0
    assert _empty_soon(temp) == []
