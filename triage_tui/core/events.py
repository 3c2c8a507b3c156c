"""TensorBoard event files: incremental, vectorised, corruption-tolerant reading of scalars.

File format (tensorflow/tensorboard tensorboard/data/server/tf_record.rs, quoting TF
record_writer.cc): a stream of records ``u64 length | u32 masked_crc32c(length) | data[length] |
u32 masked_crc32c(data)``, little-endian, each ``data`` a serialized ``tensorboard.Event``.

Speed comes from not handling records one by one in Python:
- framing: every offset whose 8 bytes are a small length (< 256 bytes, what scalar events are)
  with a matching length CRC is found with numpy (a SWAR scan for seven zero bytes, then the
  CRC by table lookup); the chain of such headers from the start of the buffer is followed in
  bulk, and only breaks in the chain (a long record, damage, a half-written tail) are looked at
  one record at a time;
- decoding: scalar events of one tag from one writer are byte-identical except for the wall_time,
  step and value fields. Records are grouped by length, gathered into a (records x words) matrix,
  and grouped again by their bytes outside those fields (a "template"); one representative per
  template is parsed and cross-checked against ``Event.FromString``, and the three fields of every
  member are read out of the matrix with numpy, its data CRC checked vectorised (see
  ``_LayoutTemplates.data_crcs``). Whatever fits no template goes through ``Event.FromString``
  (upb), data CRC checked.

Robustness: only whole records are consumed, so a half-written tail waits for the next poll; the
length and data CRCs are always checked; a record whose CRC or proto is bad is dropped and reading resumes at
the next offset that holds a whole record with valid CRCs (rustboard marks such a file dead,
TensorBoard's Python loader stops there for good); a zero-filled tail is pending, not corruption; a
file that shrinks or changes inode is read again from the start. A tag that is not valid UTF-8
(tags are proto3 strings, which upb refuses to parse) is kept, its name decoded with
backslashreplace ("loss\\xff").
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

import crc32c
import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2, summary_pb2

from triage_tui.core.errors import BadInput
from triage_tui.core.runs import RACY_MTIME_SECS, is_event_file_name, natural_key
from triage_tui.core.series import RunScalars

__all__ = ["ReadStats", "RunEvents", "read_event_file", "find_event_files", "masked_crc32c"]

_CHUNK = 64 << 20  # bytes read per step; a longer record is read whole
_PAD = 16  # slack after the data in every read buffer: word gathers may run past the last record
_SMALL = 255  # records up to this long are framed in bulk; longer ones one at a time
_SCAN_WORDS = 1 << 19  # 4 MiB of the buffer per step of the header scan
_GROUP_ROWS = 1 << 16  # records of one length decoded together (bounds the temporaries)
_MAX_TEMPLATE_LEN = 1024  # longer records (images, histograms, graphs) take the slow path
_MIN_GROUP = 8  # below this many records a numpy pass costs more than Event.FromString
_MAX_MISSES = 32  # representatives that fit no template before a discovery round gives up
_MAX_ROUNDS = 8  # template discovery rounds per record-length group and read
_DISCOVERY_SAMPLE = 4096  # unknown rows a discovery round draws representatives from

# --- CRC-32C (Castagnoli), masked as in LevelDB / TFRecord ---------------------------------------
_MASK_DELTA = 0xA282EAD8  # tensorflow/tensorboard tensorboard/data/server/masked_crc.rs


def masked_crc32c(data) -> int:
    """Masked CRC-32C of a bytes-like object, as TFRecord stores it."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _crc_tables() -> np.ndarray:
    """Slicing-by-8 tables for CRC-32C (reflected polynomial 0x82F63B78)."""
    t0 = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t0 = np.where(t0 & 1, (t0 >> np.uint32(1)) ^ np.uint32(0x82F63B78), t0 >> np.uint32(1))
    tables = [t0.astype(np.uint32)]
    for _ in range(7):
        prev = tables[-1]
        tables.append((prev >> np.uint32(8)) ^ t0[prev & 0xFF])
    return np.stack(tables)


