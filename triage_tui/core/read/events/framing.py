"""TFRecord framing: a buffer of bytes from a record boundary on, split into whole records.

A record is ``u64 length | u32 masked_crc32c(length) | data[length] | u32 masked_crc32c(data)``,
little-endian (tensorflow/tensorboard tensorboard/data/server/tf_record.rs, quoting TF
record_writer.cc). Every offset whose 8 bytes are a small length (< 256 bytes, what scalar events
are) with a matching length CRC is found with numpy (the zero 32-bit words its seven zero bytes cover, then the
CRC by table lookup); the chain of such headers from the start of the buffer is followed in bulk,
and only breaks in the chain (a long record, damage, a half-written tail) are looked at one record
at a time. Damage is stepped over to the next offset holding a whole record with valid CRCs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from triage_tui.core.read.events import tuning
from triage_tui.core.read.events.crc import data_crc_ok, length_crc, masked_crc32c, u64_at

SMALL = 255  # records up to this long are framed in bulk; longer ones one at a time
# Masked length CRC of every small length.
_SMALL_LEN_CRC = np.array([masked_crc32c(n.to_bytes(8, "little")) for n in range(SMALL + 1)], np.uint32)
_LOWEST_BIT = np.array([0, 0, 1, 0, 2, 0, 1, 0, 3, 0, 1, 0, 2, 0, 1, 0], np.int64)  # of a 4-bit mask
_BITS = np.arange(4, dtype=np.uint8)


@dataclass
class Frames:
    starts: np.ndarray  # header offsets of whole records with a valid length CRC, ascending
    lengths: np.ndarray  # their payload lengths
    consumed: int  # bytes done with: records taken or damage stepped over
    skipped_bytes: int = 0
    corrupt: int = 0  # resyncs
    need: int = 0  # when a valid header waits for its payload: the record's full size
    # The bytes from ``consumed`` on fail the length check and no whole record follows them: damage,
    # or not an event file at all. Not a write in progress: a writer's bytes land in order and the
    # size grows after them, so 12 header bytes inside the file are the writer's whole header
    # (a zero-filled tail, which network filesystems show, is told apart and stays pending).
    damaged_tail: bool = False


def small_headers(buf, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets in buf[:n] of whole records of length <= SMALL whose length CRC matches, ascending.

    A small length is one byte followed by seven zero bytes, which always cover a whole aligned
    32-bit word: the zero words are found in one pass, and for each the four offsets that could
    start such a header before it are checked against its neighbours (the bytes of the word
    before it, then after it, must be zero too). An offset inside a payload that passes the CRC
    anyway (1 in 2**32) is weeded out by following the chain from a known record start.
    """
    count = n // 4
    if count < 4:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    stored = np.ndarray((len(buf) - 3,), "<u4", buffer=buf, strides=(1,))
    byte = np.frombuffer(buf, np.uint8)
    u32 = np.frombuffer(buf, "<u4", count=count)
    starts, lengths = [], []
    block = 2 * tuning.SCAN_WORDS  # 32-bit words per step (SCAN_WORDS counts 64-bit ones): bounds the temporaries
    # Word i (1 <= i <= count - 2, its neighbours read) is zero: a header at 4 * (i - 1) + b
    # needs the top 3 - b bytes of word i - 1 and the low b bytes of word i + 1 zero as well.
    for first in range(1, count - 1, block):
        last = min(first + block, count - 1)
        zero = np.flatnonzero(u32[first:last] == 0) + first
        before, after = u32[zero - 1], u32[zero + 1]
        # Bit b of fits: a header can start at 4 * (zero - 1) + b.
        fits = (before < (1 << 8)).view(np.uint8)
        fits |= ((before < (1 << 16)) & ((after & 0xFF) == 0)).view(np.uint8) << 1
        fits |= ((before < (1 << 24)) & ((after & 0xFFFF) == 0)).view(np.uint8) << 2
        fits |= ((after & 0xFFFFFF) == 0).view(np.uint8) << 3
        if not (fits & (fits - 1)).any():
            # At most one offset per zero word, the usual case (one zero word per record, none in
            # the payloads): its bit's index, where a (words x 4) np.nonzero took a quarter of the scan.
            if not fits.all():
                zero, fits = zero[fits != 0], fits[fits != 0]
            pos = 4 * (zero - 1) + _LOWEST_BIT[fits]
        else:
            row, b = np.nonzero((fits[:, None] >> _BITS) & 1)  # row-major: ascending offsets
            pos = 4 * (zero[row] - 1) + b
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


def _header_ok(buf, pos: int) -> bool:
    """Whether the 8 length bytes at `pos` match the length CRC after them."""
    return masked_crc32c(memoryview(buf)[pos : pos + 8]) == int.from_bytes(buf[pos + 8 : pos + 12], "little")


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
        header_ok = _header_ok(buf, pos)
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
            else:
                frames.damaged_tail = True
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
