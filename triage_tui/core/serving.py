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
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from triage_tui.core.errors import BadInput
from triage_tui.core.runs import is_url

if TYPE_CHECKING:
    from triage_tui.core.signals import Flag

ENGINES = ("vllm", "sglang")

# A log line longer than this without a newline is not an engine's stats line: dropped, so a
# binary file or a runaway writer cannot grow memory.
MAX_LINE_BYTES = 1 << 16
# One poll reads at most this much of a log, so the first poll of a huge log stays bounded;
# the next poll continues where it stopped.
MAX_READ_BYTES = 32 << 20
# A /metrics endpoint answers in milliseconds on the node; longer means it is not there.
SCRAPE_TIMEOUT_SECS = 5.0
MAX_SCRAPE_BYTES = 16 << 20
# In the TUI a metrics URL is scraped at most this often (the engines update per interval).
SCRAPE_INTERVAL_SECS = 10.0

# -- conclusions ----------------------------------------------------------------------------
# "Collapsed": the drafter's tokens are essentially never accepted. vLLM #50170 and SGLang
# #25454 report 1.00-1.05 with every later position at 0; a working EAGLE-3 drafter with 3+
# speculative tokens sits at 2-4. 1.15 leaves room for a few lucky tokens of a broken drafter.
COLLAPSED_LENGTH = 1.15
# ... and every position after the first below this (when the source has positions).
COLLAPSED_LATER_POSITION = 0.05
# "Disagree": the training-side estimate and serving differ by at least this many tokens of
# acceptance length and by this factor. Half a token is more than the interval-to-interval
# noise of a serving log (prompts differ) and smaller than the gap of a wrong target.
DISAGREE_TOKENS = 0.5
DISAGREE_RATIO = 1.4


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
            "acceptance_length": _number(self.acceptance_length),
            "per_position": [_number(p) for p in self.per_position],
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

    def to_json(self, *, with_samples: bool = True) -> dict[str, Any]:
        document: dict[str, Any] = {
            "engine": self.engine,
            "source": self.source,
            "acceptance_length": _number(self.acceptance_length),
            "per_position": [_number(p) for p in self.per_position],
            "drafts": self.drafts,
            "accepted": self.accepted,
            "convention": self.convention,
            "notes": list(self.notes),
        }
        if with_samples:
            document["samples"] = [s.to_json() for s in self.samples]
        if self.sources:
            document["sources"] = [s.to_json(with_samples=False) for s in self.sources]
        return document


def _number(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


# --------------------------------------------------------------------------- log lines

_VLLM_LINE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>[0-9.]+|nan), "
    r"Accepted throughput: [0-9.]+ tokens/s, Drafted throughput: [0-9.]+ tokens/s, "
    r"Accepted: (?P<acc>\d+) tokens, Drafted: (?P<dra>\d+) tokens, "
    r"Per-position acceptance rate: (?P<pos>[0-9., ]*?), Avg Draft acceptance rate: (?:[0-9.]+|nan)%"
)
# vLLM's logger: "INFO 05-12 10:11:12 [metrics.py:96] ..." (month-day, no year).
_VLLM_TIME = re.compile(r"\b(?:INFO|WARNING|DEBUG|ERROR)\s+(\d\d-\d\d \d\d:\d\d:\d\d)")
_SGLANG_LINE = re.compile(r"Decode batch\b.*?\baccept len: (?P<len>[0-9.]+|nan)(?:, accept rate: (?P<rate>[0-9.]+))?")
# SGLang's logger: "[2025-05-12 10:11:12 TP0] Decode batch ..." (the rank is optional).
_SGLANG_TIME = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_VLLM_MARK = "SpecDecoding metrics:"
_SGLANG_MARK = "accept len:"


