"""A SpecForge-style EAGLE-3 drafter training loop for the sample world.

The arithmetic is core/drafter.py's (the same model the replay check and the remap proof
run): ``ttt_forward`` unrolls the TTT steps, ``target_distribution`` builds ``target_p``
and the position mask, ``soft_cross_entropy`` and ``draft_accuracy`` are SpecForge's
``ploss``/``acc``. What this module adds is what SpecForge's ``scripts/train_eagle3.py``
does around them: the target model in the loop (SpecForge's online mode), AdamW with
warmup + cosine decay and gradient clipping, the total loss ``sum(0.8**i * ploss_i)``,
TensorBoard scalars under SpecForge's tag names (``train/ploss_{i}``, ``train/acc_{i}``,
``train/lr``, ``eval/...``; SpecForge classic `scripts/train_eagle3.py`, `record_metrcs`) and checkpoints saved as
SpecForge saves
them (``epoch_{e}_step_{s}/config.json`` + ``model.safetensors``, embeddings filtered out).

Three ways the loop can be told to get things wrong, each a real pipeline mistake:
``chunk_order`` (the dumps concatenate the aux layers in another order than the drafter's
``fc`` was trained on), ``label_order="d2t"`` (modelopt's gather ``logits[..., arange + d2t]``
instead of SpecForge's ``logits[..., t2d]``), and the label mapping itself (regenerated from
the fine-tune's data instead of the checkpoint's, SpecForge PR #534).
"""

from __future__ import annotations

import functools
import json
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from triage_tui.core.drafter import (
    DrafterConfig,
    Eagle3Drafter,
    draft_accuracy,
    shift_left,
    soft_cross_entropy,
    target_distribution,
    ttt_forward,
)
from triage_tui.core.vocab import VocabMapping
from triage_tui.samples.world import Corpus, TinyTarget, WorldSpec

# SpecForge run_backward_and_update / EAGLE main.py: total = sum(0.8**i * ploss_i)
PLOSS_DECAY = 0.8

ComputeDtype = Literal["bfloat16", "float16", "float32"]
LabelOrder = Literal["t2d", "d2t"]  # which mapping array the trainer builds its labels from


def drafter_config(spec: WorldSpec) -> DrafterConfig:
    """The drafter shape used throughout the sample world (one layer, hidden = target hidden)."""
    return DrafterConfig(
        hidden_size=spec.hidden_size,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=spec.hidden_size // 4,
        intermediate_size=2 * spec.hidden_size,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        draft_vocab_size=spec.draft_vocab_size,
        target_vocab_size=spec.target_vocab_size,
        target_hidden_size=spec.hidden_size,
        max_position_embeddings=2 * spec.seq_len,
        aux_layer_ids=spec.aux_layer_ids,
    )


def new_drafter(
    spec: WorldSpec, mapping: VocabMapping, *, seed: int, target: TinyTarget | None = None
) -> Eagle3Drafter:
    """A freshly initialised drafter (torch defaults, as SpecForge) with the mapping in its buffers.

    With ``target``, ``lm_head`` starts from the target's lm_head rows of the draft vocab in
    draft order, as speculators initialises it (``verifier_lm_head = lm_head.weight[t2d]``,
    vllm-project/speculators 0.9.0 `src/speculators/models/eagle3/core.py`); it is still trained, as SpecForge
    trains it.
    """
    torch.manual_seed(seed)
    drafter = Eagle3Drafter(drafter_config(spec))
    set_mapping_buffers(drafter, mapping)
    if target is not None:
        with torch.no_grad():
            drafter.lm_head.weight.copy_(target.lm_head.detach()[torch.from_numpy(mapping.hot_ids.copy())])
    return drafter


def set_mapping_buffers(drafter: Eagle3Drafter, mapping: VocabMapping) -> None:
    """SpecForge ``load_vocab_mapping``: copy d2t/t2d into the buffers (they are saved with the weights)."""
    with torch.no_grad():
        drafter.d2t.copy_(torch.from_numpy(mapping.d2t()))
        drafter.t2d.copy_(torch.from_numpy(mapping.t2d()))


