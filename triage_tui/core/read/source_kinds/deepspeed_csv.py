"""DeepSpeed's CSV monitor (core/read/trackers/csv_metrics.py) as a kind of scalar source.

deepspeed/monitor/csv_monitor.py writes one file a metric in ``<output_path>/<job_name>/``, named
after the event with ``/`` and spaces made ``_`` (the engine's events are ``Train/Samples/...``:
``Train_Samples_train_loss.csv``), header ``step,<last part of the name>``, written again by each
new process. The directory holding them is a run.
"""

from __future__ import annotations

import re

from triage_tui.core.read.source_kinds.kind import ScalarSource, ScalarSourceKind, renewed_on_rename
from triage_tui.core.read.trackers import csv_metrics

NAME = "deepspeed"
_FILE = re.compile(r"^Train_.+\.csv$")


def _make(prefix: str) -> ScalarSource:
    return csv_metrics.CsvMetrics(NAME, prefix)


KIND = ScalarSourceKind(
    name=NAME,
    prefix="deepspeed/",
    claims=lambda name: _FILE.match(name) is not None,
    reader=renewed_on_rename(_make),
)
