"""EAGLE-3 drafter checkpoints as the trainers save them: state dicts and configs per layout, written
through safetensors (save_pretrained), torch.save (EAGLE's pytorch_model.bin) or shards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from builders.mappings import DRAFT_VOCAB, TARGET_VOCAB
from triage_tui.core.drafter import DrafterConfig, Eagle3Drafter
from triage_tui.core.vocab import VocabMapping

HIDDEN = 64


HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 4, 2, 16, 128


SPECFORGE_AUX = [1, 29, 57]  # output-of-layer convention (sglang/SpecForge)


SPECULATORS_AUX = [2, 30, 58]  # capture-before convention (vLLM/speculators)


def drafter_state(
    layout: str,
    mapping: VocabMapping | None,
    *,
    hidden: int = HIDDEN,
    target_hidden: int | None = None,
    draft_vocab: int = DRAFT_VOCAB,
    target_vocab: int = TARGET_VOCAB,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """A one-layer EAGLE-3 drafter state dict with every key the layout saves."""
    gen = torch.Generator().manual_seed(seed)
    target_hidden = target_hidden or hidden
    prefix = "layers.0." if layout == "speculators" else "midlayer."

    def rand(*shape):
        return torch.randn(*shape, generator=gen) * 0.02

    state = {
        "fc.weight": rand(hidden, 3 * target_hidden),
        f"{prefix}self_attn.q_proj.weight": rand(HEADS * HEAD_DIM, 2 * hidden),
        f"{prefix}self_attn.k_proj.weight": rand(KV_HEADS * HEAD_DIM, 2 * hidden),
        f"{prefix}self_attn.v_proj.weight": rand(KV_HEADS * HEAD_DIM, 2 * hidden),
        f"{prefix}self_attn.o_proj.weight": rand(hidden, HEADS * HEAD_DIM),
        f"{prefix}mlp.gate_proj.weight": rand(INTERMEDIATE, hidden),
        f"{prefix}mlp.up_proj.weight": rand(INTERMEDIATE, hidden),
        f"{prefix}mlp.down_proj.weight": rand(hidden, INTERMEDIATE),
        f"{prefix}hidden_norm.weight": torch.ones(hidden),
        f"{prefix}input_layernorm.weight": torch.ones(hidden),
        f"{prefix}post_attention_layernorm.weight": torch.ones(hidden),
        "norm.weight": torch.ones(hidden),
        "lm_head.weight": rand(draft_vocab, hidden),
    }
    if mapping is not None:
        state["d2t"] = torch.from_numpy(mapping.d2t().copy())
        if layout != "modelopt":  # modelopt exports no t2d (hf_spec_export.py)
            state["t2d"] = torch.from_numpy(mapping.t2d())
    if layout == "speculators":  # speculators saves its (frozen) embedding
        state["embed_tokens.weight"] = rand(target_vocab, hidden).to(torch.bfloat16)
    return state


def drafter_config(
    layout: str,
    *,
    hidden: int = HIDDEN,
    draft_vocab: int = DRAFT_VOCAB,
    target_vocab: int = TARGET_VOCAB,
    target_hidden: int | None = None,
) -> dict:
    llama = {
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": INTERMEDIATE,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "num_hidden_layers": 1,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-05,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "vocab_size": target_vocab,
    }
    if layout == "speculators":  # src/speculators/models/eagle3/config.py
        return {
            "architectures": ["Eagle3Speculator"],
            "speculators_model_type": "eagle3",
            "speculators_version": "0.3.0",
            "draft_vocab_size": draft_vocab,
            "norm_before_residual": False,
            "target_hidden_size": target_hidden,
            "eagle_aux_hidden_state_layer_ids": SPECULATORS_AUX,
            "transformer_layer_config": llama,
            "speculators_config": {
                "algorithm": "eagle3",
                "default_proposal_method": "greedy",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                "verifier": {"name_or_path": "target", "architectures": ["LlamaForCausalLM"]},
            },
        }
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMEagle3"],
        **llama,
        "torch_dtype": "float32",
        "draft_vocab_size": draft_vocab,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": SPECFORGE_AUX},
    }
    if target_hidden is not None:
        config["target_hidden_size"] = target_hidden
    if layout == "modelopt":  # modelopt export template eagle_config
        config["eagle_config"].update(
            use_aux_hidden_state=True,
            use_input_layernorm_in_first_layer=True,
            use_last_layernorm=True,
            use_mtp_layernorm=False,
        )
    return config


def write_drafter(
    directory: Path, state: dict[str, torch.Tensor], config: dict | None, *, file_kind: str = "safetensors"
) -> Path:
    """Write like the real tools: save_pretrained (safetensors), EAGLE (pytorch_model.bin), or sharded."""
    directory.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (directory / "config.json").write_text(json.dumps(config, indent=2))
    if file_kind == "safetensors":
        save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    elif file_kind == "bin":
        torch.save(state, directory / "pytorch_model.bin")
    elif file_kind == "sharded":
        names = sorted(state)
        halves = (names[: len(names) // 2], names[len(names) // 2 :])
        weight_map = {}
        for i, part in enumerate(halves, start=1):
            shard = f"model-{i:05d}-of-00002.safetensors"
            save_file({n: state[n] for n in part}, str(directory / shard), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(part, shard))
        total = sum(t.numel() * t.element_size() for t in state.values())
        (directory / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
        )
    else:
        raise ValueError(file_kind)
    return directory


def write_eagle3_drafter(
    directory: Path,
    hot_ids: np.ndarray,
    *,
    seed: int = 0,
    rms_norm_eps: float = 1e-6,
    aux_layer_ids: tuple[int, ...] | None = None,
) -> Path:
    """A real Eagle3Drafter (this package's own module, as SpecForge builds it) at draft vocab 32 000 /
    target 163 840, its d2t/t2d the mapping ``hot_ids`` gives, saved as SpecForge does."""
    config = DrafterConfig(
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        intermediate_size=INTERMEDIATE,
        rms_norm_eps=rms_norm_eps,
        rope_theta=10000.0,
        draft_vocab_size=DRAFT_VOCAB,
        target_vocab_size=TARGET_VOCAB,
        target_hidden_size=HIDDEN,
        max_position_embeddings=512,
        aux_layer_ids=aux_layer_ids,
    )
    torch.manual_seed(seed)
    model = Eagle3Drafter(config)
    hot = torch.tensor(np.array(hot_ids), dtype=torch.int64)
    with torch.no_grad():
        model.d2t.copy_(hot - torch.arange(DRAFT_VOCAB))
        model.t2d.zero_()
        model.t2d[hot] = True
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config.to_config(), indent=2))
    return directory
