"""The object-store layer against a real S3 server: moto's server in a child process on 127.0.0.1,
reached through a real HTTP proxy that counts what went over the wire and injects 503s and stalls.

Nothing of the clients is replaced: obstore (and, for the fsspec path, s3fs) talk HTTP to the
proxy exactly as to a bucket, with the standard AWS variables (AWS_ENDPOINT_URL, dummy keys).
Bytes fetched are asserted from the proxy's side, the server's view of what a poll cost.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from builders.object_store import s3_client, upload_tree
from builders.samples import copy_samples
from builders.waiting import load_factor
from triage_tui.core.errors import BadInput
from triage_tui.core.objstore import tuning
from triage_tui.core.objstore.cache import ObjectCache
from triage_tui.core.objstore.follow import ObjectFollower
from triage_tui.core.objstore.mirror import PrefixMirror, local_relative
from triage_tui.core.objstore.store import ObjectMissing, Store, store_for
from triage_tui.core.objstore.url import is_object_url, parse_url
from triage_tui.core.read.runs.remote import fetch_policy, mirror_runs

# obstore ships wheels for Python 3.11 and later only (the objstore extra); moto and s3fs come with the
# test extra on every Python and are imported hard through the fixtures.
pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="obstore needs Python 3.11")


@pytest.fixture(autouse=True)
def _local_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(tuning, "BACKOFF_FIRST_SECS", 0.01)
    monkeypatch.setattr(tuning, "BACKOFF_MAX_SECS", 0.02)


@pytest.fixture(params=["obstore", "fsspec"])
def backend(request, monkeypatch):
    """Both ways in: obstore for s3://, and fsspec's s3fs as any other fsspec URL is read."""
    if request.param == "fsspec":
        monkeypatch.setattr(tuning, "NATIVE_SCHEMES", ())
    return request.param


def _native_only_off_s3(any_bucket, backend: str) -> None:
    """The fsspec way in is tested through s3fs; gcsfs is not in the test extra."""
    if any_bucket.scheme != "s3" and backend == "fsspec":
        pytest.skip("fsspec's gs:// package (gcsfs) is not in the test extra")


def test_urls_are_told_from_paths():
    assert is_object_url("s3://b/k") and is_object_url("gs://b") and is_object_url("memory://x/y")
    assert not is_object_url("/tmp/s3://x") and not is_object_url("runs/a") and not is_object_url("file:///tmp/x")
    url = parse_url("gcs://bkt/a/b/")
    assert (url.scheme, url.bucket, url.key, url.prefix()) == ("gs", "bkt", "a/b/", "a/b/")
    assert url.child("c.json").text == "gs://bkt/a/b/c.json"
    assert parse_url("s3://bkt").prefix() == ""
    with pytest.raises(ValueError, match="no bucket"):
        parse_url("s3:///key")


def test_without_the_extra_one_line_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "obstore", None)  # import obstore raises ImportError
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(BadInput) as caught:
        Store(parse_url("s3://bkt/runs"))
    assert caught.value.line() == "s3://bkt/runs: reading s3:// needs an optional extra: pip install 'triage-tui[s3]'"
    with pytest.raises(BadInput, match=r"pip install 'triage-tui\[gcs\]'"):
        Store(parse_url("gs://bkt/runs"))


@pytest.fixture(scope="module")
def sweep(server):
    """A bucket holding a 1 000-run sweep (one event file a run, one config beside the sweep): the
    writer is boto3 talking to the server itself, so none of it is counted by the proxy."""
    running, _ = server
    name = f"sweep-{os.getpid()}"
    client = s3_client(running.endpoint)
    client.create_bucket(Bucket=name)
    keys = [f"sweep/run-{n:04d}/runs/events.out.tfevents.{n}" for n in range(1000)] + ["sweep/config.json"]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=name, Key=k, Body=k.encode()), keys))
    client.put_object(Bucket=name, Key="sweepstakes/other", Body=b"x")  # shares the text, not the prefix
    return name, keys


def test_a_sweep_is_listed_in_one_pass(server, sweep, backend):
    _, proxy = server
    name, keys = sweep
    proxy.reset_counts()
    listed = store_for(f"s3://{name}/sweep").listing("sweep/").objects
    counts = proxy.reset_counts()
    assert sorted(m.key for m in listed) == sorted(keys)
    assert all(m.size == len(m.key) and m.etag and m.mtime > 0 for m in listed)
    # 1 001 keys: two pages of one ListObjectsV2 pass; no request per run, no object body
    assert counts.total_requests() == 2 and counts.get_body_bytes() == 0, counts.paths


