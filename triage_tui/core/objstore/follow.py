"""A growing object followed: each poll fetches only the bytes appended since the last one.

Object stores cannot append: a trainer's uploader rewrites the whole object (a new ETag each
time), so a new ETag does not say whether the object grew or was replaced. A poll that sees it
longer asks, in one ranged GET, for the last ``tuning.TAIL_CHECK_BYTES`` already read together
with the appended bytes; when those last bytes are unchanged the object grew and the rest is
what was appended, otherwise (or when it is shorter) it was replaced and is read again whole.
An object the rescan's listing shows unchanged (same size and ETag) costs no request at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from triage_tui.core.errors import BadInput
from triage_tui.core.objstore import tuning
from triage_tui.core.objstore.store import ObjectMeta, Store


@dataclass(frozen=True)
class FollowStep:
    """What one poll found: ``data`` to append to what was read before (the whole object on the
    first poll), or, when ``restarted``, the object's whole content (it was replaced: drop what was
    read); ``size``: bytes read so far."""

    data: bytes
    restarted: bool
    size: int
    remaining: int = 0  # bytes the listing showed beyond ``size``: the next poll reads on
    # ``tuning.FOLLOW_MAX_BYTES`` read: the object is read no further, whatever its listed size
    capped: bool = False


def read_range(store: Store, key: str, start: int, end: int, etag: str = "") -> bytes:
    """Bytes [start, end) of an object, in requests of at most ``tuning.RANGE_CHUNK_BYTES``;
    BadInput when the object changed (another ETag) or ended while being read."""
    parts = []
    position = start
    while position < end:
        stop = min(end, position + tuning.RANGE_CHUNK_BYTES)
        data, meta = store.read(key, position, stop)
        if meta is not None and etag and meta.etag and meta.etag != etag:
            raise BadInput(store.url(key), "changed while being read (another upload replaced it)")
        if len(data) != stop - position:
            raise BadInput(store.url(key), f"ended at byte {position + len(data)} while bytes up to {stop} were read")
        parts.append(data)
        position = stop
    return b"".join(parts)


class ObjectFollower:
    """One object of a run, read incrementally; ``poll`` raises BadInput (ObjectMissing when gone)."""

    def __init__(self, store: Store, key: str) -> None:
        self.store = store
        self.key = key
        self.size = 0
        self.etag = ""
        self.mtime = 0.0
        self._tail = b""  # the last TAIL_CHECK_BYTES read

    def _unchanged(self, meta: ObjectMeta) -> bool:
        if meta.size != self.size:
            return False
        return meta.etag == self.etag if meta.etag or self.etag else meta.mtime == self.mtime

    def poll(self, meta: ObjectMeta | None = None, max_bytes: int | None = None) -> FollowStep:
        """Read what changed since the last poll, at most ``max_bytes`` (``tuning.MAX_POLL_BYTES``)
        of it, and never past byte ``tuning.FOLLOW_MAX_BYTES`` of the object (the step's
        ``remaining`` says what is left for the next poll, ``capped`` that it will not be read).
        ``meta``: the object as this rescan's listing showed it (no request when unchanged); None
        asks the store (one HEAD)."""
        if meta is None:
            meta = self.store.head(self.key)
        if self._unchanged(meta):
            return FollowStep(b"", False, self.size, capped=self._capped(meta))
        step = min(tuning.MAX_POLL_BYTES, tuning.MAX_POLL_BYTES if max_bytes is None else max_bytes)
        if step <= 0 or (meta.size >= self.size >= tuning.FOLLOW_MAX_BYTES):  # no byte may be read: no request
            return FollowStep(b"", False, self.size, max(0, meta.size - self.size), self._capped(meta))
        if self.size and meta.size >= self.size:
            start = max(0, self.size - tuning.TAIL_CHECK_BYTES)
            end = min(meta.size, self.size + step, tuning.FOLLOW_MAX_BYTES)
            data, answered = self.store.read(self.key, start, end)
            kept = self.size - start
            if len(data) >= kept and data[:kept] == self._tail[-kept:]:
                return self._took(data[kept:], answered or meta, meta.size, restarted=False)
        # first read, shorter than before, or other bytes where the old end was: read it again
        data = read_range(self.store, self.key, 0, min(meta.size, step, tuning.FOLLOW_MAX_BYTES), meta.etag)
        restarted = self.size > 0 or bool(self.etag)
        self.size, self._tail = 0, b""
        return self._took(data, meta, meta.size, restarted=restarted)

    def _took(self, data: bytes, meta: ObjectMeta, listed: int, *, restarted: bool) -> FollowStep:
        self.size += len(data)
        self.etag, self.mtime = meta.etag, meta.mtime
        self._tail = (self._tail + data[-tuning.TAIL_CHECK_BYTES :])[-tuning.TAIL_CHECK_BYTES :]
        return FollowStep(data, restarted, self.size, max(0, listed - self.size), self._capped(meta))

    def _capped(self, meta: ObjectMeta) -> bool:
        return meta.size > self.size >= tuning.FOLLOW_MAX_BYTES
