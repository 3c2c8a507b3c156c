"""Three causes in what a drafter export stores, each on files written as the tools write them, each
beside a healthy control that a detector reading one symptom alone would get wrong:

- ``dropped_tensors``: SpecForge's and speculators' own ``save_pretrained`` drafters, re-saved by a
  converter that skipped names (sharded, its index rewritten to agree); control: optional tensors
  (embed_tokens, t2d) left out, and a two-layer speculators drafter whose second layer has no hidden_norm.
- ``quantized_without_scales``: a drafter quantized to FP8 (torch.float8_e4m3fn) with ModelOpt's
  per-tensor and compressed-tensors' per-channel scales and their quantization_config; the fault is
  the same export with the scales not copied; control: the export with them (healthy, and the replay
  runs on it).
- ``rope_scaling_dropped``: a transformers-5 target with llama3 RoPE scaling (``rope_parameters``), a
  speculators drafter built from it the way its CLI builds the layer config (the scaling is lost);
  control: a drafter spelling the same scaling transformers-4's way (``rope_scaling``, ``type``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from builders.check_run import build_run
from builders.contracts import (
    edit_config,
    llama_target,
    specforge_drafter,
    speculators_drafter,
    vocab_mapping_file,
)
from builders.samples import copy_samples
from triage_tui.core.diagnose.checks.registry import CheckContext, run_checks
from triage_tui.core.diagnose.hypotheses.rank import rank_hypotheses

NEW = ("dropped_tensors", "quantized_without_scales", "rope_scaling_dropped")
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
SMALL_VOCAB, SMALL_DRAFT = 4096, 1024  # names and dtypes do not depend on the vocab sizes


def ranked(checkpoint: Path, target: Path | None = None) -> dict[str, tuple[int, float, tuple[str, ...]]]:
    """Every hypothesis by id: (rank, score, evidence), from the registered checks on these inputs."""
    results = run_checks(CheckContext(checkpoint=checkpoint, target=target, device="cpu"))
    hypotheses = rank_hypotheses(results)
    return {h.id: (i, h.score, h.evidence) for i, h in enumerate(hypotheses)}


def resave(source: Path, dest: Path, keep=lambda name: True, *, shards: int = 1, total_size: int | None = None):
    """A converter's output: ``source``'s tensors (those ``keep`` accepts) and config written again with
    safetensors, in ``shards`` files with an index that lists exactly what was written."""
    dest.mkdir(parents=True)
    state = {k: v for k, v in load_file(str(source / "model.safetensors")).items() if keep(k)}
    (dest / "config.json").write_text((source / "config.json").read_text())
    if shards == 1:
        save_file(state, str(dest / "model.safetensors"), metadata={"format": "pt"})
        return dest
    names = sorted(state)
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: state[n] for n in part}, str(dest / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    written = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total_size or written}, "weight_map": weight_map}
    (dest / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return dest


# --------------------------------------------------------------------------- dropped_tensors


@pytest.fixture(scope="module")
def specforge(tmp_path_factory) -> Path:
    """SpecForge's LlamaForCausalLMEagle3 with a mapping built from token counts, saved by save_pretrained."""
    root = tmp_path_factory.mktemp("sf")
    mapping = vocab_mapping_file(root / "mapping.pt", seed=0, vocab=SMALL_VOCAB, draft=SMALL_DRAFT)
    return specforge_drafter(root / "d", mapping=mapping, vocab=SMALL_VOCAB, draft=SMALL_DRAFT)


@pytest.fixture(scope="module")
def verifier(tmp_path_factory) -> Path:
    return llama_target(tmp_path_factory.mktemp("verifier") / "t", vocab=SMALL_VOCAB)


def test_a_converter_that_skipped_tensors_and_rewrote_the_index_is_named_first(specforge, tmp_path):
    dropped = ("midlayer.self_attn.k_proj.weight", "midlayer.post_attention_layernorm.weight")
    original = load_file(str(specforge / "model.safetensors"))
    size = sum(t.numel() * t.element_size() for t in original.values())
    out = resave(specforge, tmp_path / "converted", lambda n: n not in dropped, shards=2, total_size=size)
    hypotheses = ranked(out)
    rank, score, evidence = hypotheses["dropped_tensors"]
    assert rank == 0 and score >= 0.5, hypotheses
    assert all(name in evidence[0] for name in dropped) and evidence[0].startswith("2 of the 13 tensors")
    # the index agrees with its shards; only its total_size still counts what was dropped
    missing_bytes = sum(original[n].numel() * original[n].element_size() for n in dropped)
    assert any(f"{missing_bytes} bytes it no longer lists" in line for line in evidence)


