"""The trainers' own layouts, made by their own code (tests/builders/trainers.py says which function
made what): each is one run with the right chance line, and `check` finds the vocab-mapping bug
with the exact numbers in the buggy fine-tune and nothing in the healthy control."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from builders.trainers import (
    DRAFT_VOCAB,
    RUN_ID,
    STEPS,
    TARGET_VOCAB,
    hf_trainer_run,
    specforge_run,
    vocab_numbers,
)
from triage_tui.core.read.runs.discover import discover_runs


@pytest.fixture(scope="session")
def specforge_buggy(tmp_path_factory):
    return specforge_run(tmp_path_factory.mktemp("sf-buggy"), buggy=True)


@pytest.fixture(scope="session")
def specforge_healthy(tmp_path_factory):
    return specforge_run(tmp_path_factory.mktemp("sf-healthy"), buggy=False)


@pytest.fixture(scope="session")
def hf_output(tmp_path_factory):
    return hf_trainer_run(tmp_path_factory.mktemp("hf"))


# ----------------------------------------------------------------- SpecForge 0.2.0


def test_specforge_020_output_dir_is_one_run_with_the_drafters_chance_line(specforge_buggy, triage):
    run = specforge_buggy
    for given in (run.work, run.output, run.output / "runs"):
        (info,) = discover_runs([given])
        assert info.path == run.output
        assert info.artifacts.checkpoints == tuple(run.output / f"{RUN_ID}-step{s}" for s in STEPS)
        assert info.artifacts.training_state == run.output / f"{RUN_ID}-step{STEPS[-1]}" / "training_state.pt"

    result = triage("scan", "--json", run.work)
    (scanned,) = json.loads(result.stdout)["runs"]
    assert scanned["path"] == str(run.output)
    assert (scanned["vocab_size"], scanned["vocab_size_source"]) == (DRAFT_VOCAB, "training_state.pt")
    assert scanned["chance_loss"] == pytest.approx(math.log(DRAFT_VOCAB))
    assert scanned["last_step"] == STEPS[-1]


def test_specforge_020_buggy_fine_tune_ranks_the_mapping_mismatch_first_with_exact_numbers(specforge_buggy, triage):
    run = specforge_buggy
    result = triage("check", "--json", run.output)
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    # The starting drafter comes from the provenance in training_state.pt; the run's mapping is the
    # d2t/t2d the trainer saved with the fine-tuned drafter.
    assert document["inputs"]["checkpoint"] == str(run.drafter)
    assert document["inputs"]["mapping"] == str(run.output / f"{RUN_ID}-step{STEPS[-1]}" / "training_state.pt")
    assert document["input_sources"]["checkpoint"] == "training_state.pt"
    assert document["hypotheses"][0]["id"] == "vocab_mapping_mismatch"
    assert document["hypotheses"][0]["score"] >= 0.5
    vocab = document["checks"]["vocab_mapping"]
    expected = vocab_numbers(run.drafter_hot, run.run_hot)
    assert expected["positional_match"] < DRAFT_VOCAB // 2  # the data really differ
    for key, value in expected.items():
        assert vocab[key] == value, key
    assert (vocab["draft_vocab_size"], vocab["target_vocab_size"]) == (DRAFT_VOCAB, TARGET_VOCAB)


def test_specforge_020_healthy_control_scores_nothing(specforge_healthy, triage):
    run = specforge_healthy
    assert np.array_equal(run.drafter_hot, run.run_hot)
    result = triage("check", "--json", run.output)
    document = json.loads(result.stdout)
    assert result.returncode == 0, (result.stderr, [(h["id"], h["score"]) for h in document["hypotheses"]])
    assert all(h["score"] < 0.5 for h in document["hypotheses"])
    assert document["checks"]["vocab_mapping"]["positional_match"] == DRAFT_VOCAB


def test_specforge_020_step_dir_is_a_checkpoint_and_remap_writes_what_specforge_loads(
    specforge_buggy, tmp_path, triage
):
    import torch
    from safetensors.torch import load_file
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    from specforge.training.model_loading import warm_start_draft_model

    from builders.trainers import _draft_config

    run = specforge_buggy
    step_dir = run.output / f"{RUN_ID}-step{STEPS[0]}"
    result = triage("check", "--json", run.output, "--checkpoint", step_dir)
    assert result.returncode in (0, 1), result.stderr
    assert json.loads(result.stdout)["checks"]["vocab_mapping"]["status"] == "pass"  # the run's own buffers

    out = tmp_path / "remapped"
    result = triage("remap", run.drafter, "--mapping", step_dir / "training_state.pt", "--out", out, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verified"] is True

    # SpecForge 0.2.0's own warm start reads the output (the run's config, as the trainer passes it).
    model = LlamaForCausalLMEagle3(_draft_config())
    warm_start_draft_model(model, str(out), draft_config=_draft_config(), strategy="eagle3")
    source = load_file(str(run.drafter / "model.safetensors"))
    old_row = {int(t): i for i, t in enumerate(run.drafter_hot)}
    for position, token in enumerate(run.run_hot):
        if int(token) in old_row:  # every shared token's row moved bit for bit
            assert torch.equal(model.lm_head.weight[position], source["lm_head.weight"][old_row[int(token)]])
    assert np.array_equal(np.arange(DRAFT_VOCAB) + model.d2t.numpy(), run.run_hot)

    # The step directory itself (draft_state_dict inside training_state.pt) remaps too.
    result = triage("remap", step_dir, "--mapping", run.drafter, "--out", tmp_path / "back", "--json")
    assert result.returncode == 0, result.stderr


# ----------------------------------------------------------------- HF Trainer (and ModelOpt, which uses it)


def test_hf_trainer_output_dir_is_one_run(hf_output, triage):
    for given in (hf_output.parent, hf_output, hf_output / "runs", *sorted((hf_output / "runs").iterdir())):
        (info,) = discover_runs([given])
        assert info.path == hf_output
        assert [p.name for p in info.artifacts.checkpoints] == ["checkpoint-2", "checkpoint-4"]
    (scanned,) = json.loads(triage("scan", "--json", hf_output.parent).stdout)["runs"]
    assert (scanned["vocab_size"], scanned["vocab_size_source"]) == (256, "config.json")
    # checkpoint-4/trainer_state.json is read too, its series under trainer_state/: the event files lead.
    assert scanned["sources"] == ["tensorboard", "trainer_state"] and scanned["errors"] == []
    assert scanned["metrics"]["loss"]["tag"] == "train/loss"


def test_check_on_a_plain_language_model_run_has_nothing_to_check(hf_output, triage):
    """An HF Trainer LM run (no drafter): the drafter checks skip, saying why, and check exits 2;
    it used to exit 1 on the hidden-state check's "no fc.weight", a confident wrong answer."""
    result = triage("check", "--json", hf_output)
    assert result.returncode == 2, result.stdout
    (line,) = result.stderr.splitlines()
    assert "nothing was checked" in line and "not an EAGLE-3 drafter: no fc/midlayer weights" in line
    checks = json.loads(result.stdout)["checks"]
    for name in ("vocab_mapping", "hidden_state", "replay", "config_contract", "mapping_health"):
        assert checks[name]["status"] == "skipped"
        assert checks[name]["summary"] == "not an EAGLE-3 drafter: no fc/midlayer weights"
    assert all(check["status"] != "fail" for check in checks.values())


