"""`triage scalars` export of a 1 000 000-scalar file against rustboard's load of the same file.

The file is bench_events.py's (1 000 000 scalar events, the 15 SpecForge tags, one
``simple_value`` per record as torch's SummaryWriter writes them). Each round runs, as whole
processes from exec to exit, one after another so they see the same machine:
- rustboard: tensorboard's Rust data server, ``--reload once --samples-per-plugin scalars=all``,
  exec to its "Finished load cycle" log line (bench_events.rustboard);
- ``triage scalars FILE`` (CSV) and ``triage scalars FILE --format json`` to a file: the file's
  read split in two at a record boundary, its second half decoded by a forked child
  (core/events/split_read.py), then one formatter for each core that was idle or theirs while
  they read (commands/scalars.py ``_processes``);
- the same two formatting in one process, and formatting in one process a core whether idle or
  not: what the rule chose against what the other choice would have cost;
- the same two on one core: no split read, one formatting process (the code before both levers).

Then both outputs are checked value for value against the file's records decoded with
``event_pb2``: every wall_time parses back to the same float64, every value to the same float64
and, narrowed, to the same float32 that ``simple_value`` held (round-trip repr), and the CSV is
byte-identical to what ``repr`` and ``csv.writer`` write.

    .venv/bin/python benchmarks/bench_export.py                # ~1 min, 5 rounds
    .venv/bin/python benchmarks/bench_export.py --events 200000 --rounds 3
"""

from __future__ import annotations

import argparse
import csv
import io
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
sys.path.insert(0, str(REPO))

import bench_events  # noqa: E402 - found through the sys.path entry above

# `triage scalars` with the number of formatting processes fixed, not chosen by the idle cores
# (0: one a core), and the file's read split in two (core/events/split_read.py) or not.
FIXED = (
    "import sys, runpy; import triage_tui.commands.scalars as s; import triage_tui.core.events.tuning as t; "
    "n, split = {}, {}; s._processes = lambda floats, out, ticks: n or s._CORES; "
    "t.SPLIT_MIN_BYTES = t.SPLIT_MIN_BYTES if split else 1 << 62; "
    "sys.argv = ['triage', *sys.argv[1:]]; runpy.run_module('triage_tui', run_name='__main__')"
)


