"""A checkpoint's keys are listed once: an idle poll lists the run's directory with a delimiter and
no shard key again, counted at the server (moto's S3 and fake-gcs-server behind the counting proxy,
builders/object_store.py)."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

from builders.object_store import MovedClock, upload_tree
from builders.tensorboard import write_scalars
from triage_tui.core.objstore import tuning
from triage_tui.core.read.runs.remote import Mirrors
from triage_tui.core.watch.watcher import Watcher

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="obstore needs Python 3.11")

SHARDS = 2001  # three listing pages listed whole: a delimited walk of the run is two requests


@pytest.fixture(autouse=True)
def _settled(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(tuning, "SETTLED_SECS", 0.0)  # the checkpoint was uploaded just now
    monkeypatch.setattr(tuning, "IDLE_LISTING_TIERS", ((1e9, 3600.0),))  # listed at every rescan


@pytest.fixture
def sharded_run(any_bucket, tmp_path):
    from safetensors.numpy import save

    run = tmp_path / "run"
    write_scalars(run, {"train/loss": [(1, 10.4), (2, 10.3)]})
    checkpoint = run / "checkpoint-100"
    checkpoint.mkdir()
    shard = save({"w": np.zeros((4, 4), dtype=np.float32)})
    for k in range(1, SHARDS + 1):
        (checkpoint / f"model-{k:05d}-of-{SHARDS:05d}.safetensors").write_bytes(shard)
    (checkpoint / "config.json").write_text('{"draft_vocab_size": 32000, "vocab_size": 163840}')
    upload_tree(any_bucket.writer, any_bucket.name, "team/run", run)
    return f"{any_bucket.base}/team"


def _listing_bytes(counts) -> int:
    """Bytes of the listings' answers."""
    return sum(counts.body_bytes.values()) - counts.get_body_bytes()


def test_an_idle_poll_lists_no_shard_key_and_sends_requests_independent_of_the_shards(any_bucket, sharded_run):
    mirrors = Mirrors()
    mirrors.polls.rescan_secs = 0.0  # each sync lists, as a rescan every few seconds does
    root = mirrors.local(sharded_run)
    any_bucket.proxy.reset_counts()
    assert mirrors.sync() == []  # a one-shot command's pass: it waits for every fetch
    first = any_bucket.proxy.reset_counts()
    assert _listing_bytes(first) > 100 * 1024  # the checkpoint listed once, whole, with the rest
    assert len(list((root / "run" / "checkpoint-100").glob("*.safetensors"))) == SHARDS
    for _ in range(2):
        assert mirrors.sync() == []
        idle = any_bucket.proxy.reset_counts()
        # no page names a shard (one that does is ~300 KB): "team/" and "team/run/" listed with a
        # delimiter name the checkpoint, none of its 2 001 keys
        assert _listing_bytes(idle) < 8 * 1024, _listing_bytes(idle)
        assert idle.total_requests() == 2, idle.paths
        assert idle.get_body_bytes() == 0
    assert len(list((root / "run" / "checkpoint-100").glob("*.safetensors"))) == SHARDS


def test_what_arrives_beside_a_kept_checkpoint_is_found_by_the_next_poll(any_bucket, sharded_run, tmp_path):
    mirrors = Mirrors()
    mirrors.polls.rescan_secs = 0.0  # each sync lists, as a rescan every few seconds does
    root = mirrors.local(sharded_run)
    mirrors.sync()
    mirrors.sync()  # walking now
    later = tmp_path / "later"
    (later / "checkpoint-200").mkdir(parents=True)
    (later / "checkpoint-200" / "trainer_state.json").write_text('{"global_step": 200, "log_history": []}')
    write_scalars(later / "other", {"train/loss": [(1, 10.4)]})
    upload_tree(any_bucket.writer, any_bucket.name, "team/run", later)
    assert mirrors.sync() == []
    assert (root / "run" / "checkpoint-200" / "trainer_state.json").is_file()
    assert any((root / "run" / "other").glob("events.out.tfevents.*"))
    assert len(list((root / "run" / "checkpoint-100").glob("*.safetensors"))) == SHARDS


