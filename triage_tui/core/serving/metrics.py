"""Prometheus text: vLLM's spec-decode counters and SGLang's gauges, scraped or read from a file.

A metrics URL is scraped at most every ``tuning.SCRAPE_INTERVAL_SECS`` in the TUI; the difference of two
scrapes of counters is one interval's sample, as a log line would be.
"""

from __future__ import annotations

import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from triage_tui.core.errors import BadInput
from triage_tui.core.serving import tuning
from triage_tui.core.serving.evidence import ServingEvidence, ServingSample

VLLM_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)
SGLANG_GAUGES = ("sglang:spec_accept_length", "sglang:spec_accept_rate")


@dataclass(frozen=True)
class MetricsSnapshot:
    """One read of a /metrics page: vLLM's cumulative counters or SGLang's gauges."""

    engine: str
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: tuple[int, ...] = ()  # vLLM: accepted count at each position
    accept_length: float | None = None  # SGLang: the last interval's gauge, averaged over label sets
    accept_rate: float | None = None
    label_sets: int = 0


def parse_metrics_text(text: str, source: str) -> MetricsSnapshot:
    """vLLM's or SGLang's speculative-decoding metrics out of Prometheus text; BadInput when neither."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name
                # A counter's family drops "_total"; its samples keep it. "_created" is a timestamp.
                if name.endswith("_created"):
                    continue
                base = name.removesuffix("_total")
                if base in VLLM_COUNTERS or base in SGLANG_GAUGES:
                    values.setdefault(base, []).append((dict(sample.labels), float(sample.value)))
    except ValueError as err:
        raise BadInput(source, f"not Prometheus text: {err}") from None
    if any(name in values for name in VLLM_COUNTERS):

        def total(name: str) -> int:
            return round(sum(v for _, v in values.get(name, ())))

        positions: dict[int, float] = {}
        for labels, value in values.get(VLLM_COUNTERS[3], ()):
            try:
                position = int(labels.get("position", ""))
            except ValueError:
                continue
            positions[position] = positions.get(position, 0.0) + value
        per_position = tuple(round(positions.get(i, 0.0)) for i in range(max(positions) + 1)) if positions else ()
        label_sets = len(values.get(VLLM_COUNTERS[0], ()))
        return MetricsSnapshot(
            "vllm",
            total(VLLM_COUNTERS[0]),
            total(VLLM_COUNTERS[1]),
            total(VLLM_COUNTERS[2]),
            per_position,
            label_sets=label_sets,
        )
    if SGLANG_GAUGES[0] in values:
        lengths = [v for _, v in values[SGLANG_GAUGES[0]] if math.isfinite(v) and v > 0]
        rates = [v for _, v in values.get(SGLANG_GAUGES[1], ()) if math.isfinite(v)]
        return MetricsSnapshot(
            "sglang",
            accept_length=sum(lengths) / len(lengths) if lengths else None,
            accept_rate=sum(rates) / len(rates) if rates else None,
            label_sets=len(values[SGLANG_GAUGES[0]]),
        )
    raise BadInput(
        source, "holds no speculative-decoding metrics (vllm:spec_decode_num_drafts_total or sglang:spec_accept_length)"
    )


def snapshot_evidence(snapshot: MetricsSnapshot, source: str, samples: Sequence[ServingSample] = ()) -> ServingEvidence:
    """A snapshot as evidence: vLLM's counters are since the server started, so they pool exactly."""
    notes: list[str] = []
    if snapshot.engine == "vllm":
        if snapshot.label_sets > 1:
            notes.append(f"counters summed over {snapshot.label_sets} engine label sets")
        if not snapshot.drafts:
            notes.append("no drafts counted yet (vllm:spec_decode_num_drafts_total is 0)")
            return ServingEvidence(
                "vllm", source, None, (), 0, snapshot.accepted, "no drafts", tuple(samples), tuple(notes)
            )
        per_position = tuple(count / snapshot.drafts for count in snapshot.per_position)
        convention = (
            "1 + accepted / drafts over pooled counts; per-position = accepted at position i / drafts "
            "(vLLM's Prometheus counters since the server started)"
        )
        return ServingEvidence(
            "vllm",
            source,
            1.0 + snapshot.accepted / snapshot.drafts,
            per_position,
            snapshot.drafts,
            snapshot.accepted,
            convention,
            tuple(samples),
            tuple(notes),
        )
    if snapshot.label_sets > 1:
        notes.append(f"sglang:spec_accept_length averaged over {snapshot.label_sets} label sets")
    if snapshot.accept_rate is not None:
        # Its definition changed between releases (accepted drafts / proposed drafts, or with the
        # bonus token in both), so it is reported, not used.
        notes.append(f"sglang:spec_accept_rate {snapshot.accept_rate:.3f} (definition varies by SGLang release)")
    convention = (
        "SGLang's sglang:spec_accept_length gauge: the last logging interval's completion tokens / "
        "verify steps (bonus token included); no counts"
    )
    return ServingEvidence(
        "sglang", source, snapshot.accept_length, (), None, None, convention, tuple(samples), tuple(notes)
    )


