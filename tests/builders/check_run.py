"""A whole run for ``triage check``: a drafter, its target, the run's mapping, hidden-state dumps and
event files, the story's (labels through another mapping than the drafter's) or a healthy one.
"""

from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter

from builders.drafter import write_eagle3_drafter
from builders.mappings import TARGET_VOCAB, story_mappings, write_specforge_mapping
from builders.target import save_target
from triage_tui.core.diagnose.checks.result import CheckResult

D = TypeVar("D")

HIDDEN = 64


LAYERS = 8


TOKENS = 48
PROMPT = 8


def write_drafter(root: Path, hot_ids: np.ndarray) -> Path:
    """The run's drafter, its d2t/t2d ``hot_ids``'s; aux layers inside the 8-layer target."""
    return write_eagle3_drafter(root, hot_ids, rms_norm_eps=1e-5, aux_layer_ids=(1, 3, 4))


def write_run_target(root: Path) -> Path:
    """The run's target: bf16 embedding and head drawn from seed 1, 8 layers."""
    generator = torch.Generator().manual_seed(1)
    tensors = {
        "model.embed_tokens.weight": torch.randn(TARGET_VOCAB, HIDDEN, generator=generator).bfloat16(),
        "lm_head.weight": torch.randn(TARGET_VOCAB, HIDDEN, generator=generator).bfloat16(),
        "model.norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
    }
    return save_target(root, tensors, num_hidden_layers=LAYERS, rms_norm_eps=1e-5)


def write_dumps(root: Path, run_hot_ids: np.ndarray, target: Path, files: int = 2) -> Path:
    """SpecForge prepare_hidden_states.py files; the last hidden points at a next token in the run's vocab,
    as a target whose argmax the run's mapping was built from would, after the target's final norm
    (weight 1: unit RMS); the first PROMPT positions are the prompt, outside the loss mask."""
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
        last = last * torch.rsqrt(last.pow(2).mean(-1, keepdim=True))
        mask = torch.ones(TOKENS, dtype=torch.int64)
        mask[:PROMPT] = 0
        torch.save(
            {
                "input_ids": ids,
                "loss_mask": mask,
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
        write_run_target(shared / "target")
    run = tmp / ("story" if story else "healthy")
    write_specforge_mapping(run / "cache" / "vocab_mapping" / "3f9a.pt", run_hot)
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


def details_of(result: CheckResult, kind: type[D]) -> D:
    """``result``'s details, which must be a ``kind`` (a check's own dataclass, e.g. VocabDetails):
    what a test reads its typed fields through, failing with the check's summary when they are not."""
    details = result.details
    assert isinstance(details, kind), f"{result.name} {result.status}: {result.summary} (details {details!r})"
    return details
