"""The bulk (template) decoder agrees with Event.FromString + tensorboard's make_ndarray on
arbitrary mixes of scalar encodings, step/wall edge values and non-scalar records."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2

from builders.events import as_points, frame, reference_points, same_points, tensor_value
from builders.rustboard import tensorboard_shows
from triage_tui.core.read.events.reader import RunEvents

# dtype -> (numpy dtype of tensor_content, TensorProto *_val field)
DTYPES = {
    types_pb2.DT_FLOAT: ("<f4", "float_val"),
    types_pb2.DT_DOUBLE: ("<f8", "double_val"),
    types_pb2.DT_HALF: ("<f2", "half_val"),
    types_pb2.DT_BFLOAT16: ("<u2", "half_val"),
    types_pb2.DT_INT32: ("<i4", "int_val"),
    types_pb2.DT_INT16: ("<i2", "int_val"),
    types_pb2.DT_INT8: ("i1", "int_val"),
    types_pb2.DT_UINT8: ("u1", "int_val"),
    types_pb2.DT_UINT16: ("<u2", "int_val"),
    types_pb2.DT_INT64: ("<i8", "int64_val"),
    types_pb2.DT_UINT32: ("<u4", "uint32_val"),
    types_pb2.DT_UINT64: ("<u8", "uint64_val"),
    types_pb2.DT_BOOL: ("u1", "bool_val"),
}

STEPS = st.one_of(
    st.integers(0, 300), st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 127, 128, 16383, 16384, -1])
)
WALLS = st.one_of(st.floats(1e9, 2e9), st.sampled_from([0.0, math.inf, math.nan, 1.7e9]))
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.sampled_from([0.0, -0.0, 1.0]))


def _raw(dtype: int, draw_bits: int, draw_float: float):
    """A value of `dtype` as numpy scalar (content bytes) and as its *_val entry."""
    code, field = DTYPES[dtype]
    if dtype in (types_pb2.DT_FLOAT, types_pb2.DT_DOUBLE):
        with np.errstate(over="ignore"):  # a huge double becomes an infinite float: fine
            raw = np.array([draw_float]).astype(code)[0]
        return raw, float(raw)
    if dtype == types_pb2.DT_HALF:
        raw = np.array([draw_bits & 0xFFFF], np.uint16).view(np.float16)[0]
        return raw, int(draw_bits & 0xFFFF)
    if dtype == types_pb2.DT_BFLOAT16:
        return np.uint16(draw_bits & 0xFFFF), int(draw_bits & 0xFFFF)
    if dtype == types_pb2.DT_BOOL:
        return np.uint8(draw_bits & 1), bool(draw_bits & 1)
    info = np.iinfo(np.dtype(code))
    value = info.min + draw_bits % (int(info.max) - int(info.min) + 1)
    return np.array([value], code)[0], int(value)


@st.composite
def value_specs(draw):
    """How one tag is written: simple_value, or a rank-0 tensor in content or *_val form."""
    tag = draw(st.text(min_size=1, max_size=24))
    kind = draw(st.sampled_from(["simple", "tensor"]))
    metadata = draw(st.sampled_from(["none", "first", "always", "other_plugin"]))
    if kind == "simple":
        return (tag, "simple", None, None, metadata)
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    form = draw(st.sampled_from(["content", "vals"]))
    return (tag, "tensor", dtype, form, metadata)


def _value(spec, index, bits, x):
    tag, kind, dtype, form, metadata = spec
    if kind == "simple":
        value = summary_pb2.Summary.Value(tag=tag, simple_value=x)
    else:
        raw, val = _raw(dtype, bits, x)
        if form == "content":
            value = tensor_value(tag, dtype, content=np.array([raw]).tobytes())
        else:
            values: dict[str, Any] = {DTYPES[dtype][1]: [val]}
            value = tensor_value(tag, dtype, **values)
    if metadata == "always" or (metadata == "first" and index == 0):
        value.metadata.plugin_data.plugin_name = "scalars"
    elif metadata == "other_plugin" and index == 0:
        value.metadata.plugin_data.plugin_name = "custom"
    return value


NOISE = [
    event_pb2.Event(wall_time=1.0, file_version="brain.Event:2"),
    event_pb2.Event(wall_time=2.0, step=3, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.CHECKPOINT)),
    event_pb2.Event(
        wall_time=3.0,
        step=4,
        summary=summary_pb2.Summary(
            value=[
                summary_pb2.Summary.Value(tag="multi/a", simple_value=1.5),
                summary_pb2.Summary.Value(tag="multi/b", simple_value=2.5),
            ]
        ),
    ),
    event_pb2.Event(
        wall_time=4.0,
        step=5,
        summary=summary_pb2.Summary(
            value=[
                summary_pb2.Summary.Value(
                    tag="hist",
                    tensor=tensor_pb2.TensorProto(
                        dtype=types_pb2.DT_DOUBLE,
                        tensor_shape={"dim": [{"size": 2}, {"size": 3}]},
                        double_val=[1, 2, 3, 4, 5, 6],
                    ),
                )
            ]
        ),
    ),
    event_pb2.Event(
        wall_time=5.0,
        step=6,
        summary=summary_pb2.Summary(
            value=[
                summary_pb2.Summary.Value(
                    tag="text", tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[b"hi"])
                )
            ]
        ),
    ),
    event_pb2.Event(wall_time=6.0, step=7, graph_def=b"\x0a\x03abc" * 100),
]


@st.composite
def event_streams(draw):
    specs = draw(st.lists(value_specs(), min_size=1, max_size=6))
    stream = []
    for spec in specs:
        copies = draw(st.integers(1, 40))
        for index in range(copies):
            step = draw(STEPS)
            wall = draw(WALLS)
            bits = draw(st.integers(0, 2**64 - 1))
            x = draw(FLOATS)
            stream.append(
                event_pb2.Event(
                    wall_time=wall, step=step, summary=summary_pb2.Summary(value=[_value(spec, index, bits, x)])
                )
            )
    stream += draw(st.lists(st.sampled_from(NOISE), max_size=6))
    order = draw(st.permutations(range(len(stream))))
    return [stream[i] for i in order]


def _reference_plugins(events):
    plugins = {}
    for event in events:
        for value in event.summary.value:
            if value.tag in plugins:
                continue
            name = value.metadata.plugin_data.plugin_name if value.HasField("metadata") else ""
            plugins[value.tag] = name or ("scalars" if value.WhichOneof("value") == "simple_value" else None)
    return plugins


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(event_streams(), st.integers(1, 5))
def test_bulk_decoder_agrees_with_upb_and_make_ndarray(tmp_path, events, pieces):
    data = b"".join(frame(e.SerializeToString()) for e in events)
    path = tmp_path / "events.out.tfevents.prop"
    path.write_bytes(b"")
    reader = RunEvents()
    reader.set_files([path])
    # Deliver the file in a few appends: templates learnt early must serve later reads too.
    cuts = sorted({0, len(data), *np.linspace(0, len(data), pieces + 1).astype(int).tolist()})
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        with open(path, "ab") as f:
            f.write(data[a:b])
        reader.poll()
    assert reader.totals.corrupt_records == 0
    want = reference_points([data])
    assert same_points(as_points(reader.scalars), want)
    plugins = _reference_plugins(events)
    for tag in want:
        assert reader.scalars.get(tag).plugin == plugins[tag], tag


def test_template_data_crcs_are_the_crc32c_of_every_row():
    """data_crcs (the skeleton's CRC updated by table, two adjacent variable bytes a lookup) is the
    masked CRC-32C of each payload, whatever its wall, step and value bytes hold."""
    from builders.events import scalar_event
    from triage_tui.core.read.events.crc import masked_crc32c
    from triage_tui.core.read.events.templates import LayoutTemplates, Template
    from triage_tui.core.read.events.wire import walk

    rng = np.random.default_rng(252)
    for step in (5, 300, 20_000):  # steps of one, two and three varint bytes
        payload = scalar_event("train/ploss_0", step, 1.5, 1.7e9).SerializeToString()
        walked = walk(payload)
        assert walked is not None
        templates = LayoutTemplates(walked.layout)
        rows = np.zeros((500, templates.masks.size * 8), np.uint8)
        rows[:, : len(payload)] = np.frombuffer(payload, np.uint8)
        variable = np.flatnonzero(templates.masks.view(np.uint8)[: len(payload)] == 0)
        assert len(variable) >= 13  # the wall time's 8, the value's 4, the step's
        rows[:, variable] = rng.integers(0, 256, (len(rows), len(variable)), dtype=np.uint8)
        templates.add(Template(0, None), rows[0].view("<u8") & templates.masks, 0)
        crcs = templates.data_crcs(rows, np.zeros(len(rows), np.int64))
        assert crcs.tolist() == [masked_crc32c(row[: len(payload)].tobytes()) for row in rows]


def test_every_entry_of_a_pair_crc_table():
    """Each of the 65 536 entries: what the two bytes add to the CRC-32C of a payload with
    `distance` bytes after the first (CRC-32C is affine: crc(a ^ b) = crc(a) ^ crc(b) ^ crc(0))."""
    import crc32c

    from triage_tui.core.read.events.crc import pair_crc_table

    distance = 21
    zero = crc32c.crc32c(bytes(distance + 1))
    expected = [crc32c.crc32c(pair.to_bytes(2, "little") + bytes(distance - 1)) ^ zero for pair in range(65536)]
    assert pair_crc_table(distance).tolist() == expected


def _two_runs_of_a_sweep(tmp_path) -> tuple[dict, list[Path]]:
    from builders.tensorboard import write_scalars

    series = {f"train/ploss_{i}": [(step, 10.0 - step / 100 + i) for step in range(0, 3000, 3)] for i in range(3)}
    return series, [write_scalars(tmp_path / name, series, wall_time=1.7e9) for name in ("a", "b")]


def _counting_learning(monkeypatch) -> list[str]:
    """The tags of the templates decoders learn from now on (each walked and cross-checked with upb)."""
    from triage_tui.core.read.events.decode import Decoder

    checked: list[str] = []
    real_agrees = Decoder._agrees

    def agrees(payload, walked, tag):
        checked.append(tag)
        return real_agrees(payload, walked, tag)

    monkeypatch.setattr(Decoder, "_agrees", staticmethod(agrees))
    return checked


def _read(path: Path):
    events = RunEvents()
    events.set_files([path])
    return events, events.poll()


def test_a_run_read_after_another_takes_the_templates_it_learned(tmp_path, monkeypatch):
    """A sweep's runs log the same tags: the second run read in this process takes the templates the
    first one's decoder learned, with no discovery, reads the same points, and still drops a record
    whose data CRC is wrong."""
    from builders.events import records
    from triage_tui.core.read.events import decode

    monkeypatch.setattr(decode, "_KNOWN", decode.KnownTemplates())
    series, paths = _two_runs_of_a_sweep(tmp_path)
    checked = _counting_learning(monkeypatch)
    first, first_stats = _read(paths[0])
    assert sorted(set(checked)) == sorted(series)
    checked.clear()
    discoveries: list[int] = []
    real_discover = decode.Decoder._discover
    monkeypatch.setattr(decode.Decoder, "_discover", lambda *a: discoveries.append(1) or real_discover(*a))
    second, stats = _read(paths[1])
    assert checked == [] and discoveries == [] and as_points(second.scalars) == as_points(first.scalars)
    assert stats.corrupt_records == 0 and stats.slow_records == first_stats.slow_records  # the same path
    # A flipped value byte in the second file's first ploss_1 record: dropped, as without the shortcut.
    data = bytearray(paths[1].read_bytes())
    offset, length = next((o, n) for o, n in records(bytes(data)) if b"ploss_1" in data[o + 12 : o + 12 + n])
    data[offset + 12 + length - 1] ^= 0x40
    damaged = tmp_path / "c" / paths[1].name
    damaged.parent.mkdir()
    damaged.write_bytes(bytes(data))
    third, stats = _read(damaged)
    assert checked == [] and stats.corrupt_records == 1
    assert sum(len(s) for s in third.scalars.series.values()) == sum(len(v) for v in series.values()) - 1


def test_once_the_shared_templates_are_full_a_new_run_learns_its_own_again(tmp_path, monkeypatch):
    """The templates shared by a process's decoders are bounded: past the bound a run read next
    starts a new set (learning its templates again) and reads the same points."""
    from triage_tui.core.read.events import decode

    monkeypatch.setattr(decode, "_KNOWN", decode.KnownTemplates())
    monkeypatch.setattr(decode, "_MAX_SHARED_TEMPLATES", 3)  # the first run's tags fill it
    series, paths = _two_runs_of_a_sweep(tmp_path)
    checked = _counting_learning(monkeypatch)
    first, _ = _read(paths[0])
    checked.clear()
    second, _ = _read(paths[1])
    assert sorted(set(checked)) == sorted(series)  # learned again, in a set of its own
    assert as_points(second.scalars) == as_points(first.scalars)
    assert decode._KNOWN is second._decoder.known is not first._decoder.known


def test_the_plain_upb_path_reads_the_same_points(tmp_path, monkeypatch):
    """With the templates off (tuning.TEMPLATES, what benchmarks/ab.py measures them against) every
    record goes through Event.FromString, and a real writer's file reads back the same."""
    from torch.utils.tensorboard import SummaryWriter

    from triage_tui.core.read.events import tuning

    with SummaryWriter(log_dir=str(tmp_path)) as writer:
        for step in range(300):
            writer.add_scalar("train/ploss_0", 10.37 - step / 100, step, walltime=1.7e9 + step)
            writer.add_scalar("train/acc_0", step / 1000, step, walltime=1.7e9 + step)
        writer.add_scalar("eval/loss", math.nan, 300)
    files = sorted(tmp_path.glob("*tfevents*"))

    def read() -> tuple[dict, int]:
        events = RunEvents()
        events.set_files(files)
        stats = events.poll()
        return as_points(events.scalars), stats.slow_records

    fast, fast_slow = read()
    monkeypatch.setattr(tuning, "TEMPLATES", False)
    plain, plain_slow = read()
    assert same_points(plain, fast) and same_points(fast, tensorboard_shows(files))
    assert fast_slow < 10 and plain_slow == 602  # 601 scalar records and the file_version one
