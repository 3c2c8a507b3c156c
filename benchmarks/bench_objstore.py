"""Choosing the object-store client: fsspec's s3fs against obstore, side by side, on one real server.

The server: moto's S3 server (tests/builders/object_store.py) in a child process on 127.0.0.1, so
the client's CPU time (``time.process_time`` of this process, every thread of it, obstore's Rust
runtime included) is the client's alone; the server's time is in the wall clock only. moto is a
Python server and slower than S3 itself: wall ratios understate the client differences, the CPU
ratios are what the clients cost. The bucket holds --runs runs of a sweep (``sweep/run-NNNN/``:
an event file, ``config.json``, ``triage.toml``), and one 8 MiB object that grows.

Measured for each client, in alternating order, best of --repeat:
- listing the sweep's prefix once, recursively (one ListObjectsV2 pass, 1 000 keys a page);
- ranged GETs of the last 64 KiB of the 8 MiB object (a poll fetching what was appended);
- --runs small GETs of whole ``config.json`` objects, one after another and concurrently (each
  client's own way: s3fs ``cat`` of the list, obstore ``get_async`` gathered);
- per-request overhead: a HEAD of one object, repeated;
- import time and the first request in a fresh process (with obstore, also through botocore's
  credential chain, the way triage gets AWS profiles and SSO);
- install size: the files of the client's dependency closure that triage's own install lacks
  (and, with --index-sizes, each client pip-installed into an empty directory, gcsfs too);
- the sweep mirrored through triage's own layer (core/objstore) with either client: the first
  pass, an idle pass (goal: the listing alone) and a pass after one run grew by 4 KiB (goal: the
  appended bytes plus one request).

    .venv/bin/python benchmarks/bench_objstore.py                 # ~2 min on a quiet 2-core machine
    .venv/bin/python benchmarks/bench_objstore.py --runs 200 --repeat 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

from builders.object_store import DUMMY_ENV, S3Server, s3_client  # noqa: E402

BUCKET = "bench"
BIG_KEY = "sweep/growing/events.out.tfevents.1.host.1.0"
BIG_BYTES = 8 << 20
TAIL_BYTES = 64 << 10
RANGED_GETS = 50
HEADS = 200


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def populate(client, runs: int) -> int:
    """The sweep: per run an event file (16 KiB), config.json and triage.toml; and the big object."""
    config = json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": 32000, "vocab_size": 163840})
    items = []
    for n in range(runs):
        base = f"sweep/run-{n:04d}/"
        items += [
            (base + f"runs/events.out.tfevents.{1_700_000_000 + n}.host.1.0", os.urandom(16 << 10)),
            (base + "config.json", config.encode()),
            (base + "triage.toml", b'[run]\nname = "run"\n'),
        ]
    items.append((BIG_KEY, os.urandom(BIG_BYTES)))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: client.put_object(Bucket=BUCKET, Key=kv[0], Body=kv[1]), items))
    return len(items)


def timed(fn, repeat: int) -> tuple[float, float]:
    """Best (wall s, CPU s of this process) of ``repeat`` calls."""
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        w, c = time.perf_counter() - w0, time.process_time() - c0
        best = min(best, (w, c))
    return best


class Obstore:
    name = "obstore"

    def __init__(self) -> None:
        import obstore
        from obstore.store import S3Store

        self.obs = obstore
        self.store = S3Store(BUCKET, client_options={"allow_http": True})

    def list_prefix(self) -> int:
        return sum(len(chunk) for chunk in self.obs.list(self.store, "sweep/", chunk_size=1000))

    def tail(self) -> int:
        return len(self.obs.get_range(self.store, BIG_KEY, start=BIG_BYTES - TAIL_BYTES, end=BIG_BYTES))

    def get_sequential(self, keys: list[str]) -> int:
        return sum(len(self.obs.get(self.store, key).bytes()) for key in keys)

    def get_concurrent(self, keys: list[str]) -> int:
        async def one(key: str, gate: asyncio.Semaphore) -> int:
            async with gate:
                got = await self.obs.get_async(self.store, key)
                return len(await got.bytes_async())

        async def every() -> int:
            gate = asyncio.Semaphore(128)  # s3fs's cat gathers in batches of 128 too
            return sum(await asyncio.gather(*(one(k, gate) for k in keys)))

        return asyncio.run(every())

    def head(self) -> int:
        return self.obs.head(self.store, "sweep/run-0000/config.json")["size"]


class S3fs:
    name = "s3fs"

    def __init__(self) -> None:
        import s3fs

        self.fs = s3fs.S3FileSystem()

    def list_prefix(self) -> int:
        self.fs.invalidate_cache()  # s3fs keeps listings; a rescan must see the bucket as it is now
        return len(self.fs.find(f"{BUCKET}/sweep/", detail=True))

    def tail(self) -> int:
        return len(self.fs.cat_file(f"{BUCKET}/{BIG_KEY}", start=BIG_BYTES - TAIL_BYTES, end=BIG_BYTES))

    def get_sequential(self, keys: list[str]) -> int:
        return sum(len(self.fs.cat_file(f"{BUCKET}/{key}")) for key in keys)

    def get_concurrent(self, keys: list[str]) -> int:
        return sum(len(v) for v in self.fs.cat([f"{BUCKET}/{k}" for k in keys]).values())

    def head(self) -> int:
        self.fs.invalidate_cache()
        return self.fs.info(f"{BUCKET}/sweep/run-0000/config.json")["size"]


FIRST_REQUEST = {
    "s3fs": "import s3fs; s3fs.S3FileSystem().info('bench/sweep/run-0000/config.json')",
    "obstore": (
        "import obstore; from obstore.store import S3Store; "
        "obstore.head(S3Store('bench', client_options={'allow_http': True}), 'sweep/run-0000/config.json')"
    ),
    "obstore + botocore credential chain": (
        "import botocore.session, obstore; from obstore.store import S3Store; "
        "c = botocore.session.get_session().get_credentials().get_frozen_credentials(); "
        "s = S3Store('bench', client_options={'allow_http': True}, "
        "credential_provider=lambda: {'access_key_id': c.access_key, 'secret_access_key': c.secret_key, "
        "'token': c.token, 'expires_at': None}); obstore.head(s, 'sweep/run-0000/config.json')"
    ),
}
IMPORTS = {"s3fs": "import s3fs", "obstore": "import obstore, obstore.store", "botocore": "import botocore.session"}


def fresh_process(code: str, repeat: int) -> float:
    """Best wall seconds of ``code`` in a new interpreter (start-up subtracted)."""
    probe = f"import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"
    best = float("inf")
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=os.environ)
        best = min(best, float(out.stdout.strip().splitlines()[-1]))
    return best


def _requirement_names(dist: metadata.Distribution, extras: tuple[str, ...] = ()) -> list[str]:
    from packaging.requirements import Requirement

    names = []
    for spec in dist.requires or []:
        req = Requirement(spec)
        env_ok = (
            req.marker is None
            or any(req.marker.evaluate({"extra": e}) for e in extras)
            or req.marker.evaluate({"extra": ""})
        )
        if env_ok:
            names.append(req.name)
    return names


def closure(names: list[str]) -> set[str]:
    """Installed distributions ``names`` need, themselves included (normalised names)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        todo += _requirement_names(dist)
    return seen


