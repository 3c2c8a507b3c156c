"""A bucket's run costs the requests of what a reader opens, as on disk: HF Trainer's optimizer and
scheduler states (one each per checkpoint, twice the weights) are neither fetched nor a cause of
error. A real ``transformers.Trainer`` output, uploaded to moto's S3 server and scanned through the
counting proxy (builders/object_store.py), against the scan of the same tree on disk.
"""

from __future__ import annotations

import json

import pytest

from builders.object_store import upload_tree
from builders.trainers import hf_trainer_run
from triage_tui.core.objstore import tuning

pytest.importorskip("obstore")
pytest.importorskip("moto")
pytest.importorskip("transformers")

NEVER_READ = ("optimizer.pt", "scheduler.pt")


@pytest.fixture(autouse=True)
def _local_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "CACHE_DIR", tmp_path / "cache")


@pytest.fixture(scope="module")
def trainer_output(tmp_path_factory):
    return hf_trainer_run(tmp_path_factory.mktemp("hf"), steps=6, save_steps=2)


def test_a_trainers_optimizer_states_are_never_fetched(bucket, trainer_output, triage, monkeypatch):
    name, client, proxy = bucket
    optimizers = sorted(trainer_output.glob("checkpoint-*/optimizer.pt"))
    assert len(optimizers) == 3 and all((p.parent / "scheduler.pt").is_file() for p in optimizers)
    upload_tree(client, name, "hf/hf-out", trainer_output)
    # An optimizer.pt larger than what is read whole (256 MiB by default; any real drafter's is):
    # the cap is set just under this one's size, so that fetching it would put the run in error.
    monkeypatch.setattr(tuning, "MAX_WHOLE_BYTES", min(p.stat().st_size for p in optimizers) - 1)
    local_scan = triage("scan", "--json", str(trainer_output.parent))
    proxy.reset_counts()
    remote = triage("scan", "--json", f"s3://{name}/hf")
    counts = proxy.reset_counts()
    fetched = [path for method, path, _ in counts.paths if method in ("GET", "HEAD") and "list-type" not in path]
    assert not [path for path in fetched if path.split("?")[0].endswith(NEVER_READ)], fetched
    (run,) = json.loads(remote.stdout)["runs"]
    assert not run.get("errors") and run["status"] != "error", run.get("errors")
    assert remote.returncode == local_scan.returncode, remote.stderr
    (local,) = json.loads(local_scan.stdout)["runs"]
    assert (run["last_step"], run["metrics"]) == (local["last_step"], local["metrics"])
