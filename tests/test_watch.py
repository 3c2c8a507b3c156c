"""The live watcher: polling finds appended data without inotify, watchdog only wakes it."""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from builders.tensorboard import open_writer, write_drafter_checkpoint, write_scalars
from builders.waiting import out_of_patience
from triage_tui.core.watch import fs_wakeups
from triage_tui.core.watch.process_table import ProcessScanner
from triage_tui.core.watch.watcher import RunStatus, Watcher

LN_32000 = math.log(32_000)


def only(statuses: list[RunStatus]) -> RunStatus:
    assert len(statuses) == 1, [s.info.name for s in statuses]
    return statuses[0]


def test_polling_alone_sees_appended_data_on_the_next_poll(tmp_path):
    # NFS: another host appends, inotify here sees nothing; only stat + read can notice.
    writer = open_writer(tmp_path / "run")
    watcher = Watcher([tmp_path], use_watchdog=False, rescan_interval=3600)
    try:
        first = only(watcher.poll_once())
        assert first.metrics.loss.count == 10 and first.last_step == 90
        for step in range(100, 150, 10):
            writer.add_scalar("train/ploss_0", 5.0, global_step=step)
        writer.flush()
        second = only(watcher.poll_once())
    finally:
        writer.close()
    assert second.metrics.to_json()["loss"] == {"tag": "train/ploss_0", "last": 5.0, "min": 5.0, "count": 15}
    assert second.last_step == 140


def test_idle_poll_returns_the_same_status_objects(tmp_path):
    write_scalars(tmp_path / "a", {"loss": [(0, 3.0), (10, 2.0)]})
    write_scalars(tmp_path / "b", {"loss": [(0, 3.0), (10, 2.0)]})
    watcher = Watcher([tmp_path], use_watchdog=False)
    first = watcher.poll_once()
    second = watcher.poll_once()
    assert [a is b for a, b in zip(first, second, strict=True)] == [True, True]


def test_new_runs_and_files_appear_on_rescan_and_deleted_runs_go(tmp_path):
    write_scalars(tmp_path / "a", {"loss": [(0, 3.0)]})
    watcher = Watcher([tmp_path], use_watchdog=False, rescan_interval=0.0)
    assert [s.info.name for s in watcher.poll_once()] == ["a"]
    write_scalars(tmp_path / "b", {"loss": [(0, 3.0)]})
    write_scalars(tmp_path / "a" / "eval", {"eval/loss": [(0, 4.0)]})  # a second file of run a
    statuses = {s.info.name: s for s in watcher.poll_once()}
    assert set(statuses) == {"a", "b"}
    # A series is (sub-directory, tag): the eval/ writer's tag is named under its directory.
    assert set(statuses["a"].scalars.tags()) == {"loss", "eval/eval/loss"}
    for path in sorted((tmp_path / "b").iterdir()):
        path.unlink()
    (tmp_path / "b").rmdir()
    assert [s.info.name for s in watcher.poll_once()] == ["a"]


def _run_in_thread(watcher):
    updates: queue.Queue = queue.Queue()
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(updates.put, stop), daemon=True)
    thread.start()
    return updates, stop, thread