@dataclass(frozen=True)
class TrainConfig:
    """One run's hyper-parameters (names follow SpecForge's command-line flags)."""

    total_steps: int
    batch_size: int = 8
    learning_rate: float = 3e-3
    warmup_steps: int = 10
    ttt_length: int = 3
    max_grad_norm: float | None = 0.5
    eval_interval: int = 25
    save_steps: tuple[int, ...] = ()
    # compute dtype of the drafter's forward (autocast; master weights stay float32, as
    # SpecForge's BF16Optimizer keeps them). bfloat16 is SpecForge's; float16 overflows at 65504.
    compute_dtype: ComputeDtype = "bfloat16"
    # speculators (main) freezes the lm_head it copies from the target (vllm-project/speculators 0.9.0
    # `src/speculators/models/eagle3/core.py`)
    freeze_lm_head: bool = False


@dataclass(frozen=True)
class RunData:
    """What the trainer is fed and how it builds labels from it."""

    corpus: Corpus  # training sequences, consumed in order
    eval_corpus: Corpus  # one held-out batch for eval/*
    label_mapping: VocabMapping  # the mapping the trainer builds labels with
    label_order: LabelOrder = "t2d"
    chunk_order: tuple[int, int, int] = (0, 1, 2)


@dataclass(frozen=True)
class StepLog:
    step: int
    lr: float
    plosses: tuple[float, ...]
    accs: tuple[float, ...]


@dataclass
class TrainHistory:
    steps: list[StepLog] = field(default_factory=list)

    def series(self, name: str, i: int = 0) -> np.ndarray:
        return np.array([getattr(s, name)[i] for s in self.steps])


