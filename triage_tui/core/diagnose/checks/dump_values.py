"""Dump-values check: are the dumped hidden states finite, and stored in the dtype the trainer expects?

**Non-finite values.** One NaN or inf anywhere in a sample's aux states poisons the whole sample:
``fc`` turns it into a NaN row, attention mixes that row into every later position, and the loss
of the batch (and, after the step, every weight) is NaN. In the last hidden state it makes the
target distribution NaN, and ``position_mask * NaN`` is NaN even where the mask is 0. SpecForge's
``scripts/prepare_hidden_states.py`` asserts ``not isnan`` before saving
(https://github.com/sgl-project/SpecForge/issues/104: "hidden_state is expected to be non-nan");
it does not test for inf, and the other writers test for neither.

**dtype.** The trainers compute in the target's dtype (SpecForge 0.2.0
``specforge/modeling/target/target_head.py`` moves the target head to bfloat16 and feeds it the
stored last hidden state), so the dumps should hold that dtype. Another one is not an error in
itself, but two are harmful: float16 for a bfloat16 target (float16's largest finite value is
65 504, bfloat16's 3.4e38: a large activation becomes inf when cast), and float8 (e4m3 keeps 3
mantissa bits: up to 6 % error on every value, the largest finite value 448).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from triage_tui.core.diagnose.checks.result import CheckResult

NAME = "dump_values"

# Largest finite value per storage dtype: a dump stored in a narrower dtype than the target's
# overflows where the target's activations exceed it.
LARGEST_FINITE = {
    "float16": float(torch.finfo(torch.float16).max),
    "float8_e4m3fn": float(torch.finfo(torch.float8_e4m3fn).max),
    "float8_e5m2": float(torch.finfo(torch.float8_e5m2).max),
}
# Stored dtypes that lose precision the trainer cannot get back (3 or 2 mantissa bits).
LOSSY_DTYPES = ("float8_e4m3fn", "float8_e5m2")
# A float16 dump whose largest |value| is above this share of 65 504 is one step from overflow:
# the sample's activations are within 2x of inf, and other samples of the data set (longer,
# with more attention-sink tokens) are likely past it.
OVERFLOW_HEADROOM = 0.5
MAX_LISTED_FILES = 8


@dataclass(frozen=True)
class NonFinite:
    """Non-finite values in one tensor role of one sampled file."""

    file: str
    role: str  # "aux chunk k" | "aux" | "last hidden"
    nan: int
    inf: int
    first_position: int  # token index of the first non-finite value

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "role": self.role,
            "nan": self.nan,
            "inf": self.inf,
            "first_position": self.first_position,
        }

    def line(self) -> str:
        return f"{self.file}: {self.role} holds {self.nan} NaN and {self.inf} inf, first at token {self.first_position}"


@dataclass(frozen=True)
class DumpValuesDetails:
    files_total: int
    samples: int
    values: int  # hidden-state values scanned
    non_finite: tuple[NonFinite, ...]
    stored_dtypes: tuple[str, ...]  # distinct stored dtypes of the hidden-state tensors
    expected_dtype: str | None  # the target's dtype (config.json torch_dtype / dtype)
    expected_dtype_source: str | None
    max_abs: float | None  # largest finite |value| over the samples
    dtype_findings: tuple[str, ...]

    @property
    def files_with_non_finite(self) -> int:
        return len({n.file for n in self.non_finite})

    def to_json(self) -> dict[str, Any]:
        return {
            "files_total": self.files_total,
            "samples": self.samples,
            "values": self.values,
            "files_with_non_finite": self.files_with_non_finite,
            "nan": sum(n.nan for n in self.non_finite),
            "inf": sum(n.inf for n in self.non_finite),
            "non_finite": [n.to_json() for n in self.non_finite[:MAX_LISTED_FILES]],
            "stored_dtypes": list(self.stored_dtypes),
            "expected_dtype": self.expected_dtype,
            "expected_dtype_source": self.expected_dtype_source,
            "max_abs": self.max_abs,
            "dtype_findings": list(self.dtype_findings),
        }

    def drilldown(self) -> list[str]:
        lines = [
            f"{self.values} values in {self.samples} of {self.files_total} dump files; "
            f"{self.files_with_non_finite} with NaN/inf",
            *(n.line() for n in self.non_finite[:MAX_LISTED_FILES]),
            f"stored as {', '.join(self.stored_dtypes) or 'unknown'}; the target computes in "
            f"{self.expected_dtype or 'an unknown dtype'}"
            + (f" ({self.expected_dtype_source})" if self.expected_dtype_source else ""),
        ]
        if self.max_abs is not None:
            lines.append(f"largest finite |value| {self.max_abs:.4g}")
        lines.extend(self.dtype_findings)
        return lines


def target_dtype(target: Any) -> tuple[str | None, str | None]:
    """The dtype the target computes in, and where it was read: config.json, else its lm_head."""
    if target is None:
        return None, None
    config = getattr(target, "config", {}) or {}
    for key in ("torch_dtype", "dtype"):  # transformers wrote torch_dtype before 4.56, dtype after
        value = config.get(key)
        if isinstance(value, str) and value:
            return value.removeprefix("torch."), f"config.json {key}"
    return None, None


def _non_finite(file: str, role: str, values: torch.Tensor) -> NonFinite | None:
    bad = ~torch.isfinite(values)
    if not bool(bad.any()):
        return None
    nan = int(torch.isnan(values).sum())
    first = int(torch.nonzero(bad.reshape(bad.shape[0], -1).any(-1))[0])
    return NonFinite(file, role, nan, int(bad.sum()) - nan, first)


def check_dump_values(dumps: Any, target: Any = None) -> CheckResult:
    """NaN/inf in the sampled dumps' hidden states, and their stored dtype against the target's."""
    if dumps is None or not dumps.samples:
        return CheckResult.skipped(NAME, "no hidden-state dumps: pass --data")
    found: list[NonFinite] = []
    values = 0
    max_abs = 0.0
    dtypes: set[str] = set()
    for sample in dumps.samples:
        dtypes.update(sample.stored_dtypes.values())
        chunks = sample.num_aux_chunks
        aux = sample.aux_hidden
        parts = list(aux.chunk(chunks, dim=-1)) if chunks and aux.shape[-1] % chunks == 0 else [aux]
        roles = [f"aux chunk {k}" for k in range(len(parts))] if len(parts) > 1 else ["aux"]
        if sample.target_hidden is not None:
            parts.append(sample.target_hidden)
            roles.append("last hidden")
        for role, part in zip(roles, parts, strict=True):
            values += int(part.numel())
            hit = _non_finite(sample.path.name, role, part)
            if hit is not None:
                found.append(hit)
            finite = part[torch.isfinite(part)]
            if finite.numel():
                max_abs = max(max_abs, float(finite.abs().max()))
    expected, source = target_dtype(target)
    stored = tuple(sorted(dtypes))
    dtype_findings = tuple(_dtype_findings(stored, expected, max_abs, found))
    details = DumpValuesDetails(
        files_total=dumps.files_total,
        samples=len(dumps.samples),
        values=values,
        non_finite=tuple(found),
        stored_dtypes=stored,
        expected_dtype=expected,
        expected_dtype_source=source,
        max_abs=max_abs if values else None,
        dtype_findings=dtype_findings,
    )
    if found:
        summary = (
            f"{details.files_with_non_finite} of {len(dumps.samples)} sampled dumps hold NaN/inf hidden states "
            f"(first: {found[0].line()}): every batch drawing one trains on NaN"
        )
        return CheckResult(NAME, "fail", summary, details, (summary, *dtype_findings))
    summary = f"{values} hidden-state values in {len(dumps.samples)} sampled dumps, all finite; stored as " + (
        ", ".join(stored) or "unknown"
    )
    if dtype_findings:
        summary += f"; {dtype_findings[0]}"
    return CheckResult(NAME, "pass", summary, details, dtype_findings)


def _dtype_findings(stored: tuple[str, ...], expected: str | None, max_abs: float, found: list[NonFinite]) -> list[str]:
    lines = []
    infinite = sum(n.inf for n in found)
    for dtype in stored:
        limit = LARGEST_FINITE.get(dtype)
        if dtype in LOSSY_DTYPES:
            lines.append(
                f"stored as {dtype}: 2-3 mantissa bits, every value off by up to 6-12 %, the largest finite "
                f"{limit:g}; the trainer learns from states the served target never produces"
            )
        elif limit is not None and expected not in (None, dtype):
            note = f"stored as {dtype}, the target computes in {expected}: values above {limit:g} become inf"
            if infinite:
                note += f" ({infinite} inf found: the cast overflowed)"
            elif max_abs > OVERFLOW_HEADROOM * limit:
                note += f" (largest |value| {max_abs:.4g} is within 2x of it)"
            lines.append(note)
        elif expected is not None and dtype != expected:
            lines.append(f"stored as {dtype}, the target computes in {expected}")
    return lines
