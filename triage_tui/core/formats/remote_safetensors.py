"""A safetensors file in a bucket, read by range: its header first, then only the tensors asked for.

The seam is a sparse local file (``objstore.sparse``): the header and the tensors' byte ranges are
fetched into a file as long as the object, so the readers of local files work on it unchanged:
``read_safetensors_header`` checks every offset against the real size, ``safe_open`` maps it and
decodes dtypes and shapes exactly as for a local checkpoint. A second, ranged tensor reader would
have repeated both. ``tensor``/``rows`` fetch what they need before reading it; whatever was never
fetched is a hole of zeros, so a reader given ``path`` must ``ensure`` first what it reads.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import struct
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.safe_torch import (
    MAX_SAFETENSORS_HEADER,
    TensorInfo,
    load_safetensors_rows,
    load_safetensors_tensor,
)
from triage_tui.core.formats.safetensors_header import read_safetensors_header
from triage_tui.core.objstore import tuning
from triage_tui.core.objstore.follow import read_range
from triage_tui.core.objstore.mirror import placeholder_of
from triage_tui.core.objstore.sparse import SparseObject, open_sparse
from triage_tui.core.objstore.store import ObjectMeta, store_for
from triage_tui.core.objstore.url import parse_url

if TYPE_CHECKING:
    import torch


class RemoteSafetensors:
    """``url``'s header read (``tensors``: name -> TensorInfo whose ``file`` is the sparse ``path``)."""

    def __init__(self, url: str, *, meta: ObjectMeta | None = None) -> None:
        parsed = parse_url(url)
        self.url = url
        self.sparse: SparseObject = open_sparse(store_for(parsed), parsed.key, meta=meta)
        self.path: Path = self.sparse.path
        size = self.sparse.meta.size
        if size < 8:
            raise BadInput(url, f"object is {size} bytes long; not a safetensors file")
        self.sparse.ensure([(0, min(size, tuning.HEADER_PROBE_BYTES))])
        with open(self.path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
        if header_len <= MAX_SAFETENSORS_HEADER:  # larger: read_safetensors_header says why
            self.sparse.ensure([(8, 8 + min(header_len, size - 8))])
        try:
            self.tensors: Mapping[str, TensorInfo] = read_safetensors_header(self.path)
        except BadInput as err:
            raise BadInput(url, err.what) from None

    def _info(self, name: str) -> TensorInfo:
        info = self.tensors.get(name)
        if info is None or info.data is None:
            raise BadInput(self.url, f"no tensor {name!r}")
        return info

    def ensure(self, names: list[str]) -> int:
        """Fetch the named tensors' bytes (those not fetched yet); the bytes fetched."""
        return self.sparse.ensure([self._info(name).data for name in names])  # type: ignore[misc]

    def ensure_rows(self, name: str, spans: list[tuple[int, int]]) -> int:
        """Fetch rows [start, stop) of a tensor (its first dimension) for each span; the bytes fetched."""
        info = self._info(name)
        begin, end = info.data  # type: ignore[misc]
        rows = info.shape[0] if info.shape else 1
        row_bytes = (end - begin) // rows if rows else 0
        return self.sparse.ensure(
            [(begin + max(0, a) * row_bytes, begin + min(rows, b) * row_bytes) for a, b in spans if b > a]
        )

    def tensor(self, name: str) -> torch.Tensor:
        """One tensor, fetched if needed, read by safetensors from the sparse file."""
        self.ensure([name])
        try:
            return load_safetensors_tensor(self.path, name)
        except BadInput as err:
            raise BadInput(self.url, err.what) from None

    def rows(self, name: str, spans: list[tuple[int, int]]) -> list[torch.Tensor]:
        """Rows of a tensor for each span, fetching only those rows."""
        self.ensure_rows(name, spans)
        try:
            return load_safetensors_rows(self.path, name, spans)
        except BadInput as err:
            raise BadInput(self.url, err.what) from None

    def close(self) -> None:
        self.sparse.close()


# One RemoteSafetensors per placeholder and ETag, shared by every reader in the process: a check
# reads a checkpoint's header several times, and each ranged fetch is kept in its sparse file. Least
# recently used first, those no reader holds are closed (their sparse files removed) once the ranges
# kept pass tuning.KEPT_RANGES_BYTES: a TUI checking run after run would otherwise keep every
# drafter's lm_head it fetched (~260 MB at 32 000 x 4 096 in bf16) in the temp dir until it exits.
_OPENED: dict[tuple[str, str], RemoteSafetensors] = {}  # in order of last use, oldest first
_READERS: dict[tuple[str, str], int] = {}  # readers inside ``opened_placeholder``, by key
_OPENED_LOCK = threading.Lock()


@contextmanager
def opened_placeholder(path: str | os.PathLike[str]) -> Iterator[RemoteSafetensors | None]:
    """The safetensors object a mirror left ``path`` a placeholder of, its header read by range,
    for the reads inside the ``with`` (it is not closed under them); None when ``path`` is a file of
    its own. BadInput (naming the URL) when the object cannot be read."""
    found = placeholder_of(path)
    if found is None:
        yield None
        return
    store, meta = found
    key = (os.path.abspath(path), meta.etag)
    with _OPENED_LOCK:
        opened = _OPENED.pop(key, None)
        if opened is None:
            opened = RemoteSafetensors(store.url(meta.key), meta=meta)
        _OPENED[key] = opened  # the most recently used last
        _READERS[key] = _READERS.get(key, 0) + 1
    try:
        yield opened
    finally:
        with _OPENED_LOCK:
            _READERS[key] -= 1
            if not _READERS[key]:
                del _READERS[key]
            _close_over_budget()


def _close_over_budget() -> None:
    """Close the least recently used checkpoints no reader holds until the ranges kept fit the budget."""
    kept = sum(remote.sparse.fetched_bytes() for remote in _OPENED.values())
    for key in list(_OPENED):
        if kept <= tuning.KEPT_RANGES_BYTES:
            return
        if key not in _READERS:
            remote = _OPENED.pop(key)
            kept -= remote.sparse.fetched_bytes()
            remote.close()


@contextmanager
def fetched_whole(path: Path) -> Iterator[Path]:
    """``path``, or where a mirror's placeholder of a whole-file format (a pickled ``.bin``/``.pth``,
    which ``torch.load`` maps as a whole) holds the object's bytes, fetched whole first.

    The fetched file lives only inside the ``with``: a load has mapped or read it by then (a mapping
    outlives the file's name), so a TUI that checks run after run holds no pickle it fetched once
    (up to ``tuning.FOLLOW_MAX_BYTES`` each, in the temp dir, often RAM) until it exits; checking the
    run again fetches it again. BadInput (naming the URL) for an object larger than
    ``tuning.FOLLOW_MAX_BYTES``, before any byte or temporary file, and when the fetch fails."""
    found = placeholder_of(path)
    if found is None:
        yield path
        return
    store, meta = found
    if meta.size > tuning.FOLLOW_MAX_BYTES:
        raise BadInput(
            store.url(meta.key),
            f"a pickled checkpoint of {meta.size} bytes, more than the {tuning.FOLLOW_MAX_BYTES} fetched "
            "of one object: not fetched (a safetensors checkpoint is read by range instead)",
        )
    sparse = open_sparse(store, meta.key, meta=meta)
    try:
        sparse.ensure([(0, meta.size)])
        yield sparse.path
    finally:
        sparse.close()


def object_sha256(path: str | os.PathLike[str]) -> str | None:
    """SHA-256 of the bytes of the object a mirror left ``path`` a placeholder of (read by range, a
    chunk at a time, never whole in memory), so ``sha256sum`` of the same file on disk agrees;
    None when ``path`` is a file of its own. BadInput (naming the URL) when it cannot be read."""
    found = placeholder_of(path)
    if found is None:
        return None
    store, meta = found
    digest = hashlib.sha256()
    for start in range(0, meta.size, tuning.RANGE_CHUNK_BYTES):
        digest.update(read_range(store, meta.key, start, min(meta.size, start + tuning.RANGE_CHUNK_BYTES), meta.etag))
    return digest.hexdigest()


@atexit.register
def _close_opened() -> None:
    """Their sparse files live in temporary directories (or the cache, which keeps them)."""
    with _OPENED_LOCK:
        for remote in _OPENED.values():
            remote.close()
