"""A sweep's first load on two cores: 100 runs x 100 000 scalars, `triage scan` and the TUI against rustboard.

The tree is bench_scale.py's (SpecForge layout, one scalar event per record as torch's
SummaryWriter writes them, 10 tags; every load asserts the exact number of points read). Each
round runs, one after another so they see the same machine, as whole processes:
- rustboard: tensorboard's Rust data server ``--reload once --samples-per-plugin scalars=all``,
  exec to its "Finished load cycle" log line (bench_scale.rustboard_load; it reads runs on
  several threads);
- ``triage scan TREE`` from exec to exit, its runs read in one process per core (its default), and
  ``triage scan TREE --jobs 1``, all in one process: what the processes gain;
- the TUI (``TriageApp`` under ``App.run_test``, headless, its first poll begun before Textual is
  imported, as ``triage`` does: commands/tui.py ``start_reading``): from exec to the first rows on
  screen and to every run's row with every point loaded.

First rows on a real terminal are bench_paint.py's. Memory is every tool's whole-process peak RSS.

    .venv/bin/python benchmarks/bench_sweep.py                 # ~3 min + writing the tree (~10 s)
    .venv/bin/python benchmarks/bench_sweep.py --runs 20 --points 20000 --rounds 2 --dry-run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import bench_scale  # noqa: E402  (the tree writer and rustboard's timing are bench_scale's)
import record  # noqa: E402
from triage_tui.core.watch.fanout import default_workers  # noqa: E402  (how many processes `scan` starts)


def write_tree(root: Path, runs: int, points: int) -> int:
    import numpy as np

    if not (root / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        rng = np.random.default_rng(252)
        bench_scale.check_records_match_the_real_writer(rng)
        total = sum(bench_scale.write_run(root / f"run_{i:03d}", points, rng) for i in range(runs))
        (root / ".complete").write_text(str(total))
    return int((root / ".complete").read_text())


def timed(
    cmd: list[str], env: dict[str, str] | None = None, timeout: float | None = None
) -> tuple[float, float, float, str]:
    """(seconds from exec to exit, CPU seconds and whole-process peak RSS in MiB of the process and
    the helpers it waited for, stdout). ``env``: the child's environment (this one, with the
    checkout on PYTHONPATH, by default); ``timeout``: a child running past it is killed and the
    benchmark stops."""
    env = env if env is not None else {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=REPO)
        deadline = None if timeout is None else t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG if deadline is not None else 0)
            if pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                proc.kill()
                proc.wait()
                raise SystemExit(f"{cmd} ran past {timeout:.0f} s")
            time.sleep(0.01)
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) not in (0, 1):
            raise SystemExit(f"{cmd} failed: {err.read().decode()[-2000:]}")
        return seconds, usage.ru_utime + usage.ru_stime, record.whole_process_peak_mib(usage), out.read().decode()


def children_cpu() -> float:
    """CPU seconds (user + system) of every child process waited for so far, their helpers included."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def scan_points(stdout: str) -> int:
    """The points of the loss and accuracy series of every run `scan --json` printed (0 for a run
    none of whose points were read)."""
    runs = json.loads(stdout)["runs"]
    return sum((run["metrics"][name] or {}).get("count", 0) for run in runs for name in ("loss", "accuracy"))


def child_tui(root: str, runs: int, exec_wall: float) -> dict:
    from triage_tui.commands.tui import import_app, start_reading

    watcher = start_reading([Path(root)], poll_interval=1.0)  # as `triage` does before it imports Textual
    app_class = import_app()  # as `triage` imports it
    out: dict = {}

    async def session() -> None:
        app = app_class([root], poll_interval=1.0, watcher=watcher)
        async with app.run_test(size=(120, 36)) as pilot:
            while not app.statuses:
                await asyncio.sleep(0.005)
            out["first_rows_s"] = time.time() - exec_wall
            out["first_rows"] = len(app.statuses)
            while len(app.statuses) < runs or app.watcher is None or app.watcher.polls == 0:
                await asyncio.sleep(0.01)
            out["all_rows_s"] = time.time() - exec_wall
            out["points"] = sum(s.scalars.points for s in app.statuses.values())
            await pilot.press("q")

    asyncio.run(session())
    return out


