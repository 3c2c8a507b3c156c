"""Cold load and live tail of one event file: triage's reader against what a user would otherwise run.

The file: 1 000 000 scalar events, the 15 tags SpecForge logs (train/ploss_0..6, train/acc_0..6,
train/lr) at every step, one ``simple_value`` per record as torch's SummaryWriter writes them.
Records are built with the real ``event_pb2`` and framed with crc32c; a small file written by
torch's SummaryWriter itself with the same points is checked to hold byte-identical records and
to read back identically.

Methods, each in its own process (peak RSS: the whole process's /proc VmHWM, imports included, and
its growth over the RSS after imports), timed from a warm page cache, best of --repeat for the fast ones:
- triage: ``RunEvents.poll()`` (core/read/events/reader.py), cold in the process;
- upb loop: struct framing + ``Event.FromString`` per record + reading tag/step/value, no CRCs
  (the obvious fast pure-Python reader);
- EventFileLoader: ``tensorboard.backend.event_processing.event_file_loader.EventFileLoader``
  (what TensorBoard's Python side and tbparse use without TensorFlow), on a 50 000-event prefix of
  the same file, extrapolated linearly to the full size (it says so in the table);
- rustboard: tensorboard's Rust data server (``--reload once --samples-per-plugin scalars=all``),
  from exec to its "Finished load cycle" log line; CPU from /proc, peak RSS from VmHWM.
Then the tail: 1 000 events appended to the loaded file, one ``poll()``; best and median of 9.

    .venv/bin/python benchmarks/bench_events.py                 # ~1 min on 2 cores
    .venv/bin/python benchmarks/bench_events.py --events 200000 --repeat 2 --dry-run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import record  # noqa: E402  (a running process's CPU)

TAGS = [f"train/ploss_{i}" for i in range(7)] + [f"train/acc_{i}" for i in range(7)] + ["train/lr"]
WALL0 = 1_700_000_000.0
PREFIX_EVENTS = 50_000
TAIL_EVENTS = 1_000
TAIL_ROUNDS = 9


# --------------------------------------------------------------------------- the file


def _frame(payload: bytes) -> bytes:
    from triage_tui.core.read.events.crc import masked_crc32c

    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked_crc32c(header)) + payload + struct.pack("<I", masked_crc32c(payload))


def _point(k: int) -> tuple[str, int, float, float]:
    """The k-th scalar of the SpecForge-like run: (tag, step, wall_time, value)."""
    step, t = divmod(k, len(TAGS))
    tag = TAGS[t]
    if tag.startswith("train/ploss"):
        value = 10.37 * 0.9997**step + 0.01 * ((k * 2654435761) % 1000) / 1000
    elif tag.startswith("train/acc"):
        value = min(0.9, step / 70_000 + 0.001 * ((k * 40503) % 100))
    else:
        value = 1e-4 * min(1.0, step / 2000)
    return tag, step, WALL0 + k * 0.0137, value


def _event_bytes(k: int) -> bytes:
    from tensorboard.compat.proto import event_pb2, summary_pb2

    tag, step, wall, value = _point(k)
    value_proto = summary_pb2.Summary.Value(tag=tag, simple_value=value)
    event = event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(value=[value_proto]))
    return _frame(event.SerializeToString())


def _file_version_bytes() -> bytes:
    from tensorboard.compat.proto import event_pb2

    return _frame(event_pb2.Event(wall_time=WALL0, file_version="brain.Event:2").SerializeToString())


def write_file(path: Path, events: int, start: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    chunks = [_file_version_bytes()] if start == 0 else []
    chunks += [_event_bytes(k) for k in range(start, start + events)]
    with open(path, "ab" if start else "wb") as f:
        f.write(b"".join(chunks))


def check_against_torch(work: Path, events: int = 3_000) -> str:
    """torch's SummaryWriter, given the same points, writes the same records; both read the same."""
    from torch.utils.tensorboard import SummaryWriter

    from triage_tui.core.read.events.reader import RunEvents

    def read_event_file(path: Path):
        """Every scalar of one event file, through the reader the watcher polls with."""
        events = RunEvents()
        events.set_files([path])
        events.poll()
        return events.scalars

    torch_dir = work / "torch"
    shutil.rmtree(torch_dir, ignore_errors=True)
    with SummaryWriter(log_dir=str(torch_dir)) as writer:
        for k in range(events):
            tag, step, wall, value = _point(k)
            writer.add_scalar(tag, value, global_step=step, walltime=wall)
    (torch_file,) = torch_dir.glob("*tfevents*")
    ours = work / "small" / "events.out.tfevents.small"
    write_file(ours, events)
    torch_records = _split_records(torch_file.read_bytes())
    our_records = _split_records(ours.read_bytes())
    # Record 0 is each writer's file_version event (its wall time is the writer's clock).
    assert torch_records[1:] == our_records[1:], "synthetic records differ from SummaryWriter's"
    a, b = read_event_file(torch_file), read_event_file(ours)
    assert a.tags() == b.tags() == sorted(TAGS)
    for tag in a.tags():
        for column in ("steps", "wall_times", "values"):
            assert getattr(a.get(tag), column).tolist() == getattr(b.get(tag), column).tolist()
    return f"{len(our_records) - 1} records byte-identical to torch SummaryWriter's, read back identically"


