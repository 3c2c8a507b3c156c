"""A bucket's run costs the requests of what a reader opens, as on disk: HF Trainer's optimizer and
scheduler states (one each per checkpoint, twice the weights) are neither fetched nor a cause of
error. A real ``transformers.Trainer`` output, uploaded to moto's S3 server and scanned through the
counting proxy (builders/object_store.py), against the scan of the same tree on disk.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest

from builders.object_store import upload_tree
from builders.trainers import hf_trainer_run
from triage_tui.core.errors import BadInput
from triage_tui.core.formats.json_file import read_json
from triage_tui.core.objstore import tuning
from triage_tui.core.read.runs.remote import Mirrors, mirror_runs
from triage_tui.core.watch.watcher import Watcher

# obstore installs on Python 3.11 and later (the test extra); every other package here is imported hard.
pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="obstore needs Python 3.11")

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


# --- what a scan opens, counted at the server -----------------------------------------------------

_OPENED: list[str] | None = None  # while a test records: the paths opened (the interpreter's audit hook)


def _audit(event: str, args: tuple) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], str):
        _OPENED.append(args[0])


sys.addaudithook(_audit)  # audit hooks cannot be removed: it records only inside _opened_files()


@contextmanager
def _opened_files(root: Path) -> Iterator[set[str]]:
    """The files below ``root`` that the code run inside opened (relative, as the OS was asked)."""
    global _OPENED
    found: set[str] = set()
    _OPENED = []
    try:
        yield found
    finally:
        opened, _OPENED = _OPENED, None
        found.update(os.path.relpath(p, root) for p in opened if p.startswith(str(root) + os.sep))


@pytest.fixture(scope="module")
def many_checkpoints(tmp_path_factory):
    """A real Trainer output saving at every step: 20 checkpoint-N/ (each config, generation
    config, trainer state, weights, optimizer, scheduler, RNG state, training args)."""
    return hf_trainer_run(tmp_path_factory.mktemp("hf20"), steps=20, save_steps=1)


def _object_gets(counts, prefix: str) -> list[str]:
    """The keys below ``prefix`` whose bodies were asked for (a GET that is no listing)."""
    keys = []
    for method, path, _ in counts.paths:
        if method == "GET" and "list-type" not in path:
            key = unquote(path.split("?")[0]).split("/", 2)[2]  # /<bucket>/<key>
            keys.append(key[len(prefix) :])
    return keys


def test_a_scan_gets_only_what_the_scan_on_disk_opens(any_bucket, many_checkpoints, triage):
    """Twenty checkpoints: the scan of the bucket fetches the objects whose files the scan of the
    same tree on disk opens (the newest checkpoint's config and trainer state, the event file), one
    GET each, and none of the other checkpoints' files; the answers are the same."""
    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    assert len(list(many_checkpoints.glob("checkpoint-*"))) == 20
    upload_tree(client, name, "hf/hf-out", many_checkpoints)
    with _opened_files(many_checkpoints) as opened_on_disk:
        local_scan = triage("scan", "--json", str(many_checkpoints.parent))
    proxy.reset_counts()
    remote = triage("scan", "--json", f"{any_bucket.base}/hf")
    fetched = _object_gets(proxy.reset_counts(), "hf/hf-out/")
    assert len(opened_on_disk) <= 3, opened_on_disk
    assert sorted(fetched) == sorted(opened_on_disk), (fetched, opened_on_disk)
    (run,) = json.loads(remote.stdout)["runs"]
    (local,) = json.loads(local_scan.stdout)["runs"]
    assert remote.returncode == local_scan.returncode, remote.stderr
    assert (run["last_step"], run["metrics"], run["flags"]) == (local["last_step"], local["metrics"], local["flags"])


def test_a_file_left_for_its_reader_is_fetched_when_read(any_bucket, many_checkpoints, tmp_path):
    """An older checkpoint's trainer state is a placeholder until a reader opens it: then one GET,
    and the reader sees the object's bytes (never the placeholder's zeros); read again, no request."""
    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    upload_tree(client, name, "hf-out", many_checkpoints)
    mirror = mirror_runs(f"{any_bucket.base}/hf-out", tmp_path / "mirror")
    mirror.sync()
    older = mirror.root / "checkpoint-3" / "trainer_state.json"
    assert older.stat().st_size == (many_checkpoints / "checkpoint-3" / "trainer_state.json").stat().st_size
    assert older.read_bytes() == bytes(older.stat().st_size)  # nothing fetched yet
    proxy.reset_counts()
    state = read_json(older)
    assert state == json.loads((many_checkpoints / "checkpoint-3" / "trainer_state.json").read_text())
    assert _object_gets(proxy.reset_counts(), "hf-out/") == ["checkpoint-3/trainer_state.json"]
    assert read_json(older) == state and proxy.reset_counts().total_requests() == 0
    assert mirror.sync().written == ()  # the next pass leaves it as it is


def test_an_idle_poll_fetches_no_body_and_lists_once(any_bucket, many_checkpoints):
    """A watcher polling an unchanged bucket: each poll after the first is the prefix's listing
    (one request here, at most 5), no object body."""
    name, client, proxy = any_bucket.name, any_bucket.writer, any_bucket.proxy
    upload_tree(client, name, "idle/hf-out", many_checkpoints)
    mirrors = Mirrors()
    root = mirrors.local(f"{any_bucket.base}/idle")
    watcher = Watcher([root], use_watchdog=False, rescan_interval=0.0, mirrors=mirrors)
    per_poll = []
    for _ in range(4):  # each poll rescans (rescan_interval 0): the prefix listed each time
        proxy.reset_counts()
        assert watcher.poll_once()
        per_poll.append(proxy.reset_counts())
    first, *idle = per_poll
    assert first.get_body_bytes() > 0
    for counts in idle:
        assert counts.get_body_bytes() == 0 and 1 <= counts.total_requests() <= 5, counts.paths


def test_the_sample_runs_checkpoints_cost_what_the_scan_on_disk_opens(any_bucket, tmp_path, triage):
    """The sample runs' checkpoints (SpecForge's ``epoch_E_step_S/``, drafters beside the runs): of
    the objects below a checkpoint directory, the bucket's scan GETs only the files the same scan
    opens on disk (a config or shard index is left for a check to fetch)."""
    from builders.samples import copy_samples

    local = copy_samples(tmp_path / "local")
    upload_tree(any_bucket.writer, any_bucket.name, "s/sample_runs", local)
    with _opened_files(local) as opened_on_disk:
        triage("scan", "--json", str(local))
    any_bucket.proxy.reset_counts()
    triage("scan", "--json", f"{any_bucket.base}/s/sample_runs")
    fetched = set(_object_gets(any_bucket.proxy.reset_counts(), "s/sample_runs/"))
    checkpoint_dir = re.compile(r"^(epoch_\d+_step_\d+|.+-step\d+|checkpoint-\d+)$")
    in_checkpoints = {key for key in fetched if any(checkpoint_dir.match(part) for part in key.split("/")[:-1])}
    assert any(checkpoint_dir.match(p.name) for p in local.rglob("*") if p.is_dir()), "the samples hold checkpoints"
    assert in_checkpoints <= opened_on_disk, sorted(in_checkpoints - opened_on_disk)


def test_a_sharded_checkpoint_beside_a_run_costs_no_get(any_bucket, tmp_path, triage):
    """A run with a sharded SpecForge checkpoint (``epoch_0_step_100/``: shards, their index, a
    config): the bucket's scan GETs what the scan on disk opens (the event file, the checkpoint's
    config for the vocab size), never the shards or their index."""
    import numpy as np
    from safetensors.numpy import save_file

    from builders.tensorboard import write_scalars

    local = tmp_path / "sweep" / "run_a"
    write_scalars(local / "runs", {"train/loss": [(1, 10.4), (100, 9.0)]})
    checkpoint = local / "epoch_0_step_100"
    checkpoint.mkdir()
    weight_map = {}
    for k in range(1, 4):
        save_file(
            {f"layers.{k}.weight": np.ones((4, 8), np.float32)}, str(checkpoint / f"model-0000{k}-of-00003.safetensors")
        )
        weight_map[f"layers.{k}.weight"] = f"model-0000{k}-of-00003.safetensors"
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (checkpoint / "config.json").write_text(json.dumps({"draft_vocab_size": 32000}))
    upload_tree(any_bucket.writer, any_bucket.name, "sweep", local.parent)
    with _opened_files(local.parent) as opened_on_disk:
        triage("scan", "--json", str(local.parent))
    any_bucket.proxy.reset_counts()
    triage("scan", "--json", f"{any_bucket.base}/sweep")
    fetched = _object_gets(any_bucket.proxy.reset_counts(), "sweep/")
    assert sorted(fetched) == sorted(opened_on_disk), (fetched, opened_on_disk)


def _specforge_run(root: Path, draft_vocab: int, checkpoint_draft_vocab: int) -> Path:
    """A SpecForge run: its config.json, an event file, and a checkpoint ``epoch_0_step_100/`` with
    a config.json of its own (which a check reads, never a scan) and its weights."""
    from safetensors.numpy import save_file

    from builders.tensorboard import write_scalars

    run = root / "run-a"
    write_scalars(run / "runs", {"train/ploss_0": [(step, 10.0 - step / 50) for step in range(100)]})
    (run / "config.json").write_text(json.dumps({"draft_vocab_size": draft_vocab, "vocab_size": 163840}))
    checkpoint = run / "epoch_0_step_100"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"draft_vocab_size": checkpoint_draft_vocab}))
    save_file({"lm_head.weight": np.zeros((4, 8), np.float32)}, checkpoint / "model.safetensors")
    return run


