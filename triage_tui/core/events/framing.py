"""TFRecord framing: a buffer of bytes from a record boundary on, split into whole records.

A record is ``u64 length | u32 masked_crc32c(length) | data[length] | u32 masked_crc32c(data)``,
little-endian (tensorflow/tensorboard tensorboard/data/server/tf_record.rs, quoting TF
record_writer.cc). Every offset whose 8 bytes are a small length (< 256 bytes, what scalar events
are) with a matching length CRC is found with numpy (a SWAR scan for seven zero bytes, then the
CRC by table lookup); the chain of such headers from the start of the buffer is followed in bulk,
and only breaks in the chain (a long record, damage, a half-written tail) are looked at one record
at a time. Damage is stepped over to the next offset holding a whole record with valid CRCs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from triage_tui.core.events import tuning
from triage_tui.core.events.crc import data_crc_ok, length_crc, masked_crc32c, u64_at

SMALL = 255  # records up to this long are framed in bulk; longer ones one at a time
# Masked length CRC of every small length.
_SMALL_LEN_CRC = np.array([masked_crc32c(n.to_bytes(8, "little")) for n in range(SMALL + 1)], np.uint32)


@dataclass
class Frames:
    starts: np.ndarray  # header offsets of whole records with a valid length CRC, ascending
    lengths: np.ndarray  # their payload lengths
    consumed: int  # bytes done with: records taken or damage stepped over
    skipped_bytes: int = 0
    corrupt: int = 0  # resyncs
    need: int = 0  # when a valid header waits for its payload: the record's full size


# Byte-wise "is zero" flags of a u64, exact (no borrow between bytes): high bit of each byte.
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_GATHER_BITS = np.uint64(0x0102040810204080)  # moves the eight byte flags into the top byte


def _alignment_table() -> np.ndarray:
    """For 16 bytes' zero flags, the offsets a in 0..7 whose bytes a+1..a+7 are all zero."""
    flags = np.arange(65536)
    table = np.zeros(65536, np.uint8)
    for a in range(8):
        need = 0x7F << (a + 1)
        table |= ((flags & need) == need).astype(np.uint8) << a
    return table


_SMALL_HEADER_AT = _alignment_table()


def small_headers(buf, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets in buf[:n] of whole records of length <= SMALL whose length CRC matches, ascending.

    A small length is one byte followed by seven zero bytes: zero flags of every byte are packed
    eight to a word with SWAR arithmetic, and a 64K table turns two words' flags into the offsets
    that can start such a header. An offset inside a payload that passes the CRC anyway
    (1 in 2**32) is weeded out by following the chain from a known record start.
    """
    count = n // 8
    if count < 3:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    stored = np.ndarray((len(buf) - 3,), "<u4", buffer=buf, strides=(1,))
    byte = np.frombuffer(buf, np.uint8)
    starts, lengths = [], []
    for first in range(0, count - 1, tuning.SCAN_WORDS):  # in blocks: the flags would double the memory
        last = min(first + tuning.SCAN_WORDS + 1, count)  # one word of overlap: a header spans two words
        words = np.frombuffer(buf, "<u8", count=last - first, offset=8 * first)
        flags = (words & _LOW7) + _LOW7
        flags |= words
        flags |= _LOW7
        np.invert(flags, out=flags)
        flags >>= np.uint64(7)
        flags *= _GATHER_BITS
        flags >>= np.uint64(56)
        zero = flags.astype(np.uint16)
        at = _SMALL_HEADER_AT[zero[:-1] | (zero[1:] << np.uint16(8))]
        word = np.flatnonzero(at)
        row, offset = np.nonzero(np.unpackbits(at[word][:, None], axis=1, bitorder="little"))
        pos = (word[row] + first) * 8 + offset
        length = byte[pos].astype(np.int64)
        good = (_SMALL_LEN_CRC[length] == stored[pos + 8]) & (pos + 16 + length <= n)
        starts.append(pos[good])
        lengths.append(length[good])
    return np.concatenate(starts), np.concatenate(lengths)


def _all_headers(buf, lo: int, n: int) -> np.ndarray:
    """Every offset in [lo, n) starting a whole record (any length) with a matching length CRC."""
    found = []
    limit = min(n, 0xFFFFFFFF)
    for align in range(8):
        first = lo + align
        count = (n - first) // 8
        if count < 3:
            continue
        words = np.frombuffer(buf, "<u8", count=count, offset=first)
        hit = np.flatnonzero(words[:-1] <= limit)
        length = words[hit].astype(np.int64)
        stored = (words[hit + 1] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        pos = hit * 8 + first
        good = (length_crc(length) == stored) & (pos + 16 + length <= n)
        found.append(pos[good])
    return np.sort(np.concatenate(found)) if found else np.empty(0, np.int64)


def _resync(buf, pos: int, n: int) -> int:
    """First offset after `pos` holding a whole record with valid length and data CRCs, or -1."""
    for start in _all_headers(buf, pos + 1, n).tolist():
        if data_crc_ok(buf, start, u64_at(buf, start)):
            return start
    return -1


def frame(buf, n: int, more: int = 0) -> Frames:
    """Split buf[:n] (bytes from a record boundary on) into whole records; step over damage.

    `more`: bytes the file already holds past buf[:n] (a capped read window).
    """
    cand, cand_len = small_headers(buf, n)
    nxt = cand + 16 + cand_len
    # Chain breaks: candidate i whose record is not followed by candidate i + 1.
    breaks = np.append(np.flatnonzero(nxt[:-1] != cand[1:]), cand.size - 1)
    frames = Frames(np.empty(0, np.int64), np.empty(0, np.int64), 0)
    out_starts: list[np.ndarray] = []
    out_lengths: list[np.ndarray] = []
    single_starts: list[int] = []
    single_lengths: list[int] = []
    pos = 0
    while True:
        i = int(np.searchsorted(cand, pos))
        if i < cand.size and cand[i] == pos:
            if single_starts:
                out_starts.append(np.array(single_starts, np.int64))
                out_lengths.append(np.array(single_lengths, np.int64))
                single_starts, single_lengths = [], []
            j = int(breaks[np.searchsorted(breaks, i)])
            out_starts.append(cand[i : j + 1])
            out_lengths.append(cand_len[i : j + 1])
            pos = int(nxt[j])
            continue
        if pos + 12 > n:
            break  # a header still being written
        length = u64_at(buf, pos)
        header_ok = masked_crc32c(memoryview(buf)[pos : pos + 8]) == int.from_bytes(buf[pos + 8 : pos + 12], "little")
        if header_ok and pos + 16 + length <= n:
            single_starts.append(pos)  # a long record: its length is trustworthy
            single_lengths.append(length)
            pos += 16 + length
            continue
        if header_ok and pos + 16 + length <= n + more:
            frames.need = 16 + length  # the record is on disk, past this read window
            break
        if not header_ok and not np.frombuffer(buf, np.uint8, count=n - pos, offset=pos).any():
            break  # a zero-filled tail: the writer's data has not landed yet
        # A whole record with valid CRCs further on proves the bytes at `pos` are damage; a valid
        # header without one is a record still being written (or a length beyond the file).
        target = _resync(buf, pos, n)
        if target < 0:
            if header_ok:
                frames.need = 16 + length
            break
        frames.skipped_bytes += target - pos
        frames.corrupt += 1
        pos = target
    if single_starts:
        out_starts.append(np.array(single_starts, np.int64))
        out_lengths.append(np.array(single_lengths, np.int64))
    frames.consumed = pos
    if out_starts:
        frames.starts = np.concatenate(out_starts)
        frames.lengths = np.concatenate(out_lengths)
    return frames
