"""The LevelDB log framing of a W&B run file: a buffer of bytes from a record boundary on, split into records.

File format (wandb/wandb ``core/pkg/leveldb/record.go`` and ``livereader.go``, the reader behind
``wandb leet``; before wandb-core, ``wandb/sdk/internal/datastore.py``): a 7-byte header
``":W&B" | u16 magic 0xBEE1 | u8 version 0``, then LevelDB log blocks of 32 KiB counted from the
start of the file. A block holds chunks ``u32 crc32(type byte + data) | u16 length | u8 type | data``
(CRC-32/IEEE, zlib's; type FULL=1, FIRST=2, MIDDLE=3, LAST=4); fewer than 7 bytes left in a block are
padding. A logical record is one FULL chunk, or FIRST MIDDLE* LAST.

Robustness, as for event files (core.read.events): only whole records are taken and a record still
being written (a header or payload not all there, a FIRST without its LAST) waits for the next poll;
a chunk whose CRC, type or length is bad is damage only when a valid chunk follows it, then it is
skipped (counted in ``corrupt``) and framing resyncs at that chunk; otherwise it is a tail
still being written. (W&B's own LiveReader stops at the first bad chunk for good.)
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

WANDB_HEADER = b":W&B\xe1\xbe\x00"  # ident, magic 0xBEE1 (little-endian), version 0
BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in (FULL, FIRST, MIDDLE, LAST)}
_UNPACK = struct.Struct("<IHB").unpack_from


@dataclass
class Framed:
    records: list[bytes]
    consumed: int  # bytes done with, from the read's start (always a record boundary)
    ends: list[int] = field(default_factory=list)  # where each record ends, from the read's start
    corrupt: int = 0
    skipped_bytes: int = 0


def _valid_chunk(buf: bytes, pos: int, n: int, in_block: int) -> tuple[int, int] | None:
    """(type, length) of a whole, CRC-valid chunk at `pos` that fits in its block, else None."""
    if pos + CHUNK_HEADER > n:
        return None
    crc, length, kind = _UNPACK(buf, pos)
    end = pos + CHUNK_HEADER + length
    if kind not in _TYPE_CRC or in_block + CHUNK_HEADER + length > BLOCK or end > n:
        return None
    if zlib.crc32(buf[pos + CHUNK_HEADER : end], _TYPE_CRC[kind]) != crc:
        return None
    return kind, length


def _record_start_after(buf: bytes, pos: int, n: int, base: int) -> int:
    """Offset of the first whole valid FULL or FIRST chunk at or after `pos`, or -1.

    `base` is buf's offset in the file (blocks are counted from the file's start). MIDDLE and
    LAST chunks of a record whose head was damaged are stepped over: they cannot start a record.
    """
    while pos + CHUNK_HEADER <= n:
        in_block = (base + pos) % BLOCK
        if BLOCK - in_block < CHUNK_HEADER:
            pos += BLOCK - in_block
            continue
        found = _valid_chunk(buf, pos, n, in_block)
        if found is not None and found[0] in (FULL, FIRST):
            return pos
        pos += 1
    return -1


def frame(buf: bytes, base: int) -> Framed:
    """Split buf (file bytes from offset `base`, a record boundary) into whole logical records."""
    n = len(buf)
    out = Framed([], 0)
    pos = 0
    while True:
        start = pos
        parts: list[bytes] = []
        outcome = ""
        while not outcome:
            in_block = (base + pos) % BLOCK
            if BLOCK - in_block < CHUNK_HEADER:
                pos += BLOCK - in_block  # a block's trailer: padding
                continue
            if pos + CHUNK_HEADER > n:
                outcome = "wait"  # a header still being written
                break
            _, length, kind = _UNPACK(buf, pos)
            fits = kind in _TYPE_CRC and in_block + CHUNK_HEADER + length <= BLOCK
            if fits and pos + CHUNK_HEADER + length > n:
                outcome = "wait"  # a plausible header whose payload is still being written
                break
            chunk = _valid_chunk(buf, pos, n, in_block)
            if chunk is None:
                outcome = "damage"
                break
            kind, length = chunk
            in_sequence = (kind in (FULL, FIRST)) == (not parts)
            if not in_sequence:
                outcome = "damage"  # e.g. a FIRST whose LAST never came, then a new record
                break
            parts.append(buf[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length])
            pos += CHUNK_HEADER + length
            if kind in (FULL, LAST):
                outcome = "record"
        if outcome == "record":
            out.records.append(parts[0] if len(parts) == 1 else b"".join(parts))
            out.ends.append(pos)
            out.consumed = pos
            continue
        if outcome == "damage":
            # A whole valid record start further on proves these bytes are damage; without one they
            # may be a record still being written (or zeros not yet overwritten): wait for them.
            target = _record_start_after(buf, pos, n, base)
            if target >= 0:
                in_block = (base + pos) % BLOCK
                zeros_to_block_end = target == pos - in_block + BLOCK and not any(buf[pos:target])
                if not (zeros_to_block_end and not parts):
                    out.corrupt += 1  # (zeros up to the next block are unused space, not damage)
                    out.skipped_bytes += target - start
                out.consumed = pos = target
                continue
        out.consumed = start
        return out
