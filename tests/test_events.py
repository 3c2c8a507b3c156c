"""The event reader on files written by the real writers: torch's SummaryWriter, tensorboard's
EventFileWriter with TF2-style tensors, several writers in one run, restarts."""

from __future__ import annotations

import math
import struct
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
import torch
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from torch.utils.tensorboard import SummaryWriter

from builders.events import (
    as_points,
    find_event_files,
    frame,
    read_event_file,
    reference_points,
    same_points,
    scalar_event,
    tensor_value,
)
from builders.rustboard import tensorboard_shows
from triage_tui.core.read.events.crc import masked_crc32c
from triage_tui.core.read.events.reader import RunEvents

SPECFORGE_TAGS = [f"train/ploss_{i}" for i in range(7)] + [f"train/acc_{i}" for i in range(7)] + ["train/lr"]


def _write_torch(logdir, steps, *, tags=SPECFORGE_TAGS, seed=0, **scalar_kwargs):
    rng = np.random.default_rng(seed)
    logged: dict[str, list[tuple[int, float]]] = {tag: [] for tag in tags}
    with SummaryWriter(log_dir=str(logdir)) as writer:
        for step in steps:
            for tag in tags:
                value = float(rng.standard_normal() * 3 + 10)
                writer.add_scalar(tag, value, global_step=step, walltime=1.7e9 + step, **scalar_kwargs)
                logged[tag].append((step, value))
    return logged


def _read(path, **kwargs):
    """(scalars, stats) of one file, and proof the bulk path did the work: upb one record at a
    time only for what fits no template (the file_version record, a few representatives)."""
    events = RunEvents(**kwargs)
    events.set_files([path])
    stats = events.poll()
    assert stats.slow_records <= max(10, stats.records // 50), stats
    return events.scalars, stats


def _only_file(logdir):
    files = find_event_files(logdir)
    assert len(files) == 1, files
    return files[0]


def test_torch_simple_value_matches_what_was_logged_and_upb(tmp_path):
    steps = list(range(300)) + list(range(300, 20000, 97))  # 1-, 2- and 3-byte step varints
    logged = _write_torch(tmp_path, steps)
    path = _only_file(tmp_path)
    scalars, _ = _read(path)
    assert scalars.tags() == sorted(SPECFORGE_TAGS)
    for tag, points in logged.items():
        series = scalars.get(tag)
        assert series.plugin == "scalars"  # simple_value is a scalar without metadata (TB data_compat)
        assert series.steps.tolist() == [s for s, _ in points]
        # simple_value is a float32 on disk.
        np.testing.assert_array_equal(series.values, np.array([v for _, v in points], np.float32).astype(np.float64))
        np.testing.assert_array_equal(series.wall_times, 1.7e9 + series.steps)
    assert same_points(as_points(scalars), tensorboard_shows([path]))


@pytest.mark.parametrize("double_precision", [False, True])
def test_torch_new_style_tensors(tmp_path, double_precision):
    logged = _write_torch(
        tmp_path, range(200), tags=["train/ploss_0", "loss"], new_style=True, double_precision=double_precision
    )
    path = _only_file(tmp_path)
    scalars, _ = _read(path)
    dtype = np.float64 if double_precision else np.float32
    for tag, points in logged.items():
        series = scalars.get(tag)
        assert series.plugin == "scalars"
        np.testing.assert_array_equal(series.values, np.array([v for _, v in points], dtype).astype(np.float64))
    # TensorBoard's data server shows no point of a double tensor (its scalars take DT_FLOAT only);
    # tensorboard's own make_ndarray (reference_points) reads them, as its Python loader does.
    oracle = reference_points if double_precision else tensorboard_shows
    assert same_points(as_points(scalars), oracle([path]))


def _tf2_value(tag, dtype, x, *, first, form):
    """tf.summary.scalar-style values; `form` picks tensor_content or the dtype's *_val field."""
    vals: dict[str, Any]  # the TensorProto field for the dtype (float_val, ...) and its one value
    if dtype == types_pb2.DT_FLOAT:
        raw = np.float32(x)
        vals = {"float_val": [float(raw)]}
    elif dtype == types_pb2.DT_DOUBLE:
        raw = np.float64(x)
        vals = {"double_val": [float(raw)]}
    elif dtype == types_pb2.DT_HALF:
        raw = np.float16(x)
        vals = {"half_val": [int(raw.view(np.uint16))]}
    elif dtype == types_pb2.DT_BFLOAT16:
        bits = int(np.float32(x).view(np.uint32)) >> 16
        raw = np.uint16(bits)
        vals = {"half_val": [bits]}
    elif dtype == types_pb2.DT_INT64:
        raw = np.int64(round(x * 1000) - 5000)
        vals = {"int64_val": [int(raw)]}
    else:
        raise AssertionError(dtype)
    expected = (
        float(np.array([int(raw) << 16], np.uint32).view(np.float32)[0])
        if dtype == types_pb2.DT_BFLOAT16
        else float(raw)
    )
    if form == "content":
        return tensor_value(tag, dtype, content=raw.tobytes(), metadata=first), expected
    return tensor_value(tag, dtype, metadata=first, **vals), expected


@pytest.mark.parametrize("form", ["content", "vals"])
def test_tf2_style_tensor_scalars_every_dtype(tmp_path, form):
    dtypes = {
        "float": types_pb2.DT_FLOAT,
        "double": types_pb2.DT_DOUBLE,
        "half": types_pb2.DT_HALF,
        "bfloat16": types_pb2.DT_BFLOAT16,
        "int64": types_pb2.DT_INT64,
    }
    rng = np.random.default_rng(1)
    writer = EventFileWriter(str(tmp_path))
    expected: dict[str, list[float]] = {name: [] for name in dtypes}
    for step in range(150):
        for name, dtype in dtypes.items():
            x = float(rng.uniform(-3, 3))
            # TF1-style writers strip metadata after a tag's first value (tensorflow writer.py:
            # _seen_summary_tags); the plugin must come from the first occurrence.
            value, want = _tf2_value(f"m/{name}", dtype, x, first=step == 0, form=form)
            writer.add_event(
                event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(value=[value]))
            )
            expected[name].append(want)
    writer.close()
    path = _only_file(tmp_path)
    scalars, _ = _read(path)
    assert scalars.tags() == sorted(f"m/{n}" for n in dtypes)
    for name, values in expected.items():
        series = scalars.get(f"m/{name}")
        assert series.plugin == "scalars"
        assert series.steps.tolist() == list(range(150))
        np.testing.assert_array_equal(series.values, np.array(values))
    # Beyond DT_FLOAT, TensorBoard's data server shows nothing: tensorboard's make_ndarray is the oracle.
    assert same_points(as_points(scalars), reference_points([path]))


