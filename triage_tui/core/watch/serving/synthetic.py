"""Forced-acceptance settings: an engine told to accept drafts at a set rate, for benchmarking.

Figures measured under such a setting say how fast the engine is, nothing about the drafter, so
the evidence they are in is marked ``synthetic`` (shown with the setting, never scored). The
settings, as the engines define them:

- vLLM: ``speculative_config.rejection_sample_method = "synthetic"``, with
  ``synthetic_acceptance_length`` (a mean length) or ``synthetic_acceptance_rates`` (per-position
  unconditional rates); either is valid only with the synthetic method
  (``vllm/config/speculative.py``, ``SpeculativeConfig``, vLLM 0.33.0; vllm-project/vllm PR
  #38045 added the method with ``synthetic_acceptance_rate``, PR #40662 the rates and the length).
  vLLM logs the arguments a server was started with as ``non-default args: {...}``
  (``vllm/entrypoints/common/startup.py``, ``log_non_default_args``): the dict as Python prints
  it. A saved command line holds ``--speculative-config '{...}'`` as JSON, or the dotted
  ``--speculative-config.rejection_sample_method synthetic``.
- SGLang: the environment variable ``SGLANG_SIMULATE_ACC_LEN``, off when below 0 (default -1;
  ``python/sglang/srt/environ.py``; read as ``SIMULATE_ACC_LEN`` "turn off if < 0" in
  ``python/sglang/srt/speculative/spec_utils.py``, sgl-project/sglang main). It appears in a
  saved command line or launch script (``SGLANG_SIMULATE_ACC_LEN=2.5 python -m
  sglang.launch_server ...``, ``export ...``), or a dump of the environment.

Only the line number and checked numbers reach the reason, never the line's text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from triage_tui.core import bounds

# Cheap tests first: a log is mostly other lines.
_MARKS = ("synthetic", "SIMULATE_ACC_LEN")
# key, then a Python-dict, JSON, YAML or command-line separator, then the value.
_SEP = r"""\\?['"]?\s*(?:[:=]\s*|\s+)\\?['"]?"""
_VLLM_METHOD = re.compile(r"rejection[_-]sample[_-]method" + _SEP + r"synthetic\b")
_VLLM_VALUE = re.compile(r"synthetic[_-]acceptance[_-](length|rates?)" + _SEP + r"(\[|[-+0-9.])([-+0-9.eE]*)")
_SGLANG = re.compile(r"\bSGLANG_SIMULATE_ACC_LEN" + _SEP + r"([-+0-9.eE]+|nan|inf)", re.IGNORECASE)


@dataclass(frozen=True)
class ForcedAcceptance:
    """A forced-acceptance setting seen in a source: the engine it is for, and the reason shown."""

    engine: str
    reason: str


# vLLM's own refusals of a synthetic config name the setting: the server did not start with it.
_REFUSALS = ("only valid with", "requires exactly one of")


def forced_acceptance(line: str, line_number: int) -> ForcedAcceptance | None:
    """The forced-acceptance setting ``line`` holds, or None (also for SGLang's value that means off)."""
    if not any(mark in line for mark in _MARKS) or any(refusal in line for refusal in _REFUSALS):
        return None
    method = _VLLM_METHOD.search(line)
    value = _VLLM_VALUE.search(line)
    if method is not None or value is not None:
        what = "rejection_sample_method synthetic"
        if value is not None:
            name = f"synthetic_acceptance_{value.group(1)}"
            number = _number(value.group(2) + value.group(3)) if value.group(2) != "[" else None
            what += f", {name}" + (f" {number:g}" if number is not None else "")
        return ForcedAcceptance(
            "vllm",
            f"vLLM speculative_config {what} (line {line_number}): the engine accepts drafts at a set "
            "rate for benchmarking, so its figures say nothing about the drafter",
        )
    sglang = _SGLANG.search(line)
    if sglang is not None:
        try:
            simulated = float(sglang.group(1))
        except ValueError:
            return None  # not a number: SGLang falls back to its default, off
        if not simulated > 0:  # SGLang's "turn off if < 0" (and 0, nan): not forced
            return None
        number = _number(sglang.group(1))
        return ForcedAcceptance(
            "sglang",
            f"SGLANG_SIMULATE_ACC_LEN{f' {number:g}' if number is not None else ''} (line {line_number}): "
            "SGLang simulates the acceptance length for benchmarking, so its figures say nothing about the drafter",
        )
    return None


def _number(text: str) -> float | None:
    """A setting's value, only when it is a plausible acceptance length (else it is not shown)."""
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value) or not 0.0 < value <= bounds.MAX_ACCEPTANCE_LENGTH:
        return None
    return value
