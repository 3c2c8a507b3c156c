"""vLLM's per-request speculative-decoding metrics: responses saved as JSON lines, pooled.

One serving source (``ServingSource``: kind "vllm_requests"), followed as the file grows. A vLLM
server started with ``--per-request-spec-decode-metrics summary`` (or ``detailed``; vLLM >= 0.28,
vllm-project/vllm pull request #48915) adds to every single-sequence completion or chat
completion response a top-level ``metrics.speculative_decoding`` object
(``vllm/entrypoints/generate/base/protocol.py``, ``SpeculativeDecodingMetrics``; built by
``RequestSpecDecodeMetrics.to_dict`` in ``vllm/v1/metrics/stats.py``, vLLM 0.33.0):
``acceptance_histogram`` (dense: index j = verify steps that accepted exactly j draft tokens,
``num_spec_tokens + 1`` entries), ``num_spec_steps`` (= the histogram's sum),
``num_accepted_draft_tokens`` (= the sum of j x count), ``num_draft_tokens`` (proposed, after
grammar-invalidated ones), ``num_spec_tokens``, ``mean_acceptance_length`` (1 + accepted / steps,
or 1.0 without a step) and ``draft_acceptance_rate`` (accepted / drafted tokens). A streamed
response carries it in its last chunk; a line may keep the ``data: `` prefix of the stream.

Into the one convention: drafts = num_spec_steps, accepted = num_accepted_draft_tokens, pooled
over requests; per-position i = steps that accepted more than i drafts / steps. A response whose
figures contradict one another (a histogram that does not sum to the steps, a mean that is not
1 + accepted / steps) makes the file an error: vLLM computes them all from one histogram.
"""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

from triage_tui.core import bounds
from triage_tui.core.watch.serving.evidence import ServingEvidence
from triage_tui.core.watch.serving.json_lines import JsonLinesSource, Skipped, integer
from triage_tui.core.watch.serving.source import Following

# A response object's first key after its id (vLLM: id, object, created, model, choices; the openai
# client's model_dump: id, choices): close to the start of the first line, whatever its text.
_RESPONSE_HEAD = re.compile(rb'^\s*(?:data:\s*)?\{[^\n]*?(?<!\\)"(?:choices|speculative_decoding)"\s*:')
_SSE_PREFIX = "data:"


