"""Engine logs: vLLM's ``SpecDecoding metrics:`` lines and SGLang's ``Decode batch ... accept len``, tailed,
as text or as the messages of a JSON logging formatter's records (``json_record``).

Formats and the engine code that writes them: see ``serving.evidence``. A log is followed as it
grows (``core/log_tail.LogTail``): whole lines only, a runaway line without a newline dropped, one poll's read
bounded so the first poll of a huge log stays short. A forced-acceptance setting in any line (the
engine's startup arguments, a saved command line: ``serving.synthetic``) makes the log's evidence
synthetic; a file that holds only such a setting is evidence without figures, synthetic.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from triage_tui.core import bounds
from triage_tui.core.log_tail import LogPass, LogTail
from triage_tui.core.watch.serving import tuning
from triage_tui.core.watch.serving.evidence import ServingEvidence, ServingSample
from triage_tui.core.watch.serving.source import Following, ServingPoll, source_error
from triage_tui.core.watch.serving.synthetic import ForcedAcceptance, forced_acceptance

# Numbers are captured wide (a sign, an exponent, nan, inf) so that a negative or absurd value is
# read and refused by core/bounds.py, and text that is no number is a malformed line, counted.
_NUMBER = r"[-+0-9.eE]+|nan|inf"
_VLLM_LINE = re.compile(
    rf"SpecDecoding metrics: Mean acceptance length: (?P<mal>{_NUMBER}), "
    r"Accepted throughput: \S+ tokens/s, Drafted throughput: \S+ tokens/s, "
    rf"Accepted: (?P<acc>{_NUMBER}) tokens, Drafted: (?P<dra>{_NUMBER}) tokens, "
    r"Per-position acceptance rate: (?P<pos>[-+0-9.eEnaif, ]*?), Avg Draft acceptance rate: \S+%"
)
# vLLM's logger: "INFO 05-12 10:11:12 [metrics.py:96] ..." (month-day, no year).
_VLLM_TIME = re.compile(r"\b(?:INFO|WARNING|DEBUG|ERROR)\s+(\d\d-\d\d \d\d:\d\d:\d\d)")
_SGLANG_LINE = re.compile(rf"Decode batch\b.*?\baccept len: (?P<len>{_NUMBER})")
# SGLang's logger: "[2025-05-12 10:11:12 TP0] Decode batch ..." (the rank is optional).
_SGLANG_TIME = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_VLLM_MARK = "SpecDecoding metrics:"
# A record's asctime, kept only when it reads as a time (digits and a time's separators: logging's
# "2025-05-12 10:11:12,345", vLLM's "05-12 10:11:12", ISO 8601): any other text is not shown.
_STAMP = re.compile(r"[0-9][0-9 :,.TZ+-]{0,39}")
_SGLANG_MARK = "accept len:"


class Malformed(ValueError):
    """A stats line whose text does not parse (``accept len: 1.2.3``): counted, never an exception."""


def parse_vllm_line(line: str, index: int = 0) -> ServingSample | None:
    """One vLLM ``SpecDecoding metrics:`` line as a sample; None for any other line or an interval
    without drafts.

    The line gives the interval's accepted and drafted token counts and per-position rates but
    not the number of drafts; it is recovered exactly as drafted / k when every draft had all k
    tokens (vLLM's usual case, checked against the logged mean), else as accepted / sum(rates).
    Malformed for text that does not parse; bounds.Impossible for numbers that cannot be.
    """
    match = _VLLM_LINE.search(line)
    if match is None:
        return None
    try:
        accepted, drafted = int(match["acc"]), int(match["dra"])
        rates = tuple(float(p) for p in match["pos"].split(",") if p.strip())
        logged = float(match["mal"])
    except ValueError:  # "1.2.3", or digits beyond int()'s limit
        raise Malformed(line) from None
    accepted = bounds.count(accepted, "Accepted")
    drafted = bounds.count(drafted, "Drafted")
    if not drafted and not accepted:
        return None  # no drafts in the interval: nothing to say
    bounds.accepted_within(accepted, drafts=None, draft_tokens=drafted)
    if len(rates) > bounds.MAX_POSITION_INDEX + 1:
        raise bounds.Impossible(f"{len(rates)} per-position rates (at most {bounds.MAX_POSITION_INDEX + 1})")
    for i, value in enumerate(rates):
        bounds.rate(value, f"per-position acceptance rate {i}")
    k = len(rates) or None  # one rate per speculative token
    if math.isfinite(logged):  # the engine's own figure, shown or not, must be one it could log
        bounds.acceptance_length(logged, "Mean acceptance length", k)
    drafts = _vllm_drafts(logged, accepted, drafted, rates)
    if drafts is None:
        length = bounds.acceptance_length(logged, "Mean acceptance length", k)
    else:
        length = bounds.acceptance_length(1.0 + accepted / drafts, k=k)
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
    """One SGLang ``Decode batch`` line that carries ``accept len`` as a sample; None otherwise
    (and for 0 or nan: speculative decoding off, or no decode in the interval).
    Malformed for text that does not parse; bounds.Impossible for a length that cannot be."""
    match = _SGLANG_LINE.search(line)
    if match is None:
        return None
    try:
        length = float(match["len"])
    except ValueError:  # "1.2.3"
        raise Malformed(line) from None
    if math.isnan(length) or length == 0:
        return None
    stamp = _SGLANG_TIME.search(line[: match.start()])
    return ServingSample(index, stamp.group(1) if stamp else None, bounds.acceptance_length(length, "accept len"))


def json_record(line: str) -> tuple[str, str | None] | None:
    """(message, asctime or None) of a line a JSON logging formatter wrote; None for any other line.

    vLLM's loggers write one JSON object a record when ``VLLM_LOGGING_CONFIG_PATH`` names a
    dictConfig with python-json-logger's ``JsonFormatter`` (vllm-project/vllm
    ``examples/others/logging_configuration.md``, "Example 1": ``{"message": "..."}``, the
    formatter's default ``%(message)s``), or with vLLM's built-in ``--logging-config.formatter
    json`` (asctime, levelname, name, processName, process, message, vllm_process_name:
    ``examples/features/logging_configuration.md``). The engine's own text is the ``message``."""
    text = line.strip()
    if not text.startswith("{") or not text.endswith("}"):
        return None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, digits past int()'s limit, nested too deep
        return None
    if not isinstance(document, dict) or not isinstance(document.get("message"), str):
        return None
    stamp = document.get("asctime")
    return document["message"], stamp if isinstance(stamp, str) and _STAMP.fullmatch(stamp) else None


def parse_stats_line(line: str, index: int) -> tuple[str, ServingSample | None] | None:
    """(engine, sample or None) for an engine's stats line, None for any other line.

    Malformed or bounds.Impossible as the engine's parser raises them.
    """
    if _VLLM_MARK in line:
        sample = parse_vllm_line(line, index)
        if sample is None and _VLLM_LINE.search(line) is None:
            raise Malformed(line)  # the mark without the v1 format: a format this version does not read
        return "vllm", sample
    if _SGLANG_MARK in line and "Decode batch" in line:
        return "sglang", parse_sglang_line(line, index)
    return None


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


class ServingLog:
    """A vLLM or SGLang log followed as it grows (``ServingSource``: kind "log").

    Lines that look like an engine's stats but do not parse are counted (a note says how many);
    a stats line with impossible numbers (core/bounds.py) makes the log an error from then on,
    naming the line: its figures cannot be pooled with the others.
    """

    kind: ClassVar[str] = "log"

    @classmethod
    def claims(cls, location: str, head: bytes) -> bool:
        return not bounds.is_url(location)  # the fallback: any file the other sources do not claim

    def __init__(self, location: str, following: Following | None = None) -> None:
        self.location = location
        self.path = Path(location)
        self.tail = LogTail(self.path, max_line_bytes=tuning.MAX_LINE_BYTES)
        following = following or Following()
        self.to_end = not following.background
        self.final = following.once
        self.engine: str | None = None
        self.samples: list[ServingSample] = []
        self.unparsed = 0
        self.lines = 0  # complete lines read so far: the line number of an error
        self.impossible: str | None = None
        self.forced: ForcedAcceptance | None = None  # the first forced-acceptance setting seen
        self.cut_short: str | None = None  # the last one-shot read stopped before the file's end: why
        self._evidence: ServingEvidence | None = None

    def poll(self) -> ServingPoll:
        """The evidence so far: the same object as last time when the log gave nothing new.

        One poll reads at most tuning.MAX_READ_BYTES (the TUI catches up over a few polls); a
        one-shot follower (``scan``, ``check``) reads on to the size the file had when the poll
        began (``log_tail.LogPass``): a note says when it grew faster than it was read.
        """
        if self.impossible is not None:
            return ServingPoll(None, (source_error(self.location, self.impossible),))
        changed = False
        read = LogPass(self.tail)
        while True:
            lines = read.poll(tuning.MAX_READ_BYTES)
            if self.final and not self.tail.bytes_read:
                lines += self.tail.flush()  # the last line of a finished log may lack its newline
            changed |= self._take(lines)
            if self.impossible is not None:
                return ServingPoll(None, (source_error(self.location, self.impossible),))
            if not self.to_end or not read.more:
                break
        cut = read.cut_short() if self.to_end else None
        if cut != self.cut_short:
            self.cut_short, changed = cut, True
        if changed or (self._evidence is None and (self.engine or self.forced) is not None):
            self._evidence = self.evidence()
        errors = () if self.path.exists() else (source_error(self.location, "no such file (yet)"),)
        return ServingPoll(self._evidence, errors)

    def _take(self, lines: Sequence[str]) -> bool:
        changed = False
        for raw in lines:
            self.lines += 1
            record = json_record(raw) if raw[:1] == "{" else None
            line, stamp = record if record is not None else (raw, None)
            if self.forced is None:
                self.forced = forced_acceptance(line, self.lines)
                changed |= self.forced is not None
            try:
                found = parse_stats_line(line, len(self.samples))
            except Malformed:
                self.unparsed += 1
                changed = True
                continue
            except bounds.Impossible as err:
                self.impossible = f"line {self.lines}: {err}"
                return True
            if found is None:
                continue
            engine, sample = found
            self.engine = self.engine or engine  # the first engine seen is the log's
            if sample is not None and engine == self.engine:
                self.samples.append(sample if stamp is None else replace(sample, time=stamp))
                changed = True
        return changed

    def evidence(self) -> ServingEvidence | None:
        """The log's samples pooled, None before any engine's line or setting was seen."""
        engine = self.engine or (self.forced.engine if self.forced is not None else None)
        if engine is None:
            return None
        notes = []
        if self.unparsed:
            notes.append(f"{self.unparsed} stats line(s) that do not parse (a format this version does not read)")
        if self.tail.dropped:
            notes.append(f"{self.tail.dropped} line(s) over {self.tail.line_limit >> 10} KiB dropped unread")
        notes.extend(rates_disagree(self.samples))
        if self.cut_short is not None:
            notes.append(self.cut_short)
        evidence = pool_samples(engine, self.location, self.samples, notes)
        # A setting for the other engine is another server's: it does not force this log's figures.
        if self.forced is not None and self.forced.engine == engine:
            evidence = replace(evidence, synthetic=self.forced.reason)
        return evidence

    def nothing_found(self) -> str:
        if self.unparsed:
            return f"{self.unparsed} stats line(s), none in a format this version reads (vLLM v1, SGLang)"
        return (
            "holds no vLLM 'SpecDecoding metrics:' line, SGLang 'Decode batch ... accept len' line, "
            "speculative-decoding Prometheus metric, per-request metrics, speculation profile or "
            "forced-acceptance setting"
        )


class JsonFormattedLog(ServingLog):
    """An engine's log written by a JSON logging formatter (``json_record``), read as ``ServingLog``
    reads any log (each record's message). Registered before the JSON-lines sources, which would
    take any file that starts with ``{``: it claims a file whose first complete lines hold a log
    record."""

    kind: ClassVar[str] = "json_log"

    @classmethod
    def claims(cls, location: str, head: bytes) -> bool:
        if bounds.is_url(location):
            return False
        complete = head.split(b"\n")[:-1]  # the last piece may be cut by the head's size
        return any(json_record(line.decode("utf-8", "replace")) is not None for line in complete[:8])


# vLLM prints each per-position rate as "%.3f" of accepted at i / drafts: their sum may differ from
# accepted / drafts by half a unit of the third decimal per position, no more.
RATE_ROUNDING = 0.0005


def rates_disagree(samples: Sequence[ServingSample]) -> list[str]:
    """A note when a vLLM line's per-position rates do not add up to its accepted / drafts (the two
    imply other numbers of drafts: an edited, merged or foreign line): the counts are what is pooled."""
    bad = [
        s
        for s in samples
        if s.drafts
        and s.accepted is not None
        and s.per_position
        and abs(s.accepted / s.drafts - sum(s.per_position)) > RATE_ROUNDING * len(s.per_position) + 1e-9
    ]
    if not bad:
        return []
    first = bad[0]
    assert first.drafts is not None and first.accepted is not None  # filtered above
    return [
        f"{len(bad)} of {len(samples)} interval(s) with per-position rates that do not add up to accepted / "
        f"drafts (interval {first.index + 1}: the rates sum to {sum(first.per_position):.3f}, the counts give "
        f"{first.accepted} / {first.drafts} = {first.accepted / first.drafts:.3f}): the counts are pooled, and "
        "the per-position figures of those intervals are not to be trusted"
    ]