def test_two_writers_in_one_run_and_all_files_read(tmp_path):
    first = _write_torch(tmp_path, range(100), tags=["train/ploss_0", "train/acc_0"], seed=1)
    second = _write_torch(tmp_path, range(100), tags=["eval/loss"], seed=2)
    files = find_event_files(tmp_path)
    assert len(files) == 2
    events = RunEvents()
    events.set_files(files)
    stats = events.poll()
    assert stats.files == 2 and stats.corrupt_records == 0
    assert events.scalars.tags() == ["eval/loss", "train/acc_0", "train/ploss_0"]
    for tag, points in {**first, **second}.items():
        assert events.scalars.get(tag).steps.tolist() == [s for s, _ in points]
    assert same_points(as_points(events.scalars), tensorboard_shows(files))


def test_restart_with_purge_step_purges_all_tags_and_preempts(tmp_path):
    """torch SummaryWriter(purge_step=T) writes SessionLog.START at T in the restarted writer's file."""
    _write_torch(tmp_path, range(100), tags=["train/ploss_0", "train/lr"], seed=1)
    events = RunEvents()
    events.set_files(find_event_files(tmp_path))
    events.poll()
    assert len(events.scalars.get("train/lr")) == 100
    version = events.scalars.version
    with SummaryWriter(log_dir=str(tmp_path), purge_step=50) as writer:
        for step in range(50, 80):
            writer.add_scalar("train/ploss_0", -float(step), global_step=step, walltime=2e9 + step)
    files = find_event_files(tmp_path)
    assert len(files) == 2
    events.set_files(files)
    events.poll()
    assert events.scalars.version > version
    loss = events.scalars.get("train/ploss_0")
    assert loss.steps.tolist() == list(range(80))
    assert loss.values[50:].tolist() == [-float(s) for s in range(50, 80)]
    # A tag the restarted process never logged again loses its orphaned points too.
    assert events.scalars.get("train/lr").steps.tolist() == list(range(50))
    # A cold read of the same two files agrees with the live one.
    cold = RunEvents()
    cold.set_files(files)
    cold.poll()
    assert same_points(as_points(cold.scalars), as_points(events.scalars))


