"""Prometheus text: vLLM's spec-decode counters and SGLang's gauges, scraped from a URL or read from a file.

Two serving sources (``ServingSource``): ``MetricsUrl`` (kind "metrics_url", fetched through
core/bounds.py, at most every ``tuning.SCRAPE_INTERVAL_SECS`` in the TUI) and ``MetricsFile``
(kind "metrics_file", a saved page, read again when it changes). The difference of two reads of
the counters is one interval's sample, as a log line would be. Every number passes core/bounds.py
first: a NaN, infinite or negative counter, more accepted than drafted tokens, a position above
``bounds.MAX_POSITION_INDEX`` make the page an error, never an acceptance length.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from triage_tui.core import bounds
from triage_tui.core.changed_file import FileStamp, stamp_of
from triage_tui.core.errors import BadInput, SourceError
from triage_tui.core.watch.serving import tuning
from triage_tui.core.watch.serving.evidence import ServingEvidence, ServingSample
from triage_tui.core.watch.serving.source import Following, ServingPoll, source_error

VLLM_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)
SGLANG_GAUGES = ("sglang:spec_accept_length", "sglang:spec_accept_rate")


@dataclass(frozen=True)
class MetricsSnapshot:
    """One read of a /metrics page: vLLM's cumulative counters or SGLang's gauges, checked."""

    engine: str
    drafts: int = 0
    draft_tokens: int | None = None  # None when the page has no num_draft_tokens counter
    accepted: int = 0
    per_position: tuple[int, ...] = ()  # vLLM: accepted count at each position
    accept_length: float | None = None  # SGLang: the last interval's gauge, averaged over label sets
    accept_rate: float | None = None
    label_sets: int = 0


def parse_metrics_text(text: str, source: str) -> MetricsSnapshot:
    """vLLM's or SGLang's speculative-decoding metrics out of Prometheus text.

    BadInput naming ``source`` when it is not Prometheus text (the line number, none of its text),
    holds neither engine's metrics, or a number cannot be (core/bounds.py).
    """
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
                    found = values.setdefault(base, [])
                    if len(found) >= bounds.MAX_LABEL_SETS:
                        raise bounds.Impossible(f"{base} has more than {bounds.MAX_LABEL_SETS} label sets")
                    found.append((dict(sample.labels), float(sample.value)))
    except ValueError:
        raise BadInput(source, f"not Prometheus text (line {_first_bad_line(text)} does not parse)") from None
    except bounds.Impossible as err:
        raise BadInput(source, str(err)) from None
    try:
        if any(name in values for name in VLLM_COUNTERS):
            return _vllm_snapshot(values)
        if SGLANG_GAUGES[0] in values:
            return _sglang_snapshot(values)
    except bounds.Impossible as err:
        raise BadInput(source, str(err)) from None
    raise BadInput(
        source, "holds no speculative-decoding metrics (vllm:spec_decode_num_drafts_total or sglang:spec_accept_length)"
    )


def _vllm_snapshot(values: dict[str, list[tuple[dict[str, str], float]]]) -> MetricsSnapshot:
    def total(name: str) -> int:
        return sum(bounds.count(v, f"{name}_total") for _, v in values.get(name, ()))

    positions: dict[int, int] = {}
    for labels, value in values.get(VLLM_COUNTERS[3], ()):
        position = bounds.position_index(labels.get("position", ""), f"{VLLM_COUNTERS[3]} position")
        positions[position] = positions.get(position, 0) + bounds.count(value, f"{VLLM_COUNTERS[3]}_total")
    per_position = tuple(positions.get(i, 0) for i in range(max(positions) + 1)) if positions else ()
    drafts, accepted = total(VLLM_COUNTERS[0]), total(VLLM_COUNTERS[2])
    draft_tokens = total(VLLM_COUNTERS[1]) if VLLM_COUNTERS[1] in values else None
    bounds.accepted_within(accepted, drafts=drafts, draft_tokens=draft_tokens, per_position=per_position)
    return MetricsSnapshot(
        "vllm", drafts, draft_tokens, accepted, per_position, label_sets=len(values.get(VLLM_COUNTERS[0], ()))
    )


def _sglang_snapshot(values: dict[str, list[tuple[dict[str, str], float]]]) -> MetricsSnapshot:
    # 0 is SGLang's value with speculative decoding off, or before the first interval: no figure.
    lengths = [bounds.acceptance_length(v, SGLANG_GAUGES[0]) for _, v in values[SGLANG_GAUGES[0]] if v != 0]
    rates = [bounds.rate(v, SGLANG_GAUGES[1]) for _, v in values.get(SGLANG_GAUGES[1], ())]
    return MetricsSnapshot(
        "sglang",
        accept_length=sum(lengths) / len(lengths) if lengths else None,
        accept_rate=sum(rates) / len(rates) if rates else None,
        label_sets=len(values[SGLANG_GAUGES[0]]),
    )


def _first_bad_line(text: str) -> int | str:
    """The number of the first line prometheus_client refuses on its own (the error path only)."""
    from prometheus_client.parser import text_string_to_metric_families

    for number, line in enumerate(text.split("\n"), 1):
        try:
            for _ in text_string_to_metric_families(line + "\n"):
                pass
        except ValueError:
            return number
    return "?"


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


class _Counters:
    """Successive reads of one page: each after the first adds an interval sample (counter deltas)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.previous: MetricsSnapshot | None = None
        self.samples: list[ServingSample] = []
        self.evidence: ServingEvidence | None = None
        self.error: SourceError | None = None

    def take(self, result: MetricsSnapshot | BadInput) -> None:
        if isinstance(result, BadInput):
            self.error = source_error(self.location, result.what)
            return
        self.error = None
        sample = _interval_sample(self.previous, result, len(self.samples))
        if sample is not None:
            self.samples.append(sample)
        self.previous = result
        self.evidence = snapshot_evidence(result, self.location, self.samples)

    def poll(self) -> ServingPoll:
        return ServingPoll(self.evidence, (self.error,) if self.error is not None else ())


