"""The top bar's line: what triage watches, the filter, news of checks on another run, the poll, read-only."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.text import Text

from triage_tui.core.read.runs.remote import shown_path
from triage_tui.core.text import printable


def topbar_text(
    watched: Sequence[Path],
    *,
    polled: bool,
    filter_text: str,
    news: str | None,
    poll_interval: float,
    readonly: bool,
    buckets: Sequence[str] = (),
) -> Text:
    """``buckets``: one line a watched bucket prefix (objstore.cost.PrefixCost.line: requests, bytes,
    how often it is listed when idle, the day's estimate)."""
    text = Text()
    text.append(" triage ", style="bold reverse")
    if not polled:
        text.append("  scanning " + ", ".join(_shown_paths(watched)) + " …", style="dim")
    else:
        # The runs and their counts are in the table's own header row (RunsTable.count_label), drawn
        # with the rows: counted here, a frame apart, it read "2 runs" over 5 rows while a poll came in.
        text.append("  watching " + ", ".join(_shown_paths(watched)), style="dim")
        if filter_text:
            text.append(f"  filter: {filter_text}", style="cyan")
    if news is not None:
        text.append(f"  {news}", style="bold cyan")
    text.append(f"  poll {poll_interval:g}s", style="dim")
    if readonly:
        text.append("  read-only", style="bold magenta")
    for line in buckets:
        text.append(f"  {printable(line)}", style="dim")
    return text


def _shown_paths(paths: Sequence[Path]) -> list[str]:
    """The watched paths as the top bar names them: a directory by its name, a bucket prefix by its URL."""
    names = []
    for path in paths:
        shown = shown_path(path)
        names.append(printable(shown if shown != str(path) else (path.name or shown)))
    return names