def test_step_regression_without_session_log_preempts_that_tag_only(tmp_path):
    writer = EventFileWriter(str(tmp_path))
    for step in list(range(40)) + list(range(20, 30)):
        writer.add_event(scalar_event("a", step, float(step), 1e9 + step))
    for step in range(40):
        writer.add_event(scalar_event("b", step, float(step), 1e9 + step))
    writer.close()
    scalars = read_event_file(_only_file(tmp_path))
    assert scalars.get("a").steps.tolist() == list(range(30))  # rustboard: step >= 20 evicted
    assert scalars.get("b").steps.tolist() == list(range(40))


def test_first_session_start_after_own_summaries_does_not_purge(tmp_path):
    """TB PR #4763: a writer's START right after its own first summaries is not a restart."""
    writer = EventFileWriter(str(tmp_path))
    for step in range(10):
        writer.add_event(scalar_event("a", step, 1.0, 1e9 + step))
    writer.add_event(
        event_pb2.Event(step=0, wall_time=1e9, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))
    )
    for step in range(10, 20):
        writer.add_event(scalar_event("a", step, 1.0, 1e9 + step))
    # A second START in the same file is a restart: everything at step >= 15 goes.
    writer.add_event(
        event_pb2.Event(step=15, wall_time=1e9, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))
    )
    writer.close()
    assert read_event_file(_only_file(tmp_path)).get("a").steps.tolist() == list(range(15))


def test_mixed_file_ignores_histograms_images_text_and_reads_multi_value_summaries(tmp_path):
    with SummaryWriter(log_dir=str(tmp_path)) as writer:
        for step in range(30):
            writer.add_scalar("loss", 1.0 / (step + 1), step)
            writer.add_histogram("weights", torch.randn(100), step)
            if step % 10 == 0:
                writer.add_image("img", torch.rand(3, 8, 8), step)
                writer.add_text("note", f"step {step}", step)
    path = _only_file(tmp_path)
    # TF1-style merged summary: several values in one event.
    merged = event_pb2.Event(
        wall_time=2e9,
        step=30,
        summary=summary_pb2.Summary(
            value=[
                summary_pb2.Summary.Value(tag="loss", simple_value=0.5),
                summary_pb2.Summary.Value(tag="acc", simple_value=0.25),
                tensor_value("vec", types_pb2.DT_FLOAT, float_val=[1.0, 2.0]),  # not rank 0... has 2 values
            ]
        ),
    )
    with open(path, "ab") as f:
        f.write(frame(merged.SerializeToString()))
    scalars = read_event_file(path)
    assert scalars.tags() == ["acc", "loss"]
    assert scalars.get("loss").steps.tolist() == list(range(31))
    assert scalars.get("acc").values.tolist() == [0.25]
    assert same_points(as_points(scalars), tensorboard_shows([path]))


def test_ten_thousand_tags(tmp_path):
    writer = EventFileWriter(str(tmp_path), max_queue_size=1000)
    tags = [f"layer_{i:05d}/grad_norm" for i in range(10_000)]
    for step in range(3):
        for i, tag in enumerate(tags):
            writer.add_event(scalar_event(tag, step, float(i * 10 + step), 1e9 + step))
    writer.close()
    scalars, stats = _read(_only_file(tmp_path))
    assert stats.records == 30_001 and stats.scalars == 30_000
    assert len(scalars) == 10_000
    for i in (0, 1, 4_999, 9_999):
        series = scalars.get(tags[i])
        assert series.steps.tolist() == [0, 1, 2]
        assert series.values.tolist() == [i * 10.0, i * 10.0 + 1, i * 10.0 + 2]