def _wait_for(updates: queue.Queue, predicate, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            statuses = updates.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        if predicate(statuses):
            return time.monotonic()
    return None


def _until(condition, timeout: float = 5.0) -> bool:
    """``condition()`` came true within ``timeout`` (for a quiet machine, scaled by the load), looked at every 10 ms."""
    start = time.monotonic()
    while not out_of_patience(start, timeout):
        if condition():
            return True
        time.sleep(0.01)
    return bool(condition())


def _count(statuses):
    return statuses[0].metrics.loss.count if statuses else 0


def test_watchdog_events_suppressed_still_sees_data_within_the_poll_interval(tmp_path, monkeypatch):
    writer = open_writer(tmp_path / "run")
    monkeypatch.setattr(fs_wakeups, "wake_for", lambda event: None)  # inotify goes silent
    watcher = Watcher([tmp_path], poll_interval=0.5, rescan_interval=3600, use_watchdog=True)
    updates, stop, thread = _run_in_thread(watcher)
    try:
        assert _wait_for(updates, lambda s: _count(s) == 10, timeout=10.0)
        assert _until(lambda: watcher.watchdog_active)  # the observer runs; its events never arrive
        writer.add_scalar("train/ploss_0", 4.0, global_step=200)
        writer.flush()
        appended = time.monotonic()
        seen = _wait_for(updates, lambda s: _count(s) == 11, timeout=5.0)
    finally:
        stop.set()
        thread.join(timeout=5.0)
        writer.close()
    assert seen is not None, "appended data never reached on_update"
    # One poll interval plus scheduling slack on a loaded 2-core machine.
    assert seen - appended < 0.5 + 1.0
    assert not thread.is_alive()


def test_watchdog_wakes_the_poller_long_before_the_interval(tmp_path):
    writer = open_writer(tmp_path / "run")
    watcher = Watcher([tmp_path], poll_interval=60.0, rescan_interval=3600, use_watchdog=True)
    updates, stop, thread = _run_in_thread(watcher)
    try:
        assert _wait_for(updates, lambda s: _count(s) == 10, timeout=10.0)
        assert _until(lambda: watcher.watchdog_active)
        writer.add_scalar("train/ploss_0", 4.0, global_step=200)
        writer.flush()
        appended = time.monotonic()
        seen = _wait_for(updates, lambda s: _count(s) == 11, timeout=10.0)
    finally:
        stop.set()
        watcher.wake()
        thread.join(timeout=5.0)
        writer.close()
    assert seen is not None and seen - appended < 5.0  # vs a 60 s poll interval


def test_an_idle_tree_is_polled_once_per_interval_with_the_observer_on(tmp_path, monkeypatch):
    for name in ("a", "b"):
        open_writer(tmp_path / name).close()
    polls = []
    real_poll = Watcher.poll_once

    def counted(self, *args, **kwargs):
        polls.append(time.monotonic())
        return real_poll(self, *args, **kwargs)

    monkeypatch.setattr(Watcher, "poll_once", counted)
    watcher = Watcher([tmp_path], poll_interval=0.5, rescan_interval=3600, use_watchdog=True)
    updates, stop, thread = _run_in_thread(watcher)
    try:
        assert _wait_for(updates, lambda s: len(s) == 2, timeout=10.0)
        assert _until(lambda: watcher.watchdog_active)
        settled = len(polls)  # polls begun from here on see the observer on
        # Nothing is written: polls come about one interval (0.5 s) apart, never in bursts; seven
        # are waited for by count, not for a number of seconds (a busy machine only spaces them out).
        assert _until(lambda: len(polls) >= settled + 7, timeout=30.0)
        span = polls[settled + 6] - polls[settled]
    finally:
        stop.set()
        thread.join(timeout=5.0)
    assert span >= 2.0, f"7 polls of an idle tree within {span:.2f} s (poll interval 0.5 s)"


def nfs_proc(tmp_path: Path, shared: Path) -> Path:
    """A /proc of no processes whose mounts say ``shared`` is an NFS mount, as the kernel writes it:
    no writer of a run there can be seen from this node (core.watch.run_state: unknown)."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mounts").write_text(
        f"/dev/sda1 / ext4 rw,relatime 0 0\nfs1:/export {shared} nfs4 rw,vers=4.2,proto=tcp 0 0\n"
    )
    return proc


def test_stall_severity_depends_on_whether_the_run_stopped_while_watched(tmp_path):
    """Where the writer cannot be seen (runs on NFS: its state is unknown), the silence rule of
    core.watch.signals.stall decides, and its severity depends on whether the run stopped while watched."""
    shared = tmp_path / "shared"
    writer = open_writer(shared / "live")
    write_scalars(shared / "old", {"train/ploss_0": [(s, 3.0) for s in range(0, 100, 10)]}, wall_time=1_600_000_000.0)
    scanner = ProcessScanner(nfs_proc(tmp_path, shared))
    watcher = Watcher([shared], use_watchdog=False, rescan_interval=3600, scanner=scanner)
    try:
        watcher.poll_once()
        writer.add_scalar("train/ploss_0", 4.0, global_step=200)
        writer.flush()
        watcher.poll_once()
    finally:
        writer.close()
    days_later = time.time() + 3 * 86400
    statuses = {s.info.name: s for s in watcher.poll_once(now=days_later)}
    live_flag = [f for f in statuses["live"].flags if f.kind == "stalled"]
    old_flag = [f for f in statuses["old"].flags if f.kind == "stalled"]
    assert [f.severity for f in live_flag] == ["warning"] and statuses["live"].status == "warning"
    assert [f.severity for f in old_flag] == ["info"] and statuses["old"].status == "ok"
    assert "finished or stopped" in old_flag[0].message
    for status in statuses.values():
        assert status.state is not None and status.state.state == "unknown" and "nfs4" in status.state.reason


def test_vocab_size_source_config_manifest_flag(tmp_path):
    out = tmp_path / "out"
    write_scalars(out / "runs", {"train/ploss_0": [(0, 9.0)]})
    write_drafter_checkpoint(out / "epoch_0_step_100", draft_vocab=16_000)

    status = only(Watcher([tmp_path], use_watchdog=False).poll_once())
    assert (status.vocab_size, status.vocab_size_source) == (16_000, "config.json")
    assert status.chance_loss == pytest.approx(math.log(16_000))

    (out / "triage.toml").write_text("[run]\nvocab_size = 32000\n")
    status = only(Watcher([tmp_path], use_watchdog=False).poll_once())
    assert (status.vocab_size, status.vocab_size_source) == (32_000, "manifest")

    status = only(Watcher([tmp_path], vocab_size=8_000, use_watchdog=False).poll_once())
    assert (status.vocab_size, status.vocab_size_source) == (8_000, "flag")


def test_manifest_edit_is_picked_up_while_watching(tmp_path):
    write_scalars(tmp_path / "run", {"train/ploss_0": [(0, 9.0)], "custom": [(0, 1.0)]})
    watcher = Watcher([tmp_path], use_watchdog=False, rescan_interval=0.0)
    assert only(watcher.poll_once()).loss_tag == "train/ploss_0"
    (tmp_path / "run" / "triage.toml").write_text('[run]\nloss_tags = ["custom"]\n')
    assert only(watcher.poll_once()).loss_tag == "custom"


def test_bad_manifest_does_not_stop_a_lenient_watcher(tmp_path):
    write_scalars(tmp_path / "run", {"train/ploss_0": [(0, 3.0)]})
    (tmp_path / "run" / "triage.toml").write_text("[run]\nvocab_size = 'many'\n")
    status = only(Watcher([tmp_path], use_watchdog=False).poll_once())
    assert status.status == "warning"
    assert "vocab_size must be an integer" in status.to_json()["manifest_error"]


def test_to_json_has_exactly_the_scan_fields(tmp_path):
    rng = np.random.default_rng(0)
    write_scalars(
        tmp_path / "run",
        {
            "train/ploss_0": [(s, float(v)) for s, v in zip(range(0, 1000, 50), rng.uniform(18, 20, 20), strict=True)],
            "train/acc_0": [
                (s, float(v)) for s, v in zip(range(0, 1000, 50), rng.uniform(0.02, 0.07, 20), strict=True)
            ],
        },
    )
    document = only(Watcher([tmp_path], use_watchdog=False).poll_once()).to_json()
    json.dumps(document, allow_nan=False)
    assert list(document) == [
        "path",
        "name",
        "status",
        "vocab_size",
        "vocab_size_source",
        "chance_loss",
        "chance_basis",
        "valid_fraction",
        "valid_fraction_source",
        "chance_convention",
        "last_step",
        "last_update",
        "metrics",
        "flags",
        "sources",
        "trainer",
        "errors",
        "best",
        "state",
        "state_reason",
        "writer",
        "crash_line",
        "source_notes",
    ]
    assert document["source_notes"] == []  # event files only: nothing read that its points do not say
    assert document["chance_basis"] == "ln V" and document["valid_fraction"] is None  # no dumps: said, not guessed
    assert document["sources"] == ["tensorboard"] and document["trainer"] == "specforge-classic"
    assert document["status"] == "critical" and document["vocab_size_source"] == "default"
    assert document["chance_loss"] == pytest.approx(LN_32000)
    assert document["last_step"] == 950
    assert set(document["metrics"]) == {"loss", "accuracy", "per_position_accuracy"}
    assert document["metrics"]["per_position_accuracy"][0]["position"] == 0
    assert set(document["metrics"]["loss"]) == {"tag", "last", "min", "count"}
    assert document["metrics"]["accuracy"]["tag"] == "train/acc_0"
    assert {f["kind"] for f in document["flags"]} >= {"loss_above_chance", "accuracy_at_chance"}
    for flag in document["flags"]:
        assert list(flag) == ["kind", "severity", "tag", "step", "value", "message"]


def test_a_long_first_poll_shows_runs_as_they_are_read(tmp_path, monkeypatch):
    import triage_tui.core.watch.watcher as watch

    for name in ("a", "b", "c", "d"):
        write_scalars(tmp_path / name, {"train/ploss_0": [(0, 10.4), (50, 9.0)]})
    monkeypatch.setattr(watch, "PROGRESS_SECS", 0.0)  # report after every run
    updates: list[int] = []
    stop = threading.Event()

    def on_update(statuses):
        updates.append(len(statuses))
        if len(statuses) == 4:
            stop.set()

    Watcher([tmp_path], use_watchdog=False, poll_interval=0.05).run(on_update, stop)
    # The first poll reports 1, 2, 3 runs read so far, then the whole list.
    assert updates[:3] == [1, 2, 3] and updates[-1] == 4


def test_progress_reports_come_at_growing_intervals_and_not_just_before_the_end(tmp_path, monkeypatch):
    """20 runs taking 0.3 s each (a clock the test moves): the first report after 1 s (4 runs), the
    next 2 s later (11 runs); the one due at 5.4 s, with 18 of 20 read and the rest due within
    half the interval at that pace, is left to the poll's own statuses."""
    import types

    import triage_tui.core.watch.watcher as watch

    for index in range(20):
        write_scalars(tmp_path / f"run_{index:02d}", {"train/ploss_0": [(0, 10.4), (50, 9.0)]})
    clock = [0.0]
    monkeypatch.setattr(watch, "time", types.SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    monkeypatch.setattr(watch, "PROGRESS_SECS", 1.0)
    monkeypatch.setattr(watch, "PROGRESS_MAX_SECS", 2.0)
    real_update = Watcher._update

    def slow_update(self, tracked, now, *rest):
        clock[0] += 0.3
        return real_update(self, tracked, now, *rest)

    monkeypatch.setattr(Watcher, "_update", slow_update)
    reports: list[int] = []
    statuses = Watcher([tmp_path], use_watchdog=False).poll_once(on_progress=lambda s: reports.append(len(s)))
    assert reports == [4, 11] and len(statuses) == 20


@pytest.mark.parametrize("order", ["events first", "manifest first"])
def test_a_run_whose_files_land_in_any_order_is_one_run_read_once(tmp_path, order):
    """`out/runs/` can land before `out/triage.toml`: the run is `out/runs` for a poll, then `out`.

    It stays one run: the points already read are carried over (the same series object, not a
    re-read), and at the end exactly one run named `out` holds every point once.
    """
    staging = tmp_path / "staging"
    write_scalars(staging / "runs", {"train/ploss_0": [(step, 19.0) for step in range(0, 100, 10)]})
    (staging / "triage.toml").write_text("[run]\nvocab_size = 32000\n")
    watched = tmp_path / "watched"
    (watched / "out").mkdir(parents=True)
    watcher = Watcher([watched], use_watchdog=False, rescan_interval=3600)
    first, second = ("runs", "triage.toml") if order == "events first" else ("triage.toml", "runs")
    (staging / first).rename(watched / "out" / first)
    watcher.wake(rescan=True)
    before = watcher.poll_once()
    (staging / second).rename(watched / "out" / second)
    watcher.wake(rescan=True)
    after = only(watcher.poll_once())
    assert after.info.name == "out" and after.metrics.loss.count == 10
    if order == "events first":
        assert [s.info.name for s in before] == ["out/runs"]
        assert after.scalars is before[0].scalars  # carried over, not read again
    else:
        assert [(s.info.name, s.last_step) for s in before] == [("out", None)]
    assert watcher.polls == 2


def test_reported_counts_a_poll_only_once_its_update_was_sent(tmp_path):
    """`polls` is counted before run() sends the poll's update: a consumer waiting on it alone can
    look while the update is still on its way (the TUI's live-writer test did, under load).
    `reported` and `updated` say when everything a poll read has been handed over."""
    write_scalars(tmp_path / "a", {"loss": [(0, 3.0), (10, 2.0)]})
    watcher = Watcher([tmp_path], use_watchdog=False, poll_interval=0.05)
    sending, release, stop = threading.Event(), threading.Event(), threading.Event()

    def on_update(statuses):
        sending.set()
        assert release.wait(30)

    thread = threading.Thread(target=watcher.run, args=(on_update, stop), daemon=True)
    thread.start()
    try:
        assert sending.wait(30)
        assert watcher.polls == 1 and watcher.reported == 0 and watcher.updated == 0
        release.set()
        assert _until(lambda: watcher.reported >= 2, timeout=30.0)
        # Poll 2 read nothing new: reported moves on, updated stays at the poll that sent one.
        assert watcher.reported >= 2 and watcher.updated == 1
    finally:
        release.set()
        stop.set()
        thread.join(10)


def test_a_first_poll_begun_early_is_taken_over_by_run(tmp_path, monkeypatch):
    """`triage` begins the first poll before it imports Textual (start_first_poll); run() takes it
    over: what it reported before anyone listened arrives first, then the rest, then the same
    statuses a first poll in run() gives, and the poll is not repeated."""
    import triage_tui.core.watch.watcher as watch

    for name in ("a", "b", "c", "d"):
        write_scalars(tmp_path / name, {"train/ploss_0": [(0, 10.4), (50, 9.0)]})
    monkeypatch.setattr(watch, "PROGRESS_SECS", 0.0)  # report after every run
    gate = threading.Event()
    real_update = Watcher._update

    def slow_after_two(self, tracked, now, *rest):  # the first two runs are read before run() listens
        if tracked.info.name in ("c", "d"):
            assert gate.wait(30)
        return real_update(self, tracked, now, *rest)

    monkeypatch.setattr(Watcher, "_update", slow_after_two)
    early = Watcher([tmp_path], use_watchdog=False, poll_interval=0.05, clock=lambda: 1.7e9)
    early.start_first_poll()
    assert _until(lambda: len(early._first_poll._unheard or ()) >= 2, timeout=30.0)
    updates: list[list] = []
    stop = threading.Event()

    def on_update(statuses):
        updates.append([s.info.name for s in statuses])
        gate.set()
        if len(updates) >= 4:
            stop.set()

    early.run(on_update, stop)
    # Of the two reports made before run() listened, the latest; then the poll's own, in order.
    assert updates[0] == ["a", "b"] and updates[1] == ["a", "b", "c"]
    assert updates[-1] == ["a", "b", "c", "d"]
    assert early.polls >= 1 and early.updated == 1  # the early poll was the first; its update the first sent
    alone = Watcher([tmp_path], use_watchdog=False, clock=lambda: 1.7e9).poll_once()
    monkeypatch.setattr(Watcher, "_update", real_update)
    assert [json.dumps(s.to_json()) for s in early.poll_once()] == [json.dumps(s.to_json()) for s in alone]


def test_an_early_first_poll_finds_the_runs_before_textual_is_imported(tmp_path, monkeypatch):
    """start_first_poll(wait_for_discovery=...) returns once the runs are found (the helpers then
    get their first runs while Textual is imported), or at the bound when discovery is slow."""
    for name in ("a", "b", "c"):
        write_scalars(tmp_path / name, {"train/ploss_0": [(0, 10.4), (50, 9.0)]})
    gate = threading.Event()
    real_update = Watcher._update
    monkeypatch.setattr(Watcher, "_update", lambda self, t, *rest: gate.wait(30) and real_update(self, t, *rest))
    found = Watcher([tmp_path], use_watchdog=False, poll_interval=0.05)
    found.start_first_poll(wait_for_discovery=30)
    assert sorted(path.name for path in found._runs) == ["a", "b", "c"]  # found; none read yet
    assert found.polls == 0
    gate.set()

    slow = threading.Event()
    real_rescan = Watcher._rescan
    monkeypatch.setattr(Watcher, "_rescan", lambda self: slow.wait(30) and real_rescan(self))
    watcher = Watcher([tmp_path], use_watchdog=False, poll_interval=0.05)
    started = time.monotonic()
    watcher.start_first_poll(wait_for_discovery=0.1)
    assert time.monotonic() - started < 5 and not watcher._runs  # did not wait for the slow discovery
    slow.set()
    stop = threading.Event()
    updates: list[list[str]] = []

    def on_update(statuses) -> None:
        updates.append([s.info.name for s in statuses])
        if len(statuses) == 3:
            stop.set()

    bound = threading.Timer(60, stop.set)  # a hang becomes a failure below
    bound.start()
    watcher.run(on_update, stop)
    bound.cancel()
    assert updates and updates[-1] == ["a", "b", "c"]


def test_run_stopped_while_an_early_first_poll_reads_returns(tmp_path, monkeypatch):
    write_scalars(tmp_path / "a", {"train/ploss_0": [(0, 10.4), (50, 9.0)]})
    gate = threading.Event()
    real_update = Watcher._update
    monkeypatch.setattr(Watcher, "_update", lambda self, t, *rest: gate.wait(30) and real_update(self, t, *rest))
    watcher = Watcher([tmp_path], use_watchdog=False, poll_interval=0.05)
    watcher.start_first_poll()
    stop = threading.Event()
    stop.set()
    started = time.monotonic()
    watcher.run(lambda statuses: None, stop)
    assert time.monotonic() - started < 5  # did not wait for the poll
    gate.set()


def test_every_run_is_judged_from_one_scan_of_proc_a_poll(tmp_path):
    """A SummaryWriter child writing (live), a run whose writer exited (ended), the child stopped with
    SIGSTOP past the threshold (stalled, critical: flush_secs=1 and the poll's clock, so nothing
    waits minutes), then killed (ended). One /proc scan a poll for all the runs; a poll that judges
    every run as the last did hands on the same reports (the TUI redraws nothing)."""
    import signal

    from builders.children import SUMMARY_WRITER_LOOP, ended, process_state, start, wait_until

    class CountingScanner(ProcessScanner):
        scans = 0

        def scan(self, roots, pids=()):
            self.scans += 1
            return super().scan(roots, pids)

    write_scalars(tmp_path / "done", {"train/ploss_0": [(s, 3.0 - s / 1000) for s in range(0, 200, 10)]})
    scanner = CountingScanner()
    with ended(start(SUMMARY_WRITER_LOOP, str(tmp_path / "live"))) as child:
        wait_until(lambda: list((tmp_path / "live").glob("events.out.tfevents.*")), "the child's event file")
        watcher = Watcher([tmp_path], use_watchdog=False, rescan_interval=3600, flush_secs=1.0, scanner=scanner)
        wait_until(lambda: {s.info.name: s for s in watcher.poll_once()}["live"].last_step, "the child's first points")
        statuses = {s.info.name: s for s in watcher.poll_once()}
        assert scanner.scans == watcher.polls
        live, done = statuses["live"].state, statuses["done"].state
        assert live is not None and live.state == "live" and live.writer is not None and live.writer.pid == child.pid
        assert done is not None and done.state == "ended" and done.writer is None

        child.send_signal(signal.SIGSTOP)
        wait_until(lambda: process_state(child.pid) == "T", "the kernel to stop the child")
        watcher.poll_once()  # whatever the child flushed before it stopped
        later = {s.info.name: s for s in watcher.poll_once()}["live"].last_update or 0.0
        statuses = {s.info.name: s for s in watcher.poll_once(now=later + 600)}
        stalled = statuses["live"]
        assert stalled.state is not None and stalled.state.state == "stalled" and stalled.status == "critical"
        flag = next(f for f in stalled.flags if f.kind == "stalled")
        assert flag.severity == "critical" and "is stopped (SIGSTOP or ctrl-Z)" in flag.message
        # Ten minutes after its last point a silent run used to be a `stalled` warning: ended, it is none.
        assert statuses["done"].state.state == "ended" and not any(f.kind == "stalled" for f in statuses["done"].flags)
        again = {s.info.name: s for s in watcher.poll_once(now=later + 600)}
        assert again["live"] is stalled and again["done"] is statuses["done"]

        child.send_signal(signal.SIGCONT)
        child.kill()
        child.wait()
    statuses = {s.info.name: s for s in watcher.poll_once(now=later + 600)}
    assert statuses["live"].state.state == "ended" and statuses["live"].status != "critical"
    assert scanner.scans == watcher.polls


def test_a_failing_serving_source_is_one_error_and_ten_idle_polls_publish_nothing_new(tmp_path):
    """A run whose serving log is missing and whose other log holds an impossible figure (accepted
    tokens over drafted ones): each failure is one error of the status, said once in each of its
    JSON places, and while nothing changes the subscriber hears of the run once."""
    from builders.serving import vllm_line_raw

    run = tmp_path / "run"
    write_scalars(run, {"train/ploss_0": [(0, 3.0), (10, 2.0)]})
    (run / "impossible.log").write_text(vllm_line_raw(2.0, 500, 100, "0.500, 0.500") + "\n")
    (run / "triage.toml").write_text('[serving]\nlogs = ["missing.log", "impossible.log"]\n')
    watcher = Watcher([tmp_path], use_watchdog=False, poll_interval=0.01, rescan_interval=3600.0)
    heard: list[tuple[int, list[RunStatus]]] = []  # (polls done, the statuses) at each update
    stop = threading.Event()
    thread = threading.Thread(
        target=watcher.run, args=(lambda statuses: heard.append((watcher.polls, statuses)), stop), daemon=True
    )
    thread.start()
    try:
        assert _until(lambda: watcher.reported >= 11, timeout=60.0)
    finally:
        stop.set()
        thread.join(10)
    # The first poll's update (and, on a slow machine, its progress report); then nothing.
    assert heard and [polls for polls, _ in heard if polls > 1] == [], [polls for polls, _ in heard]
    (status,) = heard[-1][1]
    serving = [error for error in status.errors if error.source == "serving"]
    assert [error.path for error in serving] == [str(run / "missing.log"), str(run / "impossible.log")]
    assert len(set(status.errors)) == len(status.errors)
    document = status.to_json()
    assert document["serving"]["errors"] == [error.line() for error in serving]
    assert [e for e in document["errors"] if e["source"] == "serving"] == [e.to_json() for e in serving]