def scrape(url: str, *, timeout: float = tuning.SCRAPE_TIMEOUT_SECS) -> str:
    """The text of a /metrics page; BadInput (one line) when it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read(tuning.MAX_SCRAPE_BYTES + 1)
    except urllib.error.HTTPError as err:
        raise BadInput(url, f"metrics URL answered HTTP {err.code} {err.reason}") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise BadInput(url, f"metrics URL does not answer: {reason}") from None
    if len(body) > tuning.MAX_SCRAPE_BYTES:
        raise BadInput(url, f"metrics page larger than {tuning.MAX_SCRAPE_BYTES >> 20} MiB")
    return body.decode("utf-8", "replace")


class MetricsWatch:
    """A /metrics URL scraped now and then; each scrape after the first adds an interval sample.

    ``background=True`` (the TUI's watcher) scrapes on a short-lived thread of its own, so a URL
    that hangs until the timeout never holds up the polling of event files; the result is taken
    in at the next poll after it arrived. ``scan`` scrapes in line, once.
    """

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval: float = tuning.SCRAPE_INTERVAL_SECS,
        background: bool = False,
    ) -> None:
        self.url = url
        self.clock = clock
        self.interval = interval
        self.background = background
        self._last_scrape: float | None = None
        self._previous: MetricsSnapshot | None = None
        self.samples: list[ServingSample] = []
        self.error: str | None = None
        self._evidence: ServingEvidence | None = None
        self._lock = threading.Lock()
        self._arrived: MetricsSnapshot | BadInput | None = None
        self.pending: threading.Thread | None = None  # the scrape in flight (tests join it)

    def poll(self) -> ServingEvidence | None:
        now = self.clock()
        if self._last_scrape is None or now - self._last_scrape >= self.interval:
            if not self.background:
                self._last_scrape = now
                self._take(self._scrape())
                return self._evidence
            if self.pending is None or not self.pending.is_alive():
                self._last_scrape = now
                self.pending = threading.Thread(
                    target=self._scrape_in_background, daemon=True, name=f"scrape {self.url}"
                )
                self.pending.start()
        with self._lock:
            arrived, self._arrived = self._arrived, None
        if arrived is not None:
            self._take(arrived)
        return self._evidence

    def _scrape(self) -> MetricsSnapshot | BadInput:
        try:
            return parse_metrics_text(scrape(self.url), self.url)
        except BadInput as err:
            return err

    def _scrape_in_background(self) -> None:
        result = self._scrape()
        with self._lock:
            self._arrived = result

    def _take(self, result: MetricsSnapshot | BadInput) -> None:
        if isinstance(result, BadInput):
            self.error = result.line()
            return
        self.error = None
        sample = _interval_sample(self._previous, result, len(self.samples))
        if sample is not None:
            self.samples.append(sample)
        self._previous = result
        self._evidence = snapshot_evidence(result, self.url, self.samples)


def _interval_sample(previous: MetricsSnapshot | None, current: MetricsSnapshot, index: int) -> ServingSample | None:
    stamp = time.strftime("%H:%M:%S")
    if current.engine == "sglang":
        if current.accept_length is None:
            return None
        return ServingSample(index, stamp, current.accept_length)
    if previous is None or previous.engine != "vllm":
        return None
    drafts, accepted = current.drafts - previous.drafts, current.accepted - previous.accepted
    if drafts < 0 or accepted < 0:  # the server restarted: its counters start over
        drafts, accepted = current.drafts, current.accepted
        before: tuple[int, ...] = ()
    else:
        before = previous.per_position
    if drafts <= 0:
        return None
    per_position = tuple(
        (count - (before[i] if i < len(before) else 0)) / drafts for i, count in enumerate(current.per_position)
    )
    return ServingSample(index, stamp, 1.0 + accepted / drafts, per_position, drafts, accepted)
