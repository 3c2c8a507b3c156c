"""Fixtures built once per machine and reused, keyed by what built them.

A cache directory is reused only when it was built by these exact builders (the source of every
module in tests/builders/) with these exact writers (the installed torch, tensorboard, safetensors,
numpy, and the trainers and console libraries whose output is cached): change a builder or upgrade
a writer and the next run builds it again, instead of taking runs an older builder wrote for the
new one's.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
from collections.abc import Callable
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


def built_once(directory: Path, build: Callable[[Path], object]) -> Path:
    """``directory`` as ``build`` makes it, built again unless its key is the builders' current one.

    The key is written last, so a build that died half-way is never taken for a whole one; a lock
    beside the directory keeps parallel workers (xdist) from building it twice.
    """
    directory.parent.mkdir(parents=True, exist_ok=True)
    key = builders_key()
    marker = directory / "builders.sha256"
    with open(directory.with_name(directory.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            built = marker.read_text()
        except OSError:
            built = None
        if built != key:
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            build(directory)
            marker.write_text(key)
    return directory