def parse_vllm_line(line: str, index: int = 0) -> ServingSample | None:
    """One vLLM ``SpecDecoding metrics:`` line as a sample; None for any other line.

    The line gives the interval's accepted and drafted token counts and per-position rates but
    not the number of drafts; it is recovered exactly as drafted / k when every draft had all k
    tokens (vLLM's usual case, checked against the logged mean), else as accepted / sum(rates).
    """
    match = _VLLM_LINE.search(line)
    if match is None:
        return None
    accepted, drafted = int(match["acc"]), int(match["dra"])
    rates = tuple(float(p) for p in match["pos"].split(",") if p.strip())
    logged = float(match["mal"])
    drafts = _vllm_drafts(logged, accepted, drafted, rates)
    length = 1.0 + accepted / drafts if drafts else logged
    stamp = _VLLM_TIME.search(line[: match.start()])
    return ServingSample(index, stamp.group(1) if stamp else None, length, rates, drafts, accepted)


def _vllm_drafts(logged: float, accepted: int, drafted: int, rates: Sequence[float]) -> int | None:
    k = len(rates)
    if k and drafted and drafted % k == 0:
        candidate = drafted // k
        # The logged mean has two decimals: the candidate must reproduce it.
        if not math.isfinite(logged) or abs(1.0 + accepted / candidate - logged) <= 0.0051:
            return candidate
    total = sum(rates)
    if accepted and total > 0:
        return max(1, round(accepted / total))
    return None


def parse_sglang_line(line: str, index: int = 0) -> ServingSample | None:
    """One SGLang ``Decode batch`` line that carries ``accept len`` as a sample; None otherwise."""
    match = _SGLANG_LINE.search(line)
    if match is None:
        return None
    length = float(match["len"])
    if not math.isfinite(length) or length <= 0:
        return None  # speculative decoding off (SGLang logs 0) or no decode in the interval
    stamp = _SGLANG_TIME.search(line[: match.start()])
    return ServingSample(index, stamp.group(1) if stamp else None, length)


def samples_from_lines(
    lines: Iterable[str], start: int = 0, engine: str | None = None
) -> tuple[str | None, list[ServingSample], int]:
    """(engine, samples, lines that looked like stats but did not parse) for a run of log lines.

    The first engine seen (or the one given) is the log's; the other engine's lines are skipped.
    """
    samples: list[ServingSample] = []
    unparsed = 0
    for line in lines:
        if _VLLM_MARK in line:
            sample = parse_vllm_line(line, start + len(samples))
            found = "vllm"
        elif _SGLANG_MARK in line and "Decode batch" in line:
            sample = parse_sglang_line(line, start + len(samples))
            found = "sglang"
        else:
            continue
        if sample is None:
            unparsed += found == "vllm"  # SGLang's 0.00 (spec off) is not a format problem
            continue
        engine = engine or found
        if found == engine:
            samples.append(sample)
    return engine, samples, unparsed


def pool_samples(
    engine: str, source: str, samples: Sequence[ServingSample], notes: Sequence[str] = ()
) -> ServingEvidence:
    """The samples of one source pooled: counts summed where every sample has them."""
    notes = list(notes)
    if not samples:
        return ServingEvidence(engine, source, None, (), None, None, "no samples", (), tuple(notes))
    if all(s.drafts for s in samples) and all(s.accepted is not None for s in samples):
        drafts = sum(s.drafts or 0 for s in samples)
        accepted = sum(s.accepted or 0 for s in samples)
        k = max(len(s.per_position) for s in samples)
        per_position = tuple(
            sum(s.per_position[i] * (s.drafts or 0) for s in samples if i < len(s.per_position)) / drafts
            for i in range(k)
        )
        convention = (
            "1 + accepted / drafts over pooled counts; per-position = accepted at position i / drafts "
            "(vLLM's per-interval counts summed; drafts = drafted tokens / k)"
        )
        return ServingEvidence(
            engine,
            source,
            1.0 + accepted / drafts,
            per_position,
            drafts,
            accepted,
            convention,
            tuple(samples),
            tuple(notes),
        )
    mean = sum(s.acceptance_length for s in samples) / len(samples)
    convention = (
        "mean of SGLang's per-interval accept len (completion tokens / verify steps, bonus token "
        "included); the log gives no counts, so intervals are weighted equally"
    )
    return ServingEvidence(engine, source, mean, (), None, None, convention, tuple(samples), tuple(notes))


