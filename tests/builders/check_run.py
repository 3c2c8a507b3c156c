"""A whole run for ``triage check``: a drafter, its target, the run's mapping, hidden-state dumps and
event files, the story's (labels through another mapping than the drafter's) or a healthy one.
"""

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch.utils.tensorboard import SummaryWriter

from builders.mappings import DRAFT_VOCAB, TARGET_VOCAB, story_mappings
from triage_tui.core.drafter import DrafterConfig, Eagle3Drafter

HIDDEN = 64


LAYERS = 8


TOKENS = 48


def write_drafter(root: Path, hot_ids: np.ndarray) -> Path:
    config = DrafterConfig(
        hidden_size=HIDDEN,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        draft_vocab_size=DRAFT_VOCAB,
        target_vocab_size=TARGET_VOCAB,
        target_hidden_size=HIDDEN,
        max_position_embeddings=512,
        aux_layer_ids=(1, 3, 4),
    )
    torch.manual_seed(0)
    state = {k: v.contiguous() for k, v in Eagle3Drafter(config).state_dict().items()}
    state["d2t"] = torch.from_numpy(hot_ids - np.arange(DRAFT_VOCAB))
    t2d = torch.zeros(TARGET_VOCAB, dtype=torch.bool)
    t2d[torch.from_numpy(hot_ids.copy())] = True
    state["t2d"] = t2d
    root.mkdir(parents=True)
    save_file(state, str(root / "model.safetensors"))
    (root / "config.json").write_text(json.dumps(config.to_config()))
    return root


def write_target(root: Path) -> Path:
    root.mkdir(parents=True)
    generator = torch.Generator().manual_seed(1)
    save_file(
        {
            "model.embed_tokens.weight": torch.randn(TARGET_VOCAB, HIDDEN, generator=generator).bfloat16(),
            "lm_head.weight": torch.randn(TARGET_VOCAB, HIDDEN, generator=generator).bfloat16(),
            "model.norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        },
        str(root / "model.safetensors"),
    )
    (root / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "vocab_size": TARGET_VOCAB,
                "hidden_size": HIDDEN,
                "num_hidden_layers": LAYERS,
                "tie_word_embeddings": False,
                "rms_norm_eps": 1e-5,
            }
        )
    )
    return root


def write_mapping(path: Path, hot_ids: np.ndarray) -> Path:
    """SpecForge cache/vocab_mapping/<key>.pt (specforge/data/preprocessing.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    t2d = torch.zeros(TARGET_VOCAB, dtype=torch.bool)
    t2d[torch.from_numpy(hot_ids.copy())] = True
    torch.save({"d2t": torch.from_numpy(hot_ids - np.arange(DRAFT_VOCAB)), "t2d": t2d}, path)
    return path


def write_dumps(root: Path, run_hot_ids: np.ndarray, target: Path, files: int = 2) -> Path:
    """SpecForge prepare_hidden_states.py files; the last hidden points at a next token in the run's vocab,
    as a target whose argmax the run's mapping was built from would."""
    from safetensors import safe_open

    with safe_open(str(target / "model.safetensors"), "pt") as weights:
        head = weights.get_tensor("lm_head.weight").float()
    group = root / f"rows_0-{files}"
    group.mkdir(parents=True)
    generator = torch.Generator().manual_seed(5)
    for i in range(files):
        ids = torch.from_numpy(np.random.default_rng(i).choice(run_hot_ids, TOKENS))
        aux = torch.cat([s * torch.randn(TOKENS, HIDDEN, generator=generator) for s in (1.0, 2.0, 4.0)], -1)
        last = head[torch.roll(ids, -1)]
        torch.save(
            {
                "input_ids": ids,
                "loss_mask": torch.ones(TOKENS, dtype=torch.int64),
                "hidden_state": last[None].bfloat16(),
                "aux_hidden_state": aux[None].bfloat16(),
            },
            group / f"data_{i}.ckpt",
        )
    return root


def write_events(log_dir: Path, losses, accuracies) -> None:
    writer = SummaryWriter(log_dir=str(log_dir))
    for i, (loss, acc) in enumerate(zip(losses, accuracies, strict=True)):
        writer.add_scalar("train/ploss_0", loss, global_step=50 * (i + 1))
        writer.add_scalar("train/acc_0", acc, global_step=50 * (i + 1))
    writer.close()


def build_run(tmp: Path, *, story: bool) -> Path:
    """A fine-tune directory: the story's (mappings disagree, loss 19) or a healthy one (same mapping)."""
    checkpoint_mapping, run_mapping = story_mappings()
    run_hot = run_mapping.hot_ids if story else checkpoint_mapping.hot_ids
    shared = tmp / "shared"
    if not shared.exists():
        write_drafter(shared / "drafters" / "k2", checkpoint_mapping.hot_ids)
        write_target(shared / "target")
    run = tmp / ("story" if story else "healthy")
    write_mapping(run / "cache" / "vocab_mapping" / "3f9a.pt", run_hot)
    write_dumps(run / "hidden_states", run_hot, shared / "target")
    (run / "triage.toml").write_text(
        '[run]\nvocab_size = 32000\ncheckpoint = "../shared/drafters/k2"\n'
        'mapping = "cache/vocab_mapping/3f9a.pt"\ndata = "hidden_states"\ntarget = "../shared/target"\n'
    )
    points = 30
    if story:  # docs/case.md: loss 18-20, accuracy 2-7 %
        losses = 19.0 + 0.8 * np.sin(np.arange(points))
        accuracies = 0.045 + 0.02 * np.cos(np.arange(points))
    else:
        losses = 2.0 + 4.0 * np.exp(-np.arange(points) / 8)
        accuracies = 0.7 - 0.4 * np.exp(-np.arange(points) / 8)
    write_events(run / "runs", losses, accuracies)
    return run
