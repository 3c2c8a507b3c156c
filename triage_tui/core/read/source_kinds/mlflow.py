"""MLflow's tracking stores as a kind of scalar source: its SQLite store (``mlflow.db``,
core/read/trackers/mlflow_db.py) and a run directory of its file store (``mlruns/<experiment id>/<run
id>/``, core/read/trackers/mlflow_files.py).

A directory holding ``mlflow.db`` (MLflow's default store since 3.7: ``sqlite:///mlflow.db`` in the
working directory) is a run; a store of several runs is one run each (core/read/runs/tracker_runs.py).
A directory holding ``meta.yaml`` beside ``metrics/`` and ``tags/`` is one run of a file store
(``FileStore.create_run`` makes them, and every run has tags: ``mlflow.user``, ``mlflow.runName``;
an experiment's directory holds a meta.yaml and its runs). Its series are named ``mlflow/...`` when
a kind listed before it (event files, W&B) has files in the run too.
"""

from __future__ import annotations

from pathlib import Path

from triage_tui.core.read.source_kinds.kind import RunTree, ScalarSource, ScalarSourceKind, renewed_on_rename
from triage_tui.core.read.trackers import mlflow_db, mlflow_files

# What FileStore.create_run makes in a run's directory beside its meta.yaml and fills
# (mlflow/store/tracking/file_store.py; params/ stays empty, and so absent from a copy, without params).
FILE_RUN_DIRS = frozenset({mlflow_files.METRICS_DIR, "tags"})


def _make(prefix: str) -> ScalarSource:
    from triage_tui.core.read.trackers.stores import MLFLOW, StoreRuns

    return StoreRuns(MLFLOW, prefix)


def _files(run: RunTree) -> tuple[Path, ...]:
    found = run.claimed(lambda name: name == mlflow_db.DB_NAME)
    own = run.dirs[0][1] if run.dirs else ()
    if mlflow_files.META_NAME in own and set(run.subdirs) >= FILE_RUN_DIRS:
        found = (run.path / mlflow_files.META_NAME, *found)
    return found


KIND = ScalarSourceKind(
    name=mlflow_db.KIND,
    prefix="mlflow/",
    claims=lambda name: name == mlflow_db.DB_NAME,
    reader=renewed_on_rename(_make),
    files=_files,
)
