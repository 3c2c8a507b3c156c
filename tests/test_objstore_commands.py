"""`triage scan`, `scalars`, `check` and the watcher on ``s3://`` URLs, against moto's real S3 server
(builders/object_store.py: a child process, reached through a counting proxy, the standard AWS
variables), the commands also on ``gs://`` against fake-gcs-server (builders/gcs_store.py). The sample
runs are uploaded with boto3 and each answer is compared with the same
command's answer on the local tree: equal but for the paths, which read as the URL.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from urllib.parse import unquote

import pytest

from builders.object_store import upload_tree, without_roots
from builders.samples import copy_samples
from builders.tensorboard import write_scalars
from triage_tui.core.objstore import tuning
from triage_tui.core.read.runs.remote import Mirrors
from triage_tui.core.watch.watcher import Watcher

# obstore ships wheels for Python 3.11 and later only (the objstore extra); moto and s3fs come with the
# test extra on every Python and are imported hard through the fixtures.
pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="obstore needs Python 3.11")


@pytest.fixture(autouse=True)
def _local_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "CACHE_DIR", tmp_path / "cache")


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    return copy_samples(tmp_path_factory.mktemp("samples") / "sample_runs")


def _run(triage, *argv: str) -> tuple[int, str, str]:
    done = triage(*argv)
    return done.returncode, done.stdout, done.stderr


def test_scan_of_a_bucket_equals_scan_of_the_tree(any_bucket, samples, triage):
    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    upload_tree(client, name, "team/sample_runs", samples)
    code, out, err = _run(triage, "scan", "--json", str(samples))
    url = f"{any_bucket.base}/team/sample_runs"
    proxy.reset_counts()
    remote_code, remote_out, remote_err = _run(triage, "scan", "--json", url)
    counts = proxy.reset_counts()
    local, remote = json.loads(out), json.loads(remote_out)
    # What the scan cost, as the server counted it; no price on a custom endpoint unless asked
    (bucket,) = remote.pop("buckets")
    assert (bucket["url"], bucket["requests"]) == (url, counts.total_requests()), counts.paths
    assert bucket["body_bytes"] == counts.get_body_bytes() > 0 and bucket["usd_per_day"] is None
    assert remote["runs"], remote_err
    assert [run["path"] for run in remote["runs"]] == [run["path"].replace(str(samples), url) for run in local["runs"]]
    for run in local["runs"]:
        run.pop("last_update_age", None)
    # The whole document but for paths: the same runs, flags, numbers and errors.
    assert without_roots(remote, url) == without_roots(local, str(samples))
    assert (remote_code, remote_err) == (code, err)


def test_scalars_of_a_tag_equal_the_local_ones(any_bucket, samples, triage):
    name, client, _ = any_bucket.name, any_bucket.writer, any_bucket.proxy
    upload_tree(client, name, "healthy", samples / "healthy")
    code, local, _ = _run(triage, "scalars", str(samples / "healthy"), "--tag", "train/*")
    remote_code, remote, err = _run(triage, "scalars", f"{any_bucket.base}/healthy", "--tag", "train/*")
    assert (remote_code, remote) == (code, local) and local.count("\n") > 10, err


def test_a_prefix_with_nothing_under_it_is_nothing_found_exit_2(any_bucket, samples, triage):
    name, client, _ = any_bucket.name, any_bucket.writer, any_bucket.proxy
    upload_tree(client, name, "runs/healthy", samples / "healthy")
    for argv in (["scan"], ["scan", "--json"], ["scalars"], ["check"]):
        url = f"{any_bucket.base}/no-such-prefix"
        code, out, err = _run(triage, *argv, url)
        # one line naming the URL and what was looked for; nothing on stdout (no empty JSON to parse)
        assert (code, out) == (2, ""), (argv, err)
        assert err.startswith(f"triage: {url}: nothing found: no object under this prefix") and err.count("\n") == 1
        assert "event files" in err, err


def test_scalars_of_one_event_file_url_equal_the_local_file(any_bucket, samples, triage):
    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    upload_tree(client, name, "runs/healthy", samples / "healthy")
    (event_file,) = (samples / "healthy" / "runs").glob("*tfevents*")
    url = f"{any_bucket.base}/runs/healthy/runs/{event_file.name}"
    for fmt in ("csv", "json"):
        code, local, _ = _run(triage, "scalars", "--format", fmt, str(event_file))
        proxy.reset_counts()
        remote_code, remote, err = _run(triage, "scalars", "--format", fmt, url)
        fetched = [
            path for method, path, _ in proxy.reset_counts().paths if method == "GET" and "list-type" not in path
        ]
        assert (remote_code, remote) == (code, local) == (0, local) and len(local) > 1000, err
        # the file alone was fetched, not its run's other objects
        assert fetched and all(event_file.name in unquote(path) for path in fetched), fetched


def test_check_reads_the_checkpoints_by_range_and_ranks_the_same_causes(any_bucket, samples, triage):
    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    upload_tree(client, name, "sample_runs", samples)
    # The run's triage.toml names ../_drafters and ../_target: out of the run's prefix, which a file
    # fetched from a bucket may not lead to (test_objstore_trust.py); the user names them instead.
    inputs = ("--checkpoint", "{}/_drafters/drafter-a", "--target", "{}/_target")
    local_flags = [arg.format(samples) for arg in inputs]
    code, local, _ = _run(triage, "check", "--json", "--device", "cpu", *local_flags, str(samples / "vocab-mismatch"))
    url = f"{any_bucket.base}/sample_runs/vocab-mismatch"
    remote_flags = [arg.format(f"{any_bucket.base}/sample_runs") for arg in inputs]
    proxy.reset_counts()
    remote_code, remote, err = _run(triage, "check", "--json", "--device", "cpu", *remote_flags, url)
    counts = proxy.reset_counts()
    local_doc, remote_doc = json.loads(local), json.loads(remote)
    ranked = [(h["id"], h["score"], h["evidence"]) for h in local_doc["hypotheses"]]
    assert remote_code == code == 1, err
    # The same causes in the same order with the same numbers; the checkpoint's and target's
    # paths differ (a mirror's), their numbers do not.
    strip = str(samples), f"{any_bucket.base}/sample_runs"
    assert without_roots(remote_doc["hypotheses"], *strip) == without_roots(local_doc["hypotheses"], *strip)
    assert [(h["id"], h["score"]) for h in remote_doc["hypotheses"]] == [(i, s) for i, s, _ in ranked]
    assert ranked[0][1] >= 0.5
    # Every check's numbers and digests are those of the run on disk (the mapping's SHA-256 is of
    # the checkpoint's bytes in the bucket, not of a placeholder's zeros).
    assert without_roots(remote_doc["checks"], *strip) == without_roots(local_doc["checks"], *strip)
    # The weights were read from the bucket (by range, into sparse files), not as a placeholder's zeros.
    assert sum(n for method, path, n in counts.paths if method == "GET" and ".safetensors" in unquote(path)) > 0


def test_a_run_that_grows_between_two_polls(bucket, tmp_path):
    name, client, _ = bucket
    run = tmp_path / "run"
    write_scalars(run / "runs", {"train/loss": [(1, 5.0), (2, 4.0)]})
    upload_tree(client, name, "live/run", run)
    mirrors = Mirrors()
    root = mirrors.local(f"s3://{name}/live")
    watcher = Watcher([root], use_watchdog=False, rescan_interval=0.0, mirrors=mirrors)
    stop = threading.Event()
    updates: list[list] = []
    thread = threading.Thread(target=watcher.run, args=(updates.append, stop), daemon=True)
    thread.start()
    try:
        _wait(lambda: updates and updates[-1] and updates[-1][0].last_step == 2)
        assert updates[-1][0].to_json()["path"] == f"s3://{name}/live/run/runs"
        write_scalars(run / "runs", {"train/loss": [(3, 3.0)]})  # a second event file, as after a restart
        upload_tree(client, name, "live/run", run)
        _wait(lambda: updates[-1][0].last_step == 3)
        assert threading.current_thread() is not thread  # the syncs ran on the watcher's thread
    finally:
        stop.set()
        thread.join(timeout=10)


def _wait(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_an_object_that_fails_is_an_error_of_its_run(bucket, samples, triage, monkeypatch):
    name, client, _ = bucket
    upload_tree(client, name, "runs/healthy", samples / "healthy")
    monkeypatch.setattr(tuning, "MAX_WHOLE_BYTES", 200)  # its config.json is now too big to read whole
    code, out, _ = _run(triage, "scan", "--json", f"s3://{name}/runs")
    (run,) = json.loads(out)["runs"]
    assert code == 1
    assert any(
        e["source"] == "objstore" and e["path"].startswith(f"s3://{name}/runs/healthy/") for e in run["errors"]
    ), run["errors"]


def test_without_the_extra_one_line_exit_2(monkeypatch, triage):
    monkeypatch.setitem(sys.modules, "obstore", None)  # import obstore raises ImportError
    monkeypatch.setitem(sys.modules, "fsspec", None)
    monkeypatch.setattr(tuning, "NATIVE_SCHEMES", ("s3", "gs", "gcs-no-cache"))  # a Store not opened yet
    for argv in (["scan", "s3://bkt/runs"], ["scalars", "s3://bkt/run"], ["check", "s3://bkt/run"]):
        code, out, err = _run(triage, *argv)
        assert (code, out) == (2, ""), argv
        assert (
            err
            == "triage: s3://bkt/runs: reading s3:// needs an optional extra: pip install 'triage-tui[s3]'\n".replace(
                "s3://bkt/runs", argv[1]
            )
        )


async def test_the_tui_watches_a_bucket_prefix_and_names_it_by_its_url(bucket, samples, monkeypatch):
    """`triage s3://…` as commands/tui.py starts it: the mirror synced on the watcher's thread, the
    runs listed, the top bar naming the URL (not the local mirror), the remap key gone (read-only),
    and a prefix that can no longer be listed said in one line while the runs stay."""
    from builders.pilot import make_app, screen_text
    from builders.waiting import wait_for
    from triage_tui.core.watch.watcher import Watcher

    name, client, proxy = bucket
    upload_tree(client, name, "tui/healthy", samples / "healthy")
    url = f"s3://{name}/tui"
    mirrors = Mirrors()
    root = mirrors.local(url)
    watcher = Watcher([root], poll_interval=0.2, rescan_interval=0.2, use_watchdog=False, mirrors=mirrors)
    app = make_app(root, readonly=True, watcher=watcher, rescan_interval=0.2)
    async with app.run_test(size=(120, 32)) as pilot:
        await wait_for(pilot, lambda: app.polls > 0 and bool(app.rows), what="the bucket's run listed")
        assert [row.name for row in app.rows] == ["healthy"]
        text = "\n".join(screen_text(app))
        assert f"watching {url}" in text and str(root) not in text
        assert f"{url}: " in text and " requests, " in text  # what watching it costs
        assert not app.main.check_action("remap", ())
        # The prefix can no longer be listed (every listing answered 503) while its objects stay:
        # emptying the bucket first would let a sync between two deletes see the run gone, as it is.
        monkeypatch.setattr(tuning, "MAX_RETRIES", 0)
        proxy.fail_paths("list-type=2")
        try:
            await wait_for(pilot, lambda: bool(watcher.unplaced_errors), what="the failed listing")
            await wait_for(
                pilot, lambda: app.notices.shown["unplaced_errors"] is not None, what="the failed listing said"
            )
            assert [row.name for row in app.rows] == ["healthy"]
            line = app.notices.shown["unplaced_errors"]
            assert f"s3://{name}/tui" in line and "503 SlowDown" in line and "\n" not in line, line
        finally:
            proxy.fail_paths()
