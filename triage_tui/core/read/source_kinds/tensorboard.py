"""TensorBoard event files (core/read/events/) as a kind of scalar source: their series are named by
their tags (and a log directory's sub-directory), never prefixed: the first kind of a run."""

from __future__ import annotations

from triage_tui.core.read.events.reader import RunEvents
from triage_tui.core.read.runs.names import is_event_file_name
from triage_tui.core.read.source_kinds.kind import RunTree, ScalarSource, ScalarSourceKind


def _reader(prefix: str, current: ScalarSource | None) -> ScalarSource:
    return current if current is not None else RunEvents()


def _files(run: RunTree):
    return run.event_files  # discovery's: non-empty ones (an empty one is a writer not started yet)


KIND = ScalarSourceKind(
    name="tensorboard",
    prefix="",
    claims=is_event_file_name,
    reader=_reader,
    files=_files,
    makes_run=False,  # discovery's own rules (docs/contracts.md "What a run is")
)
