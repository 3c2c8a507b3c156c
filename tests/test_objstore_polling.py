"""What watching a bucket costs and how often it is listed, counted at the server: moto's S3 server
and fake-gcs-server behind the counting proxy (builders/object_store.py, builders/gcs_store.py).

The day's estimate is checked against the providers' published list prices worked by hand: one
listing page every 5 s is 17 280 LIST (S3) or Class A (GCS) requests a day, at $0.005 per 1 000.
"""

from __future__ import annotations

import json
import sys
import time

import pytest

from builders.object_store import upload_tree
from builders.tensorboard import write_scalars
from triage_tui.core.objstore import tuning
from triage_tui.core.read.runs.remote import Mirrors
from triage_tui.core.watch.watcher import Watcher

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="obstore needs Python 3.11")


@pytest.fixture(autouse=True)
def _local_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "CACHE_DIR", tmp_path / "cache")


@pytest.fixture
def one_run(any_bucket, tmp_path):
    run = tmp_path / "run"
    write_scalars(run / "runs", {"train/loss": [(1, 10.4), (2, 10.3)]})
    upload_tree(any_bucket.writer, any_bucket.name, "team/run", run)
    return f"{any_bucket.base}/team"


def test_scan_prices_a_day_of_watching_only_when_asked_on_a_custom_endpoint(any_bucket, one_run, triage):
    plain = triage("scan", "--json", one_run)
    (bucket,) = json.loads(plain.stdout)["buckets"]
    assert bucket["usd_per_day"] is None and bucket["lists"] == 1 and bucket["requests"] >= 2
    asked = triage("scan", "--json", "--bucket-cost", one_run)
    (bucket,) = json.loads(asked.stdout)["buckets"]
    # one listing page a rescan (5 s): 86 400 / 5 x $0.005 / 1 000 = $0.0864 a day
    assert (bucket["lists"], bucket["listed_every_s"]) == (1, 5.0)
    assert bucket["usd_per_day"] == pytest.approx(0.0864)


def _polls(mirrors: Mirrors, root, proxy, n: int) -> list:
    """``n`` polls of a watcher rescanning at each (as the TUI's, every rescan interval): the
    requests each sent, counted at the proxy."""
    watcher = Watcher([root], use_watchdog=False, rescan_interval=0.0, mirrors=mirrors)
    seen = []
    for _ in range(n):
        proxy.reset_counts()
        assert watcher.poll_once()
        seen.append(proxy.reset_counts())
    return seen


def test_a_prefix_idle_for_long_is_listed_less_often_and_says_so(any_bucket, one_run, monkeypatch):
    """Idle past the first tier (here: at once), the prefix is listed once an hour: the rescans
    between send no request at all, and its line says how often it is listed."""
    monkeypatch.setattr(tuning, "IDLE_LISTING_TIERS", ((0.0, 3600.0),))
    mirrors = Mirrors()
    first, *rest = _polls(mirrors, mirrors.local(one_run), any_bucket.proxy, 4)
    assert first.total_requests() >= 2  # the listing and the event file
    assert [counts.total_requests() for counts in rest] == [0, 0, 0]
    (cost,) = mirrors.costs()
    assert cost.listed_every_secs == 3600.0 and "listed every 1 h" in cost.line(), cost.line()


def test_an_active_prefix_is_listed_at_every_rescan(any_bucket, one_run, monkeypatch):
    monkeypatch.setattr(tuning, "IDLE_LISTING_TIERS", ((1e9, 3600.0),))  # nothing is that old
    mirrors = Mirrors()
    first, *rest = _polls(mirrors, mirrors.local(one_run), any_bucket.proxy, 3)
    assert [(counts.total_requests(), counts.get_body_bytes()) for counts in rest] == [(1, 0), (1, 0)]
    (cost,) = mirrors.costs()
    assert "listed every" not in cost.line()


def test_what_a_pass_records_is_read_while_the_fetches_it_left_running_add_objects(any_bucket, tmp_path):
    """The TUI's passes return after a moment and leave their fetches running on the pool's
    threads, which add each fetched object to the mirror's book; the pass's record of the prefix
    (its newest upload, which sets how often it is listed) reads that book meanwhile. Found at
    10 000 runs: "dictionary changed size during iteration" ended the watcher."""
    client = any_bucket.writer
    for i in range(300):
        client.put_object(Bucket=any_bucket.name, Key=f"team/run_{i:03d}/train.log", Body=b"step 1 loss 10.4\n")
    mirrors = Mirrors()
    mirrors.local(f"{any_bucket.base}/team")
    (mirror,) = mirrors.mirrors
    mirror.wait_secs = 0.0  # return at once: every fetch left running
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the GIL changes hands between any two bytecodes, as under load
    fetched = []
    try:
        started = time.monotonic()
        while time.monotonic() - started < 60:
            done = mirror.sync()
            for _ in range(100):  # while the fetches go on
                mirror.newest_upload()
            fetched = list(mirror.root.rglob("train.log"))
            if not done.partial and done.running == 0 and len(fetched) == 300:
                break
    finally:
        sys.setswitchinterval(interval)
    assert len(fetched) == 300 and mirror.newest_upload() is not None
