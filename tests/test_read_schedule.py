"""Runs whose files are idle for long are read less often, and say so; a change brings them back at once.

Event files written by torch's SummaryWriter, their modification times set back with os.utime as a
sweep that ended days ago has them; the watcher's own polls, its watchdog observer on real inotify.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from builders.events import records
from builders.object_store import upload_tree
from builders.tensorboard import write_scalars
from builders.waiting import out_of_patience
from triage_tui.cli import main
from triage_tui.core.objstore import tuning
from triage_tui.core.read.runs.remote import Mirrors
from triage_tui.core.watch import read_schedule
from triage_tui.core.watch.fs_wakeups import start_observer
from triage_tui.core.watch.watcher import Watcher

TAG = "train/ploss_0"
DAYS = 3 * 86_400


def _run(root: Path, name: str, steps: range) -> Path:
    return write_scalars(root / name, {TAG: [(s, 10.0 - s / 1e4) for s in steps]})


def _age(path: Path, seconds: float) -> None:
    """``path`` and everything under it last modified ``seconds`` ago."""
    past = time.time() - seconds
    for directory, _, files in os.walk(path):
        for name in [*files, ""]:
            os.utime(os.path.join(directory, name), (past, past))


def _append(event_file: Path, donor_dir: Path, steps: range) -> None:
    """The records of another SummaryWriter file for ``steps`` appended to ``event_file`` (its
    file_version record left out), as the same writer would append them."""
    donor = write_scalars(donor_dir, {TAG: [(s, 10.0 - s / 1e4) for s in steps]}).read_bytes()
    start, length = records(donor)[0]
    with open(event_file, "ab") as out:
        out.write(donor[start + 16 + length :])


def _touch_until_watched(path: Path, since: float) -> None:
    """Wait a little; past a second since ``since``, write ``path``'s times again. watchdog adds its
    inotify watches on its own thread after the observer starts: on a loaded machine a write can
    come before them, and only a later one is seen."""
    time.sleep(0.05)
    if time.monotonic() - since > 1.0:
        os.utime(path)


def _points(statuses, name: str) -> int:
    (status,) = [s for s in statuses if s.info.name == name]
    return len(status.scalars.get(TAG))


def _notes(statuses, name: str) -> tuple[str, ...]:
    (status,) = [s for s in statuses if s.info.name == name]
    return status.source_notes


def test_an_idle_run_is_read_less_often_and_says_so_while_a_fresh_one_is_read_every_poll(tmp_path):
    old = _run(tmp_path / "runs", "old", range(1, 51))
    fresh = _run(tmp_path / "runs", "fresh", range(1, 51))
    _age(tmp_path / "runs" / "old", DAYS)
    watcher = Watcher([tmp_path / "runs"], use_watchdog=False, rescan_interval=3600)
    first = watcher.poll_once()
    assert (_points(first, "old"), _points(first, "fresh")) == (50, 50)
    (note,) = _notes(first, "old")
    assert "unmodified for over 2.0 d" in note and "read every 15 min" in note
    assert _notes(first, "fresh") == ()

    _append(old, tmp_path / "donor_old", range(51, 61))
    _append(fresh, tmp_path / "donor_fresh", range(51, 61))
    second = watcher.poll_once()
    assert _points(second, "fresh") == 60  # read at every poll
    assert _points(second, "old") == 50  # not yet: its next read is 15 min away
    assert [s for s in second if s.info.name == "old"][0] is [s for s in first if s.info.name == "old"][0]

    # A change the watchdog saw under the run: read at the next poll, and from then on at every
    # poll (its file is fresh now), with nothing more said.
    watcher.wake(path=old)
    third = watcher.poll_once()
    assert _points(third, "old") == 60
    assert _notes(third, "old") == ()


def test_an_idle_run_is_read_again_once_its_interval_has_passed(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "IDLE_LISTING_TIERS", ((3600.0, 0.5),))
    old = _run(tmp_path / "runs", "old", range(1, 51))
    _age(tmp_path / "runs", 2 * 3600)
    watcher = Watcher([tmp_path / "runs"], use_watchdog=False, poll_interval=0.1, rescan_interval=3600)
    (status,) = watcher.poll_once()
    (note,) = status.source_notes
    assert note.startswith("its files unmodified for over 60 min: read every")
    _append(old, tmp_path / "donor", range(51, 61))
    assert _points(watcher.poll_once(), "old") == 50
    time.sleep(0.6)
    assert _points(watcher.poll_once(), "old") == 60


def test_a_rescan_that_finds_a_new_file_in_an_idle_run_reads_it_at_once(tmp_path):
    _run(tmp_path / "runs", "old", range(1, 51))
    _age(tmp_path / "runs", DAYS)
    watcher = Watcher([tmp_path / "runs"], use_watchdog=False, rescan_interval=0.0)
    assert _points(watcher.poll_once(), "old") == 50
    time.sleep(1.1)  # a second event file of another second: another name, as a restarted writer's
    _run(tmp_path / "runs", "old", range(51, 61))
    assert _points(watcher.poll_once(), "old") == 60


def test_scan_reads_every_run_and_says_nothing_of_idle_reads(tmp_path, capsys):
    _run(tmp_path, "old", range(1, 51))
    _age(tmp_path, DAYS)
    main(["scan", "--json", str(tmp_path)])
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["metrics"]["loss"]["count"] == 50
    assert not [note for note in run["source_notes"] if "read every" in note]


def test_the_observer_wakes_for_a_write_under_an_idle_run_and_never_for_the_watchers_own_reads(tmp_path):
    old = _run(tmp_path / "runs", "old", range(1, 51))
    _age(tmp_path / "runs", DAYS)
    woken: list[tuple[bool, Path]] = []
    observer = start_observer([tmp_path / "runs"], lambda rescan, path: woken.append((rescan, path)))
    assert observer is not None, "inotify is not available here"
    try:
        time.sleep(0.3)
        watcher = Watcher([tmp_path / "runs"], use_watchdog=False, rescan_interval=3600)
        for _ in range(5):  # opens and reads of the event file: no event worth a wake
            watcher.poll_once()
        old.read_bytes()
        time.sleep(0.5)
        assert woken == []
        _append(old, tmp_path / "donor", range(51, 61))
        started = time.monotonic()
        while not any(path == old for _, path in woken):
            assert not out_of_patience(started, 10), f"no wake for the appended file: {woken}"
            _touch_until_watched(old, started)
    finally:
        observer.stop()
        observer.join(timeout=5)


def test_the_watchers_own_loop_shows_an_appended_idle_run_through_the_watchdog(tmp_path):
    old = _run(tmp_path / "runs", "old", range(1, 51))
    _age(tmp_path / "runs", DAYS)
    watcher = Watcher([tmp_path / "runs"], use_watchdog=True, poll_interval=3600, rescan_interval=3600)
    updates: list = []
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(updates.append, stop), daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        while not watcher.watchdog_active:
            assert not out_of_patience(started, 10), "the observer did not start"
            time.sleep(0.05)
        _append(old, tmp_path / "donor", range(51, 61))
        appended = time.monotonic()
        while not updates or _points(updates[-1], "old") != 60:
            assert not out_of_patience(started, 20), "the appended points never arrived"
            _touch_until_watched(old, appended)
    finally:
        stop.set()
        thread.join(timeout=10)


@pytest.mark.parametrize("observed", [False, True])
def test_a_costly_rescan_spaces_out_the_next_one(tmp_path, monkeypatch, observed):
    """Ten times its cost; forty while the observer asks for a rescan whenever a file comes or goes."""
    _run(tmp_path, "run", range(1, 11))
    watcher = Watcher([tmp_path], use_watchdog=False, rescan_interval=0.01)
    watcher.watchdog_active = observed
    real = watcher._rescan

    def slow() -> None:
        real()
        time.sleep(0.05)

    monkeypatch.setattr(watcher, "_rescan", slow)
    watcher.poll_once()
    wait = watcher._next_rescan - time.monotonic()
    assert wait >= (2.0 if observed else 0.5) - 0.1


class _ThreeDaysOn:
    """The real clocks, the wall clock three days on: every file looks idle for three days."""

    monotonic = staticmethod(time.monotonic)

    @staticmethod
    def time() -> float:
        return time.time() + DAYS


def test_idle_runs_found_together_are_read_a_few_at_each_poll_not_all_in_one(tmp_path, monkeypatch):
    """Forty runs idle for three days, read every 4 s: each is read again within its 4 s, and
    no poll reads them all (a 10 000-run node would spend 0.9 s of the watcher's thread on it)."""
    monkeypatch.setattr(tuning, "IDLE_LISTING_TIERS", ((3600.0, 4.0),))
    monkeypatch.setattr(read_schedule, "time", _ThreeDaysOn)
    written = _run(tmp_path / "src", "run", range(1, 11))
    for i in range(40):
        (tmp_path / "runs" / f"run_{i:02d}").mkdir(parents=True)
        shutil.copy(written, tmp_path / "runs" / f"run_{i:02d}" / written.name)
    watcher = Watcher([tmp_path / "runs"], use_watchdog=False, rescan_interval=3600.0)
    read: list[str] = []
    real_update = watcher._update

    def counted(tracked, *args):
        read.append(tracked.info.name)
        return real_update(tracked, *args)

    monkeypatch.setattr(watcher, "_update", counted)
    first = watcher.poll_once()
    assert len(read) == 40 and "read every 4 s" in first[0].source_notes[0]
    read_per_poll = []
    started = time.monotonic()
    while time.monotonic() - started < 4.5:
        time.sleep(0.25)
        read.clear()
        watcher.poll_once()
        read_per_poll.append(len(read))
    assert sum(read_per_poll) >= 40  # every run read again within its tier
    assert max(read_per_poll) <= 20, read_per_poll


@pytest.mark.skipif(sys.version_info < (3, 11), reason="obstore needs Python 3.11")
def test_a_bucket_run_read_less_often_is_read_at_once_when_a_pass_fetches_its_new_bytes(
    any_bucket, tmp_path, monkeypatch
):
    """An object store's runs are read from the mirror's files: an idle run whose event file a pass
    fetched more of is read at that poll, not at its next tier."""
    monkeypatch.setattr(tuning, "CACHE_DIR", tmp_path / "cache")
    # The prefix (uploaded just now) is listed at every rescan; its run, three days idle to the
    # schedule's clock, is read every hour.
    monkeypatch.setattr(tuning, "IDLE_LISTING_TIERS", ((3600.0, 3600.0),))
    monkeypatch.setattr(read_schedule, "time", _ThreeDaysOn)
    event_file = _run(tmp_path / "tree", "run", range(1, 51))
    upload_tree(any_bucket.writer, any_bucket.name, "team", tmp_path / "tree")
    mirrors = Mirrors()
    watcher = Watcher(
        [mirrors.local(f"{any_bucket.base}/team")], use_watchdog=False, rescan_interval=0.0, mirrors=mirrors
    )
    first = watcher.poll_once()
    assert _points(first, "run") == 50 and "read every 60 min" in _notes(first, "run")[0]
    assert _points(watcher.poll_once(), "run") == 50  # nothing new: not read, its last report
    _append(event_file, tmp_path / "donor", range(51, 61))
    upload_tree(any_bucket.writer, any_bucket.name, "team", tmp_path / "tree")
    assert _points(watcher.poll_once(), "run") == 60
