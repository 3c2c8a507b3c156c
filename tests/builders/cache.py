"""Fixtures built once and reused, keyed by what built them.

A cache directory is reused only when it was built by these exact builders (the source of every
module in tests/builders/) with these exact writers (the installed torch, tensorboard, safetensors,
numpy, and the trainers and console libraries whose output is cached), or under the key its caller
gives: change a builder or upgrade a writer and the next run builds it again, instead of taking
runs an older builder wrote for the new one's.

``built_once_per_run`` keeps its directory in the test run's own temporary directory, which the
xdist workers of one run share and no other run sees: a slow build is done once per run, by
whichever worker asks first, while the others wait on its lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path

WRITERS = ("torch", "tensorboard", "safetensors", "numpy", "transformers", "speculators", "specforge", "rich", "tqdm")


def builders_key() -> str:
    """SHA-256 over the builders' source and the writers' versions."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for package in WRITERS:
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            version = "absent"  # a fixture that needs it fails on import, and says so
        digest.update(f"{package}=={version}\0".encode())
    return digest.hexdigest()


def built_once(directory: Path, build: Callable[[Path], object], key: str | None = None) -> Path:
    """``directory`` as ``build`` makes it, built again unless its key is ``key`` (default: the builders' key).

    The key is written last, beside the directory (so the directory holds only what ``build``
    wrote), so a build that died half-way is never taken for a whole one; a lock beside it keeps
    parallel workers (xdist) from building it twice.
    """
    directory.parent.mkdir(parents=True, exist_ok=True)
    key = key or builders_key()
    with open(directory.with_name(directory.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _build_unless(directory, key, build)
    return directory


def _build_unless(directory: Path, key: str, build: Callable[[Path], object]) -> None:
    """Build ``directory`` afresh unless its key file says ``key``; the caller holds its lock exclusively."""
    marker = directory.with_name(directory.name + ".key")
    if _read(marker) == key:
        return
    marker.unlink(missing_ok=True)
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    build(directory)
    marker.write_text(key)


def run_temp_dir(tmp_path_factory) -> Path:
    """This test run's temporary directory, shared by its xdist workers (each has a subdirectory of it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once_per_run(tmp_path_factory, name: str, key: str, build: Callable[[Path], object]) -> Path:
    """``build``'s directory ``name``, built by the first worker of this run that asks, under ``key``."""
    return built_once(run_temp_dir(tmp_path_factory) / f"{name}-{key}", build, key)


@contextlib.contextmanager
def held_while_used(directory: Path, build: Callable[[Path], object]) -> Iterator[Path]:
    """``built_once``'s directory, under a shared lock for as long as the caller uses it.

    For a directory at a fixed path (the TUI snapshots show their runs' paths, so they cannot
    move to a directory of each worker's or each run's): readers, the xdist workers of a run and
    other checkouts' runs alike, hold it shared; a build for another key waits until none does,
    so no run's build removes the directory under another run's tests.
    """
    directory.parent.mkdir(parents=True, exist_ok=True)
    key = builders_key()
    with open(directory.with_name(directory.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        while _read(directory.with_name(directory.name + ".key")) != key:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(lock, fcntl.LOCK_EX)  # the last reader of the old build is done
            _build_unless(directory, key, build)
            # flock(2) converts a lock by releasing it first: a build for another key (another
            # checkout's run) may slip in between, so the key is read again under the shared lock.
            fcntl.flock(lock, fcntl.LOCK_SH)
        yield directory


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
