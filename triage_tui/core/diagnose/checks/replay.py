"""Replay check: run the drafter on the run's own hidden-state dumps and score it under both mappings.

The vocab check compares two mappings; this one measures what the difference costs. The
drafter's first TTT step is run on dumped target states (SpecForge's step-0 alignment,
``core/drafter.py`` ``ttt_forward``) and its top-1 draft index is turned into a target
token through each mapping's hot ids (SpecForge main ``pred_target = argmax +
d2t[argmax]``; sglang ``hot_token_id[topk_index]``). Under the checkpoint's own mapping a
working drafter scores high; under the run's mapping, when the two disagree position by
position (the 252-in-32 000 story), it falls to about zero. The same loop with the three
aux chunks permuted shows whether the dumps feed the layers in the order ``fc`` expects.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from triage_tui.core.device import resolve_device
from triage_tui.core.diagnose.checks.result import CheckResult, CheckStatus, key_value_lines, show, table_lines
from triage_tui.core.diagnose.checks.target_head import HeadRequest, HeadScan, HeadScanner, rms_norm, scan_head
from triage_tui.core.drafter import Eagle3Drafter, embed_ids, load_drafter, shift_left
from triage_tui.core.errors import BadInput
from triage_tui.core.vocab import VocabMapping

NAME = "replay"
DEFAULT_MAX_TOKENS_CUDA = 4096
DEFAULT_MAX_TOKENS_CPU = 512  # see run_replay's docstring

# The 6 orders of the 3 aux chunks; "0,1,2" is the order the dumps store.
CHUNK_ORDERS: tuple[tuple[int, ...], ...] = tuple(itertools.permutations(range(3)))
IDENTITY_ORDER = "0,1,2"

# Verdict. With identical mappings both accuracies are the same number exactly, and a
# mapping that moves few frequent tokens costs little. "fail" means the run's mapping loses
# at least half of what the drafter gets right under its own (FAIL_RATIO): most correct
# predictions are relabelled to other tokens, which is what sends a fine-tune's loss to or
# above chance. The comparison only means something when the drafter predicts under its
# own mapping at all (FAIL_MIN_ACCURACY; chance is 1/32 000) and over enough positions that
# a 2x gap is not noise (FAIL_MIN_TOKENS).
FAIL_RATIO = 0.5
FAIL_MIN_ACCURACY = 0.10
FAIL_MIN_TOKENS = 50
# A permuted chunk order that beats the stored one by this much (absolute) is reported as
# evidence that the dumps concatenate the layers in another order than training did.
CHUNK_ORDER_MARGIN = 0.10

# Rows of [n, V] logits materialised at once (target and drafter heads): 2^25 float32 = 128 MiB.
_ROW_BUDGET_ELEMENTS = 1 << 25

Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class ReplayDetails:
    """What the replay measured; accuracies are fractions of the scored positions."""

    tokens: int
    samples: int
    device: str
    label_source: str
    accuracy_checkpoint_mapping: float
    accuracy_run_mapping: float | None  # None without a run mapping
    loss_checkpoint_mapping: float | None  # None when labelled by input ids
    loss_run_mapping: float | None
    accuracy_by_chunk_order: Mapping[str, float]  # "0,1,2" (as stored) first
    best_chunk_order: str
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "samples": self.samples,
            "device": self.device,
            "label_source": self.label_source,
            "accuracy_checkpoint_mapping": self.accuracy_checkpoint_mapping,
            "accuracy_run_mapping": self.accuracy_run_mapping,
            "loss_checkpoint_mapping": self.loss_checkpoint_mapping,
            "loss_run_mapping": self.loss_run_mapping,
            "accuracy_by_chunk_order": dict(self.accuracy_by_chunk_order),
            "best_chunk_order": self.best_chunk_order,
            "notes": list(self.notes),
        }

    def drilldown(self) -> list[str]:
        rows: list[tuple[str, str, str]] = [
            ("the checkpoint's mapping", f"{self.accuracy_checkpoint_mapping:.1%}", show(self.loss_checkpoint_mapping))
        ]
        if self.accuracy_run_mapping is not None:
            rows.append(("the run's mapping", f"{self.accuracy_run_mapping:.1%}", show(self.loss_run_mapping)))
        lines = table_lines(("labels read through", "top-1 accuracy", "soft CE"), rows)
        lines += key_value_lines(
            [
                ("tokens", self.tokens),
                ("samples", self.samples),
                ("device", self.device),
                ("label_source", self.label_source),
                ("best_chunk_order", self.best_chunk_order),
            ]
        )
        if self.accuracy_by_chunk_order:
            lines += ["", "accuracy by aux chunk order (as stored: the first row)"]
            lines += table_lines(
                ("order", "accuracy", ""),
                [
                    (order, f"{accuracy:.1%}", "best" if order == self.best_chunk_order else "")
                    for order, accuracy in self.accuracy_by_chunk_order.items()
                ],
            )
        lines += [f"note: {note}" for note in self.notes]
        return lines


@dataclass(frozen=True)
class ReplayNumbers:
    """What one replay measured; accuracies are fractions of the scored positions."""

    tokens: int
    samples: int
    label_source: str  # "target" (target head argmax) or "input_ids" (the next token in the dump)
    accuracy: dict[str, float]
    loss: dict[str, float | None]  # mean soft CE per position whose target argmax is in that vocab
    accuracy_by_chunk_order: dict[str, float]
    cancelled: bool


class _Labels:
    """Target-side inputs of the replay: the embedding, and the label of each scored position.

    Neither the target's embedding nor its head is loaded whole: embedding rows are read for the
    ids a sample holds, and the head is applied block by block (core/diagnose/checks/target_head.py)."""

    def __init__(self, target: Any, embed: torch.Tensor | None, dumps: Any, device: torch.device) -> None:
        self.device = device
        self.target = None
        self.final_norm: torch.Tensor | None = None
        self.norm_eps = 1e-6
        if embed is None and target is None:
            raise BadInput(None, "no token embedding: the drafter's embedding comes from the target (pass --target)")
        self.embed: torch.Tensor | Callable[[torch.Tensor], torch.Tensor]
        if embed is not None:
            self.embed, self.embed_shape = embed, tuple(embed.shape)
        else:
            self.embed, self.embed_shape = target.embed_rows, (target.vocab_size, target.hidden_size)
        has_target_hidden = all(s.target_hidden is not None for s in dumps.samples)
        if target is not None and has_target_hidden:
            self.target = target
            # SpecForge stores the post-norm last hidden (TargetHead is lm_head alone); speculators
            # the pre-norm one, to which the target's final RMSNorm must be applied first
            # (SpecForge classic `specforge/core/eagle3.py`; `scripts/prepare_hidden_states.py`).
            if dumps.target_hidden_is_post_norm is False:
                norm = target.final_norm()
                if norm is None:
                    raise BadInput(
                        getattr(target, "path", None),
                        "dumps hold the pre-norm last hidden but the target has no final norm weight",
                    )
                self.final_norm = norm.to(device=device, dtype=torch.float32)
                self.norm_eps = float(target.config.get("rms_norm_eps", 1e-6))
        self.source = "target" if self.target is not None else "input_ids"

    @property
    def lookahead(self) -> int:
        # Step 0 at position t is supervised by the target at t+1 (its prediction of token
        # t+2); with only ids, the label is token t+2 itself.
        return 1 if self.source == "target" else 2

    @property
    def vocab_size(self) -> int:
        return int(self.target.vocab_size) if self.target is not None else int(self.embed_shape[0])

    def request(self, plan: list[tuple[Any, np.ndarray]], columns: dict[str, torch.Tensor]) -> HeadRequest:
        """The target's argmax and its logits at `columns`' ids at every planned position: the
        dumped last hidden state one position on (through the final norm where the dumps need it)."""
        states = torch.cat([s.target_hidden[p + 1].to(device=self.device, dtype=torch.float32) for s, p in plan])
        if self.final_norm is not None:
            states = rms_norm(states, self.final_norm, self.norm_eps)
        return HeadRequest(states, columns)


def _scored_positions(sample: Any, lookahead: int) -> np.ndarray:
    """Positions t whose label exists (t + lookahead < T) and whose loss_mask is 1 (SpecForge's step-0 mask)."""
    length = int(sample.input_ids.shape[0])
    keep = np.zeros(length, dtype=bool)
    keep[: max(0, length - lookahead)] = True
    if sample.loss_mask is not None:
        keep &= np.asarray(sample.loss_mask).reshape(-1)[:length] != 0
    return np.flatnonzero(keep)


def _validate(drafter: Eagle3Drafter, dumps: Any, mappings: dict[str, VocabMapping], labels: _Labels) -> None:
    fc_in = drafter.fc.in_features
    for sample in dumps.samples:
        width = int(sample.aux_hidden.shape[-1])
        if width != fc_in:
            raise BadInput(
                sample.path, f"aux hidden width {width} does not match the drafter's fc input {fc_in} (3 x Ht)"
            )
    vd = drafter.config.draft_vocab_size
    vocab = labels.vocab_size
    for label, mapping in mappings.items():
        if mapping.draft_vocab_size != vd:
            raise BadInput(
                mapping.source or None,
                f"the {label} mapping has {mapping.draft_vocab_size} draft tokens, the drafter's lm_head {vd}",
            )
        if mapping.target_vocab_size != vocab:
            raise BadInput(
                mapping.source or None,
                f"the {label} mapping is over {mapping.target_vocab_size} target tokens, the target has {vocab}",
            )
    if int(labels.embed_shape[-1]) != drafter.config.hidden_size:
        raise BadInput(
            None,
            f"target embedding width {int(labels.embed_shape[-1])} differs from the drafter's "
            f"hidden size {drafter.config.hidden_size}",
        )


def _rows_per_chunk(width: int) -> int:
    return max(1, _ROW_BUDGET_ELEMENTS // max(1, width))


def _plan(dumps: Any, lookahead: int, max_tokens: int) -> list[tuple[Any, np.ndarray]]:
    """(sample, its scored positions) in dump order, up to `max_tokens` positions in all."""
    plan = []
    budget = max_tokens
    for sample in dumps.samples:
        positions = _scored_positions(sample, lookahead)[: max(budget, 0)]
        if positions.size:
            plan.append((sample, positions))
            budget -= int(positions.size)
    return plan


def _hot_ids(mappings: dict[str, VocabMapping], device: torch.device) -> dict[str, torch.Tensor]:
    """Each mapping's hot ids on `device`; an out-of-range one (a broken mapping) becomes -1, which no label matches."""
    vocab = mappings[next(iter(mappings))].target_vocab_size
    hot = {k: torch.as_tensor(np.array(m.hot_ids), device=device) for k, m in mappings.items()}
    return {k: torch.where((h >= 0) & (h < vocab), h, torch.full_like(h, -1)) for k, h in hot.items()}


@torch.no_grad()
def _replay(
    drafter: Eagle3Drafter,
    dumps: Any,
    labels: _Labels,
    mappings: dict[str, VocabMapping],
    *,
    chunk_orders: tuple[tuple[int, ...], ...],
    max_tokens: int,
    progress: Progress | None,
    cancel: threading.Event | None,
    scanner: HeadScanner = scan_head,
) -> ReplayNumbers:
    device = labels.device
    _validate(drafter, dumps, mappings, labels)
    vd = drafter.config.draft_vocab_size
    vocab = mappings[next(iter(mappings))].target_vocab_size
    hot = _hot_ids(mappings, device)
    member = {}
    for k, h in hot.items():
        mask = torch.zeros(vocab, dtype=torch.bool, device=device)
        mask[h[h >= 0]] = True
        member[k] = mask
    gather = {k: h.clamp_min(0) for k, h in hot.items()}

    plan = _plan(dumps, labels.lookahead, max_tokens)
    total = sum(len(p) for _, p in plan)
    correct = dict.fromkeys(mappings, 0)
    loss_sum = dict.fromkeys(mappings, 0.0)
    loss_count = dict.fromkeys(mappings, 0)
    order_correct = dict.fromkeys(chunk_orders, 0)
    tokens = samples = 0
    cancelled = False
    ht = drafter.fc.in_features // 3
    rows = _rows_per_chunk(vd)

    # Every position's label (the target's argmax) and the target's logits at each mapping's
    # hot ids, in one pass over the target head for all samples: half the replay's progress.
    head: HeadScan | None = None
    if labels.source == "target" and plan:
        head = scanner(
            labels.target,
            labels.request(plan, gather),
            device=device,
            progress=None if progress is None else lambda f, m: progress(f / 2, f"{NAME}: {m}"),
            cancel=cancel,
        )
        if head is None:
            plan, cancelled = [], True
    offset = 0

    for sample, positions in plan:
        if cancel is not None and cancel.is_set():
            cancelled = True
            break
        # The drafter is causal: cutting the sequence after the last scored position changes nothing before it.
        length = int(positions[-1]) + 1
        ids_np = np.asarray(sample.input_ids, dtype=np.int64)
        rows = int(labels.embed_shape[0])
        if ids_np.size and (int(ids_np.min()) < 0 or int(ids_np.max()) >= rows):
            # An embedding lookup out of range is an IndexError with no file named in it.
            raise BadInput(
                sample.path,
                f"token ids {int(ids_np.min())}..{int(ids_np.max())} fall outside the "
                f"target embedding's {rows} rows (a dump from another model's tokenizer?)",
            )
        ids = torch.as_tensor(ids_np)[None]
        embeds = embed_ids(labels.embed, shift_left(ids)[:, :length]).to(device=device, dtype=torch.float32)
        aux = sample.aux_hidden[:length].to(device=device, dtype=torch.float32)[None]
        where = torch.as_tensor(positions, device=device)
        if head is None:
            label_ids = ids[0, positions + 2].to(device)
        else:
            label_ids = head.argmax[offset : offset + positions.size]

        for order in chunk_orders:
            order_aux = aux if order == (0, 1, 2) else torch.cat([aux[..., i * ht : (i + 1) * ht] for i in order], -1)
            out = drafter.step(embeds, drafter.project(order_aux))[0, where]
            for start in range(0, positions.size, rows):
                logits = drafter.compute_logits(out[start : start + rows]).float()
                pred = logits.argmax(-1)
                chunk_labels = label_ids[start : start + rows]
                if order == (0, 1, 2):
                    log_q = torch.log_softmax(logits, -1) if head is not None else None
                    for k in mappings:
                        correct[k] += int((hot[k][pred] == chunk_labels).sum())
                        if head is not None and log_q is not None:
                            # SpecForge target_p over this mapping's draft vocab, positions whose
                            # target argmax is outside it dropped (position_mask).
                            keep = member[k][chunk_labels]
                            columns = head.columns[k][offset + start : offset + start + chunk_labels.numel()]
                            target_p = torch.softmax(columns[keep], -1)
                            loss_sum[k] += float(-(target_p * log_q[keep]).sum())
                            loss_count[k] += int(keep.sum())
                order_correct[order] += int((hot["checkpoint"][pred] == chunk_labels).sum())
        offset += int(positions.size)
        tokens += int(positions.size)
        samples += 1
        if progress is not None:
            done = tokens / max(1, total)
            progress(min(1.0, 0.5 + done / 2 if head is not None else done), f"{NAME}: {tokens}/{total} tokens")

    def frac(n: int) -> float:
        return n / tokens if tokens else 0.0

    return ReplayNumbers(
        tokens=tokens,
        samples=samples,
        label_source=labels.source,
        accuracy={k: frac(v) for k, v in correct.items()},
        loss={k: (loss_sum[k] / loss_count[k] if loss_count[k] else None) for k in mappings},
        accuracy_by_chunk_order={",".join(map(str, o)): frac(v) for o, v in order_correct.items()},
        cancelled=cancelled,
    )


def replay_accuracy(
    drafter: Eagle3Drafter,
    dumps: Any,
    target: Any,
    mapping: VocabMapping,
    *,
    device: str | torch.device = "auto",
    max_tokens: int = 4096,
    embed: torch.Tensor | None = None,
) -> float:
    """Top-1 accuracy of the drafter's first step on the dumps, draft indices read through ``mapping``.

    The remap proof calls it on the remapped checkpoint with the run's mapping. ``embed``
    stands in for the target's embedding when no target is given.
    """
    dev = resolve_device(device)
    drafter = drafter.to(dev)
    labels = _Labels(target, embed, dumps, dev)
    numbers = _replay(
        drafter,
        dumps,
        labels,
        {"checkpoint": mapping},
        chunk_orders=((0, 1, 2),),
        max_tokens=max_tokens,
        progress=None,
        cancel=None,
    )
    return numbers.accuracy["checkpoint"]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def run_replay(
    checkpoint: Any,
    dumps: Any,
    target: Any,
    checkpoint_mapping: VocabMapping | None,
    run_mapping: VocabMapping | None,
    *,
    device: str = "auto",
    max_tokens: int | None = None,
    all_chunk_orders: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    head: HeadScanner = scan_head,
) -> CheckResult:
    """Replay the drafter's first TTT step on the run's dumps under the checkpoint's and the run's mapping.

    The aux chunks are fed in the order the dumps store them; ``all_chunk_orders`` replays the
    five other orders too (six drafter passes instead of one), which diagnose asks for when the
    hidden-state check finds the chunks out of order, repeated or holding the last hidden state.

    ``max_tokens`` defaults by device: a Kimi-K2-sized drafter on a 2-core CPU costs ~0.1 s a
    token, half of it the target head that labels it (benchmarks/RESULTS-checks.md); 512 keeps a
    CPU replay under a minute and still scores enough tokens to separate 60 % from 3 %.
    """
    if checkpoint is None:
        return CheckResult.skipped(NAME, "no drafter checkpoint to replay (pass --checkpoint)")
    if checkpoint.not_eagle3 is not None:
        return CheckResult.skipped(NAME, checkpoint.not_eagle3)
    if dumps is None or not getattr(dumps, "samples", None):
        return CheckResult.skipped(NAME, "no hidden-state dumps to replay on (pass --data)")
    dev = resolve_device(device)
    max_tokens = _max_tokens(dev, max_tokens)
    notes: list[str] = []
    try:
        if checkpoint_mapping is None and checkpoint.mapping is None:
            notes.append("the checkpoint has no d2t; its mapping is taken as the identity, as vLLM does")
        checkpoint_mapping = _checkpoint_mapping(checkpoint, target, checkpoint_mapping)
        embed = None
        if target is None:
            if "embed_tokens.weight" not in checkpoint.tensors:
                return CheckResult.skipped(
                    NAME, "no target model: the drafter's token embedding and the labels come from it (pass --target)"
                )
            embed = checkpoint.tensor("embed_tokens.weight")
            notes.append("no target model: embedding from the checkpoint's embed_tokens.weight")
        drafter = load_drafter(checkpoint.dequantized(), device=dev)
        labels = _Labels(target, embed, dumps, dev)
        if labels.source == "input_ids":
            notes.append(
                "labels are the dumps' next tokens (no target head or no target hidden states), "
                "not the target's argmax; losses are not computed"
            )
        orders = CHUNK_ORDERS if all_chunk_orders else (tuple(range(3)),)
        numbers = _replay(
            drafter,
            dumps,
            labels,
            _mappings(checkpoint_mapping, run_mapping),
            chunk_orders=orders,
            max_tokens=max_tokens,
            progress=progress,
            cancel=cancel,
            scanner=head,
        )
    except BadInput as exc:
        return CheckResult.error(NAME, exc.line())
    except (RuntimeError, ValueError) as exc:  # torch shape/device errors on inputs that read fine
        return CheckResult.error(NAME, f"replay failed: {' '.join(str(exc).split())[:300]}")
    return _verdict(numbers, dev, notes)


def _max_tokens(device: torch.device, max_tokens: int | None) -> int:
    if max_tokens is not None:
        return max_tokens
    return DEFAULT_MAX_TOKENS_CUDA if device.type == "cuda" else DEFAULT_MAX_TOKENS_CPU


def _checkpoint_mapping(checkpoint: Any, target: Any, given: VocabMapping | None) -> VocabMapping:
    """The mapping the drafter's rows were trained for: the one given, else the checkpoint's d2t,
    else (no d2t: vLLM and sglang then read draft id i as target id i) the identity."""
    if given is not None:
        return given
    if checkpoint.mapping is not None:
        return checkpoint.mapping
    return VocabMapping.identity(
        checkpoint.draft_vocab_size,
        checkpoint.target_vocab_size or (target.vocab_size if target is not None else 0),
        source=f"{checkpoint.path} (no d2t: identity)",
    )


def _mappings(checkpoint_mapping: VocabMapping, run_mapping: VocabMapping | None) -> dict[str, VocabMapping]:
    return {"checkpoint": checkpoint_mapping, **({"run": run_mapping} if run_mapping is not None else {})}


@torch.no_grad()
def head_request(
    checkpoint: Any,
    dumps: Any,
    target: Any,
    checkpoint_mapping: VocabMapping | None,
    run_mapping: VocabMapping | None,
    *,
    device: str = "auto",
    max_tokens: int | None = None,
) -> HeadRequest | None:
    """What ``run_replay`` with these inputs asks of the target head (labels and each mapping's
    logits at every scored position); None when it asks nothing (labels from input ids, nothing to score)."""
    if checkpoint is None or checkpoint.not_eagle3 is not None or target is None:
        return None
    if dumps is None or not getattr(dumps, "samples", None):
        return None
    dev = resolve_device(device)
    labels = _Labels(target, None, dumps, dev)
    plan = _plan(dumps, labels.lookahead, _max_tokens(dev, max_tokens))
    if labels.source != "target" or not plan:
        return None
    mappings = _mappings(_checkpoint_mapping(checkpoint, target, checkpoint_mapping), run_mapping)
    return labels.request(plan, {k: h.clamp_min(0) for k, h in _hot_ids(mappings, dev).items()})


def _verdict(numbers: ReplayNumbers, device: torch.device, notes: list[str]) -> CheckResult:
    acc_ckpt = numbers.accuracy["checkpoint"]
    acc_run = numbers.accuracy.get("run")
    by_order = numbers.accuracy_by_chunk_order
    best_order = max(by_order, key=lambda o: (by_order[o], o == IDENTITY_ORDER))
    details = ReplayDetails(
        tokens=numbers.tokens,
        samples=numbers.samples,
        device=device.type,
        label_source=numbers.label_source,
        accuracy_checkpoint_mapping=acc_ckpt,
        accuracy_run_mapping=acc_run,
        loss_checkpoint_mapping=numbers.loss["checkpoint"],
        loss_run_mapping=numbers.loss.get("run"),
        accuracy_by_chunk_order=by_order,
        best_chunk_order=best_order,
        notes=tuple(notes),
    )
    if numbers.cancelled:
        return CheckResult(NAME, "skipped", f"replay cancelled after {numbers.tokens} tokens", details)
    if numbers.tokens == 0:
        return CheckResult(NAME, "skipped", "no scored positions in the dumps (loss_mask is 0 everywhere?)", details)

    labelled = "the target's argmax" if numbers.label_source == "target" else "the dumps' next tokens"
    evidence = [
        f"drafter top-1 over {numbers.tokens} tokens vs {labelled}: {_pct(acc_ckpt)} under the "
        f"checkpoint's mapping" + (f", {_pct(acc_run)} under the run's" if acc_run is not None else "")
    ]
    if numbers.loss["checkpoint"] is not None and numbers.loss.get("run") is not None:
        evidence.append(
            f"soft CE per position: {numbers.loss['checkpoint']:.2f} under the checkpoint's mapping, "
            f"{numbers.loss['run']:.2f} under the run's (ln Vd is chance)"
        )
    if best_order != IDENTITY_ORDER and by_order[best_order] - by_order[IDENTITY_ORDER] >= CHUNK_ORDER_MARGIN:
        evidence.append(
            f"aux chunk order {best_order} scores {_pct(by_order[best_order])} vs "
            f"{_pct(by_order[IDENTITY_ORDER])} as stored: the dumps' layer order differs from training's"
        )
    evidence.extend(notes)

    status: CheckStatus
    mapping_broken = (
        acc_run is not None
        and numbers.tokens >= FAIL_MIN_TOKENS
        and acc_ckpt >= FAIL_MIN_ACCURACY
        and acc_run < FAIL_RATIO * acc_ckpt
    )
    if mapping_broken:
        summary = (
            f"drafter predicts {_pct(acc_ckpt)} under its own mapping but {_pct(acc_run)} under the run's: "
            f"the run labels its lm_head rows with other tokens"
        )
        status = "fail"
    elif acc_run is None:
        summary = f"drafter top-1 {_pct(acc_ckpt)} under its own mapping over {numbers.tokens} tokens (no run mapping)"
        status = "pass"
    else:
        summary = (
            f"drafter top-1 {_pct(acc_ckpt)} under its own mapping, {_pct(acc_run)} under the run's "
            f"over {numbers.tokens} tokens"
        )
        if acc_ckpt < FAIL_MIN_ACCURACY:
            summary += ": the drafter predicts poorly under either mapping, look at its inputs"
        status = "pass"
    return CheckResult(NAME, status, summary, details, tuple(evidence))
