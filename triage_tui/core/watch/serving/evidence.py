"""Serving evidence: what vLLM and SGLang accepted from the drafter, in one convention.

Sources, each read exactly as the engine writes it:

- vLLM (v1 engine) logs one line per logging interval, counts reset after each
  (``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingLogging.log``; vllm-project/vllm commit
  016a8587edb0 and later main)::

      SpecDecoding metrics: Mean acceptance length: 1.83, Accepted throughput: 41.20 tokens/s,
      Drafted throughput: 148.80 tokens/s, Accepted: 412 tokens, Drafted: 1488 tokens,
      Per-position acceptance rate: 0.594, 0.196, 0.040, Avg Draft acceptance rate: 27.7%

  and Prometheus counters (same file, ``SpecDecodingProm``): ``vllm:spec_decode_num_drafts``,
  ``…num_draft_tokens``, ``…num_accepted_tokens`` and ``…num_accepted_tokens_per_pos{position}``,
  exposed with prometheus_client's ``_total`` suffix, one series per engine label set.
- SGLang logs ``Decode batch, #running-req: …, accept len: 1.02, accept rate: 0.01, …`` every
  ``decode_log_interval`` batches (``python/sglang/srt/managers/scheduler_metrics_mixin.py``,
  ``log_decode_stats``; sgl-project/sglang commit 01bb3c807f7e; older releases write
  ``Decode batch. #running-req: …`` and no accept rate), and the gauges
  ``sglang:spec_accept_length`` / ``sglang:spec_accept_rate`` (``python/sglang/srt/metrics/
  collector.py``) with the last interval's value. Per request, ``meta_info`` carries
  ``spec_verify_ct``, ``completion_tokens`` and, in newer releases, the accepted-draft count and
  ``spec_accept_histogram`` (``tokenizer_manager.py``, ``_calculate_spec_decoding_metrics``).

The one convention (docs/contracts.md, check --json serving): acceptance length =
1 + accepted / drafts over pooled counts, where a draft is one verification step and accepted
counts draft tokens the target kept (the bonus token is the 1); per-position i = drafts whose
first i+1 tokens were all accepted / drafts (unconditional, as vLLM logs it). Where a source
gives means and no counts (SGLang's log and gauges) the means are averaged and the convention
string says so; SGLang's own accept len already includes the bonus token
(``spec_num_accepted_tokens += num_accepted_tokens + bs``), so it is the same quantity.
Sources that keep other conventions (ModelOpt's profile: lengths that count the bonus token,
conditional and marginal rates; vLLM's per-request histogram of accepted drafts) are converted
into this one, and the evidence's ``convention`` string says how.

Evidence is *scored* (run flags, hypotheses) only when it was measured on the drafter: a
placeholder written before any measurement (``measured`` false) and figures an engine forced for
benchmarking (``synthetic``, the setting and where it was seen) are shown, never scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from triage_tui.core.json_numbers import json_number

# The serving engines whose readings the checks know (config_contract); a profile is "modelopt".
ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class ServingSample:
    """One reporting interval of one source (a log line, or the difference of two scrapes)."""

    index: int
    time: str | None  # the engine's own timestamp text, when the line has one
    acceptance_length: float
    per_position: tuple[float, ...] = ()
    drafts: int | None = None
    accepted: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "time": self.time,
            "acceptance_length": json_number(self.acceptance_length),
            "per_position": [json_number(p) for p in self.per_position],
            "drafts": self.drafts,
            "accepted": self.accepted,
        }


@dataclass(frozen=True)
class ServingEvidence:
    """What one serving source (or several pooled) says the drafter achieved."""

    engine: str  # "vllm" | "sglang"
    source: str
    acceptance_length: float | None
    per_position: tuple[float, ...]
    drafts: int | None
    accepted: int | None
    convention: str
    samples: tuple[ServingSample, ...] = ()
    notes: tuple[str, ...] = ()
    sources: tuple[ServingEvidence, ...] = ()  # the parts, when several sources were pooled
    # Why the figures were forced by the engine (a benchmark's synthetic acceptance: the setting,
    # where it was seen); None when nothing forced them.
    synthetic: str | None = None
    # False for a placeholder written before anything was measured (ModelOpt's export stub).
    measured: bool = True

    @property
    def scored(self) -> bool:
        """Whether flags and hypotheses may use these figures: measured, and not forced."""
        return self.measured and self.synthetic is None

    def not_scored(self) -> str | None:
        """Why the figures are not scored, in one line; None when they are."""
        if not self.measured:
            return "not measured: a placeholder written before any acceptance was measured"
        if self.synthetic is not None:
            return f"synthetic: {self.synthetic}"
        return None

    def to_json(self, *, with_samples: bool = True) -> dict[str, Any]:
        document: dict[str, Any] = {
            "engine": self.engine,
            "source": self.source,
            "acceptance_length": json_number(self.acceptance_length),
            "per_position": [json_number(p) for p in self.per_position],
            "drafts": self.drafts,
            "accepted": self.accepted,
            "convention": self.convention,
            "notes": list(self.notes),
            "measured": self.measured,
            "synthetic": self.synthetic,
        }
        if with_samples:
            document["samples"] = [s.to_json() for s in self.samples]
        if self.sources:
            document["sources"] = [s.to_json(with_samples=False) for s in self.sources]
        return document
