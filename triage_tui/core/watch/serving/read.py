"""Serving sources read once (``check --serving``) or followed (the watcher), pooled into one piece of evidence."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from triage_tui.core import bounds
from triage_tui.core.errors import BadInput, SourceError
from triage_tui.core.read.runs.manifest import expand_user
from triage_tui.core.watch.serving import tuning
from triage_tui.core.watch.serving.evidence import ServingEvidence
from triage_tui.core.watch.serving.profile import PROFILE_NAME
from triage_tui.core.watch.serving.registry import source_class
from triage_tui.core.watch.serving.source import Following, ServingPoll, ServingSource, source_error


def profile_beside(checkpoint: str | os.PathLike[str] | None) -> str | None:
    """ModelOpt's ``speculation_profile.json`` in a drafter checkpoint's directory (its exporter
    writes it there, serving/profile.py), or None."""
    if checkpoint is None:
        return None
    path = os.path.join(checkpoint, PROFILE_NAME)
    return path if os.path.isfile(path) else None


def with_profile(sources: Sequence[str], checkpoint: str | os.PathLike[str] | None) -> list[str]:
    """``sources`` and the speculation profile beside ``checkpoint``, unless one of them names it already."""
    found = profile_beside(checkpoint)
    named = {os.path.realpath(s) for s in sources if not bounds.is_url(s)}
    return [*sources, found] if found is not None and os.path.realpath(found) not in named else list(sources)


def read_serving(location: str, *, metrics_page: bool = False) -> ServingEvidence:
    """Everything one source says now: a metrics URL, a Prometheus text file, a JSONL or a log.

    BadInput (one line naming the source) for a URL that does not answer in time, a missing
    file, a source with impossible numbers, or one that holds no speculative-decoding figures.
    ``metrics_page``: named as a /metrics page (triage.toml ``[serving] metrics``), a file is read as one.
    """
    watch = ServingWatch([location], once=True, metrics_pages=[location] if metrics_page else ())
    evidence, errors = watch.poll()
    if errors:
        raise BadInput(errors[0].path, errors[0].message)
    if evidence is None:
        raise BadInput(location, watch.nothing_found())
    return evidence


def read_serving_sources(sources: Sequence[str], metrics_pages: Collection[str] = ()) -> ServingEvidence | None:
    """Every source read and pooled into one piece of evidence (None for no sources).

    ``metrics_pages``: those of ``sources`` named as /metrics pages (``Manifest.serving_metrics_pages``).
    """
    if not sources:
        return None
    parts = [read_serving(source, metrics_page=source in metrics_pages) for source in sources]
    return combine_evidence(parts)


def combine_evidence(parts: Sequence[ServingEvidence]) -> ServingEvidence | None:
    """Several sources as one: counts pooled when every part with figures has them, else their mean.

    One engine's figures only: the first source with figures decides which (another engine serves
    another drafter setup). A part that is not measured (a placeholder) adds no figures; a
    forced-acceptance setting seen in any part of that engine makes the whole synthetic: the same
    server's other figures were forced too.
    """
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    first = next((p for p in parts if p.acceptance_length is not None), parts[0])
    engine = first.engine
    others = [p for p in parts if p.engine != engine]
    parts = [p for p in parts if p.engine == engine]
    notes = [f"{p.source}: not pooled, it is {p.engine} and the first source is {engine}" for p in others]
    if len(parts) == 1:
        return replace(parts[0], notes=parts[0].notes + tuple(notes)) if notes else parts[0]
    source = ", ".join(p.source for p in parts)
    notes += [f"{p.source}: {n}" for p in parts for n in p.notes]
    notes += [f"{p.source}: not measured (a placeholder), not pooled" for p in parts if not p.measured]
    synthetic = next((f"{p.source}: {p.synthetic}" for p in parts if p.synthetic is not None), None)
    measured = any(p.measured for p in parts)
    figures = [p for p in parts if p.acceptance_length is not None]
    if figures and all(p.drafts for p in figures) and all(p.accepted is not None for p in figures):
        drafts = sum(p.drafts or 0 for p in figures)
        accepted = sum(p.accepted or 0 for p in figures)
        k = min(len(p.per_position) for p in figures)
        per_position = tuple(sum(p.per_position[i] * (p.drafts or 0) for p in figures) / drafts for i in range(k))
        return ServingEvidence(
            engine,
            source,
            1.0 + accepted / drafts,
            per_position,
            drafts,
            accepted,
            f"1 + accepted / drafts over the counts of {len(figures)} sources pooled",
            (),
            tuple(notes),
            tuple(parts),
            synthetic,
            measured,
        )
    lengths = [p.acceptance_length for p in figures if p.acceptance_length is not None]
    mean = sum(lengths) / len(lengths) if lengths else None
    return ServingEvidence(
        engine,
        source,
        mean,
        (),
        None,
        None,
        f"mean of {len(lengths)} sources' acceptance lengths (not all have counts)" if lengths else "no figures",
        (),
        tuple(notes),
        tuple(parts),
        synthetic,
        measured,
    )


class _Slot:
    """One named location, and the source that reads it once its kind can be told."""

    def __init__(self, location: str, *, metrics_page: bool = False) -> None:
        # "~/serve.log" as a flag gives it (the shell expands only a word that starts with ~).
        self.location = location if bounds.is_url(location) else str(expand_user(location))
        self.metrics_page = metrics_page  # named as a /metrics page: a file is a saved one
        self.source: ServingSource | None = None


class ServingWatch:
    """A run's serving sources followed over time (the watcher's thread polls it, never the UI's).

    Each location is read by the class ``serving/registry.py`` picks for it, chosen once a URL is
    named or a file has its first bytes; until then a missing file is an error of the poll and an
    empty one says nothing yet. ``metrics_pages``: the locations named as /metrics pages
    (triage.toml ``[serving] metrics``), read as saved pages whatever their first bytes.
    """

    def __init__(
        self,
        sources: Sequence[str],
        *,
        clock: Callable[[], float] = time.monotonic,
        background: bool = False,
        once: bool = False,
        metrics_pages: Collection[str] = (),
    ) -> None:
        self.following = Following(clock=clock, background=background, once=once)
        self.slots = [_Slot(location, metrics_page=location in metrics_pages) for location in sources]
        self._parts: tuple[ServingEvidence, ...] = ()
        self._combined: ServingEvidence | None = None

    def poll(self) -> tuple[ServingEvidence | None, tuple[SourceError, ...]]:
        """(the pooled evidence so far, what failed this time: one SourceError per failing source).

        The evidence is the same object as at the previous poll when no source gave anything new.
        """
        parts: list[ServingEvidence] = []
        errors: list[SourceError] = []
        for slot in self.slots:
            result = self._poll_slot(slot)
            errors += result.errors
            if result.evidence is not None:
                parts.append(result.evidence)
        if len(parts) != len(self._parts) or any(a is not b for a, b in zip(parts, self._parts, strict=True)):
            self._parts = tuple(parts)
            combined = combine_evidence(parts)
            if combined is not None and len(parts) > 1:
                # Over time, several sources' intervals do not line up: the chart follows the first
                # that has any (a launch script or a profile has none).
                combined = replace(combined, samples=next((p.samples for p in parts if p.samples), ()))
            self._combined = combined
        return self._combined, tuple(errors)

    def _poll_slot(self, slot: _Slot) -> ServingPoll:
        if slot.source is None:
            head = b""
            if not bounds.is_url(slot.location):
                found = _head(slot.location)
                if isinstance(found, SourceError):
                    return ServingPoll(None, (found,))
                if not found:
                    return ServingPoll(None)  # empty: its format cannot be told yet
                head = found
            cls = source_class(slot.location, head, metrics_page=slot.metrics_page)
            slot.source = cls(slot.location, self.following)
        try:
            return slot.source.poll()
        except Exception as err:  # noqa: BLE001 - the fault boundary: a source's bug is an error of that source
            failed = source_error(slot.location, f"cannot read it: {type(err).__name__}")  # its text may be the file's
            return ServingPoll(None, (failed,))

    def nothing_found(self) -> str:
        """Why the first source gave no evidence (a one-shot read says it as bad input)."""
        source = self.slots[0].source if self.slots else None
        return source.nothing_found() if source is not None else "empty: no serving figures"


def _head(location: str) -> bytes | SourceError:
    """The first bytes of a file, or the error that stops it being read (a FIFO never blocks)."""
    try:
        fd = os.open(location, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return source_error(location, "no such file (yet)")
    except OSError as err:
        return source_error(location, f"cannot read: {err.strerror or err}")
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return source_error(location, "not a file (a vLLM/SGLang log, a saved /metrics page, or a JSONL)")
        return handle.read(tuning.HEAD_BYTES)
