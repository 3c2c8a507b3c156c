"""The protobuf wire walker: where a single-scalar ``tensorboard.Event`` keeps its variable fields.

A scalar event is ``wall_time`` (f64), ``step`` (varint) and a ``Summary`` with one ``Value``
(tag, metadata, and ``simple_value`` or a rank-0 numeric ``TensorProto``). The walker reads one
record's bytes and returns the offsets of wall_time, step and value (a ``Layout``): every other
byte is the record's skeleton, shared by all points of one tag from one writer, which is what the
vectorised decoder (``templates``, ``columns``) groups on. Field numbers: tensorflow/tensorboard
tensorboard/compat/proto/event.proto, summary.proto, tensor.proto, types.proto.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError
from tensorboard.compat.proto import summary_pb2

# TensorProto dtype -> raw `tensor_content` decoder (tensorflow/tensorboard
# tensorboard/compat/proto/types.proto); rank-0, so the content is exactly one element.
CONTENT_KIND = {
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
KIND_WIDTH = {
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
VAL_FIELD = {
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
class Layout:
    """Offsets of the variable fields of a single-scalar event; all other bytes are its skeleton."""

    length: int
    wall: int  # offset of the f64 wall_time, -1 when absent (0.0)
    step: int  # offset of the step varint, -1 when absent (0)
    step_width: int
    value: int  # offset of the value's bytes
    value_width: int
    kind: str  # value decoder, see _decode_values


@dataclass(frozen=True)
class Walked:
    layout: Layout
    tag: bytes
    plugin: str | None


def plugin_name(metadata: bytes | None, simple_value: bool) -> str | None:
    """The plugin a value belongs to; `simple_value` is a scalar even without metadata (TB data_compat)."""
    name = ""
    if metadata:
        try:
            name = summary_pb2.SummaryMetadata.FromString(metadata).plugin_data.plugin_name
        except DecodeError:
            name = ""
    return name or ("scalars" if simple_value else None)


def walk(p: bytes) -> Walked | None:
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


def _walk_value(p: bytes, pos: int, end: int, n: int, wall: int, step: int, step_width: int) -> Walked | None:
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
    layout = Layout(n, wall, step, step_width, value[0], value[1], value[2])
    return Walked(layout, tag, plugin_name(metadata, simple))


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
        kind = CONTENT_KIND.get(dtype)
        return (a, b - a, kind) if kind is not None and KIND_WIDTH[kind] == b - a else None
    expected = VAL_FIELD.get(dtype)
    if expected is None or expected[0] != number:
        return None
    kind = expected[1]
    if kind.startswith("v_"):
        _, q = _varint(p, a, b)  # packed varints: exactly one element
        return (a, b - a, kind) if q == b else None
    return (a, b - a, kind) if KIND_WIDTH[kind] == b - a else None