# --------------------------------------------------------------------------- tailing a log


class LogTail:
    """Complete new lines of a growing log, across rotation and truncation.

    Reopened on every poll (NFS close-to-open, as the event reader does). When the path names a
    new file (rotated by rename: logrotate, RotatingFileHandler), the rest of the old file is
    read first from the sibling that now holds the old inode, then the new file from its start
    (a second rotation between two polls loses the file in between). A file shorter than the
    offset, or whose bytes before the offset are no longer the ones read, was truncated in place
    and rewritten (copytruncate): read from the start.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._seen = b""  # the last bytes read, to notice a file rewritten past the offset
        self.bytes_read = 0  # by the last poll: 0 means the end of the file was reached

    def poll(self) -> list[str]:
        lines: list[str] = []
        self.bytes_read = 0
        try:
            st = os.stat(self.path)
        except OSError:
            return lines  # not there yet, or between rename and re-create
        ident = (st.st_dev, st.st_ino)
        if self._ident is not None and ident != self._ident:
            rotated = self._find_rotated()
            if rotated is not None:
                lines += self._read(rotated, limit=None)
            lines += self.flush()
            self._ident, self._offset, self._seen = None, 0, b""
        elif self._ident is not None and st.st_size < self._offset:
            self._offset, self._partial, self._seen = 0, b"", b""
        if self._ident is None:
            self._ident = ident
        lines += self._read(self.path, limit=MAX_READ_BYTES)
        return lines

    def _find_rotated(self) -> Path | None:
        try:
            siblings = list(self.path.parent.iterdir())
        except OSError:
            return None
        for sibling in siblings:
            if sibling == self.path or not sibling.name.startswith(self.path.name):
                continue
            try:
                st = os.stat(sibling)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == self._ident:
                return sibling
        return None

    def _read(self, path: Path, limit: int | None) -> list[str]:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO named like a log must not hang
        except OSError:
            return []
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != self._ident:
                return []
            if self._seen:
                handle.seek(self._offset - len(self._seen))
                if handle.read(len(self._seen)) != self._seen:
                    self._offset, self._partial = 0, b""
            handle.seek(self._offset)
            data = handle.read(limit if limit is not None else -1)
        self._offset += len(data)
        self.bytes_read += len(data)
        if data:
            self._seen = (self._seen + data)[-64:]
        chunk = self._partial + data
        parts = chunk.split(b"\n")
        self._partial = parts.pop()
        if len(self._partial) > MAX_LINE_BYTES:
            self._partial = b""
        return [p.decode("utf-8", "replace").rstrip("\r") for p in parts if len(p) <= MAX_LINE_BYTES]

    def flush(self) -> list[str]:
        """The unterminated last line, as a line (a finished log may lack its final newline)."""
        rest, self._partial = self._partial, b""
        return [rest.decode("utf-8", "replace")] if rest else []


class ServingLog:
    """A vLLM or SGLang log followed as it grows; ``poll()`` gives the evidence so far."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.tail = LogTail(self.path)
        self.engine: str | None = None
        self.samples: list[ServingSample] = []
        self.unparsed = 0
        self._evidence: ServingEvidence | None = None

    def poll(self, *, to_end: bool = False) -> ServingEvidence | None:
        """The evidence so far: the same object as last time when the log gave nothing new.

        One poll reads at most MAX_READ_BYTES (the TUI catches up over a few polls);
        ``to_end`` reads on to the end of the file (one-shot ``scan``).
        """
        changed = False
        while True:
            self.engine, samples, unparsed = samples_from_lines(self.tail.poll(), len(self.samples), self.engine)
            if samples or unparsed:
                self.samples.extend(samples)
                self.unparsed += unparsed
                changed = True
            if not to_end or not self.tail.bytes_read:
                break
        if changed or (self._evidence is None and self.engine is not None):
            self._evidence = self.evidence()
        return self._evidence

    def evidence(self) -> ServingEvidence | None:
        if self.engine is None:
            return None
        notes = []
        if self.unparsed:
            notes.append(f"{self.unparsed} 'SpecDecoding metrics:' line(s) in a format this version does not read")
        return pool_samples(self.engine, str(self.path), self.samples, notes)


