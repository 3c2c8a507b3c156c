"""A bucket is nobody's own: what a ``triage.toml`` fetched from it names is neither fetched from the
network nor followed out of the prefix the user named (the run carries a notice instead), and an
endpoint's credentials never reach an output line. Against moto's real S3 server through the
counting proxy (builders/object_store.py) and a real HTTP server that counts its hits.
"""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from builders.metrics_server import MetricsServer
from builders.object_store import upload_tree
from builders.samples import copy_samples
from triage_tui.core.objstore import tuning

# obstore installs on Python 3.11 and later (the test extra); every other package here is imported hard.
pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="obstore needs Python 3.11")

# vLLM's /metrics, enough for a serving source to read an acceptance from it.
_PAGE = b"vllm:spec_decode_num_drafts_total 100\nvllm:spec_decode_num_accepted_tokens_total 150\n"


@pytest.fixture(autouse=True)
def _local_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "CACHE_DIR", tmp_path / "cache")


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    return copy_samples(tmp_path_factory.mktemp("samples") / "sample_runs")


def _hostile_run(samples, tmp_path, metrics_url: str):
    """The healthy sample run whose triage.toml names a metrics URL and a drafter out of its prefix."""
    run = tmp_path / "run"
    run.mkdir()
    for part in ("runs", "cache"):
        shutil.copytree(samples / "healthy" / part, run / part)
    manifest = (samples / "healthy" / "triage.toml").read_text()
    manifest = "\n".join(line for line in manifest.splitlines() if not line.startswith("checkpoint"))
    manifest = manifest.replace("[run]", '[run]\ncheckpoint = "../../elsewhere/drafter-a"', 1)
    (run / "triage.toml").write_text(f'{manifest}\n[serving]\nmetrics = "{metrics_url}"\n')
    return run


@pytest.mark.parametrize("metadata", [False, True])
def test_a_triage_toml_in_a_bucket_fetches_nothing_it_names(bucket, samples, triage, tmp_path, metadata):
    name, client, proxy = bucket
    with MetricsServer() as server:
        url = server.route("/metrics", _PAGE)
        if metadata:  # a cloud's instance metadata service: credentials for whoever asks
            url = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
        upload_tree(client, name, "team/run", _hostile_run(samples, tmp_path, url))
        upload_tree(client, name, "elsewhere/drafter-a", samples / "_drafters" / "drafter-a")
        proxy.reset_counts()
        done = triage("scan", "--json", f"s3://{name}/team")
        counts = proxy.reset_counts()
        assert server.hits["/metrics"] == 0
    (run,) = json.loads(done.stdout)["runs"]
    notices = run.get("serving", {}).get("errors", [])  # where scan --json says what a triage.toml named
    assert any(f"[serving] metrics {url} not fetched: triage.toml was fetched from a bucket" in m for m in notices), run
    assert any("[run] checkpoint" in m and "outside the prefix you named" in m for m in notices), notices
    # nothing of the bucket out of the prefix was listed or read
    assert not [path for _, path, _ in counts.paths if "elsewhere" in path], counts.paths
    assert run["path"] == f"s3://{name}/team/run"


def test_a_triage_toml_on_disk_still_names_what_it_likes(samples, triage, tmp_path):
    """The rule is the bucket's: the same run on disk, owned by the user, reads its metrics URL."""
    with MetricsServer() as server:
        run = _hostile_run(samples, tmp_path, server.route("/metrics", _PAGE))
        done = triage("scan", "--json", str(run))
        (status,) = json.loads(done.stdout)["runs"]
        assert not [m for m in status.get("serving", {}).get("errors", []) if "not fetched" in m], status
        assert server.hits["/metrics"] >= 1


def test_an_endpoints_credentials_never_reach_an_output_line(bucket, samples, triage, monkeypatch):
    """An endpoint written with its user and password (``http://user:password@host``) that stops
    answering: the line that says so names the URL the client asked for, never the password; nor
    does any line repeat the secret key of the environment."""
    name, client, proxy = bucket
    upload_tree(client, name, "runs/healthy", samples / "healthy")
    password, secret = "hunter2-endpoint-password", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    endpoint = proxy.endpoint.replace("http://", f"http://alice:{password}@")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)  # moto takes any key; the proxy stalls anyway
    monkeypatch.setattr(tuning, "REQUEST_TIMEOUT_SECS", 0.5)
    monkeypatch.setattr(tuning, "DEADLINE_SECS", 1.0)
    proxy.stall_next(100)
    try:
        for argv in (["scan", f"s3://{name}/runs"], ["scalars", f"s3://{name}/runs/healthy"]):
            done = triage(*argv)
            assert done.returncode == 2 and "127.0.0.1" in done.stderr, done.stderr  # the line names the endpoint
            text = done.stdout + done.stderr
            assert password not in text and secret not in text and "alice" not in text, text
    finally:
        proxy.stall_next(0)
        proxy.release()


def test_a_key_with_a_control_character_hides_no_sibling_run_and_is_shown_escaped(bucket, samples, triage):
    """object_store refuses to parse a key holding an escape sequence, and with it the whole listing
    page: the listing is asked again through botocore (keys URL-encoded on the wire), so the run
    beside it is scanned as usual and the bad key is said in a line showing it as `cat -v` would."""
    name, client, _ = bucket
    upload_tree(client, name, "team/good", samples / "healthy")
    upload_tree(client, name, "team/bad\x1b[2J\x07run", samples / "diverged")
    done = triage("scan", "--json", f"s3://{name}/team")
    runs = json.loads(done.stdout)["runs"]
    assert "good" in [run["name"] for run in runs], done.stderr
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    text = triage("scan", f"s3://{name}/team")
    assert "good" in text.stdout and "\x1b" not in text.stdout + text.stderr, text.stderr
