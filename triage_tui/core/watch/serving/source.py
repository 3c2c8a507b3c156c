"""The serving-source protocol: one place serving evidence comes from, followed poll after poll.

A source is one class that implements ``ServingSource`` (a log, a metrics URL, a saved metrics
page, a JSONL of requests) and one entry in ``serving/registry.py`` ``SERVING_SOURCES``; the
registry's order decides which class reads a location (the first whose ``claims`` is true).
A source never raises for what it reads: what failed is a ``SourceError`` of its poll, and an
impossible number makes the whole source an error (``core/bounds.py``), never an acceptance length.
That is the convention of scalar sources too (core/read/source_kinds/kind.py): an exception is a bug,
which ``ServingWatch`` (serving/read.py, the fault boundary) turns into an error of that source.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from triage_tui.core.errors import SourceError
from triage_tui.core.watch.serving.evidence import ServingEvidence

# SourceError.source of every serving source's errors (docs/contracts.md, the fault boundary).
SOURCE_KIND = "serving"


@dataclass(frozen=True)
class Following:
    """How a source is followed: the clock it paces scrapes by, and whether it runs in the background.

    ``background`` (the TUI's watcher): a URL is scraped on a thread of its own and a long file is
    read over several polls, so no poll waits long. Otherwise (``scan``, ``check``) every poll
    reads to the end and scrapes in line, once the deadline of core/bounds.py allows.
    """

    clock: Callable[[], float] = field(default=time.monotonic)
    background: bool = False
    # Read once and for all (``check --serving``): the unterminated last line of a file is a line.
    once: bool = False


@dataclass(frozen=True)
class ServingPoll:
    """What one poll of a source gives: its evidence so far (the same object while nothing is new)
    and what failed, as of this poll."""

    evidence: ServingEvidence | None
    errors: tuple[SourceError, ...] = ()


class ServingSource(Protocol):
    """One serving source, followed. Implementations: registry.SERVING_SOURCES."""

    # What the source is, in a word ("log", "metrics_url", ...): the hostile battery's ids, notes.
    kind: ClassVar[str]
    # The path or URL as named (flag or triage.toml): what its errors name.
    location: str

    @classmethod
    def claims(cls, location: str, head: bytes) -> bool:
        """Whether this class reads ``location``; ``head`` is the file's first bytes (b"" for a URL)."""
        ...

    def __init__(self, location: str, following: Following) -> None: ...

    def poll(self) -> ServingPoll:
        """New evidence since the last poll, and this poll's errors; never raises for what it reads."""
        ...

    def nothing_found(self) -> str:
        """Why the evidence is still None, in one line (a one-shot read reports it as bad input)."""
        ...


def source_error(location: str, message: str) -> SourceError:
    """A serving source's error, naming the file or URL."""
    return SourceError(SOURCE_KIND, location, message)
