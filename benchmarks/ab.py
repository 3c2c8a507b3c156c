"""Each fast path against its plain path, on a figure a user feels, alternating in one window.

A fast path earns its keep where it gains at least 1.3x (plain ÷ fast, a ratio of medians over
rounds that alternate which goes first) on a figure a user feels: a sweep's scan, the TUI's first
rows and full load, a live poll, the export of a big run. This script measures every fast path
on its figures and says which it would keep; the plain path of each is chosen in the measured
process before triage runs (PLAIN below), the same switches the tests use to check that both
paths give the same answer:

- text: the export's numpy column formatter (core/decimal_text.py) against csv.writer + repr
  and json.dumps (commands/scalars.py PLAIN_TEXT);
- templates: the decoder's templates (core/read/events/decode.py) against Event.FromString per record
  (events/tuning.py TEMPLATES).

The figures, each a whole process from exec to exit unless said: `triage scalars` of a
1 000 000-event file (CSV, JSON), `triage scan` of that one run and of a sweep (100 runs x 100 000
points), and a live poll (1 000 events appended to the loaded 1 000 000-event run,
one poll, median of 9, in one process).

    .venv/bin/python benchmarks/ab.py                      # real sizes, ~6 min on 2 quiet cores
    .venv/bin/python benchmarks/ab.py --small --dry-run    # a check of the harness (~1 min)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import bench_events  # noqa: E402 - benchmarks/, found through the sys.path entry above
import bench_sweep  # noqa: E402
import record  # noqa: E402

KEEP_AT = 1.3

# Python run in the measured process before triage: the plain path of each fast path. Each first
# checks that the name it sets is one the code reads: set on a module that no longer has it, it
# would change nothing and the two paths would time the same (a false "delete").
PLAIN = {
    "text": "import triage_tui.commands.scalars as m; assert hasattr(m, 'PLAIN_TEXT'); m.PLAIN_TEXT = True",
    "templates": "import triage_tui.core.read.events.tuning as t; assert hasattr(t, 'TEMPLATES'); t.TEMPLATES = False",
}

# name: (what it is, its plain path, the fast side's own setting, figures, the code it is)
FAST_PATHS = {
    "text": (
        "the export's numpy column formatter",
        "csv.writer + repr, json.dumps",
        "",
        ["export_csv", "export_json"],
        ["triage_tui/core/decimal_text.py"],
    ),
    "templates": (
        "the decoder's templates",
        "Event.FromString (upb) per record",
        "",
        ["scan_sweep", "scan_big", "live_poll"],
        ["triage_tui/core/read/events/templates.py", "triage_tui/core/read/events/columns.py"],
    ),
}

FIGURES = {
    "export_csv": "`triage scalars` of the big file, CSV",
    "export_json": "`triage scalars` of the big file, JSON",
    "scan_big": "`triage scan` of the big file's run",
    "scan_sweep": "`triage scan` of the sweep",
    "live_poll": "live poll: 1 000 events appended to the big run",
}

# `python -c SHIM SETTING ARGS...`: run SETTING, then `triage ARGS...` as its console script would.
SHIM = (
    "import sys, runpy\n"
    "try:\n"
    "    exec(sys.argv[1])\n"
    "except AssertionError:\n"
    "    sys.stderr.write('ab.py: the switch of this plain path is gone: ' + sys.argv[1] + '\\n')\n"
    "    sys.exit(3)\n"
    "sys.argv = ['triage', *sys.argv[2:]]\n"
    "runpy.run_module('triage_tui', run_name='__main__')"
)


def live_poll(path: str, rounds: int = 9) -> float:
    """Seconds of one poll that reads 1 000 appended events, median of ``rounds`` (in this process)."""
    from triage_tui.core.read.events.reader import RunEvents

    events = RunEvents()
    events.set_files([Path(path)])
    events.poll()
    first = events.scalars.points
    seconds = []
    for _ in range(rounds):
        bench_events.write_file(Path(path), bench_events.TAIL_EVENTS, start=first)
        first += bench_events.TAIL_EVENTS
        t0 = time.perf_counter()
        stats = events.poll()
        seconds.append(time.perf_counter() - t0)
        assert stats.scalars == bench_events.TAIL_EVENTS, stats
    return statistics.median(seconds)


class Trees:
    def __init__(self, work: Path, events: int, runs: int, points: int) -> None:
        self.big = work / "big" / "run" / "runs" / "events.out.tfevents.1700000000.bench"
        if not self.big.exists() or self.big.stat().st_size == 0:
            bench_events.write_file(self.big, events)
        self.events = events
        self.sweep = work / "sweep" / f"{runs}x{points}"
        self.sweep_points = bench_sweep.write_tree(self.sweep, runs, points)
        self.runs = runs
        self.live = work / "live" / self.big.name


def measure(figure: str, setting: str, trees: Trees, work: Path) -> tuple[float, bytes | int]:
    """Seconds of one figure with ``setting`` run first; and what it produced, to compare the two paths."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    python = sys.executable
    if figure == "live_poll":
        shutil.copyfile(trees.big, trees.live)  # a fresh copy each time: every measurement appends the same
        code = (
            f"{setting}\nimport sys; sys.path.insert(0, {str(HERE)!r}); import ab; "
            f"print(ab.live_poll({str(trees.live)!r}))"
        )
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=True)
        return float(done.stdout.strip().splitlines()[-1]), 0
    args = {
        "export_csv": ["scalars", str(trees.big)],
        "export_json": ["scalars", str(trees.big), "--format", "json"],
        "scan_big": ["scan", str(trees.big.parent.parent), "--json"],
        "scan_sweep": ["scan", str(trees.sweep), "--json"],
    }[figure]
    out = work / "out"
    t0 = time.perf_counter()
    with open(out, "wb") as sink:
        exported = subprocess.run(
            [python, "-c", SHIM, setting, *args], stdout=sink, stderr=subprocess.PIPE, env=env, cwd=REPO, check=False
        )
    seconds = time.perf_counter() - t0
    if exported.returncode not in (0, 1):
        raise SystemExit(f"{figure} failed: {exported.stderr[-2000:]!r}")
    produced = out.read_bytes()
    if figure.startswith("scan"):  # the points each run read (times since the last event differ)
        runs = json.loads(produced)["runs"]
        return seconds, sum(run["metrics"]["loss"]["count"] + run["metrics"]["accuracy"]["count"] for run in runs)
    return seconds, produced