def test_index_recounted_too_still_names_the_missing_tensors(specforge, tmp_path):
    out = resave(specforge, tmp_path / "c", lambda n: n != "midlayer.mlp.down_proj.weight", shards=3)
    rank, score, evidence = ranked(out)["dropped_tensors"]
    assert rank == 0 and score >= 0.5 and "midlayer.mlp.down_proj.weight" in evidence[0]
    assert not any("no longer lists" in line for line in evidence)


def speculators_mapping() -> dict[str, torch.Tensor]:
    """d2t and t2d by speculators' own build_vocab_mappings_from_distribution, as its train CLI builds them."""
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    counts = torch.bincount(torch.randint(0, SMALL_VOCAB, (20_000,), generator=torch.Generator().manual_seed(0)))
    d2t, t2d = build_vocab_mappings_from_distribution(
        token_freq_dict={i: int(c) for i, c in enumerate(counts.tolist()) if c},
        draft_vocab_size=SMALL_DRAFT,
        target_vocab_size=SMALL_VOCAB,
    )
    return {"d2t": d2t, "t2d": t2d}


def test_optional_tensors_left_out_are_not_evidence(verifier, tmp_path):
    """speculators saves embed_tokens and t2d; an export without them (SpecForge saves no embedding,
    ModelOpt no t2d) loads in both engines: nothing is dropped."""
    drafter = speculators_drafter(tmp_path / "spec", verifier, draft_vocab_size=SMALL_DRAFT, **speculators_mapping())
    stored = set(load_file(str(drafter / "model.safetensors")))
    assert {"embed_tokens.weight", "t2d"} <= stored  # what a template diff would call missing
    out = resave(drafter, tmp_path / "slim", lambda n: n not in ("embed_tokens.weight", "t2d", "d2t"))
    _, score, evidence = ranked(out)["dropped_tensors"]
    assert score < 0.5 and evidence[0].startswith("all 13 tensors")


def speculators_two_layers(root: Path, verifier: Path) -> Path:
    """speculators' Eagle3DraftModel with two decoder layers (its first layer class, then a plain
    decoder layer), saved with save_pretrained."""
    from transformers import AutoConfig, LlamaConfig

    from builders.trainers import speculators_layer_config, speculators_model

    one = speculators_layer_config(AutoConfig.from_pretrained(str(verifier))).to_dict()
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size")
    layer = LlamaConfig(**{k: one[k] for k in keys}, num_hidden_layers=2)
    torch.manual_seed(3)
    speculators_model(layer, verifier, SMALL_DRAFT, **speculators_mapping()).save_pretrained(str(root))
    return root


def test_a_second_speculators_layer_needs_no_hidden_norm_but_its_projections(verifier, tmp_path):
    drafter = speculators_two_layers(tmp_path / "two", verifier)
    stored = load_file(str(drafter / "model.safetensors"))
    assert "layers.1.mlp.down_proj.weight" in stored and "layers.1.hidden_norm.weight" not in stored
    _, score, _ = ranked(drafter)["dropped_tensors"]
    assert score < 0.5  # a detector asking every layer for hidden_norm would fire here
    out = resave(drafter, tmp_path / "cut", lambda n: not n.startswith("layers.1.mlp."))
    rank, score, evidence = ranked(out)["dropped_tensors"]
    assert rank == 0 and score >= 0.5
    assert "3 of the 22 tensors" in evidence[0] and "layers.1.mlp.gate_proj.weight" in evidence[0]


# --------------------------------------------------------------------------- quantized_without_scales

# ModelOpt's EAGLE exporter puts its hf_quant_config.json body into config.json (nvidia-modelopt 0.47.0
# modelopt/torch/export/plugins/hf_spec_export.py EagleExporter.export).
MODELOPT_FP8 = {
    "producer": {"name": "modelopt", "version": "0.47.0"},
    "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]},
}
# llm-compressor's FP8 scheme as compressed-tensors writes it into config.json.
COMPRESSED_TENSORS_FP8 = {
    "quant_method": "compressed-tensors",
    "format": "float-quantized",
    "quantization_status": "compressed",
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel", "dynamic": False},
            "input_activations": {
                "num_bits": 8,
                "type": "float",
                "symmetric": True,
                "strategy": "token",
                "dynamic": True,
            },
        }
    },
    "ignore": ["lm_head"],
    "kv_cache_scheme": None,
}


# transformers' FineGrainedFP8 config (DeepSeek-V3's release: 128 x 128 blocks; 16 for this tiny drafter).
BLOCK = 16
FINE_GRAINED_FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [16, 16]}


