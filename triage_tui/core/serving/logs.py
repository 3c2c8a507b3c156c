"""Engine logs: vLLM's ``SpecDecoding metrics:`` lines and SGLang's ``Decode batch ... accept len``, tailed.

Formats and the engine code that writes them: see ``serving.evidence``. A log is followed as it
grows (``LogTail``): whole lines only, a runaway line without a newline dropped, one poll's read
bounded so the first poll of a huge log stays short.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from triage_tui.core.serving import tuning
from triage_tui.core.serving.evidence import ServingEvidence, ServingSample

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
        lines += self._read(self.path, limit=tuning.MAX_READ_BYTES)
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
        if len(self._partial) > tuning.MAX_LINE_BYTES:
            self._partial = b""
        return [p.decode("utf-8", "replace").rstrip("\r") for p in parts if len(p) <= tuning.MAX_LINE_BYTES]

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

        One poll reads at most tuning.MAX_READ_BYTES (the TUI catches up over a few polls);
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
