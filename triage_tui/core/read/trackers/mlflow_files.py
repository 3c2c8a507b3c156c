"""MLflow's file store (``mlruns/``) as scalar sources, one per run.

The layout (mlflow/store/tracking/file_store.py, 3.x; the default store before 3.7 and still
chosen by ``file:`` tracking URIs): ``mlruns/<experiment_id>/meta.yaml`` (``name``) and
``mlruns/<experiment_id>/<run_id>/meta.yaml`` (``run_name``, ``status`` as RunStatus's number,
``end_time``, ``lifecycle_stage``), and one file a metric, ``<run_id>/metrics/<key>`` (a key with
``/`` in it is a path under ``metrics/``), one line a logged point:
``{timestamp} {value} {step}``, or five fields with the dataset's name and digest
(``FileStore._log_run_metric``; ``_get_metric_from_line`` reads 2, 3 or 5 fields, step 0 when
absent). Values are written by ``str(float)``, so they read back exact; ``nan`` and ``inf`` too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triage_tui.core.errors import BadInput
from triage_tui.core.log_tail import LogTail
from triage_tui.core.read.trackers import tuning
from triage_tui.core.read.trackers.points import PointBatch, metric_name, step_of
from triage_tui.core.read.trackers.text_numbers import parse_number
from triage_tui.core.series import ReadStats, RunScalars

KIND = "mlflow"
DIR_NAME = "mlruns"
META_NAME = "meta.yaml"
METRICS_DIR = "metrics"
# mlflow/protos/service.proto RunStatus: the numbers meta.yaml holds.
STATUS_NAMES = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}
# A meta.yaml is a few hundred bytes; anything this large is not MLflow's.
MAX_META_BYTES = 1 << 16
# Metric files under one run's metrics/ beyond this many are no run's: the rest is not read.
MAX_METRIC_FILES = 10_000


@dataclass(frozen=True)
class MlflowFileRunRef:
    """One run of a file store, as MLflow names it."""

    path: Path  # mlruns/<experiment_id>/<run_id>
    run_id: str
    experiment: str
    name: str
    status: str

    @property
    def label(self) -> str:
        return f"{self.experiment}/{self.name}"


def read_meta(path: Path) -> dict[str, Any]:
    """A meta.yaml as a mapping ({} where it is absent); BadInput where it is not one."""
    import yaml

    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_META_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise BadInput(path, f"cannot read it: {err.strerror or err}") from None
    if len(raw) > MAX_META_BYTES:
        raise BadInput(path, f"over {MAX_META_BYTES >> 10} KiB: not an MLflow meta.yaml")
    try:
        document = yaml.safe_load(raw.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as err:
        raise BadInput(path, f"not YAML: {type(err).__name__}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise BadInput(path, "not a mapping: not an MLflow meta.yaml")
    return document


def status_name(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return STATUS_NAMES.get(value, "?")
    return value if isinstance(value, str) and value in STATUS_NAMES.values() else "?"


def list_file_runs(mlruns: Path) -> tuple[MlflowFileRunRef, ...]:
    """Every run of the store not deleted (``.trash`` and deleted lifecycle left out), by experiment."""
    refs = []
    for experiment_dir in sorted(p for p in mlruns.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for run_dir in sorted(p for p in experiment_dir.iterdir() if (p / METRICS_DIR).is_dir()):
            ref = file_run(run_dir)
            if ref is not None:
                refs.append(ref)
    return tuple(refs)


def file_run(run_dir: Path) -> MlflowFileRunRef | None:
    """The run of a run directory (``<experiment_id>/<run_id>``) as MLflow names it, None where it
    was deleted; BadInput where its or its experiment's meta.yaml is not MLflow's."""
    experiment = read_meta(run_dir.parent / META_NAME).get("name")
    meta = read_meta(run_dir / META_NAME)
    if meta.get("lifecycle_stage") == "deleted":
        return None
    name = meta.get("run_name")
    return MlflowFileRunRef(
        path=run_dir,
        run_id=run_dir.name,
        experiment=experiment if isinstance(experiment, str) else run_dir.parent.name,
        name=name if isinstance(name, str) and name else run_dir.name,
        status=status_name(meta.get("status")),
    )


def _parse(line: str) -> tuple[int, float, int] | None:
    parts = line.strip().split(" ")
    if len(parts) not in (2, 3, 5):
        return None
    timestamp = parse_number(parts[0])
    value = parse_number(parts[1])
    step = step_of(parse_number(parts[2])) if len(parts) > 2 else 0
    wall = step_of(timestamp)
    if wall is None or value is None or step is None:
        return None
    return wall, value, step


class MlflowFileRun:
    """One run of an MLflow file store, each metric file followed (the ``ScalarSource`` protocol)."""

    kind = KIND

    def __init__(self, run_dir: Path, prefix: str = "") -> None:
        self.run_dir, self.prefix = run_dir, prefix
        self.scalars = RunScalars()
        self.problems: dict[Path, str] = {}
        self.damaged: dict[Path, int] = {}
        self.status: str | None = None
        self._tails: dict[Path, LogTail] = {}

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(self._tails) or (self.run_dir / META_NAME,)

    def _metric_files(self) -> list[Path]:
        found: list[Path] = []
        root = self.run_dir / METRICS_DIR
        for directory, dirs, names in os.walk(root):
            dirs.sort()
            found += (Path(directory) / name for name in sorted(names))
            if len(found) >= MAX_METRIC_FILES:
                break
        return found[:MAX_METRIC_FILES]

    def poll(self) -> ReadStats:
        self.status = status_name(read_meta(self.run_dir / META_NAME).get("status"))
        for path in self._metric_files():
            if path not in self._tails:
                self._tails[path] = LogTail(path, max_line_bytes=tuning.MAX_LINE_BYTES)
        stats, root = ReadStats(), self.run_dir / METRICS_DIR
        for path, tail in self._tails.items():
            dropped = tail.dropped
            lines = tail.poll(tuning.MAX_READ_BYTES)
            if tail.problem is not None:
                self.problems[path] = tail.problem
                continue
            self.problems.pop(path, None)
            name = metric_name(path.relative_to(root).as_posix())
            batch, bad = PointBatch(), tail.dropped - dropped
            for line in lines:
                point = _parse(line)
                if point is None or name is None:
                    bad += 1
                    continue
                wall, value, step = point
                batch.add(name, step, wall / 1000.0, value)
            if bad:
                self.damaged[path] = self.damaged.get(path, 0) + bad
            added = batch.append_to(self.scalars, self.prefix)
            stats = ReadStats(
                files=stats.files + 1,
                bytes_read=stats.bytes_read + tail.bytes_read,
                records=stats.records + len(lines),
                scalars=stats.scalars + added,
                corrupt_records=stats.corrupt_records + bad,
            )
        return stats
