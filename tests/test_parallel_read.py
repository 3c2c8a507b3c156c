"""Reading runs on two cores: the helper process's runs come back whole and the result is the one
reading them here gives, whether the helper works, dies, or never starts, forked or a fresh
interpreter."""

from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np
import pytest

from builders.events import frame, scalar_event
from builders.tensorboard import write_scalars
from builders.waiting import out_of_patience
from triage_tui.core import parallel_read
from triage_tui.core.events.reader import RunEvents, find_event_files
from triage_tui.core.watch import Watcher


@pytest.fixture()
def sweep(tmp_path):
    """Six SpecForge-like runs written by torch's SummaryWriter, one of them at chance."""
    for r in range(6):
        losses = [(s, (10.4 if r == 2 else 6.0 - r * 0.3) + 0.01 * np.sin(s)) for s in range(0, 400, 2)]
        accs = [(s, 0.02 if r == 2 else 0.3 + s / 4000) for s in range(0, 400, 2)]
        write_scalars(tmp_path / f"run_{r}" / "runs", {"train/ploss_0": losses, "train/acc_0": accs}, wall_time=1.7e9)
    return tmp_path


def _runs(root):
    runs = []
    for run in sorted(p for p in root.iterdir() if p.is_dir()):
        events = RunEvents()
        events.set_files(find_event_files(run))
        runs.append(events)
    return runs


def _points(events: RunEvents) -> dict:
    return {tag: [a.tolist() for a in s.columns()] for tag, s in events.scalars.series.items()}


def _sequential(root) -> list[dict]:
    runs = _runs(root)
    for events in runs:
        events.poll()
    return [_points(e) for e in runs]


@pytest.fixture(params=["fork", "fresh interpreter"])
def how(request, monkeypatch) -> str:
    """How helpers start: forks where this process has one thread (a thread an earlier test left in
    this pytest worker would rightly prevent it: pinned), or fresh interpreters."""
    if request.param == "fork":
        monkeypatch.setattr(threading, "active_count", lambda: 1)
    else:
        monkeypatch.setattr(parallel_read, "_can_fork", lambda: False)
    return request.param


@pytest.fixture
def started(monkeypatch) -> list:
    """Each helper process started, as the object standing for it."""
    procs: list = []
    real = parallel_read._start_process
    monkeypatch.setattr(parallel_read, "_start_process", lambda *a: procs.append(real(*a)) or procs[-1])
    return procs


def test_the_helper_reads_runs_from_the_back_and_they_come_back_whole(sweep, how, started):
    runs = _runs(sweep)
    done: dict[int, RunEvents] = {}
    parallel_read.read_runs(runs, lambda i, events: done.setdefault(i, events))
    assert sorted(done) == list(range(6))
    by_helper = [i for i, events in done.items() if events is not runs[i]]
    assert by_helper and min(by_helper) >= 3  # the helper starts at the back; this process at the front
    assert [_points(done[i]) for i in range(6)] == _sequential(sweep)
    assert len(started) == 1 and isinstance(started[0], parallel_read._Forked) == (how == "fork")
    assert started[0].poll() is not None  # closed: it exited at the end of its input
    # The copy carries on where the helper stopped: an append is read, nothing is read twice.
    last = done[5]
    (path,) = find_event_files(sweep / "run_5")
    with open(path, "ab") as f:  # what the trainer's open writer appends next
        f.write(frame(scalar_event("train/ploss_0", 1000, 1.5, 1.8e9).SerializeToString()))
    stats = last.poll()
    assert stats.scalars == 1 and stats.bytes_read < 200
    assert last.scalars.get("train/ploss_0").last()[0] == 1000


def test_the_tuis_way_leaves_every_run_to_the_helpers(sweep, monkeypatch):
    # here=False: one helper per core reads every run; this process parses none (its UI thread keeps the GIL).
    monkeypatch.setattr(parallel_read, "_cores", lambda: 2)
    runs = _runs(sweep)
    done: dict[int, RunEvents] = {}
    parallel_read.read_runs(runs, lambda i, events: done.setdefault(i, events), here=False)
    assert sorted(done) == list(range(6))
    assert all(done[i] is not runs[i] for i in range(6))
    assert all(runs[i].scalars.points == 0 for i in range(6))  # nothing was read in this process
    assert [_points(done[i]) for i in range(6)] == _sequential(sweep)


