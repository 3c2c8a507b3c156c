"""trackio's project databases (``<project>.db`` beside ``<project>.lock``, core/read/trackers/trackio_db.py)
as a kind of scalar source.

trackio keeps its projects in ``TRACKIO_DIR`` (default ``$HF_HOME/trackio``), rarely in a run's own
directory, and a ``.db`` file is many tools' store: a project database is one beside its ``.lock``
(trackio's writers take it), and a directory holding one is a run where it lies under a watched
path (``triage ~/.cache/huggingface/trackio``, or a ``TRACKIO_DIR`` set to the output directory).
A project of several runs is one run each, ``<project>/<run name>`` (core/read/runs/tracker_runs.py).
"""

from __future__ import annotations

from pathlib import Path

from triage_tui.core.read.source_kinds.kind import RunTree, ScalarSource, ScalarSourceKind, renewed_on_rename
from triage_tui.core.read.trackers import trackio_db


def _make(prefix: str) -> ScalarSource:
    from triage_tui.core.read.trackers.stores import TRACKIO, StoreRuns

    return StoreRuns(TRACKIO, prefix)


def _files(run: RunTree) -> tuple[Path, ...]:
    found = []
    for directory, names in run.dirs:
        listed = set(names)
        for name in names:
            stem = name.removesuffix(trackio_db.DB_SUFFIX)
            if stem != name and stem + trackio_db.LOCK_SUFFIX in listed:
                found.append(Path(directory, name))
    return tuple(found)


KIND = ScalarSourceKind(
    name=trackio_db.KIND,
    prefix="trackio/",
    claims=lambda name: name.endswith(trackio_db.DB_SUFFIX),
    reader=renewed_on_rename(_make),
    files=_files,
)