def lr_at(step: int, config: TrainConfig) -> float:
    """SpecForge's CosineAnnealingWarmupLR: linear warmup, then cosine decay to 0 over total_steps."""
    if config.warmup_steps and step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    span = max(1, config.total_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    return config.learning_rate * 0.5 * (1.0 + math.cos(math.pi * progress))


def label_index(mapping: VocabMapping, order: str) -> torch.Tensor:
    """How target logits are restricted to the draft vocab: SpecForge's t2d mask or modelopt's d2t gather."""
    if order == "t2d":
        return torch.from_numpy(mapping.t2d())
    return torch.from_numpy(mapping.hot_ids.copy())


class DrafterTrainer:
    """The loop, one optimizer step at a time, so that the demo can swap the drafter mid-run."""

    def __init__(
        self,
        run_dir: Path,
        target: TinyTarget,
        drafter: Eagle3Drafter,
        data: RunData,
        config: TrainConfig,
        *,
        flush_secs: float = 120.0,
        start_step: int = 0,
    ) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = run_dir
        self.target = target
        self.data = data
        self.config = config
        self.step_index = start_step
        self.labels = label_index(data.label_mapping, data.label_order)
        self.embed = target.embed_tokens.detach()
        # SpecForge: SummaryWriter(log_dir=<output_dir>/runs) (specforge/tracker.py TensorboardTracker)
        self.writer = SummaryWriter(log_dir=str(run_dir / "runs"), flush_secs=flush_secs)
        self.history = TrainHistory()
        self.set_drafter(drafter)

    def set_drafter(self, drafter: Eagle3Drafter) -> None:
        """Continue with another drafter (fresh optimizer state, as a restart from a checkpoint)."""
        self.drafter = drafter.to(torch.float32).train()
        self.drafter.lm_head.weight.requires_grad_(not self.config.freeze_lm_head)
        trainable = [p for p in self.drafter.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=self.config.learning_rate, weight_decay=0.0)

    def _batch(self, corpus: Corpus, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = corpus.input_ids.shape[0]
        b = self.config.batch_size
        start = (index * b) % max(1, n - b + 1)
        ids = torch.from_numpy(corpus.input_ids[start : start + b])
        mask = torch.from_numpy(corpus.loss_mask[start : start + b]).clone()
        mask[:, -1] = 0  # SpecForge's offline dataset: loss_mask[0, -1] = 0
        return ids, mask

    def _metrics(self, ids: torch.Tensor, loss_mask: torch.Tensor) -> tuple[list[torch.Tensor], list[float]]:
        aux, last = self.target.hidden_states(ids)
        if self.data.chunk_order != (0, 1, 2):
            aux = torch.cat([aux.chunk(3, dim=-1)[i] for i in self.data.chunk_order], dim=-1)
        with torch.no_grad():
            target_logits = self.target.logits_from_last(last)
            # ttt_metrics' arithmetic, with target_p computed once and shifted per step
            # (target_distribution commutes with shift_left; the padded tail is masked anyway).
            target_p, in_draft = target_distribution(target_logits, self.labels)
        # SpecForge trains the drafter in bf16 with fp32 master weights; autocast does the
        # same for the matmuls here (and bf16 matmuls are 3x faster than fp32 on this CPU).
        compute = getattr(torch, self.config.compute_dtype)
        with torch.autocast(device_type="cpu", dtype=compute, enabled=compute != torch.float32):
            logits = ttt_forward(self.drafter, self.embed, ids, aux, self.config.ttt_length)
        plosses, accs = [], []
        for k, step_logits in enumerate(logits):
            mask = shift_left(loss_mask, k).to(torch.float32)
            p_k = shift_left(target_p, k + 1)
            position_mask = shift_left(in_draft, k + 1) * mask
            plosses.append(soft_cross_entropy(step_logits, p_k, position_mask))
            accs.append(draft_accuracy(step_logits, p_k, position_mask, mask))
        return plosses, accs

    def step(self) -> StepLog:
        """One optimizer step; logs train/* (and eval/* every eval_interval)."""
        config = self.config
        lr = lr_at(self.step_index, config)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        ids, mask = self._batch(self.data.corpus, self.step_index)
        plosses, accs = self._metrics(ids, mask)
        # reduce, not sum(): the same additions in the same order, without sum's int 0 start
        total = functools.reduce(operator.add, (PLOSS_DECAY**k * p for k, p in enumerate(plosses)))
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        if config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.drafter.parameters(), config.max_grad_norm)
        self.optimizer.step()
        self.step_index += 1
        log = StepLog(self.step_index, lr, tuple(float(p.detach()) for p in plosses), tuple(accs))
        # SpecForge record_metrcs: one scalar per key, step = optimizer step
        self.writer.add_scalar("train/lr", lr, self.step_index)
        for k in range(config.ttt_length):
            self.writer.add_scalar(f"train/ploss_{k}", log.plosses[k], self.step_index)
            self.writer.add_scalar(f"train/acc_{k}", log.accs[k], self.step_index)
        if config.eval_interval and self.step_index % config.eval_interval == 0:
            self.evaluate()
        self.history.steps.append(log)
        if self.step_index in config.save_steps:
            self.save_checkpoint()
        return log

    @torch.no_grad()
    def evaluate(self) -> None:
        ids, mask = self._batch(self.data.eval_corpus, 0)
        plosses, accs = self._metrics(ids, mask)
        for k in range(self.config.ttt_length):
            self.writer.add_scalar(f"eval/ploss_{k}", float(plosses[k]), self.step_index)
            self.writer.add_scalar(f"eval/acc_{k}", accs[k], self.step_index)

    def save_checkpoint(self, epoch: int = 0) -> Path:
        out = self.run_dir / f"epoch_{epoch}_step_{self.step_index}"
        save_drafter(self.drafter, out)
        return out

    def run(self, should_stop: Callable[[TrainHistory], bool] | None = None) -> TrainHistory:
        """Step to ``total_steps``, or until ``should_stop(history)`` says so after a step."""
        while self.step_index < self.config.total_steps:
            self.step()
            if should_stop is not None and should_stop(self.history):
                break
        self.writer.flush()
        return self.history

    def close(self) -> None:
        self.writer.close()


def save_drafter(drafter: Eagle3Drafter, out_dir: Path) -> None:
    """SpecForge ``save_checkpoints``: config.json + model.safetensors, no embedding; floats as fp16."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    config = drafter.config.to_config()
    config["torch_dtype"] = "float16"
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    state = {}
    for name, tensor in drafter.state_dict().items():
        if "embed" in name.lower():  # SpecForge PR #125
            continue
        tensor = tensor.detach().cpu()
        state[name] = (tensor.to(torch.float16) if tensor.is_floating_point() else tensor).contiguous()
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def load_saved_drafter(path: Path) -> Eagle3Drafter:
    """Reload a checkpoint this module (or ``triage remap``) wrote, through the program's reader."""
    from triage_tui.core.drafter import load_drafter
    from triage_tui.core.formats.checkpoint import read_checkpoint

    return load_drafter(read_checkpoint(path), device="cpu", dtype=torch.float32)