def _length_crc_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tables giving the CRC of the 8 length bytes of any length < 2**32 in three lookups.

    With bytes 4..7 zero, slicing-by-8 reduces to T7[b0^ff] ^ T6[b1^ff] ^ T5[b2^ff] ^ T4[b3^ff]
    (T_k[0] == 0) and the final inversion, folded here into the 16-bit table.
    """
    t = _crc_tables()
    lo = np.arange(65536, dtype=np.uint32)
    table16 = t[7][(lo & 0xFF) ^ 0xFF] ^ t[6][(lo >> 8) ^ 0xFF] ^ np.uint32(0xFFFFFFFF)
    return table16, t[5][np.arange(256) ^ 0xFF], t[4][np.arange(256) ^ 0xFF]


_LEN_CRC16, _LEN_CRC_B2, _LEN_CRC_B3 = _length_crc_tables()
# Masked length CRC of every small length.
_SMALL_LEN_CRC = np.array([masked_crc32c(n.to_bytes(8, "little")) for n in range(_SMALL + 1)], np.uint32)


def _mask(crc: np.ndarray) -> np.ndarray:
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(_MASK_DELTA)


def _u64_at(buf, pos: int) -> int:
    return int.from_bytes(buf[pos : pos + 8], "little")


def _data_crc_ok(buf, header: int, length: int) -> bool:
    """Whether the record at `header` has a payload matching its data CRC."""
    stored = int.from_bytes(buf[header + 12 + length : header + 16 + length], "little")
    return masked_crc32c(memoryview(buf)[header + 12 : header + 12 + length]) == stored


# --- framing -------------------------------------------------------------------------------------


@dataclass
class _Frames:
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


def _small_headers(buf, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets in buf[:n] of whole records of length <= _SMALL whose length CRC matches, ascending.

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
    for first in range(0, count - 1, _SCAN_WORDS):  # in blocks: the flags would double the memory
        last = min(first + _SCAN_WORDS + 1, count)  # one word of overlap: a header spans two words
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
        crc = _LEN_CRC16[length & 0xFFFF] ^ _LEN_CRC_B2[(length >> 16) & 0xFF] ^ _LEN_CRC_B3[(length >> 24) & 0xFF]
        pos = hit * 8 + first
        good = (_mask(crc) == stored) & (pos + 16 + length <= n)
        found.append(pos[good])
    return np.sort(np.concatenate(found)) if found else np.empty(0, np.int64)


def _resync(buf, pos: int, n: int) -> int:
    """First offset after `pos` holding a whole record with valid length and data CRCs, or -1."""
    for start in _all_headers(buf, pos + 1, n).tolist():
        if _data_crc_ok(buf, start, _u64_at(buf, start)):
            return start
    return -1


def _frame(buf, n: int, more: int = 0) -> _Frames:
    """Split buf[:n] (bytes from a record boundary on) into whole records; step over damage.

    `more`: bytes the file already holds past buf[:n] (a capped read window).
    """
    cand, cand_len = _small_headers(buf, n)
    nxt = cand + 16 + cand_len
    # Chain breaks: candidate i whose record is not followed by candidate i + 1.
    breaks = np.append(np.flatnonzero(nxt[:-1] != cand[1:]), cand.size - 1)
    frames = _Frames(np.empty(0, np.int64), np.empty(0, np.int64), 0)
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
        length = _u64_at(buf, pos)
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


# --- the wire walker: where a scalar event keeps its variable fields ---------------------------

# TensorProto dtype -> raw `tensor_content` decoder (tensorflow/tensorboard
# tensorboard/compat/proto/types.proto); rank-0, so the content is exactly one element.
_CONTENT_KIND = {
    1: "f32",
    2: "f64",
    3: "i32",
    4: "u8",
    5: "i16",
    6: "i8",
    9: "i64",
    10: "bool",
    14: "bf16",
    17: "u16",
    19: "f16",
    22: "u32",
    23: "u64",
}
_KIND_WIDTH = {
    "f32": 4,
    "f64": 8,
    "i32": 4,
    "u8": 1,
    "i16": 2,
    "i8": 1,
    "i64": 8,
    "bool": 1,
    "bf16": 2,
    "u16": 2,
    "f16": 2,
    "u32": 4,
    "u64": 8,
}
# dtype -> (TensorProto field that holds its values when tensor_content is empty, decoder)
# (tensorboard/compat/proto/tensor.proto: half_val holds DT_HALF and DT_BFLOAT16 bit patterns;
# int_val holds DT_INT32, DT_INT16, DT_INT8, DT_UINT8, DT_UINT16).
_VAL_FIELD = {
    1: (5, "f32"),
    2: (6, "f64"),
    19: (13, "v_f16"),
    14: (13, "v_bf16"),
    3: (7, "v_i32"),
    5: (7, "v_i32"),
    6: (7, "v_i32"),
    4: (7, "v_i32"),
    17: (7, "v_i32"),
    9: (10, "v_i64"),
    10: (11, "v_bool"),
    22: (16, "v_u32"),
    23: (17, "v_u64"),
}
_VALUE_SOURCE_FIELDS = frozenset({4, 5, 6, 7, 10, 11, 13, 16, 17})


class _Bad(Exception):
    """Malformed wire data met by the walker."""


def _varint(p: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Bad
        byte = p[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7


def _len_field(p: bytes, pos: int, end: int) -> tuple[int, int]:
    length, pos = _varint(p, pos, end)
    if pos + length > end:
        raise _Bad
    return pos, pos + length


@dataclass(frozen=True)
class _Layout:
    """Offsets of the variable fields of a single-scalar event; all other bytes are its skeleton."""

    length: int
    wall: int  # offset of the f64 wall_time, -1 when absent (0.0)
    step: int  # offset of the step varint, -1 when absent (0)
    step_width: int
    value: int  # offset of the value's bytes
    value_width: int
    kind: str  # value decoder, see _decode_values


@dataclass(frozen=True)
class _Walked:
    layout: _Layout
    tag: bytes
    plugin: str | None


def _plugin_name(metadata: bytes | None, simple_value: bool) -> str | None:
    """The plugin a value belongs to; `simple_value` is a scalar even without metadata (TB data_compat)."""
    name = ""
    if metadata:
        try:
            name = summary_pb2.SummaryMetadata.FromString(metadata).plugin_data.plugin_name
        except DecodeError:
            name = ""
    return name or ("scalars" if simple_value else None)


def _walk(p: bytes) -> _Walked | None:
    """Parse an Event holding exactly one scalar Summary.Value; None for anything else."""
    n = len(p)
    try:
        wall = step = -1
        step_width = 0
        summary: tuple[int, int] | None = None
        pos = 0
        while pos < n:
            key, pos = _varint(p, pos, n)
            if key == 0x09 and wall < 0:  # double wall_time = 1
                if pos + 8 > n:
                    return None
                wall, pos = pos, pos + 8
            elif key == 0x10 and step < 0:  # int64 step = 2
                start = pos
                _, pos = _varint(p, pos, n)
                step, step_width = start, pos - start
            elif key == 0x2A and summary is None:  # Summary summary = 5
                summary = _len_field(p, pos, n)
                pos = summary[1]
            else:
                return None
        if summary is None:
            return None
        start, end = summary
        key, pos = _varint(p, start, end)
        if key != 0x0A:  # repeated Value value = 1: exactly one
            return None
        vstart, vend = _len_field(p, pos, end)
        if vend != end:
            return None
        return _walk_value(p, vstart, vend, n, wall, step, step_width)
    except _Bad:
        return None


def _walk_value(p: bytes, pos: int, end: int, n: int, wall: int, step: int, step_width: int) -> _Walked | None:
    tag: bytes | None = None
    value: tuple[int, int, str] | None = None
    metadata: bytes | None = None
    simple = False
    while pos < end:
        key, pos = _varint(p, pos, end)
        if key == 0x0A and tag is None:  # string tag = 1
            a, pos = _len_field(p, pos, end)
            tag = p[a:pos]
        elif key == 0x15 and value is None:  # float simple_value = 2
            if pos + 4 > end:
                return None
            value, pos, simple = (pos, 4, "f32"), pos + 4, True
        elif key == 0x42 and value is None:  # TensorProto tensor = 8
            a, pos = _len_field(p, pos, end)
            value = _walk_tensor(p, a, pos)
            if value is None:
                return None
        elif key == 0x4A and metadata is None:  # SummaryMetadata metadata = 9
            a, pos = _len_field(p, pos, end)
            metadata = p[a:pos]
        else:
            return None
    if tag is None or value is None:
        return None
    layout = _Layout(n, wall, step, step_width, value[0], value[1], value[2])
    return _Walked(layout, tag, _plugin_name(metadata, simple))


def _walk_tensor(p: bytes, pos: int, end: int) -> tuple[int, int, str] | None:
    """Span and decoder of a rank-0 numeric tensor's single value; None for anything else."""
    dtype = 0
    seen: set[int] = set()
    source: tuple[int, int, int] | None = None
    while pos < end:
        key, pos = _varint(p, pos, end)
        number, wire = key >> 3, key & 7
        if number in seen:
            return None
        seen.add(number)
        if key == 0x08:  # DataType dtype = 1
            dtype, pos = _varint(p, pos, end)
        elif key == 0x12:  # TensorShapeProto tensor_shape = 2: rank 0 means empty
            a, pos = _len_field(p, pos, end)
            if pos != a:
                return None
        elif wire == 2 and number in _VALUE_SOURCE_FIELDS and source is None:
            a, pos = _len_field(p, pos, end)
            source = (number, a, pos)
        else:
            return None
    if source is None:
        return None
    number, a, b = source
    if number == 4:  # bytes tensor_content
        kind = _CONTENT_KIND.get(dtype)
        return (a, b - a, kind) if kind is not None and _KIND_WIDTH[kind] == b - a else None
    expected = _VAL_FIELD.get(dtype)
    if expected is None or expected[0] != number:
        return None
    kind = expected[1]
    if kind.startswith("v_"):
        _, q = _varint(p, a, b)  # packed varints: exactly one element
        return (a, b - a, kind) if q == b else None
    return (a, b - a, kind) if _KIND_WIDTH[kind] == b - a else None


