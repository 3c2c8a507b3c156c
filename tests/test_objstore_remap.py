"""`triage remap` of a checkpoint in a bucket, and the remap `check` suggests for a bucket run, run
as printed: the objects are read (the weights whole, by range), the output is written locally
under the data directory (never into the bucket, never over the source), and it holds the bytes
a remap of the same checkpoint on disk writes. Against moto's real S3 server.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from builders.object_store import upload_tree
from builders.samples import copy_samples
from triage_tui.core.objstore import tuning

# obstore installs on Python 3.11 and later (the test extra); every other package here is imported hard.
pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="obstore needs Python 3.11")


@pytest.fixture(autouse=True)
def _local_dirs(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    return copy_samples(tmp_path_factory.mktemp("samples") / "sample_runs")


def test_the_remap_check_suggests_for_a_bucket_run_runs_as_printed(bucket, samples, triage, tmp_path):
    name, client, proxy = bucket
    upload_tree(client, name, "sample_runs", samples)
    url = f"s3://{name}/sample_runs"
    flags = ["--checkpoint", f"{url}/_drafters/drafter-a", "--target", f"{url}/_target"]
    checked = triage("check", "--device", "cpu", *flags, f"{url}/vocab-mismatch")
    (line,) = [line for line in checked.stdout.splitlines() if line.strip().startswith("fix: triage remap ")]
    command = shlex.split(line.strip()[len("fix: ") :])
    assert all(not word.startswith("s3:/") or word.startswith("s3://") for word in command), command
    assert f"{url}/_drafters/drafter-a" in command, command
    assert "/triage-scratch-" not in line, line  # no path into the temporary mirror

    done = triage(*command[1:], "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verified"] is True and report["source"] == f"{url}/_drafters/drafter-a"
    output = tmp_path / "data" / "triage" / "remapped" / "s3" / name / "sample_runs" / "_drafters"
    assert report["output"].startswith(str(output)), report["output"]
    # the same remap of the same checkpoint on disk writes the same bytes
    local_words = [word.replace(url, str(samples)) for word in command[1:]]
    local = triage(*local_words, "--out", str(tmp_path / "local-out"), "--json")
    assert local.returncode == 0, local.stderr
    remote_out, local_out = Path(report["output"]), tmp_path / "local-out"
    weights = sorted(p.name for p in local_out.glob("*.safetensors"))
    assert weights and weights == sorted(p.name for p in remote_out.glob("*.safetensors"))
    for weight in weights:
        with safe_open(remote_out / weight, "np") as remote, safe_open(local_out / weight, "np") as local_file:
            # the same tensors, byte for byte; the provenance names the source's URL where the local
            # one names its path
            names = sorted(remote.keys())
            assert names == sorted(local_file.keys())
            assert all(remote.get_tensor(k).tobytes() == local_file.get_tensor(k).tobytes() for k in names)
            local_meta = {k: v.replace(str(samples), url) for k, v in local_file.metadata().items()}
            assert remote.metadata() == local_meta
    # nothing was written into the bucket
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=name).get("Contents", [])]
    assert not [k for k in keys if "remapped" in k], keys


def test_the_tuis_fix_commands_name_the_bucket_not_the_mirror_and_run_as_shown(bucket, samples, triage):
    """The TUI's Action tab shows ``Diagnosis.fix_commands()`` of the diagnosis its `c` gathers
    (core/diagnose/evidence.py): for a bucket run they name the URLs, never the temporary mirror."""
    from triage_tui.core.diagnose.diagnosis import diagnose
    from triage_tui.core.diagnose.evidence import Overrides, gather_evidence

    name, client, _ = bucket
    upload_tree(client, name, "sample_runs", samples)
    url = f"s3://{name}/sample_runs"
    overrides = Overrides(checkpoint=f"{url}/_drafters/drafter-a", target=f"{url}/_target", device="cpu")
    diagnosis = diagnose(gather_evidence(f"{url}/vocab-mismatch", overrides))
    commands = diagnosis.fix_commands()
    assert commands and all(shlex.split(c)[2] == f"{url}/_drafters/drafter-a" for c in commands), commands
    assert not [c for c in commands if "triage-scratch-" in c or "s3:/" + name in c], commands
    for command in commands:  # the remap and the keep-the-checkpoint's-mapping fix
        done = triage(*shlex.split(command)[1:])
        assert done.returncode == 0 and "triage-scratch-" not in done.stdout, (command, done.stderr)


def test_a_remap_out_to_the_bucket_never_over_the_source(bucket, samples, triage, tmp_path):
    name, client, _ = bucket
    upload_tree(client, name, "sample_runs", samples)
    url = f"s3://{name}/sample_runs"
    source, mapping = f"{url}/_drafters/drafter-a", f"{url}/vocab-mismatch/cache/vocab_mapping"
    (mapping_file,) = (samples / "vocab-mismatch" / "cache" / "vocab_mapping").glob("*.pt")
    mapping = f"{mapping}/{mapping_file.name}"

    def keys() -> list[str]:
        return sorted(o["Key"] for o in client.list_objects_v2(Bucket=name).get("Contents", []))

    before = keys()
    for over in (source, f"{source}/inner", url):  # the source itself, inside it, above it
        refused = triage("remap", source, "--mapping", mapping, "--out", over, "--force")
        assert refused.returncode == 2 and "over the source" in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1
    assert keys() == before  # nothing written

    out = f"s3://{name}/remapped/drafter-a-run"
    done = triage("remap", source, "--mapping", mapping, "--out", out, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["output"] == out and report["verified"] is True
    written = [k for k in keys() if k.startswith("remapped/drafter-a-run/")]
    assert "remapped/drafter-a-run/model.safetensors" in written, written
    local = triage(
        "remap", samples / "_drafters" / "drafter-a", "--mapping", mapping_file, "--out", tmp_path / "o", "--json"
    )
    assert local.returncode == 0, local.stderr
    body = client.get_object(Bucket=name, Key="remapped/drafter-a-run/model.safetensors")["Body"].read()
    (tmp_path / "from-bucket.safetensors").write_bytes(body)
    with (
        safe_open(tmp_path / "from-bucket.safetensors", "np") as remote,
        safe_open(tmp_path / "o" / "model.safetensors", "np") as local_file,
    ):
        names = sorted(remote.keys())
        assert names == sorted(local_file.keys())
        assert all(remote.get_tensor(k).tobytes() == local_file.get_tensor(k).tobytes() for k in names)

    again = triage("remap", source, "--mapping", mapping, "--out", out)
    assert again.returncode == 2 and "already there" in again.stderr, again.stderr
