"""A tracker's store in a run's directory as one scalar source: every run the store holds, read.

An MLflow ``mlflow.db`` or a trackio ``<project>.db`` holds many runs; an MLflow file store's run
directory (``mlruns/<experiment id>/<run id>/meta.yaml``) one. Discovery makes each run of a
store of several a triage run of its own (core/read/runs/tracker_runs.py): its reader is then given the
run's key (``only``) and reads that run alone, its series under their logged names. Read where
discovery found it without a key, each run of it is read by its own reader (``MlflowDbRun``,
``MlflowFileRun``, ``TrackioRun``), listed again when the store's files change (a run started
since). A store holding one run gives its series their logged names; one holding several names
each run's series ``<label>/<metric>`` (MLflow's ``<experiment>/<run name>``, trackio's
``<project>/<run name>``), so no run's points land on another's. ``states`` says what the store
says of each run (MLflow's status: RUNNING, FINISHED, FAILED, KILLED), for where no writer process
is visible.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

from triage_tui.core.errors import BadInput
from triage_tui.core.read.trackers import mlflow_db, mlflow_files, sqlite_ro, trackio_db
from triage_tui.core.series import ReadStats, RunScalars
from triage_tui.core.text import printable


class _RunReader(Protocol):
    scalars: RunScalars
    damaged: dict[Path, int]

    def poll(self) -> ReadStats: ...


@dataclass(frozen=True)
class StoredRun:
    """One run of a store: its label, its key in the store, the status the store gives it, and the
    one path segment that stands for it below the store's path (``segment``: its run id, or its
    name quoted so that it is one segment, never ``.`` or ``..``)."""

    label: str
    key: str
    status: str | None
    segment: str = ""


def path_segment(text: str) -> str:
    """``text`` as one path segment: ``/``, ``%``, control characters quoted, ``.`` and ``..`` too."""
    segment = quote(text, safe=" -_.,+=@~()[]{}:!") or "%00"
    return segment.replace(".", "%2E") if segment in (".", "..") else segment


@dataclass(frozen=True)
class StoreFormat:
    kind: str
    list_runs: Callable[[Path], tuple[StoredRun, ...]]
    reader: Callable[[Path, StoredRun, str], _RunReader]


def _mlflow_runs(path: Path) -> tuple[StoredRun, ...]:
    """The runs of an ``mlflow.db``, or the one run of a file store's run directory (its meta.yaml)."""
    if path.name == mlflow_files.META_NAME:
        ref = mlflow_files.file_run(path.parent)
        return (StoredRun(ref.label, ref.run_id, ref.status, path_segment(ref.run_id)),) if ref is not None else ()
    return tuple(
        StoredRun(ref.label, ref.run_id, ref.status, path_segment(ref.run_id)) for ref in mlflow_db.list_runs(path)
    )


def _mlflow_reader(path: Path, run: StoredRun, prefix: str) -> _RunReader:
    if path.name == mlflow_files.META_NAME:
        return mlflow_files.MlflowFileRun(path.parent, prefix)
    return mlflow_db.MlflowDbRun(path, run.key, prefix)


def _trackio_runs(path: Path) -> tuple[StoredRun, ...]:
    legacy = path.name == trackio_db.LEGACY_DB_NAME  # every project in one file: project/run below it
    return tuple(
        StoredRun(
            ref.label,
            f"{ref.project}\0{ref.run}",
            None,
            f"{path_segment(ref.project)}/{path_segment(ref.run)}" if legacy else path_segment(ref.run),
        )
        for ref in trackio_db.list_runs(path)
    )


def _trackio_reader(path: Path, run: StoredRun, prefix: str) -> _RunReader:
    project, _, key = run.key.partition("\0")
    return trackio_db.TrackioRun(path, key, project=project, prefix=prefix)


MLFLOW = StoreFormat(mlflow_db.KIND, _mlflow_runs, _mlflow_reader)
TRACKIO = StoreFormat(trackio_db.KIND, _trackio_runs, _trackio_reader)