# --- vectorised field extraction -------------------------------------------------------------
#
# A group of records of one payload length L is a (records, ceil(L/8)) uint64 matrix, gathered
# record by record (one cache miss a record); byte j of a row is payload byte j.

_FIXED_DTYPE = {
    "f32": "<f4",
    "f64": "<f8",
    "f16": "<f2",
    "i8": "i1",
    "u8": "u1",
    "i16": "<i2",
    "u16": "<u2",
    "i32": "<i4",
    "u32": "<u4",
    "i64": "<i8",
    "u64": "<u8",
}


def _column(rows: np.ndarray, offset: int, dtype: str) -> np.ndarray:
    """Bytes offset.. of every row of a C-contiguous uint8 matrix, read as `dtype`."""
    return np.ndarray((rows.shape[0],), dtype, buffer=rows, offset=offset, strides=(rows.strides[0],))


def _payload_rows(payload) -> np.ndarray:
    """One payload as a 1-row uint8 matrix padded to whole words."""
    row = np.zeros(-(-len(payload) // 8) * 8 or 8, np.uint8)
    row[: len(payload)] = np.frombuffer(payload, np.uint8)
    return row.reshape(1, -1)


def _varints(rows: np.ndarray, offset: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Decode `width`-byte varints at `offset`; also whether each really is that wide."""
    raw = np.zeros(rows.shape[0], np.uint64)
    ok = np.ones(rows.shape[0], bool)
    for i in range(width):
        byte = rows[:, offset + i]
        raw |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * i)
        if i < width - 1:
            ok &= byte >= 0x80
        else:
            ok &= byte <= (0x01 if width == 10 else 0x7F)
    return raw, ok


def _decode_values(rows: np.ndarray, offset: int, width: int, kind: str) -> tuple[np.ndarray, np.ndarray | None]:
    """float64 values of `kind` at `offset`, and for varints which rows really had that shape."""
    if kind in _FIXED_DTYPE:
        return _column(rows, offset, _FIXED_DTYPE[kind]).astype(np.float64), None
    if kind == "bool":
        return (rows[:, offset] != 0).astype(np.float64), None
    if kind == "bf16":
        bits = _column(rows, offset, "<u2").astype(np.uint32) << np.uint32(16)
        return bits.view(np.float32).astype(np.float64), None
    raw, ok = _varints(rows, offset, width)
    if kind == "v_i32":  # protobuf int32: the low 32 bits, signed
        values = (raw & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32).astype(np.float64)
    elif kind == "v_u32":
        values = (raw & np.uint64(0xFFFFFFFF)).astype(np.float64)
    elif kind == "v_i64":
        values = raw.view(np.int64).astype(np.float64)
    elif kind == "v_u64":
        values = raw.astype(np.float64)
    elif kind == "v_bool":
        values = (raw != 0).astype(np.float64)
    elif kind == "v_f16":
        values = (raw & np.uint64(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float64)
    else:  # v_bf16
        bits = (raw & np.uint64(0xFFFF)).astype(np.uint32) << np.uint32(16)
        values = bits.view(np.float32).astype(np.float64)
    return values, ok


def _decode_layout(rows: np.ndarray, layout: _Layout):
    """(wall, step, value, ok) of payload rows (uint8 matrix) sharing `layout`."""
    count = rows.shape[0]
    wall = _column(rows, layout.wall, "<f8").copy() if layout.wall >= 0 else np.zeros(count)
    ok = np.ones(count, bool)
    if layout.step >= 0:
        raw, step_ok = _varints(rows, layout.step, layout.step_width)
        step = raw.view(np.int64)
        ok &= step_ok
    else:
        step = np.zeros(count, np.int64)
    value, value_ok = _decode_values(rows, layout.value, layout.value_width, layout.kind)
    if value_ok is not None:
        ok &= value_ok
    return wall, step, value, ok


# --- templates: one skeleton per (tag, writer, byte layout) ----------------------------------

_HASH_MULT = [
    0x9E3779B97F4A7C15,
    0xC2B2AE3D27D4EB4F,
    0x165667B19E3779F9,
    0xD6E8FEB86659FD93,
    0xFF51AFD7ED558CCD,
    0xC4CEB9FE1A85EC53,
    0x94D049BB133111EB,
    0xBF58476D1CE4E5B9,
]


@functools.cache
def _byte_crc_table(distance: int) -> np.ndarray:
    """What a byte b adds to a payload's CRC-32C when `distance` bytes follow it (256 entries).

    CRC-32C is affine over GF(2), so for payloads of one length crc(a ^ b) = crc(a) ^ crc(b) ^
    crc(zeros), and a byte's share depends only on how many bytes follow it.
    """
    zero = crc32c.crc32c(bytes(distance + 1))
    bit_crcs = np.array([crc32c.crc32c(bytes([1 << bit]) + bytes(distance)) ^ zero for bit in range(8)], np.uint32)
    bits = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(bool)  # (byte value, bit)
    return np.bitwise_xor.reduce(np.where(bits, bit_crcs, np.uint32(0)), axis=1)


@dataclass
class _Template:
    tag_id: int
    plugin: str | None


class _LayoutTemplates:
    """All templates sharing one layout: their skeleton words, for exact matching."""

    def __init__(self, layout: _Layout) -> None:
        self.layout = layout
        width = -(-layout.length // 8) * 8
        skeleton = np.zeros(width, np.uint8)
        skeleton[: layout.length] = 0xFF
        if layout.wall >= 0:
            skeleton[layout.wall : layout.wall + 8] = 0
        if layout.step >= 0:
            skeleton[layout.step : layout.step + layout.step_width] = 0
        skeleton[layout.value : layout.value + layout.value_width] = 0
        self.masks = skeleton.view("<u8")  # bytes past the payload (its CRC, the next record) too
        variable = np.flatnonzero(skeleton[: layout.length] == 0).tolist()
        self.crc_tables = [(p, _byte_crc_table(layout.length - 1 - p)) for p in variable]
        self.templates: list[_Template] = []
        self.skeletons = np.empty((0, self.masks.size), np.uint64)  # one row per template
        self.sorted_hashes = np.empty(0, np.uint64)
        self.sorted_ids = np.empty(0, np.int64)
        self._tag_ids = np.empty(0, np.int64)
        self._skeleton_crcs = np.empty(0, np.uint32)  # CRC-32C of each template's skeleton bytes
        self._pending: list[tuple[np.ndarray, int]] = []

    def words(self, matrix: np.ndarray) -> np.ndarray:
        return matrix & self.masks

    @staticmethod
    def hashes(words: np.ndarray) -> np.ndarray:
        h = np.zeros(words.shape[0], np.uint64)
        for j in range(words.shape[1]):
            h += words[:, j] * np.uint64(_HASH_MULT[j % len(_HASH_MULT)])
            h ^= h >> np.uint64(29)
        return h

    def lookup(self, words: np.ndarray, hashes: np.ndarray) -> np.ndarray:
        """Template index per row (-1: none), matched on the exact skeleton bytes."""
        self._sync()
        if not self.templates:
            return np.full(hashes.size, -1, np.int64)
        at = np.minimum(np.searchsorted(self.sorted_hashes, hashes), self.sorted_hashes.size - 1)
        ids = np.where(self.sorted_hashes[at] == hashes, self.sorted_ids[at], -1)
        hit = np.flatnonzero(ids >= 0)
        if hit.size:
            expected = self.skeletons[ids[hit]]
            found = words[hit]
            differ = expected[:, 0] ^ found[:, 0]
            for j in range(1, found.shape[1]):
                differ |= expected[:, j] ^ found[:, j]
            ids[hit[differ != 0]] = -1
        return ids

    def add(self, template: _Template, words: np.ndarray, h: int) -> None:
        self.templates.append(template)
        self._pending.append((words, h))

    def tag_ids(self) -> np.ndarray:
        self._sync()
        return self._tag_ids

    def _sync(self) -> None:
        # New templates are folded in once per discovery round, not once each (10 000 tags).
        if not self._pending:
            return
        first = self.skeletons.shape[0]
        self.skeletons = np.concatenate([self.skeletons, np.stack([w for w, _ in self._pending])])
        hashes = np.concatenate([self.sorted_hashes, np.array([h for _, h in self._pending], np.uint64)])
        ids = np.concatenate([self.sorted_ids, np.arange(first, first + len(self._pending))])
        order = np.argsort(hashes, kind="stable")
        self.sorted_hashes, self.sorted_ids = hashes[order], ids[order]
        self._tag_ids = np.array([t.tag_id for t in self.templates], np.int64)
        length = self.layout.length
        crcs = [crc32c.crc32c(w.view(np.uint8)[:length].tobytes()) for w, _ in self._pending]
        self._skeleton_crcs = np.concatenate([self._skeleton_crcs, np.array(crcs, np.uint32)])
        self._pending = []

    def data_crcs(self, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Masked data CRC of every payload row (uint8 matrix) matching template `ids`, vectorised:
        the skeleton's CRC xor one table lookup per variable byte (about 14 for a scalar)."""
        self._sync()
        crc = self._skeleton_crcs[ids]
        for position, table in self.crc_tables:
            np.bitwise_xor(crc, np.take(table, rows[:, position]), out=crc)
        return _mask(crc)


# --- one buffer of whole records -> points ------------------------------------------------------

_VALUE_BITS = 16  # ordering key of a point: record index << 16 | index of the value in its Summary


@dataclass
class _Chunk:
    """What the records of one read produced, before restart rules and storage."""

    keys: list[np.ndarray] = field(default_factory=list)
    tag_ids: list[np.ndarray] = field(default_factory=list)
    steps: list[np.ndarray] = field(default_factory=list)
    walls: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    slow_points: list[tuple[int, int, int, float, float]] = field(default_factory=list)
    starts: list[tuple[int, int]] = field(default_factory=list)  # SessionLog.START: (key, step)
    versions: list[tuple[int, float]] = field(default_factory=list)  # file_version: (key, version)
    first_summary: int | None = None  # key of the first record carrying a summary
    first_plugin: dict[int, tuple[int, str | None]] = field(default_factory=dict)  # tag id -> (key, plugin)
    corrupt: int = 0
    slow: int = 0  # records that went through Event.FromString one at a time

    def saw_summary(self, key: int) -> None:
        if self.first_summary is None or key < self.first_summary:
            self.first_summary = key

    def saw_tag(self, tag_id: int, key: int, plugin: str | None) -> None:
        known = self.first_plugin.get(tag_id)
        if known is None or key < known[0]:
            self.first_plugin[tag_id] = (key, plugin)

    def collect_slow_points(self) -> None:
        """Points decoded one record at a time join the numpy columns in one go."""
        if not self.slow_points:
            return
        keys, tag_ids, steps, walls, values = zip(*self.slow_points, strict=True)
        self.keys.append(np.array(keys, np.int64))
        self.tag_ids.append(np.array(tag_ids, np.int64))
        self.steps.append(np.array(steps, np.int64))
        self.walls.append(np.array(walls, np.float64))
        self.values.append(np.array(values, np.float64))
        self.slow_points = []


def _parse_file_version(text: str) -> float:
    # tensorflow/tensorboard tensorboard/backend/event_processing/event_util.py: ParseFileVersion
    try:
        return float(text.split(":")[-1])
    except ValueError:
        return -1.0


def _proto_scalar(value: summary_pb2.Summary.Value) -> float | None:
    """The scalar a decoded Summary.Value holds: simple_value or a rank-0 numeric tensor."""
    which = value.WhichOneof("value")
    if which == "simple_value":
        return value.simple_value
    if which != "tensor":
        return None
    tensor = value.tensor
    if tensor.tensor_shape.dim or tensor.tensor_shape.unknown_rank:
        return None
    dtype = tensor.dtype
    content = tensor.tensor_content
    if content:  # tensor_content wins over the *_val fields (tensorboard.util.tensor_util.make_ndarray)
        kind = _CONTENT_KIND.get(dtype)
        if kind is None or len(content) != _KIND_WIDTH[kind]:
            return None
        return float(_decode_values(_payload_rows(content), 0, len(content), kind)[0][0])
    source = _VAL_FIELD.get(dtype)
    if source is None:
        return None
    vals = getattr(tensor, tensor.DESCRIPTOR.fields_by_number[source[0]].name)
    if len(vals) != 1:
        return None
    raw, kind = vals[0], source[1]
    if kind == "v_f16":
        return float(np.array([raw & 0xFFFF], np.uint16).view(np.float16)[0])
    if kind == "v_bf16":
        return float((np.array([raw & 0xFFFF], np.uint32) << np.uint32(16)).view(np.float32)[0])
    return float(raw)


def _same_float(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)


def _metadata_bytes(value: summary_pb2.Summary.Value) -> bytes | None:
    return value.metadata.SerializeToString() if value.HasField("metadata") else None


class _Decoder:
    """Turns whole records into points; keeps the templates it learns for later reads."""

    def __init__(self) -> None:
        self.layouts: dict[int, list[_LayoutTemplates]] = {}
        self.tags: list[str] = []
        self.tag_index: dict[str, int] = {}

    def tag_id(self, tag: str) -> int:
        found = self.tag_index.get(tag)
        if found is None:
            found = self.tag_index[tag] = len(self.tags)
            self.tags.append(tag)
        return found

    def decode(self, buf, frames: _Frames) -> _Chunk:
        chunk = _Chunk()
        starts = frames.starts + 12  # payload offsets
        lengths = frames.lengths
        slow: list[np.ndarray] = []
        fits = (lengths >= 16) & (lengths <= _MAX_TEMPLATE_LEN)
        slow.append(np.flatnonzero(~fits))
        candidates = np.flatnonzero(fits)
        if candidates.size:
            u64 = np.ndarray((len(buf) - 7,), "<u8", buffer=buf, strides=(1,))
            by_length = candidates[np.argsort(lengths[candidates].astype(np.uint16), kind="stable")]
            edges = (np.flatnonzero(np.diff(lengths[by_length])) + 1).tolist()
            for group in np.split(by_length, edges):
                if group.size < _MIN_GROUP:
                    slow.append(group)
                    continue
                length = int(lengths[group[0]])
                offsets = np.arange(0, 8 * -(-length // 8), 8)
                for first in range(0, group.size, _GROUP_ROWS):
                    part = group[first : first + _GROUP_ROWS]
                    matrix = u64[starts[part][:, None] + offsets]  # record by record: one cache miss each
                    slow.append(self._templated(buf, starts, part, matrix, length, chunk))
        for r in np.sort(np.concatenate(slow)).tolist():
            self._slow(buf, int(starts[r]), int(lengths[r]), r, chunk)
        chunk.collect_slow_points()
        return chunk

    def _templated(self, buf, starts, recs, matrix, length, chunk) -> np.ndarray:
        """Records of one payload length: known templates, then discovery. Returns the rest."""
        for lt in self.layouts.get(length, []):
            words = lt.words(matrix)
            ids = lt.lookup(words, lt.hashes(words))
            hit = ids >= 0
            if hit.any():
                self._take(buf, starts, lt, recs[hit], matrix[hit], ids[hit], chunk)
                recs, matrix = recs[~hit], matrix[~hit]
            if recs.size == 0:
                return recs
        leftovers: list[np.ndarray] = []
        for _ in range(_MAX_ROUNDS):
            if recs.size == 0:
                break
            start = int(starts[recs[0]])
            walked = _walk(bytes(buf[start : start + length]))
            keep = np.ones(recs.size, bool)
            if walked is not None:
                lt = self._layout(walked.layout)
                words = lt.words(matrix)
                hashes = lt.hashes(words)
                ids = lt.lookup(words, hashes)
                unknown = np.flatnonzero(ids < 0)
                if unknown.size:
                    keep[self._discover(buf, starts, recs, lt, words, hashes, unknown, walked, chunk)] = False
                    ids[unknown] = lt.lookup(words[unknown], hashes[unknown])
                hit = (ids >= 0) & keep
                if hit.any():
                    self._take(buf, starts, lt, recs[hit], matrix[hit], ids[hit], chunk)
                    keep &= ~hit
            if keep[0]:
                leftovers.append(recs[:1])  # fits no template: Event.FromString decides
                keep[0] = False
            recs, matrix = recs[keep], matrix[keep]
        leftovers.append(recs)
        return np.concatenate(leftovers)

    def _layout(self, layout: _Layout) -> _LayoutTemplates:
        known = self.layouts.setdefault(layout.length, [])
        for lt in known:
            if lt.layout == layout:
                return lt
        lt = _LayoutTemplates(layout)
        known.append(lt)
        return lt

    def _discover(self, buf, starts, recs, lt, words, hashes, unknown, walked, chunk) -> np.ndarray:
        """New templates from rows with identical skeletons; returns the rows found corrupt.

        Representatives come from a sample of the unknown rows, biggest groups first: rows of
        another layout hash to scattered values and run out the miss budget quickly.
        """
        length = lt.layout.length
        sample = unknown[:_DISCOVERY_SAMPLE]
        _, first, counts = np.unique(hashes[sample], return_index=True, return_counts=True)
        reps = sample[first[np.argsort(-counts, kind="stable")]].tolist()
        if sample[0] == 0:  # the walked record's group goes first
            reps.remove(0)
            reps.insert(0, 0)
        dropped = []
        misses = 0
        for row in reps:
            start = int(starts[recs[row]])
            payload = bytes(buf[start : start + length])
            found = walked if row == 0 else _walk(payload)
            if found is None or found.layout != lt.layout:
                misses += 1
                if misses >= _MAX_MISSES:
                    break
                continue
            misses = 0
            if not _data_crc_ok(buf, start - 12, length):
                chunk.corrupt += 1
                dropped.append(row)
                continue
            tag = found.tag.decode("utf-8", "backslashreplace")
            if self._agrees(payload, found, tag):
                lt.add(_Template(self.tag_id(tag), found.plugin), words[row], int(hashes[row]))
        return np.array(dropped, np.int64)

    @staticmethod
    def _agrees(payload: bytes, walked: _Walked, tag: str) -> bool:
        """Cross-check a new template against upb on its representative record."""
        try:
            event = event_pb2.Event.FromString(payload)
        except DecodeError:
            return True  # e.g. a tag that is not UTF-8: upb refuses it, the walker decodes it
        values = event.summary.value
        if len(values) != 1 or values[0].tag != tag:
            return False
        expected = _proto_scalar(values[0])
        if expected is None:
            return False
        wall, step, value, ok = _decode_layout(_payload_rows(payload), walked.layout)
        plugin = _plugin_name(_metadata_bytes(values[0]), values[0].WhichOneof("value") == "simple_value")
        return (
            bool(ok[0])
            and _same_float(float(wall[0]), event.wall_time)
            and int(step[0]) == event.step
            and _same_float(float(value[0]), expected)
            and plugin == walked.plugin
        )

    def _take(self, buf, starts, lt, recs, matrix, ids, chunk) -> None:
        rows = np.ascontiguousarray(matrix).view(np.uint8)
        wall, step, value, ok = _decode_layout(rows, lt.layout)
        if not ok.all():
            # A varint of another width in a variable field: another layout after all; upb decides.
            for r in recs[~ok].tolist():
                self._slow(buf, int(starts[r]), lt.layout.length, r, chunk)
            recs, ids, wall, step, value, rows = recs[ok], ids[ok], wall[ok], step[ok], value[ok], rows[ok]
        if recs.size:
            # Every record's data CRC: a flipped bit in a value or step field fits the template
            # and would otherwise be read as a silently wrong number.
            stored_at = starts[recs] + lt.layout.length
            stored = np.ndarray((len(buf) - 3,), "<u4", buffer=buf, strides=(1,))[stored_at]
            good = lt.data_crcs(rows, ids) == stored
            if not good.all():
                chunk.corrupt += int(good.size - good.sum())
                recs, ids, wall, step, value = recs[good], ids[good], wall[good], step[good], value[good]
        if recs.size == 0:
            return
        keys = recs.astype(np.int64) << _VALUE_BITS
        chunk.keys.append(keys)
        chunk.tag_ids.append(lt.tag_ids()[ids])
        chunk.steps.append(step)
        chunk.walls.append(wall)
        chunk.values.append(value)
        chunk.saw_summary(int(keys.min()))
        present, first = np.unique(ids, return_index=True)
        for template, at in zip(present.tolist(), first.tolist(), strict=True):
            t = lt.templates[template]
            chunk.saw_tag(t.tag_id, int(keys[at]), t.plugin)

    def _slow(self, buf, start: int, length: int, rec: int, chunk: _Chunk) -> None:
        """One record through upb (or the walker when upb refuses it); data CRC always checked."""
        chunk.slow += 1
        if not _data_crc_ok(buf, start - 12, length):
            chunk.corrupt += 1
            return
        payload = bytes(buf[start : start + length])
        key = rec << _VALUE_BITS
        try:
            event = event_pb2.Event.FromString(payload)
        except DecodeError:
            walked = _walk(payload)  # e.g. a tag that is not UTF-8 (tags are proto3 strings)
            if walked is None:
                chunk.corrupt += 1
                return
            wall, step, value, ok = _decode_layout(_payload_rows(payload), walked.layout)
            if not ok[0]:
                chunk.corrupt += 1
                return
            chunk.saw_summary(key)
            tag = walked.tag.decode("utf-8", "backslashreplace")
            self._point(chunk, key, tag, walked.plugin, int(step[0]), float(wall[0]), float(value[0]))
            return
        which = event.WhichOneof("what")
        if which == "summary":
            chunk.saw_summary(key)
            for index, value in enumerate(event.summary.value):
                scalar = _proto_scalar(value)
                if scalar is None:
                    continue
                plugin = _plugin_name(_metadata_bytes(value), value.WhichOneof("value") == "simple_value")
                point_key = key + min(index, (1 << _VALUE_BITS) - 1)
                self._point(chunk, point_key, value.tag, plugin, event.step, event.wall_time, scalar)
        elif which == "file_version":
            chunk.versions.append((key, _parse_file_version(event.file_version)))
        elif which == "session_log" and event.session_log.status == event_pb2.SessionLog.START:
            chunk.starts.append((key, event.step))

    def _point(
        self, chunk: _Chunk, key: int, tag: str, plugin: str | None, step: int, wall: float, value: float
    ) -> None:
        tag_id = self.tag_id(tag)
        chunk.saw_tag(tag_id, key, plugin)
        chunk.slow_points.append((key, tag_id, step, wall, value))


# --- runs: all event files of one run, polled ----------------------------------------------------


@dataclass
class ReadStats:
    """What one poll (or, in RunEvents.totals, every poll so far) did."""

    files: int = 0  # event files looked at
    bytes_read: int = 0
    records: int = 0  # whole records consumed
    scalars: int = 0  # scalar points decoded (before restart rules)
    skipped_bytes: int = 0  # damaged bytes stepped over to resync
    corrupt_records: int = 0  # records dropped: bad CRC, undecodable, or a resync
    resets: int = 0  # times the run was re-read from scratch (a file shrank or was replaced)
    pending_bytes: int = 0  # bytes at file ends not yet a whole record (half-written, zero-filled)
    dropped_points: int = 0  # points with a non-finite wall_time (rustboard rejects those too)
    slow_records: int = 0  # records parsed one by one by Event.FromString (no template fitted)
    unreadable_files: int = 0  # files that exist but could not be read (permissions, not a file)

    def add(self, other: ReadStats) -> None:
        for f in fields(self):
            if f.name not in ("files", "pending_bytes", "unreadable_files"):
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        self.files = other.files
        self.pending_bytes = other.pending_bytes
        self.unreadable_files = other.unreadable_files


def any_file_replaced(states: Iterable) -> bool:
    """Whether a file already read (``path``, ``dev``, ``ino``, ``offset``) was replaced or shrank.

    Then the run is read again from the start (RunEvents, WandbHistory). A file that is gone keeps
    what it gave (as rustboard does).
    """
    for state in states:
        if state.dev < 0:
            continue
        try:
            st = os.stat(state.path)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) != (state.dev, state.ino) or st.st_size < state.offset:
            return True
    return False


def open_nonblocking(path, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)


_ZERO_SCAN = 16 << 20  # bytes looked at per step when skipping a run of zeros


def _next_nonzero(fd: int, start: int, size: int) -> int | None:
    """Offset of the first non-zero byte in [start, size), or None; holes of a sparse file cost nothing."""
    pos = start
    while pos < size:
        try:
            pos = os.lseek(fd, pos, os.SEEK_DATA)  # skips a hole (all zeros) without reading it
        except OSError as err:
            if err.errno == errno.ENXIO:
                return None  # only a hole until the end
        if pos >= size:
            return None
        chunk = np.frombuffer(os.pread(fd, min(_ZERO_SCAN, size - pos), pos), np.uint8)
        if not chunk.size:
            return None
        nonzero = chunk != 0
        if nonzero.any():
            return pos + int(nonzero.argmax())
        pos += chunk.size
    return None


def _read_into(handle, view: memoryview) -> int:
    """readinto until `view` is full or the file ends (one read() returns at most ~2 GiB)."""
    n = 0
    while n < len(view):
        got = handle.readinto(view[n:])
        if not got:
            break
        n += got
    return n


def _hole_at(fd: int, pos: int, size: int) -> int:
    """Where the next hole of a sparse file starts at or after `pos` (`size` when none, or unknown)."""
    try:
        return min(os.lseek(fd, pos, os.SEEK_HOLE), size)
    except OSError:
        return size


@dataclass
class _FileState:
    path: Path
    dev: int = -1
    ino: int = -1
    offset: int = 0  # everything before it is consumed; it is always a record boundary
    file_version: float | None = None
    seen_start: bool = False
    seen_summary: bool = False
    prefix: str = ""  # "<subdir>/" of series names from this file (series_prefixes)
    quiet: tuple[int, int] | None = None  # (size, mtime_ns) when a poll found bytes it could not take yet


# A big read grows each series' arrays several times; glibc keeps the freed smaller arrays in its
# heap, so RSS ends ~38 B/point while the series hold 24 (benchmarks/RESULTS-scale.md; 24.4 B/point
# after malloc_trim). Trimming after reads of this size costs a few ms and gives them back.
_TRIM_AFTER_BYTES = 16 << 20


def _return_freed_heap() -> None:
    """Hand freed heap pages back to the OS (glibc only; a no-op elsewhere)."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Callable[[int], int] | Literal[False] | None = None  # None: not looked up yet; False: no glibc


class RunEvents:
    """Incremental reader for all event files of one run; `scalars` is updated in place."""

    def __init__(self) -> None:
        self.scalars = RunScalars()
        self.totals = ReadStats()
        self._files: dict[Path, _FileState] = {}
        self._decoder = _Decoder()
        self._plugins: dict[int, str | None] = {}  # tag id -> plugin of its first occurrence
        self.damaged: dict[Path, int] = {}  # file -> damaged records dropped from it, every poll so far
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        # A run read in another process comes back pickled (core/parallel_read.py); the lock stays.
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def unread_bytes(self) -> int:
        """Bytes past what was read in the run's files (a stat per file; a replaced file counts whole)."""
        total = 0
        with self._lock:
            for state in self._files.values():
                try:
                    st = os.stat(state.path)
                except OSError:
                    continue
                same = (st.st_dev, st.st_ino) == (state.dev, state.ino)
                total += max(st.st_size - (state.offset if same else 0), 0)
        return total

    def set_files(self, paths: Iterable[Path]) -> None:
        """The run's event files. Points already read from a file that leaves the set are kept."""
        with self._lock:
            # Discovery's order (natural: ...tfevents.<t>.<host>.<pid>.9 before .13), so files of
            # one second are read in the order the writer created them.
            wanted = sorted({Path(p) for p in paths}, key=lambda p: (natural_key(p.name), str(p)))
            prefixes = series_prefixes(wanted)
            files = {}
            renamed = False
            for path in wanted:
                state = self._files.get(path) or _FileState(path, prefix=prefixes[path])
                renamed |= state.prefix != prefixes[path]
                files[path] = state
            self._files = files
            if renamed:
                # A log dir above a file appeared (its writer started later): its series change
                # names, so the run is read again under the new ones.
                for state in files.values():
                    state.prefix = prefixes[state.path]
                self._forget_all()

    def poll(self) -> ReadStats:
        """Stat every file and read only the bytes appended since the last poll."""
        with self._lock:
            stats = ReadStats(files=len(self._files))
            if self._any_replaced():
                self._forget_all()
                stats.resets += 1
            for state in self._files.values():
                self._read(state, stats)
            if stats.scalars or stats.resets:
                self.scalars.version += 1
            if stats.bytes_read >= _TRIM_AFTER_BYTES:
                _return_freed_heap()
            self.totals.add(stats)
            return stats

    def _any_replaced(self) -> bool:
        return any_file_replaced(self._files.values())

    def _forget_all(self) -> None:
        # Simplest correct answer to a rewritten file: every file of the run is read again, in order.
        self.scalars.clear()
        self._plugins = {}
        self._files = {p: _FileState(p, prefix=state.prefix) for p, state in self._files.items()}

    def _read(self, state: _FileState, stats: ReadStats) -> None:
        corrupt_before = stats.corrupt_records
        try:
            # Reopened every poll: NFS close-to-open revalidation. O_NONBLOCK: opening a FIFO
            # named like an event file must not hang the poll.
            # Unbuffered: the hole probes move the descriptor's offset, which a buffered reader
            # would not notice (its seek() can stay within its buffer).
            handle = open(state.path, "rb", buffering=0, opener=open_nonblocking)  # noqa: SIM115 - `with handle` below
        except FileNotFoundError:
            return  # gone (or not there yet): keep what it gave
        except OSError:
            stats.unreadable_files += 1
            return
        with handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode):  # a FIFO would block the reader forever
                stats.unreadable_files += 1
                return
            if state.dev < 0:
                state.dev, state.ino = st.st_dev, st.st_ino
            elif (st.st_dev, st.st_ino) != (state.dev, state.ino):
                return  # replaced since the stat: the next poll starts the run over
            size = st.st_size
            if state.quiet == (size, st.st_mtime_ns):
                # Nothing written since a poll that could take nothing (a half-written record, a
                # zero-filled or sparse tail): reading the same bytes again would find the same.
                stats.pending_bytes += size - state.offset
                return
            window = _CHUNK
            base = state.offset  # where this read starts: past a run of zero bytes, beyond offset
            while base < size:
                remaining = size - base
                # Up to the next hole of a sparse file: what lies beyond it starts with zeros.
                data_end = _hole_at(handle.fileno(), base, size)
                if data_end == base:
                    found = _next_nonzero(handle.fileno(), base, size)
                    if found is None:
                        break  # a sparse tail: the writer's data has not landed yet
                    base, window = max(base + 1, found - 16), _CHUNK
                    continue
                want = min(window, remaining, data_end - base)
                buf = bytearray(want + _PAD)  # zero slack: word gathers may run past the last record
                handle.seek(base)
                n = _read_into(handle, memoryview(buf)[:want])
                stats.bytes_read += n
                frames = _frame(buf, n, remaining - n)
                if frames.consumed and base != state.offset:
                    # Zeros [offset, base), then whole records: the zeros were damage after all.
                    stats.skipped_bytes += base - state.offset
                    stats.corrupt_records += 0 if frames.corrupt else 1
                stats.skipped_bytes += frames.skipped_bytes
                stats.corrupt_records += frames.corrupt
                if frames.starts.size:
                    stats.records += int(frames.starts.size)
                    # A signalling NaN widened to float64 makes numpy print a RuntimeWarning, with a
                    # source line from the install, on the user's terminal: it is just a NaN point.
                    with np.errstate(invalid="ignore"):
                        chunk = self._decoder.decode(buf, frames)
                    stats.corrupt_records += chunk.corrupt
                    stats.slow_records += chunk.slow
                    self._store(chunk, state, stats)
                if frames.consumed:
                    state.offset = base = base + frames.consumed
                    window = _CHUNK
                    continue
                if n and not np.frombuffer(buf, np.uint8, count=n).any():
                    # No record starts in zeros. Look for the next byte of data in bounded steps
                    # (holes skipped with SEEK_DATA) instead of reading ever larger windows.
                    found = _next_nonzero(handle.fileno(), base + n, size)
                    if found is None:
                        break  # a zero-filled tail: the writer's data has not landed yet
                    base, window = max(base + n, found - 16), _CHUNK  # a header starts at most 8 bytes before
                    continue
                if n >= remaining or n < want or frames.need > remaining:
                    break  # the rest is a record still being written, or damage not yet followed by data
                if base + n >= data_end:
                    # What could not be taken runs into a hole: look past the hole for data.
                    found = _next_nonzero(handle.fileno(), data_end, size)
                    if found is None:
                        break
                    base, window = max(base + 1, found - 16), _CHUNK
                    continue
                window = max(frames.need, 2 * n)  # a record, or damage, longer than the window
            # Remembered only when the mtime is old enough to change with the next write (git's
            # racy-index rule, as core.runs' listing cache): a write in the same tick keeps it.
            racy = time.time() - st.st_mtime <= RACY_MTIME_SECS
            state.quiet = (size, st.st_mtime_ns) if state.offset < size and not racy else None
            stats.pending_bytes += max(size - state.offset, 0)
        if stats.corrupt_records > corrupt_before:
            self.damaged[state.path] = self.damaged.get(state.path, 0) + stats.corrupt_records - corrupt_before

    def _restarts(self, chunk: _Chunk, state: _FileState) -> list[tuple[int, int]]:
        """SessionLog.START events that purge: (key, step).

        Only in files with file_version >= 2, as TensorBoard's Python loader
        (plugin_event_accumulator.py: _CheckForRestartAndMaybePurge). TB ignores the first START
        of a run (PR tensorflow/tensorboard#4763: a writer's own START must not purge the graph
        or summaries it wrote just before it). Here a file's first START is ignored only when
        that file already wrote summaries before it; torch's SummaryWriter(purge_step=T) writes
        START(T) as the first records of the restarted writer's new file, and that one must purge
        what the dead process wrote at steps >= T in the run's other files.
        """
        events = sorted([(k, 0, v) for k, v in chunk.versions] + [(k, 1, s) for k, s in chunk.starts])
        version = state.file_version
        purges = []
        for key, is_start, value in events:
            if not is_start:
                version = value
                continue
            if version is None or version < 2:
                continue
            if not state.seen_start:
                state.seen_start = True
                wrote_before = state.seen_summary or (chunk.first_summary is not None and chunk.first_summary < key)
                if wrote_before:
                    continue
            purges.append((key, int(value)))
        state.file_version = version
        state.seen_summary |= chunk.first_summary is not None
        return purges

    def _store(self, chunk: _Chunk, state: _FileState, stats: ReadStats) -> None:
        purges = self._restarts(chunk, state)
        # First occurrence wins, even when that point itself is not kept (a NaN wall_time).
        for tag_id, (_, plugin) in chunk.first_plugin.items():
            self._plugins.setdefault(tag_id, plugin)
        if not chunk.keys and not purges:
            return
        scalars = self.scalars
        if chunk.keys:
            keys = np.concatenate(chunk.keys)
            tag_ids = np.concatenate(chunk.tag_ids)
            steps = np.concatenate(chunk.steps)
            walls = np.concatenate(chunk.walls)
            values = np.concatenate(chunk.values)
            chunk.keys = chunk.tag_ids = chunk.steps = chunk.walls = chunk.values = []  # peak memory
            stats.scalars += int(keys.size)
            finite = np.isfinite(walls)
            if not finite.all():
                stats.dropped_points += int(finite.size - finite.sum())
                keys, tag_ids, steps, walls, values = (a[finite] for a in (keys, tag_ids, steps, walls, values))
            # Record order within each tag: sort by key, then (stably) by tag.
            order = np.argsort(keys, kind="stable")
            tag_sorted = tag_ids[order]
            if tag_sorted.size and tag_sorted.max() < 65536:
                tag_sorted = tag_sorted.astype(np.uint16)  # radix sort
            order = order[np.argsort(tag_sorted, kind="stable")]
            keys, tag_ids, steps, walls, values = (a[order] for a in (keys, tag_ids, steps, walls, values))
            edges = np.flatnonzero(np.diff(tag_ids)) + 1
            bounds = np.concatenate(([0], edges, [keys.size])).tolist() if keys.size else [0]
        else:
            bounds = [0]
        tags = self._decoder.tags
        segments = []
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            tag_id = int(tag_ids[a])
            series = scalars.series_for(state.prefix + tags[tag_id], self._plugins.get(tag_id))
            cuts = np.searchsorted(keys[a:b], [k for k, _ in purges]).tolist() if purges else []
            segments.append((series, a, [a + c for c in cuts] + [b]))
        lows = [a for _, a, _ in segments]
        for phase in range(len(purges) + 1):
            for i, (series, _, cuts) in enumerate(segments):
                lo, hi = lows[i], cuts[phase]
                if hi > lo:
                    series.extend(steps[lo:hi], walls[lo:hi], values[lo:hi])
                lows[i] = hi
            if phase < len(purges) and scalars.purge_from(purges[phase][1]):
                scalars.version += 1  # a purge alone (no new points) is a change too


def series_prefixes(files: Iterable[Path]) -> dict[Path, str]:
    """Each event file's series-name prefix: ``"<subdir>/"`` below the run's own log directory.

    A series is (sub-directory, tag), as in TensorBoard, where every directory of event files is
    a run of its own: ``add_scalars("eval", {"ploss_0": x, "acc_0": y})`` writes tag ``eval``
    into ``eval_ploss_0/`` and ``eval_acc_0/`` below the writer's directory, and those must not
    merge into one ``eval``. The run's own log directories are those with no other event-file
    directory of the run above them (several of them, such as HF Trainer's
    ``runs/<date_host>/`` after a restart, are one run's continuations: their tags merge).
    """
    directories = {Path(f).parent for f in files}
    prefixes = {}
    for file in files:
        directory = Path(file).parent
        root = next((a for a in reversed(directory.parents) if a in directories), directory)
        prefixes[Path(file)] = "" if root == directory else directory.relative_to(root).as_posix() + "/"
    return prefixes


def read_event_file(path: str | Path) -> RunScalars:
    """Every scalar of one event file (one-shot convenience over RunEvents)."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(path, "no such event file")
    events = RunEvents()
    events.set_files([path])
    events.poll()
    return events.scalars


def find_event_files(path: str | Path) -> list[Path]:
    """`path` itself if it is a file, else every *tfevents* file below it, hidden dirs skipped."""
    path = Path(path)
    if path.is_file():
        return [path]
    found = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if is_event_file_name(name):
                found.append(Path(root) / name)
    return found
