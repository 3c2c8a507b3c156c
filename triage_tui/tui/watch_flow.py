"""The watching worker: the core's Watcher in a thread, each poll posted to the app as RunsUpdated;
and the poll's notices (symlinks not followed, a bucket prefix not listed), said once per change."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from textual.worker import get_current_worker

from triage_tui.tui import messages
from triage_tui.tui.view_data import RowCache

if TYPE_CHECKING:
    from textual.message import Message

    from triage_tui.core.watch.run_status import RunStatus
    from triage_tui.core.watch.watcher import Watcher


def watch_runs(
    build: Callable[[], Watcher],
    started: Watcher | None,
    keep: Callable[[Watcher], None],
    post: Callable[[Message], object],
) -> None:
    """In a thread worker: build the watcher (discovery walks directories, the first poll reads whole files,
    so never on the UI thread) unless ``started`` one is given, hand it to ``keep``, and post each poll
    until the worker is cancelled (the app exits)."""
    from triage_tui.core.read.runs.discover import skipped_links_note
    from triage_tui.core.read.runs.walk import walk_limits_note

    stop = get_current_worker().cancelled_event
    rows = RowCache()
    watcher = started or build()
    keep(watcher)

    def on_update(statuses: list[RunStatus]) -> None:
        post(
            messages.RunsUpdated(
                list(statuses),
                [rows.row(s) for s in statuses],
                watcher.polls,
                skipped_links_note(watcher.skipped_links),
                # A bucket prefix that could not be listed, an object under no run: said, not lost.
                "\n".join(error.line() for error in watcher.unplaced_errors) or None,
                walk_limits_note(watcher.walk_limits),
            )
        )

    watcher.run(on_update, stop)


class PollNotices:
    """What a poll says beside its runs, each said once per change (as `scan` says it on stderr): a run
    behind a skipped link, or below the walk's bounds, is not missing by accident; a prefix that could not
    be listed is not empty."""

    def __init__(self) -> None:
        # the last said of each
        self.shown: dict[str, str | None] = {"skipped_links": None, "walk_limits": None, "unplaced_errors": None}

    def changed(self, update: messages.RunsUpdated) -> Iterator[tuple[str, str, int]]:
        """(text, severity, timeout) of each notice that is new since the last poll."""
        notices = (("skipped_links", "warning", 10), ("walk_limits", "warning", 10), ("unplaced_errors", "error", 30))
        for name, severity, timeout in notices:
            text = getattr(update, name)
            if text != self.shown[name]:
                self.shown[name] = text
                if text is not None:
                    yield text, severity, timeout
