"""Are the drafter's 8-bit weights stored with the scales that turn their codes back into weights?

From the safetensors headers: every matrix stored as F8_E4M3, F8_E5M2, I8 or U8 and the scale tensors
beside it (``weight_scale``, ``weight_scale_inv``, ``input_scale``, ``scales``, ``SCB``: the exporters'
names, core/formats/quantization.py). Of a weight with none, a sample of rows (at most
``SAMPLED_ROWS``) says how much of the 8-bit range its codes fill: quantized codes reach the top of
the range (a per-tensor FP8 scale maps the largest weight to 448), a plain cast of small float
weights does not. Both serve at acceptance near zero when the engine has no scale to multiply by
(https://github.com/sgl-project/sglang/issues/32440, https://github.com/sgl-project/sglang/issues/37736,
https://github.com/sgl-project/sglang/issues/35797, https://github.com/vllm-project/vllm/issues/49552).
A ``quantization_config`` that promises FP8 or int8 weights says the engine will take the codes as
quantized and look for the scales. FP8 weights with their scales, per tensor or per channel, are
healthy: the replay builds the drafter dequantized (core/drafter.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triage_tui.core.diagnose.checks.result import CheckResult, key_value_lines, table_lines
from triage_tui.core.formats.quantization import (
    EIGHT_BIT_CODES,
    STORED_NAMES,
    QuantizationPromise,
    eight_bit_weights,
    quantization_promise,
    scales_beside,
)

if TYPE_CHECKING:
    from triage_tui.core.formats.checkpoint import DrafterCheckpoint

NAME = "quantization"

# Rows of an unscaled 8-bit weight read to see how much of the range its codes fill (a K2 drafter's
# lm_head is 32 000 rows; the largest code of a few hundred rows is the tensor's, to a few percent).
SAMPLED_ROWS = 256
# How many weights the range is sampled for: the evidence needs one, the drill-down shows a few.
SAMPLED_WEIGHTS = 4


@dataclass(frozen=True)
class QuantizedWeight:
    """One 8-bit matrix: its stored dtype, the scales beside it, and (unscaled) how far its codes reach."""

    name: str
    stored: str  # "F8_E4M3", "I8", ...
    shape: tuple[int, ...]
    scales: tuple[str, ...]
    largest_code: float | None = None  # max |code| over the sampled rows; None when not sampled
    range_max: float = 0.0  # the dtype's largest code

    @property
    def range_fraction(self) -> float | None:
        return self.largest_code / self.range_max if self.largest_code is not None and self.range_max else None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.stored,
            "shape": list(self.shape),
            "scales": list(self.scales),
            "largest_code": self.largest_code,
            "range_fraction": self.range_fraction,
        }


@dataclass(frozen=True)
class QuantizationDetails:
    """What `quantization` found (docs/contracts.md, `check --json`)."""

    weights: tuple[QuantizedWeight, ...]  # every 8-bit matrix
    promise: QuantizationPromise | None  # the config's quantization_config, read

    @property
    def unscaled(self) -> tuple[QuantizedWeight, ...]:
        return tuple(w for w in self.weights if not w.scales)

    def fullest(self) -> QuantizedWeight | None:
        """The sampled unscaled weight whose codes reach furthest into the range."""
        sampled = [w for w in self.unscaled if w.range_fraction is not None]
        return max(sampled, key=lambda w: w.range_fraction or 0.0) if sampled else None

    def to_json(self) -> dict[str, Any]:
        return {
            "eight_bit_weights": len(self.weights),
            "unscaled": [w.name for w in self.unscaled],
            "weights": [w.to_json() for w in self.weights],
            "quantization_config": self.promise.to_json() if self.promise is not None else None,
        }

    def drilldown(self) -> list[str]:
        promise = f"{self.promise.method}: {self.promise.scheme}" if self.promise is not None else "none"
        lines = key_value_lines(
            [
                ("eight_bit_weights", len(self.weights)),
                ("unscaled", len(self.unscaled)),
                ("quantization_config", promise),
            ]
        )
        if self.weights:
            rows = [
                (
                    w.name,
                    w.stored,
                    ", ".join(n.rsplit(".", 1)[-1] for n in w.scales) or "none",
                    f"{w.range_fraction:.0%}" if w.range_fraction is not None else "-",
                )
                for w in self.weights
            ]
            lines += ["", *table_lines(("weight", "dtype", "scales", "codes fill"), rows)]
        return lines


def check_quantization(checkpoint: DrafterCheckpoint | None) -> CheckResult:
    """The drafter's 8-bit weights against the scales stored beside them and its quantization_config."""
    if checkpoint is None:
        return CheckResult.skipped(NAME, "no drafter checkpoint found for this run (pass --checkpoint)")
    if checkpoint.not_eagle3 is not None:
        return CheckResult.skipped(NAME, checkpoint.not_eagle3)
    promise = quantization_promise(checkpoint.config)
    weights: list[QuantizedWeight] = []
    sampled = 0
    for info in eight_bit_weights(checkpoint.tensors):
        scales = scales_beside(info.name, checkpoint.tensors)
        largest = None
        if not scales and sampled < SAMPLED_WEIGHTS:
            largest = _largest_code(checkpoint, info.name)
            sampled += 1
        weights.append(
            QuantizedWeight(
                info.name, STORED_NAMES[info.dtype], info.shape, scales, largest, EIGHT_BIT_CODES[info.dtype]
            )
        )
    details = QuantizationDetails(tuple(weights), promise)
    unscaled = details.unscaled
    if not weights:
        said = f" (quantization_config: {promise.method} {promise.scheme})" if promise is not None else ""
        return CheckResult(NAME, "pass", f"no weight is stored in an 8-bit dtype{said}", details)
    if not unscaled:
        return CheckResult(NAME, "pass", f"all {len(weights)} 8-bit weights have their scales beside them", details)
    evidence = [unscaled_line(details)]
    summary = f"{len(unscaled)} of {len(weights)} 8-bit weights have no scale beside them: {unscaled[0].name}, ..."
    return CheckResult(NAME, "fail", summary, details, tuple(evidence))


def unscaled_line(details: QuantizationDetails) -> str:
    unscaled = details.unscaled
    names = ", ".join(f"{w.name} ({w.stored})" for w in unscaled[:6])
    more = f" and {len(unscaled) - 6} more" if len(unscaled) > 6 else ""
    return (
        f"{len(unscaled)} of {len(details.weights)} weights stored in 8 bits have no weight_scale, "
        f"weight_scale_inv, input_scale or scales beside them: {names}{more}"
    )


def _largest_code(checkpoint: DrafterCheckpoint, name: str) -> float | None:
    """max |code| over the first SAMPLED_ROWS rows, as a float (None when they cannot be read: the
    header still speaks)."""
    try:
        (rows,) = checkpoint.rows(name, [(0, min(SAMPLED_ROWS, checkpoint.tensors[name].shape[0]))])
    except Exception:  # noqa: BLE001 - the sample only adds a number; the names are the evidence
        return None
    if rows.numel() == 0:
        return None
    return float(rows.float().abs().max())
