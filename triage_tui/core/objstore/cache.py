"""A bounded cache on local disk of what was fetched, keyed by URL and ETag.

An entry is valid exactly as long as the object's ETag is the listing's: S3 and GCS give a new
ETag to every upload, so a rewritten object is never served from here. Least recently used
entries go first once the entries' disk usage (sparse files count only their filled blocks)
passes ``tuning.CACHE_MAX_BYTES``. Entries are written to a temporary name and renamed into
place, so two triage processes sharing the directory never read half an entry.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from triage_tui.core.objstore import tuning


def _disk_bytes(path: Path) -> int:
    try:
        st = path.stat()
    except OSError:
        return 0
    return min(st.st_size, st.st_blocks * 512) if hasattr(st, "st_blocks") else st.st_size


class ObjectCache:
    """Entries under ``root``: ``<hash>.data`` (a whole object) or ``<hash>.sparse`` (a checkpoint's
    fetched ranges, with ``<hash>.sparse.ranges`` beside it)."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._lock = threading.Lock()

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
        self.trim()

    def trim(self) -> None:
        """Least recently used entries removed until the rest fit in ``max_bytes``."""
        with self._lock:
            try:
                entries = [p for p in self.root.iterdir() if p.suffix in (".data", ".sparse")]
            except OSError:
                return
            aged = sorted(((p.stat().st_mtime, p) for p in entries if p.exists()), key=lambda t: t[0])
            total = sum(_disk_bytes(p) for _, p in aged)
            for _, path in aged:
                if total <= self.max_bytes:
                    break
                total -= _disk_bytes(path)
                path.unlink(missing_ok=True)
                if path.suffix == ".sparse":
                    path.with_name(path.name + ".ranges").unlink(missing_ok=True)


def default_cache() -> ObjectCache | None:
    """The cache ``tuning`` describes, or None when it is off."""
    if not tuning.CACHE_ENABLED:
        return None
    root = tuning.CACHE_DIR
    if root is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = Path(base) / "triage" / "objects"
    return ObjectCache(Path(root), tuning.CACHE_MAX_BYTES)