def test_the_first_rows_come_while_the_listing_goes_on(bucket, tmp_path, monkeypatch):
    """A listing of many pages (here of two keys each, as a bucket of thousands of runs is of
    1 000), its second page held unanswered: a watcher as the TUI runs one shows the run of the
    first page with its points while the rest is listed, and the other runs once it answers."""
    name, client, proxy = bucket
    for run in ("a", "b", "c"):
        write_scalars(tmp_path / "sweep" / run, {"train/loss": [(1, 10.4), (2, 5.0)]})
    upload_tree(client, name, "sweep", tmp_path / "sweep")
    monkeypatch.setattr(tuning, "REQUEST_TIMEOUT_SECS", 60.0)  # the held page is not given up on
    mirrors = Mirrors()
    watcher = Watcher([mirrors.local(f"s3://{name}/sweep")], use_watchdog=False, poll_interval=0.1, mirrors=mirrors)
    stop = threading.Event()
    updates: list[dict[str, int | None]] = []
    thread = threading.Thread(
        target=watcher.run,
        args=(lambda statuses: updates.append({s.to_json()["path"]: s.last_step for s in statuses}), stop),
        daemon=True,
    )
    proxy.page_keys(2)
    monkeypatch.setattr(tuning, "LIST_CHUNK_KEYS", 2)  # and the client hands them over a page at a time
    proxy.stall_paths("continuation-token")  # every page after the first
    started = time.monotonic()
    try:
        thread.start()
        _wait_for(lambda: any(update.get(f"s3://{name}/sweep/a") == 2 for update in updates), started)
        # run b's directory may hold keys still to come (the last listed is its): not shown yet
        assert all(set(update) <= {f"s3://{name}/sweep/a"} for update in updates), updates
        assert proxy.held == 1  # the second page is still unanswered
        proxy.stall_paths()
        proxy.release()
        _wait_for(lambda: updates[-1] == {f"s3://{name}/sweep/{run}": 2 for run in "abc"}, time.monotonic())
    finally:
        stop.set()
        proxy.page_keys(None)
        proxy.stall_paths()
        proxy.release()
        thread.join(timeout=10)


def _wait_for(condition, started: float, seconds: float = 15.0) -> None:
    while not condition():
        assert time.monotonic() - started < seconds, "timed out"
        time.sleep(0.05)


def test_a_run_idle_for_long_is_not_listed_again_before_its_tier(any_bucket, sharded_run, tmp_path, monkeypatch):
    """Idle for an hour or more (to levels' clock), the run's directory is kept whole: an idle pass is the
    prefix's own level alone, and what is uploaded into the run meanwhile is fetched once its tier has passed."""
    from triage_tui.core.objstore import levels

    monkeypatch.setattr(tuning, "IDLE_LISTING_TIERS", ((3600.0, 3600.0),))
    monkeypatch.setattr(levels, "time", MovedClock)
    monkeypatch.setattr(MovedClock, "ahead", 2 * 3600.0)
    mirrors = Mirrors()
    root = mirrors.local(sharded_run)
    (mirror,) = mirrors.mirrors
    mirror.sync()  # whole: learns the run is idle
    any_bucket.proxy.reset_counts()
    mirror.sync()
    idle = any_bucket.proxy.reset_counts()
    assert idle.total_requests() == 1, idle.paths  # "team/" with a delimiter; "team/run/" not listed
    assert len(list((root / "run" / "checkpoint-100").glob("*.safetensors"))) == SHARDS  # nothing removed
    later = tmp_path / "later"
    write_scalars(later / "other", {"train/loss": [(1, 10.4)]})
    upload_tree(any_bucket.writer, any_bucket.name, "team/run", later)
    mirror.sync()
    assert not (root / "run" / "other").exists()  # within its tier: not listed, not fetched
    monkeypatch.setattr(MovedClock, "ahead", 2 * 3600.0 + 3601.0)  # the tier has passed
    mirror.sync()
    assert any((root / "run" / "other").glob("events.out.tfevents.*"))
    assert len(list((root / "run" / "checkpoint-100").glob("*.safetensors"))) == SHARDS


def test_runs_gone_idle_together_cost_no_more_than_a_whole_listing_when_their_tier_comes(
    any_bucket, tmp_path, monkeypatch
):
    """Forty runs idle for two hours come due at once: the pass lists the prefix whole (one page)
    instead of each run's directory (forty requests), and then passes them by until their next tier."""
    from triage_tui.core.objstore import levels

    monkeypatch.setattr(tuning, "IDLE_LISTING_TIERS", ((1800.0, 60.0),))
    monkeypatch.setattr(levels, "time", MovedClock)
    monkeypatch.setattr(MovedClock, "ahead", 0.0)
    written = write_scalars(tmp_path / "src" / "runs", {"train/loss": [(1, 10.4)]})
    for i in range(40):
        (tmp_path / "tree" / f"run_{i:02d}" / "runs").mkdir(parents=True)
        (tmp_path / "tree" / f"run_{i:02d}" / "runs" / written.name).write_bytes(written.read_bytes())
    upload_tree(any_bucket.writer, any_bucket.name, "team", tmp_path / "tree")
    mirrors = Mirrors()
    root = mirrors.local(f"{any_bucket.base}/team")
    (mirror,) = mirrors.mirrors
    mirror.sync()
    monkeypatch.setattr(MovedClock, "ahead", 2 * 3600.0)
    mirror.sync()  # learns that every run is idle: each is listed again a minute later
    any_bucket.proxy.reset_counts()
    mirror.sync()  # within the minute: the prefix's level alone
    assert any_bucket.proxy.reset_counts().total_requests() == 1
    monkeypatch.setattr(MovedClock, "ahead", 2 * 3600.0 + 61.0)
    mirror.sync()  # every run's minute has come
    due = any_bucket.proxy.reset_counts()
    assert due.total_requests() == 1, due.paths
    assert len(list(root.glob("run_*/runs/events.out.tfevents.*"))) == 40
