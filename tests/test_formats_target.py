"""read_target on target-model directories written with save_file / torch.save, at the story's vocab size."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from builders.mappings import TARGET_VOCAB
from builders.target import HIDDEN, LAYERS, layer_tensors, llama_config, target_tensors, write_sharded
from triage_tui.core.errors import BadInput
from triage_tui.core.formats.target import read_target


@pytest.fixture(scope="module")
def wanted():
    return target_tensors()


def test_sharded_target_opens_only_the_shards_it_needs(tmp_path, wanted):
    embed_and_norm = {k: v for k, v in wanted.items() if "lm_head" not in k}
    write_sharded(
        tmp_path, [embed_and_norm, layer_tensors(), {"lm_head.weight": wanted["lm_head.weight"]}], llama_config()
    )
    # The layer shard is never opened: garbage there must not matter.
    (tmp_path / "model-00002-of-00003.safetensors").write_bytes(b"\xff" * 100)
    target = read_target(tmp_path)
    assert (target.vocab_size, target.hidden_size, target.num_layers, target.tied) == (
        TARGET_VOCAB,
        HIDDEN,
        LAYERS,
        False,
    )
    assert torch.equal(target.embed_tokens(), wanted["model.embed_tokens.weight"])
    assert torch.equal(target.lm_head(), wanted["lm_head.weight"])
    assert torch.equal(target.final_norm(), wanted["model.norm.weight"])
    assert target.embed_tokens().dtype == torch.bfloat16  # as stored


def test_single_file_and_tied_head(tmp_path, wanted):
    tensors = {k: v for k, v in wanted.items() if "lm_head" not in k}
    tmp_path.joinpath("config.json").write_text(json.dumps(llama_config(tie_word_embeddings=True)))
    save_file({**tensors, **layer_tensors()}, str(tmp_path / "model.safetensors"))
    target = read_target(tmp_path)
    assert target.tied and torch.equal(target.lm_head(), wanted["model.embed_tokens.weight"])


def test_missing_head_without_tie_flag_is_tied(tmp_path, wanted):
    config = llama_config()
    del config["tie_word_embeddings"]  # transformers defaults to True
    tmp_path.joinpath("config.json").write_text(json.dumps(config))
    save_file({k: v for k, v in wanted.items() if "lm_head" not in k}, str(tmp_path / "model.safetensors"))
    assert read_target(tmp_path).tied


def test_missing_head_with_tie_false_is_bad_input(tmp_path, wanted):
    tmp_path.joinpath("config.json").write_text(json.dumps(llama_config()))
    save_file({k: v for k, v in wanted.items() if "lm_head" not in k}, str(tmp_path / "model.safetensors"))
    with pytest.raises(BadInput, match="no lm_head.weight and config.json says tie_word_embeddings is false"):
        read_target(tmp_path)


def test_multimodal_wrapper_with_mtp_layer(tmp_path, wanted):
    # Kimi-K2.5 style: text_config nested, language_model. prefix, an MTP layer with its own embed copy
    tensors = {f"language_model.{k}": v for k, v in wanted.items()}
    tensors["language_model.model.layers.4.embed_tokens.weight"] = torch.zeros(
        TARGET_VOCAB, HIDDEN, dtype=torch.bfloat16
    )
    tensors["vision_tower.encoder.norm.weight"] = torch.ones(32)
    config = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": llama_config()}
    write_sharded(tmp_path, [tensors], config)
    target = read_target(tmp_path)
    assert target.tensor_names == {
        "embed_tokens": "language_model.model.embed_tokens.weight",
        "lm_head": "language_model.lm_head.weight",
        "norm": "language_model.model.norm.weight",
    }
    assert torch.equal(target.embed_tokens(), wanted["model.embed_tokens.weight"])


def test_pytorch_model_bin_target(tmp_path, wanted):
    tmp_path.joinpath("config.json").write_text(json.dumps(llama_config()))
    torch.save(dict(wanted), tmp_path / "pytorch_model.bin")
    target = read_target(tmp_path)
    assert torch.equal(target.lm_head(), wanted["lm_head.weight"])


def test_no_final_norm(tmp_path, wanted):
    tmp_path.joinpath("config.json").write_text(json.dumps(llama_config()))
    save_file({k: v for k, v in wanted.items() if "norm" not in k}, str(tmp_path / "model.safetensors"))
    assert read_target(tmp_path).final_norm() is None


@pytest.mark.parametrize(
    "config, tensors_fn, message",
    [
        (
            llama_config(vocab_size=151_936),
            lambda w: w,
            r"'model.embed_tokens.weight' has shape \[163840, 64\]; config.json implies \[151936, 64\]",
        ),
        (
            llama_config(),
            lambda w: {**w, "lm_head.weight": w["lm_head.weight"][:, :32].contiguous()},
            r"'lm_head.weight' has shape \[163840, 32\]",
        ),
        (llama_config(), lambda w: {k: v for k, v in w.items() if "embed" not in k}, "no model.embed_tokens.weight"),
        (
            {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS},
            lambda w: w,
            r"config.json: no usable vocab_size \(found None\)",
        ),
    ],
)
def test_bad_targets(tmp_path, wanted, config, tensors_fn, message):
    tmp_path.joinpath("config.json").write_text(json.dumps(config))
    save_file(tensors_fn(dict(wanted)), str(tmp_path / "model.safetensors"))
    with pytest.raises(BadInput, match=message):
        read_target(tmp_path)


def test_no_config(tmp_path, wanted):
    save_file(dict(wanted), str(tmp_path / "model.safetensors"))
    with pytest.raises(BadInput, match="no config.json"):
        read_target(tmp_path)