def scrape(url: str) -> MetricsSnapshot | BadInput:
    """One fetch of a /metrics page (core/bounds.py: deadline, cap, same-origin redirects), parsed."""
    try:
        body = bounds.fetch(url)
        return parse_metrics_text(body.decode("utf-8", "replace"), url)
    except BadInput as err:
        return err


class MetricsUrl:
    """A /metrics URL scraped now and then (``ServingSource``: kind "metrics_url").

    ``background`` (the TUI's watcher) scrapes on a short-lived thread of its own, so a URL that
    hangs until the deadline never holds up the polling of event files; the result is taken in
    at the next poll after it arrived. Otherwise (``scan``, ``check``) it scrapes in line.
    """

    kind: ClassVar[str] = "metrics_url"

    @classmethod
    def claims(cls, location: str, head: bytes) -> bool:
        return bounds.is_url(location)  # http, https, and the schemes bounds.fetch refuses, with the reason

    def __init__(self, location: str, following: Following | None = None, *, interval: float | None = None) -> None:
        following = following or Following()
        self.location = location
        self.clock = following.clock
        self.background = following.background
        self.interval = interval if interval is not None else tuning.SCRAPE_INTERVAL_SECS
        self._counters = _Counters(location)
        self._last_scrape: float | None = None
        self._lock = threading.Lock()
        self._arrived: MetricsSnapshot | BadInput | None = None
        self.pending: threading.Thread | None = None  # the scrape in flight (tests join it)

    def poll(self) -> ServingPoll:
        now = self.clock()
        if self._last_scrape is None or now - self._last_scrape >= self.interval:
            if not self.background:
                self._last_scrape = now
                self._counters.take(scrape(self.location))
                return self._counters.poll()
            if self.pending is None or not self.pending.is_alive():
                self._last_scrape = now
                self.pending = threading.Thread(
                    target=self._scrape_in_background, daemon=True, name=f"scrape {self.location}"
                )
                self.pending.start()
        with self._lock:
            arrived, self._arrived = self._arrived, None
        if arrived is not None:
            self._counters.take(arrived)
        return self._counters.poll()

    def _scrape_in_background(self) -> None:
        result = scrape(self.location)
        with self._lock:
            self._arrived = result

    def nothing_found(self) -> str:
        return "metrics URL gave no speculative-decoding metrics"