class StoreRuns:
    """Every run of a run directory's stores of one format (the ``ScalarSource`` protocol)."""

    def __init__(self, store_format: StoreFormat, prefix: str = "") -> None:
        self.format, self.kind, self.prefix = store_format, store_format.kind, prefix
        # The key of the one run to read (a store's run that discovery made a run of its own), or
        # None: every run of the store.
        self.only: str | None = None
        self.scalars = RunScalars()
        self.problems: dict[Path, str] = {}
        self.states: dict[str, str | None] = {}  # label -> the store's status of that run
        self._paths: tuple[Path, ...] = ()
        self._listed: dict[Path, sqlite_ro.StoreKey] = {}
        self._runs: dict[tuple[Path, str], tuple[StoredRun, _RunReader]] = {}
        self._seen: tuple = ()

    @property
    def files(self) -> tuple[Path, ...]:
        return self._paths

    @property
    def damaged(self) -> dict[Path, int]:
        out: dict[Path, int] = {}
        for _run, reader in list(self._runs.values()):
            for path, count in reader.damaged.items():
                out[path] = out.get(path, 0) + count
        return out

    def select(self, key: str | None) -> None:
        """Read the run of this key alone (None: every run); its series keep their logged names."""
        if key != self.only:
            self.only, self._runs, self._listed, self.states = key, {}, {}, {}

    def set_files(self, paths: Sequence[Path]) -> None:
        self._paths = tuple(paths)
        self._runs = {key: value for key, value in self._runs.items() if key[0] in self._paths}

    def _list(self, path: Path) -> None:
        key = sqlite_ro.store_key(path)
        if self._listed.get(path) == key:
            return
        try:
            runs = self.format.list_runs(path)
        except sqlite_ro.Locked:
            return  # listed at a later poll
        self._listed[path] = key
        if self.only is not None:
            runs = tuple(run for run in runs if run.key == self.only)
        listed = {run.key for run in runs}  # a run deleted from the store (mlflow gc) is read no more
        self._runs = {k: v for k, v in self._runs.items() if k[0] != path or k[1] in listed}
        several = self.only is None and (len(runs) > 1 or len(self._paths) > 1)
        for run in runs:
            prefix = f"{self.prefix}{run.label}/" if several else self.prefix
            current = self._runs.get((path, run.key))
            if current is None or getattr(current[1], "prefix", prefix) != prefix:
                current = (run, self.format.reader(path, run, prefix))
            self._runs[(path, run.key)] = (run, current[1])

    def poll(self) -> ReadStats:
        stats = ReadStats()
        for path in self._paths:
            try:
                self._list(path)
            except BadInput as err:
                self.problems[path] = err.what  # this store's runs fail; the run's other sources are read
                continue
            self.problems.pop(path, None)
        for (path, _key), (run, reader) in list(self._runs.items()):
            if path in self.problems:
                continue
            try:
                polled = reader.poll()
            except BadInput as err:
                self.problems[path] = err.what
                continue
            stats = ReadStats(
                files=stats.files + polled.files,
                records=stats.records + polled.records,
                scalars=stats.scalars + polled.scalars,
                corrupt_records=stats.corrupt_records + polled.corrupt_records,
            )
            status = getattr(reader, "status", None)
            self.states[run.label] = status if isinstance(status, str) else run.status
        self._merge()
        return stats

    def _merge(self) -> None:
        parts = [reader.scalars for _run, reader in self._runs.values()]
        seen = tuple((id(part), id(part.series), part.version) for part in parts)
        if seen == self._seen:
            return
        self._seen = seen
        merged: dict = {}
        for part in parts:
            merged.update(part.series)
        self.scalars.series = merged
        self.scalars.version += 1


def recorded_end(states: dict[str, str | None]) -> tuple[str, str] | None:
    """What a store's statuses say of the run's end, as ``run_state``'s (state, reason): a run FAILED
    crashed; one FINISHED ended, and one KILLED too (stopped on purpose: a cancel, a pruned trial;
    said so), where every run of the store ended; RUNNING (``recorded_running``) or unknown says
    nothing of an end."""
    known = {label: status for label, status in states.items() if status is not None}
    failed = sorted(label for label, status in known.items() if status in mlflow_db.FAILED)
    if failed:
        return "crashed", f"MLflow recorded {printable(failed[0])} {known[failed[0]]}"
    if known and all(status in mlflow_db.ENDED | mlflow_db.STOPPED for status in known.values()):
        stopped = sorted(label for label, status in known.items() if status in mlflow_db.STOPPED)
        if stopped:
            return "ended", (
                f"MLflow recorded {printable(stopped[0])} KILLED: stopped on purpose before it finished "
                "(a cancelled run or a pruned trial), not a crash"
            )
        return "ended", "MLflow recorded the run FINISHED" if len(known) == 1 else "MLflow recorded every run FINISHED"
    return None


def recorded_running(store: StoreRuns | None) -> tuple[str, str] | None:
    """What a store that records a run RUNNING (no end yet) says of it where no writer is visible, as
    ``run_state``'s (state, reason); None where it records no run so. A database store is held open
    by its writer for the writer's whole life (MLflow's SQLAlchemy pool keeps ``mlflow.db`` open:
    /proc/PID/fd shows it), so with no process holding it the writer died without ending the run
    (MLflow ends its run at any exit it lives through): crashed. MLflow's file store opens a metric
    file only while it appends a line, so a live writer is not seen there: unknown, said why."""
    if store is None:
        return None
    running = sorted(label for label, status in store.states.items() if status in mlflow_db.RUNNING)
    if not running:
        return None
    recorded = f"MLflow records {printable(running[0])} RUNNING"
    if store.files and all(path.name != mlflow_files.META_NAME for path in store.files):
        return "crashed", f"{recorded}, but no process of this node writes it: its writer died without ending the run"
    return "unknown", f"{recorded}; its file store is open only while a point is appended, so its writer is not seen"


def first_store(sources: Iterable[object]) -> StoreRuns | None:
    """The first tracker store among a run's sources, None without one."""
    for source in sources:
        if isinstance(source, StoreRuns):
            return source
    return None
