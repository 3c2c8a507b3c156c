"""A streamed safetensors file: header first, then each tensor's bytes written or copied at its offset.

safetensors' own save_file needs every tensor in memory at once; the format is a u64 header
length, a JSON header and the raw bytes (https://github.com/huggingface/safetensors, README
"Format"), so it is written directly, a window at a time, through ``fileio``.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from triage_tui.core import fileio
from triage_tui.core.formats.safe_torch import SAFETENSORS_DTYPES
from triage_tui.core.vocab import VocabMapping

TORCH_DTYPE_TO_SAFETENSORS = {torch_name: (code, size) for code, (torch_name, size) in SAFETENSORS_DTYPES.items()}


@dataclass(frozen=True)
class Entry:
    name: str
    dtype: str  # torch dtype name, as TensorInfo spells it
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * TORCH_DTYPE_TO_SAFETENSORS[self.dtype][1]


class SafetensorsWriter:
    """One output file: header first, then each tensor's bytes at its offset."""

    def __init__(self, path: Path, entries: list[Entry], metadata: dict[str, str]) -> None:
        self.path = path
        # Largest items first keeps every tensor aligned to its element size, as safetensors orders them.
        self.entries = sorted(entries, key=lambda e: (-TORCH_DTYPE_TO_SAFETENSORS[e.dtype][1], e.name))
        self.offsets: dict[str, int] = {}
        position = 0
        for entry in self.entries:
            self.offsets[entry.name] = position
            position += entry.nbytes
        self.data_bytes = position
        self.header = self._header(metadata)
        self.data_start = 8 + len(self.header)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)  # read back for the digest
        self.writeback = fileio.Writeback(self.fd)
        try:
            try:
                # Reserve the blocks now: a full disk fails here, before any data is written.
                os.posix_fallocate(self.fd, 0, self.data_start + self.data_bytes)
            except OSError as err:
                if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
            self.write_header(metadata)
        except BaseException:
            self.close()
            raise

    def _header(self, metadata: dict[str, str]) -> bytes:
        header: dict[str, Any] = {"__metadata__": metadata}
        for entry in self.entries:
            begin = self.offsets[entry.name]
            header[entry.name] = {
                "dtype": TORCH_DTYPE_TO_SAFETENSORS[entry.dtype][0],
                "shape": list(entry.shape),
                "data_offsets": [begin, begin + entry.nbytes],
            }
        raw = json.dumps(header, separators=(",", ":")).encode()
        return raw + b" " * (-len(raw) % 8)

    def write_header(self, metadata: dict[str, str]) -> None:
        """(Re)write the header; a rewrite must keep its length (digests filled into placeholders)."""
        header = self._header(metadata)
        if len(header) != len(self.header):
            raise RuntimeError("safetensors header changed length on rewrite")
        self.header = header
        fileio.write_at(self.fd, len(header).to_bytes(8, "little") + header, 0)

    def write(self, name: str, offset: int, data: np.ndarray) -> None:
        start = self.data_start + self.offsets[name] + offset
        fileio.write_at(self.fd, data, start)
        self.writeback.add(start, data.nbytes)

    def copy(self, name: str, offset: int, source_fd: int, source_offset: int, length: int) -> None:
        start = self.data_start + self.offsets[name] + offset
        fileio.copy_range(source_fd, self.fd, source_offset, start, length)
        self.writeback.add(start, length)

    def close(self) -> None:
        self.writeback.finish()  # it uses the descriptor
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def open_writers(
    temp: Path, files: dict[str, list[Entry]], metadata: dict[str, str], run: VocabMapping
) -> dict[str, SafetensorsWriter]:
    """Every output file, header first (digest placeholders), with the run's d2t/t2d written."""
    writers: dict[str, SafetensorsWriter] = {}
    try:
        for file_name, entries in files.items():
            writers[file_name] = SafetensorsWriter(temp / file_name, entries, metadata)
        for writer in writers.values():
            for entry in writer.entries:
                if entry.name == "d2t":
                    writer.write("d2t", 0, run.d2t().astype(np.int64))
                elif entry.name == "t2d":
                    writer.write("t2d", 0, run.t2d().view(np.uint8))
    except BaseException:
        for writer in writers.values():
            writer.close()
        raise
    return writers


def write_runs(writer: SafetensorsWriter, name: str, positions: np.ndarray, data: np.ndarray, row_bytes: int) -> None:
    """``data[k]`` to row ``positions[k]`` (ascending), one write per run of consecutive rows."""
    breaks = np.flatnonzero(np.diff(positions) != 1) + 1
    for a, b in zip([0, *breaks.tolist()], [*breaks.tolist(), positions.size], strict=True):
        writer.write(name, int(positions[a]) * row_bytes, data[a:b])


def safetensors_metadata(path: Path) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file, from its header (no torch)."""
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
    found = header.get("__metadata__") if isinstance(header, dict) else None
    return dict(found) if isinstance(found, dict) else {}