def _non_utf8(event: event_pb2.Event, good: bytes, bad: bytes) -> bytes:
    payload = event.SerializeToString()
    assert payload.count(good) == 1
    return payload.replace(good, bad)


@pytest.mark.parametrize("count", [1, 50])  # one record takes the slow path, fifty a template
def test_non_utf8_tag_is_kept_with_an_escaped_name(tmp_path, count):
    """Tags are proto3 strings: upb refuses invalid UTF-8; the reader keeps the data, tag escaped."""
    path = tmp_path / "events.out.tfevents.1.host"
    data = b"".join(
        frame(_non_utf8(scalar_event("lossX", s, float(s), 1e9 + s), b"lossX", b"loss\xff")) for s in range(count)
    )
    with pytest.raises(DecodeError):
        event_pb2.Event.FromString(_non_utf8(scalar_event("lossX", 0, 0.0, 1e9), b"lossX", b"loss\xff"))
    path.write_bytes(frame(scalar_event("ok", 0, 1.0, 1e9).SerializeToString()) + data)
    events = RunEvents()
    events.set_files([path])
    stats = events.poll()
    assert stats.corrupt_records == 0
    assert events.scalars.tags() == ["loss\\xff", "ok"]
    assert events.scalars.get("loss\\xff").values.tolist() == [float(s) for s in range(count)]


def test_nan_and_inf_values_kept_nan_wall_time_dropped(tmp_path):
    writer = EventFileWriter(str(tmp_path))
    values = [1.0, math.nan, math.inf, -math.inf] * 5
    for step, v in enumerate(values):
        writer.add_event(scalar_event("loss", step, v, 1e9 + step))
    writer.add_event(scalar_event("loss", 100, 1.0, math.nan))
    writer.close()
    events = RunEvents()
    events.set_files([_only_file(tmp_path)])
    stats = events.poll()
    series = events.scalars.get("loss")
    assert stats.dropped_points == 1
    assert series.steps.tolist() == list(range(20))
    np.testing.assert_array_equal(series.values, np.array(values))


@pytest.mark.parametrize("field", ["value", "step"])
def test_a_flipped_bit_in_a_templated_record_is_dropped_and_counted(tmp_path, field):
    """The vectorised path checks every record's data CRC: one flipped bit in a value (2.0 -> a
    huge float) or a step (renumbering the point) fits the record's template and, unchecked,
    would be read as a silently wrong number."""
    writer = EventFileWriter(str(tmp_path))
    for step in range(100):
        writer.add_event(scalar_event("loss", step, 2.0, 1e9 + step))
    writer.close()
    path = _only_file(tmp_path)
    data = bytearray(path.read_bytes())
    from builders.events import records

    pos, length = records(bytes(data))[51]
    payload = event_pb2.Event.FromString(bytes(data[pos + 12 : pos + 12 + length]))
    assert payload.step == 50
    # The value is the payload's last 4 bytes; the step varint follows the 0x10 key after wall_time.
    offset = pos + 12 + (length - 2 if field == "value" else 10)
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))
    events = RunEvents()
    events.set_files([path])
    stats = events.poll()
    assert stats.corrupt_records == 1 and stats.slow_records <= 2
    series = events.scalars.get("loss")
    assert len(series) == 99 and (series.values == 2.0).all()
    assert 50 not in series.steps.tolist() and sorted(series.steps.tolist()) == series.steps.tolist()


def test_header_struct_is_little_endian():
    # The framing helper the other tests rely on matches the TFRecord test vector
    # (tensorflow/tensorboard tensorboard/data/server/tf_record.rs: length 24 -> crc 0x224b7fa3).
    header = struct.pack("<Q", 24)
    assert frame(b"x" * 24)[8:12] == struct.pack("<I", 0x224B7FA3)
    assert frame(b"x" * 24)[:8] == header