def test_every_point_tensorboards_accumulator_keeps_is_kept(hf_output, triage):
    """HF logs train/epoch twice at its last step; EventAccumulator keeps both, and so does `scalars`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (log_dir,) = (hf_output / "runs").iterdir()
    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    expected = {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}
    epoch_steps = [step for step, _ in expected["train/epoch"]]
    assert len(epoch_steps) > len(set(epoch_steps))  # the writer really logged a step twice

    result = triage("scalars", "--format", "json", log_dir)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)["tags"]
    assert set(got) == set(expected)
    for tag, points in expected.items():
        assert list(zip(got[tag]["steps"], got[tag]["values"], strict=True)) == [
            (s, pytest.approx(v)) for s, v in points
        ], tag


def test_a_runs_step_is_its_loss_series_step(tmp_path, triage):
    """tensorboardX: one stray tag at step 2**40 does not make the run's step 1099511.6M."""
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "run"))
    for step in range(0, 201, 20):
        writer.add_scalar("train/loss", 5.0 - step / 100, step)
    writer.add_scalar("debug/tokens_seen", 1.0, 2**40)
    writer.close()
    (scanned,) = json.loads(triage("scan", "--json", tmp_path).stdout)["runs"]
    assert scanned["metrics"]["loss"]["tag"] == "train/loss"
    assert scanned["last_step"] == 200


