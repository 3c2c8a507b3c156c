"""Reading a W&B run from disk: triage's reader against W&B's own offline reader.

The run: --rows ``wandb.log`` rows of the 15 keys SpecForge logs (train/ploss_0..6, train/acc_0..6,
train/lr), written offline by the wandb package itself (a child process, no network), so the file
holds what a real run holds (history, summary and the records around them).

Methods, each in its own process, page cache warm, best of --repeat:
- triage: ``WandbHistory.poll()`` (core/read/wandb/history.py) into scalar series, cold in the process
  (the wandb protos imported before the clock starts);
- W&B's reader: ``wandb leet inspect --json FILE`` (wandb-core's LiveReader: the W&B tool that
  reads a run's .wandb file offline), plus parsing its JSON lines into (step, wall time, value)
  points per key in Python: what a user does to get the numbers. Also the wandb-core command the
  CLI runs, without the CLI's start-up, with and without the parsing.
Every point of both is compared (they must be identical). Then the tail: the file's last
--tail-rows rows appended to a copy read up to them, one ``poll()``; best and median of 9.

    .venv/bin/python benchmarks/bench_wandb.py                 # ~1 min on 2 cores
    .venv/bin/python benchmarks/bench_wandb.py --rows 5000 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

KEYS = [f"train/ploss_{i}" for i in range(7)] + [f"train/acc_{i}" for i in range(7)] + ["train/lr"]
TAIL_ROUNDS = 9

WRITER = """
import sys, wandb
rows = int(sys.argv[2])
settings = wandb.Settings(console="off", x_disable_stats=True, x_disable_meta=True)
run = wandb.init(mode="offline", dir=sys.argv[1], project="triage-bench", settings=settings)
for n in range(rows):
    row = {f"train/ploss_{i}": 10.4 - n * 1e-4 + i * 0.1 for i in range(7)}
    row.update({f"train/acc_{i}": 0.3 + n * 1e-6 - i * 0.01 for i in range(7)})
    row["train/lr"] = 1e-4
    run.log(row, step=10 * n)
run.finish()
"""

TRIAGE = """
import json, resource, sys, time
from triage_tui.core.read.wandb.history import WandbHistory
from triage_tui.core.read.wandb.records import wandb_protos
wandb_protos()
cpu, wall = time.process_time(), time.perf_counter()
history = WandbHistory()
history.set_files([sys.argv[1]])
stats = history.poll()
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
points = {t: [list(map(float, c)) for c in s.columns()] for t, s in history.scalars.series.items()}
if sys.argv[2] == "dump":
    json.dump(points, open(sys.argv[3], "w"))
print(json.dumps({"wall": wall, "cpu": cpu, "records": stats.records, "points": stats.scalars,
                  "corrupt": stats.corrupt_records, "bytes": stats.bytes_read}))
"""

LEET_PARSE = """
import json, resource, subprocess, sys, time
command = json.loads(sys.argv[1])
children = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu, wall = time.process_time(), time.perf_counter()
proc = subprocess.Popen(command, stdout=subprocess.PIPE)
points = {}
for line in proc.stdout:
    record = json.loads(line)
    if record.get("type") != "history":
        continue
    item = record["history"]["item"]
    step, ts = int(item["_step"]), float(item["_timestamp"])
    for key, value in item.items():
        if key[0] != "_" and isinstance(value, (int, float)) and not isinstance(value, bool):
            columns = points.setdefault(key, [[], [], []])
            columns[0].append(step); columns[1].append(ts); columns[2].append(float(value))