def installed_bytes(names: set[str]) -> int:
    total = 0
    for name in names:
        dist = metadata.distribution(name)
        for file in dist.files or []:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                total += path.stat().st_size
    return total


def install_sizes() -> dict[str, tuple[int, list[str]]]:
    """Per client, the bytes its closure adds on top of triage's own dependencies."""
    base = closure(_requirement_names(metadata.distribution("triage-tui")))
    out = {}
    for label, roots in {
        "s3fs": ["s3fs"],
        "obstore": ["obstore"],
        "obstore + botocore": ["obstore", "botocore"],
    }.items():
        added = closure(roots) - base
        out[label] = (installed_bytes(added), sorted(added))
    return out


def mirror_rows(runs: int) -> dict[str, dict[str, tuple[float, float, int, int]]]:
    """The sweep mirrored through triage's layer (core/objstore) with each client: the first pass,
    an idle pass and a pass after one run's event file grew by 4 KiB: (wall s, CPU s, requests,
    object-body bytes) each."""
    import tempfile

    from triage_tui.core.objstore import tuning
    from triage_tui.core.objstore.store import store_for
    from triage_tui.core.read.runs.remote import mirror_runs

    out: dict[str, dict[str, tuple[float, float, int, int]]] = {}
    grown_key = "sweep/run-0000/runs/events.out.tfevents.1700000000.host.1.0"
    client = s3_client(os.environ["AWS_ENDPOINT_URL"])
    body = client.get_object(Bucket=BUCKET, Key=grown_key)["Body"].read()
    for label, native in (("obstore", ("s3", "gs")), ("s3fs", ())):
        tuning.NATIVE_SCHEMES = native
        tuning.CACHE_ENABLED = False  # every pass fetches from the server
        rows = {}
        with tempfile.TemporaryDirectory() as root:
            mirror = mirror_runs(f"s3://{BUCKET}/sweep", Path(root))
            store_for(mirror.url).head(grown_key)  # the client opened, as in a running watcher
            for case in ("first pass", "idle pass", "pass after one run grew 4 KiB"):
                if case.startswith("pass after"):
                    body += os.urandom(4096)
                    client.put_object(Bucket=BUCKET, Key=grown_key, Body=body)
                w0, c0 = time.perf_counter(), time.process_time()
                result = mirror.sync()
                rows[case] = (time.perf_counter() - w0, time.process_time() - c0, result.requests, result.body_bytes)
                assert not result.errors, result.errors
        out[label] = rows
    return out


