"""`triage check` on SpecForge classic runs (``<output_dir>/runs/`` beside ``epoch_{e}_step_{s}/``
checkpoints written by ``LlamaForCausalLMEagle3.save_pretrained``) at 32 000 / 163 840: each broken run
ranks its cause first with its numbers and its link (exit 1); the healthy run scores nothing >= 0.5."""

from __future__ import annotations

import json

import numpy as np
import pytest

from builders.contracts import (
    DRAFT_VOCAB,
    TARGET_VOCAB,
    hot_ids,
    llama_target,
    log_curve,
    specforge_drafter,
    strip_mapping,
    vocab_mapping_file,
)

NEW_IDS = ("config_contract", "identity_mapping", "mapping_not_in_checkpoint", "mapping_drift")
THREE_IDS = {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}  # outputs of layers 1, 3, 4 of an 8-layer target


def check(triage, *args) -> tuple[int, dict]:
    result = triage("check", "--json", *args)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def by_id(document: dict) -> dict[str, dict]:
    return {h["id"]: h for h in document["hypotheses"]}


@pytest.fixture(scope="module")
def mappings(tmp_path_factory):
    root = tmp_path_factory.mktemp("mappings")
    return vocab_mapping_file(root / "a.pt", seed=1), vocab_mapping_file(root / "b.pt", seed=2)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return llama_target(tmp_path_factory.mktemp("target") / "llama")


def test_a_healthy_run_scores_nothing_and_lists_the_new_hypotheses(tmp_path, mappings, target, triage):
    a, _ = mappings
    out = tmp_path / "out"
    for step in (100, 200):
        # A healthy drafter holds its target's embedding (SpecForge loads it before training).
        specforge_drafter(out / f"epoch_0_step_{step}", mapping=a, target=target, eagle_config=THREE_IDS)
    cache = out / "cache" / "vocab_mapping"
    cache.mkdir(parents=True)
    (cache / "key.pt").write_bytes(a.read_bytes())  # the mapping the trainer labelled with
    log_curve(out, range(0, 201, 10), at_chance=False)
    code, document = check(triage, out, "--target", target)
    scores = {h["id"]: h["score"] for h in document["hypotheses"]}
    assert code == 0 and max(scores.values()) < 0.5, scores
    hypotheses = by_id(document)
    for name in NEW_IDS:
        assert hypotheses[name]["score"] == 0.0 and hypotheses[name]["links"], name
    assert document["checks"]["config_contract"]["status"] == "pass"
    health = document["checks"]["mapping_health"]
    assert health["status"] == "pass" and [s["changed_positions"] for s in health["drift"]] == [0]


def test_a_resume_that_regenerated_the_mapping_ranks_mapping_drift_first(tmp_path, mappings, triage):
    a, b = mappings
    out = tmp_path / "out"
    specforge_drafter(out / "epoch_0_step_100", mapping=a, eagle_config=THREE_IDS)
    specforge_drafter(out / "epoch_0_step_200", mapping=a, eagle_config=THREE_IDS)
    specforge_drafter(out / "epoch_1_step_300", mapping=b, eagle_config=THREE_IDS)  # resumed with a rebuilt mapping
    log_curve(out, range(0, 301, 10), at_chance=True)
    changed = int(np.count_nonzero(hot_ids(a) != hot_ids(b)))
    code, document = check(triage, out)
    top = document["hypotheses"][0]
    assert code == 1 and top["id"] == "mapping_drift" and top["score"] >= 0.5
    assert any(f"{changed} of {DRAFT_VOCAB}" in line and "epoch_1_step_300" in line for line in top["evidence"])
    assert "https://github.com/vllm-project/speculators/pull/1081" in top["links"]
    assert document["checks"]["mapping_health"]["first_drift"] == str(out / "epoch_1_step_300")


def test_a_checkpoint_without_its_mapping_ranks_mapping_not_in_checkpoint_first(tmp_path, mappings, triage):
    a, _ = mappings
    out = tmp_path / "out"
    saved = specforge_drafter(out / "epoch_0_step_100", mapping=a, eagle_config=THREE_IDS)
    strip_mapping(saved)
    (out / "vocab_mapping.pt").write_bytes(a.read_bytes())  # the side file the exporter kept
    log_curve(out, range(0, 101, 10), at_chance=True)
    moved = int(np.count_nonzero(hot_ids(a) != np.arange(DRAFT_VOCAB)))
    code, document = check(triage, out)
    top = document["hypotheses"][0]
    assert code == 1 and top["id"] == "mapping_not_in_checkpoint" and top["score"] >= 0.5
    line = next(line for line in top["evidence"] if "holds no d2t" in line)
    assert f"smaller than the target's {TARGET_VOCAB}" in line and f"{moved} of its {DRAFT_VOCAB} rows" in line
    assert top["links"] == ["https://github.com/NVIDIA-NeMo/Automodel/pull/2447"]


def test_default_buffers_rank_identity_mapping_first(tmp_path, triage):
    out = tmp_path / "out"
    specforge_drafter(out / "epoch_0_step_100", mapping=None, eagle_config=THREE_IDS)  # load_vocab_mapping never ran
    log_curve(out, range(0, 101, 10), at_chance=True)
    code, document = check(triage, out)
    top = document["hypotheses"][0]
    assert code == 1 and top["id"] == "identity_mapping" and top["score"] >= 0.5
    assert any(f"the first {DRAFT_VOCAB} of {TARGET_VOCAB}" in line for line in top["evidence"])
    assert "https://github.com/verl-project/verl-SpeCo/pull/66" in top["links"]
    # The t2d of all ones fails the verifier-mask invariants too; they restate the same default buffers.
    mask = by_id(document)["verifier_mask_mismatch"]
    assert mask["score"] < 0.5 and any("default buffers" in line for line in mask["evidence"])


def test_four_aux_ids_on_a_three_layer_fc_rank_config_contract_first(tmp_path, mappings, target, triage):
    a, _ = mappings
    out = tmp_path / "out"
    specforge_drafter(
        out / "epoch_0_step_100", mapping=a, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4]}
    )
    log_curve(out, range(0, 101, 10), at_chance=True)
    code, document = check(triage, out, "--target", target)
    top = document["hypotheses"][0]
    assert code == 1 and top["id"] == "config_contract" and top["score"] >= 0.5
    assert any("fc.weight reads 48 features, 4 aux layers" in line and "= 64" in line for line in top["evidence"])
    assert "https://github.com/vllm-project/vllm/pull/50170" in top["links"]
