"""Hub ids where a target or drafter is named, resolved in a local Hugging Face cache laid out as
huggingface_hub lays it out (tests/builders/hub_cache.py), HF_HOME/HF_HUB_CACHE pointed at a tmp
dir; nothing is ever downloaded (HF_ENDPOINT points at a closed port, so a download would fail)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

from builders.contracts import llama_target, specforge_drafter
from builders.hub_cache import cache_snapshot
from triage_tui.core.formats.hub import parse_hub_id

DRAFTER, TARGET, ABSENT = "lightseekorg/k2-eagle3", "org/tiny-target", "org/not-cached"
VOCAB, DRAFT = 4096, 1024


def test_what_reads_as_a_hub_id():
    assert parse_hub_id("moonshotai/Kimi-K2-Instruct") == ("moonshotai/Kimi-K2-Instruct", None)
    assert parse_hub_id("org/name@v1.0") == ("org/name", "v1.0")
    assert parse_hub_id("org/name@0123abcd") == ("org/name", "0123abcd")
    for path in ("../models/target", "./org/x", "/abs/org/name", "target", "a/b/c", "org--x/y", "org/x..y", "~/m/t"):
        assert parse_hub_id(path) is None, path


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A cache with a SpecForge drafter (main) and a Llama target (8 layers at main, 4 at tag v1), as HF_HOME/hub."""
    root = tmp_path_factory.mktemp("hub")
    drafter = specforge_drafter(
        root / "src-drafter",
        mapping=None,
        vocab=VOCAB,
        draft=DRAFT,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 4]},
    )
    target = llama_target(root / "src-target", vocab=VOCAB)
    older = llama_target(root / "src-target-v1", vocab=VOCAB, layers=4)  # tag v1: another commit
    cache = root / "home" / "hub"
    snapshots = {
        "drafter": cache_snapshot(cache, DRAFTER, drafter),
        "target": cache_snapshot(cache, TARGET, target),
        "target@v1": cache_snapshot(cache, TARGET, older, revision="v1"),
    }
    return types.SimpleNamespace(
        home=root / "home", cache=cache, **{k.replace("@", "_"): v for k, v in snapshots.items()}
    )


def test_the_fixture_is_a_cache_huggingface_hub_reads(hub):
    from huggingface_hub import scan_cache_dir

    info = scan_cache_dir(hub.cache)
    repos = {repo.repo_id: repo for repo in info.repos}
    assert set(repos) == {DRAFTER, TARGET} and not info.warnings
    assert {ref for revision in repos[TARGET].revisions for ref in revision.refs} == {"main", "v1"}


def _check(run, *args, env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(env_extra, HF_ENDPOINT="http://127.0.0.1:9")
    return subprocess.run(
        [sys.executable, "-m", "triage_tui", "check", str(run), *args, "--device", "cpu", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def test_triage_toml_hub_ids_are_used_from_the_cache_or_named_with_the_fetch_command(tmp_path, hub):
    run = tmp_path / "run"
    run.mkdir()
    (run / "triage.toml").write_text(f'[run]\ncheckpoint = "{DRAFTER}"\ntarget = "{ABSENT}"\n')
    done = _check(run, env_extra={"HF_HOME": str(hub.home)})
    report = json.loads(done.stdout)
    assert report["inputs"]["checkpoint"] == str(hub.drafter) and report["inputs"]["target"] is None
    notes = report["input_notes"]
    assert (
        f"triage.toml checkpoint names the hub id {DRAFTER}: using {hub.drafter} from the local Hugging Face cache"
        in notes
    )
    (absent,) = [n for n in notes if ABSENT in n]
    assert absent == (
        f"triage.toml target names {ABSENT}: no such path, and no such hub id in the local Hugging Face cache "
        f"({hub.cache}); fetch it with: hf download {ABSENT}"
    )
    assert report["checks"]["config_contract"]["status"] == "pass"  # the cached drafter was read


def test_flags_name_hub_ids_at_a_revision_and_honour_hf_hub_cache(tmp_path, hub):
    run = tmp_path / "run"
    run.mkdir()
    env = {"HF_HUB_CACHE": str(hub.cache), "HF_HOME": str(tmp_path / "elsewhere")}
    done = _check(run, "--checkpoint", DRAFTER, "--target", f"{TARGET}@v1", env_extra=env)
    report = json.loads(done.stdout)
    assert report["inputs"]["target"] == str(hub.target_v1)
    assert hub.target_v1 != hub.target and report["checks"]["config_contract"]["target_layers"] == 4
    missing = _check(run, "--target", f"{ABSENT}@v2", env_extra=env)
    assert missing.returncode == 2 and missing.stdout == ""
    assert f"fetch it with: hf download {ABSENT} --revision v2" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_specforge_provenance_references_are_looked_up_at_the_commit_the_run_loaded(tmp_path, hub, monkeypatch):
    """SpecForge 0.2.0 records a target and drafter named by hub id as ("reference", name) with the
    configs' _commit_hash (specforge/training/provenance.py); the run's inputs come from the cache."""
    import huggingface_hub.constants
    from specforge.tracker import TensorboardTracker
    from specforge.training.checkpoint import CheckpointManager
    from specforge.training.provenance import _compute_model_resume_provenance
    from transformers import AutoConfig

    from triage_tui.core.diagnose.check_inputs import resolve_run
    from triage_tui.core.formats.training_state import read_training_state

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub.cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    draft_config = AutoConfig.from_pretrained(DRAFTER, cache_dir=str(hub.cache), local_files_only=True)
    target_config = AutoConfig.from_pretrained(TARGET, cache_dir=str(hub.cache), local_files_only=True)
    # transformers 4.x sets _commit_hash on a config it loads from the cache (5.x no longer does):
    # the commit the run loaded the target at, here the one tag v1 points to.
    target_config._commit_hash = hub.target_v1.name
    cfg = types.SimpleNamespace(
        model=types.SimpleNamespace(
            vocab_mapping_path="",
            draft_model_config=None,
            target_model_path=TARGET,
            embedding_key="model.embed_tokens.weight",
            lm_head_key="lm_head.weight",
            load_target_embedding=True,
            input_modality="text",
            torch_dtype="bfloat16",
        )
    )
    provenance = _compute_model_resume_provenance(cfg, draft_config, target_config, capture_layers=None)
    assert provenance["target_model"] == ("reference", TARGET)
    output = tmp_path / "out"
    state = {
        "draft_state_dict": {},
        "global_step": 10,
        "epoch": 0,
        "strategy": "eagle3",
        "run_id": "k2",
        "world_size": 1,
        "specforge_model_provenance": tuple((k, provenance[k]) for k in sorted(provenance)),
    }
    CheckpointManager(str(output), "k2").save(state, 10, rank_state={"optimizer": None, "rng": {}})
    tracker = TensorboardTracker(types.SimpleNamespace(), str(output))  # what makes the directory a run
    tracker.log({"train/ploss_0": 6.9, "train/acc_0": 0.001}, step=10)
    tracker.close()
    (saved,) = output.glob("k2-step10/training_state.pt")
    args = read_training_state(saved).args
    assert (args["target_model"], args["draft_config"]) == (f"{TARGET}@{hub.target_v1.name}", DRAFTER)
    inputs = resolve_run(output).inputs
    assert (inputs.target, inputs.sources["target"]) == (hub.target_v1, "training_state.pt")
    assert (inputs.checkpoint, inputs.sources["checkpoint"]) == (hub.drafter, "training_state.pt")
    assert any(
        f"names the hub id {TARGET}@{hub.target_v1.name}: using {hub.target_v1}" in note for note in inputs.notes
    )