assert proc.wait() == 0
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
after = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu += (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
if sys.argv[2] == "dump":
    json.dump({k: [list(map(float, c)) for c in v] for k, v in points.items()}, open(sys.argv[3], "w"))
print(json.dumps({"wall": wall, "cpu": cpu, "points": sum(len(v[0]) for v in points.values())}))
"""

LEET_ONLY = """
import json, resource, subprocess, sys, time
command = json.loads(sys.argv[1])
wall = time.perf_counter()
subprocess.run(command, stdout=subprocess.DEVNULL, check=True)
after = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": time.perf_counter() - wall, "cpu": after.ru_utime + after.ru_stime}))
"""

TAIL = """
import json, statistics, sys, time
from triage_tui.core.read.wandb.history import WandbHistory
from triage_tui.core.read.wandb.records import wandb_protos
wandb_protos()
data = open(sys.argv[1], "rb").read()
cut = int(sys.argv[2])
times = []
for _ in range(int(sys.argv[4])):
    with open(sys.argv[3], "wb") as handle:
        handle.write(data[:cut])
    history = WandbHistory()
    history.set_files([sys.argv[3]])
    history.poll()
    with open(sys.argv[3], "ab") as handle:
        handle.write(data[cut:])
    start = time.perf_counter()
    stats = history.poll()
    times.append(time.perf_counter() - start)
print(json.dumps({"best": min(times), "median": statistics.median(times), "points": stats.scalars,
                  "records": stats.records}))
"""


def child(code: str, *args: str) -> dict:
    """Run `code` in a fresh interpreter (offline W&B environment); its JSON line."""
    from builders.wandb_runs import offline_env

    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=offline_env(), check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"benchmark step failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def best(code: str, args: list[str], repeat: int) -> dict:
    runs = [child(code, *args) for _ in range(repeat)]
    return min(runs, key=lambda r: r["wall"])


def tail_cut(path: Path, rows: int, tail_rows: int) -> int:
    """File offset where the last `tail_rows` history rows begin (a record boundary)."""
    from triage_tui.core.read.wandb.framing import WANDB_HEADER, frame
    from triage_tui.core.read.wandb.records import wandb_protos

    data = path.read_bytes()
    base = len(WANDB_HEADER)
    framed = frame(data[base:], base)
    pb = wandb_protos()
    history_ends = [
        end
        for end, payload in zip(framed.ends, framed.records, strict=True)
        if pb.Record.FromString(payload).WhichOneof("record_type") == "history"
    ]
    return base + history_ends[rows - tail_rows - 1]


def main() -> None:
    import as_installed  # benchmarks/: the script's own directory is on sys.path

    as_installed.compile_triage()  # timed processes start as an installed triage does
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--tail-rows", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="work directory to keep (default: a temporary one)")
    parser.add_argument("--dry-run", action="store_true", help="print the run, append nothing to RESULTS-wandb.md")
    args = parser.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="triage-bench-wandb-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        from builders.wandb_runs import offline_env

        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", WRITER, str(work / "run"), str(args.rows)],
            env=offline_env(),
            check=True,
            capture_output=True,
        )
        written = time.perf_counter() - started
        (path,) = sorted((work / "run").glob("wandb/offline-run-*/run-*.wandb"))
        size = path.stat().st_size

        from wandb.util import get_core_path

        from builders.wandb_runs import WANDB_CLI

        # `wandb leet inspect --json FILE` as a user types it, and the wandb-core command it runs
        # (wandb/cli/leet.py: launch_inspect), without the CLI's own start-up.
        cli = json.dumps([str(WANDB_CLI), "leet", "inspect", "--json", str(path)])
        core = json.dumps(
            [
                get_core_path(),
                "leet",
                "inspect",
                "--no-observability",
                "--json",
                "--run-file",
                str(path),
                str(path.parent.parent),
            ]
        )
        triage = best(TRIAGE, [str(path), "-"], args.repeat)
        leet = best(LEET_PARSE, [cli, "-"], args.repeat)
        leet_core = best(LEET_PARSE, [core, "-"], args.repeat)
        leet_only = best(LEET_ONLY, [core], args.repeat)
        child(TRIAGE, str(path), "dump", str(work / "triage.json"))
        child(LEET_PARSE, core, "dump", str(work / "leet.json"))
        identical = json.loads((work / "triage.json").read_text()) == json.loads((work / "leet.json").read_text())
        cut = tail_cut(path, args.rows, args.tail_rows)
        tail = child(TAIL, str(path), str(cut), str(work / "tail.wandb"), str(TAIL_ROUNDS))

        import wandb

        load = os.getloadavg()
        print(f"## W&B reader benchmark: {args.rows:,} rows x {len(KEYS)} keys, {size / 1e6:.1f} MB\n")
        print(f"- machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
        print(f"- python {platform.python_version()}, wandb {wandb.__version__}")
        print(
            f"- run written by wandb {wandb.__version__} offline in {written:.1f} s; "
            f"{triage['records']:,} records, {triage['points']:,} points"
        )
        print(f"- every point identical between the two readers: {'yes' if identical else 'NO'}")
        print(f"- cold read, page cache warm, best of {args.repeat}\n")
        print("| method | wall s | CPU s | wall vs triage | CPU vs triage |")
        print("|---|---:|---:|---:|---:|")
        t_wall, t_cpu = triage["wall"], triage["cpu"]
        print(f"| triage `WandbHistory.poll()` | {t_wall:.3f} | {t_cpu:.3f} | 1.0x | 1.0x |")
        rows = [
            ("`wandb leet inspect --json` (the CLI) + JSON lines to points", leet),
            ("wandb-core `leet inspect --json` + JSON lines to points", leet_core),
            ("wandb-core `leet inspect --json` alone, output discarded", leet_only),
        ]
        for name, result in rows:
            print(
                f"| {name} | {result['wall']:.3f} | {result['cpu']:.3f} | {result['wall'] / t_wall:.1f}x | "
                f"{result['cpu'] / t_cpu:.1f}x |"
            )
        print(
            "\nCPU of the W&B rows counts the processes they start (the wandb CLI, wandb-core); "
            "imports of the reading process are outside every clock.\n"
        )
        print(
            f"Tail: the last {args.tail_rows} rows ({tail['records']} records, {tail['points']:,} points) "
            f"appended, one `poll()`: best {tail['best'] * 1e3:.2f} ms, median {tail['median'] * 1e3:.2f} ms "
            f"(of {TAIL_ROUNDS})."
        )
        import record

        leet_label = "`wandb leet inspect --json` (W&B's own offline reader) + its JSON lines to points"
        record.Run("wandb", dry_run=args.dry_run).save(
            "W&B run reader",
            "| method | wall s | CPU s |\n|---|---:|---:|\n"
            f"| triage `WandbHistory.poll()` | {t_wall:.3f} | {t_cpu:.3f} |\n"
            + "\n".join(f"| {name} | {result['wall']:.3f} | {result['cpu']:.3f} |" for name, result in rows)
            + f"\n\nEvery point identical between the two readers: {'yes' if identical else 'NO'}.",
            [
                {
                    "what": f"read a {args.rows:,}-row W&B offline run",
                    "triage": {"name": "triage", "label": "`WandbHistory.poll()`", "seconds": t_wall, "cpu": t_cpu},
                    "other": {
                        "name": f"wandb {wandb.__version__} leet",
                        "label": leet_label,
                        "seconds": leet["wall"],
                        "cpu": leet["cpu"],
                    },
                }
            ],
        )
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
