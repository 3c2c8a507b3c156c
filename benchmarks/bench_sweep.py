"""A sweep's first load on two cores: 100 runs x 100 000 scalars, `triage scan` and the TUI against rustboard.

The tree is bench_scale.py's (SpecForge layout, one scalar event per record as torch's
SummaryWriter writes them, 10 tags; every load asserts the exact number of points read). Each
round runs, one after another so they see the same machine, as whole processes:
- rustboard: tensorboard's Rust data server ``--reload once --samples-per-plugin scalars=all``,
  exec to its "Finished load cycle" log line (bench_scale.rustboard_load; it reads runs on
  several threads);
- ``triage scan TREE`` from exec to exit (the first poll reads runs here and in a helper process,
  core/parallel_read.py);
- the same with the helper turned off (one core), for what the second core adds;
- the TUI (``TriageApp`` under ``App.run_test``, headless, its helpers forked and its first poll
  begun before Textual is imported, as ``triage`` does: commands/tui.py ``start_reading``): from
  exec to the first rows on screen and to every run's row with every point loaded.

    .venv/bin/python benchmarks/bench_sweep.py                 # ~3 min + writing the tree (~10 s)
    .venv/bin/python benchmarks/bench_sweep.py --runs 20 --points 20000 --rounds 2
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
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import bench_scale  # noqa: E402  (the tree writer and rustboard's timing are bench_scale's)

ONE_CORE = (
    "import sys, runpy; import triage_tui.core.parallel_read as p; p._cores = lambda: 1; "
    "sys.argv = ['triage', *sys.argv[1:]]; runpy.run_module('triage_tui', run_name='__main__')"
)


def write_tree(root: Path, runs: int, points: int) -> int:
    import numpy as np

    if not (root / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        rng = np.random.default_rng(252)
        bench_scale.check_records_match_the_real_writer(rng)
        total = sum(bench_scale.write_run(root / f"run_{i:03d}", points, rng) for i in range(runs))
        (root / ".complete").write_text(str(total))
    return int((root / ".complete").read_text())


def children_cpu() -> float:
    """CPU seconds (user + system) of every child process waited for so far, their helpers included."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """(seconds from exec to exit, CPU seconds of the process and its helpers, stdout)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cpu0 = children_cpu()
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        raise SystemExit(f"{cmd} failed: {done.stderr[-2000:]}")
    return seconds, children_cpu() - cpu0, done.stdout


def scan_points(stdout: str) -> int:
    runs = json.loads(stdout)["runs"]
    return sum(run["metrics"]["loss"]["count"] + run["metrics"]["accuracy"]["count"] for run in runs)


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


def tui(root: Path, runs: int, one_core: bool) -> tuple[dict, float]:
    code = (
        ("import triage_tui.core.parallel_read as p; p._cores = lambda: 1; " if one_core else "")
        + f"import sys, json; sys.path.insert(0, {str(HERE)!r}); import bench_sweep; "
        f"print(json.dumps(bench_sweep.child_tui({str(root)!r}, {runs}, {time.time()!r})))"
    )
    _, cpu, stdout = timed([sys.executable, "-c", code])
    return json.loads(stdout.strip().splitlines()[-1]), cpu


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"


def main() -> None:
    import as_installed  # benchmarks/: the script's own directory is on sys.path

    as_installed.compile_triage()  # timed processes start as an installed triage does
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the tree in benchmarks/.work/sweep for a rerun")
    args = parser.parse_args()
    root = HERE / ".work" / "sweep" / f"{args.runs}x{args.points}"
    t0 = time.perf_counter()
    expected = write_tree(root, args.runs, args.points)
    written = time.perf_counter() - t0
    size = bench_scale.tree_bytes(root)
    load_start = os.getloadavg()
    python = sys.executable
    scan = [python, "-m", "triage_tui", "scan", str(root), "--json"]
    scan_one = [python, "-c", ONE_CORE, "scan", str(root), "--json"]
    times: dict[str, list[float]] = {
        k: []
        for k in ("rustboard", "scan", "scan, one core", "tui first rows", "tui all rows", "tui all rows, one core")
    }
    ratios: dict[str, list[float]] = {k: [] for k in times if k != "rustboard"}
    # CPU seconds of the whole load (the process and its helpers; the TUI's until it quit): on a
    # shared machine the figure that moves least with the other sessions' load.
    cpus: dict[str, list[float]] = {k: [] for k in times if k != "tui first rows"}
    for _ in range(args.rounds):
        cpu0 = children_cpu()
        rust = bench_scale.rustboard_load(root)["load_s"]
        cpus["rustboard"].append(children_cpu() - cpu0)
        times["rustboard"].append(rust)
        for name, cmd in (("scan", scan), ("scan, one core", scan_one)):
            seconds, cpu, stdout = timed(cmd)
            assert scan_points(stdout) == expected * 2 // len(bench_scale.TAGS), "scan read a wrong number of points"
            times[name].append(seconds)
            ratios[name].append(seconds / rust)
            cpus[name].append(cpu)
        for one_core in (False, True):
            shown, cpu = tui(root, args.runs, one_core)
            assert shown["points"] == expected, shown
            if not one_core:
                times["tui first rows"].append(shown["first_rows_s"])
                ratios["tui first rows"].append(shown["first_rows_s"] / rust)
            key = "tui all rows" + (", one core" if one_core else "")
            cpus[key].append(cpu)
            times[key].append(shown["all_rows_s"])
            ratios[key].append(shown["all_rows_s"] / rust)
    load_end = os.getloadavg()
    print(
        f"# A sweep's first load: {args.runs} runs x {args.points:,} scalars ({expected:,} points, "
        f"{size / 1e6:.0f} MB of event files, written in {written:.0f} s)\n"
    )
    print(
        f"- machine: {os.cpu_count()} CPUs, load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end"
    )
    print(
        f"- {args.rounds} rounds, each: rustboard, scan, scan on one core, TUI, TUI on one core; whole processes "
        f"from exec, page cache warm\n"
    )
    print(
        "| what | seconds from exec, median (min–max) | ÷ rustboard in the same round, median (min–max) "
        "| CPU seconds, process and helpers, median (min–max) |"
    )
    print("|---|---|---|---|")
    print(f"| rustboard 0.7.2 load cycle | {spread(times['rustboard'])} | 1 | {spread(cpus['rustboard'])} |")
    for name, label in (
        ("scan", "`triage scan`"),
        ("scan, one core", "`triage scan`, helper off (one core)"),
        ("tui first rows", "TUI: first rows on screen"),
        ("tui all rows", "TUI: every run loaded"),
        ("tui all rows, one core", "TUI: every run loaded, helper off"),
    ):
        cpu = spread(cpus[name]) if name in cpus else ""
        print(f"| {label} | {spread(times[name])} | {spread(ratios[name])} | {cpu} |")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