@pytest.mark.parametrize("scan_words, group_rows", [(1, 8), (3, 100), (64, 9)])
def test_block_and_slice_boundaries_lose_and_duplicate_nothing(tmp_path, monkeypatch, scan_words, group_rows):
    """The header scan works in blocks of words and the decoder in slices of a length group; at
    full size those are 4 MiB and 65 536 records, here tiny so every boundary case occurs."""
    from triage_tui.core.read.events import framing, tuning

    _write_torch(tmp_path, range(150), tags=SPECFORGE_TAGS[:4])
    path = _only_file(tmp_path)
    monkeypatch.setattr(tuning, "SCAN_WORDS", scan_words)
    monkeypatch.setattr(tuning, "GROUP_ROWS", group_rows)
    scalars, stats = _read(path)
    assert stats.records == 601
    assert same_points(as_points(scalars), tensorboard_shows([path]))
    # The bulk scan finds exactly the offsets a byte-by-byte scan finds (the serial fallback would
    # hide a miss from the test above, at a cost in speed).
    data = path.read_bytes()
    buf = bytearray(data + bytes(16))
    brute = [
        p
        for p in range(len(data) - 15)
        if data[p] <= 255
        and data[p + 1 : p + 8] == bytes(7)
        and struct.unpack_from("<I", data, p + 8)[0] == masked_crc32c(data[p : p + 8])
        and p + 16 + data[p] <= len(data)
    ]
    found, lengths = framing.small_headers(buf, len(data))
    assert found.tolist() == brute and lengths.tolist() == [data[p] for p in brute]


def _small_headers_brute(data: bytes) -> list[int]:
    return [
        p
        for p in range(len(data) - 15)
        if data[p + 1 : p + 8] == bytes(7)
        and struct.unpack_from("<I", data, p + 8)[0] == masked_crc32c(data[p : p + 8])
        and p + 16 + data[p] <= len(data)
    ]


@pytest.mark.parametrize("seed", range(6))
def test_header_scan_of_zero_runs_and_headers_at_every_alignment(tmp_path, monkeypatch, seed):
    """Zero-filled stretches (preallocated tails, sparse files), records shifted to every offset
    mod 8, bytes that are nearly a header: the scan finds exactly what a byte-by-byte scan finds,
    at any block size."""
    from triage_tui.core.read.events import framing, tuning

    rng = np.random.default_rng(seed)
    _write_torch(tmp_path, range(30), tags=SPECFORGE_TAGS[:2])
    real = _only_file(tmp_path).read_bytes()
    parts = []
    for _ in range(60):
        kind = rng.integers(4)
        if kind == 0:
            parts.append(bytes(int(rng.integers(1, 40))))  # zeros
        elif kind == 1:
            parts.append(rng.integers(0, 3, int(rng.integers(1, 24)), dtype=np.uint8).tobytes())  # almost zeros
        elif kind == 2:
            start = int(rng.integers(len(real) - 200))
            parts.append(real[start : start + int(rng.integers(1, 200))])  # records cut anywhere
        else:
            parts.append(frame(bytes(int(rng.integers(0, 300)))))  # a whole record of zeros
    data = b"".join(parts)
    brute = _small_headers_brute(data)
    for scan_words in (1, 5, 1 << 19):
        monkeypatch.setattr(tuning, "SCAN_WORDS", scan_words)
        found, lengths = framing.small_headers(bytearray(data + bytes(16)), len(data))
        assert found.tolist() == brute and lengths.tolist() == [data[p] for p in brute]


@pytest.mark.parametrize("chunk", [40, 333, 4096])
def test_read_window_smaller_than_records(tmp_path, monkeypatch, chunk):
    """Reads are capped (64 MiB at full size); records longer than the window, and records cut by
    its end, are read whole all the same, without anything counted as damage."""
    from triage_tui.core.read.events import tuning

    with SummaryWriter(log_dir=str(tmp_path)) as writer:
        for step in range(40):
            writer.add_scalar("loss", 1.0 / (step + 1), step)
            if step % 7 == 0:
                writer.add_image("img", torch.rand(3, 32, 32), step)  # ~3-5 KB records
    path = _only_file(tmp_path)
    monkeypatch.setattr(tuning, "READ_WINDOW", chunk)
    events = RunEvents()
    events.set_files([path])
    stats = events.poll()
    assert stats.corrupt_records == 0 and stats.skipped_bytes == 0 and stats.pending_bytes == 0
    assert same_points(as_points(events.scalars), tensorboard_shows([path]))