def _split_records(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos + 16 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        out.append(data[pos : pos + 16 + length])
        pos += 16 + length
    return out


# --------------------------------------------------------------------------- workers (own process)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes(pid: int | str = "self") -> int:
    """VmHWM: this process image's peak RSS (getrusage's maxrss also counts the parent before exec)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))


def _worker(method: str, path: Path, repeat: int) -> dict:
    if method == "triage":
        from triage_tui.core.read.events.reader import RunEvents

        def load():
            events = RunEvents()
            events.set_files([path])
            events.poll()
            scalars = events.scalars
            return scalars.points, sum(float(s.values.sum()) for s in scalars.series.values()), scalars.nbytes

    elif method == "upb":
        from tensorboard.compat.proto import event_pb2

        def load():
            data = path.read_bytes()
            series: dict[str, tuple[list, list, list]] = {}
            unpack, parse, pos, end = struct.Struct("<Q").unpack_from, event_pb2.Event.FromString, 0, len(data)
            while pos + 16 <= end:
                (length,) = unpack(data, pos)
                event = parse(data[pos + 12 : pos + 12 + length])
                pos += 16 + length
                for value in event.summary.value:
                    steps, walls, values = series.setdefault(value.tag, ([], [], []))
                    steps.append(event.step)
                    walls.append(event.wall_time)
                    values.append(value.simple_value)
            return sum(len(s[0]) for s in series.values()), sum(sum(s[2]) for s in series.values()), None

    elif method == "eventfileloader":
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util

        def load():
            count, total = 0, 0.0
            for event in EventFileLoader(str(path)).Load():
                for value in event.summary.value:  # data_compat turned simple_value into a tensor
                    count += 1
                    total += float(tensor_util.make_ndarray(value.tensor))
            return count, total, None

    else:
        raise SystemExit(f"unknown method {method}")
    base = _rss_bytes()
    walls, cpus = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        points, checksum, stored = load()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    peak = _peak_rss_bytes()
    return {
        "wall": min(walls),
        "cpu": min(cpus),
        "points": points,
        "checksum": checksum,
        "peak_extra": peak - base,
        "peak": peak,
        "stored": stored,
    }


def _tail_worker(path: Path, rounds: int) -> dict:
    from triage_tui.core.read.events.reader import RunEvents

    events = RunEvents()
    events.set_files([path])
    events.poll()
    loaded = events.scalars.points
    first = loaded  # the next point index: the file holds points 0..loaded-1
    walls, cpus, stats = [], [], None
    for _ in range(rounds):
        write_file(path, TAIL_EVENTS, start=first)
        first += TAIL_EVENTS
        t0, c0 = time.perf_counter(), time.process_time()
        stats = events.poll()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        assert stats.records == TAIL_EVENTS and stats.scalars == TAIL_EVENTS, stats
    assert events.scalars.points == loaded + rounds * TAIL_EVENTS
    return {
        "best": min(walls),
        "median": statistics.median(walls),
        "cpu_best": min(cpus),
        "cpu_median": statistics.median(cpus),
        "bytes": stats.bytes_read,
        "slow_records": stats.slow_records,
    }


def _run_worker(args: list[str]) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise SystemExit(f"worker {args} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- rustboard


def rustboard(logdir: Path, repeat: int) -> dict:
    import tensorboard_data_server

    server = tensorboard_data_server.server_binary()
    walls, cpus, peaks, reported = [], [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [
                server,
                "--logdir",
                str(logdir),
                "--reload",
                "once",
                "--samples-per-plugin",
                "scalars=all",
                "--port",
                "0",
                "--die-after-stdin",
                "-v",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            for line in proc.stderr:
                if "Finished load cycle" in line:
                    walls.append(time.perf_counter() - t0)
                    cpus.append(record.process_cpu(proc.pid))
                    peaks.append(_peak_rss_bytes(proc.pid))
                    reported.append(line.rsplit("(", 1)[-1].rstrip(")\n"))
                    break
            else:
                raise SystemExit("rustboard exited without finishing a load cycle")
        finally:
            proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    best = walls.index(min(walls))
    return {"wall": walls[best], "cpu": min(cpus), "peak_extra": max(peaks), "reported": reported[best]}


# --------------------------------------------------------------------------- main


def main() -> None:
    import as_installed  # benchmarks/: the script's own directory is on sys.path

    as_installed.compile_triage()  # timed processes start as an installed triage does
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of the fast methods; the best counts")
    parser.add_argument("--workdir", type=Path, default=HERE / ".work" / "events")
    parser.add_argument("--dry-run", action="store_true", help="print the run, append nothing to RESULTS-events.md")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "tail":
        print(json.dumps(_tail_worker(args.file, TAIL_ROUNDS)))
        return
    if args.worker:
        print(json.dumps(_worker(args.worker, args.file, args.repeat)))
        return

    import record

    run = record.Run("events", dry_run=args.dry_run)
    started = time.perf_counter()
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    big = work / "logdir" / "run" / "events.out.tfevents.1700000000.bench"
    t0 = time.perf_counter()
    write_file(big, args.events)
    written = time.perf_counter() - t0
    prefix = work / "prefix" / "events.out.tfevents.1700000000.prefix"
    prefix.parent.mkdir(parents=True)
    prefix.write_bytes(b"".join(_split_records(big.read_bytes())[: PREFIX_EVENTS + 1]))
    torch_check = check_against_torch(work)
    size = big.stat().st_size
    big.read_bytes()  # warm the page cache for everyone

    results = {
        "triage": _run_worker(["--worker", "triage", "--file", str(big), "--repeat", str(args.repeat)]),
        "upb": _run_worker(["--worker", "upb", "--file", str(big), "--repeat", "1"]),
        "eventfileloader": _run_worker(["--worker", "eventfileloader", "--file", str(prefix), "--repeat", "1"]),
        "rustboard": rustboard(big.parent.parent, args.repeat),
    }
    ours = results["triage"]
    assert ours["points"] == args.events, ours
    assert results["upb"]["points"] == args.events
    upb_checksum = results["upb"]["checksum"]
    assert abs(ours["checksum"] - upb_checksum) <= 1e-9 * abs(upb_checksum), (ours, results["upb"])
    scale = args.events / PREFIX_EVENTS
    efl = results["eventfileloader"]
    assert efl["points"] == PREFIX_EVENTS, efl
    efl["wall"] *= scale
    efl["cpu"] *= scale
    tail_copy = work / "tail" / big.name
    tail_copy.parent.mkdir()
    shutil.copyfile(big, tail_copy)
    tail = _run_worker(["--worker", "tail", "--file", str(tail_copy)])

    rows = [
        ("triage `RunEvents.poll()`", ours, f"{ours['stored'] / ours['points']:.0f} B/point stored"),
        (
            "rustboard 0.7.2 (Rust data server)",
            results["rustboard"],
            f"its log: load cycle {results['rustboard']['reported']}",
        ),
        ("upb loop: struct framing + `Event.FromString`", results["upb"], "no CRC checks"),
        (
            "tensorboard `EventFileLoader`",
            efl,
            f"**extrapolated** ×{scale:.0f} from a {PREFIX_EVENTS:,}-event prefix "
            "(times; RSS is the prefix run's, it streams)",
        ),
    ]
    results["rustboard"]["peak"] = results["rustboard"]["peak_extra"]  # its VmHWM: already the whole process

    def extra(name: str, r: dict) -> str:
        return "–" if name.startswith("rustboard") else f"{r['peak_extra'] / 2**20:.0f}"

    lines = [
        f"| {name} | {r['wall']:.3f} | {r['cpu']:.3f} | {r['wall'] / ours['wall']:.1f}× | "
        f"{r['cpu'] / ours['cpu']:.1f}× | {r['peak'] / 2**20:.0f} | "
        f"{extra(name, r)} | {note} |"
        for name, r, note in rows
    ]
    table = (
        f"{args.events:,} scalar events, {len(TAGS)} tags, {size / 1e6:.1f} MB (file written in {written:.1f} s; "
        f"{torch_check}); python {platform.python_version()}, numpy {__import__('numpy').__version__}, "
        f"protobuf {__import__('google.protobuf').protobuf.__version__}, "
        f"tensorboard {__import__('tensorboard').__version__}. Cold load in a process, page cache warm; best of "
        f"{args.repeat} for triage and rustboard, 1 run for the others. rustboard's time runs from its exec, the "
        "others' from the call (their interpreter already started).\n\n"
        "| method | wall s | CPU s | wall vs triage | CPU vs triage | peak RSS, whole process, MiB "
        "| of which after imports, MiB | notes |\n|---|---:|---:|---:|---:|---:|---:|---|\n"
        + "\n".join(lines)
        + f"\n\nTail: {TAIL_EVENTS:,} events appended to the loaded file, one `poll()`, {TAIL_ROUNDS} rounds: "
        f"wall best {tail['best'] * 1e3:.2f} ms, median {tail['median'] * 1e3:.2f} ms; "
        f"CPU best {tail['cpu_best'] * 1e3:.2f} ms, median {tail['cpu_median'] * 1e3:.2f} ms "
        f"({tail['bytes']:,} bytes read, {tail['slow_records']} records through `Event.FromString`).\n\n"
        f"Total benchmark time {time.perf_counter() - started:.0f} s."
    )

    def side(name: str, label: str, r: dict) -> dict:
        return {"name": name, "label": label, "seconds": r["wall"], "cpu": r["cpu"], "rss_mib": r["peak"] / 2**20}

    tensorboard = __import__("tensorboard").__version__
    record_rows = [
        {
            "what": f"read one {args.events:,}-event file in a process",
            "triage": side("triage", "`RunEvents.poll()`", ours),
            "other": side(
                f"EventFileLoader (tensorboard {tensorboard})",
                f"tensorboard {tensorboard} `EventFileLoader`, what tbparse reads with (×{scale:.0f} from a prefix)",
                efl,
            ),
        },
        {
            "what": f"a live poll: {TAIL_EVENTS:,} events appended to a loaded {args.events:,}-event file",
            "triage": {"name": "triage", "label": "`RunEvents.poll()`, median", "seconds": tail["median"]},
            "other": None,
        },
    ]
    run.save("Event file reader", table, record_rows)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
