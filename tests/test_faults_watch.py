"""Faults under a live watch that the reader's and discovery's own tests do not reach.

A watcher thread (Watcher.run, the one the TUI runs, watchdog observer on) over trees written by
torch's SummaryWriter, while the tree misbehaves: an event file growing faster than it is read,
a run directory and then the whole watched directory vanishing, a file and a directory losing
read permission and getting it back, a symlink loop under the observer. Nothing may crash the
thread, hang it, or lose a point that was written; `triage --poll` must turn the observer off.
Read permission is taken away for real (chmod, against a watcher forked as `nobody`: root ignores
chmod) and, for the threaded watcher with its observer, through a seam that raises what the kernel
would (PermissionError) where the code lists directories and opens files.
"""

from __future__ import annotations

import os
import queue
import random
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np

from builders.events import records
from builders.tensorboard import open_writer, write_scalars
from builders.waiting import load_factor, out_of_patience
from triage_tui.core import fileio
from triage_tui.core.read.events import tuning
from triage_tui.core.read.events.reader import RunEvents
from triage_tui.core.read.runs import listing as runs_listing
from triage_tui.core.watch.watcher import Watcher

TAG = "train/ploss_0"


class Running:
    """Watcher.run in a thread, its updates in a queue, stopped and joined on exit."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher
        self.updates: queue.Queue = queue.Queue()
        self.stop = threading.Event()
        self.error: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.watcher.run(self.updates.put, self.stop)
        except BaseException as err:  # noqa: BLE001 - the test fails on it below, with the error
            self.error.append(err)

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.watcher.wake()
        self.thread.join(timeout=10.0 * load_factor())
        assert not self.thread.is_alive(), "Watcher.run did not stop"
        assert not self.error, f"Watcher.run died: {self.error[0]!r}"

    def wait_for(self, predicate, timeout: float = 10.0, what: str = "condition"):
        """The next update for which ``predicate`` holds; ``timeout`` is for a quiet machine (scaled by the load)."""
        start = time.monotonic()
        while not out_of_patience(start, timeout):
            try:
                statuses = self.updates.get(timeout=0.5)
            except queue.Empty:
                if self.error or not self.thread.is_alive():
                    break
                continue
            if predicate(statuses):
                return statuses
        assert not self.error, f"Watcher.run died: {self.error[0]!r}"
        raise AssertionError(f"timed out after {time.monotonic() - start:.0f}s waiting for {what}")

    def polled(self, more: int) -> None:
        """Wait until the watcher has completed ``more`` further polls (a counter, not a number of seconds)."""
        target = self.watcher.polls + more
        assert until(lambda: self.watcher.polls >= target), f"fewer than {more} polls"


def until(condition, timeout: float = 10.0) -> bool:
    """``condition()`` came true within ``timeout`` (for a quiet machine, scaled by the load), looked at every 20 ms."""
    start = time.monotonic()
    while not out_of_patience(start, timeout):
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())


def by_name(statuses) -> dict[str, int]:
    """Run name -> number of points of its loss tag."""
    return {s.info.name: (len(s.scalars.get(TAG)) if s.scalars.get(TAG) is not None else 0) for s in statuses}


def series_points(tmp_path: Path, name: str, steps) -> Path:
    return write_scalars(tmp_path / name, {TAG: [(int(s), 10.0 - s / 1e5) for s in steps]})


# --------------------------------------------------------------------------- growth


def test_a_file_growing_faster_than_it_is_read_loses_nothing(tmp_path):
    """A SummaryWriter file copied in at random cut points (mid-record too), ten cuts between two of
    the reader's polls: every point arrives once, in order, and nothing is counted corrupt. The
    writes and polls alternate in one thread, so the interleaving is the seed's, not the scheduler's."""
    source = write_scalars(
        tmp_path / "source",
        {TAG: [(s, float(s) * 1e-3) for s in range(1, 20_001)], "train/acc_0": [(s, 0.5) for s in range(1, 20_001)]},
    )
    data = source.read_bytes()
    growing = tmp_path / "live" / source.name
    growing.parent.mkdir()
    growing.touch()
    rng = random.Random(252)
    cuts = sorted(rng.sample(range(1, len(data)), 400)) + [len(data)]
    reader = RunEvents()
    reader.set_files([growing])
    polls = mid_record = 0
    with open(growing, "ab") as out:
        start = 0
        for i, cut in enumerate(cuts):
            out.write(data[start:cut])
            out.flush()
            start = cut
            if i % 10 == 9:  # a burst of ten writes between two polls
                stats = reader.poll()
                polls += 1
                mid_record += stats.pending_bytes > 0
                assert stats.corrupt_records == 0 and stats.skipped_bytes == 0, stats
    reader.poll()
    series = reader.scalars.get(TAG)
    assert np.array_equal(series.steps, np.arange(1, 20_001))
    assert np.array_equal(series.values, np.float32(np.arange(1, 20_001) * 1e-3).astype(np.float64))
    assert len(reader.scalars.get("train/acc_0")) == 20_000
    assert reader.totals.corrupt_records == 0 and reader.totals.resets == 0
    assert polls == 40 and mid_record > 0, f"{polls} polls, {mid_record} of them mid-record: growth not exercised"


def test_a_live_writer_flushing_every_step_is_followed_by_the_watch_thread(tmp_path):
    writer = open_writer(tmp_path / "run", first_steps=range(1, 11))
    watcher = Watcher([tmp_path], poll_interval=0.05, rescan_interval=3600, use_watchdog=True)
    with Running(watcher) as running:
        running.wait_for(lambda s: by_name(s).get("run") == 10, what="the first 10 points")
        for step in range(11, 3011):
            writer.add_scalar(TAG, 1.0, global_step=step)
            if step % 10 == 0:
                writer.flush()
        writer.close()
        final = running.wait_for(lambda s: by_name(s).get("run") == 3010, timeout=20.0, what="all 3010 points")
    assert np.array_equal(final[0].scalars.get(TAG).steps, np.arange(1, 3011))


def test_a_file_replaced_by_rsync_in_the_middle_of_a_read_shows_only_the_new_contents(tmp_path, monkeypatch):
    """rsync writes `.name.XXXXXX` and renames it over the file; here that lands while a poll is
    between two read windows of the old file. The poll may finish on the old inode (its open fd);
    the next one must start over, and the run must then hold exactly the new file's points."""
    old = write_scalars(tmp_path / "old", {TAG: [(s, 1.0) for s in range(1, 30_001)]})
    new = write_scalars(tmp_path / "new", {TAG: [(s, 2.0) for s in range(1, 20_001)]})
    live = tmp_path / "run" / old.name
    live.parent.mkdir()
    shutil.copyfile(old, live)
    monkeypatch.setattr(tuning, "READ_WINDOW", 64 << 10)  # several read windows per poll
    real_read_into = fileio.read_into
    windows = 0

    def read_then_replace(*args, **kwargs):
        nonlocal windows
        windows += 1
        if windows == 3:  # the poll holds the old file open: it reads the old inode on
            staged = live.parent / f".{live.name}.Xy12Ab"
            shutil.copyfile(new, staged)
            os.replace(staged, live)
        return real_read_into(*args, **kwargs)

    monkeypatch.setattr(fileio, "read_into", read_then_replace)
    reader = RunEvents()
    reader.set_files([live])
    reader.poll()
    assert windows > 3, "the replacement did not land mid-read"
    reader.poll()
    series = reader.scalars.get(TAG)
    assert np.array_equal(series.steps, np.arange(1, 20_001)) and set(series.values.tolist()) == {2.0}
    assert reader.totals.resets == 1 and reader.totals.corrupt_records == 0


