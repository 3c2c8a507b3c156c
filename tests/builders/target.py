"""Target models as the hub stores them: llama-shaped config.json and (sharded) safetensors, at the
story's vocab size (163 840), bf16 heads.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from builders.mappings import TARGET_VOCAB

HIDDEN, LAYERS = 64, 4


def target_tensors(seed: int = 0, prefix: str = "") -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        f"{prefix}model.embed_tokens.weight": torch.randn(TARGET_VOCAB, HIDDEN, generator=gen).to(torch.bfloat16),
        f"{prefix}lm_head.weight": torch.randn(TARGET_VOCAB, HIDDEN, generator=gen).to(torch.bfloat16),
        f"{prefix}model.norm.weight": torch.rand(HIDDEN, generator=gen).to(torch.bfloat16),
    }


def layer_tensors(prefix: str = "") -> dict[str, torch.Tensor]:
    return {f"{prefix}model.layers.{i}.mlp.down_proj.weight": torch.zeros(HIDDEN, 2 * HIDDEN) for i in range(LAYERS)}


def llama_config(**extra) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": TARGET_VOCAB,
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "tie_word_embeddings": False,
        **extra,
    }


def save_target(root: Path, tensors: dict[str, torch.Tensor], **config) -> Path:
    """A target directory as save_pretrained leaves it: config.json (llama's, sized from lm_head, with
    ``config``'s keys over it) and model.safetensors."""
    vocab, hidden = tensors["lm_head.weight"].shape
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(llama_config(vocab_size=vocab, hidden_size=hidden, **config)))
    save_file(tensors, str(root / "model.safetensors"), metadata={"format": "pt"})
    return root


def write_sharded(root: Path, shards: list[dict[str, torch.Tensor]], config: dict) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config))
    weight_map = {}
    for i, tensors in enumerate(shards, start=1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, str(root / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(tensors, name))
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return root
