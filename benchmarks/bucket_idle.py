"""What watching a bucket of many runs costs once every run is idle for long: requests a poll.

bench_sweep's tree (--runs runs of --points scalars, a config.json beside each event file) is
uploaded to moto's S3 server (tests/builders/object_store.py) and watched by one Watcher, as the
TUI watches it (live passes, a rescan at every poll), through a counting proxy. It polls until
every point is read, once more with the objects fresh, and then with the listing tiers' clocks
(objstore.levels, objstore.polls and the local read schedule) moved on two hours, as
tests/test_objstore_listing.py does: every run is then idle for long, and each poll is printed
with its requests by kind. moto lists a page in time proportional to the bucket, so the wall
times are moto's; the request counts are what S3 would be sent. Prints only.

    .venv/bin/python benchmarks/bucket_idle.py                       # 10 000 runs, ~6 min
    .venv/bin/python benchmarks/bucket_idle.py --runs 50
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import bench_bucket  # noqa: E402  (the upload, the environment, requests by kind)
import bench_sweep  # noqa: E402  (the tree)
from builders.object_store import MovedClock, S3Proxy, S3Server, s3_client  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--points", type=int, default=10, help="scalars a run (10 tags)")
    args = parser.parse_args()
    root = HERE / ".work" / "bucket" / f"{args.runs}x{args.points}"
    expected = bench_sweep.write_tree(root, args.runs, args.points)
    with S3Server() as server:
        client = s3_client(server.endpoint)
        client.create_bucket(Bucket=bench_bucket.BUCKET)
        started = time.perf_counter()
        objects, size = bench_bucket.upload(client, root, 16)
        print(f"{objects} objects, {size} bytes, uploaded in {time.perf_counter() - started:.1f} s", flush=True)
        proxy = S3Proxy(server.port)
        os.environ.update(bench_bucket.s3_env(proxy.endpoint))
        from triage_tui.core.objstore import levels, polls, tuning
        from triage_tui.core.read.runs.remote import Mirrors
        from triage_tui.core.watch import read_schedule
        from triage_tui.core.watch.watcher import Watcher

        for module in (levels, polls, read_schedule):
            setattr(module, "time", MovedClock)  # noqa: B010  (mypy: a module's attribute, set by name)
        tuning.CACHE_DIR = Path(tempfile.mkdtemp())
        mirrors = Mirrors()
        watcher = Watcher(
            [mirrors.local(bench_bucket.URL)], mirrors=mirrors, strict=False, use_watchdog=False, rescan_interval=0.0
        )

        def poll(name: str) -> int:
            proxy.reset_counts()
            t0 = time.perf_counter()
            statuses = watcher.poll_once()
            counts = proxy.reset_counts()
            points = sum(status.scalars.points for status in statuses)
            print(
                f"{name}: {time.perf_counter() - t0:.2f} s, {counts.total_requests()} requests "
                f"{bench_bucket.by_kind(counts)}, {counts.get_body_bytes()} object bytes, "
                f"{len(statuses)} runs, {points} points",
                flush=True,
            )
            return points

        started = time.perf_counter()
        while poll("first passes") < expected:
            if time.perf_counter() - started > 1800:
                raise SystemExit("not every point was read in 30 min")
        print(f"every point read after {time.perf_counter() - started:.1f} s", flush=True)
        poll("idle poll, objects uploaded just now")
        MovedClock.ahead = 7200.0
        poll("2 h on: every tier's time has come")
        poll("idle poll")
        MovedClock.ahead += 61.0
        poll("61 s later: the prefix's and every run's 1 min tier")
        poll("idle poll")
        MovedClock.ahead += 301.0
        poll("5 min later")
        print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB")
        proxy.stop()


if __name__ == "__main__":
    main()