def index_sizes(packages: dict[str, list[str]]) -> dict[str, int]:
    """Bytes each set of packages installs into an empty directory, dependencies included (pip)."""
    import tempfile

    sizes = {}
    for label, names in packages.items():
        with tempfile.TemporaryDirectory() as target:
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--target", target, *names],
                check=True,
                capture_output=True,
            )
            sizes[label] = sum(p.stat().st_size for p in Path(target).rglob("*") if p.is_file())
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--index-sizes", action="store_true", help="also pip-install each client into an empty directory and weigh it"
    )
    args = parser.parse_args()

    load_before = _load()
    server = S3Server()
    os.environ.update(DUMMY_ENV, AWS_ENDPOINT_URL=server.endpoint, AWS_ALLOW_HTTP="true")
    os.environ.pop("AWS_PROFILE", None)
    try:
        client = s3_client(server.endpoint)
        client.create_bucket(Bucket=BUCKET)
        t0 = time.perf_counter()
        objects = populate(client, args.runs)
        upload_s = time.perf_counter() - t0
        configs = [f"sweep/run-{n:04d}/config.json" for n in range(args.runs)]
        clients: list[Obstore | S3fs] = [Obstore(), S3fs()]
        for c in clients:  # connections open, credentials resolved: the steady state of a watcher
            c.head()
        rows: dict[str, dict[str, tuple[float, float]]] = {c.name: {} for c in clients}
        checks: dict[str, dict[str, int]] = {c.name: {} for c in clients}
        cases = [
            ("list the sweep prefix (one pass)", lambda c: c.list_prefix(), 1),
            (f"ranged GET of the last {TAIL_BYTES >> 10} KiB", lambda c: c.tail(), RANGED_GETS),
            (f"{args.runs} small GETs, one after another", lambda c: c.get_sequential(configs), 1),
            (f"{args.runs} small GETs, concurrently", lambda c: c.get_concurrent(configs), 1),
            ("HEAD one object", lambda c: c.head(), HEADS),
        ]
        for label, call, times in cases:
            for turn in range(args.repeat):
                for c in clients if turn % 2 == 0 else clients[::-1]:
                    w0, c0 = time.perf_counter(), time.process_time()
                    for _ in range(times):
                        checks[c.name][label] = call(c)
                    w, cpu = (time.perf_counter() - w0) / times, (time.process_time() - c0) / times
                    rows[c.name][label] = min(rows[c.name].get(label, (float("inf"),) * 2), (w, cpu))
        assert checks["obstore"] == checks["s3fs"], f"the clients disagree: {checks}"
        first = {label: fresh_process(code, args.repeat) for label, code in FIRST_REQUEST.items()}
        imports = {label: fresh_process(code, args.repeat) for label, code in IMPORTS.items()}
        mirrored = mirror_rows(args.runs)
    finally:
        server.stop()
    sizes = install_sizes()
    fresh_sizes = (
        index_sizes(
            {
                "s3fs": ["s3fs"],
                "gcsfs": ["gcsfs"],
                "obstore (s3:// and gs://)": ["obstore"],
                "obstore + botocore (the [s3] extra)": ["obstore", "botocore"],
            }
        )
        if args.index_sizes
        else {}
    )

    print(f"## Object-store clients: {args.runs} runs ({objects} objects) on moto's S3 server\n")
    print(f"- machine: {os.cpu_count()} CPUs, load average {load_before} before, {_load()} after")
    print(
        f"- python {platform.python_version()}, obstore {metadata.version('obstore')}, s3fs {metadata.version('s3fs')}"
        f" (aiobotocore {metadata.version('aiobotocore')}), moto {metadata.version('moto')}"
    )
    print(f"- upload of the sweep by boto3, 8 threads: {upload_s:.1f} s; both clients read the same answers: yes")
    print(f"- best of {args.repeat}; a row of n calls is per call; CPU is this process's (the server is a child)\n")
    print("| operation | obstore wall ms | s3fs wall ms | wall s3fs/obstore | obstore CPU ms | s3fs CPU ms |", end="")
    print(" CPU s3fs/obstore |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, _, _ in cases:
        (ow, oc), (sw, sc) = rows["obstore"][label], rows["s3fs"][label]
        wall = f"{ow * 1e3:.2f} | {sw * 1e3:.2f} | {sw / ow:.2f}x"
        print(f"| {label} | {wall} | {oc * 1e3:.2f} | {sc * 1e3:.2f} | {sc / max(oc, 1e-9):.2f}x |")
    print("\n| fresh process | seconds |\n|---|---:|")
    for label, secs in imports.items():
        print(f"| `{IMPORTS[label]}` | {secs:.3f} |")
    for label, secs in first.items():
        print(f"| import + first HEAD: {label} | {secs:.3f} |")
    print("\n| install (added to triage's own dependencies) | MB | distributions |\n|---|---:|---|")
    for label, (size, names) in sizes.items():
        print(f"| {label} | {size / 1e6:.1f} | {', '.join(names)} |")
    if fresh_sizes:
        print("\n| pip install into an empty directory, dependencies included | MB |\n|---|---:|")
        for label, size in fresh_sizes.items():
            print(f"| {label} | {size / 1e6:.1f} |")
    print(f"\n### The sweep mirrored through core/objstore ({args.runs} runs, each client under the same layer)\n")
    print("| pass | client | wall s | CPU s | requests | object-body bytes |\n|---|---|---:|---:|---:|---:|")
    for case in next(iter(mirrored.values())):
        for label, timings in mirrored.items():
            pass_wall, pass_cpu, requests, body_bytes = timings[case]
            print(f"| {case} | {label} | {pass_wall:.3f} | {pass_cpu:.3f} | {requests} | {body_bytes:,} |")


if __name__ == "__main__":
    main()
