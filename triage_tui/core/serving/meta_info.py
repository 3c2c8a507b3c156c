"""SGLang's per-request ``meta_info`` (JSONL): verification steps, completion and accepted-draft counts."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeGuard

from triage_tui.core.errors import BadInput
from triage_tui.core.serving.evidence import ServingEvidence


def read_meta_info_jsonl(path: Path, lines: Iterable[str]) -> ServingEvidence:
    """Per-request SGLang ``meta_info`` (one JSON object per line, bare or under "meta_info"), pooled.

    completion tokens / verify steps is SGLang's own accept length; as counts: drafts = verify
    steps, accepted = completion tokens - verify steps (each step yields its accepted drafts plus
    the bonus token). The histogram, when present, gives per-position counts: position i was
    accepted in every step that accepted more than i drafts.
    """
    verify = completion = requests = 0
    histogram: list[int] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            document = json.loads(line)
        except json.JSONDecodeError as err:
            raise BadInput(path, f"line {number}: not JSON ({err.msg})") from None
        meta = document.get("meta_info", document) if isinstance(document, dict) else None
        if not isinstance(meta, dict) or "spec_verify_ct" not in meta:
            continue
        steps, tokens = meta.get("spec_verify_ct"), meta.get("completion_tokens")
        if not _count(steps) or not _count(tokens):
            continue
        verify += steps
        completion += tokens
        requests += 1
        counts = meta.get("spec_accept_histogram")
        if isinstance(counts, list) and all(_count(c) or c == 0 for c in counts):
            histogram += [0] * (len(counts) - len(histogram))
            for i, c in enumerate(counts):
                histogram[i] += c
    if not requests:
        raise BadInput(path, "holds no SGLang meta_info with spec_verify_ct and completion_tokens")
    accepted = completion - verify
    per_position: tuple[float, ...] = ()
    if histogram and sum(histogram) == verify:
        per_position = tuple(sum(histogram[i + 1 :]) / verify for i in range(len(histogram) - 1))
    convention = (
        f"1 + accepted / drafts pooled over {requests} requests' meta_info: drafts = spec_verify_ct, "
        "accepted = completion_tokens - spec_verify_ct (SGLang's completion_tokens / spec_verify_ct)"
    )
    return ServingEvidence("sglang", str(path), 1.0 + accepted / verify, per_position, verify, accepted, convention)


def _count(value: Any) -> TypeGuard[int]:
    """A positive int count (bool is an int in Python, never a count)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
