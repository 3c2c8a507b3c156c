"""Read a file again only when it changed: the one rule, and the one key, for the files triage re-reads
whole (a run's config.json, its drafter's config, training_state.pt, best_meta.json, trainer_state.json,
a saved metrics page, a speculation profile).

A file's stamp is (device, inode, size, mtime in ns): a file replaced by a rename (how trainers save
atomically) has a new inode, one rewritten in place a new size or mtime. A stamp taken from an open
descriptor (``stamp_of(os.fstat(fd))``) describes exactly the bytes about to be read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

FileStamp = tuple[int, int, int, int]  # (st_dev, st_ino, st_size, st_mtime_ns)
T = TypeVar("T")


def stamp_of(stat: os.stat_result) -> FileStamp:
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def file_stamp(path: Path | str | None) -> FileStamp | None:
    """The file's stamp; None when there is no path or the file cannot be looked at."""
    if path is None:
        return None
    try:
        return stamp_of(os.stat(path))
    except OSError:
        return None


class ChangedFile(Generic[T]):
    """One file's last read value, read again when the file's stamp (or which file it is) changed.

    ``read(path)`` returns the value, problems included (it should not raise for a bad file);
    ``empty`` is the value while there is no file."""

    def __init__(self, read: Callable[[Path], T], empty: T) -> None:
        self._read = read
        self._empty = empty
        self._seen: tuple[Path | None, FileStamp | None] = (None, None)
        self.value = empty

    def refresh(self, path: Path | None) -> bool:
        """Read ``path`` if it is another file or changed since the last read; True when the value may differ."""
        seen = (path, file_stamp(path))
        if seen == self._seen:
            return False
        self._seen = seen
        self.value = self._read(path) if path is not None and seen[1] is not None else self._empty
        return True
