"""The target's ``lm_head`` applied to hidden states block by block, never whole in memory.

A Kimi-K2 head is [163 840, 7168]: 2.2 GiB in bf16, 4.4 GiB as float32. The verifier-mask,
replay and dump-target checks need from it only, per position, the argmax over the whole vocab
and (the replay) the logits at a draft vocab's 32 000 hot ids. Each check states what it needs
as a ``HeadRequest``; ``scan_heads`` answers any number of requests in one pass over row blocks
read from the weights file (``TargetModel.lm_head_rows``), each block converted to float32 into
one reused buffer (a fresh 448 MiB block each time cost more in page faults than the read).

``SharedHeadPass`` is how a diagnosis reads the head once for all three checks: the first check
that asks makes the pass with every request the checks still to run will make (the registry's
``CheckContext`` knows them), and each later check is answered from it. A request is answered
from the pass only when it is the same request (the same states and ids, compared exactly), and
each request's arithmetic is the one a pass of its own does (the same states, the same float32
block, the same batches), so every number a check reports is the same either way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

ROW_BLOCK = 16384  # head rows per block: 448 MiB as float32 at hidden 7168
TOKEN_BATCH = 1024  # positions per matmul: a [1024, 16384] float32 logits block is 64 MiB

Progress = Callable[[float, str], None]


def rms_norm(states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The Llama-family final norm, ``weight * x / sqrt(mean(x^2) + eps)``, in float32 on `states`' device."""
    states = states.float()
    scale = torch.rsqrt(states.pow(2).mean(-1, keepdim=True) + eps)
    return states * scale * weight.to(device=states.device, dtype=torch.float32)


@dataclass(frozen=True, eq=False)
class HeadRequest:
    """What one check needs from the target head: ``states @ lm_head.T`` reduced to its argmax, and
    the logits at `columns`' vocab ids."""

    states: torch.Tensor  # [n, H] float32 on the scan's device, through the final norm where the dumps need it
    columns: Mapping[str, torch.Tensor] = field(default_factory=dict)  # name -> [k] vocab ids

    def same_as(self, other: HeadRequest) -> bool:
        """The same states and ids, exactly (a NaN never matches: such a request is scanned on its own)."""
        return (
            _same_tensor(self.states, other.states)
            and self.columns.keys() == other.columns.keys()
            and all(_same_tensor(ids, other.columns[name]) for name, ids in self.columns.items())
        )


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and bool(torch.equal(a, b))


@dataclass(frozen=True)
class HeadScan:
    """Per position: the argmax over the whole target vocab, and the logits at chosen vocab ids."""

    argmax: torch.Tensor  # [n] int64
    columns: dict[str, torch.Tensor]  # name -> [n, len(ids)] float32


class _Reduction:
    """One request's running argmax and picked logits over the blocks seen so far."""

    def __init__(self, request: HeadRequest, device: torch.device | str) -> None:
        self.states = request.states
        n = int(self.states.shape[0])
        self.best_value = torch.full((n,), -torch.inf, device=device)
        self.best_index = torch.zeros(n, dtype=torch.int64, device=device)
        self.ids = {name: c.to(device=device, dtype=torch.int64) for name, c in request.columns.items()}
        self.picked = {
            name: torch.empty((n, int(c.numel())), dtype=torch.float32, device=device) for name, c in self.ids.items()
        }

    def add(self, block: torch.Tensor, start: int, stop: int) -> None:
        """Fold in head rows [start, stop) (`block`, float32)."""
        n = int(self.states.shape[0])
        inside = {name: torch.nonzero((c >= start) & (c < stop)).reshape(-1) for name, c in self.ids.items()}
        for t in range(0, n, TOKEN_BATCH):
            logits = self.states[t : t + TOKEN_BATCH] @ block.T
            value, index = logits.max(dim=-1)
            better = value > self.best_value[t : t + TOKEN_BATCH]
            self.best_value[t : t + TOKEN_BATCH] = torch.where(better, value, self.best_value[t : t + TOKEN_BATCH])
            self.best_index[t : t + TOKEN_BATCH] = torch.where(
                better, index + start, self.best_index[t : t + TOKEN_BATCH]
            )
            for name, where in inside.items():
                if where.numel():
                    self.picked[name][t : t + TOKEN_BATCH, where] = logits[:, self.ids[name][where] - start]

    def result(self) -> HeadScan:
        return HeadScan(self.best_index, self.picked)


@torch.no_grad()
def scan_heads(
    target: Any,
    requests: Sequence[HeadRequest],
    *,
    device: torch.device | str = "cpu",
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> list[HeadScan] | None:
    """Every request answered in one pass over the head (argmax: the first of equal maxima).

    None when `cancel` is set part way.
    """
    vocab = int(target.vocab_size)
    reductions = [_Reduction(request, device) for request in requests]
    buffer: torch.Tensor | None = None
    starts = range(0, vocab, ROW_BLOCK)
    for count, start in enumerate(starts, 1):
        if cancel is not None and cancel.is_set():
            return None
        stop = min(start + ROW_BLOCK, vocab)
        rows = target.lm_head_rows(start, stop)
        if buffer is None:
            buffer = torch.empty((min(ROW_BLOCK, vocab), int(rows.shape[1])), dtype=torch.float32, device=device)
        block = buffer[: stop - start]
        block.copy_(rows)
        del rows
        for reduction in reductions:
            reduction.add(block, start, stop)
        if progress is not None:
            progress(count / len(starts), f"target head block {count}/{len(starts)}")
    return [reduction.result() for reduction in reductions]


class HeadScanner(Protocol):
    """How a check has its request answered: ``scan_head`` (a pass of its own) or a ``SharedHeadPass``."""

    def __call__(
        self,
        target: Any,
        request: HeadRequest,
        *,
        device: torch.device | str,
        progress: Progress | None,
        cancel: threading.Event | None,
    ) -> HeadScan | None: ...


def scan_head(
    target: Any,
    request: HeadRequest,
    *,
    device: torch.device | str = "cpu",
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> HeadScan | None:
    """One request, in a pass over the head of its own."""
    scans = scan_heads(target, [request], device=device, progress=progress, cancel=cancel)
    return None if scans is None else scans[0]


class SharedHeadPass:
    """One pass over the target head for the requests of several checks (see the module docstring).

    `plan` returns the requests the checks still to run will make; it is called once, at the
    first request. A request the pass did not answer (another target, states that differ from
    the planned ones) gets a pass of its own; a cancelled pass keeps nothing.
    """

    def __init__(self, plan: Callable[[], list[HeadRequest]]) -> None:
        self._plan = plan
        self._target: Any = None
        self._answers: list[tuple[HeadRequest, HeadScan]] | None = None

    def __call__(
        self,
        target: Any,
        request: HeadRequest,
        *,
        device: torch.device | str,
        progress: Progress | None,
        cancel: threading.Event | None,
    ) -> HeadScan | None:
        if self._answers is None:
            requests = [request, *(p for p in self._plan() if not p.same_as(request))]
            scans = scan_heads(target, requests, device=device, progress=progress, cancel=cancel)
            if scans is None:
                return None
            self._target = target
            self._answers = list(zip(requests[1:], scans[1:], strict=True))
            return scans[0]
        if target is self._target:
            for i, (answered, scan) in enumerate(self._answers):
                if answered.same_as(request):
                    del self._answers[i]  # each request is asked once: its logits need not stay
                    return scan
        return scan_head(target, request, device=device, progress=progress, cancel=cancel)
