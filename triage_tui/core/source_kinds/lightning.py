"""PyTorch Lightning's CSVLogger (``version_<N>/metrics.csv``, core/trackers/csv_metrics.py) as a
kind of scalar source: the ``version_<N>`` directory holding it is a run, as TensorBoardLogger's
event files beside it make it one."""

from __future__ import annotations

from triage_tui.core.source_kinds.kind import ScalarSource, ScalarSourceKind, renewed_on_rename
from triage_tui.core.trackers import csv_metrics


def _make(prefix: str) -> ScalarSource:
    return csv_metrics.CsvMetrics(csv_metrics.LIGHTNING_KIND, prefix)


KIND = ScalarSourceKind(
    name=csv_metrics.LIGHTNING_KIND,
    prefix="lightning/",
    claims=lambda name: name == csv_metrics.LIGHTNING_NAME,
    reader=renewed_on_rename(_make),
)