def test_a_growing_object_costs_its_appended_bytes(any_bucket, backend):
    _native_only_off_s3(any_bucket, backend)
    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    store = store_for(any_bucket.base)
    first = os.urandom(100_000)
    client.put_object(Bucket=name, Key="run/events", Body=first)
    follower = ObjectFollower(store, "run/events")
    step = follower.poll(store.listing("run/").objects[0])
    assert (step.data, step.restarted, step.size) == (first, False, len(first))

    proxy.reset_counts()
    idle = follower.poll(store.listing("run/").objects[0])
    counts = proxy.reset_counts()
    assert (idle.data, idle.restarted) == (b"", False)
    assert counts.total_requests() == 1 and counts.get_body_bytes() == 0  # the listing, nothing else

    appended = os.urandom(5_000)
    client.put_object(Bucket=name, Key="run/events", Body=first + appended)  # S3 rewrites it whole
    meta = store.listing("run/").objects[0]
    proxy.reset_counts()
    grown = follower.poll(meta)
    counts = proxy.reset_counts()
    assert (grown.data, grown.restarted, grown.size) == (appended, False, len(first) + len(appended))
    # one ranged GET: the appended bytes and the old end re-read to prove the prefix unchanged
    assert counts.total_requests() == 1
    assert counts.get_body_bytes() == len(appended) + tuning.TAIL_CHECK_BYTES


def test_a_large_object_is_read_in_bounded_polls(any_bucket, tmp_path, monkeypatch):
    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    monkeypatch.setattr(tuning, "MAX_POLL_BYTES", 10_000)
    body = os.urandom(35_000)
    client.put_object(Bucket=name, Key="run/runs/events.out.tfevents.1", Body=body)
    follower = ObjectFollower(store_for(any_bucket.base), "run/runs/events.out.tfevents.1")
    meta = follower.store.listing("run/").objects[0]
    proxy.reset_counts()
    steps = [follower.poll(meta)]
    while steps[-1].remaining:
        steps.append(follower.poll(meta))
    counts = proxy.reset_counts()
    assert [(s.size, s.remaining) for s in steps] == [(10_000, 25_000), (20_000, 15_000), (30_000, 5_000), (35_000, 0)]
    assert b"".join(s.data for s in steps) == body
    assert max(n for _, _, n in counts.paths) <= 10_000 + tuning.TAIL_CHECK_BYTES
    mirror = mirror_runs(any_bucket.base, tmp_path / "mirror")
    assert mirror.sync().written == ("run/runs/events.out.tfevents.1",)
    assert (mirror.root / "run/runs/events.out.tfevents.1").read_bytes() == body


def test_a_replaced_object_is_read_again(any_bucket, backend):
    _native_only_off_s3(any_bucket, backend)
    name, client, _ = any_bucket.name, any_bucket.writer, any_bucket.proxy
    store = store_for(any_bucket.base)
    old = os.urandom(50_000)
    client.put_object(Bucket=name, Key="run/log", Body=old)
    follower = ObjectFollower(store, "run/log")
    follower.poll()
    longer = os.urandom(60_000)  # longer than before, other bytes where the old end was
    client.put_object(Bucket=name, Key="run/log", Body=longer)
    step = follower.poll()
    assert (step.data, step.restarted, step.size) == (longer, True, len(longer))
    shorter = os.urandom(10)
    client.put_object(Bucket=name, Key="run/log", Body=shorter)
    step = follower.poll()
    assert (step.data, step.restarted, step.size) == (shorter, True, 10)
    client.delete_object(Bucket=name, Key="run/log")
    with pytest.raises(ObjectMissing) as caught:
        follower.poll()
    assert caught.value.path == f"{any_bucket.base}/run/log"


