"""MLflow's SQLite tracking store (``mlflow.db``, core/trackers/mlflow_db.py) as a kind of scalar source.

A directory holding ``mlflow.db`` (MLflow's default store since 3.7: ``sqlite:///mlflow.db`` in the
working directory) is a run; every run the store holds is read (core/trackers/stores.py), each under
its MLflow name (``<experiment>/<run name>/``) when it holds several. Its series are named
``mlflow/...`` when a kind listed before it (event files, W&B) has files in the run too.
"""

from __future__ import annotations

from triage_tui.core.source_kinds.kind import ScalarSource, ScalarSourceKind, renewed_on_rename
from triage_tui.core.trackers import mlflow_db


def _make(prefix: str) -> ScalarSource:
    from triage_tui.core.trackers.stores import MLFLOW, StoreRuns

    return StoreRuns(MLFLOW, prefix)


KIND = ScalarSourceKind(
    name=mlflow_db.KIND,
    prefix="mlflow/",
    claims=lambda name: name == mlflow_db.DB_NAME,
    reader=renewed_on_rename(_make),
)
