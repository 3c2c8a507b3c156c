"""A bounded cache on local disk of what was fetched, keyed by URL and ETag.

An entry is valid exactly as long as the object's ETag is the listing's: S3 and GCS give a new
ETag to every upload, so a rewritten object is never served from here. Least recently used
entries go first once the entries' disk usage (sparse files count only their filled blocks)
passes ``tuning.CACHE_MAX_BYTES``. Entries are written to a temporary name and renamed into
place, so two triage processes sharing the directory never read half an entry.

A trim lists and stats every entry, so a process trims on its first put and then once a sixteenth
of the bound has been put since its last trim, not on every put: a first scan of a sweep puts
thousands of small objects into a cache that may hold tens of thousands, and trimming after each
made that scan's cost grow with the square of the objects (benchmarks/RESULTS-bucket.md). Between
trims the cache may pass its bound by that sixteenth (32 MiB of 512), and by what other processes
put meanwhile.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from triage_tui.core.objstore import tuning

# A trim comes once this fraction of the bound has been put since the last one (module doc).
TRIM_EVERY_FRACTION = 16


def _disk_bytes(st: os.stat_result) -> int:
    return min(st.st_size, st.st_blocks * 512) if hasattr(st, "st_blocks") else st.st_size


class ObjectCache:
    """Entries under ``root``: ``<hash>.data`` (a whole object) or ``<hash>.sparse`` (a checkpoint's
    fetched ranges, with ``<hash>.sparse.ranges`` beside it)."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._put_since_trim: int | None = None  # bytes put since this process's last trim; None: none yet

    @staticmethod
    def name(url: str, etag: str) -> str:
        return hashlib.blake2b(f"{url}\0{etag}".encode(errors="surrogateescape"), digest_size=16).hexdigest()

    def entry(self, url: str, etag: str, suffix: str) -> Path:
        """Where the entry of ``url`` at ``etag`` lives (the directory is created)."""
        self.root.mkdir(parents=True, exist_ok=True)
        return self.root / (self.name(url, etag) + suffix)

    def get(self, url: str, etag: str) -> bytes | None:
        """The whole object ``url`` as it was at ``etag``, or None."""
        if not etag:
            return None
        path = self.root / (self.name(url, etag) + ".data")
        try:
            data = path.read_bytes()
            os.utime(path)  # recently used: evicted last
        except OSError:
            return None
        return data

    def put(self, url: str, etag: str, data: bytes) -> None:
        if not etag or len(data) > self.max_bytes:
            return
        path = self.entry(url, etag, ".data")
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            return
        with self._lock:
            since = self._put_since_trim
            due = since is None or since + len(data) >= self.max_bytes // TRIM_EVERY_FRACTION
            self._put_since_trim = 0 if due else (since or 0) + len(data)
        if due:
            self.trim()

    def trim(self) -> None:
        """Least recently used entries removed until the rest fit in ``max_bytes``."""
        with self._lock:
            aged: list[tuple[float, int, str]] = []  # (last used, bytes on disk, path) of each entry
            try:
                with os.scandir(self.root) as listing:
                    for entry in listing:
                        if not entry.name.endswith((".data", ".sparse")):
                            continue
                        try:
                            st = entry.stat()
                        except OSError:
                            continue  # removed meanwhile (another process trimming)
                        aged.append((st.st_mtime, _disk_bytes(st), entry.path))
            except OSError:
                return
            aged.sort()
            total = sum(size for _, size, _ in aged)
            for _, size, path in aged:
                if total <= self.max_bytes:
                    break
                total -= size
                Path(path).unlink(missing_ok=True)
                if path.endswith(".sparse"):
                    Path(path + ".ranges").unlink(missing_ok=True)


def default_cache() -> ObjectCache | None:
    """The cache ``tuning`` describes, or None when it is off."""
    if not tuning.CACHE_ENABLED:
        return None
    root = tuning.CACHE_DIR
    if root is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = Path(base) / "triage" / "objects"
    return ObjectCache(Path(root), tuning.CACHE_MAX_BYTES)