def test_503s_are_retried_within_bounds(any_bucket, monkeypatch):
    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    client.put_object(Bucket=name, Key="k", Body=b"payload")
    store = store_for(any_bucket.base)
    before = store.stats.requests
    proxy.fail_next(2)
    assert store.read("k")[0] == b"payload"
    assert store.stats.requests - before == 3

    monkeypatch.setattr(tuning, "MAX_RETRIES", 2)
    proxy.fail_next(100)
    try:
        with pytest.raises(BadInput) as caught:
            store.read("k")
    finally:
        proxy.fail_next(0)
    assert caught.value.path == f"{any_bucket.base}/k"
    assert caught.value.what.startswith("server answered 503 SlowDown after 3 tries in ")
    assert "\n" not in caught.value.line()


def test_a_server_that_does_not_answer_is_given_up_on(bucket, monkeypatch):
    """A request held unanswered times out and is tried again; held every time, the deadline ends it."""
    name, client, proxy = bucket
    client.put_object(Bucket=name, Key="k", Body=b"payload")
    # The timeout must outlast a real answer on a busy machine (it scales with the load), and the
    # stalled request never answers at all: no test outcome depends on the machine's speed.
    patience = 1.0 * load_factor()
    monkeypatch.setattr(tuning, "REQUEST_TIMEOUT_SECS", patience)
    monkeypatch.setattr(tuning, "DEADLINE_SECS", patience * 4)
    store = Store(parse_url(f"s3://{name}"))  # a store of its own, opened with this timeout
    proxy.stall_next(1)
    assert store.read("k")[0] == b"payload"

    monkeypatch.setattr(tuning, "DEADLINE_SECS", patience * 1.5)
    proxy.stall_next(100)
    started = time.monotonic()
    with pytest.raises(BadInput) as caught:
        store.read("k")
    took = time.monotonic() - started
    proxy.stall_next(0)
    assert caught.value.path == f"s3://{name}/k"
    # the second try is abandoned at the deadline, not waited for until its own timeout
    assert caught.value.what == f"no answer within {patience * 1.5:.1f} s (2 tries)"
    assert took < patience * 1.5 + 0.5


def test_an_object_that_keeps_failing_fails_alone_and_is_fetched_once_it_answers(any_bucket, tmp_path, monkeypatch):
    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    for run in ("a", "b"):
        client.put_object(Bucket=name, Key=f"{run}/config.json", Body=b"{}")
        client.put_object(Bucket=name, Key=f"{run}/runs/events.out.tfevents.1", Body=run.encode() * 100)
    monkeypatch.setattr(tuning, "MAX_RETRIES", 1)
    mirror = mirror_runs(any_bucket.base, tmp_path / "mirror")
    proxy.fail_paths(f"/{name}/b/runs/")
    try:
        first = mirror.sync()
    finally:
        proxy.fail_paths()
    (error,) = first.errors
    assert error.path == f"{any_bucket.base}/b/runs/events.out.tfevents.1"
    assert error.message.startswith("server answered 503 SlowDown after 2 tries in ")
    assert sorted(first.written) == ["a/config.json", "a/runs/events.out.tfevents.1", "b/config.json"]
    second = mirror.sync()
    assert second.errors == () and second.written == ("b/runs/events.out.tfevents.1",)
    assert (mirror.root / "b/runs/events.out.tfevents.1").read_bytes() == b"b" * 100


def test_credentials_come_from_an_aws_profile(bucket, tmp_path, monkeypatch):
    """No keys in the environment: botocore's chain reads the named profile, and the requests are
    signed with its key (seen by the proxy in each request's SigV4 Authorization header)."""
    name, client, proxy = bucket
    client.put_object(Bucket=name, Key="k", Body=b"payload")
    (tmp_path / "credentials").write_text("[research]\naws_access_key_id = AKIAPROFILEKEY\naws_secret_access_key = s\n")
    (tmp_path / "config").write_text("[profile research]\nregion = us-east-1\n")
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_PROFILE", "research")
    proxy.reset_counts()
    assert Store(parse_url(f"s3://{name}")).read("k")[0] == b"payload"
    assert proxy.reset_counts().access_keys == {"AKIAPROFILEKEY"}


def _scan(triage, root: Path) -> dict:
    out = triage("scan", "--json", root)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout.replace(str(root), "<root>"))