def code_lines(paths: list[str]) -> int:
    """Lines of whole files, or of some functions of one (``path::name,name``)."""
    import ast

    total = 0
    for item in paths:
        path, _, names = item.partition("::")
        text = (REPO / path).read_text()
        if not names:
            total += len(text.splitlines())
            continue
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and node.name in names.split(","):
                total += (node.end_lineno or node.lineno) - node.lineno + 1
    return total


def main() -> None:
    import as_installed  # benchmarks/: the script's own directory is on sys.path

    as_installed.compile_triage()  # timed processes start as an installed triage does
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="100 000 events, a sweep of 10 x 20 000: a check")
    parser.add_argument("--only", nargs="*", choices=sorted(FAST_PATHS), help="these fast paths only")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work" / "ab")
    parser.add_argument("--keep", action="store_true", help="keep the trees for a rerun")
    parser.add_argument("--dry-run", action="store_true", help="print the run, append nothing to RESULTS-ab.md")
    args = parser.parse_args()
    run = record.Run("ab", dry_run=args.dry_run)
    events, runs, points = (100_000, 10, 20_000) if args.small else (1_000_000, 100, 100_000)
    work = args.workdir / ("small" if args.small else "full")
    work.mkdir(parents=True, exist_ok=True)
    trees = Trees(work, events, runs, points)
    trees.live.parent.mkdir(parents=True, exist_ok=True)
    chosen = args.only or list(FAST_PATHS)
    pairs = [(name, figure) for name in chosen for figure in FAST_PATHS[name][3]]
    times: dict[tuple[str, str, str], list[float]] = {}
    for round_ in range(args.rounds):
        for name, figure in pairs:
            fast_setting = FAST_PATHS[name][2]
            sides = [("fast", fast_setting), ("plain", PLAIN[name])]
            if round_ % 2:
                sides.reverse()  # alternate which goes first: neither always meets a warmer machine
            produced = {}
            for side, setting in sides:
                seconds, produced[side] = measure(figure, setting, trees, work)
                times.setdefault((name, figure, side), []).append(seconds)
            assert produced["fast"] == produced["plain"], f"{name} on {figure}: the two paths differ"
        print(f"round {round_ + 1} of {args.rounds} done, load {os.getloadavg()[0]:.1f}", flush=True)
    rows, lines = [], []
    verdicts = []
    for name in chosen:
        what, plain, _, figures, files = FAST_PATHS[name]
        ratios = []
        for figure in figures:
            fast, slow = times[(name, figure, "fast")], times[(name, figure, "plain")]
            ratio = statistics.median(slow) / statistics.median(fast)
            ratios.append(ratio)
            digits = 4 if figure == "live_poll" else 2
            lines.append(
                f"| {what} | {plain} | {FIGURES[figure]} | {record.spread(fast, digits)} "
                f"| {record.spread(slow, digits)} | **{ratio:.2f}** |"
            )
            rows.append(
                {
                    "fast_path": name,
                    "what": what,
                    "plain": plain,
                    "figure": FIGURES[figure],
                    "fast_s": statistics.median(fast),
                    "plain_s": statistics.median(slow),
                    "ratio": ratio,
                    "rounds": len(fast),
                }
            )
        lines_of_code = f"{code_lines(files)} lines: {', '.join(files)}"
        busy = run.load_start > (os.cpu_count() or 1)
        if args.small:
            verdict = "no verdict at small sizes"
        elif busy and max(ratios) < KEEP_AT:
            verdict = (
                f"under {KEEP_AT}× here, but at load {run.load_start:.0f} on {os.cpu_count()} cores the forks find no "
                "free core: rerun on a quiet machine before deleting"
            )
        elif max(ratios) >= KEEP_AT:
            verdict = "keep"
        else:
            verdict = f"delete ({lines_of_code}): under {KEEP_AT}× on every figure"
        verdicts.append(f"- {what}: best {max(ratios):.2f}× → {verdict}")
    table = (
        f"{'Small sizes (a check of the harness)' if args.small else 'Real sizes'}: {events:,} events in the big "
        f"file, a sweep of {runs} × {points:,}; {args.rounds} rounds, fast and plain alternating which goes first; "
        "seconds, median (min–max); plain ÷ fast is the ratio of the medians; both paths gave the same output in "
        "every round.\n\n"
        "| fast path | plain path | figure | fast, s | plain, s | plain ÷ fast |\n|---|---|---|---|---|---|\n"
        + "\n".join(lines)
        + f"\n\nKeep where plain ÷ fast ≥ {KEEP_AT} on some figure:\n"
        + "\n".join(verdicts)
    )
    run.save("Fast paths against plain paths", table, rows)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