def test_many_cores_start_at_most_max_helpers(sweep, monkeypatch, how, started):
    monkeypatch.setattr(parallel_read, "_cores", lambda: 64)
    done: dict[int, RunEvents] = {}
    parallel_read.read_runs(_runs(sweep), lambda i, events: done.setdefault(i, events), here=False)
    assert len(started) == parallel_read._MAX_HELPERS and sorted(done) == list(range(6))


@pytest.mark.parametrize("here", [True, False])
@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "-c", "import sys; sys.stdin.buffer.read(8)"],  # takes a message, then exits
        [sys.executable, "-c", "raise SystemExit(3)"],  # dies at once
        ["/nonexistent/python"],  # never starts
    ],
)
def test_a_helper_that_fails_leaves_every_run_read_here(sweep, command, here, monkeypatch):
    monkeypatch.setattr(parallel_read, "_cores", lambda: 2)
    runs = _runs(sweep)
    done: dict[int, RunEvents] = {}
    parallel_read.read_runs(runs, lambda i, events: done.setdefault(i, events), helper_command=command, here=here)
    assert sorted(done) == list(range(6))
    assert all(done[i] is runs[i] for i in range(6))
    assert [_points(e) for e in runs] == _sequential(sweep)


def test_a_message_carries_a_run_whole_each_array_in_memory_of_its_own(sweep):
    """A run travels as a pickle whose arrays go out of band: read back into arrays that own their
    bytes (one freed when its series outgrows it frees just that), writable, every point the same."""
    import io

    (events,) = _runs(sweep)[:1]
    events.poll()
    stream = io.BytesIO()
    parallel_read._write_message(stream, (7, events))
    data = stream.getvalue()
    index, back = parallel_read._read_message(io.BytesIO(data))
    assert index == 7 and _points(back) == _points(events)
    arrays = [a for series in back.scalars.series.values() for a in (series._steps, series._walls, series._values)]
    assert arrays and all(a.flags.writeable for a in arrays)
    assert all(a.base is not None and a.base.nbytes == a.nbytes for a in arrays)  # no shared block
    assert len({id(a.base) for a in arrays}) == len(arrays)
    assert sum(a.nbytes for a in arrays) <= len(data)  # the arrays are in the message once
    # A torn message (the helper died mid-write) is no message.
    for cut in (5, 16, len(data) // 2, len(data) - 1):
        assert parallel_read._read_message(io.BytesIO(data[:cut])) is None


def test_worth_a_helper_needs_two_runs_and_enough_bytes(sweep, monkeypatch):
    runs = _runs(sweep)
    monkeypatch.setattr(parallel_read, "_cores", lambda: 2)
    assert parallel_read.worth_a_helper(runs, min_bytes=0)
    assert not parallel_read.worth_a_helper(runs[:1], min_bytes=0)
    assert not parallel_read.worth_a_helper(runs, min_bytes=10**12)
    monkeypatch.setattr(parallel_read, "_cores", lambda: 1)
    assert not parallel_read.worth_a_helper(runs, min_bytes=0)


def test_the_watcher_gives_the_same_statuses_on_two_cores(sweep, monkeypatch):
    monkeypatch.setattr(parallel_read, "_cores", lambda: 2)
    progress: list[int] = []
    monkeypatch.setattr("triage_tui.core.watch.PROGRESS_SECS", 0.0)  # report after every run
    parallel = Watcher([sweep], use_watchdog=False, parallel_min_bytes=0, clock=lambda: 1.7e9 + 500)
    statuses = parallel.poll_once(on_progress=lambda s: progress.append(len(s)))
    alone = Watcher([sweep], use_watchdog=False, parallel_min_bytes=None, clock=lambda: 1.7e9 + 500).poll_once()
    helpers_only = Watcher(
        [sweep], use_watchdog=False, parallel_min_bytes=0, parse_in_helpers=True, clock=lambda: 1.7e9 + 500
    ).poll_once()
    assert [json.dumps(s.to_json()) for s in statuses] == [json.dumps(s.to_json()) for s in alone]
    assert [json.dumps(s.to_json()) for s in helpers_only] == [json.dumps(s.to_json()) for s in alone]
    assert sum(s.status == "critical" for s in statuses) == 1  # run_2, at chance
    assert progress and progress[0] < 6  # rows arrive while the rest is read
    assert parallel.poll_once()[0] is statuses[0]  # the next poll is incremental: nothing changed


def _wait_for_early_helpers(count: int) -> list:
    start = time.monotonic()
    while not out_of_patience(start, 5.0):
        with parallel_read._EARLY._lock:
            procs = list(parallel_read._EARLY._procs)
        if len(procs) >= count:
            return procs
        time.sleep(0.01)
    raise AssertionError(f"{count} early helpers never started")


def test_helpers_started_early_are_the_ones_the_first_load_uses(sweep, monkeypatch, how, started):
    # The TUI starts them before it imports Textual; the watcher's first poll adopts them.
    monkeypatch.setattr(parallel_read, "_cores", lambda: 2)
    parallel_read.start_helpers_early([sweep], min_bytes=1)
    early = _wait_for_early_helpers(2)
    assert all(isinstance(proc, parallel_read._Forked) == (how == "fork") for proc in early)
    statuses = Watcher(
        [sweep], use_watchdog=False, parallel_min_bytes=0, parse_in_helpers=True, clock=lambda: 1.7e9 + 500
    ).poll_once()
    alone = Watcher([sweep], use_watchdog=False, parallel_min_bytes=None, clock=lambda: 1.7e9 + 500).poll_once()
    assert not started  # no helper was started by the poll: it took the early ones
    assert all(proc.poll() is not None for proc in early)  # and closed them when done
    assert [json.dumps(s.to_json()) for s in statuses] == [json.dumps(s.to_json()) for s in alone]


def test_early_forks_a_small_tree_never_needed_are_closed_by_the_first_poll(sweep, monkeypatch):
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # see `how`
    monkeypatch.setattr(parallel_read, "_cores", lambda: 2)
    parallel_read.start_helpers_early([sweep])  # a few KiB: forked all the same, at ~1 ms each
    early = _wait_for_early_helpers(2)
    assert all(proc.poll() is None for proc in early)
    Watcher([sweep], use_watchdog=False, clock=lambda: 1.7e9 + 500).poll_once()  # reads here: too small
    assert all(proc.poll() is not None for proc in early)


def test_early_helpers_a_small_tree_never_needed_are_not_started_or_are_closed(sweep, monkeypatch):
    monkeypatch.setattr(parallel_read, "_can_fork", lambda: False)  # fresh interpreters: the walk decides
    monkeypatch.setattr(parallel_read, "_cores", lambda: 2)
    spawned = []
    real_spawn = parallel_read._spawn
    monkeypatch.setattr(parallel_read, "_spawn", lambda *a: spawned.append(1) or real_spawn(*a))
    parallel_read.start_helpers_early([sweep])  # a few KiB: under MIN_PARALLEL_BYTES
    Watcher([sweep], use_watchdog=False, clock=lambda: 1.7e9 + 500).poll_once()
    assert not spawned
    # Started (the walk counted enough) but the first poll read in this process: closed by that poll.
    parallel_read.start_helpers_early([sweep], min_bytes=1)
    early = _wait_for_early_helpers(2)
    Watcher([sweep], use_watchdog=False, parallel_min_bytes=None, clock=lambda: 1.7e9 + 500).poll_once()
    assert all(proc.poll() is not None for proc in early)
    parallel_read.start_helpers_early([sweep], min_bytes=1)  # released: a later one starts afresh
    for proc in _wait_for_early_helpers(2):
        assert proc.poll() is None
    parallel_read.release_early_helpers()