def test_a_purge_alone_bumps_the_version(tmp_path):
    path = tmp_path / "events.out.tfevents.1.h"
    version_event = event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")
    path.write_bytes(
        b"".join(
            frame(e.SerializeToString())
            for e in [version_event] + [scalar_event("a", s, 1.0, 1e9 + s) for s in range(20)]
        )
    )
    events = RunEvents()
    events.set_files([path])
    events.poll()
    version = events.scalars.version
    start = event_pb2.Event(step=5, wall_time=2e9, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))
    other = tmp_path / "events.out.tfevents.2.h"  # the restarted writer's file: version, then START
    other.write_bytes(frame(version_event.SerializeToString()) + frame(start.SerializeToString()))
    events.set_files([path, other])
    stats = events.poll()
    assert stats.scalars == 0 and events.scalars.version > version
    assert events.scalars.get("a").steps.tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("dtype, bits", [(types_pb2.DT_HALF, 0x7D00), (types_pb2.DT_BFLOAT16, 0x7FA0)])
def test_a_signalling_nan_scalar_is_read_without_a_numpy_warning(tmp_path, dtype, bits):
    """A half/bfloat16 signalling NaN used to print numpy's RuntimeWarning, with a source line from
    the install, to the user's terminal; it is a NaN point like any other."""
    import warnings

    path = tmp_path / "events.out.tfevents.1.h"
    records = [
        event_pb2.Event(wall_time=1e9 + step, step=step, summary=summary_pb2.Summary(value=[value]))
        for step, value in enumerate(
            [tensor_value("loss", dtype, half_val=[bits])] * 3  # one by one
            + [summary_pb2.Summary.Value(tag="lr", simple_value=1.0)] * 20
        )
    ]
    data = b"".join(frame(r.SerializeToString()) for r in records)
    snan32 = struct.pack("<I", 0x7FA00000)  # a float32 signalling NaN in each simple_value, read as columns
    path.write_bytes(b"".join(frame(r.SerializeToString().replace(struct.pack("<f", 1.0), snan32)) for r in records))
    assert len(path.read_bytes()) == len(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scalars = read_event_file(path)
    assert scalars.get("loss").steps.tolist() == [0, 1, 2] and np.isnan(scalars.get("loss").values).all()
    assert len(scalars.get("lr")) == 20 and np.isnan(scalars.get("lr").values).all()


def _no_step_twice_in_a_row(points: list[tuple[str, int]]) -> bool:
    """The same step twice in a row: TensorBoard's data server keeps the last, triage both (as
    EventAccumulator does); every other order is TensorBoard's to say."""
    by_tag: dict[str, list[int]] = {}
    for tag, step in points:
        by_tag.setdefault(tag, []).append(step)
    return all(a != b for steps in by_tag.values() for a, b in pairwise(steps))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.sampled_from(["train/ploss_0", "train/acc_0"]), st.integers(0, 30)), min_size=1, max_size=80
    ).filter(_no_step_twice_in_a_row)
)
@example([("train/ploss_0", 5), ("train/ploss_0", 6), ("train/acc_0", 6), ("train/ploss_0", 5), ("train/ploss_0", 7)])
def test_steps_going_back_preempt_as_tensorboard_shows(tmp_path, points):
    """A resumed run logs steps it logged before: the reader, and the reference the other tests use,
    keep what TensorBoard's own data server shows for the same file."""
    data = b"".join(
        frame(scalar_event(tag, step, float(i), 1.7e9 + i).SerializeToString()) for i, (tag, step) in enumerate(points)
    )
    shown = tensorboard_shows([data])
    path = tmp_path / f"events.out.tfevents.{len(list(tmp_path.iterdir()))}.h"
    path.write_bytes(data)
    scalars = read_event_file(path)
    assert same_points(as_points(scalars), shown) and same_points(reference_points([data]), shown)