def quantized(name: str, tensor: torch.Tensor) -> bool:
    """The Linear layers the exporters quantize: fc and the decoder layer's projections (lm_head excluded)."""
    return tensor.dim() == 2 and name.endswith("_proj.weight") or name == "fc.weight"


def export_eight_bit(drafter: Path, *, per: str, scales: bool = True, config: dict | None, dtype=None):
    """Rewrite ``drafter`` in place as a quantizing exporter leaves it: each quantized layer's weight as
    8-bit codes (float8_e4m3fn by default) = weight / scale and the scale beside it: ``per`` "tensor"
    (ModelOpt: ``weight_scale`` [] and an ``input_scale``), "channel" (compressed-tensors: ``weight_scale``
    [out, 1]) or "block" (FineGrainedFP8: ``weight_scale_inv`` per BLOCK x BLOCK); ``config`` as
    quantization_config. ``scales=False``: a converter that copied the weights and not the scales."""
    dtype = dtype or torch.float8_e4m3fn
    top = torch.finfo(dtype).max if dtype.is_floating_point else torch.iinfo(dtype).max
    state = load_file(str(drafter / "model.safetensors"))
    out = {}
    for name, tensor in state.items():
        if not quantized(name, tensor):
            out[name] = tensor
            continue
        weight = tensor.float()
        stem = name.removesuffix(".weight")
        if per == "block":
            rows, cols = weight.shape
            padded = torch.nn.functional.pad(weight.abs(), (0, -cols % BLOCK, 0, -rows % BLOCK))
            grid = padded.reshape(padded.shape[0] // BLOCK, BLOCK, -1, BLOCK).amax(dim=(1, 3)) / top
            scale = grid.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:rows, :cols]
            stored = {f"{stem}.weight_scale_inv": grid}
        else:
            amax = weight.abs().amax(dim=1, keepdim=True) if per == "channel" else weight.abs().amax()
            scale = amax / top
            stored = {f"{stem}.weight_scale": scale.to(torch.bfloat16) if per == "channel" else scale}
            if per == "tensor":
                stored[f"{stem}.input_scale"] = torch.tensor(0.02)
        codes = (weight / scale.clamp_min(1e-12)).clamp(-top, top)
        out[name] = codes.to(dtype) if dtype.is_floating_point else codes.round().to(dtype)
        if scales:
            out.update(stored)
    save_file(out, str(drafter / "model.safetensors"), metadata={"format": "pt"})
    if config is not None:
        document = json.loads((drafter / "config.json").read_text())
        document["quantization_config"] = config
        (drafter / "config.json").write_text(json.dumps(document, indent=2))
    return drafter


def check_json(run: Path, triage) -> tuple[int, dict]:
    done = triage("check", run, "--json", "--device", "cpu")
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def scores(report: dict) -> dict[str, float]:
    return {h["id"]: h["score"] for h in report["hypotheses"]}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, float]:
    """sample_runs/healthy (a drafter trained to ~74 % top-1 on its own dumps) copied, and the replay's
    accuracy on its float drafter."""
    samples = copy_samples(tmp_path_factory.mktemp("samples") / "sample_runs", ("healthy",))
    run = samples / "healthy"
    status, report = check_json_once(run)
    assert status == 0, report["hypotheses"][:3]
    return run, report["checks"]["replay"]["accuracy_checkpoint_mapping"]


def check_json_once(run: Path) -> tuple[int, dict]:
    """``triage check RUN --json --device cpu`` for a module fixture (the triage fixture is per test)."""
    import contextlib
    import io

    from triage_tui import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(["check", str(run), "--json", "--device", "cpu"])
    return status, json.loads(out.getvalue())


@pytest.mark.parametrize(
    ("per", "config"), [("tensor", MODELOPT_FP8), ("channel", COMPRESSED_TENSORS_FP8), ("block", FINE_GRAINED_FP8)]
)
def test_fp8_with_its_scales_is_healthy_and_the_replay_runs_on_it(trained, tmp_path, triage, per, config):
    _, float_accuracy = trained
    run = copy_samples(tmp_path / "sample_runs", ("healthy",)) / "healthy"
    export_eight_bit(run / "epoch_0_step_200", per=per, config=config)
    status, report = check_json(run, triage)
    quantization, replay = report["checks"]["quantization"], report["checks"]["replay"]
    assert quantization["status"] == "pass" and quantization["eight_bit_weights"] == 8 and not quantization["unscaled"]
    assert replay["status"] == "pass" and replay["tokens"] > 0, replay["summary"]
    # FP8 codes times their scales are the trained weights to FP8's precision: the replay predicts as well
    assert float_accuracy > 0.5
    assert replay["accuracy_checkpoint_mapping"] == pytest.approx(float_accuracy, abs=0.05)
    assert status == 0 and max(scores(report).values()) < 0.5, report["hypotheses"][:3]


