"""Hidden-state check: do the dumps hold what the drafter's ``fc`` was trained to read?

An EAGLE-3 drafter reads ``cat(h_low, h_mid, h_high)`` of three target layers through
``fc.weight [H, 3*Ht]`` (SpecForge classic `specforge/modeling/draft/llama3_eagle.py`; docs/formats.md 1 and 4).
Dumps that carry only
the last layer, chunks in another order, a chunk repeated, or layers one off from the
config's all feed the drafter states it never saw; shapes catch the first, the per-chunk
RMS profile and pairwise distances the others, the layer ids the last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from triage_tui.core.diagnose.checks.aux_layers import (
    CAPTURE_BEFORE,
    OUTPUT_OF,
    Convention,
    engine_default_ids,
    physical_layers,
)
from triage_tui.core.diagnose.checks.aux_layers import config_convention as config_convention_of
from triage_tui.core.diagnose.checks.config_contract import ShapeRow
from triage_tui.core.diagnose.checks.result import CheckResult, key_value_lines, show, table_lines

NAME = "hidden_state"

# Engines and trainers concatenate three aux layers (low, mid, high) by default.
DEFAULT_AUX_CHUNKS = 3

# Two chunks whose difference is below this share of their norm are the same state stored
# twice (bf16 rounding of one tensor stays near 4e-3 relative; distinct layers of a real
# model differ by tens of percent, the residual stream changes every layer).
REPEATED_CHUNK_RELATIVE_DIFFERENCE = 1e-2

# The residual stream's typical per-token RMS grows with depth, so low -> mid -> high should
# not shrink. A later chunk whose median RMS is below 0.9x the earlier one is out of order;
# the 10 % slack allows models whose norms plateau across the middle layers. Medians over
# tokens, not means: a few "massive activation" tokens (BOS, attention sinks) dominate means.
CHUNK_ORDER_TOLERANCE = 0.9

# The aux layer id convention each dump format records its ids in (the conventions:
# core/diagnose/checks/config_contract.py): SpecForge's hooks name layer outputs; speculators' vLLM data
# generation and modelopt's offline dump use HF ``hidden_states[i]``, the input of layer i.
DUMP_FORMAT_CONVENTION: dict[str, Convention] = {
    "specforge": OUTPUT_OF,
    "speculators": CAPTURE_BEFORE,
    "modelopt": CAPTURE_BEFORE,
}


# "error" fails the check and is weighed by hypotheses; "warning" is named in the summary;
# "info" is context only (the drill-down lists it).
IssueSeverity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class HiddenIssue:
    kind: str  # aux_width, only_last_layer, aux_chunk_order, ... (hypotheses weigh them by kind)
    severity: IssueSeverity
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "message": self.message}


@dataclass(frozen=True)
class HiddenStateDetails:
    target_hidden_size: int | None
    target_hidden_size_source: str | None
    draft_hidden_size: int | None
    fc_in_features: int | None
    aux_chunks_present: int | None
    shapes: tuple[ShapeRow, ...]
    rms_by_chunk: tuple[float, ...] | None  # median per-token RMS of each aux chunk, low to high
    issues: tuple[HiddenIssue, ...]
    dumps_format: str | None
    dump_samples: int

    def has_issue(self, *kinds: str) -> bool:
        return any(issue.kind in kinds for issue in self.issues)

    def to_json(self) -> dict[str, Any]:
        return {
            "target_hidden_size": self.target_hidden_size,
            "target_hidden_size_source": self.target_hidden_size_source,
            "draft_hidden_size": self.draft_hidden_size,
            "fc_in_features": self.fc_in_features,
            "aux_chunks_present": self.aux_chunks_present,
            "shapes": [row.to_json() for row in self.shapes],
            "rms_by_chunk": list(self.rms_by_chunk) if self.rms_by_chunk is not None else None,
            "issues": [issue.to_json() for issue in self.issues],
            "dumps_format": self.dumps_format,
            "dump_samples": self.dump_samples,
        }

    def drilldown(self) -> list[str]:
        lines = key_value_lines(
            [
                ("target_hidden_size", self.target_hidden_size),
                ("target_hidden_size_source", self.target_hidden_size_source),
                ("draft_hidden_size", self.draft_hidden_size),
                ("fc_in_features", self.fc_in_features),
                ("aux_chunks_present", self.aux_chunks_present),
                ("dumps_format", self.dumps_format),
                ("dump_samples", self.dump_samples),
            ]
        )
        if self.shapes:
            lines += ["", "shapes"]
            lines += table_lines(
                ("", "what", "expected", "actual"),
                [("✔" if r.ok else "✖", r.what, show(r.expected), show(r.actual)) for r in self.shapes],
            )
        if self.rms_by_chunk:
            top = max(self.rms_by_chunk) or 1.0
            lines += ["", "RMS per aux chunk (low → high layers should rise)"]
            lines += table_lines(
                ("chunk", "rms", ""),
                [(str(i), f"{v:.4g}", "█" * max(1, round(24 * v / top))) for i, v in enumerate(self.rms_by_chunk)],
            )
        if self.issues:
            lines += ["", "issues"]
            lines += table_lines(
                ("kind", "severity", "message"), [(i.kind, i.severity, i.message) for i in self.issues]
            )
        return lines


def check_hidden_state(checkpoint: Any, dumps: Any, target: Any) -> CheckResult:
    """Shapes, aux chunk count, layer ids and the per-chunk RMS profile of the dumps against the drafter."""
    if checkpoint is not None and checkpoint.not_eagle3 is not None:
        return CheckResult.skipped(NAME, checkpoint.not_eagle3)  # a plain model: no shapes to hold dumps against
    if dumps is None:
        # The checkpoint against its own config and the target is config_contract's.
        return CheckResult.skipped(NAME, "no hidden-state dumps to hold against the drafter: pass --data")

    target_hidden, target_hidden_source = _target_hidden_size(checkpoint, target)
    rows: list[ShapeRow] = []
    issues: list[HiddenIssue] = []

    def row(what: str, expected: Any, actual: Any) -> bool:
        ok = expected == actual
        rows.append(ShapeRow(what, expected, actual, ok))
        return ok

    def issue(kind: str, severity: IssueSeverity, message: str) -> None:
        issues.append(HiddenIssue(kind, severity, message))

    fc_in = None
    if checkpoint is not None:
        fc_in = _checkpoint_rows(checkpoint)

    rms_by_chunk: list[float] | None = None
    chunks_present = None
    if dumps is not None and dumps.samples:
        widths = sorted({int(s.aux_hidden.shape[-1]) for s in dumps.samples})
        width = widths[0]
        if len(widths) > 1:
            issue("inconsistent_dumps", "error", f"dump samples disagree on the aux width: {widths}")
        expected_width = fc_in if fc_in is not None else (DEFAULT_AUX_CHUNKS * target_hidden if target_hidden else None)
        if expected_width is not None and not row("dumps aux_hidden width", expected_width, width):
            issue(
                "aux_width",
                "error",
                f"dumps carry aux states of width {width}, the drafter's fc reads {expected_width}"
                + (" (SafeAILab/EAGLE #294: all layers concatenated instead of 3)" if width > expected_width else ""),
            )
        if target_hidden:
            recorded = dumps.samples[0].num_aux_chunks  # the reader's count, when the widths made it unambiguous
            if recorded is not None:
                chunks_present = int(recorded)
            elif width % target_hidden == 0:
                chunks_present = width // target_hidden
            expected_chunks = (fc_in // target_hidden) if fc_in and fc_in % target_hidden == 0 else DEFAULT_AUX_CHUNKS
            if chunks_present is not None and not row("aux chunks in dumps", expected_chunks, chunks_present):
                if chunks_present == 1:
                    issue(
                        "only_last_layer",
                        "error",
                        f"dumps carry one hidden state per token (width {width} = Ht) instead of "
                        f"{expected_chunks} concatenated aux layers ({expected_chunks * target_hidden})",
                    )
                else:
                    issue(
                        "aux_chunk_count",
                        "error",
                        f"dumps carry {chunks_present} aux chunks, the drafter expects {expected_chunks}",
                    )
            with_target = [s for s in dumps.samples if s.target_hidden is not None]
            if with_target:
                row("dumps target_hidden width", target_hidden, int(with_target[0].target_hidden.shape[-1]))
        for sample in dumps.samples:
            if int(sample.aux_hidden.shape[0]) != int(len(sample.input_ids)):
                row(
                    f"tokens vs aux rows ({sample.path.name})",
                    int(len(sample.input_ids)),
                    int(sample.aux_hidden.shape[0]),
                )
                issue(
                    "length_mismatch",
                    "error",
                    f"{sample.path}: {len(sample.input_ids)} input_ids but {sample.aux_hidden.shape[0]} aux rows",
                )
                break
        if target_hidden and width % target_hidden == 0 and width // target_hidden > 1:
            rms_by_chunk = _chunk_profile(dumps, target_hidden, issue)
        _layer_id_issues(checkpoint, dumps, target, row, issue)

    details = HiddenStateDetails(
        target_hidden_size=target_hidden,
        target_hidden_size_source=target_hidden_source,
        draft_hidden_size=getattr(checkpoint, "hidden_size", None),
        fc_in_features=fc_in,
        aux_chunks_present=chunks_present,
        shapes=tuple(rows),
        rms_by_chunk=tuple(rms_by_chunk) if rms_by_chunk is not None else None,
        issues=tuple(issues),
        dumps_format=getattr(dumps, "format", None),
        dump_samples=len(dumps.samples) if dumps is not None else 0,
    )
    errors = [i for i in issues if i.severity == "error"]
    evidence = tuple(i.message for i in issues if i.severity != "info")
    if errors:
        return CheckResult(NAME, "fail", "; ".join(i.message for i in errors[:3]), details, evidence)
    parts = [f"{sum(r.ok for r in rows)} / {len(rows)} shapes agree"]
    if rms_by_chunk:
        parts.append("aux RMS by chunk " + " -> ".join(f"{v:.3g}" for v in rms_by_chunk))
    warnings = [i.message for i in issues if i.severity == "warning"]
    parts.extend(warnings[:2])
    return CheckResult(NAME, "pass", "; ".join(parts), details, evidence)


def _target_hidden_size(checkpoint: Any, target: Any) -> tuple[int | None, str | None]:
    if target is not None:
        return int(target.hidden_size), "target config"
    if checkpoint is not None and checkpoint.target_hidden_size:
        return int(checkpoint.target_hidden_size), "checkpoint config target_hidden_size"
    if checkpoint is not None:
        # Without target_hidden_size every loader assumes Ht == H (sglang `python/sglang/srt/configs/model_config.py`).
        return int(checkpoint.hidden_size), "checkpoint hidden_size (no target_hidden_size)"
    return None, None


def _checkpoint_rows(checkpoint) -> int | None:
    """fc's in-features, the width the dumps are held against. The checkpoint against its own
    config and the target (fc width, lm_head, sizes, aux ids) is config_contract's
    (core/diagnose/checks/config_contract.py): one finding, one home."""
    fc = checkpoint.tensors.get("fc.weight")
    return int(fc.shape[1]) if fc is not None else None


def _chunk_profile(dumps, target_hidden: int, issue) -> list[float]:
    """Median per-token RMS of each aux chunk over all samples; flags repeated and out-of-order chunks."""
    per_token_rms = []
    pair_diff: dict[tuple[int, int], float] = {}
    pair_norm: dict[tuple[int, int], float] = {}
    last_vs_chunk: dict[int, list[float]] = {}
    chunks = None
    for sample in dumps.samples:
        aux = sample.aux_hidden.float()
        if aux.shape[-1] != (aux.shape[-1] // target_hidden) * target_hidden:
            continue
        chunks = aux.shape[-1] // target_hidden
        # Tokens holding NaN/inf are the dump-values check's finding; here they would turn every
        # sum NaN and every comparison false (a NaN distance reads as "repeated chunk").
        finite = torch.isfinite(aux).all(-1)
        if sample.target_hidden is not None and sample.target_hidden.shape[0] == aux.shape[0]:
            finite &= torch.isfinite(sample.target_hidden).all(-1)
        x = aux[finite].reshape(-1, chunks, target_hidden)
        per_token_rms.append(x.pow(2).mean(-1).sqrt())
        for i in range(chunks):
            for j in range(i + 1, chunks):
                pair_diff[i, j] = pair_diff.get((i, j), 0.0) + float((x[:, i] - x[:, j]).pow(2).sum())
                pair_norm[i, j] = pair_norm.get((i, j), 0.0) + float(
                    torch.maximum(x[:, i].pow(2).sum(), x[:, j].pow(2).sum())
                )
        same_rows = sample.target_hidden is not None and sample.target_hidden.shape[0] == aux.shape[0]
        if same_rows and sample.target_hidden[finite].shape == x[:, 0].shape:
            last = sample.target_hidden[finite].float()
            for i in range(chunks):
                diff = float((x[:, i] - last).pow(2).sum())
                last_vs_chunk.setdefault(i, [0.0, 0.0])
                last_vs_chunk[i][0] += diff
                last_vs_chunk[i][1] += float(last.pow(2).sum())
    if not per_token_rms:
        return []
    rms = torch.cat(per_token_rms).median(dim=0).values.tolist()

    for (i, j), diff in pair_diff.items():
        relative = (diff / pair_norm[i, j]) ** 0.5 if pair_norm[i, j] > 0 else 0.0
        if relative < REPEATED_CHUNK_RELATIVE_DIFFERENCE:
            issue(
                "repeated_aux_chunk",
                "error",
                f"aux chunks {i} and {j} hold the same state (relative difference {relative:.1e}): "
                f"one layer was captured twice",
            )
    for i, (diff, norm) in last_vs_chunk.items():
        relative = (diff / norm) ** 0.5 if norm > 0 else 1.0
        if relative < REPEATED_CHUNK_RELATIVE_DIFFERENCE:
            issue(
                "aux_chunk_is_last_hidden",
                "error",
                f"aux chunk {i} equals the dumps' last hidden state (relative difference {relative:.1e}): "
                f"the final layer was stored as an aux layer",
            )
    out_of_order = [i for i in range(len(rms) - 1) if rms[i + 1] < CHUNK_ORDER_TOLERANCE * rms[i]]
    if out_of_order:
        profile = " -> ".join(f"{v:.3g}" for v in rms)
        issue(
            "aux_chunk_order",
            "error",
            f"aux chunk RMS shrinks with depth ({profile}); low -> mid -> high should grow: "
            f"chunks are concatenated in another order than cat(low, mid, high)",
        )
    return [float(v) for v in rms]


def _layer_id_issues(checkpoint, dumps, target, row, issue) -> None:
    """Config aux layer ids against the layers the dumps were captured from (vLLM
    `vllm/v1/worker/gpu_model_runner.py` vs sglang `python/sglang/srt/models/llama.py`; docs/formats.md 4)."""
    dump_ids = getattr(dumps, "aux_layer_ids", None)
    config_ids = getattr(checkpoint, "aux_layer_ids", None) if checkpoint is not None else None
    num_layers = getattr(target, "num_layers", None) if target is not None else None
    dump_convention = DUMP_FORMAT_CONVENTION.get(getattr(dumps, "format", ""), OUTPUT_OF)
    config_convention = config_convention_of(getattr(checkpoint, "layout", ""))
    if config_ids is None:
        # Without ids in the config the engines feed their default layers: the dumps are held against
        # those (config_contract reports the missing field itself).
        if not (num_layers and checkpoint is not None):
            return
        config_ids, config_convention = engine_default_ids(num_layers), CAPTURE_BEFORE
    if dump_ids is None:
        return
    config_layers = physical_layers(config_ids, config_convention)
    dump_layers = physical_layers(dump_ids, dump_convention)
    row("aux layers (outputs of), config vs dumps", list(config_layers), list(dump_layers))
    if config_layers == dump_layers:
        if tuple(config_ids) != tuple(dump_ids):
            issue(
                "aux_layer_convention",
                "info",
                f"config ids {list(config_ids)} ({config_convention}) and dump ids {list(dump_ids)} "
                f"({dump_convention}) name the same layers",
            )
        return
    if len(config_layers) == len(dump_layers):
        offsets = {d - c for c, d in zip(config_layers, dump_layers, strict=True)}
        if offsets in ({1}, {-1}):
            issue(
                "aux_layer_off_by_one",
                "error",
                f"dumps hold outputs of layers {list(dump_layers)} (ids {list(dump_ids)}, {dump_convention}) "
                f"but the config names outputs of {list(config_layers)} (ids {list(config_ids)}, "
                f"{config_convention}): one side used the other index convention (vLLM PR #43671, sglang PR #25454)",
            )
            return
    issue(
        "aux_layer_mismatch",
        "error",
        f"dumps hold outputs of layers {list(dump_layers)}, the config names {list(config_layers)}",
    )
