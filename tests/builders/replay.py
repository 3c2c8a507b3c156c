"""A small world where the replay's answer is known: synthetic text, a target whose head predicts it,
dumps written as SpecForge and speculators write them, and a drafter really trained on them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from builders.mappings import DRAFT_VOCAB, TARGET_VOCAB, story_mappings
from builders.target import save_target
from triage_tui.core.drafter import (
    DrafterConfig,
    Eagle3Drafter,
    draft_accuracy,
    shift_left,
    soft_cross_entropy,
    ttt_forward,
)

H = 64  # target and draft hidden size


SEQ = 96


N_TOKENS_USED = 300  # distinct tokens the synthetic text uses


TRAIN_STEPS = 100


class World:
    """The synthetic target, its text and its hidden states (deterministic from one seed)."""

    def __init__(self, seed: int = 0) -> None:
        self.checkpoint_mapping, self.run_mapping = story_mappings()
        g = torch.Generator().manual_seed(seed)
        self.embed = torch.randn(TARGET_VOCAB, H, generator=g) * 0.5
        self.lm_head = torch.randn(TARGET_VOCAB, H, generator=g)
        # log-normal spread, as real final-norm weights have: a forgotten norm changes the argmax
        self.final_norm = torch.exp(1.5 * torch.randn(H, generator=g))
        rng = np.random.default_rng(seed)
        # Tokens from the part of the checkpoint's vocab that the run's mapping puts elsewhere
        # (positions >= 252 are shared tokens at other positions in the story's mappings).
        positions = np.sort(rng.choice(np.arange(300, 25_000), N_TOKENS_USED, replace=False))
        self.tokens = self.checkpoint_mapping.hot_ids[positions]
        self.successor = rng.permutation(N_TOKENS_USED)
        # Post-norm last hidden of token x = the successor's lm_head row: its argmax is the successor.
        self.post_norm = self.lm_head[torch.as_tensor(self.tokens[self.successor])].clone()
        self.layers = [torch.randn(H, H, generator=g) / math.sqrt(H) for _ in range(3)]
        self.rng = rng

    def sequence(self, length: int = SEQ) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
        """(token index per position, aux hidden [T, 3H] rounded to bf16, post-norm hidden [T, H])."""
        idx = np.empty(length, dtype=np.int64)
        idx[0] = self.rng.integers(N_TOKENS_USED)
        for s in range(1, length):
            idx[s] = self.successor[idx[s - 1]] if self.rng.random() < 0.9 else self.rng.integers(N_TOKENS_USED)
        e = self.embed[torch.as_tensor(self.tokens[idx])]
        aux = torch.cat([torch.tanh(e @ layer) for layer in self.layers], -1).to(torch.bfloat16).float()
        return idx, aux, self.post_norm[torch.as_tensor(idx)]

    def ids(self, idx: np.ndarray) -> np.ndarray:
        return self.tokens[idx].astype(np.int64)


def drafter_config() -> DrafterConfig:
    return DrafterConfig(
        hidden_size=H,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        draft_vocab_size=DRAFT_VOCAB,
        target_vocab_size=TARGET_VOCAB,
        target_hidden_size=H,
        max_position_embeddings=512,
        aux_layer_ids=(1, 15, 28),
    )


def train_drafter(world: World) -> tuple[Eagle3Drafter, list[float]]:
    """SpecForge's step-0 objective under the checkpoint's mapping; returns the drafter and its acc log."""
    torch.manual_seed(0)
    drafter = Eagle3Drafter(drafter_config())
    mapping = world.checkpoint_mapping
    hot = torch.as_tensor(np.array(mapping.hot_ids))
    with torch.no_grad():
        drafter.d2t.copy_(torch.as_tensor(mapping.d2t()))
        drafter.t2d.copy_(torch.as_tensor(mapping.t2d()))
        # speculators main: the draft head starts as the verifier's rows of the draft vocab
        # (lm_head.weight[t2d]) and stays frozen (src/speculators/model.py); it ties row i to
        # target token hot_ids[i], which is what a mapping mix-up breaks.
        drafter.lm_head.weight.copy_(world.lm_head[hot])
    drafter.lm_head.weight.requires_grad_(False)
    # target_p of each token over the draft vocab in t2d order ("compact teacher": only the
    # draft rows of the target head; every argmax here is inside the draft vocab).
    teacher = torch.softmax(world.post_norm @ world.lm_head[hot].T, -1)
    optimizer = torch.optim.Adam([p for p in drafter.parameters() if p.requires_grad], lr=1e-2)
    accs = []
    for _ in range(TRAIN_STEPS):
        batch = [world.sequence(32) for _ in range(4)]
        idx = torch.as_tensor(np.stack([b[0] for b in batch]))
        ids = torch.as_tensor(np.stack([world.ids(b[0]) for b in batch]))
        aux = torch.stack([b[1] for b in batch])
        logits = ttt_forward(drafter, world.embed, ids, aux, steps=1)[0]
        target_p = teacher[shift_left(idx, 1)]  # position t is supervised by the target at t+1
        mask = torch.ones(idx.shape)
        mask[:, -1] = 0
        loss = soft_cross_entropy(logits, target_p, mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        accs.append(draft_accuracy(logits, target_p, mask, mask))
    return drafter.eval(), accs


def write_target(world: World, root: Path) -> Path:
    """The world's target: its embedding, final norm and head (32 layers: the aux ids fit inside)."""
    tensors = {
        "model.embed_tokens.weight": world.embed,
        "lm_head.weight": world.lm_head,
        "model.norm.weight": world.final_norm,
    }
    return save_target(
        root, tensors, num_hidden_layers=32, rms_norm_eps=1e-6, intermediate_size=128, num_attention_heads=4
    )


