"""SVG snapshots of the TUI (pytest-textual-snapshot): main screen at 80x24 and 160x48, drill-down, dialog.

Stable by construction: the runs are written with fixed wall times and seeds into a fixed
directory (paths show in the dialog), the app's clock is frozen (the "age" column and the
stall flag), animations are off, and every worker has finished before the picture is taken.
Regenerate after an intended change with `pytest tests/test_tui_snapshots.py --snapshot-update`
and look at snapshot_report.html before committing the SVGs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from builders.cache import held_while_used
from builders.console_pane import TRAIN_LOG, write_console
from builders.tui import FROZEN_NOW, healthy_run, node_samples, story_run
from builders.waiting import wait_for
from triage_tui.tui.app import TriageApp
from triage_tui.tui.screens.console import ConsoleScreen
from triage_tui.tui.screens.drilldown import DrillDownScreen
from triage_tui.tui.screens.remap import ConfirmRemapScreen
from triage_tui.tui.widgets.loss_chart import LossChart

# A fixed place, not tmp_path: the remap dialog names the files it would write.
SNAPSHOT_RUNS = Path("/tmp/triage-tui-snapshots")


def _build(directory: Path) -> None:
    story_run(directory / "runs")
    healthy_run(directory / "runs")


@pytest.fixture(scope="module")
def runs_root() -> Iterator[Path]:
    """Built once per machine and version of the builders (builders.cache): a builder changed since
    the last build, or a writer upgraded, builds the runs again, once no test run is using them."""
    with held_while_used(SNAPSHOT_RUNS, _build) as directory:
        # Written just now, whenever they were built: runs idle for long are read less often and
        # say so in the flags pane (core.watch.read_schedule), which would vary with the build's age.
        for path in [directory / "runs", *(directory / "runs").rglob("*")]:
            os.utime(path)
        yield directory / "runs"


def frozen_app(root: Path) -> TriageApp:
    app = TriageApp([root], poll_interval=0.2, use_watchdog=False, device="cpu", now=lambda: FROZEN_NOW)
    app.animation_level = "none"
    return app


async def until(pilot, predicate) -> None:
    await wait_for(pilot, predicate, what="the snapshot's setup")


async def loaded(pilot) -> None:
    app = pilot.app
    await until(pilot, lambda: app.polls > 0 and app.main.query_one(LossChart).series is not None)
    await pilot.pause()  # the screen has taken in every message


async def checked(pilot) -> None:
    app = pilot.app
    await loaded(pilot)
    await pilot.press("c")
    await until(pilot, lambda: app.checks.running_for is None and bool(app.checks.diagnoses))
    app.clear_notifications()
    await pilot.pause()  # the screen has taken in every message


def test_main_80x24(snap_compare, runs_root):
    assert snap_compare(frozen_app(runs_root), terminal_size=(80, 24), run_before=loaded)


def test_main_160x48(snap_compare, runs_root):
    assert snap_compare(frozen_app(runs_root), terminal_size=(160, 48), run_before=loaded)


def test_main_with_hypotheses_80x24(snap_compare, runs_root):
    assert snap_compare(frozen_app(runs_root), terminal_size=(80, 24), run_before=checked)


def test_drilldown_details_80x24(snap_compare, runs_root):
    async def run_before(pilot) -> None:
        await checked(pilot)
        await pilot.press("h", "enter")
        await until(pilot, lambda: isinstance(pilot.app.screen, DrillDownScreen))
        await pilot.press("2")
        await pilot.pause()  # the screen has taken in every message

    assert snap_compare(frozen_app(runs_root), terminal_size=(80, 24), run_before=run_before)


def test_remap_dialog_80x24(snap_compare, runs_root):
    async def run_before(pilot) -> None:
        await checked(pilot)
        await pilot.press("m")
        await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmRemapScreen))
        await pilot.pause()  # the screen has taken in every message

    assert snap_compare(frozen_app(runs_root), terminal_size=(80, 24), run_before=run_before)


def _node(sample):
    """The node pane over the loaded app, sampled from a fixed value (NVML absent here)."""
    from triage_tui.tui.screens.node import NodeScreen

    async def run_before(pilot) -> None:
        await loaded(pilot)
        screen = NodeScreen(lambda: sample, interval=3600.0)
        await pilot.app.push_screen(screen)
        await until(pilot, lambda: screen.samples_shown > 0)
        await pilot.pause()  # the screen has taken in every message

    return run_before


def test_node_no_driver_80x24(snap_compare, runs_root):
    no_driver, _ = node_samples()
    assert snap_compare(frozen_app(runs_root), terminal_size=(80, 24), run_before=_node(no_driver))


def test_node_no_driver_160x48(snap_compare, runs_root):
    no_driver, _ = node_samples()
    assert snap_compare(frozen_app(runs_root), terminal_size=(160, 48), run_before=_node(no_driver))


def test_node_two_gpus_80x24(snap_compare, runs_root):
    _, two_gpus = node_samples()
    assert snap_compare(frozen_app(runs_root), terminal_size=(80, 24), run_before=_node(two_gpus))


def test_node_two_gpus_160x48(snap_compare, runs_root):
    _, two_gpus = node_samples()
    assert snap_compare(frozen_app(runs_root), terminal_size=(160, 48), run_before=_node(two_gpus))


def _console(root: Path):
    """The console pane of a run whose train.log ends in a CUDA out-of-memory traceback."""

    async def run_before(pilot) -> None:
        app = pilot.app
        await loaded(pilot)
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, ConsoleScreen) and app.screen.updates > 0)
        await pilot.pause()

    run = healthy_run(root)
    write_console(run, TRAIN_LOG + "".join(f"step {step} loss 2.{step:02d}\n" for step in range(3)))
    return run_before


def test_console_80x24(snap_compare, tmp_path):
    run_before = _console(tmp_path)
    assert snap_compare(frozen_app(tmp_path), terminal_size=(80, 24), run_before=run_before)


def test_console_160x48(snap_compare, tmp_path):
    run_before = _console(tmp_path)
    assert snap_compare(frozen_app(tmp_path), terminal_size=(160, 48), run_before=run_before)


async def overlaid(pilot) -> None:
    """Both runs marked (space): the chart draws them side by side, each named in the legend."""
    app = pilot.app
    await loaded(pilot)
    await pilot.press("space", "down", "space")
    await until(pilot, lambda: len(app.main.query_one(LossChart).lines) == 2)
    await pilot.pause()  # the screen has taken in every message


def test_overlay_80x24(snap_compare, runs_root):
    assert snap_compare(frozen_app(runs_root), terminal_size=(80, 24), run_before=overlaid)


def test_overlay_160x48(snap_compare, runs_root):
    assert snap_compare(frozen_app(runs_root), terminal_size=(160, 48), run_before=overlaid)


async def picking(pilot) -> None:
    """`t` over the marked runs, "acc" typed into its filter."""
    from triage_tui.tui.screens.metric_picker import MetricPickerScreen

    app = pilot.app
    await overlaid(pilot)
    await pilot.press("t")
    await until(pilot, lambda: isinstance(app.screen, MetricPickerScreen) and bool(app.screen.choices))
    await pilot.press(*"acc")
    await pilot.pause()  # the screen has taken in every message


def test_series_picker_80x24(snap_compare, runs_root):
    assert snap_compare(frozen_app(runs_root), terminal_size=(80, 24), run_before=picking)


def test_series_picker_160x48(snap_compare, runs_root):
    assert snap_compare(frozen_app(runs_root), terminal_size=(160, 48), run_before=picking)