def tui(root: Path, runs: int) -> tuple[dict, float, float]:
    code = (
        f"import sys, json; sys.path.insert(0, {str(HERE)!r}); import bench_sweep; "
        f"print(json.dumps(bench_sweep.child_tui({str(root)!r}, {runs}, {time.time()!r})))"
    )
    _, cpu, peak, stdout = timed([sys.executable, "-c", code])
    return json.loads(stdout.strip().splitlines()[-1]), cpu, peak


def main() -> None:
    import as_installed  # benchmarks/: the script's own directory is on sys.path

    as_installed.compile_triage()  # timed processes start as an installed triage does
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the tree in benchmarks/.work/sweep for a rerun")
    parser.add_argument("--dry-run", action="store_true", help="print the run, append nothing to RESULTS-sweep.md")
    args = parser.parse_args()
    run = record.Run("sweep", dry_run=args.dry_run)
    root = HERE / ".work" / "sweep" / f"{args.runs}x{args.points}"
    t0 = time.perf_counter()
    expected = write_tree(root, args.runs, args.points)
    written = time.perf_counter() - t0
    size = bench_scale.tree_bytes(root)
    scan = [sys.executable, "-m", "triage_tui", "scan", str(root), "--json"]
    keys = ("rustboard", "scan", "scan one process", "tui first rows", "tui all rows")
    times: dict[str, list[float]] = {k: [] for k in keys}
    cpus: dict[str, list[float]] = {k: [] for k in keys}
    peaks: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(args.rounds):
        cpu0 = children_cpu()
        rust = bench_scale.rustboard_load(root)
        cpus["rustboard"].append(children_cpu() - cpu0)
        times["rustboard"].append(rust["load_s"])
        peaks["rustboard"].append(rust["rss_peak_kb"] / 1024)
        for key, command in (("scan", scan), ("scan one process", [*scan, "--jobs", "1"])):
            seconds, cpu, peak, stdout = timed(command)
            assert scan_points(stdout) == expected * 2 // len(bench_scale.TAGS), "scan read a wrong number of points"
            times[key].append(seconds)
            cpus[key].append(cpu)
            peaks[key].append(peak)
        shown, cpu, peak = tui(root, args.runs)
        assert shown["points"] == expected, shown
        times["tui first rows"].append(shown["first_rows_s"])
        times["tui all rows"].append(shown["all_rows_s"])
        for key in ("tui first rows", "tui all rows"):
            cpus[key].append(cpu)  # the whole session's, until it quit
            peaks[key].append(peak)
    labels = {
        "rustboard": "rustboard 0.7.2 load cycle (tensorboard's Rust data server)",
        "scan": f"`triage scan TREE` ({default_workers()} processes)",
        "scan one process": "`triage scan TREE --jobs 1`",
        "tui first rows": "`triage TREE` (headless): first rows on screen",
        "tui all rows": "`triage TREE` (headless): every run loaded",
    }
    median = {k: statistics.median(v) for k, v in times.items()}
    lines = [
        f"| {labels[k]} | {record.spread(times[k])} | {median[k] / median['rustboard']:.2f} "
        f"| {record.spread(cpus[k])} | {statistics.median(peaks[k]):.0f} |"
        for k in keys
    ]
    table = (
        f"{args.runs} runs × {args.points:,} scalars ({expected:,} points, {size / 1e6:.0f} MB of event files, "
        f"written in {written:.0f} s); {args.rounds} rounds, each: rustboard, scan, scan --jobs 1, the TUI; "
        "whole processes from exec, page cache warm.\n\n"
        "| what | seconds from exec, median (min–max) | ÷ rustboard (medians) | CPU s, process and helpers "
        "| peak RSS, whole process, MiB |\n|---|---|---|---|---|\n" + "\n".join(lines)
    )

    def side(key: str) -> dict:
        return {
            "name": "rustboard 0.7.2" if key == "rustboard" else "triage",
            "label": labels[key],
            "seconds": median[key],
            "cpu": statistics.median(cpus[key]),
            "rss_mib": statistics.median(peaks[key]),
        }

    what = f"a sweep's first load, {args.runs} runs × {args.points:,} points"
    rows = [
        {"what": f"{what}: `triage scan`", "triage": side("scan"), "other": side("rustboard")},
        {"what": f"{what}: `triage scan --jobs 1`", "triage": side("scan one process"), "other": side("rustboard")},
        {"what": f"{what}: the TUI's first rows", "triage": side("tui first rows"), "other": side("rustboard")},
        {"what": f"{what}: the TUI, every run loaded", "triage": side("tui all rows"), "other": side("rustboard")},
    ]
    run.save("A sweep's first load against rustboard", table, rows)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
