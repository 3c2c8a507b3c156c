"""Scale: 200 runs of 100 000 points and one run of 10 000 000 points, against rustboard.

Writes the two trees into benchmarks/.work/scale/ (deleted at the end unless --keep) as
SpecForge lays them out (``<run>/runs/events.out.tfevents.*`` beside a ``config.json``), one
scalar event per record as torch's SummaryWriter writes them, 10 tags (train/ploss_0..4,
train/acc_0..4) at every step. Records are built with numpy from byte templates; a sample of
them is checked to be byte-identical to ``event_pb2.Event(...).SerializeToString()`` framed with
crc32c, and every measurement asserts that triage read back exactly the points written.

Each measurement runs in its own process:
- load: ``Watcher.poll_once()`` once, cold in the process (page cache warm), three times; peak RSS
  is /proc VmHWM reset after imports (getrusage's peak inherits the parent's across exec), and the
  RSS once loaded; both above the RSS after imports, per point stored. A run of a tenth of the big
  one's points gives the slope: bytes per added point and the fixed overhead;
- first paint, headless (on a real terminal: bench_paint.py): ``TriageApp`` under ``App.run_test``,
  from constructing the app to the first screen with the runs table mounted (three fresh processes,
  median), then to the table holding every run (its first poll done);
- idle: ``Watcher.run`` (poll 1 s, rescan 5 s, watchdog on as in the TUI, then ``--poll``) and the
  whole TUI under ``run_test``, process CPU time / wall time over --idle-seconds once loaded;
- rustboard: tensorboard's Rust data server (``--reload once --samples-per-plugin scalars=all``)
  on the same tree, from exec to its "Finished load cycle" log line, peak RSS from /proc VmHWM.

    .venv/bin/python benchmarks/bench_scale.py            # full size (~8 min on 2 cores, < 4 GB)
    .venv/bin/python benchmarks/bench_scale.py --runs 20 --points 10000 --big 100000 --idle-seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import crc32c
import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK = HERE / ".work" / "scale"

TAGS = [f"train/ploss_{i}" for i in range(5)] + [f"train/acc_{i}" for i in range(5)]
WALL0 = 1_750_000_000.0
_MASK_DELTA = 0xA282EAD8


# --------------------------------------------------------------------------- writing


def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> np.uint32(1)) ^ np.uint32(0x82F63B78), table >> np.uint32(1))
    return table.astype(np.uint32)


_TABLE = _crc_table()


def _masked(crc):
    """TFRecord's masked CRC (tensorflow/tensorboard tensorboard/data/server/masked_crc.rs)."""
    if isinstance(crc, np.ndarray):
        return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(_MASK_DELTA)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _crc32c_rows(rows: np.ndarray) -> np.ndarray:
    """CRC-32C of every row of a (n, L) uint8 matrix, one byte column at a time."""
    crc = np.full(rows.shape[0], 0xFFFFFFFF, np.uint32)
    for j in range(rows.shape[1]):
        crc = _TABLE[(crc ^ rows[:, j]) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
    return crc ^ np.uint32(0xFFFFFFFF)


def _varint_width(n: int) -> int:
    return max(1, (int(n).bit_length() + 6) // 7)


def _frame(payload: bytes) -> bytes:
    header = len(payload).to_bytes(8, "little")
    return (
        header
        + _masked(crc32c.crc32c(header)).to_bytes(4, "little")
        + payload
        + _masked(crc32c.crc32c(payload)).to_bytes(4, "little")
    )


def scalar_records(tag: str, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Framed records of Event{wall_time, step, summary{value{tag, simple_value}}}, one per row.

    Field order as protobuf serializes it (field number order): wall_time=1 (fixed64),
    step=2 (varint), summary=5 { value=1 { tag=1, simple_value=2 (fixed32) } }. All steps share
    one varint width, so all rows have one length.
    """
    width = _varint_width(int(steps[-1]))
    assert _varint_width(int(steps[0])) == width
    name = tag.encode()
    value_msg_len = 2 + len(name) + 5
    summary_len = 2 + value_msg_len
    length = 9 + 1 + width + 2 + summary_len
    n = steps.size
    payload = np.empty((n, length), np.uint8)
    payload[:, 0] = 0x09
    payload[:, 1:9] = walls.astype("<f8").view(np.uint8).reshape(n, 8)
    payload[:, 9] = 0x10
    s = steps.astype(np.uint64)
    for k in range(width):
        byte = (s >> np.uint64(7 * k)) & np.uint64(0x7F)
        payload[:, 10 + k] = byte | np.uint64(0x80 if k < width - 1 else 0)
    pos = 10 + width
    payload[:, pos : pos + 4] = np.frombuffer(bytes([0x2A, summary_len, 0x0A, value_msg_len]), np.uint8)
    pos += 4
    payload[:, pos : pos + 2 + len(name)] = np.frombuffer(bytes([0x0A, len(name)]) + name, np.uint8)
    pos += 2 + len(name)
    payload[:, pos] = 0x15
    payload[:, pos + 1 : pos + 5] = values.astype("<f4").view(np.uint8).reshape(n, 4)
    header = length.to_bytes(8, "little")
    rows = np.empty((n, 16 + length), np.uint8)
    rows[:, :8] = np.frombuffer(header, np.uint8)
    rows[:, 8:12] = np.frombuffer(_masked(crc32c.crc32c(header)).to_bytes(4, "little"), np.uint8)
    rows[:, 12 : 12 + length] = payload
    rows[:, 12 + length :] = _masked(_crc32c_rows(payload)).astype("<u4").view(np.uint8).reshape(n, 4)
    return rows


def check_records_match_the_real_writer(rng: np.random.Generator) -> None:
    """A sample of generated records equals event_pb2's serialization framed with crc32c."""
    from tensorboard.compat.proto import event_pb2, summary_pb2

    for step in (1, 5, 127, 128, 300, 16383, 16384, 999_999, 2_097_152):
        for tag in TAGS[:1] + TAGS[-1:]:
            wall, value = WALL0 + step * 0.37, float(np.float32(rng.normal()))
            ours = scalar_records(tag, np.array([step]), np.array([wall]), np.array([value], np.float32))[0].tobytes()
            event = event_pb2.Event(
                wall_time=wall,
                step=step,
                summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]),
            )
            assert ours == _frame(event.SerializeToString()), (tag, step)


def write_event_file(path: Path, steps_total: int, rng: np.random.Generator, chunk: int = 100_000) -> int:
    """One event file: file_version record, then every tag at every step; points written."""
    from tensorboard.compat.proto import event_pb2

    path.parent.mkdir(parents=True, exist_ok=True)
    # Steps 1..steps_total (proto3 leaves a zero step out of the record), split where the varint widens.
    edges = [1] + [b for b in (128, 1 << 14, 1 << 21, 1 << 28) if b <= steps_total] + [steps_total + 1]
    level = rng.uniform(18.0, 20.0, len(TAGS))
    with open(path, "wb") as out:
        out.write(_frame(event_pb2.Event(wall_time=WALL0, file_version="brain.Event:2").SerializeToString()))
        for lo_edge, hi_edge in zip(edges[:-1], edges[1:], strict=True):
            for lo in range(lo_edge, hi_edge, chunk):
                steps = np.arange(lo, min(lo + chunk, hi_edge), dtype=np.int64)
                walls = WALL0 + steps * 0.5
                blocks = []
                for t, tag in enumerate(TAGS):
                    noise = rng.normal(0.0, 0.3, steps.size).astype(np.float32)
                    values = (level[t] + noise) if t < 5 else np.abs(noise) * 0.1 + 0.02
                    blocks.append(scalar_records(tag, steps, walls, values))
                # Step-major, tag-minor: what a trainer calling add_scalar per tag at each step writes.
                out.write(np.concatenate(blocks, axis=1).tobytes())
    return steps_total * len(TAGS)


def write_run(run: Path, points: int, rng: np.random.Generator) -> int:
    (run / "runs").mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps({"draft_vocab_size": 32000, "vocab_size": 163840}))
    host = f"events.out.tfevents.{int(WALL0)}.node{run.name[-3:]}.4242.0"
    return write_event_file(run / "runs" / host, points // len(TAGS), rng)


def write_trees(runs: int, points: int, big: int) -> dict[str, tuple[Path, int, int]]:
    rng = np.random.default_rng(252)
    check_records_match_the_real_writer(rng)
    trees = {}
    many = WORK / f"many_{runs}x{points}"
    if not (many / ".complete").exists():
        shutil.rmtree(many, ignore_errors=True)
        total = sum(write_run(many / f"run_{i:03d}", points, rng) for i in range(runs))
        (many / ".complete").write_text(str(total))
    trees["many"] = (many, runs, int((many / ".complete").read_text()))
    one = WORK / f"one_{big}"
    if not (one / ".complete").exists():
        shutil.rmtree(one, ignore_errors=True)
        total = write_run(one / "run_big", big, rng)
        (one / ".complete").write_text(str(total))
    trees["big"] = (one, 1, int((one / ".complete").read_text()))
    return trees


def write_slope_run(big: int) -> tuple[Path, int]:
    """One run of big/10 points: peak RSS at two sizes separates bytes per point from fixed overhead."""
    rng = np.random.default_rng(7)
    tenth = WORK / f"one_{big // 10}"
    if not (tenth / ".complete").exists():
        shutil.rmtree(tenth, ignore_errors=True)
        (tenth / ".complete").parent.mkdir(parents=True, exist_ok=True)
        total = write_run(tenth / "run_big", big // 10, rng)
        (tenth / ".complete").write_text(str(total))
    return tenth, int((tenth / ".complete").read_text())


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*tfevents*"))


# --------------------------------------------------------------------------- measurements (children)


def _rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _vm_kb(pid: int | str, field: str) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(rf"{field}:\s+(\d+) kB", text)
    return int(found.group(1)) if found else 0


def child_load(root: str, expected: int) -> dict:
    import gc

    from triage_tui.core.watch.watcher import Watcher

    gc.collect()
    rss_imports_peak = _rss_kb()
    # Reset the peak (VmHWM) to the current RSS (Linux >= 4.0), so the peak below is the load's own.
    Path("/proc/self/clear_refs").write_text("5")
    rss0 = _vm_kb("self", "VmRSS")
    t0 = time.perf_counter()
    watcher = Watcher([root], use_watchdog=False)
    statuses = watcher.poll_once()
    seconds = time.perf_counter() - t0
    points = sum(s.scalars.points for s in statuses)
    stored = sum(s.scalars.nbytes for s in statuses)
    assert points == expected, (points, expected)
    t0 = time.perf_counter()
    again = watcher.poll_once()
    idle_poll = time.perf_counter() - t0
    assert all(a is b for a, b in zip(again, statuses, strict=True))
    return {
        "load_s": seconds,
        "points": points,
        "stored_bytes": stored,
        "rss_imports_kb": rss0,
        "rss_imports_peak_kb": rss_imports_peak,
        "rss_peak_kb": _vm_kb("self", "VmHWM"),
        "rss_after_kb": _vm_kb("self", "VmRSS"),
        "idle_poll_s": idle_poll,
        "runs": len(statuses),
    }


def child_idle(root: str, expected: int, seconds: float, use_watchdog: bool) -> dict:
    from triage_tui.core.watch.watcher import Watcher

    watcher = Watcher([root], use_watchdog=use_watchdog, poll_interval=1.0, rescan_interval=5.0)
    updates: list = []
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(updates.append, stop))
    thread.start()
    while not updates:
        time.sleep(0.05)
    assert sum(s.scalars.points for s in updates[0]) == expected
    time.sleep(2.0)  # the watchdog observer starts after the first update; let it settle
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    watchdog = watcher.watchdog_active
    stop.set()
    thread.join()
    return {"cpu_s": cpu, "wall_s": wall, "percent": 100 * cpu / wall, "watchdog_active": watchdog}


def child_tui(root: str, expected: int, idle_seconds: float) -> dict:
    t_import = time.perf_counter()
    from triage_tui.tui.app import TriageApp
    from triage_tui.tui.widgets.runs_table import RunsTable

    import_s = time.perf_counter() - t_import

    async def session(out: dict) -> None:
        t0 = time.perf_counter()
        app = TriageApp([root], poll_interval=1.0)
        async with app.run_test(size=(120, 36)) as pilot:
            while True:
                try:
                    app.screen.query_one(RunsTable)
                    break
                except Exception:  # noqa: BLE001 - not mounted yet: no screen, or no table on it
                    await asyncio.sleep(0.001)
            out["first_paint_s"] = time.perf_counter() - t0
            out["polls_at_first_paint"] = app.polls
            while app.polls == 0:
                await asyncio.sleep(0.005)
            out["rows_shown_s"] = time.perf_counter() - t0
            table = app.screen.query_one(RunsTable)
            out["rows"] = table.row_count
            assert sum(s.scalars.points for s in app.statuses.values()) == expected
            await pilot.pause(2.0)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            await asyncio.sleep(idle_seconds)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            if app.return_code is None:
                out["idle_percent"] = 100 * cpu / wall
            await pilot.press("q")

    out: dict = {"import_s": import_s}
    try:
        asyncio.run(session(out))
    except Exception as err:  # noqa: BLE001 - report what was measured before the app died, and why it died
        out["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:300]
    return out


def child_paint(root: str, exec_wall: float) -> dict:
    """Constructing the app to the first screen with the runs table mounted; then quit.

    ``exec_wall`` is the parent's time.time() just before it started this process, so the paint
    is also timed from the exec (interpreter start-up and imports included), as a user sees it."""
    from triage_tui.tui.app import TriageApp
    from triage_tui.tui.widgets.runs_table import RunsTable

    out: dict = {}

    async def session() -> None:
        t0 = time.perf_counter()
        app = TriageApp([root], poll_interval=1.0)
        async with app.run_test(size=(120, 36)) as pilot:
            while True:
                try:
                    app.screen.query_one(RunsTable)
                    break
                except Exception:  # noqa: BLE001 - not mounted yet: no screen, or no table on it
                    await asyncio.sleep(0.001)
            out.update(first_paint_s=time.perf_counter() - t0, from_exec_s=time.time() - exec_wall, polls=app.polls)
            await pilot.press("q")

    try:
        asyncio.run(session())
    except Exception as err:  # noqa: BLE001 - the app dying after its first paint does not unmake the paint
        out["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:300]
    return out


def run_child(kind: str, *args) -> dict:
    """Run a measurement in a fresh interpreter; its JSON line back."""
    cmd = [sys.executable, __file__, "--child", kind, *map(str, args)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- rustboard


def rustboard_binary() -> Path:
    import tensorboard_data_server

    return Path(tensorboard_data_server.__file__).parent / "bin" / "server"


def rustboard_load(root: Path, timeout: float = 600.0) -> dict:
    """Exec to "Finished load cycle" of `server --reload once`, and its peak RSS."""
    cmd = [
        str(rustboard_binary()),
        "--logdir",
        str(root),
        "--reload",
        "once",
        "--port",
        "0",
        "--samples-per-plugin",
        "scalars=all",
        "--no-checksum",
        "-v",
        "--die-after-stdin",
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    seconds = None
    peak_kb = 0
    reader_done = threading.Event()

    def read_stderr() -> None:
        nonlocal seconds
        for line in proc.stderr:
            lines.append(line)
            if "Finished load cycle" in line and seconds is None:
                seconds = time.perf_counter() - t0
                reader_done.set()
        reader_done.set()

    threading.Thread(target=read_stderr, daemon=True).start()
    while not reader_done.wait(0.02):
        peak_kb = max(peak_kb, _vm_kb(proc.pid, "VmHWM"))
        if time.perf_counter() - t0 > timeout:
            break
    peak_kb = max(peak_kb, _vm_kb(proc.pid, "VmHWM"))
    proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if seconds is None:
        raise RuntimeError("rustboard never finished a load cycle:\n" + "".join(lines[-20:]))
    return {"load_s": seconds, "rss_peak_kb": peak_kb}


# --------------------------------------------------------------------------- report


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    import as_installed  # benchmarks/: the script's own directory is on sys.path

    as_installed.compile_triage()  # timed processes start as an installed triage does
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--points", type=int, default=100_000, help="points per run of the many-runs tree")
    parser.add_argument("--big", type=int, default=10_000_000, help="points of the one big run")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--keep", action="store_true", help="keep benchmarks/.work/scale for a rerun")
    parser.add_argument("--no-rustboard", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="load measurements per tree (median reported)")
    args = parser.parse_args()

    print(f"machine: {os.cpu_count()} cores, load average at start {loadavg()}", flush=True)
    t0 = time.perf_counter()
    trees = write_trees(args.runs, args.points, args.big)
    print(f"wrote/kept trees in {time.perf_counter() - t0:.1f} s", flush=True)

    rows = []
    for key, (root, runs, points) in trees.items():
        size = tree_bytes(root)
        print(
            f"[{key}] {runs} run(s), {points:,} points, {size / 1e6:.0f} MB of event files; load {loadavg()}",
            flush=True,
        )
        # Three fresh processes each, alternating with rustboard, medians reported: the machine is shared.
        loads, rusts = [], []
        for _ in range(args.repeat):
            loads.append(run_child("load", root, points))
            print(f"[{key}] load: {json.dumps(loads[-1])}", flush=True)
            if not args.no_rustboard:
                rusts.append(rustboard_load(root))
                print(f"[{key}] rustboard: {json.dumps(rusts[-1])}", flush=True)
        load = sorted(loads, key=lambda r: r["load_s"])[len(loads) // 2]
        rust = sorted(rusts, key=lambda r: r["load_s"])[len(rusts) // 2] if rusts else None
        load["load_all_s"] = [round(r["load_s"], 2) for r in loads]
        if rust:
            rust["load_all_s"] = [round(r["load_s"], 2) for r in rusts]
        paint_runs = [run_child("paint", root, repr(time.time())) for _ in range(3)]
        paints = sorted(p["first_paint_s"] for p in paint_runs)
        from_exec = sorted(p["from_exec_s"] for p in paint_runs)
        print(f"[{key}] first paint, 3 fresh processes: {paints}; from exec: {from_exec}", flush=True)
        tui = run_child("tui", root, points, args.idle_seconds)
        tui["first_paint_median_s"] = paints[1]
        tui["from_exec_median_s"] = from_exec[1]
        print(f"[{key}] tui: {json.dumps(tui)}", flush=True)
        idle = run_child("idle", root, points, args.idle_seconds, 1)
        print(f"[{key}] idle (watchdog): {json.dumps(idle)}", flush=True)
        idle_poll = run_child("idle", root, points, args.idle_seconds, 0)
        print(f"[{key}] idle (--poll): {json.dumps(idle_poll)}", flush=True)
        rows.append((key, runs, points, size, load, tui, idle, idle_poll, rust))

    tenth_root, tenth_points = write_slope_run(args.big)
    tenth = run_child("load", tenth_root, tenth_points)
    big_load = next(r[4] for r in rows if r[0] == "big")
    slope = (big_load["rss_peak_kb"] - tenth["rss_peak_kb"]) * 1024 / (trees["big"][2] - tenth_points)
    fixed = (tenth["rss_peak_kb"] - tenth["rss_imports_kb"]) * 1024 - slope * tenth_points
    steady_slope = (
        (big_load["rss_after_kb"] - big_load["rss_imports_kb"] - tenth["rss_after_kb"] + tenth["rss_imports_kb"])
        * 1024
        / (trees["big"][2] - tenth_points)
    )
    print(f"[slope] one run of {tenth_points:,} points: {json.dumps(tenth)}")
    print(
        f"[slope] peak RSS grows {slope:.1f} B per point from {tenth_points:,} to {trees['big'][2]:,} points "
        f"(fixed overhead above imports ~{fixed / 2**20:.0f} MiB); "
        f"RSS once loaded grows {steady_slope:.1f} B per point"
    )

    print(f"\nload average at end {loadavg()}\n")
    print(
        "| tree | points | triage load (median of 3) | rustboard load, median (÷ triage) "
        "| headless first paint (on a terminal: bench_paint.py), median of 3 (from exec) | all rows shown | "
        "idle CPU core / TUI / --poll | triage peak RSS above imports | B/point (peak RSS / RSS after / stored) | "
        "rustboard peak RSS |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for _key, runs, points, size, load, tui, idle, idle_poll, rust in rows:
        above = (load["rss_peak_kb"] - load["rss_imports_kb"]) * 1024
        steady = (load["rss_after_kb"] - load["rss_imports_kb"]) * 1024
        rust_cell = "–" if rust is None else f"{rust['load_s']:.2f} s ({rust['load_s'] / load['load_s']:.1f})"
        tui_idle = f"{tui['idle_percent']:.2f} %" if "idle_percent" in tui else "crashed¹"
        rust_rss = "–" if rust is None else f"{rust['rss_peak_kb'] / 1024:.0f} MiB"
        print(
            f"| {runs} run{'s' if runs > 1 else ''} ({size / 1e6:.0f} MB) | {points:,} | {load['load_s']:.2f} s "
            f"| {rust_cell} | {tui['first_paint_median_s'] * 1000:.0f} ms "
            f"({tui['from_exec_median_s'] * 1000:.0f} ms) | {tui['rows_shown_s']:.2f} s "
            f"| {idle['percent']:.2f} % / {tui_idle} / {idle_poll['percent']:.2f} % "
            f"| {above / 2**20:.0f} MiB | {above / points:.1f} / {steady / points:.1f} "
            f"/ {load['stored_bytes'] / points:.1f} "
            f"| {rust_rss} |"
        )
    for key, *_, tui, _idle, _idle_poll, _rust in rows:
        if "error" in tui:
            print(f"\n¹ [{key}] the TUI died after its first poll: {tui['error']}")
    if not args.keep:
        for root in [tree[0] for tree in trees.values()] + [tenth_root]:
            shutil.rmtree(root, ignore_errors=True)
        try:
            WORK.rmdir()  # only when no other tree is kept there
        except OSError:
            pass


def child_main(kind: str, argv: list[str]) -> None:
    if kind == "load":
        out = child_load(argv[0], int(argv[1]))
    elif kind == "idle":
        out = child_idle(argv[0], int(argv[1]), float(argv[2]), bool(int(argv[3])))
    elif kind == "tui":
        out = child_tui(argv[0], int(argv[1]), float(argv[2]))
    elif kind == "paint":
        out = child_paint(argv[0], float(argv[1]))
    else:
        raise SystemExit(f"unknown child {kind}")
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        sys.path.insert(0, str(REPO))
        child_main(sys.argv[2], sys.argv[3:])
    else:
        main()
