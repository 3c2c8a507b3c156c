"""Three causes `triage check` ranks from files a run already has, each beside a healthy control that
a detector reading one symptom alone would trip:

- ``hidden_before_final_norm``: SpecForge dumps whose ``hidden_state`` is the input of the target's
  final norm (a forward hook on ``model.norm``, as a residual-stream capture takes it). Controls:
  the same target's correct post-norm dumps, speculators dumps whose last slot is pre-norm by
  contract, and another model's states (``target_mismatch``, not this).
- ``untrained_embeddings``: a speculators-layout drafter whose ``embed_tokens`` is a fresh init at
  std 0.02, beside a sharded target (``model.safetensors.index.json``) whose embedding has the same
  std. Control: the drafter holding the target's embedding.
- ``tied_target_head``: a target saved by transformers with ``tie_word_embeddings=True`` (no
  ``lm_head.weight`` in its file), a SpecForge run whose ``train/ploss_0`` sits on its chance line
  (valid share × ln V) from the first step. Controls: the tied target with a healthy curve, an
  untied target with the chance-line curve.

The targets, dumps and drafters are written by transformers, SpecForge and safetensors
(tests/builders/target_dumps.py says which function made each piece).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from builders.check_run import details_of
from builders.drafter import drafter_config, drafter_state, write_drafter
from builders.mappings import TARGET_VOCAB, story_mappings, write_specforge_mapping
from builders.target import llama_config, write_sharded
from builders.target_dumps import DRAFT_VOCAB, write_run, write_specforge_dumps, write_target
from triage_tui.core.diagnose.checks.dump_target import DumpTargetDetails, check_dump_target
from triage_tui.core.diagnose.checks.embed_tokens import DrafterEmbeddingDetails, check_embed_tokens
from triage_tui.core.diagnose.hypotheses.rank import rank_hypotheses
from triage_tui.core.formats.checkpoint import read_checkpoint
from triage_tui.core.formats.hidden_states import read_dumps
from triage_tui.core.formats.target import read_target

POINTS = 30
HEALTHY_LOSS = 2.0 + 4.0 * np.exp(-np.arange(POINTS) / 8)
HEALTHY_ACC = 0.7 - 0.4 * np.exp(-np.arange(POINTS) / 8)
NEW_IDS = ("hidden_before_final_norm", "untrained_embeddings", "tied_target_head")
LINKS = {
    "hidden_before_final_norm": "https://github.com/vllm-project/speculators/pull/313",
    "untrained_embeddings": "https://github.com/lightseekorg/TorchSpec/issues/38",
    "tied_target_head": "https://github.com/sgl-project/SpecForge/issues/473",
}


def _check(triage, run: Path) -> tuple[int, dict]:
    done = triage("check", run, "--json", "--device", "cpu")
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def _by_id(report: dict) -> dict[str, dict]:
    return {h["id"]: h for h in report["hypotheses"]}


def _ranking(report: dict) -> list[tuple[str, float]]:
    return [(h["id"], h["score"]) for h in report["hypotheses"][:4]]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("causes")
    target = write_target(tmp / "target", seed=0)
    other = write_target(tmp / "other", seed=1)
    tied = write_target(tmp / "tied", seed=3, tied=True)
    dumps = {
        "own": write_specforge_dumps(tmp / "d-own", target),
        "pre": write_specforge_dumps(tmp / "d-pre", target, before_final_norm=True),
        "other": write_specforge_dumps(tmp / "d-other", other),
        "tied": write_specforge_dumps(tmp / "d-tied", tied),
    }
    return tmp, {"target": target, "other": other, "tied": tied}, dumps


# --------------------------------------------------------------------------- hidden_before_final_norm


def test_a_capture_before_the_final_norm_ranks_first_above_target_mismatch(world, triage):
    tmp, targets, dumps = world
    run = write_run(tmp / "r-pre", targets["target"], dumps["pre"], losses=HEALTHY_LOSS, accuracies=HEALTHY_ACC)
    status, report = _check(triage, run)
    top, hypotheses = report["hypotheses"][0], _by_id(report)
    assert status == 1 and top["id"] == "hidden_before_final_norm", _ranking(report)
    assert top["score"] >= 0.5 and LINKS["hidden_before_final_norm"] in top["links"] and top["action"]
    # The kind the dumps were mistaken for before: below one half, and below this cause.
    assert hypotheses["target_mismatch"]["score"] < 0.5 <= top["score"]
    measured = report["checks"]["dump_target"]
    normed, raw = measured["normed_agreement"], measured["next_token_agreement"]
    # What a user can check: the target reads its own states once normed, far better than raw.
    assert normed > 0.5 and normed - raw > 0.2, (normed, raw)
    evidence = " | ".join(top["evidence"])
    assert "reading that fits: normed" in evidence
    assert f"at {normed:.1%} of" in evidence and f"on the raw states at {raw:.1%}" in evidence, evidence
    assert f"median rms(h / w) = {measured['norm_scale']:.3g}" in evidence


def test_another_model_s_states_stay_target_mismatch(world, triage):
    tmp, targets, dumps = world
    run = write_run(tmp / "r-other", targets["target"], dumps["other"], losses=HEALTHY_LOSS, accuracies=HEALTHY_ACC)
    status, report = _check(triage, run)
    hypotheses = _by_id(report)
    assert status == 1 and report["hypotheses"][0]["id"] == "target_mismatch", _ranking(report)
    assert hypotheses["hidden_before_final_norm"]["score"] < 0.5
    assert any("reading that fits: neither" in line for line in hypotheses["hidden_before_final_norm"]["evidence"])


def test_correct_post_norm_dumps_do_not_fire(world):
    _, targets, dumps = world
    result = check_dump_target(read_dumps(dumps["own"]), read_target(targets["target"]))
    assert result.status == "pass", result.summary
    assert details_of(result, DumpTargetDetails).normed_agreement is None  # the identity held: one reading
    ranked = {h.id: h for h in rank_hypotheses({"dump_target": result})}
    assert ranked["hidden_before_final_norm"].score == 0.0


def test_speculators_pre_norm_by_contract_does_not_fire(world):
    """The same pre-norm states stored as speculators stores them: the last slot is pre-norm by its
    contract, so the head reads them normed and nothing is wrong."""
    tmp, targets, dumps = world
    spec = tmp / "d-speculators"
    spec.mkdir()
    for i, file in enumerate(sorted(dumps["pre"].glob("rows_*/data_*.ckpt"))):
        data = torch.load(file, weights_only=True)
        aux, last = data["aux_hidden_state"][0], data["hidden_state"][0]
        layers = torch.cat([aux.reshape(aux.shape[0], 3, -1), last[:, None]], dim=1)  # [T, 4, H]
        save_file(
            {"token_ids": data["input_ids"], "hidden_states": layers.contiguous()}, str(spec / f"hs_{i}.safetensors")
        )
    result = check_dump_target(read_dumps(spec), read_target(targets["target"]))
    details = details_of(result, DumpTargetDetails)
    assert result.status == "pass" and details.post_norm is False, result.summary
    ranked = {h.id: h for h in rank_hypotheses({"dump_target": result})}
    assert ranked["hidden_before_final_norm"].score == 0.0 and ranked["target_mismatch"].score == 0.0


@pytest.mark.parametrize("declared", [False, True])
def test_modelopt_dumps_are_judged_by_their_pre_norm_flag(world, declared):
    """ModelOpt's ``hidden_states`` is post-norm unless the dump declares ``base_hidden_prenorm``
    (its vLLM extractor's capture): undeclared pre-norm states are this cause, declared ones are not."""
    tmp, targets, dumps = world
    out = tmp / f"d-modelopt-{declared}"
    out.mkdir()
    for i, file in enumerate(sorted(dumps["pre"].glob("rows_*/data_*.ckpt"))):
        data = torch.load(file, weights_only=True)
        dump = {
            "input_ids": data["input_ids"],
            "hidden_states": data["hidden_state"][0],
            "aux_hidden_states": data["aux_hidden_state"][0],
            "loss_mask": data["loss_mask"],
        }
        if declared:
            dump["base_hidden_prenorm"] = True
        torch.save(dump, out / f"conversation-{i}.pt")
    result = check_dump_target(read_dumps(out), read_target(targets["target"]))
    score = {h.id: h.score for h in rank_hypotheses({"dump_target": result})}["hidden_before_final_norm"]
    if declared:
        assert result.status == "pass" and score == 0.0, result.summary
    else:
        assert result.status == "fail" and score >= 0.5, result.summary


# --------------------------------------------------------------------------- untrained_embeddings

HIDDEN = 64


@pytest.fixture(scope="module")
def embedding_world(tmp_path_factory):
    """A sharded bf16 target at the story's vocab (163 840) whose embedding has std 0.02, as trained
    embeddings do, and two speculators-layout drafters: one holding that embedding, one a fresh init
    of the same std (HF's initializer_range)."""
    tmp = tmp_path_factory.mktemp("embeddings")
    gen = torch.Generator().manual_seed(11)
    embedding = (0.02 * torch.randn(TARGET_VOCAB, HIDDEN, generator=gen)).bfloat16()
    target = write_sharded(
        tmp / "target",
        [
            {"model.embed_tokens.weight": embedding},
            {
                "lm_head.weight": (0.02 * torch.randn(TARGET_VOCAB, HIDDEN, generator=gen)).bfloat16(),
                "model.norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
            },
        ],
        llama_config(hidden_size=HIDDEN, num_hidden_layers=61, torch_dtype="bfloat16"),  # K2's depth: aux ids fit
    )
    checkpoint_mapping, _ = story_mappings()
    drafters = {}
    for name in ("copied", "fresh"):
        state = drafter_state("speculators", checkpoint_mapping, hidden=HIDDEN)
        fresh = torch.nn.init.normal_(torch.empty(TARGET_VOCAB, HIDDEN), std=0.02, generator=gen).bfloat16()
        state["embed_tokens.weight"] = embedding.clone() if name == "copied" else fresh
        drafters[name] = write_drafter(tmp / name, state, drafter_config("speculators", hidden=HIDDEN))
    mapping = write_specforge_mapping(tmp / "vocab_mapping.pt", checkpoint_mapping.hot_ids)
    return tmp, target, drafters, mapping


def _embedding_run(root: Path, target: Path, drafter: Path, mapping: Path) -> Path:
    root.mkdir()
    (root / "triage.toml").write_text(
        f'[run]\nvocab_size = 32000\ncheckpoint = "{drafter}"\nmapping = "{mapping}"\ntarget = "{target}"\n'
    )
    return root


def test_a_fresh_embedding_ranks_first_with_its_share_and_cosine(embedding_world, triage):
    tmp, target, drafters, mapping = embedding_world
    status, report = _check(triage, _embedding_run(tmp / "r-fresh", target, drafters["fresh"], mapping))
    top = report["hypotheses"][0]
    assert status == 1 and top["id"] == "untrained_embeddings", _ranking(report)
    assert top["score"] >= 0.5 and LINKS["untrained_embeddings"] in top["links"] and top["action"]
    checked = report["checks"]["embed_tokens"]
    assert checked["status"] == "fail" and checked["equal_rows"] == 0 and abs(checked["mean_cosine"]) < 0.1
    # Both embeddings have the std of a trained one: the scale told nothing.
    assert checked["drafter_std"] == pytest.approx(checked["target_std"], rel=0.05)
    evidence = " | ".join(top["evidence"])
    assert f"0 of {checked['rows_compared']} sampled rows (0.0%)" in evidence, evidence
    assert f"mean row cosine {checked['mean_cosine']:.3f}" in evidence


def test_the_target_s_own_embedding_does_not_fire(embedding_world, triage):
    tmp, target, drafters, mapping = embedding_world
    status, report = _check(triage, _embedding_run(tmp / "r-copied", target, drafters["copied"], mapping))
    hypotheses = _by_id(report)
    assert hypotheses["untrained_embeddings"]["score"] == 0.0, hypotheses["untrained_embeddings"]
    checked = report["checks"]["embed_tokens"]
    assert checked["status"] == "pass" and checked["equal_rows"] == checked["rows_compared"] == 1024
    assert checked["mean_cosine"] > 0.99
    assert status == 0, _ranking(report)


def test_the_check_reads_a_sample_of_rows_not_the_tensors(embedding_world, monkeypatch):
    """At K2 size the embedding is 2.3 GB: only the sampled rows are read, never a whole tensor."""
    _, target, drafters, _ = embedding_world
    from triage_tui.core.formats import weights

    def refuse(self, name):
        raise AssertionError(f"whole tensor {name} read")

    monkeypatch.setattr(weights.WeightFiles, "load", refuse)
    result = check_embed_tokens(read_checkpoint(drafters["fresh"]), read_target(target))
    assert details_of(result, DrafterEmbeddingDetails).rows_compared == 1024


# --------------------------------------------------------------------------- tied_target_head


def _valid_fraction(dumps: Path) -> float:
    """SpecForge's ploss averages over every position, the masked ones adding 0, after its offline
    loader zeroed each sample's last position: its chance line is this share × ln V."""
    valid = total = 0
    for file in sorted(dumps.glob("rows_*/data_*.ckpt")):
        mask = torch.load(file, weights_only=True)["loss_mask"].reshape(-1).clone()
        mask[-1] = 0
        valid, total = valid + int(mask.sum()), total + int(mask.numel())
    return valid / total


def _chance_curve(dumps: Path) -> tuple[list[float], list[float]]:
    """A drafter trained against a random head's near-uniform targets: on the line from step one."""
    line = _valid_fraction(dumps) * math.log(DRAFT_VOCAB)
    wobble = 0.003 * np.sin(np.arange(POINTS))
    return list(line * (1.0 + wobble)), list(0.001 + 0.0005 * np.cos(np.arange(POINTS)))


def test_a_tied_target_whose_head_was_never_loaded_ranks_first(world, triage):
    tmp, targets, dumps = world
    losses, accuracies = _chance_curve(dumps["tied"])
    run = write_run(tmp / "r-tied", targets["tied"], dumps["tied"], losses=losses, accuracies=accuracies, drafter=True)
    status, report = _check(triage, run)
    top = report["hypotheses"][0]
    assert status == 1 and top["id"] == "tied_target_head", _ranking(report)
    assert top["score"] >= 0.5 and LINKS["tied_target_head"] in top["links"] and top["action"]
    # The mapping and the dumps check out.
    checks = report["checks"]
    assert checks["vocab_mapping"]["status"] == "pass" and checks["dump_target"]["status"] == "pass"
    assert checks["target_tie"]["tie_word_embeddings"] is True and checks["target_tie"]["lm_head_stored"] is None
    evidence = " | ".join(top["evidence"])
    assert "tie_word_embeddings: true" in evidence and "store no lm_head.weight" in evidence, evidence
    assert "loss_at_chance" in evidence and f"× ln {DRAFT_VOCAB} =" in evidence  # the trainer's basis
    assert "accuracy_at_chance" in evidence


def test_a_tied_target_with_a_healthy_curve_does_not_fire(world, triage):
    tmp, targets, dumps = world
    healthy = {"losses": HEALTHY_LOSS, "accuracies": HEALTHY_ACC}
    run = write_run(tmp / "r-tied-healthy", targets["tied"], dumps["tied"], **healthy, drafter=True)
    status, report = _check(triage, run)
    hypotheses = _by_id(report)
    assert hypotheses["tied_target_head"]["score"] == 0.0, hypotheses["tied_target_head"]
    assert report["checks"]["target_tie"]["head_missing"] is True
    assert status == 0, _ranking(report)


def test_the_chance_line_curve_with_an_untied_target_is_not_this_cause(world, triage):
    tmp, targets, dumps = world
    losses, accuracies = _chance_curve(dumps["own"])
    run = write_run(
        tmp / "r-untied-chance", targets["target"], dumps["own"], losses=losses, accuracies=accuracies, drafter=True
    )
    _, report = _check(triage, run)
    assert _by_id(report)["tied_target_head"]["score"] == 0.0


def test_a_failed_mapping_check_explains_the_chance_line_instead(world):
    """The tie is context when the vocab check found the story's mismatch: that alone sends a run to chance."""
    from triage_tui.core.diagnose.checks.target_tie import check_target_tie
    from triage_tui.core.diagnose.checks.vocab import check_vocab_mapping
    from triage_tui.core.watch.curve_shapes import RunStart
    from triage_tui.core.watch.signals.flags import Flag
    from triage_tui.core.watch.signals.kinds import FlagKind, Severity

    _, targets, _ = world
    checks = {
        "target_tie": check_target_tie(read_target(targets["tied"])),
        "vocab_mapping": check_vocab_mapping(*story_mappings()),
    }
    assert checks["vocab_mapping"].status == "fail"
    flags = [
        Flag(
            FlagKind.LOSS_AT_CHANCE,
            Severity.CRITICAL,
            "train/ploss_0",
            300,
            10.37,
            "train/ploss_0 = 10.37 at step 300, at chance",
        ),
        Flag(
            FlagKind.ACCURACY_AT_CHANCE, Severity.CRITICAL, "train/acc_0", 300, 0.1, "train/acc_0 = 0.1 % at step 300"
        ),
    ]
    start = RunStart("train/acc_0", 50, 250, 5, 0.001, None, None)
    ranked = {h.id: h for h in rank_hypotheses(checks, flags, start=start)}
    assert ranked["tied_target_head"].score < 0.5 <= ranked["vocab_mapping_mismatch"].score
    assert any("vocab_mapping check failed" in line for line in ranked["tied_target_head"].evidence)
    del checks["vocab_mapping"]  # the same evidence with nothing else found: this cause
    assert {h.id: h for h in rank_hypotheses(checks, flags, start=start)}["tied_target_head"].score >= 0.5


# --------------------------------------------------------------------------- the sample runs


@pytest.mark.parametrize("run", ["healthy", "vocab-mismatch", "hidden-state-format", "verifier-mask", "diverged"])
def test_nothing_new_fires_on_the_sample_runs(run, triage):
    sample = Path(__file__).resolve().parent.parent / "sample_runs" / run
    _, report = _check(triage, sample)
    hypotheses = _by_id(report)
    for name in NEW_IDS:
        assert hypotheses[name]["score"] < 0.5, hypotheses[name]