# --------------------------------------------------------------------------- vanishing


def test_run_directories_and_the_watched_directory_vanishing_mid_watch(tmp_path):
    root = tmp_path / "watched"
    series_points(root, "a", range(1, 51))
    series_points(root, "b", range(1, 51))
    watcher = Watcher([root], poll_interval=0.05, rescan_interval=0.1, use_watchdog=True)
    with Running(watcher) as running:
        running.wait_for(lambda s: by_name(s) == {"a": 50, "b": 50}, what="both runs")
        assert until(lambda: watcher.watchdog_active), "the observer never started"
        shutil.rmtree(root / "b")
        running.wait_for(lambda s: by_name(s) == {"a": 50}, what="b gone")
        shutil.rmtree(root)  # the directory the user pointed triage at, observer watching it
        running.wait_for(lambda s: s == [], what="no runs")
        series_points(root, "c", range(1, 21))  # it comes back (a re-created output dir)
        running.wait_for(lambda s: by_name(s) == {"c": 20}, timeout=15.0, what="the re-created run")


# --------------------------------------------------------------------------- permissions


def test_an_event_file_losing_read_permission_keeps_its_points_and_resumes(tmp_path, monkeypatch):
    locked = series_points(tmp_path, "locked", range(1, 51)).parent
    series_points(tmp_path, "open", range(1, 51))
    denied = threading.Event()
    real_open = fileio.open_polled

    def guarded_open(path, *args, **kwargs):
        if denied.is_set() and Path(path).parent == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    # Every reader of a run's files opens them through fileio.open_polled (as root, a chmod denies nothing).
    monkeypatch.setattr(fileio, "open_polled", guarded_open)
    watcher = Watcher([tmp_path], poll_interval=0.05, rescan_interval=0.2, use_watchdog=True)
    with Running(watcher) as running:
        running.wait_for(lambda s: by_name(s) == {"locked": 50, "open": 50}, what="both runs")
        denied.set()
        write_scalars(tmp_path / "locked", {TAG: [(s, 1.0) for s in range(51, 61)]})
        write_scalars(tmp_path / "open", {TAG: [(s, 1.0) for s in range(51, 61)]})
        # The open run moves on; the locked one keeps the 50 points it had and reads nothing new.
        running.wait_for(lambda s: by_name(s).get("open") == 60, what="the readable run's new points")
        running.polled(3)  # polls that tried the locked run again
        assert by_name(watcher.poll_once())["locked"] == 50
        denied.clear()
        running.wait_for(lambda s: by_name(s) == {"locked": 60, "open": 60}, what="permission back")


