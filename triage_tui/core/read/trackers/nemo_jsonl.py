"""NeMo Automodel's metric files: ``<checkpoint_dir>/training.jsonl`` and ``validation_<name>.jsonl``.

nemo_automodel/components/loggers/metric_logger.py (``MetricLogger``, ``MetricsSample.to_dict``):
one JSON object a line, ``{"step", "epoch", "timestamp", <metric>: <value>, ...}``, the metrics
at the top level beside the three (earlier releases nested them under ``"metrics"``: both are
read); ``timestamp`` is UTC ISO 8601 with a ``Z``; ``json.dumps`` writes a NaN as ``NaN``.
Validation files' metrics are named ``validation_<name>/<metric>`` (``val/<metric>`` for the
default validation set), training's as logged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from triage_tui.core.read.trackers.line_log import DAMAGED, Damaged, LineLogs, Logged
from triage_tui.core.read.trackers.points import metric_name, number, step_of

KIND = "nemo-automodel"
TRAINING_NAME = "training.jsonl"
VALIDATION_NAME = re.compile(r"^validation(?:_(?P<name>.+))?\.jsonl$")
_NOT_METRICS = frozenset({"step", "epoch", "timestamp", "metrics"})


def is_metrics_file_name(name: str) -> bool:
    return name == TRAINING_NAME or VALIDATION_NAME.match(name) is not None


def _parser(prefix: str) -> Callable[[str], Logged | Damaged | None]:
    def parse(line: str) -> Logged | Damaged | None:
        if not line.strip():
            return None
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            return DAMAGED
        if not isinstance(record, dict):
            return DAMAGED
        if "step" not in record:
            return None  # no metrics record (a data set's example): not this format's line
        step = step_of(record.get("step"))
        items = [(key, raw) for key, raw in record.items() if key not in _NOT_METRICS]
        nested = record.get("metrics")
        if isinstance(nested, dict):
            items += nested.items()
        values = []
        for key, raw in items:
            name, value = metric_name(key), number(raw)
            if name is None:
                return DAMAGED
            if value is not None:  # a string or list beside the metrics is no metric, not damage
                values.append((prefix + name, value))
        if step is None:
            return DAMAGED
        return Logged(step, tuple(values)) if values else None

    return parse


def series_prefix(path: Path) -> str:
    """What a file's metrics are named under: nothing for training, ``val/`` or ``validation_<name>/``."""
    match = VALIDATION_NAME.match(path.name)
    if match is None:
        return ""
    return f"validation_{match['name']}/" if match["name"] else "val/"


def metric_logs(prefix: str = "") -> LineLogs:
    """A run's metric files, each file's series named under its own prefix (``series_prefix``)."""
    return LineLogs(KIND, lambda path: _parser(series_prefix(path)), prefix)