def write_specforge_dumps(world: World, root: Path, samples: int, *, aux_chunks: int = 3) -> Path:
    """``scripts/prepare_hidden_states.py`` layout: rows_{g}-{g+n}/data_{i}.ckpt, bf16 states."""
    group = root / f"rows_0-{samples}"
    group.mkdir(parents=True)
    for i in range(samples):
        idx, aux, post = world.sequence()
        loss_mask = torch.ones(SEQ, dtype=torch.int64)
        loss_mask[:8] = 0  # a "prompt" the loss skips
        torch.save(
            {
                "input_ids": torch.as_tensor(world.ids(idx)),
                "loss_mask": loss_mask,
                "hidden_state": post[None].to(torch.bfloat16),
                "aux_hidden_state": aux[None, :, : aux_chunks * H].to(torch.bfloat16),
            },
            group / f"data_{i}.ckpt",
        )
    return root


def write_speculators_dumps(world: World, root: Path, samples: int) -> Path:
    """speculators offline layout: hs_{i}.safetensors with token_ids [T] and hidden_states [T, 4, H],
    the last slot the verifier's pre-norm last hidden."""
    root.mkdir(parents=True)
    for i in range(samples):
        idx, aux, post = world.sequence()
        # pre-norm state whose RMSNorm * final_norm points the same way as the post-norm one
        pre = post / world.final_norm * 3.0
        states = torch.cat([aux.view(SEQ, 3, H), pre[:, None]], 1)
        save_file(
            {"token_ids": torch.as_tensor(world.ids(idx)), "hidden_states": states.contiguous()},
            str(root / f"hs_{i}.safetensors"),
        )
    return root


def write_specforge_checkpoint(drafter: Eagle3Drafter, root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(drafter.config.to_config()))
    save_file({k: v.contiguous() for k, v in drafter.state_dict().items()}, str(root / "model.safetensors"))
    return root


def write_speculators_checkpoint(drafter: Eagle3Drafter, world: World, root: Path) -> Path:
    """``layers.0.*`` names, the embedding saved, nested transformer_layer_config."""
    root.mkdir(parents=True)
    c = drafter.config
    (root / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Eagle3Speculator"],
                "speculators_model_type": "eagle3",
                "draft_vocab_size": c.draft_vocab_size,
                "target_hidden_size": c.target_hidden_size,
                "eagle_aux_hidden_state_layer_ids": list(c.aux_layer_ids),
                "transformer_layer_config": {
                    "hidden_size": c.hidden_size,
                    "intermediate_size": c.intermediate_size,
                    "num_attention_heads": c.num_attention_heads,
                    "num_key_value_heads": c.num_key_value_heads,
                    "head_dim": c.head_dim,
                    "rms_norm_eps": c.rms_norm_eps,
                    "vocab_size": c.target_vocab_size,
                    "max_position_embeddings": c.max_position_embeddings,
                },
            }
        )
    )
    tensors = {k.replace("midlayer.", "layers.0."): v.contiguous() for k, v in drafter.state_dict().items()}
    tensors["embed_tokens.weight"] = world.embed
    save_file(tensors, str(root / "model.safetensors"))
    return root
