"""Live tailing and damaged files: half-written records, zero-filled tails, flipped bytes, truncation,
replacement, absurd lengths, random and mutated bytes."""

from __future__ import annotations

import json
import os
import struct
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.tensorboard import SummaryWriter

from builders.events import as_points, frame, records, same_points, scalar_event
from builders.rustboard import tensorboard_shows
from triage_tui.core.read.events.crc import masked_crc32c
from triage_tui.core.read.events.reader import RunEvents

TAGS = ["train/ploss_0", "train/acc_0", "train/lr"]


def _torch_file_bytes(tmp_path_factory, steps=range(200), seed=0) -> bytes:
    logdir = tmp_path_factory.mktemp("tb")
    rng = np.random.default_rng(seed)
    with SummaryWriter(log_dir=str(logdir)) as writer:
        for step in steps:
            for tag in TAGS:
                writer.add_scalar(tag, float(rng.standard_normal()), global_step=step, walltime=1.7e9 + step)
    (path,) = list(logdir.glob("*tfevents*"))
    return path.read_bytes()


@pytest.fixture(scope="module")
def torch_bytes(tmp_path_factory) -> bytes:
    return _torch_file_bytes(tmp_path_factory)


def _reader(path) -> RunEvents:
    events = RunEvents()
    events.set_files([path])
    return events


def _complete_prefix(data: bytes, upto: int) -> int:
    """End of the last whole record in data[:upto]."""
    end = 0
    for pos, length in records(data[:upto]):
        end = pos + 16 + length
    return end


def test_live_tail_a_few_records_at_a_time_with_records_cut_in_half(tmp_path, torch_bytes):
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"")
    events = _reader(path)
    rng = np.random.default_rng(7)
    written = 0
    polls = 0
    while written < len(torch_bytes):
        # Mostly a few records' worth, sometimes a big burst (templates), cuts anywhere.
        size = int(rng.integers(1, 400)) if rng.random() < 0.8 else int(rng.integers(2000, 6000))
        piece = torch_bytes[written : written + size]
        with open(path, "ab") as f:
            f.write(piece)
        written += len(piece)
        stats = events.poll()
        polls += 1
        whole = _complete_prefix(torch_bytes, written)
        assert stats.pending_bytes == written - whole
        assert stats.corrupt_records == 0 and stats.skipped_bytes == 0
        assert same_points(as_points(events.scalars), tensorboard_shows([torch_bytes[:whole]]))
    assert polls > 20
    assert same_points(as_points(events.scalars), tensorboard_shows([torch_bytes]))