def timed(cmd: list[str], out: Path) -> tuple[float, float]:
    """Wall seconds from exec to exit, and CPU seconds (the process and the formatters it forked)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    with open(out, "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{cmd} failed with exit status {proc.returncode}")
    return seconds, usage.ru_utime + usage.ru_stime


def reference(path: Path) -> dict[str, list[tuple[int, float, float]]]:
    """(step, wall_time, simple_value) per tag, straight from event_pb2."""
    from tensorboard.compat.proto import event_pb2

    data = path.read_bytes()
    points: dict[str, list] = {}
    pos = 0
    while pos + 16 <= len(data):
        length = int.from_bytes(data[pos : pos + 8], "little")
        event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
        pos += 16 + length
        for value in event.summary.value:
            points.setdefault(value.tag, []).append((event.step, event.wall_time, value.simple_value))
    return points


def check_exact(csv_path: Path, json_path: Path, ref: dict) -> str:
    import numpy as np

    text = csv_path.read_text()
    rows = list(csv.reader(io.StringIO(text)))
    got: dict[str, list] = {}
    for tag, step, wall, value in rows[1:]:
        got.setdefault(tag, []).append((int(step), wall, value))
    doc = json.loads(json_path.read_text())["tags"]
    assert sorted(got) == sorted(ref) == sorted(doc)
    checked = 0
    for tag, points in ref.items():
        steps = [p[0] for p in points]
        walls = np.array([p[1] for p in points], np.float64)
        values32 = np.array([p[2] for p in points], np.float32)
        csv_walls = np.array([float(w) for _, w, _ in got[tag]], np.float64)
        csv_values = np.array([float(v) for *_, v in got[tag]], np.float64)
        assert [s for s, _, _ in got[tag]] == steps == doc[tag]["steps"]
        for walls_out, values_out in (
            (csv_walls, csv_values),
            (np.array(doc[tag]["wall_times"], np.float64), np.array(doc[tag]["values"], np.float64)),
        ):
            assert walls_out.view(np.uint64).tolist() == walls.view(np.uint64).tolist(), tag
            assert values_out.view(np.uint64).tolist() == values32.astype(np.float64).view(np.uint64).tolist(), tag
            assert values_out.astype(np.float32).view(np.uint32).tolist() == values32.view(np.uint32).tolist(), tag
        # The text is repr's, as csv.writer lays it out.
        assert [w for _, w, _ in got[tag]] == [repr(float(w)) for w in walls.tolist()]
        assert [v for *_, v in got[tag]] == [repr(float(v)) for v in values32.astype(np.float64).tolist()]
        checked += len(points)
    expected = io.StringIO()
    writer = csv.writer(expected, lineterminator="\n")
    writer.writerow(("tag", "step", "wall_time", "value"))
    for tag in sorted(ref):
        writer.writerows((tag, s, repr(w), repr(float(np.float32(v)))) for s, w, v in ref[tag])
    assert expected.getvalue() == text, "CSV differs from csv.writer + repr"
    return (
        f"{checked:,} points: CSV byte-identical to csv.writer + repr; "
        "CSV and JSON parse back to the same float64 wall times and float32 values"
    )


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"


def main() -> None:
    import as_installed  # benchmarks/: the script's own directory is on sys.path

    as_installed.compile_triage()  # timed processes start as an installed triage does
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=HERE / ".work" / "export")
    args = parser.parse_args()
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    big = work / "logdir" / "run" / "events.out.tfevents.1700000000.bench"
    bench_events.write_file(big, args.events)
    size = big.stat().st_size
    big.read_bytes()  # warm the page cache
    python = sys.executable
    cmds = {
        "csv": [python, "-m", "triage_tui", "scalars", str(big)],
        "json": [python, "-m", "triage_tui", "scalars", str(big), "--format", "json"],
        "csv, formatting in one process": [python, "-c", FIXED.format(1, True), "scalars", str(big)],
        "json, formatting in one process": [
            python,
            "-c",
            FIXED.format(1, True),
            "scalars",
            str(big),
            "--format",
            "json",
        ],
        "csv, formatting in one process a core": [python, "-c", FIXED.format(0, True), "scalars", str(big)],
        "json, formatting in one process a core": [
            python,
            "-c",
            FIXED.format(0, True),
            "scalars",
            str(big),
            "--format",
            "json",
        ],
        "csv, one core (no split read, one formatter)": [python, "-c", FIXED.format(1, False), "scalars", str(big)],
        "json, one core (no split read, one formatter)": [
            python,
            "-c",
            FIXED.format(1, False),
            "scalars",
            str(big),
            "--format",
            "json",
        ],
    }
    times: dict[str, list[float]] = {"rustboard": [], **{k: [] for k in cmds}}
    cpus: dict[str, list[float]] = {"rustboard": [], **{k: [] for k in cmds}}
    ratios: dict[str, list[float]] = {k: [] for k in cmds}
    cpu_ratios: dict[str, list[float]] = {k: [] for k in cmds}
    load_start = os.getloadavg()
    for _ in range(args.rounds):
        rust_run = bench_events.rustboard(big.parent.parent, 1)
        rust, rust_cpu = rust_run["wall"], rust_run["cpu"]
        times["rustboard"].append(rust)
        cpus["rustboard"].append(rust_cpu)
        for name, cmd in cmds.items():
            seconds, cpu = timed(cmd, work / f"out.{name}")
            times[name].append(seconds)
            cpus[name].append(cpu)
            ratios[name].append(seconds / rust)
            cpu_ratios[name].append(cpu / rust_cpu)
    verdict = check_exact(work / "out.csv", work / "out.json", reference(big))
    for name in cmds:  # in one process or several, the same bytes
        assert (work / f"out.{name}").read_bytes() == (work / f"out.{name.split(',')[0]}").read_bytes(), name
    load_end = os.getloadavg()
    print(
        f"# `triage scalars` export: {args.events:,} scalar events, {len(bench_events.TAGS)} tags, "
        f"{size / 1e6:.1f} MB\n"
    )
    print(
        f"- machine: {os.cpu_count()} CPUs, load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end"
    )
    print(f"- {args.rounds} rounds, each: rustboard, then each export, whole processes, page cache warm")
    print(f"- exactness: {verdict}; the same bytes in one process and in one a core\n")
    print("| command | wall s, median (min–max) | ÷ rustboard, same round | CPU s | CPU ÷ rustboard's, same round |")
    print("|---|---|---|---|---|")
    print(f"| rustboard 0.7.2 load cycle | {spread(times['rustboard'])} | 1 | {spread(cpus['rustboard'])} | 1 |")
    for name in cmds:
        print(
            f"| `triage scalars` {name} | {spread(times[name])} | {spread(ratios[name])} | {spread(cpus[name])} "
            f"| {spread(cpu_ratios[name])} |"
        )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