def test_a_config_the_pass_could_not_fetch_is_said_and_no_other_config_is_read_for_it(
    bucket, tmp_path, triage, monkeypatch
):
    """The server fails the run's config.json: the run is the one on disk (its config.json still
    marks its root), says its config was not read, and takes its chance line from no other file;
    no GET is sent for the checkpoint's config.json. (Without the run's config.json a scan fell back
    to the checkpoint's, one GET after another past the pass's deadline on a bucket of 10 000 runs,
    and judged the run by a vocab its trainer does not use.) The next pass fetches the config."""
    name, client, proxy = bucket
    monkeypatch.setattr(tuning, "MAX_RETRIES", 0)
    run = _specforge_run(tmp_path / "tree", draft_vocab=32000, checkpoint_draft_vocab=16000)
    upload_tree(client, name, "sf", tmp_path / "tree")
    (local,) = json.loads(triage("scan", "--json", str(tmp_path / "tree")).stdout)["runs"]
    assert (local["name"], local["vocab_size"]) == ("run-a", 32000)
    proxy.fail_paths("run-a/config.json")  # the run's own, not the checkpoint's (another path)
    try:
        proxy.reset_counts()
        (remote,) = json.loads(triage("scan", "--json", f"s3://{name}/sf").stdout)["runs"]
        fetched = _object_gets(proxy.reset_counts(), "sf/")
    finally:
        proxy.fail_paths()
    assert remote["name"] == "run-a" and remote["vocab_size"] != 16000
    assert "run-a/epoch_0_step_100/config.json" not in fetched, fetched
    # said once, by its reader (with the pass's reason), not again by the pass
    named = [error for error in remote["errors"] if error["path"].endswith("/run-a/config.json")]
    assert len(named) == 1 and "cannot read it" in named[0]["message"], remote["errors"]
    # The mirror's next pass fetches it; until then its reader is told why, with no request.
    proxy.fail_paths("run-a/config.json")
    mirror = mirror_runs(f"s3://{name}/sf", tmp_path / "mirror")
    try:
        mirror.sync()
        proxy.reset_counts()
        with pytest.raises(BadInput, match="run-a/config.json"):
            read_json(mirror.root / "run-a" / "config.json")
        assert _object_gets(proxy.reset_counts(), "sf/") == []
    finally:
        proxy.fail_paths()
    mirror.sync()
    assert read_json(mirror.root / "run-a" / "config.json") == json.loads((run / "config.json").read_text())