def test_the_trained_drafter_without_its_scales_predicts_nothing_and_is_named_first(trained, tmp_path, triage):
    _, float_accuracy = trained
    run = copy_samples(tmp_path / "sample_runs", ("healthy",)) / "healthy"
    export_eight_bit(run / "epoch_0_step_200", per="tensor", scales=False, config=MODELOPT_FP8)
    status, report = check_json(run, triage)
    top = report["hypotheses"][0]
    assert status == 1 and top["id"] == "quantized_without_scales" and top["score"] >= 0.5
    # the replay computes with the codes, as an engine without the scales does
    assert report["checks"]["replay"]["accuracy_checkpoint_mapping"] < float_accuracy - 0.3


def test_fp8_codes_without_their_scales_are_named_first(tmp_path, triage):
    run = build_run(tmp_path, story=False)
    export_eight_bit(tmp_path / "shared" / "drafters" / "k2", per="tensor", scales=False, config=MODELOPT_FP8)
    status, report = check_json(run, triage)
    top = report["hypotheses"][0]
    assert status == 1 and top["id"] == "quantized_without_scales" and top["score"] >= 0.5, report["hypotheses"][:3]
    assert top["evidence"][0].startswith("8 of 8 weights stored in 8 bits have no weight_scale")
    assert "fc.weight (F8_E4M3)" in top["evidence"][0]
    assert any("modelopt: FP8" in line for line in top["evidence"])
    assert any("codes reach 448 of the F8_E4M3 range's 448 (100%)" in line for line in top["evidence"])
    assert top["links"] and all(link.startswith("https://github.com/") for link in top["links"])


def test_int8_codes_without_scales_and_no_config_still_fire(specforge, tmp_path):
    drafter = resave(specforge, tmp_path / "int8")
    export_eight_bit(drafter, per="channel", scales=False, config=None, dtype=torch.int8)
    rank, score, evidence = ranked(drafter)["quantized_without_scales"]
    assert rank == 0 and score >= 0.5 and "(I8)" in evidence[0]
    assert any("codes reach 127 of the I8 range's 127" in line for line in evidence)


def test_where_tensors_were_dropped_too_the_missing_scales_rank_first(specforge, tmp_path):
    drafter = resave(specforge, tmp_path / "both", lambda n: n != "midlayer.mlp.up_proj.weight")
    export_eight_bit(drafter, per="tensor", scales=False, config=MODELOPT_FP8)
    hypotheses = ranked(drafter)
    assert hypotheses["quantized_without_scales"][0] < hypotheses["dropped_tensors"][0]
    assert hypotheses["quantized_without_scales"][1] > hypotheses["dropped_tensors"][1] >= 0.5
    assert "midlayer.mlp.up_proj.weight" in hypotheses["dropped_tensors"][2][0]


# --------------------------------------------------------------------------- rope_scaling_dropped


