"""Vectorised field extraction: wall_time, step and value of many records of one layout at once.

A group of records of one payload length L is a (records, ceil(L/8)) uint64 matrix, gathered
record by record (one cache miss a record); byte j of a row is payload byte j. The fields sit at
the offsets the wire walker found (``wire.Layout``) and are read out of the matrix with numpy;
a varint is checked to really be as wide as the layout says.
"""

from __future__ import annotations

import numpy as np

from triage_tui.core.read.events.wire import Layout

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


def column(rows: np.ndarray, offset: int, dtype: str) -> np.ndarray:
    """Bytes offset.. of every row of a C-contiguous uint8 matrix, read as `dtype`."""
    return np.ndarray((rows.shape[0],), dtype, buffer=rows, offset=offset, strides=(rows.strides[0],))


def payload_rows(payload) -> np.ndarray:
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


def decode_values(rows: np.ndarray, offset: int, width: int, kind: str) -> tuple[np.ndarray, np.ndarray | None]:
    """float64 values of `kind` at `offset`, and for varints which rows really had that shape."""
    if kind in _FIXED_DTYPE:
        return column(rows, offset, _FIXED_DTYPE[kind]).astype(np.float64), None
    if kind == "bool":
        return (rows[:, offset] != 0).astype(np.float64), None
    if kind == "bf16":
        bits = column(rows, offset, "<u2").astype(np.uint32) << np.uint32(16)
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


def decode_layout(rows: np.ndarray, layout: Layout):
    """(wall, step, value, ok) of payload rows (uint8 matrix) sharing `layout`."""
    count = rows.shape[0]
    wall = column(rows, layout.wall, "<f8").copy() if layout.wall >= 0 else np.zeros(count)
    ok = np.ones(count, bool)
    if layout.step >= 0:
        raw, step_ok = _varints(rows, layout.step, layout.step_width)
        step = raw.view(np.int64)
        ok &= step_ok
    else:
        step = np.zeros(count, np.int64)
    value, value_ok = decode_values(rows, layout.value, layout.value_width, layout.kind)
    if value_ok is not None:
        ok &= value_ok
    return wall, step, value, ok