@pytest.mark.parametrize("writer_module", ["torch.utils.tensorboard", "tensorboardX"])
def test_add_scalars_series_are_each_their_own_series_named_as_tensorboard_does(tmp_path, writer_module, triage):
    """add_scalars("eval", {...}) writes tag `eval` into one sub-directory per key; every
    (sub-directory, tag) survives, named `<subdir>/<tag>`, with TensorBoard's own values."""
    import importlib

    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    SummaryWriter = importlib.import_module(writer_module).SummaryWriter
    log_dir = tmp_path / "out" / "runs"
    writer = SummaryWriter(str(log_dir))
    for step in range(0, 50, 10):
        writer.add_scalar("train/ploss_0", 6.9 - step / 100, step)
        writer.add_scalars("eval", {"ploss_0": 6.5 - step / 50, "acc_0": step / 1000}, step)
    writer.close()

    multiplexer = EventMultiplexer().AddRunsFromDirectory(str(log_dir))
    multiplexer.Reload()
    expected = {}
    for run_name, tags in multiplexer.Runs().items():
        for tag in tags["scalars"]:
            name = tag if run_name == "." else f"{run_name}/{tag}"
            expected[name] = [(e.step, e.value) for e in multiplexer.Scalars(run_name, tag)]
    # torch names the sub-directories eval_ploss_0/, tensorboardX eval/ploss_0/.
    subdir = "eval_{}" if writer_module.startswith("torch") else "eval/{}"
    assert set(expected) == {"train/ploss_0", subdir.format("ploss_0") + "/eval", subdir.format("acc_0") + "/eval"}

    for given in (log_dir, tmp_path / "out"):
        got = json.loads(triage("scalars", "--format", "json", given).stdout)["tags"]
        assert set(got) == set(expected)
        for name, points in expected.items():
            assert list(zip(got[name]["steps"], got[name]["values"], strict=True)) == [
                (s, pytest.approx(v)) for s, v in points
            ]
    rows = triage("scalars", log_dir).stdout.splitlines()
    assert sum(row.startswith(subdir.format("ploss_0") + "/eval,") for row in rows) == 5

    (scanned,) = json.loads(triage("scan", "--json", tmp_path).stdout)["runs"]
    assert scanned["metrics"]["loss"]["tag"] == "train/ploss_0"


def test_one_hash_for_one_mapping_file_in_check_and_remap(specforge_buggy, tmp_path, triage):
    import hashlib

    run = specforge_buggy
    file_digest = hashlib.sha256(run.mapping_file.read_bytes()).hexdigest()  # what sha256sum prints
    checked = triage("check", "--json", run.output, "--mapping", run.mapping_file)
    vocab = json.loads(checked.stdout)["checks"]["vocab_mapping"]
    assert (vocab["run_sha256"], vocab["run_sha256_of"]) == (file_digest, "file")
    remapped = triage("remap", run.drafter, "--mapping", run.mapping_file, "--out", tmp_path / "r", "--json")
    assert remapped.returncode == 0, remapped.stderr
    assert json.loads(remapped.stdout)["mapping_sha256"] == file_digest


def test_masked_averaging_chance_line_from_the_runs_loss_masks(specforge_buggy, tmp_path, triage):
    """SpecForge's ploss averages over every position, masked ones adding 0: a drafter at chance
    (uniform logits, SpecForge's own _compute_loss) reads valid_fraction x ln V, and that is the line
    drawn and compared once the run's dumps are known (triage.toml data)."""
    import shutil

    run = specforge_buggy
    (scanned,) = json.loads(triage("scan", "--json", run.output).stdout)["runs"]
    assert scanned["chance_basis"] == "ln V" and scanned["valid_fraction"] is None
    assert "assumed" in scanned["chance_convention"]  # nothing told the fraction: the convention is said

    copy = tmp_path / "work"
    shutil.copytree(run.work, copy, symlinks=True)
    (copy / "output" / "triage.toml").write_text('[run]\ndata = "../hidden_states"\n')
    (scanned,) = json.loads(triage("scan", "--json", copy / "output").stdout)["runs"]
    assert scanned["chance_basis"] == "valid_fraction × ln V"
    assert scanned["valid_fraction"] == pytest.approx(run.valid_fraction)
    assert str(copy / "hidden_states") in scanned["valid_fraction_source"]
    assert scanned["chance_loss"] == pytest.approx(run.valid_fraction * math.log(DRAFT_VOCAB))
    assert scanned["chance_loss"] == pytest.approx(run.plosses[-1], rel=1e-5)  # what a head at chance logs
    assert scanned["metrics"]["loss"]["last"] < math.log(DRAFT_VOCAB) * 0.96  # well below ln V ...
    assert "loss_at_chance" in {flag["kind"] for flag in scanned["flags"]}  # ... and still at chance
    line = triage("scan", copy / "output").stdout
    assert f"{run.valid_fraction:.3f} × ln {DRAFT_VOCAB} = " in line


