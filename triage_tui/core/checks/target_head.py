"""The target's ``lm_head`` applied to hidden states block by block, never whole in memory.

A Kimi-K2 head is [163 840, 7168]: 2.2 GiB in bf16, 4.4 GiB as float32. The verifier-mask and
replay checks need from it only, per position, the argmax over the whole vocab and the logits at
a draft vocab's 32 000 hot ids; both come out of one pass over row blocks read from the weights
file (``TargetModel.lm_head_rows``), each converted to float32 and dropped after use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

ROW_BLOCK = 16384  # head rows per block: 448 MiB as float32 at hidden 7168
TOKEN_BATCH = 1024  # positions per matmul: a [1024, 16384] float32 logits block is 64 MiB


def rms_norm(states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The Llama-family final norm, ``weight * x / sqrt(mean(x^2) + eps)``, in float32 on `states`' device."""
    states = states.float()
    scale = torch.rsqrt(states.pow(2).mean(-1, keepdim=True) + eps)
    return states * scale * weight.to(device=states.device, dtype=torch.float32)


@dataclass(frozen=True)
class HeadScan:
    """Per position: the argmax over the whole target vocab, and the logits at chosen vocab ids."""

    argmax: torch.Tensor  # [n] int64
    columns: dict[str, torch.Tensor]  # name -> [n, len(ids)] float32


@torch.no_grad()
def scan_head(
    target: Any,
    states: torch.Tensor,
    *,
    columns: dict[str, torch.Tensor] | None = None,
    device: torch.device | str = "cpu",
    progress: Callable[[float, str], None] | None = None,
    cancel: threading.Event | None = None,
) -> HeadScan | None:
    """``states @ lm_head.T`` reduced to its argmax (first of equal maxima) and the logits at `columns`' ids.

    `states` are float32 on `device`, already through the target's final norm where the dumps
    need it. None when `cancel` is set part way.
    """
    n = int(states.shape[0])
    vocab = int(target.vocab_size)
    best_value = torch.full((n,), -torch.inf, device=device)
    best_index = torch.zeros(n, dtype=torch.int64, device=device)
    ids = {name: c.to(device=device, dtype=torch.int64) for name, c in (columns or {}).items()}
    picked = {name: torch.empty((n, int(c.numel())), dtype=torch.float32, device=device) for name, c in ids.items()}
    starts = range(0, vocab, ROW_BLOCK)
    for count, start in enumerate(starts, 1):
        if cancel is not None and cancel.is_set():
            return None
        stop = min(start + ROW_BLOCK, vocab)
        block = target.lm_head_rows(start, stop).to(device=device, dtype=torch.float32)
        inside = {name: torch.nonzero((c >= start) & (c < stop)).reshape(-1) for name, c in ids.items()}
        for t in range(0, n, TOKEN_BATCH):
            logits = states[t : t + TOKEN_BATCH] @ block.T
            value, index = logits.max(dim=-1)
            better = value > best_value[t : t + TOKEN_BATCH]
            best_value[t : t + TOKEN_BATCH] = torch.where(better, value, best_value[t : t + TOKEN_BATCH])
            best_index[t : t + TOKEN_BATCH] = torch.where(better, index + start, best_index[t : t + TOKEN_BATCH])
            for name, where in inside.items():
                if where.numel():
                    picked[name][t : t + TOKEN_BATCH, where] = logits[:, ids[name][where] - start]
        del block
        if progress is not None:
            progress(count / len(starts), f"target head block {count}/{len(starts)}")
    return HeadScan(best_index, picked)
