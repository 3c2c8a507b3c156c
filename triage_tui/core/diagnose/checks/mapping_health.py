"""Mapping health: is the vocab mapping saved where the engines read it, is it a real one, and did
it stay the same across the run's checkpoints?

Three findings, each with its own hypothesis (core/diagnose/hypotheses/mapping.py):

- ``mapping_not_in_checkpoint``: a checkpoint without a ``d2t`` buffer whose draft vocab is
  smaller than the target's. vLLM keeps its zero-initialised ``draft_id_to_target_id`` and
  SGLang its identity ``hot_token_id``, so draft id i is served as target id i: the first Vd ids
  (https://github.com/NVIDIA-NeMo/Automodel/pull/2447: the mapping lived in a side file and the
  acceptance rate collapsed).
- ``identity_mapping``: a mapping whose ``d2t`` is all zeros. Every trainer and engine stores
  offsets, ``target = draft + d2t[draft]`` (core/vocab.py ``VocabMapping.from_d2t``), so an
  all-zero ``d2t`` *is* the identity: the draft vocab is target ids 0 .. Vd-1. That is right only
  when Vd == V (SafeAILab/EAGLE #222: Vicuna's full-vocab drafter); with Vd < V it is the mapping
  nobody built: SpecForge's and EAGLE's default buffers before ``load_vocab_mapping``, or
  verl-SpeCo's ``t2d[:Vd] = True`` default (https://github.com/verl-project/verl-SpeCo/pull/66:
  loss and accuracy look normal because the targets are restricted to the same slice). What is
  detected: ``hot_ids == arange(Vd)`` with Vd < V. A ``d2t`` holding absolute ids instead of
  offsets is another anomaly, which the mapping's own notes name.
- ``mapping_drift``: the mapping differs between two of the run's checkpoints: a resume that
  regenerated it from other data (https://github.com/sgl-project/SpecForge/pull/534: ``--resume``
  rebuilt d2t/t2d from the new data; https://github.com/vllm-project/speculators/pull/1081: cached
  mappings of another run reused;
  https://github.com/NVIDIA-NeMo/Automodel/pull/2467). Rows trained before the change stand for
  other tokens after it. The first checkpoint where it changed is named, with how many draft
  positions changed.

Only the checkpoints' ``d2t``/``t2d`` buffers and shapes are read (safetensors headers, two small
tensors), so every checkpoint of a long run is cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from triage_tui.core.diagnose.checks.config_contract import findings_lines
from triage_tui.core.diagnose.checks.result import CheckResult, key_value_lines, show, table_lines

if TYPE_CHECKING:
    from triage_tui.core.formats.checkpoint import DrafterCheckpoint
    from triage_tui.core.formats.hidden_states import HiddenStateDumps
    from triage_tui.core.vocab import VocabMapping

NAME = "mapping_health"

LINK_NOT_IN_CHECKPOINT = "https://github.com/NVIDIA-NeMo/Automodel/pull/2447"
LINK_IDENTITY = "https://github.com/verl-project/verl-SpeCo/pull/66"
LINK_DRIFT = (
    "https://github.com/sgl-project/SpecForge/pull/534",
    "https://github.com/vllm-project/speculators/pull/1081",
    "https://github.com/NVIDIA-NeMo/Automodel/pull/2467",
)

Role = Literal["starting drafter", "run checkpoint"]


@dataclass(frozen=True)
class SavedMapping:
    """What one checkpoint holds of the mapping: read from its buffers and shapes only."""

    path: Path
    role: Role
    draft_vocab_size: int | None
    target_vocab_size: int | None  # from t2d, embed_tokens or config.json; None when none says
    has_d2t: bool
    has_t2d: bool
    mapping: VocabMapping | None
    error: str | None = None  # the checkpoint could not be read: why

    @classmethod
    def of(cls, checkpoint: DrafterCheckpoint, role: Role) -> SavedMapping:
        return cls(
            path=checkpoint.path,
            role=role,
            draft_vocab_size=int(checkpoint.draft_vocab_size),
            target_vocab_size=checkpoint.target_vocab_size,
            has_d2t="d2t" in checkpoint.tensors,
            has_t2d="t2d" in checkpoint.tensors,
            mapping=checkpoint.mapping,
        )

    @classmethod
    def unreadable(cls, path: Path, role: Role, why: str) -> SavedMapping:
        return cls(path, role, None, None, False, False, None, why)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "role": self.role,
            "draft_vocab_size": self.draft_vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "has_d2t": self.has_d2t,
            "has_t2d": self.has_t2d,
            "identity": _is_identity(self.mapping) if self.mapping is not None else None,
            "error": self.error,
        }


@dataclass(frozen=True)
class Finding:
    kind: Literal["mapping_not_in_checkpoint", "identity_mapping", "mapping_drift", "unknown_target_vocab"]
    severity: Literal["error", "warning"]
    message: str
    where: str  # the checkpoint or mapping file it is about
    role: str  # "run checkpoint", "starting drafter", "run mapping"
    positions: int | None = None  # draft positions whose meaning changes (the finding's size)
    of_positions: int | None = None
    link: str | None = None
    # identity_mapping: the d2t beside a t2d of all ones, SpecForge's buffers as constructed
    # (`LlamaForCausalLMEagle3`: t2d = ones(V), d2t = zeros(Vd)) before load_vocab_mapping.
    default_buffers: bool = False

    @property
    def fraction(self) -> float | None:
        return self.positions / self.of_positions if self.positions is not None and self.of_positions else None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
            "where": self.where,
            "role": self.role,
            "positions": self.positions,
            "of_positions": self.of_positions,
            "link": self.link,
            "default_buffers": self.default_buffers,
        }


@dataclass(frozen=True)
class DriftStep:
    """Two consecutive checkpoints of the run, compared position by position."""

    earlier: str
    later: str
    changed_positions: int  # draft positions whose target id differs, plus positions only one side has
    draft_vocab_sizes: tuple[int, int]

    @property
    def changed(self) -> bool:
        return self.changed_positions > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "earlier": self.earlier,
            "later": self.later,
            "changed_positions": self.changed_positions,
            "draft_vocab_sizes": list(self.draft_vocab_sizes),
        }


@dataclass(frozen=True)
class MappingHealthDetails:
    checkpoints: tuple[SavedMapping, ...]
    run_mapping_source: str | None
    run_mapping_identity: bool | None
    target_vocab_size: int | None
    drift: tuple[DriftStep, ...]
    findings: tuple[Finding, ...]
    identity_tokens_outside: tuple[int, int] | None = None  # (loss-masked dump tokens >= Vd, all of them)

    def found(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    @property
    def first_drift(self) -> DriftStep | None:
        return next((step for step in self.drift if step.changed), None)

    def to_json(self) -> dict[str, Any]:
        first = self.first_drift
        return {
            "target_vocab_size": self.target_vocab_size,
            "checkpoints": [c.to_json() for c in self.checkpoints],
            "run_mapping": self.run_mapping_source,
            "run_mapping_identity": self.run_mapping_identity,
            "drift": [step.to_json() for step in self.drift],
            "first_drift": first.later if first is not None else None,
            "identity_tokens_outside": list(self.identity_tokens_outside) if self.identity_tokens_outside else None,
            "issues": [f.to_json() for f in self.findings],
        }

    def drilldown(self) -> list[str]:
        lines = key_value_lines(
            [
                ("target_vocab_size", self.target_vocab_size),
                ("run_mapping", self.run_mapping_source),
                ("run_mapping_identity", self.run_mapping_identity),
            ]
        )
        lines += ["", "mapping saved in each checkpoint"]
        rows = []
        for saved in self.checkpoints:
            if saved.error is not None:
                held = f"unreadable: {saved.error}"
            elif not saved.has_d2t:
                held = "no d2t"
            else:
                held = "d2t (all zeros: identity)" if _is_identity(saved.mapping) else "d2t"
                held += ", t2d" if saved.has_t2d else ""
            rows.append((saved.role, str(saved.path), show(saved.draft_vocab_size), held))
        lines += table_lines(("role", "checkpoint", "Vd", "holds"), rows)
        if self.drift:
            lines += ["", "mapping between consecutive run checkpoints"]
            lines += table_lines(
                ("earlier", "later", "positions changed"),
                [(d.earlier, d.later, str(d.changed_positions)) for d in self.drift],
            )
        return lines + findings_lines(self.findings)


def _is_identity(mapping: VocabMapping | None) -> bool:
    """``d2t`` all zeros, i.e. ``hot_ids == arange(Vd)`` (offsets: core/vocab.py)."""
    if mapping is None or mapping.draft_vocab_size == 0:
        return False
    return bool(np.array_equal(mapping.hot_ids, np.arange(mapping.draft_vocab_size, dtype=np.int64)))


def _changed_positions(earlier: VocabMapping, later: VocabMapping) -> int:
    common = min(earlier.draft_vocab_size, later.draft_vocab_size)
    differ = int(np.count_nonzero(earlier.hot_ids[:common] != later.hot_ids[:common]))
    return differ + abs(earlier.draft_vocab_size - later.draft_vocab_size)


def check_mapping_health(
    checkpoints: Sequence[SavedMapping],
    run_mapping: VocabMapping | None = None,
    *,
    target_vocab_size: int | None = None,
    dumps: HiddenStateDumps | None = None,
) -> CheckResult:
    """Each checkpoint's saved mapping, identity mappings, and drift between the run's checkpoints.

    ``checkpoints``: the starting drafter (when known) and the run's checkpoints, oldest first.
    ``target_vocab_size``: the target model's, when known (else each checkpoint's own).
    ``dumps``: only to count how many trained tokens an identity mapping cannot propose.
    """
    readable = [c for c in checkpoints if c.error is None]
    if not readable and run_mapping is None:
        if checkpoints:
            return CheckResult.error(
                NAME, f"no checkpoint could be read: {checkpoints[0].path}: {checkpoints[0].error}"
            )
        return CheckResult.skipped(NAME, "no checkpoint and no vocab mapping found for this run")
    findings: list[Finding] = []

    for saved in readable:
        vocab = target_vocab_size or saved.target_vocab_size
        draft = saved.draft_vocab_size
        if saved.has_d2t or draft is None:
            continue
        if vocab is None:
            findings.append(
                Finding(
                    "unknown_target_vocab",
                    "warning",
                    f"{saved.path} holds no d2t and nothing says its target vocab size (no t2d, embed_tokens, "
                    "vocab_size or --target): cannot tell whether it needs one",
                    str(saved.path),
                    saved.role,
                )
            )
            continue
        if draft >= vocab:
            continue  # a full-vocab drafter needs no mapping (SafeAILab/EAGLE #222)
        served_as_other = None
        if run_mapping is not None and run_mapping.draft_vocab_size == draft:
            served_as_other = int(np.count_nonzero(run_mapping.hot_ids != np.arange(draft)))
        findings.append(
            Finding(
                "mapping_not_in_checkpoint",
                "error",
                f"{saved.role} {saved.path} holds no d2t/t2d while its draft vocab {draft} is smaller than the "
                f"target's {vocab}: vLLM and SGLang then serve draft id i as target id i, the first {draft} ids"
                + (
                    f"; the run labelled {served_as_other} of its {draft} rows with other tokens"
                    if served_as_other is not None
                    else ""
                )
                + " (NeMo Automodel PR #2447: mapping saved only in a side file, acceptance collapsed)",
                str(saved.path),
                saved.role,
                served_as_other if served_as_other is not None else draft,
                draft,
                LINK_NOT_IN_CHECKPOINT,
            )
        )

    # Identity mappings: each mapping file once (the run's mapping is often a checkpoint's own buffers).
    identity_outside = None
    seen: set[str] = set()
    candidates: list[tuple[str, str, VocabMapping]] = [
        (saved.role, str(saved.path), saved.mapping) for saved in readable if saved.mapping is not None
    ]
    if run_mapping is not None:
        candidates.append(("run mapping", run_mapping.source, run_mapping))
    for role, where, mapping in candidates:
        if mapping.source in seen or not _is_identity(mapping):
            continue
        seen.add(mapping.source)
        vocab = target_vocab_size or mapping.target_vocab_size
        draft = mapping.draft_vocab_size
        if draft >= vocab:
            continue  # the full vocab in order: right (SafeAILab/EAGLE #222)
        t2d = mapping.stored_t2d
        default_buffers = t2d is not None and bool(t2d.all())
        outside = _tokens_outside(dumps, draft) if dumps is not None else None
        identity_outside = identity_outside or outside
        findings.append(
            Finding(
                "identity_mapping",
                "error",
                f"{role} {where}: d2t is all zeros, so the draft vocab is target ids 0..{draft - 1}, the first "
                f"{draft} of {vocab}"
                + (
                    f", and t2d marks all {vocab} tokens: SpecForge's default buffers, no mapping was ever installed"
                    if default_buffers
                    else ""
                )
                + (
                    f"; {outside[0]} of {outside[1]} loss-masked tokens in the dumps lie beyond id {draft - 1} and can "
                    "never be proposed"
                    if outside
                    else ""
                )
                + " (verl-SpeCo PR #66)",
                where,
                role,
                outside[0] if outside else None,
                outside[1] if outside else None,
                LINK_IDENTITY,
                default_buffers=default_buffers,
            )
        )

    # Drift between consecutive readable run checkpoints that carry a mapping.
    drift: list[DriftStep] = []
    ordered = [c for c in readable if c.role == "run checkpoint" and c.mapping is not None]
    for earlier, later in zip(ordered, ordered[1:], strict=False):
        assert earlier.mapping is not None and later.mapping is not None
        drift.append(
            DriftStep(
                str(earlier.path),
                str(later.path),
                _changed_positions(earlier.mapping, later.mapping),
                (earlier.mapping.draft_vocab_size, later.mapping.draft_vocab_size),
            )
        )
    first = next((step for step in drift if step.changed), None)
    if first is not None:
        changes = sum(step.changed for step in drift)
        findings.append(
            Finding(
                "mapping_drift",
                "error",
                f"the vocab mapping changed between the run's checkpoints {first.earlier} and {first.later}: "
                f"{first.changed_positions} of {first.draft_vocab_sizes[0]} draft positions now mean another target "
                "token"
                + (f" ({changes} changes in {len(drift) + 1} checkpoints)" if changes > 1 else "")
                + ": a resume regenerated the mapping (SpecForge PR #534, speculators PR #1081, NeMo PR #2467)",
                first.later,
                "run checkpoint",
                first.changed_positions,
                first.draft_vocab_sizes[0],
                LINK_DRIFT[0],
            )
        )

    details = MappingHealthDetails(
        checkpoints=tuple(checkpoints),
        run_mapping_source=run_mapping.source if run_mapping is not None else None,
        run_mapping_identity=_is_identity(run_mapping) if run_mapping is not None else None,
        target_vocab_size=target_vocab_size,
        drift=tuple(drift),
        findings=tuple(findings),
        identity_tokens_outside=identity_outside,
    )
    errors = [f for f in findings if f.severity == "error"]
    evidence = tuple(f.message for f in findings)
    if errors:
        return CheckResult(NAME, "fail", "; ".join(f.message for f in errors[:2]), details, evidence)
    summary = (
        f"{len(readable)} checkpoint(s) hold their mapping"
        + (f", unchanged across {len(ordered)} run checkpoints" if len(ordered) > 1 else "")
        + ("; no identity mapping" if candidates else "")
    )
    if findings:
        summary += "; " + findings[0].message
    return CheckResult(NAME, "pass", summary, details, evidence)


def _tokens_outside(dumps: HiddenStateDumps, draft: int) -> tuple[int, int] | None:
    """(loss-masked dump tokens with id >= draft, all loss-masked dump tokens), None without masks."""
    outside = total = 0
    for sample in dumps.samples:
        if sample.loss_mask is None:
            continue
        ids = sample.input_ids[np.asarray(sample.loss_mask).astype(bool)[: len(sample.input_ids)]]
        outside += int(np.count_nonzero(ids >= draft))
        total += int(ids.size)
    return (outside, total) if total else None
