"""Driving the app in Pilot tests: the app made for a root, and waits on what the test needs (the first
poll taken in, a screen composed, checks finished), never on amounts of time.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypeVar

from textual.screen import Screen

from builders.waiting import wait_for
from triage_tui.tui.app import TriageApp
from triage_tui.tui.widgets.loss_chart import LossChart

SIZE = (80, 24)


def make_app(root: Path, **kwargs) -> TriageApp:
    kwargs.setdefault("poll_interval", 0.2)
    kwargs.setdefault("use_watchdog", False)
    kwargs.setdefault("device", "cpu")
    app = TriageApp([root], **kwargs)
    app.animation_level = "none"
    return app


S = TypeVar("S", bound=Screen)


def screen_as(app, kind: type[S]) -> S:
    """The app's top screen, which must be a ``kind``: what a test reads that screen's own attributes
    through (``app.screen`` is typed as any Screen)."""
    screen = app.screen
    assert isinstance(screen, kind), f"{type(screen).__name__} is on top, not {kind.__name__}"
    return screen


async def on_screen(pilot, screen_type: type[Screen], what: str) -> None:
    """Wait until a pushed screen is on top and composed (pushing comes before its widgets exist)."""
    app = pilot.app
    await wait_for(
        pilot,
        lambda: isinstance(app.screen, screen_type) and app.screen.is_mounted and bool(app.screen.children),
        what=what,
    )
    await pilot.pause()


async def loaded(pilot) -> None:
    app = pilot.app
    await wait_for(
        pilot, lambda: app.polls > 0 and app.main.query_one(LossChart).series is not None, what="first poll and chart"
    )


async def polled(pilot, *, rescan: bool = False, timeout: float = 60.0) -> None:
    """Let the watcher finish one more whole poll (a rescan first if asked) and the UI take it in.

    Waits for the watcher's poll counter, not for seconds: the timeout only turns a hang into a failure.
    """
    app = pilot.app
    await wait_for(pilot, lambda: app.watcher is not None, timeout=timeout, what="the watcher")
    watcher = app.watcher
    target = watcher.polls + 2  # the poll under way may have started before the files changed
    watcher.wake(rescan=rescan)
    # Done with that poll (its update, if any, sent), and the app has taken in the last update sent.
    await wait_for(
        pilot,
        lambda: watcher.reported >= target and app.watcher_poll >= watcher.updated,
        timeout=timeout,
        what="a poll taken in",
    )
    await pilot.pause()


async def checked(pilot) -> None:
    app = pilot.app
    await pilot.press("c")
    await wait_for(pilot, lambda: app.checks.running_for is None and app.checks.diagnoses, what="checks")


def screen_text(app) -> list[str]:
    """What the terminal shows, line by line (from the app's own SVG screenshot)."""
    import html

    svg = app.export_screenshot()
    rows: dict[float, list[tuple[float, str]]] = {}
    for x, y, text in re.findall(
        r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)" textLength="[\d.]+"'
        r' clip-path="[^"]*">(.*?)</text>',
        svg,
    ):
        rows.setdefault(float(y), []).append((float(x), html.unescape(text).replace("\xa0", " ")))
    lines = []
    for y in sorted(rows):
        line = ""
        for x, text in sorted(rows[y]):
            column = round(x / 12.2)
            line = line.ljust(column)[:column] + text
        lines.append(line)
    return lines
