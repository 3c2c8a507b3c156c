"""The checkpoints of a bucket's run, as a check reads them in a process that goes on (the TUI).

A pickled one (``pytorch_model.bin``, EAGLE's and SpecForge's ``torch.save``): ``torch.load`` maps it
as a whole, so it is fetched whole, only up to the most fetched of one object
(``tuning.FOLLOW_MAX_BYTES``), and lives only while it is loaded. A safetensors one is read by range
into a sparse file kept for the process's later reads, up to ``tuning.KEPT_RANGES_BYTES`` of ranges
in all; past that the least recently read ones no reader holds are removed, to be fetched again if
read again. Against moto's real S3 server (builders/object_store.py), `triage check` run in this
process: what it left in this process's scratch directory (where a bucket's fetched objects live
while it runs) is looked at after it returns.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from builders.object_store import upload_tree, without_roots
from builders.samples import copy_samples
from triage_tui.core.objstore import scratch, tuning

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="obstore needs Python 3.11")

RUN = "vocab-mismatch"
DRAFTER = "_drafters/drafter-bin"
SAFETENSORS = "_drafters/drafter-a"


@pytest.fixture(autouse=True)
def _local_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "CACHE_DIR", tmp_path / "cache")


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> Path:
    """The vocab-mismatch run and its target, with its drafter saved by ``torch.save`` as a
    ``pytorch_model.bin`` (EAGLE's layout) beside the safetensors one."""
    import torch
    from safetensors.torch import load_file

    root = copy_samples(tmp_path_factory.mktemp("samples") / "sample_runs", runs=(RUN,))
    source, drafter = root / "_drafters/drafter-a", root / DRAFTER
    drafter.mkdir(parents=True)
    (drafter / "config.json").write_bytes((source / "config.json").read_bytes())
    torch.save(load_file(source / "model.safetensors"), drafter / "pytorch_model.bin")
    return root


def _check(triage, runs: str, drafter: str = DRAFTER) -> tuple[int, dict | None, str]:
    inputs = ["--checkpoint", f"{runs}/{drafter}", "--target", f"{runs}/_target"]
    done = triage("check", "--json", "--device", "cpu", *inputs, f"{runs}/{RUN}")
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None, done.stderr


def _fetched(suffix: str) -> list[Path]:
    """The checkpoint files ending in ``suffix`` fetched into this process's scratch directory
    (sparse files of objects live in its ``object-*`` directories; the mirror's placeholders are
    elsewhere in it)."""
    return sorted(p for p in scratch.scratch_dir().glob("object-*/*") if p.name.endswith(suffix))


PICKLED, SPARSE = "pytorch_model.bin", ".safetensors"


def test_a_pickled_checkpoint_in_a_bucket_is_checked_as_on_disk(bucket, samples, triage):
    # S3 only: the object is fetched by the same ranged reads on GCS (test_objstore.py's checkpoint tests)
    name, client, _ = bucket
    upload_tree(client, name, "sample_runs", samples)
    code, local, err = _check(triage, str(samples))
    assert local is not None and code == 1, err  # the mismatch is found in the weights read
    before = _fetched(PICKLED)
    remote_code, remote, remote_err = _check(triage, f"s3://{name}/sample_runs")
    assert remote is not None and remote_code == code, remote_err
    # The fetched pickle is gone once the check has loaded it (a TUI checking run after run would
    # otherwise keep each in the temp dir until it exits); its tensors, read after, still agree below.
    assert _fetched(PICKLED) == before
    roots = str(samples), f"s3://{name}/sample_runs"
    # Every check's numbers and digests, and the causes in the same order with the same scores, the
    # first one's evidence word for word. (The run's triage.toml names drafter-a outside the prefix:
    # a bucket's run does not follow it, so the notes on where the run started differ.)
    assert without_roots(remote["checks"], *roots) == without_roots(local["checks"], *roots)
    ranked = [(h["id"], h["score"]) for h in local["hypotheses"]]
    assert [(h["id"], h["score"]) for h in remote["hypotheses"]] == ranked
    assert ranked[0][0] == "vocab_mapping_mismatch" and ranked[0][1] >= 0.5
    assert remote["hypotheses"][0]["evidence"] == local["hypotheses"][0]["evidence"]


def test_a_pickled_checkpoint_over_the_bound_is_refused_unfetched(bucket, samples, triage, monkeypatch):
    name, client, proxy = bucket
    key = f"sample_runs/{DRAFTER}/pytorch_model.bin"
    upload_tree(client, name, "sample_runs", samples)
    size = (samples / DRAFTER / "pytorch_model.bin").stat().st_size
    monkeypatch.setattr(tuning, "FOLLOW_MAX_BYTES", size - 1)
    before = _fetched(PICKLED)
    proxy.reset_counts()
    code, _, err = _check(triage, f"s3://{name}/sample_runs")
    gets = [path for method, path, _ in proxy.reset_counts().paths if method == "GET" and "pytorch_model" in path]
    assert code == 2, err
    assert err.count("\n") == 1 and f"s3://{name}/{key}" in err and f"{size} bytes" in err, err
    assert gets == []  # not one byte of it asked for
    assert _fetched(PICKLED) == before


def test_a_pickled_checkpoint_whose_fetch_fails_leaves_nothing(bucket, samples, triage, monkeypatch):
    name, client, proxy = bucket
    upload_tree(client, name, "sample_runs", samples)
    monkeypatch.setattr(tuning, "MAX_RETRIES", 0)
    before = _fetched(PICKLED)
    proxy.fail_paths(f"{DRAFTER}/pytorch_model.bin")  # its file made, then its GET answered 503
    try:
        code, _, err = _check(triage, f"s3://{name}/sample_runs")
    finally:
        proxy.fail_paths()
    assert code == 2 and err.count("\n") == 1 and "pytorch_model.bin" in err, err
    assert _fetched(PICKLED) == before


def test_past_the_budget_a_checks_fetched_ranges_are_removed_and_its_numbers_stay(bucket, samples, triage, monkeypatch):
    name, client, _ = bucket
    upload_tree(client, name, "sample_runs", samples)
    code, local, err = _check(triage, str(samples), SAFETENSORS)
    assert local is not None and code == 1, err  # the mismatch is found in the weights read
    monkeypatch.setattr(tuning, "KEPT_RANGES_BYTES", 0)  # nothing kept once no reader holds it
    before = _fetched(SPARSE)
    remote_code, remote, remote_err = _check(triage, f"s3://{name}/sample_runs", SAFETENSORS)
    assert remote is not None and remote_code == code, remote_err
    # The drafter's and the target's sparse files (kept until exit before the budget) are gone (and
    # any an earlier check of this process kept: nothing is kept at this budget)...
    assert [p for p in _fetched(SPARSE) if p not in before] == []
    # ...and the check, which read the header again wherever it had been dropped, is the disk's.
    roots = str(samples), f"s3://{name}/sample_runs"
    assert without_roots(remote["checks"], *roots) == without_roots(local["checks"], *roots)
    assert [(h["id"], h["score"]) for h in remote["hypotheses"]] == [(h["id"], h["score"]) for h in local["hypotheses"]]


def test_within_the_budget_a_checks_fetched_ranges_are_kept_for_its_next_reads(bucket, samples, triage):
    name, client, _ = bucket
    upload_tree(client, name, "sample_runs", samples)
    before = _fetched(SPARSE)
    code, remote, err = _check(triage, f"s3://{name}/sample_runs", SAFETENSORS)
    assert remote is not None and code == 1, err
    kept = sorted(set(_fetched(SPARSE)) - set(before))
    assert {p.name for p in kept} == {"model.safetensors"} and len(kept) == 2  # the drafter's and the target's
    assert all(p.stat().st_blocks > 0 for p in kept)  # what was fetched of each is there for a next read
