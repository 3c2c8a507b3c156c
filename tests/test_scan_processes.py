"""`scan` of many local runs reads them in forked processes (core/watch/fanout.py): the same report
as the plain path, one process, with the work really done by children.

Forking is only done from a process with one thread, so these run `triage` in a process of its own
(an xdist worker has threads of its own: there every scan takes the plain path).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from builders.tensorboard import write_scalars

REPO = Path(__file__).resolve().parent.parent
RUNS = 96  # above fanout.MIN_ITEMS: the workers' chunks are 16 runs each

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks only on Linux")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """96 runs of four kinds, each one's event file written by torch's SummaryWriter: falling to a
    healthy loss, flat at chance over 32 000 (ln 32 000 = 10.37), diverging, and one with a byte of a
    record flipped mid-file; every third run says its draft vocab in a config.json."""
    made = tmp_path_factory.mktemp("kinds")
    steps = range(0, 2000, 10)
    kinds = {
        "healthy": {
            "train/ploss_0": [(s, 10.4 * 0.999**s + 1.5) for s in steps],
            "train/acc_0": [(s, min(0.7, s / 2500)) for s in steps],
        },
        "chance": {
            "train/ploss_0": [(s, 10.37 + 0.01 * (s % 3)) for s in steps],
            "train/acc_0": [(s, 0.0) for s in steps],
        },
        "diverged": {"train/ploss_0": [(s, 6.0 + s / 100) for s in steps]},
        "damaged": {"train/ploss_0": [(s, 8.0 - s / 1000) for s in steps]},
    }
    files = {name: write_scalars(made / name, series, wall_time=1_790_000_000.0) for name, series in kinds.items()}
    root = tmp_path_factory.mktemp("sweep")
    names = list(kinds)
    for n in range(RUNS):
        kind = names[n % len(names)]
        run = root / f"run-{n:03d}-{kind}"
        run.mkdir()
        data = bytearray(files[kind].read_bytes())
        if kind == "damaged":
            data[len(data) // 2] ^= 0xFF
        (run / files[kind].name).write_bytes(data)
        if n % 3 == 0:
            (run / "config.json").write_text(json.dumps({"draft_vocab_size": 32000}))
    return root


def _scan_in_own_process(sweep: Path, jobs: int) -> tuple[dict, float]:
    """`triage scan --json --jobs N` in a process of its own: its JSON, and the CPU seconds its
    children spent (the workers, joined before it returns)."""
    script = (
        "import resource, sys\n"
        "from triage_tui import cli\n"
        "code = cli.main(['scan', '--json', '--jobs', sys.argv[2], sys.argv[1]])\n"
        "used = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(f'children {used.ru_utime + used.ru_stime} exit {code}', file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(sweep), str(jobs)], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("children ") and last.endswith(" exit 1"), done.stderr  # critical runs: exit 1
    return json.loads(done.stdout), float(last.split()[1])


def test_a_scan_in_processes_reports_what_one_process_reports(sweep):
    alone, alone_children = _scan_in_own_process(sweep, 1)
    shared, shared_children = _scan_in_own_process(sweep, 2)
    assert shared == alone
    # what a user checks: every run listed in order, the four kinds told apart
    runs = alone["runs"]
    assert [run["name"] for run in runs] == sorted(path.name for path in sweep.iterdir())
    by_kind = {kind: [run for run in runs if run["name"].endswith(kind)] for kind in ("healthy", "chance", "damaged")}
    assert all(run["status"] == "ok" and not run["errors"] for run in by_kind["healthy"])
    assert all(run["status"] == "critical" for run in by_kind["chance"])
    assert all(any(flag["kind"] == "damaged_records" for flag in run["flags"]) for run in by_kind["damaged"])
    # the work was done by children with --jobs 2, by none with --jobs 1
    assert alone_children < 0.05 < shared_children, (alone_children, shared_children)


def _fanout_in_own_process(body: str) -> str:
    script = "import os, threading\nfrom triage_tui.core.watch.fanout import done_everywhere\n" + body
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_items_a_dead_worker_held_are_done_by_the_parent():
    out = _fanout_in_own_process(
        "parent = os.getpid()\n"
        "def work(i):\n"
        "    if i == 37 and os.getpid() != parent:\n"
        "        os._exit(1)  # a worker killed (out of memory) while it held item 37\n"
        "    return i * i, os.getpid()\n"
        "got = sorted(done_everywhere(200, work, 2))\n"
        "print([i for i, _ in got] == list(range(200)), all(v == i * i for i, (v, _) in got),"
        " len({pid for _, (_, pid) in got} - {parent}) >= 1, dict(got)[37][1] == parent)\n"
    )
    assert out == "True True True True"


def test_items_are_done_here_when_no_worker_can_be_forked():
    out = _fanout_in_own_process(
        "import errno\n"
        "def refused():\n"
        "    raise OSError(errno.EAGAIN, 'Resource temporarily unavailable')  # fork(2) under a pid limit\n"
        "os.fork = refused\n"
        "got = sorted(done_everywhere(200, lambda i: (i * i, os.getpid()), 2))\n"
        "print([i for i, _ in got] == list(range(200)), {pid for _, (_, pid) in got} == {os.getpid()})\n"
    )
    assert out == "True True"


def test_a_process_with_threads_is_never_forked():
    out = _fanout_in_own_process(
        "held = threading.Event()\n"
        "threading.Thread(target=held.wait, daemon=True).start()\n"
        "pids = {pid for _, pid in done_everywhere(200, lambda i: os.getpid(), 2)}\n"
        "print(pids == {os.getpid()})\n"
    )
    assert out == "True"


def test_items_are_done_in_workers_from_a_process_of_one_thread():
    out = _fanout_in_own_process(
        "import time\n"
        "got = dict(done_everywhere(200, lambda i: time.sleep(0.01) or os.getpid(), 2))  # 13 chunks of 0.16 s\n"
        "print(sorted(got) == list(range(200)), os.getpid() not in set(got.values()), len(set(got.values())))\n"
    )
    assert out == "True True 2"


def test_jobs_must_be_at_least_one(triage, tmp_path):
    done = triage("scan", "--jobs", "0", tmp_path)
    assert done.returncode == 2 and "--jobs: must be >= 1" in done.stderr