def test_a_mirrored_bucket_scans_as_the_local_tree(any_bucket, tmp_path, triage):
    """``scan --json`` of the sample runs uploaded to a bucket and mirrored equals the local
    tree's but for the paths; an idle pass fetches only the listing; a growing run its new bytes."""
    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    local = copy_samples(tmp_path / "local")
    event = next((local / "healthy").rglob("*tfevents*"))
    full = event.read_bytes()
    event.write_bytes(full[: len(full) // 2])  # the run is half written when first listed
    upload_tree(client, name, "team/sweep", local)
    mirror = mirror_runs(f"{any_bucket.base}/team/sweep", tmp_path / "mirror")

    first = mirror.sync()
    assert first.errors == ()
    weights = list(local.rglob("*.safetensors"))
    assert weights, "the samples hold a drafter checkpoint"
    for path in weights:  # placeholders: the size, no byte fetched
        copy = mirror.root / path.relative_to(local)
        assert copy.stat().st_size == path.stat().st_size and copy.stat().st_blocks == 0
    # every file but the weights (placeholders) and a checkpoint directory's JSON (fetched when read)
    checkpoint_dir = re.compile(r"^(epoch_\d+_step_\d+|.+-step\d+|checkpoint-\d+)$")

    def fetched_first(p: Path) -> bool:
        in_checkpoint = p.suffix == ".json" and checkpoint_dir.match(p.parent.name) is not None
        return p.is_file() and fetch_policy(p.name) != "placeholder" and not in_checkpoint

    assert first.body_bytes == sum(p.stat().st_size for p in local.rglob("*") if fetched_first(p))

    proxy.reset_counts()
    idle = mirror.sync()
    counts = proxy.reset_counts()
    assert (idle.body_bytes, idle.written, counts.get_body_bytes()) == (0, (), 0)
    assert counts.total_requests() == idle.requests == 1  # one listing page

    event.write_bytes(full)
    client.put_object(Bucket=name, Key=f"team/sweep/{event.relative_to(local).as_posix()}", Body=full)
    proxy.reset_counts()
    grown = mirror.sync()
    counts = proxy.reset_counts()
    assert grown.written == (event.relative_to(local).as_posix(),)
    appended = len(full) - len(full) // 2
    assert counts.get_body_bytes() == grown.body_bytes == appended + tuning.TAIL_CHECK_BYTES
    assert counts.total_requests() == 2  # the listing and one ranged GET

    assert _scan(triage, mirror.root) == _scan(triage, local)


def test_a_deleted_prefix_leaves_the_mirror(bucket, tmp_path):
    name, client, _ = bucket
    local = copy_samples(tmp_path / "local", runs=("healthy", "diverged"))
    upload_tree(client, name, "", local)
    mirror = mirror_runs(f"s3://{name}", tmp_path / "mirror")
    mirror.sync()
    assert (mirror.root / "diverged").is_dir() and (mirror.root / "healthy").is_dir()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=name, Prefix="diverged/"):
        for item in page.get("Contents", []):
            client.delete_object(Bucket=name, Key=item["Key"])
    gone = mirror.sync()
    assert gone.removed and all(rel.startswith("diverged/") for rel in gone.removed)
    assert not (mirror.root / "diverged").exists()
    kept = sorted(p.relative_to(mirror.root).as_posix() for p in mirror.root.rglob("*") if p.is_file())
    assert kept == sorted(
        p.relative_to(local).as_posix()
        for p in local.rglob("*")
        if p.is_file() and not p.relative_to(local).as_posix().startswith("diverged/")
    )


def test_hostile_keys_fail_only_their_own_run(bucket, tmp_path, backend):
    """Keys that are not plain relative paths never write outside the mirror and fail only the
    run holding them: obstore cannot even parse them, so the listing is asked again through botocore,
    which lists them as fsspec does (each such key is reported); the other run is mirrored either way."""
    name, client, _ = bucket
    good = ["good/config.json", "good/runs/events.out.tfevents.1"]
    hostile = ["bad/../../escape.json", "bad/./x.json", "bad//double"]
    for key in [*good, *hostile, "bad/fine.json", "good/runs/"]:  # "good/runs/": a console's folder marker
        client.put_object(Bucket=name, Key=key, Body=b"" if key.endswith("/") else b"{}")
    mirror = PrefixMirror(parse_url(f"s3://{name}"), tmp_path / "mirror", fetch_policy)
    result = mirror.sync()
    assert not (tmp_path / "escape.json").exists() and not (mirror.root / "escape.json").exists()
    files = sorted(p.relative_to(mirror.root).as_posix() for p in mirror.root.rglob("*") if p.is_file())
    assert result.errors and all(e.path.startswith(f"s3://{name}/bad/") for e in result.errors), result.errors
    assert files == ["bad/fine.json", *good] and len(result.errors) == len(hostile)
    assert local_relative("a/b") == "a/b" and local_relative("a/../b") is None and local_relative("/a") is None


def test_whole_objects_come_from_the_cache_while_their_etag_holds(any_bucket, tmp_path):
    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    client.put_object(Bucket=name, Key="run/config.json", Body=b'{"draft_vocab_size": 32000}')
    PrefixMirror(parse_url(f"{any_bucket.base}/run"), tmp_path / "a", fetch_policy).sync()
    proxy.reset_counts()
    again = PrefixMirror(parse_url(f"{any_bucket.base}/run"), tmp_path / "b", fetch_policy).sync()  # a new process
    assert proxy.reset_counts().get_body_bytes() == 0 and again.written == ("config.json",)
    assert (tmp_path / "b" / "config.json").read_bytes() == b'{"draft_vocab_size": 32000}'
    client.put_object(Bucket=name, Key="run/config.json", Body=b'{"draft_vocab_size": 151936}')
    changed = PrefixMirror(parse_url(f"{any_bucket.base}/run"), tmp_path / "c", fetch_policy).sync()
    assert changed.body_bytes == len(b'{"draft_vocab_size": 151936}')


def test_the_cache_is_bounded(tmp_path):
    cache = ObjectCache(tmp_path / "c", max_bytes=3 * 4096)
    for n in range(6):
        cache.put(f"s3://b/{n}", "etag", bytes(4096))
    present = [n for n in range(6) if cache.get(f"s3://b/{n}", "etag") is not None]
    assert present == [3, 4, 5]  # the least recently used went first
    assert cache.get("s3://b/5", "other etag") is None


def _disk_usage(root) -> int:
    """Bytes the cache's entries hold on disk, as du counts them."""
    return sum(entry.stat().st_blocks * 512 for entry in root.iterdir() if entry.name.endswith(".data"))


def test_a_cache_full_of_entries_is_listed_once_a_sixteenth_of_its_bound_not_once_a_put(tmp_path):
    """A first scan puts thousands of small objects into a cache that may hold tens of thousands:
    listing the whole cache after each put made that scan quadratic. The bound still holds, passed
    by at most a sixteenth between trims."""
    listed = []

    class Counted(ObjectCache):
        def trim(self) -> None:
            listed.append(len(list(self.root.iterdir())))
            super().trim()

    bound = 64 * 4096
    cache = Counted(tmp_path / "c", max_bytes=bound)
    for n in range(2000):
        cache.put(f"s3://b/{n}", "etag", bytes(range(256)) * 16)  # 4 KiB, one filesystem block each
        assert _disk_usage(tmp_path / "c") <= bound + bound // 16 + 4096, n
    # 2 000 puts of 4 KiB: the first put trims, then one put in four (a sixteenth of 256 KiB).
    assert len(listed) <= 2000 // 4 + 1
    assert _disk_usage(tmp_path / "c") <= bound + bound // 16
    newest = [n for n in range(1990, 2000) if cache.get(f"s3://b/{n}", "etag") is not None]
    assert newest == list(range(1990, 2000))  # the newest kept, the oldest went
    assert cache.get("s3://b/0", "etag") is None


def _union_bytes(ranges: list[tuple[int, int]]) -> int:
    covered: set[int] = set()
    for a, b in ranges:
        covered.update(range(a, b))
    return len(covered)


def test_a_checkpoint_is_read_by_ranges(any_bucket, tmp_path):
    """The header by one ranged read, then only the tensors asked for; safetensors reads them
    from the sparse file exactly as from the whole checkpoint."""
    import torch
    from safetensors.torch import save_file

    from triage_tui.core.formats.remote_safetensors import RemoteSafetensors
    from triage_tui.core.formats.safe_torch import load_safetensors_tensor

    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    generator = torch.Generator().manual_seed(0)
    draft, target, hidden = 32_000, 163_840, 64
    d2t = torch.randint(0, 100, (draft,), generator=generator, dtype=torch.int64)
    t2d = torch.zeros(target, dtype=torch.bool)
    t2d[torch.arange(draft) * 5] = True
    head = torch.randn(draft, hidden, generator=generator, dtype=torch.float32)
    path = tmp_path / "model.safetensors"
    save_file({"d2t": d2t, "t2d": t2d, "lm_head.weight": head, "midlayer.norm.weight": torch.ones(hidden)}, path)
    client.put_object(Bucket=name, Key="ckpt/model.safetensors", Body=path.read_bytes())

    listed = store_for(any_bucket.base).listing("ckpt/").objects[0]  # as the rescan's listing gives it
    proxy.reset_counts()
    remote = RemoteSafetensors(f"{any_bucket.base}/ckpt/model.safetensors", meta=listed)
    try:
        header = proxy.reset_counts()
        assert header.total_requests() == 1 and header.get_body_bytes() == tuning.HEADER_PROBE_BYTES
        assert set(remote.tensors) == {"d2t", "t2d", "lm_head.weight", "midlayer.norm.weight"}

        assert torch.equal(remote.tensor("d2t"), d2t) and torch.equal(remote.tensor("t2d"), t2d)
        # exactly the two tensors' bytes, less what the header's read already brought
        (d_begin, d_end), (t_begin, t_end) = remote.tensors["d2t"].data, remote.tensors["t2d"].data
        assert (d_end - d_begin, t_end - t_begin) == (d2t.numel() * 8, t2d.numel())
        probe = (0, tuning.HEADER_PROBE_BYTES)
        wanted = _union_bytes([probe, (d_begin, d_end), (t_begin, t_end)]) - tuning.HEADER_PROBE_BYTES
        assert proxy.reset_counts().get_body_bytes() == wanted
        rows = remote.rows("lm_head.weight", [(0, 4), (31_990, 32_000)])
        assert torch.equal(rows[0], head[:4]) and torch.equal(rows[1], head[31_990:])
        assert proxy.reset_counts().get_body_bytes() == 14 * hidden * 4
        assert torch.equal(remote.tensor("d2t"), d2t)  # already there: nothing fetched again
        assert proxy.reset_counts().total_requests() == 0

        # the local readers work on the sparse file unchanged; it holds only what was fetched
        assert np.array_equal(load_safetensors_tensor(remote.path, "t2d").numpy(), t2d.numpy())
        assert remote.path.stat().st_size == path.stat().st_size
        assert remote.path.stat().st_blocks * 512 < path.stat().st_size // 4
    finally:
        remote.close()
    assert not remote.path.exists()


def test_a_truncated_checkpoint_is_one_line_on_its_url(any_bucket):
    from triage_tui.core.formats.remote_safetensors import RemoteSafetensors

    name, client, _ = any_bucket.name, any_bucket.writer, any_bucket.proxy
    client.put_object(Bucket=name, Key="bad.safetensors", Body=(10_000).to_bytes(8, "little") + b"{}")
    with pytest.raises(BadInput) as caught:
        RemoteSafetensors(f"{any_bucket.base}/bad.safetensors")
    assert caught.value.path == f"{any_bucket.base}/bad.safetensors" and "truncated" in caught.value.what


def test_checkpoint_ranges_are_cached_only_when_asked(any_bucket, tmp_path, monkeypatch):
    from triage_tui.core.formats.remote_safetensors import RemoteSafetensors

    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    blob = tmp_path / "w.safetensors"
    import torch
    from safetensors.torch import save_file

    save_file({"d2t": torch.arange(32_000, dtype=torch.int64), "w": torch.zeros(1000, 64)}, blob)
    client.put_object(Bucket=name, Key="w.safetensors", Body=blob.read_bytes())
    url = f"{any_bucket.base}/w.safetensors"

    first = RemoteSafetensors(url)  # off by default: a temporary file, gone on close
    first.ensure(["d2t"])
    first.close()
    assert not first.path.exists() and not (tmp_path / "cache").exists()

    monkeypatch.setattr(tuning, "CACHE_CHECKPOINTS", True)
    cached = RemoteSafetensors(url)
    cached.ensure(["d2t"])
    cached.close()
    assert cached.path.is_file() and cached.path.is_relative_to(tmp_path / "cache")
    proxy.reset_counts()
    again = RemoteSafetensors(url)  # another process, the same ETag: the ranges are on disk
    assert torch.equal(again.tensor("d2t"), torch.arange(32_000, dtype=torch.int64))
    counts = proxy.reset_counts()
    assert counts.get_body_bytes() == 0 and counts.requests == {"HEAD": 1}
