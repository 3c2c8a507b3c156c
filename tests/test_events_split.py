"""A big file's first read split in two (core/events/split_read.py): a forked child decodes the
second half. Whatever the file holds (new tags in the second half, a purging restart there, NaN
wall times, long records, damage anywhere, a half-written or zero-filled tail), the run reads
exactly as a read front to back does: the same series, bit for bit, the same restarts, purges,
statistics and file state."""

from __future__ import annotations

import dataclasses
import os
import threading

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from builders.events import records
from triage_tui.core import fileio
from triage_tui.core.events import split_read, tuning
from triage_tui.core.events.reader import RunEvents

TAGS = ["train/ploss_0", "train/acc_0", "train/lr", "train/grad_norm"]
STEPS = 1200


def _writer_bytes(log_dir, steps, *, purge_step=None, late_tags=(), seed=0) -> bytes:
    """What torch's SummaryWriter writes: scalars, text and histograms every so often, tags that
    first appear half way, and NaN wall times now and then."""
    rng = np.random.default_rng(seed)
    with SummaryWriter(log_dir=str(log_dir), purge_step=purge_step) as writer:
        for step in steps:
            wall = float("nan") if step % 97 == 13 else 1.7e9 + step
            for tag in TAGS:
                writer.add_scalar(tag, float(rng.standard_normal()), global_step=step, walltime=wall)
            if step >= steps[len(steps) // 2]:
                for tag in late_tags:
                    writer.add_scalar(tag, float(rng.random()), global_step=step, walltime=1.7e9 + step)
            if step % 50 == 0:
                writer.add_text("notes", f"step {step}", global_step=step)
                writer.add_histogram("weights", rng.standard_normal(500), global_step=step)
    (path,) = list(log_dir.glob("*tfevents*"))
    return path.read_bytes()


@pytest.fixture(scope="module")
def one_writer(tmp_path_factory) -> bytes:
    return _writer_bytes(tmp_path_factory.mktemp("tb"), range(STEPS), late_tags=["eval/acc_1", "eval/ploss_1"])


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> bytes:
    """Three writers' records in one file: a run to step 900, resumed from 600 (purge_step), then
    from 800. A file's first START after summaries of its own is a writer's own and ignored (as
    TensorBoard does); the second, in the file's second half, purges steps >= 800 of the first half."""
    first = _writer_bytes(tmp_path_factory.mktemp("tb"), range(900))
    second = _writer_bytes(tmp_path_factory.mktemp("tb"), range(600, 1000), purge_step=600, seed=1)
    third = _writer_bytes(tmp_path_factory.mktemp("tb"), range(800, 1100), purge_step=800, seed=2)
    assert len(first + second) > len(first + second + third) // 2
    return first + second + third


@pytest.fixture
def small_splits(monkeypatch):
    """Split any file of a few records (the real threshold is 16 MB), in a pytest worker that
    may have threads of its own (this process forks only this module's child)."""
    monkeypatch.setattr(tuning, "SPLIT_MIN_BYTES", 4096)
    monkeypatch.setattr(tuning, "SPLIT_PROBE", 16 << 10)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)


@pytest.fixture
def splits(monkeypatch) -> list:
    """What each split read answered."""
    answers = []
    real = split_read.read_split

    def spy(*args, **kwargs):
        answers.append(real(*args, **kwargs))
        return answers[-1]

    monkeypatch.setattr("triage_tui.core.events.reader.read_split", spy)
    return answers


def _fingerprint(events: RunEvents, stats) -> dict:
    """Everything a poll leaves behind, in the order it was made."""
    return {
        "series": [
            (
                tag,
                s.plugin,
                s.steps.tobytes(),
                s.wall_times.tobytes(),
                s.values.tobytes(),
                s.restarts,
            )
            # By name: the order series were met in is the reading's (windows, polls), no contract.
            for tag, s in sorted(events.scalars.series.items())
        ],
        "purges": list(events.scalars.purges),
        # bytes_read counts I/O, and a read past damage in a small window reads some bytes twice:
        # another figure where the child's windows start elsewhere (the tests below pin it undamaged).
        "stats": {k: v for k, v in dataclasses.asdict(stats).items() if k != "bytes_read"},
        "bytes_read": stats.bytes_read,
        "damaged": {str(k): v for k, v in events.damaged.items()},
        "problems": {str(k): v for k, v in events.problems.items()},
        "files": [
            (state.offset, state.file_version, state.seen_start, state.seen_summary, sorted(state.series_seen))
            for state in events._files.values()
        ],
    }


def _read(paths, *, split_files: bool) -> dict:
    events = RunEvents()
    events.set_files(paths)
    stats = events.poll(split_files=split_files)
    return _fingerprint(events, stats)


def _both(paths) -> tuple[dict, dict]:
    return _read(paths, split_files=True), _read(paths, split_files=False)


def test_a_whole_file_reads_the_same_split_or_not(tmp_path, one_writer, small_splits, splits):
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(one_writer)
    split, serial = _both([path])
    assert splits == [split_read.Split.WHOLE]
    assert split == serial
    assert split["bytes_read"] == len(one_writer)  # each byte read once, here or in the child
    tags = [tag for tag, *_ in split["series"]]
    assert {"eval/acc_1", "eval/ploss_1"} <= set(tags)  # tags the child met first, this process too
    assert split["stats"]["dropped_points"] > 0 and split["stats"]["slow_records"] > 0


def test_a_restart_in_the_second_half_purges_the_first_half(tmp_path, resumed, small_splits, splits):
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(resumed)
    split, serial = _both([path])
    assert splits == [split_read.Split.WHOLE]
    assert split == serial
    assert split["purges"] == [800]
    loss = next(s for s in split["series"] if s[0] == "train/ploss_0")
    steps = np.frombuffer(loss[2], np.int64)
    # The earlier writers' 800.. purged; the third's kept but for its NaN wall times.
    assert steps[-1] == 1099 and np.count_nonzero(steps >= 800) == sum(s % 97 != 13 for s in range(800, 1100))