class VllmRequestMetrics(JsonLinesSource):
    """vLLM responses with ``metrics.speculative_decoding``, one per line, pooled (kind "vllm_requests").

    A line that is not JSON, or whose figures are not integers, is counted and skipped; a response
    without the metrics (an ``n > 1`` request, a server without the flag) is counted apart; figures
    that cannot be or contradict one another make the file an error from then on, naming the line.
    """

    kind: ClassVar[str] = "vllm_requests"

    @classmethod
    def claims(cls, location: str, head: bytes) -> bool:
        return not bounds.is_url(location) and _RESPONSE_HEAD.match(head) is not None

    def __init__(self, location: str, following: Following | None = None) -> None:
        super().__init__(location, following)
        self.requests = 0  # responses pooled (with at least one verify step)
        self.without = 0  # responses without metrics.speculative_decoding
        self.steps = 0
        self.accepted = 0
        self.draft_tokens = 0
        self.histogram: list[int] = []

    def _has_taken(self) -> bool:
        return self.steps > 0

    def _json_text(self, line: str) -> str:
        text = line.strip()
        if text.startswith(_SSE_PREFIX):  # a line of a saved stream
            text = text[len(_SSE_PREFIX) :].strip()
        return "" if text == "[DONE]" else text  # [DONE]: the end of a saved stream

    def _take_object(self, document: dict[str, Any]) -> None:
        metrics = document.get("metrics")
        spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
        if not isinstance(spec, dict):
            if "choices" not in document:
                raise Skipped
            self.without += 1
            return
        histogram = spec.get("acceptance_histogram")
        if not isinstance(histogram, list):
            raise Skipped
        if len(histogram) > bounds.MAX_POSITION_INDEX + 2:
            raise bounds.Impossible(
                f"acceptance_histogram of {len(histogram)} entries (at most {bounds.MAX_POSITION_INDEX + 2})"
            )
        counts = [bounds.count(integer(c), "acceptance_histogram entry") for c in histogram]
        steps = bounds.count(integer(spec.get("num_spec_steps")), "num_spec_steps")
        accepted = bounds.count(integer(spec.get("num_accepted_draft_tokens")), "num_accepted_draft_tokens")
        drafted = bounds.count(integer(spec.get("num_draft_tokens")), "num_draft_tokens")
        k = bounds.count(integer(spec.get("num_spec_tokens")), "num_spec_tokens")
        mean = _number(spec.get("mean_acceptance_length"))
        rate = _number(spec.get("draft_acceptance_rate"))
        if len(counts) != k + 1:
            raise bounds.Impossible(
                f"acceptance_histogram of {len(counts)} entries for num_spec_tokens {k} (vLLM: k + 1)"
            )
        if sum(counts) != steps:
            raise bounds.Impossible(f"acceptance_histogram sums to {sum(counts)} steps, num_spec_steps is {steps}")
        if sum(j * c for j, c in enumerate(counts)) != accepted:
            raise bounds.Impossible(
                f"acceptance_histogram holds {sum(j * c for j, c in enumerate(counts))} accepted drafts, "
                f"num_accepted_draft_tokens is {accepted}"
            )
        reached = [sum(counts[i + 1 :]) for i in range(k)]
        bounds.accepted_within(accepted, drafts=steps, draft_tokens=drafted, per_position=reached)
        bounds.rate(rate, "draft_acceptance_rate")
        length = bounds.acceptance_length(mean, "mean_acceptance_length", k)
        if steps and not math.isclose(length, 1.0 + accepted / steps, rel_tol=1e-9, abs_tol=1e-9):
            raise bounds.Impossible(
                f"mean_acceptance_length {length:.4g} is not 1 + {accepted} accepted / {steps} steps"
            )
        if not steps:
            return  # no verify step (a one-token answer): nothing to pool
        self.histogram += [0] * (len(counts) - len(self.histogram))
        for j, c in enumerate(counts):
            self.histogram[j] += c
        self.steps += steps
        self.accepted += accepted
        self.draft_tokens += drafted
        self.requests += 1

    def _pooled(self) -> ServingEvidence:
        per_position = tuple(sum(self.histogram[i + 1 :]) / self.steps for i in range(len(self.histogram) - 1))
        convention = (
            f"1 + accepted / drafts pooled over {self.requests} requests' metrics.speculative_decoding: "
            "drafts = num_spec_steps, accepted = num_accepted_draft_tokens; per-position i = steps that "
            "accepted more than i drafts (acceptance_histogram) / steps"
        )
        notes = []
        if self.draft_tokens:
            notes.append(
                f"{self.draft_tokens} draft tokens proposed, {self.accepted / self.draft_tokens:.1%} accepted "
                "(vLLM's draft_acceptance_rate)"
            )
        if self.without:
            notes.append(
                f"{self.without} response(s) without metrics.speculative_decoding (n > 1, or a server "
                "without --per-request-spec-decode-metrics), not pooled"
            )
        if self.skipped:
            notes.append(f"{self.skipped} line(s) that are not a JSON response, skipped")
        if self.tail.dropped:
            notes.append(f"{self.tail.dropped} line(s) over {self.tail.line_limit >> 20} MiB dropped unread")
        return ServingEvidence(
            "vllm",
            self.location,
            1.0 + self.accepted / self.steps,
            per_position,
            self.steps,
            self.accepted,
            convention,
            notes=tuple(notes),
        )

    def nothing_found(self) -> str:
        if self.without:
            return (
                f"{self.without} response(s), none with metrics.speculative_decoding (start vLLM with "
                "--per-request-spec-decode-metrics summary)"
            )
        return "holds no vLLM response with metrics.speculative_decoding and a verify step"


def _number(value: Any) -> float:
    """A JSON number as a float; Skipped for anything else, Impossible for an integer no float holds."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise Skipped
    try:
        return float(value)
    except OverflowError:
        raise bounds.Impossible(f"an integer of {len(str(abs(value)))} digits where a rate or mean is") from None