def test_a_directory_losing_read_permission_mid_watch_keeps_the_runs_it_had(tmp_path, monkeypatch):
    series_points(tmp_path, "a", range(1, 51))
    series_points(tmp_path, "b", range(1, 51))
    denied = threading.Event()
    real_scandir = os.scandir
    locked = str(tmp_path / "b")

    def scandir(path="."):
        if denied.is_set() and os.fspath(path).startswith(locked):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(runs_listing.os, "scandir", scandir)
    watcher = Watcher([tmp_path], poll_interval=0.05, rescan_interval=0.1, use_watchdog=False)
    with Running(watcher) as running:
        running.wait_for(lambda s: by_name(s) == {"a": 50, "b": 50}, what="both runs")
        denied.set()
        os.utime(tmp_path / "b")  # its listing is stale: the next rescan must list it again
        series_points(tmp_path, "c", range(1, 11))
        statuses = running.wait_for(lambda s: "c" in by_name(s), what="a new run while b is unreadable")
        denied.clear()
        os.utime(tmp_path / "b")
        running.wait_for(lambda s: by_name(s) == {"a": 50, "b": 50, "c": 10}, what="b readable again")
    # While b could not be listed it either kept its points or left the table; it never broke the watch.
    assert by_name(statuses).get("b") in (None, 50)


def _watch_as_nobody(root: str, commands, replies) -> None:
    """Forked child: drop root (chmod must bind), then answer each "poll" with {run: points}."""
    try:
        if os.geteuid() == 0:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        watcher = Watcher([root], rescan_interval=0.0, use_watchdog=False)
        replies.send({"euid": os.geteuid()})
        while commands.recv() == "poll":
            replies.send(by_name(watcher.poll_once()))
    except BaseException as err:  # noqa: BLE001 - reported to the parent, which fails the test with it
        replies.send(f"child failed: {err!r}")


