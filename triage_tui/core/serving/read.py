"""Serving sources read once (``check --serving``) or followed (the watcher), pooled into one piece of evidence."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from triage_tui.core.errors import BadInput
from triage_tui.core.runs.manifest import is_url
from triage_tui.core.serving import tuning
from triage_tui.core.serving.evidence import ServingEvidence
from triage_tui.core.serving.logs import ServingLog, samples_from_lines
from triage_tui.core.serving.meta_info import read_meta_info_jsonl
from triage_tui.core.serving.metrics import (
    SGLANG_GAUGES,
    VLLM_COUNTERS,
    MetricsWatch,
    parse_metrics_text,
    scrape,
    snapshot_evidence,
)


def read_serving(source: str) -> ServingEvidence:
    """Everything one source says now: a metrics URL, a Prometheus text file, a JSONL or a log.

    BadInput (one line) for a URL that does not answer, a missing file, or a file that holds no
    speculative-decoding figures of either engine.
    """
    if is_url(source):
        snapshot = parse_metrics_text(scrape(source), source)
        return snapshot_evidence(snapshot, source)
    path = Path(source).expanduser()
    if not path.exists():
        raise BadInput(path, "--serving: no such file or directory (or use an http:// metrics URL)")
    if not path.is_file():
        raise BadInput(path, "--serving: not a file (a vLLM/SGLang log, a /metrics text file, or a JSONL)")
    log = ServingLog(path)
    head: list[str] = []  # the first lines, to tell Prometheus text from JSONL when it is no log
    head_bytes = 0
    while True:
        lines = log.tail.poll()
        if not log.tail.bytes_read:
            lines += log.tail.flush()  # the last line of a finished log may lack its newline
            if not lines:
                break
        log.engine, samples, unparsed = samples_from_lines(lines, len(log.samples), log.engine)
        log.samples.extend(samples)
        log.unparsed += unparsed
        for line in lines:
            if head_bytes < tuning.MAX_SCRAPE_BYTES:
                head.append(line)
                head_bytes += len(line) + 1
    evidence = log.evidence()
    if evidence is not None:
        return evidence
    text = "\n".join(head)
    if any(name in text for name in (*VLLM_COUNTERS, *SGLANG_GAUGES)):
        if head_bytes >= tuning.MAX_SCRAPE_BYTES:
            raise BadInput(path, f"Prometheus text larger than {tuning.MAX_SCRAPE_BYTES >> 20} MiB")
        return snapshot_evidence(parse_metrics_text(text + "\n", str(path)), str(path))
    if "spec_verify_ct" in text:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return read_meta_info_jsonl(path, handle)
    if log.unparsed:
        raise BadInput(
            path, f"{log.unparsed} 'SpecDecoding metrics:' line(s), none in the vLLM v1 format this version reads"
        )
    raise BadInput(
        path,
        "holds no vLLM 'SpecDecoding metrics:' line, SGLang 'Decode batch ... accept len' line, "
        "speculative-decoding Prometheus metric or SGLang meta_info",
    )


def read_serving_sources(sources: Sequence[str]) -> ServingEvidence | None:
    """Every source read and pooled into one piece of evidence (None for no sources)."""
    if not sources:
        return None
    parts = [read_serving(source) for source in sources]
    return combine_evidence(parts)


def combine_evidence(parts: Sequence[ServingEvidence]) -> ServingEvidence | None:
    """Several sources as one: counts pooled when every part has them, else the parts' mean."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    # One engine's figures only: another engine serves another drafter setup (the first named wins).
    engine = parts[0].engine
    others = [p for p in parts if p.engine != engine]
    parts = [p for p in parts if p.engine == engine]
    notes = [f"{p.source}: not pooled, it is {p.engine} and the first source is {engine}" for p in others]
    if len(parts) == 1:
        return replace(parts[0], notes=parts[0].notes + tuple(notes)) if notes else parts[0]
    source = ", ".join(p.source for p in parts)
    notes += [f"{p.source}: {n}" for p in parts for n in p.notes]
    if all(p.drafts for p in parts) and all(p.accepted is not None for p in parts):
        drafts = sum(p.drafts or 0 for p in parts)
        accepted = sum(p.accepted or 0 for p in parts)
        k = min(len(p.per_position) for p in parts)
        per_position = tuple(sum(p.per_position[i] * (p.drafts or 0) for p in parts) / drafts for i in range(k))
        return ServingEvidence(
            engine,
            source,
            1.0 + accepted / drafts,
            per_position,
            drafts,
            accepted,
            f"1 + accepted / drafts over the counts of {len(parts)} sources pooled",
            (),
            tuple(notes),
            tuple(parts),
        )
    lengths = [p.acceptance_length for p in parts if p.acceptance_length is not None]
    mean = sum(lengths) / len(lengths) if lengths else None
    return ServingEvidence(
        engine,
        source,
        mean,
        (),
        None,
        None,
        f"mean of {len(lengths)} sources' acceptance lengths (not all have counts)",
        (),
        tuple(notes),
        tuple(parts),
    )


class ServingWatch:
    """A run's serving sources followed over time (the watcher's thread polls it, never the UI's)."""

    def __init__(
        self, sources: Sequence[str], *, clock: Callable[[], float] = time.monotonic, background: bool = False
    ) -> None:
        self.followers: list[ServingLog | MetricsWatch] = [
            MetricsWatch(s, clock=clock, background=background) if is_url(s) else ServingLog(s) for s in sources
        ]
        # The TUI (background) reads a long log over several polls; a one-shot poll reads it all.
        self.to_end = not background
        self._parts: tuple[ServingEvidence, ...] = ()
        self._combined: ServingEvidence | None = None

    def poll(self) -> tuple[ServingEvidence | None, tuple[str, ...]]:
        """(the pooled evidence so far, one line per source that failed this time).

        The evidence is the same object as at the previous poll when no source gave anything new.
        """
        parts, errors = [], []
        for follower in self.followers:
            evidence = follower.poll() if isinstance(follower, MetricsWatch) else follower.poll(to_end=self.to_end)
            if isinstance(follower, MetricsWatch) and follower.error:
                errors.append(follower.error)
            elif isinstance(follower, ServingLog) and not follower.path.exists():
                errors.append(f"{follower.path}: no such file (yet)")
            if evidence is not None:
                parts.append(evidence)
        if len(parts) != len(self._parts) or any(a is not b for a, b in zip(parts, self._parts, strict=True)):
            self._parts = tuple(parts)
            combined = combine_evidence(parts)
            if combined is not None and len(parts) > 1:
                # Over time, several sources' intervals do not line up: the chart follows the first.
                combined = replace(combined, samples=parts[0].samples)
            self._combined = combined
        return self._combined, tuple(errors)
