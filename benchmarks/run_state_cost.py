"""Cost of the run state: one /proc scan plus ``run_state`` for N runs, per poll, on this machine.

The watcher polls once a second; the TUI's idle budget is 2 % of a core with 200 runs (watch_idle.py),
so the scan and the N decisions must stay well under 20 ms. N run directories are made under
benchmarks/.work/run_state/ (each with a SummaryWriter-named event file and a train.log), WRITERS
idle children each hold one run's train.log open for writing (as `tee` does for a trainer), and
the machine's own processes are scanned as they are. Reports the process count, the open files
looked at, and the median and 90th percentile of a poll's CPU time over REPEAT polls.

    .venv/bin/python benchmarks/run_state_cost.py [N=200] [WRITERS=16] [REPEAT=50]
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from triage_tui.core.watch.process_table import ProcessScanner  # noqa: E402
from triage_tui.core.watch.run_state import run_state  # noqa: E402
from triage_tui.core.watch.signals.stall import Activity  # noqa: E402
from triage_tui.core.watch.writers import event_file_pids  # noqa: E402

WORK = REPO / "benchmarks" / ".work" / "run_state"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    writers = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    shutil.rmtree(WORK, ignore_errors=True)
    host = socket.gethostname()
    runs = []
    for i in range(n):
        run_dir = WORK / f"run{i:03d}" / "runs"
        run_dir.mkdir(parents=True)
        event = run_dir / f"events.out.tfevents.{int(time.time())}.{host}.{400000 + i}.0"
        event.write_bytes(b"")
        (run_dir / "train.log").write_text("step 0\n")
        runs.append((run_dir, (event,)))
    children = []
    try:
        for run_dir, _ in runs[:writers]:
            with open(run_dir / "train.log", "a") as log:
                children.append(
                    subprocess.Popen(
                        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, stdout=log
                    )
                )
        scanner = ProcessScanner()
        activity = Activity(time.time(), 30.0, 60.0)
        costs, scans = [], []
        states: dict[str, int] = {}
        table = None
        for _ in range(repeat):
            start = time.process_time()
            pids = event_file_pids((event for _, events in runs for event in events), scanner.hostname)
            table = scanner.scan([WORK], pids)
            scans.append(time.process_time() - start)
            now = time.time()
            found = [
                run_state(run_dir, processes=table, activity=activity, now=now, event_files=events)
                for run_dir, events in runs
            ]
            costs.append(time.process_time() - start)
        assert table is not None
        for state in found:
            states[state.state] = states.get(state.state, 0) + 1
        fds = sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in table.processes if os.path.exists(f"/proc/{pid}/fd"))
        ms = np.array(costs) * 1000
        print(f"runs {n}, writer children {writers}, processes scanned {len(table.processes)}, open files {fds}")
        print(f"states {states}")
        print(f"the scan alone: median {np.median(scans) * 1000:.2f} ms CPU")
        print(
            f"per poll (scan + {n} decisions): median {np.median(ms):.2f} ms, p90 {np.percentile(ms, 90):.2f} ms CPU "
            f"= {np.median(ms) / 10:.2f} % of a core at one poll a second"
        )
    finally:
        for child in children:
            child.kill()
            child.wait()
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