def test_real_chmod_of_a_file_and_a_directory_as_an_unprivileged_user(tmp_path):
    """The kernel's own EACCES, not a seam: a forked watcher running as `nobody` while the parent
    (root) takes read permission from an event file and from a run directory, then gives it back."""
    import multiprocessing
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="triage-chmod-", dir="/tmp"))
    try:
        base.chmod(0o755)
        first_b = series_points(base, "b", range(1, 51))
        series_points(base, "a", range(1, 51))
        for path in base.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        ctx = multiprocessing.get_context("fork")
        parent_commands, child_commands = ctx.Pipe()
        child_replies, parent_replies = ctx.Pipe()
        child = ctx.Process(target=_watch_as_nobody, args=(str(base), child_commands, child_replies), daemon=True)
        child.start()

        def poll() -> dict:
            parent_commands.send("poll")
            assert parent_replies.poll(30), "the watcher did not answer within 30 s"
            reply = parent_replies.recv()
            assert isinstance(reply, dict), reply
            return reply

        def more_points(run: str, steps: range) -> None:
            write_scalars(base / run, {TAG: [(s, 1.0) for s in steps]})
            for path in (base / run).iterdir():
                if path != first_b:
                    path.chmod(0o644)

        try:
            assert parent_replies.poll(30) and parent_replies.recv() == {
                "euid": 65534 if os.geteuid() == 0 else os.geteuid()
            }
            assert poll() == {"a": 50, "b": 50}
            # The file: records appended to it while it is unreadable are not seen, its 50 points stay.
            donor = write_scalars(tmp_path / "donor", {TAG: [(s, 1.0) for s in range(51, 61)]}).read_bytes()
            first_record_end = records(donor)[0][0] + 16 + records(donor)[0][1]  # after file_version
            first_b.chmod(0o000)
            with open(first_b, "ab") as out:
                out.write(donor[first_record_end:])
            assert poll() == {"a": 50, "b": 50}
            first_b.chmod(0o644)
            assert poll() == {"a": 50, "b": 60}
            # The directory: it cannot be listed and nothing in it opened; the other run goes on.
            (base / "b").chmod(0o000)
            more_points("a", range(61, 71))
            more_points("b", range(61, 71))
            during = poll()
            assert during.get("a") == 60 and during.get("b") in (None, 60), during
            (base / "b").chmod(0o755)
            assert poll() == {"a": 60, "b": 70}
        finally:
            parent_commands.send("stop")
            child.join(timeout=10)
            if child.is_alive():
                child.kill()
    finally:
        for path in [base, *base.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------- symlink loops


def test_symlink_loops_under_the_observer_neither_hang_nor_duplicate(tmp_path):
    event_file = series_points(tmp_path, "run", range(1, 31))
    (tmp_path / "run" / "loop").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "alias").symlink_to(tmp_path / "run", target_is_directory=True)
    (tmp_path / "self").symlink_to(tmp_path / "self")  # a link to itself: ELOOP on every stat
    watcher = Watcher([tmp_path], poll_interval=0.05, rescan_interval=0.1, use_watchdog=True)
    with Running(watcher) as running:
        statuses = running.wait_for(lambda s: by_name(s) == {"run": 30}, what="the one run")
        assert statuses[0].info.event_files == (event_file,)
        write_scalars(tmp_path / "run", {TAG: [(s, 1.0) for s in range(31, 41)]})
        running.wait_for(lambda s: by_name(s) == {"run": 40}, what="appended points, once")


# --------------------------------------------------------------------------- --poll


def test_triage_poll_flag_turns_the_observer_off(tmp_path, monkeypatch):
    from triage_tui.cli import main
    from triage_tui.tui.app import TriageApp

    series_points(tmp_path, "run", range(1, 11))
    built = []
    monkeypatch.setattr(TriageApp, "run", lambda self, *a, **k: built.append(self))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # as in a terminal: the TUI refuses a pipe
    assert main(["--poll", "--interval", "0.5", str(tmp_path)]) == 0
    assert main([str(tmp_path)]) == 0
    assert [(app.use_watchdog, app.poll_interval) for app in built] == [(False, 0.5), (True, 1.0)]


# --------------------------------------------------------------------------- long runs in the chart


def test_a_noisy_run_longer_than_the_chart_is_wide_can_be_drawn(tmp_path):
    """Min/max thinning once kept different numbers of raw and smoothed points; the chart's zip of
    them raised and ended the app on any noisy run longer than the chart is wide (found by bench_scale)."""
    from triage_tui.tui.view_data import chart_series

    rng = np.random.default_rng(0)
    write_scalars(
        tmp_path / "run",
        {TAG: [(s, 19.0 + float(v)) for s, v in zip(range(1, 5001), rng.normal(0, 0.5, 5000), strict=True)]},
    )
    (status,) = Watcher([tmp_path], use_watchdog=False).poll_once()
    for width in (64, 120, 200, 317):
        chart = chart_series(status, width)
        assert len(chart.steps) == len(chart.values) == len(chart.smoothed) <= width