def scaled_target(root: Path, rope: dict) -> Path:
    """A Llama target saved by transformers 5 with RoPE scaling: config.json's ``rope_parameters``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    config = LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_hidden_layers=8,
        vocab_size=SMALL_VOCAB,
        max_position_embeddings=131072,
        rope_parameters={**rope, "rope_theta": 500000.0},
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(str(root))
    return root


def test_a_speculators_drafter_that_lost_the_targets_llama3_scaling(tmp_path):
    target = scaled_target(tmp_path / "target", LLAMA3)
    assert json.loads((target / "config.json").read_text())["rope_parameters"]["rope_type"] == "llama3"
    # speculators builds the drafter's layer config from the verifier's sizes; the scaling is not carried
    drafter = speculators_drafter(tmp_path / "drafter", target, draft_vocab_size=SMALL_DRAFT, **speculators_mapping())
    rank, score, evidence = ranked(drafter, target)["rope_scaling_dropped"]
    assert rank == 0 and score >= 0.5
    line = evidence[0]
    assert "target RoPE llama3 (factor 8, high_freq_factor 4, low_freq_factor 1" in line
    assert "drafter RoPE default" in line and "rope type: drafter default, target llama3" in line
    # speculators after PR #574 keeps the scaling in the layer's config: then nothing is dropped
    layer = json.loads((drafter / "config.json").read_text())["transformer_layer_config"]
    edit_config(drafter, transformer_layer_config={**layer, "rope_parameters": {**LLAMA3, "rope_theta": 500000.0}})
    _, score, evidence = ranked(drafter, target)["rope_scaling_dropped"]
    assert score < 0.5 and "from transformer_layer_config.rope_parameters" in evidence[0]


def test_the_same_scaling_spelled_the_transformers_4_way_is_not_evidence(specforge, tmp_path):
    """SpecForge's configs spell it ``rope_scaling`` with ``type`` and a top-level rope_theta; the
    target's transformers-5 config ``rope_parameters`` with ``rope_type`` and rope_theta inside."""
    target = scaled_target(tmp_path / "target", LLAMA3)
    drafter = resave(specforge, tmp_path / "drafter")
    old_spelling = {("type" if k == "rope_type" else k): v for k, v in LLAMA3.items()}
    edit_config(drafter, rope_scaling=old_spelling, rope_theta=500000.0, rope_parameters=None)
    _, score, evidence = ranked(drafter, target)["rope_scaling_dropped"]
    assert score < 0.5 and evidence[0].endswith("the same scaling")
    assert "drafter RoPE llama3" in evidence[0] and "from rope_scaling" in evidence[0]
    assert "target RoPE llama3" in evidence[0] and "from rope_parameters" in evidence[0]


def test_yarn_with_another_factor_shows_both_sides(specforge, tmp_path):
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    target = scaled_target(tmp_path / "target", yarn)
    drafter = resave(specforge, tmp_path / "drafter")
    edit_config(drafter, rope_scaling={**yarn, "factor": 2.0}, rope_parameters=None)
    hypotheses = ranked(drafter, target)
    rank, score, evidence = hypotheses["rope_scaling_dropped"]
    # This target is built apart from the drafter, so untrained_embeddings (0.7) rightly names the
    # drafter's own embedding too; of the rest, the RoPE scaling comes first.
    assert rank <= 1 and score >= 0.5 and "factor: drafter 2, target 4" in evidence[0]
    assert rank == 0 or hypotheses["untrained_embeddings"][0] == 0


# --------------------------------------------------------------------------- the committed sample runs


@pytest.mark.slow
def test_nothing_new_fires_on_the_sample_runs(tmp_path, triage):
    samples = copy_samples(tmp_path / "sample_runs")
    for run in sorted(p for p in samples.iterdir() if (p / "triage.toml").is_file()):
        _, report = check_json(run, triage)
        found = scores(report)
        assert set(NEW) <= set(found), run.name
        assert all(found[h] < 0.5 for h in NEW), (run.name, {h: found[h] for h in NEW})


def test_modelopts_own_export_holds_every_required_tensor(modelopt_exports, tmp_path):
    """nvidia-modelopt's EagleExporter (layers.0.*, d2t without t2d, no embedding) on an 8-layer target;
    then the same export with its first layer's post-attention norm left out by a converter."""
    root = modelopt_exports[8]
    hypotheses = ranked(root / "drafter", root / "target")
    assert all(hypotheses[h][1] < 0.5 for h in NEW), {h: hypotheses[h] for h in NEW}
    out = resave(root / "drafter", tmp_path / "cut", lambda n: n != "layers.0.post_attention_layernorm.weight")
    rank, score, evidence = ranked(out, root / "target")["dropped_tensors"]
    assert rank == 0 and score >= 0.5 and "1 of the 13 tensors a modelopt EAGLE-3 drafter" in evidence[0]
    assert "layers.0.post_attention_layernorm.weight" in evidence[0]


def test_a_config_asking_for_a_billion_layers_is_read_in_bounds(verifier, tmp_path):
    """num_hidden_layers is the file's number: the names asked for stop at MAX_LAYERS layers."""
    from triage_tui.core.diagnose.checks.drafter_tensors import MAX_LAYERS

    drafter = speculators_drafter(tmp_path / "d", verifier, draft_vocab_size=SMALL_DRAFT, **speculators_mapping())
    layer = json.loads((drafter / "config.json").read_text())["transformer_layer_config"]
    edit_config(drafter, transformer_layer_config={**layer, "num_hidden_layers": 10**9})
    _, score, evidence = ranked(drafter)["dropped_tensors"]
    assert score >= 0.5 and f"with {MAX_LAYERS} layer(s)" in evidence[0]
    assert f"{(MAX_LAYERS - 1) * 9} of the {13 + (MAX_LAYERS - 1) * 9} tensors" in evidence[0]