# --------------------------------------------------------------------------- Prometheus text

_VLLM_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)
_SGLANG_GAUGES = ("sglang:spec_accept_length", "sglang:spec_accept_rate")


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
                if base in _VLLM_COUNTERS or base in _SGLANG_GAUGES:
                    values.setdefault(base, []).append((dict(sample.labels), float(sample.value)))
    except ValueError as err:
        raise BadInput(source, f"not Prometheus text: {err}") from None
    if any(name in values for name in _VLLM_COUNTERS):

        def total(name: str) -> int:
            return round(sum(v for _, v in values.get(name, ())))

        positions: dict[int, float] = {}
        for labels, value in values.get(_VLLM_COUNTERS[3], ()):
            try:
                position = int(labels.get("position", ""))
            except ValueError:
                continue
            positions[position] = positions.get(position, 0.0) + value
        per_position = tuple(round(positions.get(i, 0.0)) for i in range(max(positions) + 1)) if positions else ()
        label_sets = len(values.get(_VLLM_COUNTERS[0], ()))
        return MetricsSnapshot(
            "vllm",
            total(_VLLM_COUNTERS[0]),
            total(_VLLM_COUNTERS[1]),
            total(_VLLM_COUNTERS[2]),
            per_position,
            label_sets=label_sets,
        )
    if _SGLANG_GAUGES[0] in values:
        lengths = [v for _, v in values[_SGLANG_GAUGES[0]] if math.isfinite(v) and v > 0]
        rates = [v for _, v in values.get(_SGLANG_GAUGES[1], ()) if math.isfinite(v)]
        return MetricsSnapshot(
            "sglang",
            accept_length=sum(lengths) / len(lengths) if lengths else None,
            accept_rate=sum(rates) / len(rates) if rates else None,
            label_sets=len(values[_SGLANG_GAUGES[0]]),
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


def scrape(url: str, *, timeout: float = SCRAPE_TIMEOUT_SECS) -> str:
    """The text of a /metrics page; BadInput (one line) when it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read(MAX_SCRAPE_BYTES + 1)
    except urllib.error.HTTPError as err:
        raise BadInput(url, f"metrics URL answered HTTP {err.code} {err.reason}") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise BadInput(url, f"metrics URL does not answer: {reason}") from None
    if len(body) > MAX_SCRAPE_BYTES:
        raise BadInput(url, f"metrics page larger than {MAX_SCRAPE_BYTES >> 20} MiB")
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
        interval: float = SCRAPE_INTERVAL_SECS,
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


# --------------------------------------------------------------------------- SGLang meta_info JSONL


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


# --------------------------------------------------------------------------- one-shot reading


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
            if head_bytes < MAX_SCRAPE_BYTES:
                head.append(line)
                head_bytes += len(line) + 1
    evidence = log.evidence()
    if evidence is not None:
        return evidence
    text = "\n".join(head)
    if any(name in text for name in (*_VLLM_COUNTERS, *_SGLANG_GAUGES)):
        if head_bytes >= MAX_SCRAPE_BYTES:
            raise BadInput(path, f"Prometheus text larger than {MAX_SCRAPE_BYTES >> 20} MiB")
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


# --------------------------------------------------------------------------- the training side


@dataclass(frozen=True)
class TrainingEstimate:
    """Acceptance length as the run's own per-position accuracies predict it."""

    acceptance_length: float
    per_position: tuple[float, ...]  # unconditional: P(first i+1 draft tokens all correct)
    tags: tuple[str, ...]
    step: int | None
    arithmetic: str

    def to_json(self) -> dict[str, Any]:
        return {
            "acceptance_length": _number(self.acceptance_length),
            "per_position": [_number(p) for p in self.per_position],
            "tags": list(self.tags),
            "step": self.step,
            "arithmetic": self.arithmetic,
        }

    def truncated(self, k: int) -> TrainingEstimate:
        """The estimate for a server that drafts only k tokens."""
        if k <= 0 or k >= len(self.per_position):
            return self
        per_position = self.per_position[:k]
        return replace(
            self,
            acceptance_length=1.0 + sum(per_position),
            per_position=per_position,
            arithmetic=f"{self.arithmetic}; first {k} positions (the server drafts {k})",
        )


# Per-position accuracies are found by the trainers' metric-names table (core/metric_names.py).
# speculators' full_acc_k is already unconditional (its correct mask is ANDed with the previous
# steps': speculators/models/metrics.py compute_accuracy_single_step); every other per-position
# accuracy (SpecForge's acc_i and per_position_acc/i, speculators' cond_acc_k, EAGLE's, ModelOpt's)
# is taken as step i's accuracy given the earlier steps, and chained as a product, as SpecForge's
# own simulated acceptance does (specforge/eval/evaluator.py _simulated_acc_len).
_UNCONDITIONAL = ("full_acc",)
_HELD_OUT = ("eval", "val", "valid", "validation", "test")


def training_estimate(
    tags: Iterable[str], last_value: Callable[[str], tuple[int, float] | None]
) -> TrainingEstimate | None:
    """The estimate from the latest per-position accuracies, or None when the run logs none.

    ``last_value(tag)`` returns the tag's last (step, value). Held-out series come before train.
    """
    from triage_tui.core.metric_names import match_trainer, position_of

    tags = list(tags)
    trainer = match_trainer(tags)
    if trainer is None:
        return None
    names = [name for name in trainer.accuracy if "{" in name]
    names.sort(key=lambda name: name.split("/", 1)[0].lower() not in _HELD_OUT)  # stable: table order kept
    for name in names:
        found = {p: tag for tag in tags if (p := position_of(name, tag)) is not None}
        k = 0
        while k in found:
            k += 1
        if k == 0:
            continue
        chosen = [found[i] for i in range(k)]
        points = [point for tag in chosen if (point := last_value(tag)) is not None and math.isfinite(point[1])]
        if len(points) != len(chosen):
            continue
        values = [min(max(p[1], 0.0), 1.0) for p in points]
        if any(word in name for word in _UNCONDITIONAL):
            per_position = tuple(values)
            arithmetic = f"1 + sum of {name} over positions 0..{k - 1} (already P(first i+1 correct))"
        else:
            running, chained = 1.0, []
            for value in values:
                running *= value
                chained.append(running)
            per_position = tuple(chained)
            arithmetic = (
                f"1 + sum over i < {k} of the product of {name} for positions <= i (each taken as "
                f"conditional on the earlier ones, as SpecForge's simulated acceptance does; SpecForge "
                f"leaves out the 1)"
            )
        step = max(p[0] for p in points)
        return TrainingEstimate(1.0 + sum(per_position), per_position, tuple(chosen), step, arithmetic)
    return None


def training_estimate_from_scalars(scalars: Any) -> TrainingEstimate | None:
    """training_estimate over a RunScalars (core/series.py)."""

    def last_value(tag: str) -> tuple[int, float] | None:
        series = scalars.get(tag)
        last = series.last() if series is not None and len(series) else None
        return (int(last[0]), float(last[2])) if last is not None else None

    return training_estimate(scalars.tags(), last_value)


# --------------------------------------------------------------------------- conclusions


@dataclass(frozen=True)
class ServingFinding:
    """A conclusion from the serving evidence, with its numbers in the message."""

    kind: str  # "acceptance_collapsed" | "serving_below_training" | "serving_above_training"
    value: float
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": _number(self.value), "message": self.message}


@dataclass(frozen=True)
class ServingComparison:
    """Serving evidence beside the training estimate, and what the two say together."""

    serving: ServingEvidence
    training: TrainingEstimate | None
    findings: tuple[ServingFinding, ...] = field(default=())

    def finding(self, kind: str) -> ServingFinding | None:
        return next((f for f in self.findings if f.kind == kind), None)

    def to_json(self) -> dict[str, Any]:
        document = self.serving.to_json()
        document["training_estimate"] = self.training.to_json() if self.training is not None else None
        document["findings"] = [f.to_json() for f in self.findings]
        return document


def compare_serving(serving: ServingEvidence, training: TrainingEstimate | None) -> ServingComparison:
    """Flag a collapsed acceptance and a training estimate far from what the server accepts."""
    findings: list[ServingFinding] = []
    length = serving.acceptance_length
    if length is not None:
        later = serving.per_position[1:]
        if length <= COLLAPSED_LENGTH and all(p <= COLLAPSED_LATER_POSITION for p in later):
            positions = (
                ", per position " + ", ".join(f"{p:.3f}" for p in serving.per_position) if serving.per_position else ""
            )
            counts = (
                f" ({serving.accepted} accepted of {serving.drafts} drafts)"
                if serving.drafts is not None and serving.accepted is not None
                else ""
            )
            findings.append(
                ServingFinding(
                    "acceptance_collapsed",
                    length,
                    f"{serving.engine} accepts almost nothing from the drafter: acceptance length {length:.2f}"
                    f"{counts}{positions} (collapsed: <= {COLLAPSED_LENGTH} with later positions <= "
                    f"{COLLAPSED_LATER_POSITION})",
                )
            )
        if training is not None:
            # Compare over the positions both sides have: a server drafting fewer tokens than the
            # run trained for gets the estimate's first k; one drafting more gets its own first k.
            k = len(serving.per_position)
            estimate = training.truncated(k) if k else training
            served, over = length, ""
            if k > len(training.per_position):
                k = len(training.per_position)
                served = 1.0 + sum(serving.per_position[:k])
                over = f" over the first {k} position{'s' if k > 1 else ''}"
            gap = estimate.acceptance_length - served
            ratio = max(estimate.acceptance_length, served) / max(min(estimate.acceptance_length, served), 1e-9)
            if abs(gap) >= DISAGREE_TOKENS and ratio >= DISAGREE_RATIO:
                tags = ", ".join(estimate.tags)
                if gap > 0:
                    findings.append(
                        ServingFinding(
                            "serving_below_training",
                            gap,
                            f"training estimates acceptance length {estimate.acceptance_length:.2f} from {tags} "
                            f"at step "
                            f"{estimate.step}, {serving.engine} accepts {served:.2f}{over}: the served target or the "
                            f"engine's reading of the drafter differs from training",
                        )
                    )
                else:
                    findings.append(
                        ServingFinding(
                            "serving_above_training",
                            -gap,
                            f"{serving.engine} accepts {served:.2f}{over}, training estimates only "
                            f"{estimate.acceptance_length:.2f} from {tags} at step {estimate.step}: the drafter works, "
                            f"the training metric does not measure it",
                        )
                    )
    return ServingComparison(serving, training, tuple(findings))


# Severity of each finding as a run flag (scan, the TUI): a collapsed acceptance means the drafter
# buys nothing in production; a disagreement says one of the two numbers is not what it seems.
FLAG_SEVERITY = {
    "acceptance_collapsed": "critical",
    "serving_below_training": "warning",
    "serving_above_training": "warning",
}


def serving_flags(comparison: ServingComparison) -> list[Flag]:
    """The findings as run flags: ``serving_acceptance_collapsed``, ``serving_below_training``, ..."""
    from triage_tui.core.signals import Flag

    flags = []
    for finding in comparison.findings:
        kind = finding.kind if finding.kind.startswith("serving_") else f"serving_{finding.kind}"
        step = comparison.training.step if comparison.training is not None and "training" in kind else None
        flags.append(Flag(kind, FLAG_SEVERITY[finding.kind], None, step, finding.value, finding.message))
    return flags
