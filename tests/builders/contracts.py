"""Drafters, mappings and runs for the config-contract and mapping-health checks, made by the
trainers' own code at real vocab sizes (32 000 draft ids of a 163 840-token target, the K2 shape).

- SpecForge 0.2.0: ``specforge.modeling.draft.llama3_eagle.LlamaForCausalLMEagle3`` with
  ``load_vocab_mapping`` and ``save_pretrained`` (the drafter directory: config.json +
  model.safetensors with its d2t/t2d buffers);
- the mapping: speculators' ``build_vocab_mappings_from_distribution`` saved in SpecForge's format;
- speculators 0.9.0: ``Eagle3DraftModel.from_training_args`` saved with ``save_pretrained``;
- the target: ``transformers.LlamaForCausalLM.save_pretrained``;
- the run's curves: ``torch.utils.tensorboard.SummaryWriter`` in ``<output_dir>/runs/`` beside the
  ``epoch_{e}_step_{s}/`` checkpoints, SpecForge classic's layout.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

TARGET_VOCAB = 163_840
DRAFT_VOCAB = 32_000
HIDDEN = 16
TARGET_LAYERS = 8


def specforge_config(*, vocab: int = TARGET_VOCAB, draft: int = DRAFT_VOCAB, **extra):
    from transformers import LlamaConfig

    config = LlamaConfig(
        hidden_size=HIDDEN,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_hidden_layers=1,
        vocab_size=vocab,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    config.draft_vocab_size = draft
    config.architectures = ["LlamaForCausalLMEagle3"]
    for key, value in extra.items():
        setattr(config, key, value)
    return config


def vocab_mapping_file(path: Path, *, seed: int, vocab: int = TARGET_VOCAB, draft: int = DRAFT_VOCAB) -> Path:
    """A mapping built from token counts by speculators' ``build_vocab_mappings_from_distribution``
    (most frequent ``draft`` tokens, sorted; the same rule as SpecForge's ``generate_vocab_mapping_file``,
    whose ``t2d = [i in used_tokens ...]`` list scan takes minutes at 163 840 x 32 000), saved as
    SpecForge's ``{"d2t", "t2d"}`` file with ``torch.save``, which ``load_vocab_mapping`` reads.
    Token counts are spread over the whole target vocab, so the draft vocab is too."""
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    rng = np.random.default_rng(seed)
    tokens, counts = np.unique(rng.integers(0, vocab, 100_000), return_counts=True)
    d2t, t2d = build_vocab_mappings_from_distribution(
        token_freq_dict=dict(zip(tokens.tolist(), counts.tolist(), strict=True)),
        draft_vocab_size=draft,
        target_vocab_size=vocab,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"d2t": d2t, "t2d": t2d}, path)
    return path


def specforge_drafter(
    root: Path, *, mapping: Path | None, seed: int = 0, target: Path | None = None, **config_extra
) -> Path:
    """``LlamaForCausalLMEagle3(config)``, the mapping loaded when given (else SpecForge's default
    buffers: d2t zeros, t2d all True), written by ``save_pretrained``. With ``target``, its embedding
    is the target's, loaded by SpecForge's own ``load_embedding`` as its trainer does."""
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3

    torch.manual_seed(seed)
    model = LlamaForCausalLMEagle3(specforge_config(**config_extra))
    if mapping is not None:
        model.load_vocab_mapping(str(mapping))
    if target is not None:
        with torch.no_grad():
            model.load_embedding(str(target))
    model.save_pretrained(str(root))
    return root


def hot_ids(mapping_file: Path) -> np.ndarray:
    d2t = torch.load(mapping_file, weights_only=True)["d2t"]
    return (np.arange(d2t.shape[0]) + d2t.numpy()).astype(np.int64)


def llama_target(root: Path, *, vocab: int = TARGET_VOCAB, layers: int = TARGET_LAYERS, hidden: int = HIDDEN) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    config = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_hidden_layers=layers,
        vocab_size=vocab,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(str(root))
    return root


def speculators_drafter(root: Path, verifier: Path, **kwargs) -> Path:
    """speculators' ``Eagle3DraftModel.from_training_args`` for a verifier saved by transformers, saved
    with ``save_pretrained`` (what its checkpointer calls); kwargs: norm_before_fc, fc_norm, ..."""
    from transformers import AutoConfig

    from builders.trainers import speculators_layer_config, speculators_model

    verifier_config = AutoConfig.from_pretrained(str(verifier))
    layer_config = speculators_layer_config(verifier_config)
    vocab = int(verifier_config.vocab_size)
    draft = kwargs.pop("draft_vocab_size", vocab)
    torch.manual_seed(2)
    model = speculators_model(layer_config, verifier, draft, **kwargs)
    model.save_pretrained(str(root))
    return root


def edit_config(root: Path, **changes) -> None:
    """Rewrite a drafter's config.json with keys set (None deletes), as an export script does."""
    path = root / "config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config, indent=2))


def log_curve(output: Path, steps: range, *, at_chance: bool, draft: int = DRAFT_VOCAB) -> None:
    """SpecForge classic's tags in <output_dir>/runs/: a loss stuck at ln(Vd) with accuracy at 1/Vd
    (``at_chance``), or one falling well below it."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(output / "runs"))
    for i, step in enumerate(steps):
        if at_chance:
            loss, acc = math.log(draft) - 0.001 * (i % 7), 1.0 / draft
        else:
            loss, acc = math.log(draft) * math.exp(-i / 10) + 1.0, 0.7 * (1 - math.exp(-i / 10))
        writer.add_scalar("train/ploss_0", loss, step)
        writer.add_scalar("train/acc_0", acc, step)
    writer.close()


def strip_mapping(root: Path) -> None:
    """Rewrite a drafter's model.safetensors without d2t/t2d, as an exporter that keeps the mapping in
    a side file does (NeMo Automodel PR #2447)."""
    from safetensors.torch import load_file, save_file

    state = {k: v for k, v in load_file(str(root / "model.safetensors")).items() if k not in ("d2t", "t2d")}
    save_file(state, str(root / "model.safetensors"))


def deepseek_target_dir(root: Path, *, vocab: int = TARGET_VOCAB, layers: int = TARGET_LAYERS) -> Path:
    """A tiny ``transformers.DeepseekV3ForCausalLM`` (MLA, two routed experts) saved with save_pretrained."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(1)
    config = DeepseekV3Config(
        hidden_size=HIDDEN,
        intermediate_size=32,
        moe_intermediate_size=16,
        num_attention_heads=2,
        num_key_value_heads=2,
        num_hidden_layers=layers,
        n_routed_experts=2,
        num_experts_per_tok=1,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        q_lora_rank=8,
        kv_lora_rank=8,
        qk_rope_head_dim=4,
        qk_nope_head_dim=4,
        v_head_dim=8,
        vocab_size=vocab,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    DeepseekV3ForCausalLM(config).save_pretrained(str(root))
    return root