# A saved page is Prometheus text from its first line: a "# HELP"/"# TYPE" comment, or a sample
# (a name, labels, one number, perhaps a timestamp) and nothing else on the line.
_PROMETHEUS_HEAD = re.compile(
    rb"^\s*(?:# (?:HELP|TYPE) [A-Za-z_:]"
    rb"|[A-Za-z_:][A-Za-z0-9_:]*(?:\{[^\n]*\})? [-+]?(?:[0-9][0-9.eE+-]*|NaN|Inf)[ \t]*(?:-?\d+[ \t]*)?(?:\r?\n|$))"
)


class MetricsFile:
    """A saved /metrics page (``ServingSource``: kind "metrics_file"), read again when it changes.

    Read whole, at most ``bounds.FETCH_MAX_BYTES`` (a page that large is not a metrics page);
    a page saved again (a cron job's curl) adds an interval sample as a second scrape would.
    """

    kind: ClassVar[str] = "metrics_file"

    @classmethod
    def claims(cls, location: str, head: bytes) -> bool:
        return not bounds.is_url(location) and _PROMETHEUS_HEAD.match(head) is not None

    def __init__(self, location: str, following: Following | None = None) -> None:
        self.location = location
        self._counters = _Counters(location)
        self._ident: FileStamp | None = None

    def poll(self) -> ServingPoll:
        try:
            fd = os.open(self.location, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang
        except OSError as err:
            return ServingPoll(self._counters.evidence, (source_error(self.location, _os_reason(err)),))
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            ident = stamp_of(st)
            if ident == self._ident:
                return self._counters.poll()
            self._ident = ident
            if not stat.S_ISREG(st.st_mode):
                self._counters.take(BadInput(self.location, "not a regular file"))
                return self._counters.poll()
            body = handle.read(bounds.FETCH_MAX_BYTES + 1)
        if len(body) > bounds.FETCH_MAX_BYTES:
            self._counters.take(BadInput(self.location, "metrics page larger than the cap: not read"))
        else:
            self._counters.take(_parsed(body, self.location))
        return self._counters.poll()

    def nothing_found(self) -> str:
        return "holds no speculative-decoding metrics (vllm:spec_decode_num_drafts_total or sglang:spec_accept_length)"


def _parsed(body: bytes, location: str) -> MetricsSnapshot | BadInput:
    try:
        return parse_metrics_text(body.decode("utf-8", "replace"), location)
    except BadInput as err:
        return err


def _os_reason(err: OSError) -> str:
    return "no such file (yet)" if isinstance(err, FileNotFoundError) else f"cannot read: {err.strerror or err}"


def _interval_sample(previous: MetricsSnapshot | None, current: MetricsSnapshot, index: int) -> ServingSample | None:
    stamp = time.strftime("%H:%M:%S")
    if current.engine == "sglang":
        if current.accept_length is None:
            return None
        return ServingSample(index, stamp, current.accept_length)
    if previous is None or previous.engine != "vllm":
        return None
    drafts, accepted = current.drafts - previous.drafts, current.accepted - previous.accepted
    before = previous.per_position
    counts = tuple(count - (before[i] if i < len(before) else 0) for i, count in enumerate(current.per_position))
    if drafts < 0 or accepted < 0 or any(c < 0 for c in counts):  # the server restarted: its counters start over
        drafts, accepted, counts = current.drafts, current.accepted, current.per_position
    if drafts <= 0:
        return None
    try:
        bounds.accepted_within(accepted, drafts=drafts, draft_tokens=None, per_position=counts)
    except bounds.Impossible:
        return None  # counters read mid-update between two scrapes: no sample for this interval
    return ServingSample(index, stamp, 1.0 + accepted / drafts, tuple(c / drafts for c in counts), drafts, accepted)
