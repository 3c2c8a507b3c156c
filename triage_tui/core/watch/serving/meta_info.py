"""SGLang's per-request ``meta_info`` (JSONL): verification steps, completion and accepted-draft counts.

One serving source (``ServingSource``: kind "meta_info"), followed as the file grows. completion
tokens / verify steps is SGLang's own accept length; as counts: drafts = verify steps, accepted =
completion tokens - verify steps (each step yields its accepted drafts plus the bonus token). The
histogram, when present, gives per-position counts: position i was accepted in every step that
accepted more than i drafts. (``tokenizer_manager.py``, ``_calculate_spec_decoding_metrics``,
sgl-project/sglang commit 01bb3c807f7e.)
"""

from __future__ import annotations

from typing import Any, ClassVar

from triage_tui.core import bounds
from triage_tui.core.watch.serving.evidence import ServingEvidence
from triage_tui.core.watch.serving.json_lines import JsonLinesSource, Skipped, integer
from triage_tui.core.watch.serving.source import Following


class MetaInfoFile(JsonLinesSource):
    """SGLang's per-request responses, one JSON object per line (bare or under "meta_info"), pooled.

    A line that is not JSON, or whose counts are not integers, is counted and skipped; counts that
    cannot be (negative, fewer completion tokens than verify steps, a histogram longer than any
    draft) make the file an error from then on, naming the line. Claims any file whose first byte
    is ``{``: a more specific JSON source is registered before it.
    """

    kind: ClassVar[str] = "meta_info"

    @classmethod
    def claims(cls, location: str, head: bytes) -> bool:
        return not bounds.is_url(location) and head.lstrip()[:1] == b"{"

    def __init__(self, location: str, following: Following | None = None) -> None:
        super().__init__(location, following)
        self.requests = 0
        self.verify = 0
        self.completion = 0
        self.histogram: list[int] = []
        self.histogram_steps = 0  # verify steps of the requests that carried a histogram

    def _has_taken(self) -> bool:
        return self.requests > 0

    def _take_object(self, document: dict[str, Any]) -> None:
        meta = document.get("meta_info", document)
        if not isinstance(meta, dict) or "spec_verify_ct" not in meta:
            raise Skipped
        steps = bounds.count(integer(meta.get("spec_verify_ct")), "spec_verify_ct")
        tokens = bounds.count(integer(meta.get("completion_tokens")), "completion_tokens")
        if steps == 0:
            return  # no decode step: nothing to pool
        if tokens < steps:
            raise bounds.Impossible(
                f"{tokens} completion tokens in {steps} verify steps (every step yields at least one token)"
            )
        counts = meta.get("spec_accept_histogram")
        if counts is not None:
            if not isinstance(counts, list):
                raise Skipped
            if len(counts) > bounds.MAX_POSITION_INDEX + 2:
                raise bounds.Impossible(
                    f"spec_accept_histogram of {len(counts)} entries (at most {bounds.MAX_POSITION_INDEX + 2})"
                )
            counts = [bounds.count(integer(c), "spec_accept_histogram entry") for c in counts]
        # A histogram of this request's steps counts each step at its accepted drafts (0 to k): no
        # step accepted more than its last entry, so the mean is at most its length.
        of_steps = counts is not None and len(counts) > 0 and sum(counts) == steps
        k = len(counts) - 1 if counts is not None and of_steps else None
        bounds.acceptance_length(tokens / steps, "completion_tokens / spec_verify_ct", k)
        if counts is not None and of_steps:  # else it says nothing about this request's steps
            self.histogram += [0] * (len(counts) - len(self.histogram))
            for i, c in enumerate(counts):
                self.histogram[i] += c
            self.histogram_steps += steps
        self.verify += steps
        self.completion += tokens
        self.requests += 1

    def _pooled(self) -> ServingEvidence:
        accepted = self.completion - self.verify
        per_position: tuple[float, ...] = ()
        if self.histogram and self.histogram_steps == self.verify:  # every request had one
            per_position = tuple(sum(self.histogram[i + 1 :]) / self.verify for i in range(len(self.histogram) - 1))
        convention = (
            f"1 + accepted / drafts pooled over {self.requests} requests' meta_info: drafts = spec_verify_ct, "
            "accepted = completion_tokens - spec_verify_ct (SGLang's completion_tokens / spec_verify_ct)"
        )
        notes = (f"{self.skipped} line(s) that are not a request's meta_info, skipped",) if self.skipped else ()
        return ServingEvidence(
            "sglang",
            self.location,
            1.0 + accepted / self.verify,
            per_position,
            self.verify,
            accepted,
            convention,
            notes=notes,
        )

    def nothing_found(self) -> str:
        return "holds no SGLang meta_info with spec_verify_ct and completion_tokens"