def test_each_big_file_of_a_run_splits_and_the_run_reads_the_same(tmp_path, one_writer, resumed, small_splits, splits):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    paths = [tmp_path / "a" / "events.out.tfevents.1.host", tmp_path / "b" / "events.out.tfevents.2.host"]
    paths[0].write_bytes(one_writer)
    paths[1].write_bytes(resumed)
    split, serial = _both(paths)
    assert splits == [split_read.Split.WHOLE, split_read.Split.WHOLE]
    assert split == serial


def _damage_offsets(data: bytes) -> list[int]:
    """Inside a record of the first half, just before and at the middle, and in the second half."""
    starts = [pos for pos, _ in records(data)]
    middle = len(data) // 2
    near = min(starts, key=lambda pos: abs(pos - middle))
    return [starts[len(starts) // 5] + 20, near - 30, near + 3, near + 40, starts[4 * len(starts) // 5] + 20]


@pytest.mark.parametrize("which", range(5))
@pytest.mark.parametrize("window", [64 << 20, 48 << 10])
def test_damage_anywhere_reads_the_same(tmp_path, monkeypatch, one_writer, small_splits, splits, which, window):
    monkeypatch.setattr(tuning, "READ_WINDOW", window)
    data = bytearray(one_writer)
    at = _damage_offsets(one_writer)[which]
    data[at : at + 7] = b"\xff" * 7
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(bytes(data))
    with open(path, "rb") as handle:
        middle = split_read.boundary(handle.fileno(), len(data) // 2, len(data))
    split, serial = _both([path])
    split.pop("bytes_read"), serial.pop("bytes_read")
    assert split == serial
    assert split["stats"]["corrupt_records"] > 0
    # Damage before the boundary: the run is read again front to back; after it, the child steps over it.
    assert splits == [split_read.Split.UNCLEAN if at < middle else split_read.Split.WHOLE]


@pytest.mark.parametrize("tail", ["half a record", "zeros", "garbage"])
def test_a_tail_still_being_written_is_pending_in_both(tmp_path, one_writer, small_splits, splits, tail):
    last_start = records(one_writer)[-1][0]
    cut = {"half a record": one_writer[: last_start + 9], "zeros": one_writer + bytes(4096)}
    data = cut.get(tail, one_writer + b"\x07" * 333)
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(data)
    split, serial = _both([path])
    assert splits == [split_read.Split.WHOLE]
    assert split == serial
    assert split["stats"]["pending_bytes"] > 0
    # A whole header that fails its length check is no write in progress: said, in both readings.
    message = f"no TFRecord from byte {len(one_writer)} on (333 bytes fail the length check and no whole record "
    said = {str(path): message + "follows): damaged, or not an event file"}
    assert split["problems"] == (said if tail == "garbage" else {})


def test_a_child_that_fails_leaves_the_second_half_to_this_process(
    tmp_path, monkeypatch, one_writer, small_splits, splits
):
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(one_writer)
    parent = os.getpid()
    real_open = fileio.open_polled

    def open_in_parent_only(*args, **kwargs):
        if os.getpid() != parent:
            raise OSError(5, "Input/output error")
        return real_open(*args, **kwargs)

    monkeypatch.setattr(fileio, "open_polled", open_in_parent_only)
    split, serial = _both([path])
    assert splits == [split_read.Split.PART]
    assert split == serial


def test_a_file_replaced_before_the_child_opens_it_is_not_mixed_in(
    tmp_path, monkeypatch, one_writer, small_splits, splits
):
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(one_writer)
    other = tmp_path / "other"
    other.write_bytes(one_writer)  # the same bytes, another inode: the child must not read it
    parent = os.getpid()
    real_open = fileio.open_polled
    monkeypatch.setattr(fileio, "open_polled", lambda p, **kw: real_open(other if os.getpid() != parent else p, **kw))
    split, serial = _both([path])
    assert splits == [split_read.Split.PART]
    assert split == serial


def test_no_split_where_a_fork_is_unsafe_or_the_file_small(tmp_path, monkeypatch, one_writer):
    state = split_read.FileState(tmp_path / "f")
    monkeypatch.setattr(tuning, "SPLIT_MIN_BYTES", 4096)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    assert split_read.worth_splitting(state, 4096)
    assert not split_read.worth_splitting(state, 4095)
    state.offset = 100  # only what is unread counts
    assert not split_read.worth_splitting(state, 4096)
    state.offset = 0
    monkeypatch.setattr(threading, "active_count", lambda: 2)  # the TUI's threads: never fork there
    assert not split_read.worth_splitting(state, 1 << 30)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)  # one core
    assert not split_read.worth_splitting(state, 1 << 30)


def test_the_boundary_is_a_record_start_with_records_chained_after_it(tmp_path, one_writer, monkeypatch):
    monkeypatch.setattr(tuning, "SPLIT_PROBE", 16 << 10)
    path = tmp_path / "f"
    path.write_bytes(one_writer)
    starts = {pos for pos, _ in records(one_writer)}
    with open(path, "rb") as handle:
        for near in range(0, len(one_writer) - (16 << 10), len(one_writer) // 37):
            found = split_read.boundary(handle.fileno(), near, len(one_writer))
            assert found is not None and found >= near and found in starts
            assert not any(near <= s < found for s in starts if s + 16 <= len(one_writer))  # the first one
        # A probe past the last record finds nothing to start from.
        assert split_read.boundary(handle.fileno(), len(one_writer) - 3, len(one_writer)) is None
