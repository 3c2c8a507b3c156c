"""The runs a tracker's store holds, each a run of its own, named as the tracker names it.

An ``mlflow.db`` or a trackio ``<project>.db`` holds every run its trainer logged: a sweep, a
resumed run under a new name, the runs of a week. Discovery finds the store as one of a directory's
files (core/read/runs/discover.py); here a store of several runs (all the stores of one directory taken
together) becomes one run each: its ``path``, its identity, is the store's path joined with one
segment for the run (``<dir>/mlflow.db/<run id>``, ``<dir>/<project>.db/<run>``; ``RunInfo``
says so), its ``store_run`` the run's key in the store, which its reader reads alone
(``StoreRuns.only``), and its name the tracker's own: ``<experiment>/<run name>`` (MLflow's UI),
``<project>/<run name>`` (trackio's), below the directory's name when the directory is below the
watched path. The directory keeps its other sources (event files, a console) as a run of its own.
A store of one run stays one source of its directory's run (a run with a tracker store and event
files is one run with two sources). An MLflow file store's run directory
(``mlruns/<experiment id>/<run id>/``) is already a run of its own: it is named the same way.

Listing a store opens it (read-only, core/read/trackers/sqlite_ro.py) once per change of its files, as a
console's head is read once per change (``ListingCache.store_runs``). A store that cannot be listed
(damaged, a schema not known here) stays one source of its directory's run, whose reader says why:
it fails only that run. One locked by its writer keeps its last listing.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import replace
from pathlib import Path

from triage_tui.core.errors import BadInput
from triage_tui.core.read.runs.info import RunInfo
from triage_tui.core.read.runs.listing import ListingCache
from triage_tui.core.read.trackers import mlflow_db, mlflow_files, sqlite_ro, trackio_db
from triage_tui.core.read.trackers.stores import MLFLOW, TRACKIO, StoredRun, StoreFormat

FORMATS: dict[str, StoreFormat] = {mlflow_db.KIND: MLFLOW, trackio_db.KIND: TRACKIO}


def _change_key(path: Path) -> tuple:
    """What changes when the store's list of runs may have: its files' (inode, size, mtime)."""
    if path.name != mlflow_files.META_NAME:
        return sqlite_ro.store_key(path)
    stats: list[tuple[int, int, int] | None] = []
    for meta in (path, path.parent.parent / mlflow_files.META_NAME):  # the run's and its experiment's
        try:
            stat = os.stat(meta)
        except OSError:
            stats.append(None)
            continue
        stats.append((stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(stats)


def _listed(store_format: StoreFormat, path: Path, cache: ListingCache) -> tuple[StoredRun, ...] | None:
    """The store's runs, listed again only when its files changed; None where it cannot be listed."""
    key = _change_key(path)
    cached = cache.store_runs.get(str(path))
    if cached is not None and cached[0] == key:
        return cached[1]
    try:
        runs = store_format.list_runs(path)
    except sqlite_ro.Locked:
        return cached[1] if cached is not None else None  # listed again at the next rescan
    except BadInput:
        runs = None  # its reader says why, as an error of the directory's run
    cache.store_runs[str(path)] = (key, runs)
    return runs


def _names(runs: list[tuple[str, Path, StoredRun]], base: str) -> list[str]:
    """Each run's name: ``<base>/<label>``, the run's segment added where two share a label (MLflow
    lets two runs of an experiment have one name)."""
    labels = [run.label for _kind, _path, run in runs]
    names = []
    for _kind, path, run in runs:
        name = f"{base}/{run.label}" if base else run.label
        if labels.count(run.label) > 1:
            name += f" [{path.name}/{run.segment}]" if len({p for _k, p, _r in runs}) > 1 else f" [{run.segment}]"
        names.append(name)
    return names


def _base(directory: Path, root: str) -> str:
    """The name of the directory a store lies in, relative to the watched path; "" at or above it."""
    if str(directory) != root and str(directory).startswith(root.rstrip(os.sep) + os.sep):
        return Path(os.path.relpath(directory, root)).as_posix()
    return ""


def store_runs(info: RunInfo, root: str, cache: ListingCache) -> list[RunInfo]:
    """``info`` as discovery found it, or, where it holds trackers' stores of several runs, one run
    for each of their runs and the directory's run with what else it holds (none when nothing)."""
    stores = [(kind, path) for kind, paths in info.scalar_files if kind in FORMATS for path in paths]
    if not stores:
        return [info]
    runs: list[tuple[str, Path, StoredRun]] = []
    for kind, path in stores:
        listed = _listed(FORMATS[kind], path, cache)
        if listed is None:
            return [info]
        runs.extend((kind, path, run) for run in listed)
    file_runs = [entry for entry in runs if entry[1].name == mlflow_files.META_NAME]
    if file_runs:  # an MLflow file store's run directory: already a run; its name is MLflow's
        _kind, path, run = file_runs[0]
        base = _base(path.parent.parent.parent.parent, root)  # <dir>/mlruns/<experiment id>/<run id>/meta.yaml
        return [replace(info, name=_names([file_runs[0]], base)[0], store_run=run.key)]
    if len(runs) < 2:
        return [info]
    own = tuple((kind, paths) for kind, paths in info.scalar_files if kind not in FORMATS)
    found = [replace(info, scalar_files=own)] if own else []
    for (kind, path, run), name in zip(runs, _names(runs, _base(info.path, root)), strict=True):
        found.append(
            RunInfo(
                path=path.joinpath(*run.segment.split("/")),
                name=name,
                event_files=(),
                manifest=info.manifest,
                artifacts=info.artifacts,
                manifest_error=info.manifest_error,
                scalar_files=((kind, (path,)),),
                store_run=run.key,
            )
        )
    return found


def trackio_elsewhere_note(paths: list[Path]) -> str | None:
    """Where trackio keeps its projects, when that is outside every watched path and holds some: one
    line for a scan that found nothing (trackio writes to ``TRACKIO_DIR``, else ``$HF_HOME/trackio``,
    not to the run's output directory; it is watched only when named, as it holds every project of
    the user's, not the run's)."""
    watched = [os.path.realpath(path) for path in paths]
    for directory in trackio_db.default_dirs():
        real = os.path.realpath(directory)
        if any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in watched):
            continue
        try:
            with os.scandir(directory) as entries:
                projects = [entry.name for entry in entries if entry.name.endswith(trackio_db.DB_SUFFIX)]
        except OSError:
            continue
        if projects:
            command = f"triage scan {shlex.quote(str(directory))}"
            return f"trackio keeps its projects in {directory} ({len(projects)} there): `{command}` reads them"
    return None
