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
from triage_tui.core.checks.quantization import QuantizationDetails
from triage_tui.core.checks.registry import CheckContext, run_checks
from triage_tui.core.hypotheses.rank import rank_hypotheses

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
