"""The config/weights contract on drafters written by SpecForge's and speculators' own save_pretrained
and a target written by transformers (tests/builders/contracts.py says which function made what)."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file, save_file

from builders.contracts import (
    HIDDEN,
    TARGET_LAYERS,
    deepseek_target_dir,
    edit_config,
    llama_target,
    specforge_drafter,
    speculators_drafter,
)
from triage_tui.core.diagnose.checks.aux_layers import engine_default_ids, physical_layers
from triage_tui.core.diagnose.checks.config_contract import ConfigContractDetails, check_config_contract
from triage_tui.core.formats.checkpoint import read_checkpoint
from triage_tui.core.formats.target import read_target

# An 8-layer target: both engines default to ids (2, 4, 5) capture-before = outputs of [1, 3, 4].
DEFAULT_OUTPUTS = [1, 3, 4]
SMALL_VOCAB, SMALL_DRAFT = 4096, 1024  # the contract does not depend on the vocab sizes


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return read_target(llama_target(tmp_path_factory.mktemp("target") / "t", vocab=SMALL_VOCAB))


@pytest.fixture(scope="module")
def deepseek_target(tmp_path_factory):
    """An 8-layer DeepseekV3ForCausalLM saved by transformers: SGLang builds it with deepseek_v2.py."""
    return read_target(deepseek_target_dir(tmp_path_factory.mktemp("deepseek") / "t", vocab=SMALL_VOCAB))


def _drafter(root, **config):
    return read_checkpoint(specforge_drafter(root, mapping=None, vocab=SMALL_VOCAB, draft=SMALL_DRAFT, **config))


def _details(result) -> ConfigContractDetails:
    assert isinstance(result.details, ConfigContractDetails)
    return result.details


def test_engine_defaults_name_the_trainers_default_layers():
    assert engine_default_ids(TARGET_LAYERS) == (2, 4, 5)
    assert list(physical_layers(engine_default_ids(TARGET_LAYERS), "capture_before")) == DEFAULT_OUTPUTS
    assert physical_layers((1, 3, 4), "output_of") == (1, 3, 4)


def test_a_specforge_drafter_with_its_ids_keeps_the_contract(tmp_path, target):
    result = check_config_contract(
        _drafter(tmp_path / "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}), target
    )
    details = _details(result)
    assert result.status == "pass", details.findings
    assert details.findings == () and all(row.ok for row in details.rows)
    assert details.fc_in_features == 3 * HIDDEN and details.trained_layers == (1, 3, 4)
    # vLLM reads no eagle_config ids and falls back; its default is the same three layers here.
    assert {r.engine: list(r.layers) for r in details.engines} == {"vllm": DEFAULT_OUTPUTS, "sglang": DEFAULT_OUTPUTS}
    json.dumps(details.to_json())
    assert any("fc.weight in-features" in line for line in details.drilldown())


def test_four_aux_ids_for_a_three_layer_fc(tmp_path, target):
    result = check_config_contract(
        _drafter(tmp_path / "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4]}), target
    )
    details = _details(result)
    assert result.status == "fail" and "fc_width" in details.kinds()
    fc = next(f for f in details.findings if f.kind == "fc_width")
    assert f"reads {3 * HIDDEN} features, 4 aux layers" in fc.message and f"= {4 * HIDDEN}" in fc.message


def test_missing_ids_are_a_warning_naming_the_engines_default(tmp_path, target):
    result = check_config_contract(_drafter(tmp_path / "d"), target)
    details = _details(result)
    assert result.status == "pass" and details.kinds() == {"aux_layer_ids_missing"}
    (finding,) = details.findings
    assert finding.severity == "warning" and str(DEFAULT_OUTPUTS) in finding.message
    assert finding.link == "https://github.com/vllm-project/vllm/pull/50170"


def test_a_first_id_of_2_in_an_output_of_config_is_read_one_layer_off(tmp_path, target, deepseek_target):
    # SpecForge's hooks mean outputs of [2, 4, 5]. vLLM, finding no top-level ids, falls back to
    # outputs of [1, 3, 4]. SGLang's llama.py adds 1 to every id (outputs of [2, 4, 5]: right); its
    # deepseek_v2.py since PR #25454 reads ids not starting at 1 as capture-before (outputs of [1, 3, 4]).
    drafter = _drafter(tmp_path / "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 4, 5]})
    details = _details(check_config_contract(drafter, target))
    mismatches = {f.engine: f for f in details.findings if f.kind == "aux_layers_engine_mismatch"}
    assert set(mismatches) == {"vllm"}
    assert {r.engine: list(r.layers) for r in details.engines}["sglang"] == [2, 4, 5]
    result = check_config_contract(drafter, deepseek_target)
    mismatches = {f.engine: f for f in _details(result).findings if f.kind == "aux_layers_engine_mismatch"}
    assert set(mismatches) == {"vllm", "sglang"} and result.status == "fail"
    assert "[1, 3, 4]" in mismatches["sglang"].message and "[2, 4, 5]" in mismatches["sglang"].message
    assert "DeepseekV3ForCausalLM target" in mismatches["sglang"].message
    assert mismatches["sglang"].link == "https://github.com/sgl-project/sglang/pull/25454"


def test_without_a_target_sglang_reading_of_ids_not_starting_at_1_is_left_open(tmp_path):
    # Which SGLang model file builds the target decides: no finding for SGLang, the reason said.
    details = _details(
        check_config_contract(_drafter(tmp_path / "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 4, 5]}))
    )
    sglang = next(r for r in details.engines if r.engine == "sglang")
    assert sglang.layers is None and "the target decides" in sglang.source
    assert not any(f.engine == "sglang" for f in details.findings)


def test_ids_beyond_the_targets_depth(tmp_path, target):
    result = check_config_contract(
        _drafter(tmp_path / "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}), target
    )
    finding = next(f for f in _details(result).findings if f.kind == "aux_layer_out_of_range")
    assert "[29, 57]" in finding.message and f"{TARGET_LAYERS} layers" in finding.message


def test_draft_hidden_differs_from_the_targets_without_target_hidden_size(tmp_path, target):
    # An export that rewrote the config with another hidden size than the target's and no target_hidden_size.
    wide = tmp_path / "wide"
    specforge_drafter(wide, mapping=None, vocab=SMALL_VOCAB, draft=SMALL_DRAFT, hidden_size=2 * HIDDEN)
    details = _details(check_config_contract(read_checkpoint(wide), target))
    assert {"draft_hidden_mismatch", "fc_width"} <= details.kinds()
    declared = tmp_path / "declared"
    specforge_drafter(
        declared, mapping=None, vocab=SMALL_VOCAB, draft=SMALL_DRAFT, hidden_size=2 * HIDDEN, target_hidden_size=HIDDEN
    )
    details = _details(check_config_contract(read_checkpoint(declared), target))
    assert not {"draft_hidden_mismatch", "fc_width"} & details.kinds()


def test_config_sizes_that_disagree_with_the_tensors(tmp_path, target):
    root = specforge_drafter(tmp_path / "d", mapping=None, vocab=SMALL_VOCAB, draft=SMALL_DRAFT)
    edit_config(root, draft_vocab_size=2 * SMALL_DRAFT, target_hidden_size=2 * HIDDEN)
    details = _details(check_config_contract(read_checkpoint(root), target))
    assert {"draft_vocab_size_mismatch", "target_hidden_size_mismatch"} <= details.kinds()
    edit_config(root, draft_vocab_size=None, target_hidden_size=None)
    details = _details(check_config_contract(read_checkpoint(root), target))
    finding = next(f for f in details.findings if f.kind == "draft_vocab_size_missing")
    assert f"{SMALL_DRAFT} rows of a {SMALL_VOCAB}-token" in finding.message


def test_a_target_with_another_vocab_and_a_missing_lm_head(tmp_path):
    other = read_target(llama_target(tmp_path / "other", vocab=2 * SMALL_VOCAB))
    root = specforge_drafter(tmp_path / "d", mapping=None, vocab=SMALL_VOCAB, draft=SMALL_DRAFT)
    assert "target_vocab" in _details(check_config_contract(read_checkpoint(root), other)).kinds()
    state = load_file(str(root / "model.safetensors"))
    del state["lm_head.weight"]
    save_file(state, str(root / "model.safetensors"))
    details = _details(check_config_contract(read_checkpoint(root), other))
    assert "missing_lm_head" in details.kinds()


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    return llama_target(tmp_path_factory.mktemp("verifier") / "v", vocab=SMALL_VOCAB)


def test_speculators_norm_before_fc_with_its_weights(tmp_path, verifier):
    root = speculators_drafter(tmp_path / "d", verifier, norm_before_fc=True)
    checkpoint = read_checkpoint(root)
    assert checkpoint.layout == "speculators" and "input_norm.weight" in checkpoint.tensors
    result = check_config_contract(checkpoint, read_target(verifier))
    assert result.status == "pass", _details(result).findings
    # speculators' top-level ids [2, 4, 5] are read as-is by vLLM: outputs of [1, 3, 4].
    assert _details(result).trained_layers == tuple(DEFAULT_OUTPUTS)


def test_a_config_that_lost_norm_before_fc(tmp_path, verifier):
    root = speculators_drafter(tmp_path / "d", verifier, norm_before_fc=True)
    edit_config(root, norm_before_fc=None)  # an export that kept the weights and dropped the flag
    details = _details(check_config_contract(read_checkpoint(root), read_target(verifier)))
    finding = next(f for f in details.findings if f.kind == "weights_without_flag")
    assert "input_norm.weight [48]" in finding.message
    assert finding.link == "https://github.com/vllm-project/vllm/pull/38111"


def test_a_flag_whose_weights_were_not_saved(tmp_path, verifier):
    root = speculators_drafter(tmp_path / "d", verifier, norm_before_fc=True)
    state = load_file(str(root / "model.safetensors"))
    del state["input_norm.weight"]
    save_file(state, str(root / "model.safetensors"))
    details = _details(check_config_contract(read_checkpoint(root), read_target(verifier)))
    assert "flag_without_weights" in details.kinds()
    fc_norm = speculators_drafter(tmp_path / "fc", verifier, fc_norm=True)
    edit_config(fc_norm, norm_before_fc=True)
    details = _details(check_config_contract(read_checkpoint(fc_norm), read_target(verifier)))
    assert {"exclusive_flags", "flag_without_weights"} <= details.kinds()


def test_no_checkpoint_is_skipped():
    assert check_config_contract(None, None).status == "skipped"


def test_a_modelopt_export_for_a_two_layer_target_names_layers_it_has(modelopt_exports):
    # ModelOpt hooks the outputs of layers [0, 1] (default_eagle_aux_layer_ids(2)); its export keeps
    # layers.0.*, a frequency-ordered d2t and no t2d. SGLang adds 1 for a Llama target: outputs of
    # [0, 1], the layers trained on. Only vLLM, which reads no eagle_config ids, feeds others.
    root = modelopt_exports[2]
    checkpoint = read_checkpoint(root / "drafter")
    assert checkpoint.layout == "modelopt" and checkpoint.aux_layer_ids == (0, 1)
    assert "t2d" not in checkpoint.tensors and any(n.startswith("layers.0.") for n in checkpoint.tensors)
    hot = checkpoint.mapping.hot_ids
    assert checkpoint.draft_vocab_size == 1000 and (hot[1:] < hot[:-1]).any()  # frequency order, not sorted
    details = _details(check_config_contract(checkpoint, read_target(root / "target")))
    assert "aux_layer_out_of_range" not in details.kinds()
    assert details.trained_layers == (0, 1) and details.trained_convention == "output_of"
    assert {r.engine: r.layers for r in details.engines}["sglang"] == (0, 1)
    assert {(f.kind, f.engine) for f in details.findings} == {("aux_layers_engine_mismatch", "vllm")}


def test_a_modelopt_export_for_an_eight_layer_target_keeps_the_contract(modelopt_exports):
    # ids [1, 3, 4] = outputs of layers 1, N//2 - 1, N - 4: what both engines feed.
    root = modelopt_exports[8]
    checkpoint = read_checkpoint(root / "drafter")
    assert checkpoint.layout == "modelopt" and checkpoint.aux_layer_ids == (1, 3, 4)
    result = check_config_contract(checkpoint, read_target(root / "target"))
    details = _details(result)
    assert result.status == "pass" and details.findings == (), details.findings
    assert {r.engine: list(r.layers) for r in details.engines} == {"vllm": [1, 3, 4], "sglang": [1, 3, 4]}


def test_check_on_a_modelopt_export_is_no_false_alarm(modelopt_exports, tmp_path, triage):
    """`triage check` on ModelOpt's export, its own d2t as the run's mapping: nothing likely, exit 0."""
    root = modelopt_exports[2]
    run = tmp_path / "run"
    run.mkdir()
    done = triage(
        "check",
        run,
        "--checkpoint",
        root / "drafter",
        "--mapping",
        root / "drafter",
        "--target",
        root / "target",
        "--device",
        "cpu",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    contract = report["checks"]["config_contract"]
    assert contract["layout"] == "modelopt"
    assert "aux_layer_out_of_range" not in {issue["kind"] for issue in contract["issues"]}
    assert max(h["score"] for h in report["hypotheses"]) < 0.5


def _qwen3_drafter(root, verifier):
    """speculators' Eagle3DraftModel with a Qwen3 first layer (its train CLI's --draft-arch qwen3:
    a Qwen3Config layer config, Qwen3DecoderEagle3FirstLayer), saved with save_pretrained."""
    from transformers import Qwen3Config

    from builders.trainers import speculators_model

    layer = Qwen3Config(
        hidden_size=HIDDEN,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=HIDDEN // 2,
        vocab_size=SMALL_VOCAB,
        max_position_embeddings=64,
        num_hidden_layers=1,
    )
    speculators_model(layer, verifier, SMALL_VOCAB).save_pretrained(str(root))
    return root


def test_a_qwen3_layer_drafter_named_for_llama_is_built_as_another_backbone(tmp_path, verifier):
    from triage_tui.core.diagnose.hypotheses.rank import rank_hypotheses
    from triage_tui.core.diagnose.hypotheses.serving import ONE_ENGINE_UNKNOWN_SERVER, W_BACKBONE_FALLBACK

    root = _qwen3_drafter(tmp_path / "d", verifier)
    details = _details(check_config_contract(read_checkpoint(root), read_target(verifier)))
    assert details.backbone.trained_as == "qwen3" and "q_norm" in details.backbone.evidence
    # speculators' own config: vLLM builds its Qwen3 EAGLE-3 class (PR #43132); SGLang does not load it.
    assert {e.engine: e.builds for e in details.backbone.engines} == {"sglang": None, "vllm": "qwen3"}
    assert "backbone_fallback" not in details.kinds()
    # Converted for SGLang (architectures LlamaForCausalLMEagle3, the speculators keys dropped): both
    # engines build a Llama layer and load what fits, without the q/k norms the drafter trained with.
    edit_config(root, architectures=["LlamaForCausalLMEagle3"], speculators_model_type=None)
    result = check_config_contract(read_checkpoint(root), read_target(verifier))
    fallback = {f.engine: f for f in _details(result).findings if f.kind == "backbone_fallback"}
    assert set(fallback) == {"sglang", "vllm"} and result.status == "fail"
    assert "SGLang builds LlamaForCausalLMEagle3, a llama decoder layer" in fallback["sglang"].message
    assert fallback["sglang"].link == "https://github.com/vllm-project/speculators/issues/796"
    ranked = {h.id: h for h in rank_hypotheses({"config_contract": result})}
    two_engines = 1 - (1 - W_BACKBONE_FALLBACK * ONE_ENGINE_UNKNOWN_SERVER) ** 2
    assert ranked["backbone_fallback"].score == pytest.approx(two_engines)
    assert ranked["config_contract"].score < ranked["backbone_fallback"].score  # not counted twice


def test_a_target_that_rotates_interleaved(tmp_path, deepseek_target):
    from triage_tui.core.diagnose.checks.engine_build import read_rope
    from triage_tui.core.diagnose.hypotheses.rank import rank_hypotheses
    from triage_tui.core.diagnose.hypotheses.serving import W_ROPE_LAYOUT_INHERITED, W_ROPE_LAYOUT_OWN_CONFIG

    # transformers' DeepseekV3Config saves rope_interleave: true; SpecForge's draft layer rotates NeoX.
    result = check_config_contract(_drafter(tmp_path / "d"), deepseek_target)
    details = _details(result)
    assert (details.rope.target_layout, details.rope.target_layout_source) == ("interleaved", "rope_interleave: true")
    (finding,) = [f for f in details.findings if f.kind == "rope_layout_mismatch"]
    assert finding.severity == "warning" and finding.engine is None
    assert finding.link == "https://github.com/vllm-project/vllm/issues/53063"
    assert {h.id: h.score for h in rank_hypotheses({"config_contract": result})}["rope_layout"] == pytest.approx(
        W_ROPE_LAYOUT_OWN_CONFIG
    )
    # A DFlash drafter (ModelOpt's DFlashExporter config: DFlashDraftModel, dflash_config) is the case
    # vLLM's loader gave the target's layout until PR #54373.
    dflash = {"architectures": ["DFlashDraftModel"], "dflash_config": {"target_layer_ids": [1, 3]}, "rope_theta": 1e6}
    rope = read_rope(dflash, deepseek_target.config, deepseek_target.architectures)
    assert rope.drafter_family == "dflash" and rope.layouts_differ and rope.drafter_theta == 1e6
    # The same drafter stating interleaved (vLLM PR #54373's is_neox_style: false) agrees.
    assert not read_rope({**dflash, "is_neox_style": False}, deepseek_target.config).layouts_differ
    assert W_ROPE_LAYOUT_INHERITED > W_ROPE_LAYOUT_OWN_CONFIG
