"""Mirrored files fetched only when a reader opens them.

A mirror leaves some small objects as placeholders (a sparse file of the object's size, nothing
fetched) and registers here how to fetch each: the files no scan reads but a check may (the JSON of
an HF Trainer's older ``checkpoint-N/``: 200 checkpoints would be 600 GETs where the scan on disk
opens the newest one's two). The one JSON reader (``formats.json_file.read_json``) asks
``materialize`` before it opens a path: a registered placeholder is then fetched whole and written in
place (atomically), once, whichever thread asks first; any other path costs a dictionary look-up.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class _Entry:
    fetch: Callable[[], None]
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: bool = False


_ENTRIES: dict[str, _Entry] = {}
_LOCK = threading.Lock()


def register(path: str | os.PathLike[str], fetch: Callable[[], None]) -> None:
    """``path`` is a placeholder that ``fetch()`` fills (writing the object's bytes in place)."""
    with _LOCK:
        _ENTRIES[os.path.abspath(path)] = _Entry(fetch)


def forget(path: str | os.PathLike[str]) -> None:
    """``path`` is no longer a deferred placeholder (fetched, rewritten or removed by its mirror)."""
    with _LOCK:
        _ENTRIES.pop(os.path.abspath(path), None)


def is_deferred(path: str | os.PathLike[str]) -> bool:
    with _LOCK:
        return os.path.abspath(path) in _ENTRIES


def materialize(path: str | os.PathLike[str]) -> None:
    """When ``path`` is a deferred placeholder, its object fetched into it now (a reader waiting on
    another thread's fetch of the same path waits for it); BadInput from the fetch goes to the
    caller, and the placeholder stays registered so a later read tries again."""
    if not _ENTRIES:
        return
    key = os.path.abspath(path)
    with _LOCK:
        entry = _ENTRIES.get(key)
    if entry is None:
        return
    with entry.lock:
        if entry.done:
            return
        entry.fetch()
        entry.done = True
    with _LOCK:
        if _ENTRIES.get(key) is entry:
            del _ENTRIES[key]


def materialize_under(root: str | os.PathLike[str]) -> int:
    """Every deferred placeholder at or below ``root`` fetched (a remap copying a whole checkpoint
    directory reads every file of it); how many."""
    base = os.path.abspath(root)
    with _LOCK:
        found = [path for path in _ENTRIES if path == base or path.startswith(base + os.sep)]
    for path in found:
        materialize(path)
    return len(found)
