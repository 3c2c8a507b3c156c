"""tests/builders/cache.py under concurrency: the xdist workers of a run (and other checkouts' runs)
share its directories, so two processes asking at once must build one directory once, whole."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

from builders import cache

FILES = 20


def _slow_build(directory: Path) -> None:
    """Writes FILES files with pauses between them, and logs who built (so a second build shows)."""
    with open(directory.parent / "builds.log", "a") as log:
        log.write(f"{os.getpid()}\n")
    for i in range(FILES):
        (directory / f"part-{i}").write_text(str(i))
        time.sleep(0.005)


def _build_then_read(directory: str, key: str, seen: multiprocessing.Queue) -> None:
    built = cache.built_once(Path(directory), _slow_build, key)
    seen.put(sorted(p.name for p in built.iterdir()))


def _hold_while_used(directory: str, key: str, held, release, seen: multiprocessing.Queue) -> None:
    cache.builders_key = lambda: key  # this process's builders, as another checkout's would be
    with cache.held_while_used(Path(directory), _slow_build) as built:
        held.set()
        release.wait(30)
        seen.put((sorted(p.name for p in built.iterdir()), (built.parent / f"{built.name}.key").read_text()))


def _processes(target, *argsets):
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=target, args=args) for args in argsets]
    for proc in procs:
        proc.start()
    return procs


def test_two_processes_building_at_once_build_once_and_both_see_it_whole(tmp_path):
    directory = tmp_path / "built"
    seen = multiprocessing.get_context("fork").Queue()
    procs = _processes(_build_then_read, *[(str(directory), "k1", seen)] * 2)
    results = [seen.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    whole = sorted(f"part-{i}" for i in range(FILES))
    assert results == [whole, whole]
    assert len((tmp_path / "builds.log").read_text().split()) == 1
    assert (tmp_path / "built.key").read_text() == "k1"


def test_a_build_for_another_key_waits_until_no_reader_holds_the_directory(tmp_path):
    directory = tmp_path / "held"
    context = multiprocessing.get_context("fork")
    seen = context.Queue()
    held, release = context.Event(), context.Event()
    (reader,) = _processes(_hold_while_used, (str(directory), "old", held, release, seen))
    assert held.wait(60)
    other_held, other_release = context.Event(), context.Event()
    (rebuilder,) = _processes(_hold_while_used, (str(directory), "new", other_held, other_release, seen))
    # The rebuild cannot start while the reader holds the directory: the reader still sees its build.
    assert not other_held.wait(0.5)  # a bounded look for a lock that must not be granted
    release.set()
    files, key = seen.get(timeout=60)
    assert key == "old" and len(files) == FILES
    assert other_held.wait(60)
    other_release.set()
    files, key = seen.get(timeout=60)
    assert key == "new" and len(files) == FILES
    for proc in (reader, rebuilder):
        proc.join(30)
        assert proc.exitcode == 0
    assert len((tmp_path / "builds.log").read_text().split()) == 2
