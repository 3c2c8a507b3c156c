"""PyTorch Lightning's CSVLogger (``version_<N>/metrics.csv``, core/read/trackers/csv_metrics.py) as a
kind of scalar source: the directory holding it is a run, as TensorBoardLogger's event files
beside it make it one.

``metrics.csv`` is a common name (an evaluation's table, a notebook's export), so the name alone
makes no run: Lightning's layout does, a ``version_<N>/`` holding it (CSVLogger's own directory,
``hparams.yaml`` beside it where hyperparameters were logged), or its header as Lightning writes
it, ``step`` and ``epoch`` among its columns (``csv_metrics.is_lightning_header``;
lightning/fabric/loggers/csv_logs.py adds ``step`` to every row, the Trainer logs ``epoch``): a
damaged header in ``version_<N>/`` still leaves the run there to say so. A metrics.csv given
alone is read as asked.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from triage_tui.core.read.source_kinds.kind import RunTree, ScalarSource, ScalarSourceKind, renewed_on_rename
from triage_tui.core.read.trackers import csv_metrics

# CSVLogger's default version directories (lightning/fabric/loggers/csv_logs.py ``_get_next_version``).
VERSION_DIR = re.compile(r"^version_\d+$")


def _make(prefix: str) -> ScalarSource:
    return csv_metrics.CsvMetrics(csv_metrics.LIGHTNING_KIND, prefix)


def _is_lightnings(directory: str, names: tuple[str, ...]) -> bool:
    if csv_metrics.LIGHTNING_NAME not in names:
        return False
    if VERSION_DIR.match(os.path.basename(directory)):
        return True
    return csv_metrics.has_lightning_header(Path(directory, csv_metrics.LIGHTNING_NAME))


def _files(run: RunTree) -> tuple[Path, ...]:
    return tuple(
        Path(directory, csv_metrics.LIGHTNING_NAME) for directory, names in run.dirs if _is_lightnings(directory, names)
    )


KIND = ScalarSourceKind(
    name=csv_metrics.LIGHTNING_KIND,
    prefix="lightning/",
    claims=lambda name: name == csv_metrics.LIGHTNING_NAME,
    reader=renewed_on_rename(_make),
    files=_files,
)
