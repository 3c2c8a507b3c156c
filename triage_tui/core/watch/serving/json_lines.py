"""What the JSON-lines serving sources share: a file of one JSON object per line, followed.

``JsonLinesSource`` follows the file (``core/log_tail.LogTail``, lines up to
``tuning.MAX_JSONL_LINE_BYTES``), parses each line as a JSON object and hands it to the subclass's
``_take_object``; a line that is not a JSON object, or that the subclass refuses (``Skipped``), is
counted, and a number that cannot be (``bounds.Impossible``) makes the whole file an error from
then on, naming the line. The subclass pools what it took (``_pooled``) whenever something new
came and it has taken anything (``_has_taken``). Implementations: ``meta_info.MetaInfoFile``
(SGLang), ``per_request.VllmRequestMetrics`` (vLLM).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from triage_tui.core import bounds
from triage_tui.core.log_tail import LogPass, LogTail
from triage_tui.core.watch.serving import tuning
from triage_tui.core.watch.serving.evidence import ServingEvidence
from triage_tui.core.watch.serving.source import Following, ServingPoll, source_error


class Skipped(ValueError):
    """A line that is not a record of the source's kind: counted, never an exception."""


def integer(value: Any) -> int:
    """An int count as JSON gives it (bool is an int in Python, never a count); Skipped otherwise."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise Skipped
    return value


class JsonLinesSource:
    """A JSON-lines file followed poll after poll; subclasses say what a record is and how it pools."""

    def __init__(self, location: str, following: Following | None = None) -> None:
        following = following or Following()
        self.location = location
        self.tail = LogTail(Path(location), max_line_bytes=tuning.MAX_JSONL_LINE_BYTES)
        self.to_end = not following.background
        self.final = following.once
        self.lines = 0
        self.skipped = 0
        self.impossible: str | None = None
        self.cut_short: str | None = None  # the last one-shot read stopped before the file's end: why
        self._evidence: ServingEvidence | None = None

    def poll(self) -> ServingPoll:
        changed = False
        read = LogPass(self.tail)  # a one-shot read: as ServingLog.poll
        while self.impossible is None:
            lines = read.poll(tuning.MAX_READ_BYTES)
            if self.final and not self.tail.bytes_read:
                lines += self.tail.flush()
            changed |= self._take(lines)
            if not self.to_end or not read.more:
                break
        cut = read.cut_short() if self.to_end else None
        if cut != self.cut_short:
            self.cut_short, changed = cut, True
        if self.impossible is not None:
            return ServingPoll(None, (source_error(self.location, self.impossible),))
        if changed and self._has_taken():
            pooled = self._pooled()
            if self.cut_short is not None:
                pooled = replace(pooled, notes=(*pooled.notes, self.cut_short))
            self._evidence = pooled
        return ServingPoll(self._evidence)

    def _take(self, lines: Sequence[str]) -> bool:
        changed = False
        for line in lines:
            self.lines += 1
            text = self._json_text(line)
            if not text:
                continue
            try:
                self._take_object(_json_object(text))
            except Skipped:
                self.skipped += 1
            except bounds.Impossible as err:
                self.impossible = f"line {self.lines}: {err}"
                return True
            changed = True
        return changed

    def _json_text(self, line: str) -> str:
        """The JSON text of a line ("" for a line that holds none)."""
        return line.strip()

    def _take_object(self, document: dict[str, Any]) -> None:
        raise NotImplementedError

    def _has_taken(self) -> bool:
        raise NotImplementedError

    def _pooled(self) -> ServingEvidence:
        raise NotImplementedError


def _json_object(text: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, an integer over int()'s digit limit, nested too deep
        raise Skipped from None
    if not isinstance(document, dict):
        raise Skipped
    return document
