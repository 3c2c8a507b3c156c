"""Verifier-mask check: does ``target_logits[..., t2d]`` line up with the drafter's rows?

SpecForge/EAGLE build the training target as ``softmax(target_logits[..., t2d])`` and
speculators as ``lm_head.weight[t2d]`` (vllm-project/speculators 0.9.0 `src/speculators/models/eagle3/core.py`). A
boolean mask selects in
ascending target-id order, so column j of the target is draft row j only when the hot ids
ascend; a frequency-ordered ``d2t`` (modelopt, section 2.4) paired with such a mask
misaligns every row without any error (section 2.5). The mask must also have exactly
``Vd`` True entries (SafeAILab/EAGLE #248) over exactly the target vocab.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from triage_tui.core.diagnose.checks.result import CheckResult, key_value_lines, table_lines
from triage_tui.core.diagnose.checks.target_head import HeadRequest, HeadScanner, rms_norm, scan_head
from triage_tui.core.vocab import VocabMapping

NAME = "verifier_mask"

# The default max_tokens bounds the cost of recomputing the verifier's argmax on CPU
# (1024 x 163 840 x 7168 multiply-adds for a Kimi-sized head; core/diagnose/checks/target_head.py reads
# the head block by block) while the share it estimates has a standard error under 1.6 points.
MAX_TOKENS = 1024


# What each invariant asserts, for code that weighs them (core/diagnose/hypotheses/mapping.py); not in the JSON.
InvariantKind = Literal["in_range", "unique", "count", "length", "stored_t2d", "ascending", "masks_equal"]


@dataclass(frozen=True)
class Invariant:
    name: str  # "<run|checkpoint>: <what>", e.g. "run: hot ids strictly ascending"
    ok: bool
    detail: str
    required: bool  # a failure of this invariant alone breaks training; others are context
    kind: InvariantKind

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "required": self.required}

    def line(self) -> str:
        """The invariant and what was found, in words. The name is the assertion ("checkpoint t2d ==
        run t2d"): an unmet one says that it does not hold before its detail, which read alone after
        the name ("... == run t2d: 8444 target ids differ") contradicted it."""
        return f"{self.name}: {self.detail}" if self.ok else f"{self.name} does not hold: {self.detail}"


@dataclass(frozen=True)
class ArgmaxOutside:
    """Share of loss-masked positions whose verifier argmax (full target vocab) is outside each draft vocab."""

    tokens: int
    run: float | None
    checkpoint: float | None

    def to_json(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "run": self.run, "checkpoint": self.checkpoint}


@dataclass(frozen=True)
class VerifierMaskDetails:
    invariants: tuple[Invariant, ...]
    run_draft_vocab_size: int
    run_ascending: bool
    run_has_stored_t2d: bool
    checkpoint_ascending: bool | None = None  # None: no checkpoint mapping to compare
    t2d_differing_target_ids: int | None = None  # None: the masks differ in length, or one is missing
    # Measured only with dumps and a target (argmax_scanned); None then when it was cancelled.
    argmax_scanned: bool = False
    target_argmax_outside_draft_vocab: ArgmaxOutside | None = None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "invariants": [i.to_json() for i in self.invariants],
            "run_draft_vocab_size": self.run_draft_vocab_size,
            "run_ascending": self.run_ascending,
            "run_has_stored_t2d": self.run_has_stored_t2d,
        }
        if self.checkpoint_ascending is not None:
            document["checkpoint_ascending"] = self.checkpoint_ascending
        if self.t2d_differing_target_ids is not None:
            document["t2d_differing_target_ids"] = self.t2d_differing_target_ids
        if self.argmax_scanned:
            outside = self.target_argmax_outside_draft_vocab
            document["target_argmax_outside_draft_vocab"] = outside.to_json() if outside is not None else None
        return document

    def drilldown(self) -> list[str]:
        lines = table_lines(
            ("", "invariant", "result", ""),
            [
                ("✔" if i.ok else "✖", i.name, i.detail, "required" if i.required else "context")
                for i in self.invariants
            ],
        )
        lines += key_value_lines(
            [
                (key, value)
                for key, value in self.to_json().items()
                if key not in ("invariants", "target_argmax_outside_draft_vocab")
            ]
        )
        outside = self.target_argmax_outside_draft_vocab
        if outside is not None:
            lines += ["", "target argmax outside draft vocab", *key_value_lines(list(outside.to_json().items()))]
        return lines


def check_verifier_mask(
    checkpoint_mapping: VocabMapping | None,
    run_mapping: VocabMapping | None,
    *,
    dumps: Any = None,
    target: Any = None,
    device: str = "cpu",
    max_tokens: int = MAX_TOKENS,
    progress: Callable[[float, str], None] | None = None,
    cancel: threading.Event | None = None,
    head: HeadScanner = scan_head,
) -> CheckResult:
    """Mask invariants of the run's mapping (the one the trainer masks with), and the checkpoint's."""
    if checkpoint_mapping is None and run_mapping is None:
        return CheckResult.skipped(NAME, "no vocab mapping for the checkpoint or the run: pass --mapping")
    target_vocab = int(target.vocab_size) if target is not None else None
    invariants: list[Invariant] = []

    # The trainer builds its verifier targets from the run's mapping; without one it keeps the
    # checkpoint's buffers (SpecForge loads them with the weights).
    trained_with = run_mapping if run_mapping is not None else checkpoint_mapping
    assert trained_with is not None  # with neither mapping the check returned "skipped" above
    trained_label = "run" if run_mapping is not None else "checkpoint (no run mapping)"
    invariants += _mapping_invariants(trained_label, trained_with, target_vocab, ordering_required=True)
    checkpoint_ascending: bool | None = None
    differing: int | None = None

    if run_mapping is not None and checkpoint_mapping is not None:
        # Engines read only d2t, so the checkpoint's own order matters only through its mask's consistency.
        invariants += _mapping_invariants("checkpoint", checkpoint_mapping, target_vocab, ordering_required=False)
        checkpoint_ascending = checkpoint_mapping.is_ascending()
        ckpt_mask, run_mask = _effective_mask(checkpoint_mapping), _effective_mask(run_mapping)
        if ckpt_mask.shape == run_mask.shape:
            differing = int(np.count_nonzero(ckpt_mask != run_mask))
            invariants.append(
                _invariant(
                    "masks_equal",
                    "checkpoint t2d == run t2d",
                    differing == 0,
                    f"{differing} target ids differ in membership (the vocab_mapping check explains why)",
                    required=False,
                )
            )
        else:
            invariants.append(
                _invariant(
                    "masks_equal",
                    "checkpoint t2d == run t2d",
                    False,
                    f"masks cover {ckpt_mask.shape[0]} vs {run_mask.shape[0]} target ids",
                    required=False,
                )
            )

    outside = None
    request = head_request(dumps, target, device=device, max_tokens=max_tokens)
    if request is not None:
        outside = _argmax_outside_draft_vocab(
            target,
            request,
            {"run": run_mapping, "checkpoint": checkpoint_mapping},
            device=device,
            head=head,
            progress=progress,
            cancel=cancel,
        )

    failed = [i for i in invariants if i.required and not i.ok]
    details = VerifierMaskDetails(
        invariants=tuple(invariants),
        run_draft_vocab_size=trained_with.draft_vocab_size,
        run_ascending=trained_with.is_ascending(),
        run_has_stored_t2d=trained_with.stored_t2d is not None,
        checkpoint_ascending=checkpoint_ascending,
        t2d_differing_target_ids=differing,
        argmax_scanned=dumps is not None and target is not None,
        target_argmax_outside_draft_vocab=outside,
    )
    evidence = [i.line() for i in invariants if not i.ok]
    if outside and outside.run is not None:
        evidence.append(
            f"{outside.run:.1%} of {outside.tokens} loss-masked positions have a target argmax outside the "
            f"run's draft vocab (dropped from the loss by position_mask)"
        )
    if failed:
        summary = "; ".join(f"{i.name} fails: {i.detail}" for i in failed[:3])
        return CheckResult(NAME, "fail", summary, details, tuple(evidence))
    summary = f"{sum(i.ok for i in invariants)} / {len(invariants)} mask invariants hold"
    unmet = [i for i in invariants if not i.ok]
    if unmet:
        # A pass with an invariant unmet says why it still passes: only the required ones decide.
        required = sum(i.required for i in invariants)
        summary += f", all {required} required ones among them; unmet, and context only: " + "; ".join(
            i.line() for i in unmet
        )
    if outside and outside.run is not None:
        summary += f"; {outside.run:.1%} of target argmaxes fall outside the run's draft vocab"
    return CheckResult(NAME, "pass", summary, details, tuple(evidence))


def _invariant(kind: InvariantKind, name: str, ok: bool, detail: str, *, required: bool = True) -> Invariant:
    return Invariant(name, bool(ok), detail, required, kind)


def _effective_mask(mapping: VocabMapping) -> np.ndarray:
    """The mask a trainer would use: the stored one when the file had it, else the one d2t implies."""
    return mapping.stored_t2d if mapping.stored_t2d is not None else mapping.t2d()


def _mapping_invariants(
    label: str, mapping: VocabMapping, target_vocab: int | None, *, ordering_required: bool
) -> list[Invariant]:
    """SpecForge classic `specforge/core/eagle3.py`, `_compute_target_p`: len(d2t)==Vd, t2d.sum()==Vd,
    sorted(arange(Vd)+d2t)==t2d.nonzero()."""
    vd = mapping.draft_vocab_size
    mask = _effective_mask(mapping)
    out = []
    out_of_range = mapping.out_of_range()
    out.append(
        _invariant(
            "in_range",
            f"{label}: hot ids within the target vocab",
            out_of_range.size == 0,
            f"{out_of_range.size} draft positions point outside [0, {mapping.target_vocab_size})"
            + (f", first at {int(out_of_range[0])}" if out_of_range.size else ""),
        )
    )
    unique = int(np.unique(mapping.hot_ids).size)
    out.append(
        _invariant(
            "unique", f"{label}: hot ids unique", unique == vd, f"{vd - unique} draft positions repeat a target id"
        )
    )
    total = int(mask.sum())
    out.append(
        _invariant(
            "count",
            f"{label}: t2d.sum() == draft_vocab_size",
            total == vd,
            f"t2d selects {total} target ids for {vd} draft rows"
            + (" (SafeAILab/EAGLE #248: target_p and logits shapes differ)" if total != vd else ""),
        )
    )
    if target_vocab is not None:
        out.append(
            _invariant(
                "length",
                f"{label}: len(t2d) == target vocab",
                mask.shape[0] == target_vocab,
                f"t2d covers {mask.shape[0]} ids, the target model has {target_vocab}",
            )
        )
    if mapping.stored_t2d is not None:
        implied = mapping.t2d()
        if implied.shape == mapping.stored_t2d.shape:
            differing = int(np.count_nonzero(implied != mapping.stored_t2d))
            out.append(
                _invariant(
                    "stored_t2d",
                    f"{label}: stored t2d == mask built from d2t",
                    differing == 0,
                    f"{differing} target ids differ between the stored t2d and arange(Vd)+d2t",
                )
            )
        else:
            out.append(
                _invariant(
                    "stored_t2d",
                    f"{label}: stored t2d == mask built from d2t",
                    False,
                    f"stored t2d has {mapping.stored_t2d.shape[0]} entries, d2t implies {implied.shape[0]}",
                )
            )
    descents = np.flatnonzero(np.diff(mapping.hot_ids) <= 0)
    if descents.size:
        detail = (
            f"{descents.size} places where the next draft position's target id is not larger, first at "
            f"draft id {int(descents[0]) + 1}; logits[..., t2d] is in ascending id order, so "
            f"column j would not be draft row j (frequency-ordered d2t, as modelopt writes it)"
        )
    else:
        detail = "draft order is ascending target-id order, as logits[..., t2d] selects"
    # A trainer that masks with t2d needs ascending ids; a mapping stored without any t2d was
    # meant for d2t gathering (modelopt) and is fine there, so ordering is required only for
    # the run's mapping when it carries a mask.
    required = ordering_required and mapping.stored_t2d is not None
    out.append(
        _invariant("ascending", f"{label}: hot ids strictly ascending", descents.size == 0, detail, required=required)
    )
    return out


@torch.no_grad()
def head_request(dumps: Any, target: Any, *, device: str, max_tokens: int = MAX_TOKENS) -> HeadRequest | None:
    """What the argmax share asks of the target head: the loss-masked last hidden states, up to
    `max_tokens`, through the final norm where the dumps hold the pre-norm state; None without any."""
    if dumps is None or target is None:
        return None
    hidden = []
    budget = max_tokens
    for sample in dumps.samples:
        if sample.target_hidden is None or budget <= 0:
            continue
        h = sample.target_hidden.float()
        if sample.loss_mask is not None:
            keep = torch.from_numpy(np.asarray(sample.loss_mask).reshape(-1) != 0)
            h = h[keep[: h.shape[0]]]
        hidden.append(h[:budget])
        budget -= int(hidden[-1].shape[0])
    if not hidden:
        return None
    states = torch.cat(hidden).to(device)
    if dumps.target_hidden_is_post_norm is False:
        # speculators stores the pre-norm last hidden (vllm-project/speculators 0.9.0
        # `src/speculators/models/eagle3/core.py`): apply the final norm.
        norm = target.final_norm()
        if norm is not None:
            states = rms_norm(states, norm, float(target.config.get("rms_norm_eps", 1e-6)))
    return HeadRequest(states)


def _argmax_outside_draft_vocab(
    target: Any,
    request: HeadRequest,
    mappings: dict[str, VocabMapping | None],
    *,
    device: str,
    head: HeadScanner,
    progress: Callable[[float, str], None] | None,
    cancel: threading.Event | None,
) -> ArgmaxOutside | None:
    """Share of loss-masked positions whose verifier argmax (full target vocab) is outside each draft vocab."""
    scan = head(
        target,
        request,
        device=device,
        cancel=cancel,
        progress=None if progress is None else lambda f, m: progress(f, f"{NAME}: verifier argmax, {m}"),
    )
    if scan is None:
        return None
    argmax = scan.argmax.cpu().numpy()
    shares: dict[str, float | None] = {}
    for label, mapping in mappings.items():
        if mapping is None:
            shares[label] = None
            continue
        mask = _effective_mask(mapping)
        inside = (argmax < mask.shape[0]) & mask[np.minimum(argmax, mask.shape[0] - 1)]
        shares[label] = float(1.0 - inside.mean())
    return ArgmaxOutside(int(argmax.size), run=shares.get("run"), checkpoint=shares.get("checkpoint"))