def test_trainers_that_average_over_valid_positions_keep_ln_v(hf_output, triage):
    (scanned,) = json.loads(triage("scan", "--json", hf_output).stdout)["runs"]
    assert scanned["chance_basis"] == "ln V" and scanned["chance_loss"] == pytest.approx(math.log(256))
    assert "valid positions only" in scanned["chance_convention"]


# ----------------------------------------------------------------- speculators 0.9.0


@pytest.fixture(scope="session")
def speculators_output(tmp_path_factory):
    from builders.trainers import speculators_run

    return speculators_run(tmp_path_factory.mktemp("spec") / "k25")


def test_speculators_save_path_beside_log_dir_is_one_run_with_its_config_and_verifier(speculators_output, triage):
    run = speculators_output
    for given in (run.root.parent, run.root, run.root / "logs", run.root / "logs" / "k25-ft"):
        (info,) = discover_runs([given])
        assert info.path == run.root
        assert [p.name for p in info.artifacts.checkpoints] == ["0", "1"]
    (scanned,) = json.loads(triage("scan", "--json", run.root).stdout)["runs"]
    assert (scanned["vocab_size"], scanned["vocab_size_source"]) == (DRAFT_VOCAB, "config.json")
    assert scanned["chance_basis"] == "ln V" and scanned["trainer"] == "speculators"
    assert scanned["last_step"] == 19
    document = json.loads(triage("check", "--json", run.root).stdout)
    assert document["inputs"]["target"] == str(run.verifier)  # speculators_config.verifier.name_or_path
    assert document["inputs"]["mapping"] == str(run.data / f"t2d-{DRAFT_VOCAB}.npy")
    vocab = document["checks"]["vocab_mapping"]
    assert vocab["status"] == "pass" and vocab["positional_match"] == DRAFT_VOCAB  # the run's own, at its start


@pytest.fixture(scope="session")
def speculators_finetune_output(tmp_path_factory):
    from builders.trainers import speculators_finetune

    return speculators_finetune(tmp_path_factory.mktemp("spec-ft") / "k25")


def test_speculators_fine_tune_from_a_drafter_with_another_mapping_is_caught_from_its_run_yaml(
    speculators_finetune_output, triage
):
    """No flag: run.yaml (speculators' TrainConfig.save) names the starting drafter and the
    --data-path outside the run; the drafter's mapping and the run's differ, so check exits 1."""
    run = speculators_finetune_output
    assert (run.root / "checkpoints" / "run.yaml").is_file()
    expected = vocab_numbers(run.drafter_hot, run.run_hot)
    assert expected["positional_match"] < DRAFT_VOCAB // 2  # two different vocabularies, by construction
    result = triage("check", "--json", run.root)
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert document["inputs"]["checkpoint"] == str(run.drafter)
    assert document["inputs"]["mapping"] == str(run.data / f"d2t-{DRAFT_VOCAB}.npy")
    assert document["inputs"]["target"] == str(run.verifier)
    assert {document["input_sources"][k] for k in ("checkpoint", "mapping", "target")} == {"run.yaml"}
    vocab = document["checks"]["vocab_mapping"]
    assert vocab["status"] == "fail"
    assert {k: vocab[k] for k in expected} == expected
    assert document["hypotheses"][0]["id"] == "vocab_mapping_mismatch"
    assert document["hypotheses"][0]["score"] >= 0.5