def test_appended_events_read_only_the_new_bytes(tmp_path, torch_bytes):
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(torch_bytes)
    events = _reader(path)
    events.poll()
    version = events.scalars.version
    extra = b"".join(
        frame(scalar_event(TAGS[i % 3], 200 + i // 3, float(i), 1.8e9 + i).SerializeToString()) for i in range(1000)
    )
    with open(path, "ab") as f:
        f.write(extra)
    stats = events.poll()
    assert stats.bytes_read == len(extra) and stats.records == 1000 and stats.slow_records < 50
    assert events.scalars.version > version
    assert events.poll().bytes_read == 0  # nothing new, nothing read
    assert same_points(as_points(events.scalars), tensorboard_shows([torch_bytes + extra]))


def test_zero_filled_tail_is_pending_then_read_when_the_data_lands(tmp_path, torch_bytes):
    path = tmp_path / "events.out.tfevents.1.host"
    cut = _complete_prefix(torch_bytes, len(torch_bytes) // 2)
    path.write_bytes(torch_bytes[:cut] + b"\0" * 4096)  # size grew, data not there yet (NFS, crash)
    events = _reader(path)
    stats = events.poll()
    assert stats.pending_bytes == 4096 and stats.corrupt_records == 0 and stats.skipped_bytes == 0
    assert same_points(as_points(events.scalars), tensorboard_shows([torch_bytes[:cut]]))
    with open(path, "r+b") as f:  # the writer's bytes arrive over the zeros, and more after
        f.seek(cut)
        f.write(torch_bytes[cut:])
    stats = events.poll()
    assert stats.corrupt_records == 0 and stats.skipped_bytes == 0 and stats.resets == 0
    assert same_points(as_points(events.scalars), tensorboard_shows([torch_bytes]))


def test_zero_hole_followed_by_data_is_skipped(tmp_path, torch_bytes):
    path = tmp_path / "events.out.tfevents.1.host"
    cut = _complete_prefix(torch_bytes, len(torch_bytes) // 2)
    path.write_bytes(torch_bytes[:cut] + b"\0" * 1000 + torch_bytes[cut:])
    stats = _reader(path).poll()
    assert stats.skipped_bytes == 1000 and stats.corrupt_records == 1 and stats.pending_bytes == 0


@pytest.mark.parametrize("where", ["length", "length_crc", "tag", "value"])
def test_flipped_byte_in_the_middle_loses_only_that_record(tmp_path, torch_bytes, where):
    recs = records(torch_bytes)
    victim = len(recs) // 2
    pos, length = recs[victim]
    offset = {"length": pos, "length_crc": pos + 9, "tag": pos + 12 + length - 8, "value": pos + 12 + length - 1}[where]
    data = bytearray(torch_bytes)
    data[offset] ^= 0x5A
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(bytes(data))
    events = _reader(path)
    stats = events.poll()
    assert stats.corrupt_records == 1
    if where in ("length", "length_crc"):
        assert stats.skipped_bytes == 16 + length  # resync at the next record
    wanted = torch_bytes[:pos] + torch_bytes[pos + 16 + length :]  # the file without that record
    assert same_points(as_points(events.scalars), tensorboard_shows([wanted]))


def test_truncated_file_is_read_again_from_the_start(tmp_path, torch_bytes):
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(torch_bytes)
    events = _reader(path)
    events.poll()
    cut = len(torch_bytes) // 3
    with open(path, "r+b") as f:
        f.truncate(cut)
    stats = events.poll()
    assert stats.resets == 1
    whole = _complete_prefix(torch_bytes, cut)
    assert stats.pending_bytes == cut - whole
    assert same_points(as_points(events.scalars), tensorboard_shows([torch_bytes[:whole]]))


def test_rsync_style_replaced_file_new_inode_is_read_again(tmp_path, tmp_path_factory, torch_bytes):
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(torch_bytes)
    events = _reader(path)
    events.poll()
    other = _torch_file_bytes(tmp_path_factory, steps=range(300), seed=5)  # bigger, other values
    staging = tmp_path / ".events.out.tfevents.1.host.XYZ"
    staging.write_bytes(other)
    os.replace(staging, path)  # rsync without --inplace: new inode, same name
    stats = events.poll()
    assert stats.resets == 1
    assert same_points(as_points(events.scalars), tensorboard_shows([other]))


def test_vanished_file_keeps_its_points(tmp_path, torch_bytes):
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(torch_bytes)
    events = _reader(path)
    events.poll()
    path.unlink()
    stats = events.poll()
    assert stats.resets == 0 and stats.bytes_read == 0
    assert same_points(as_points(events.scalars), tensorboard_shows([torch_bytes]))


def _absurd_header(length: int) -> bytes:
    header = struct.pack("<Q", length)
    return header + struct.pack("<I", masked_crc32c(header))  # a length CRC that passes


def test_record_claiming_length_2_63_does_not_allocate_and_is_stepped_over(tmp_path, torch_bytes):
    path = tmp_path / "events.out.tfevents.1.host"
    cut = _complete_prefix(torch_bytes, len(torch_bytes) // 2)
    path.write_bytes(torch_bytes[:cut] + _absurd_header(1 << 63))
    events = _reader(path)
    tracemalloc.start()
    stats = events.poll()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 64 << 20
    assert stats.pending_bytes == 12 and stats.corrupt_records == 0  # at the tail: maybe still being written
    with open(path, "ab") as f:
        f.write(torch_bytes[cut:])
    stats = events.poll()
    assert stats.corrupt_records == 1 and stats.skipped_bytes == 12
    assert same_points(as_points(events.scalars), tensorboard_shows([torch_bytes]))


def test_garbage_tail_waits_then_resyncs_when_records_follow(tmp_path, torch_bytes):
    path = tmp_path / "events.out.tfevents.1.host"
    cut = _complete_prefix(torch_bytes, len(torch_bytes) // 2)
    garbage = bytes(np.random.default_rng(1).integers(1, 256, 300, dtype=np.uint8))
    path.write_bytes(torch_bytes[:cut] + garbage)
    events = _reader(path)
    assert events.poll().pending_bytes == 300
    # Whole headers that fail the length check are no write in progress: the file says so meanwhile.
    assert events.problems == {
        path: f"no TFRecord from byte {cut} on (300 bytes fail the length check and no whole record follows): "
        "damaged, or not an event file"
    }
    events.poll()  # the same bytes again (the quiet path): still said
    assert path in events.problems
    with open(path, "ab") as f:
        f.write(torch_bytes[cut:])
    stats = events.poll()
    assert stats.skipped_bytes == 300 and stats.corrupt_records == 1
    assert same_points(as_points(events.scalars), tensorboard_shows([torch_bytes]))
    assert events.problems == {}


@pytest.mark.parametrize("tail", ["half a record", "zeros", "garbage"])
def test_a_tail_still_being_written_is_pending_and_only_a_damaged_one_is_said(tmp_path, torch_bytes, tail):
    last_start = records(torch_bytes)[-1][0]
    data, whole = {
        "half a record": (torch_bytes[: last_start + 9], torch_bytes[:last_start]),
        "zeros": (torch_bytes + bytes(4096), torch_bytes),
        "garbage": (torch_bytes + b"\x07" * 333, torch_bytes),
    }[tail]
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(data)
    events = _reader(path)
    stats = events.poll()
    assert stats.pending_bytes == len(data) - len(whole) and stats.corrupt_records == 0
    assert same_points(as_points(events.scalars), tensorboard_shows([whole]))
    # A whole header that fails its length check is no write in progress: said; a cut record or zeros wait.
    message = f"no TFRecord from byte {len(torch_bytes)} on (333 bytes fail the length check and no whole record "
    said = {path: message + "follows): damaged, or not an event file"}
    assert events.problems == (said if tail == "garbage" else {})


@pytest.mark.parametrize("where", [0.2, 0.5, 0.8])
def test_damage_reads_the_same_in_read_windows_smaller_than_the_file(tmp_path, monkeypatch, torch_bytes, where):
    """A resync past damage that meets a window's end reads on as one window over the whole file does."""
    from triage_tui.core.read.events import tuning

    starts = [pos for pos, _ in records(torch_bytes)]
    at = starts[int(len(starts) * where)] + 20
    data = bytearray(torch_bytes)
    data[at : at + 7] = b"\xff" * 7
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(bytes(data))

    def read() -> tuple:
        events = _reader(path)
        stats = events.poll()
        counts = (stats.corrupt_records, stats.skipped_bytes, stats.pending_bytes)
        return as_points(events.scalars), counts, events.damaged

    one_window = read()
    assert one_window[1][0] > 0
    for window in (1 << 10, 4 << 10):
        monkeypatch.setattr(tuning, "READ_WINDOW", window)
        assert read() == one_window


def test_a_file_of_random_bytes_is_an_error_of_its_run_not_a_run_waiting(tmp_path, torch_bytes, capsys):
    from triage_tui import cli

    bad = tmp_path / "tree" / "bad" / "events.out.tfevents.1.host.1.0"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(np.random.default_rng(7).integers(1, 256, 4096, dtype=np.uint8).tobytes())
    good = tmp_path / "tree" / "good" / "events.out.tfevents.1.host.2.0"
    good.parent.mkdir(parents=True)
    good.write_bytes(torch_bytes)
    assert cli.main(["scan", str(tmp_path / "tree"), "--json"]) == 1
    runs = {run["name"]: run for run in json.loads(capsys.readouterr().out)["runs"]}
    assert runs["bad"]["status"] == "error"
    assert runs["bad"]["errors"] == [
        {
            "source": "tensorboard",
            "path": str(bad),
            "message": "not a TensorBoard event file: no valid record in it",
        }
    ]
    assert runs["good"]["errors"] == [] and runs["good"]["metrics"]["loss"] is not None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=4096), st.booleans())
def test_random_bytes_never_crash(tmp_path, blob, valid_first):
    path = tmp_path / "events.out.tfevents.random"
    first = frame(scalar_event("ok", 1, 2.0, 3.0).SerializeToString())
    path.write_bytes((first if valid_first else b"") + blob)
    events = _reader(path)
    stats = events.poll()
    assert stats.records >= int(valid_first)
    if valid_first:  # random bytes cannot pass two CRCs: the good record stands alone
        assert as_points(events.scalars) == {"ok": [(1, 3.0, 2.0)]}
    events.poll()  # a second look at the same bytes reads nothing new and does not fail


_MUTATION = st.tuples(
    st.sampled_from(["flip", "overwrite", "insert", "delete", "zero", "truncate"]),
    st.floats(0, 1, exclude_max=True),
    st.binary(min_size=1, max_size=64),
)


def _mutate(data: bytes, mutations) -> tuple[bytes, int]:
    """Apply mutations; return the new bytes and the first offset that differs from `data`."""
    out = bytearray(data)
    for kind, where, blob in mutations:
        at = int(where * len(out)) if out else 0
        if kind == "flip" and out:
            out[at] ^= blob[0] or 1
        elif kind == "overwrite":
            out[at : at + len(blob)] = blob
        elif kind == "insert":
            out[at:at] = blob
        elif kind == "delete":
            del out[at : at + len(blob)]
        elif kind == "zero":
            out[at : at + len(blob)] = bytes(len(blob))
        else:
            del out[at:]
    damaged = bytes(out)
    first = next(
        (i for i, (a, b) in enumerate(zip(damaged, data, strict=False)) if a != b), min(len(damaged), len(data))
    )
    return damaged, first


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_MUTATION, min_size=1, max_size=4))
def test_mutated_real_files_keep_every_record_before_the_damage(tmp_path, torch_bytes, mutations):
    data, first_damage = _mutate(torch_bytes, mutations)
    path = tmp_path / "events.out.tfevents.mutated"
    path.write_bytes(data)
    events = _reader(path)
    events.poll()
    intact = _complete_prefix(torch_bytes, first_damage)
    before = tensorboard_shows([torch_bytes[:intact]])
    got = as_points(events.scalars)
    for tag, points in before.items():
        assert tag in got
        # Later valid records of the same tag have larger steps, so nothing before the damage is evicted.
        assert same_points({tag: got[tag][: len(points)]}, {tag: points})


def test_unreadable_and_special_files_are_counted_not_fatal(tmp_path, torch_bytes):
    good = tmp_path / "events.out.tfevents.1.good"
    good.write_bytes(torch_bytes)
    fifo = tmp_path / "events.out.tfevents.2.fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "events.out.tfevents.3.dir"
    folder.mkdir()
    events = RunEvents()
    events.set_files([good, fifo, folder, tmp_path / "events.out.tfevents.4.not-yet"])
    stats = events.poll()  # would hang on the FIFO with a blocking open
    assert stats.unreadable_files == 2 and stats.files == 4
    assert same_points(as_points(events.scalars), tensorboard_shows([torch_bytes]))


def test_sparse_zero_tail_costs_nothing_per_poll_and_data_after_it_is_found(tmp_path, torch_bytes):
    """A 1 GiB sparse zero tail (a preallocated or crashed file) used to be read whole, in doubling
    windows, on every poll (1 GiB: 56 s and 1.5 GB in `scan`). Holes are skipped with SEEK_DATA and a
    tail that could not be taken is not read again until the file changes."""
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(torch_bytes)
    hole = 1 << 30
    with open(path, "r+b") as f:
        f.truncate(len(torch_bytes) + hole)  # sparse: no block is written
    old = os.stat(path).st_mtime - 60
    os.utime(path, (old, old))  # an mtime the next write will change (see RunEvents' racy rule)
    events = _reader(path)
    tracemalloc.start()
    try:
        stats = events.poll()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stats.pending_bytes == hole and stats.corrupt_records == 0
    assert stats.bytes_read <= len(torch_bytes) + (16 << 20) and peak < 256 << 20, (stats, peak)
    assert same_points(as_points(events.scalars), tensorboard_shows([torch_bytes]))
    again = events.poll()
    assert again.bytes_read == 0 and again.pending_bytes == hole
    extra = b"".join(
        frame(scalar_event("train/ploss_0", 10_000 + i, 1.0, 1.8e9 + i).SerializeToString()) for i in range(10)
    )
    with open(path, "ab") as f:  # the writer goes on after the hole
        f.write(extra)
    stats = events.poll()
    assert stats.records == 10 and stats.corrupt_records == 1 and stats.skipped_bytes == hole
    assert stats.bytes_read < 64 << 20 and stats.pending_bytes == 0
    assert events.scalars.get("train/ploss_0").steps[-1] == 10_009
