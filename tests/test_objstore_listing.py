"""A checkpoint's keys are listed once: an idle poll lists the run's directory with a delimiter and
no shard key again, counted at the server (moto's S3 and fake-gcs-server behind the counting proxy,
builders/object_store.py)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from builders.object_store import upload_tree
from builders.tensorboard import write_scalars
from triage_tui.core.objstore import tuning
from triage_tui.core.read.runs.remote import Mirrors

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
