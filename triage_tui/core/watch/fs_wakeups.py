"""Filesystem events as wake-ups for the watcher: a watchdog Observer on the watched paths, and which of
its events are worth a poll (a run's scalar file, a manifest, a config, a new directory) or a rescan."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from triage_tui.core.read.runs.names import CONFIG_NAME, MANIFEST_NAME
from triage_tui.core.read.source_kinds import registry


def start_observer(paths: Sequence[Path], wake: Callable[[bool, Path], None]) -> Any | None:
    """A started watchdog Observer calling ``wake(rescan, path)`` for the events worth it (``path``:
    what changed), or None where it cannot run (watchdog missing, inotify's watch or instance limits:
    polling alone still works)."""
    try:
        from watchdog import events
        from watchdog.observers import Observer
    except ImportError:
        return None

    class _Hint(events.FileSystemEventHandler):
        def on_any_event(self, event) -> None:  # runs on the observer's thread
            rescan = wake_for(event)
            if rescan is not None:
                wake(rescan, Path(os.fsdecode(event.src_path)))

    # Writes, creations, moves and deletions only: not the opens and closes of files read, the
    # watcher's own polls among them (at 10 000 runs they overflowed inotify's queue, 16 384 events
    # by default, and watchdog then walked the whole tree again to reconcile its watches).
    wanted = [
        events.FileCreatedEvent,
        events.DirCreatedEvent,
        events.FileModifiedEvent,
        events.DirModifiedEvent,
        events.FileMovedEvent,
        events.DirMovedEvent,
        events.FileDeletedEvent,
        events.DirDeletedEvent,
        events.FileClosedEvent,
    ]
    observer = Observer()
    try:
        for path in paths:
            if path.is_dir():
                try:
                    observer.schedule(_Hint(), str(path), recursive=True, event_filter=wanted)
                except TypeError:  # a watchdog without event filters: every event, wake_for sorts them
                    observer.schedule(_Hint(), str(path), recursive=True)
        observer.start()
    except (OSError, RuntimeError):  # ENOSPC / EMFILE
        return None
    return observer


def wake_for(event: Any) -> bool | None:
    """None: no poll for this event; else a poll, with a rescan (True) when files came or went. Event
    files, manifests, configs and new directories wake the watcher; the rest does not (a hidden-state
    dump being written must not turn into a poll storm)."""
    if event.event_type in ("opened", "closed_no_write"):
        # Our own polls open and close every event file; waking on those would poll
        # again at once, forever (measured: ~19 polls/s, 12 % of a core at 200 runs).
        return None
    for raw in (getattr(event, "src_path", ""), getattr(event, "dest_path", "")):
        name = os.path.basename(os.fsdecode(raw)) if raw else ""
        if not name:
            continue
        created = event.event_type in ("created", "moved", "deleted")
        if any(kind.wakes and kind.claims(name) for kind in registry.SCALAR_SOURCES):
            return created
        if name in (MANIFEST_NAME, CONFIG_NAME) or (event.is_directory and created):
            return True
    return None
