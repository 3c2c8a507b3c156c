"""A remote object as a local sparse file: as long as the object, holding only the ranges fetched.

The readers of local files then work on it unchanged: safetensors' own ``safe_open`` maps it and
reads a tensor whose bytes were fetched exactly as from the whole file, and the header reader
checks its offsets against the real size. What was never fetched is a hole (zeros, no disk
blocks), so ``filled`` is the record of what may be read: ``SparseObject.ensure`` fetches what a
range lacks before anyone reads it. Off the cache the file lives in a temporary directory removed
by ``close`` (below this process's ``scratch`` directory, removed however the process ends); in the
cache (``tuning.CACHE_CHECKPOINTS``) its ranges are kept beside it, valid for the object's ETag.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

from triage_tui.core.errors import BadInput
from triage_tui.core.objstore import scratch, tuning
from triage_tui.core.objstore.cache import ObjectCache
from triage_tui.core.objstore.follow import read_range
from triage_tui.core.objstore.store import ObjectMeta, Store


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(r for r in ranges if r[1] > r[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _name(key: str) -> str:
    """A local file name for the object: its last key component, made safe (untrusted text)."""
    last = key.rstrip("/").rsplit("/", 1)[-1]
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in last)[:120].lstrip(".")
    return safe or "object"


class SparseObject:
    """``path``: a local file of the object's size; ``ensure(ranges)`` fills what they lack."""

    def __init__(self, store: Store, meta: ObjectMeta, cache: ObjectCache | None = None) -> None:
        self.store, self.meta = store, meta
        self.url = store.url(meta.key)
        self._lock = threading.Lock()
        self._tempdir: str | None = None
        self.filled: list[tuple[int, int]] = []
        if cache is not None and meta.etag:
            self.path = cache.entry(self.url, meta.etag, ".sparse")
            self._ranges_file: Path | None = self.path.with_name(self.path.name + ".ranges")
            self.filled = self._load_ranges()
        else:
            self._tempdir = tempfile.mkdtemp(prefix="object-", dir=scratch.scratch_dir())
            self.path = Path(self._tempdir) / _name(meta.key)
            self._ranges_file = None
        if not self.filled:
            with open(self.path, "wb") as f:
                f.truncate(meta.size)  # all a hole: no byte fetched, no block written

    def _load_ranges(self) -> list[tuple[int, int]]:
        try:
            ranges = json.loads(self._ranges_file.read_text()) if self._ranges_file else []
            if self.path.stat().st_size != self.meta.size:
                return []
        except (OSError, ValueError):
            return []
        good = [
            (int(a), int(b))
            for a, b in ranges
            if isinstance(a, int) and isinstance(b, int) and 0 <= a < b <= self.meta.size
        ]
        return _merge(good)

    def missing(self, start: int, end: int) -> list[tuple[int, int]]:
        """The parts of [start, end) not fetched yet."""
        out, position = [], start
        for a, b in self.filled:
            if b <= position:
                continue
            if a >= end:
                break
            if a > position:
                out.append((position, min(a, end)))
            position = max(position, b)
            if position >= end:
                break
        if position < end:
            out.append((position, end))
        return out

    def ensure(self, ranges: list[tuple[int, int]]) -> int:
        """Fetch what ``ranges`` lack (clipped to the object); the bytes fetched. BadInput when the
        object changed since it was listed (another ETag) or is shorter than listed."""
        wanted = _merge([(max(0, a), min(b, self.meta.size)) for a, b in ranges])
        fetched = 0
        with self._lock:
            gaps = [gap for a, b in wanted for gap in self.missing(a, b)]
            if not gaps:
                return 0
            fd = os.open(self.path, os.O_WRONLY)
            try:
                for a, b in gaps:
                    data = read_range(self.store, self.meta.key, a, b, self.meta.etag)
                    view = memoryview(data)
                    while view:
                        view = view[os.pwrite(fd, view, a + len(data) - len(view)) :]
                    fetched += len(data)
            finally:
                os.close(fd)
            self.filled = _merge(self.filled + gaps)
            if self._ranges_file is not None:
                self._ranges_file.write_text(json.dumps(self.filled))
        return fetched

    def fetched_bytes(self) -> int:
        """Bytes of the object fetched into the file so far."""
        return sum(b - a for a, b in self.filled)

    def close(self) -> None:
        """Remove the temporary file (a cached one stays, for the cache to evict)."""
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None


def open_sparse(store: Store, key: str, *, meta: ObjectMeta | None = None) -> SparseObject:
    """The object ``key`` as a sparse local file (one HEAD when ``meta`` is not given); in the
    cache only when ``tuning.CACHE_CHECKPOINTS`` says so."""
    from triage_tui.core.objstore.cache import default_cache

    if meta is None:
        meta = store.head(key)
    if meta.size < 0:
        raise BadInput(store.url(key), f"listed with a negative size ({meta.size})")
    return SparseObject(store, meta, default_cache() if tuning.CACHE_CHECKPOINTS else None)
