"""`triage scalars` export of a 1 000 000-scalar file against tbparse's export and rustboard's load of it.

The file is bench_events.py's (1 000 000 scalar events, the 15 SpecForge tags, one
``simple_value`` per record as torch's SummaryWriter writes them). Each round runs, as whole
processes from exec to exit, one after another so they see the same machine:
- rustboard: tensorboard's Rust data server, ``--reload once --samples-per-plugin scalars=all``,
  exec to its "Finished load cycle" log line (bench_events.rustboard): the load alone, no export;
- ``triage scalars FILE`` (CSV) and ``triage scalars FILE --format json`` into a file;
- tbparse (pandas over tensorboard's EventAccumulator, what users export scalars with):
  ``SummaryReader(FILE, extra_columns={"wall_time"}).scalars.to_csv(OUT)``, in the first
  --tbparse-rounds rounds only (it takes a minute).

Memory is the same figure for every tool: the whole process's peak RSS (triage's and tbparse's
from wait4, the largest of the process and the helpers it waited for; rustboard's VmHWM at the
end of its load cycle). Then the outputs are checked value for value against the file's records
decoded with ``event_pb2``: every wall_time parses back to the same float64, every value to the
same float64 and, narrowed, to the same float32 that ``simple_value`` held (round-trip repr), the
CSV is byte-identical to what ``repr`` and ``csv.writer`` write, and tbparse's CSV holds the same
points. The run is appended to RESULTS-export.md (benchmarks/report.py writes docs/speed.md from it).

    .venv/bin/python benchmarks/bench_export.py                # ~3 min, 5 rounds, tbparse in the first
    .venv/bin/python benchmarks/bench_export.py --events 100000 --rounds 2 --dry-run   # a check of the harness
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
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
import record  # noqa: E402


def timed(cmd: list[str], out: Path) -> tuple[float, float, float]:
    """Wall seconds from exec to exit, CPU seconds and whole-process peak RSS in MiB (the process and
    any children it waited for)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    with open(out, "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{cmd} failed with exit status {proc.returncode}")
    return seconds, usage.ru_utime + usage.ru_stime, record.whole_process_peak_mib(usage)


# What a user writes to export every scalar with tbparse (its README: SummaryReader(...).scalars is a
# pandas DataFrame of step, tag, value; extra_columns adds the wall time).
TBPARSE = (
    "import sys; from tbparse import SummaryReader; "
    "SummaryReader(sys.argv[1], extra_columns={'wall_time'}).scalars.to_csv(sys.argv[2], index=False)"
)


def check_tbparse(tbparse_csv: Path, triage_csv: Path) -> str:
    """tbparse's export holds the same points as triage's: the same tags, steps, wall times and values."""
    import pandas as pd

    theirs = pd.read_csv(tbparse_csv).sort_values(["tag", "step"], kind="stable").reset_index(drop=True)
    ours = pd.read_csv(triage_csv).sort_values(["tag", "step"], kind="stable").reset_index(drop=True)
    assert len(theirs) == len(ours), (len(theirs), len(ours))
    for column in ("tag", "step", "wall_time", "value"):
        assert (theirs[column].to_numpy() == ours[column].to_numpy()).all(), column
    return f"tbparse's CSV holds the same {len(ours):,} points (tag, step, wall time, value)"


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


def main() -> None:
    import as_installed  # benchmarks/: the script's own directory is on sys.path

    as_installed.compile_triage()  # timed processes start as an installed triage does
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tbparse-rounds", type=int, default=1, help="rounds tbparse runs in (the first ones)")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work" / "export")
    parser.add_argument("--dry-run", action="store_true", help="print the run, append nothing to RESULTS-export.md")
    args = parser.parse_args()
    if importlib.util.find_spec("tbparse") is None:  # the timed runs import it in their own process
        raise SystemExit("bench_export.py: tbparse is not installed; pip install -e '.[bench]'")
    run = record.Run("export", dry_run=args.dry_run)
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
        "tbparse": [python, "-c", TBPARSE, str(big), str(work / "tbparse.csv")],
    }
    times: dict[str, list[float]] = {k: [] for k in ("rustboard", *cmds)}
    cpus: dict[str, list[float]] = {k: [] for k in times}
    peaks: dict[str, list[float]] = {k: [] for k in times}
    for round_ in range(args.rounds):
        rust = bench_events.rustboard(big.parent.parent, 1)
        times["rustboard"].append(rust["wall"])
        cpus["rustboard"].append(rust["cpu"])
        peaks["rustboard"].append(rust["peak_extra"] / 2**20)  # its VmHWM: the whole process
        for name, cmd in cmds.items():
            if name == "tbparse" and round_ >= args.tbparse_rounds:
                continue
            seconds, cpu, peak = timed(cmd, work / f"out.{name}")
            times[name].append(seconds)
            cpus[name].append(cpu)
            peaks[name].append(peak)
    verdicts = [check_exact(work / "out.csv", work / "out.json", reference(big))]
    if times["tbparse"]:
        verdicts.append(check_tbparse(work / "tbparse.csv", work / "out.csv"))
    median = {k: statistics.median(v) for k, v in times.items() if v}
    from importlib.metadata import version

    names = {
        "csv": "triage",
        "json": "triage",
        "rustboard": f"rustboard {version('tensorboard-data-server')} (its load alone)",
        "tbparse": f"tbparse {version('tbparse')}",
    }
    labels = {
        "csv": "`triage scalars FILE > out.csv`",
        "json": "`triage scalars FILE --format json > out.json`",
        "rustboard": f"{names['rustboard']}: tensorboard's Rust data server's load cycle, exporting nothing",
        "tbparse": f"{names['tbparse']}: `SummaryReader(FILE, extra_columns={{'wall_time'}}).scalars.to_csv(out.csv)`",
    }
    lines = [
        f"| {labels[k]} | {record.spread(times[k])} | {median[k] / median['csv']:.2f} | {record.spread(cpus[k])} "
        f"| {statistics.median(peaks[k]):.0f} |"
        for k in ("csv", "json", "rustboard", "tbparse")
        if times[k]
    ]
    table = (
        f"{args.events:,} scalar events, {len(bench_events.TAGS)} tags, {size / 1e6:.1f} MB; {args.rounds} rounds "
        f"(tbparse in {min(args.tbparse_rounds, args.rounds)}), whole processes from exec to exit, page cache warm.\n"
        f"Exactness: {'; '.join(verdicts)}.\n\n"
        "| command | wall s, median (min–max) | wall ÷ triage CSV (medians) | CPU s | peak RSS, whole process, MiB |\n"
        "|---|---|---|---|---|\n" + "\n".join(lines)
    )

    def side(name: str) -> dict:
        return {
            "name": names[name],
            "label": labels[name],
            "seconds": median[name],
            "cpu": statistics.median(cpus[name]),
            "rss_mib": statistics.median(peaks[name]),
        }

    what = f"export every scalar of one {args.events:,}-event file"
    rows = [{"what": f"{what} to CSV", "triage": side("csv"), "other": side("tbparse")}] if times["tbparse"] else []
    rows.append({"what": f"{what} (rustboard: its load alone)", "triage": side("csv"), "other": side("rustboard")})
    run.save("Export against tbparse and rustboard", table, rows)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
