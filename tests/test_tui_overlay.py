"""Pilot tests of the chart's runs side by side (space), pins (p), the series picker (t) and the
wall-time axis (w), on runs written by torch's SummaryWriter."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from builders.pilot import SIZE, loaded, make_app, on_screen, screen_as, screen_text
from builders.tui import ACC_TAG, LOSS_TAG, SECONDS_PER_POINT, WALLTIME0, healthy_run, story_run, write_scalars
from builders.waiting import wait_for
from triage_tui.tui.screens.metric_picker import MetricPickerScreen
from triage_tui.tui.widgets.loss_chart import LossChart
from triage_tui.tui.widgets.runs_table import RunsTable

SMALL_VOCAB = 1000
# A tag is the trainer's text: markup in it is shown, never applied (nor its click action run).
HOSTILE_TAG = "[@click=app.quit]lr[/]"


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    """The story run and a healthy run (draft vocab 32 000), and a run of a 1 000-token draft vocab
    that logs a learning rate under a tag holding markup."""
    root = tmp_path_factory.mktemp("overlay")
    story_run(root)
    healthy_run(root)
    small = root / "small-vocab"
    write_scalars(small / "runs", np.linspace(6.0, 3.0, 30), np.linspace(0.1, 0.5, 30))
    writer = SummaryWriter(log_dir=str(small / "runs"), flush_secs=1)
    for index in range(30):
        writer.add_scalar(HOSTILE_TAG, 1e-4 * (index + 1), index * 50, walltime=WALLTIME0 + index * SECONDS_PER_POINT)
    writer.close()
    (small / "triage.toml").write_text(f'[run]\nvocab_size = {SMALL_VOCAB}\nloss_tags = ["{LOSS_TAG}"]\n')
    return root


def chart(app) -> LossChart:
    return app.main.query_one(LossChart)


def title(app) -> str:
    return str(app.main.query_one("#chart-pane").border_title)


def subtitle(app) -> str:
    return str(app.main.query_one("#chart-pane").border_subtitle)


def row_names(app) -> list[str]:
    table = app.main.query_one(RunsTable)
    return [str(table.get_row_at(index)[1]) for index in range(table.row_count)]


async def drawn(pilot, predicate, what: str) -> None:
    await wait_for(pilot, lambda: predicate(chart(pilot.app)), what=what)
    await pilot.pause()


async def test_space_marks_runs_and_the_chart_overlays_them_each_with_its_chance_line(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: app.main.query_one(RunsTable).row_count == 3, what="three runs")
        assert not chart(app).overlay and len(chart(app).lines) == 1
        await pilot.press("space", "down", "down", "space")
        await drawn(pilot, lambda c: c.overlay and len(c.lines) == 2, "two runs side by side")
        lines = chart(app).lines
        names = {series.name for series in lines}
        assert names == {"k2-finetune", "small-vocab"}
        # Each its own colour and chance line: ln 32000 and ln 1000.
        assert len({series.colour for series in lines}) == 2
        chances = sorted(series.chance_loss for series in lines if series.chance_loss is not None)
        assert chances == pytest.approx([math.log(SMALL_VOCAB), math.log(32000)])
        assert all(series.tag == LOSS_TAG for series in lines)
        assert "2 marked runs" in title(app)
        # The mark is in the rows, in the run's colour; the unmarked run has none.
        marked = [name for name in row_names(app) if name.startswith("●")]
        assert sorted(marked) == ["● k2-finetune", "● small-vocab"], row_names(app)
        # The legend names both runs on the drawn chart.
        text = chart(app).plt.build()
        assert "k2-finetune" in text and "small-vocab" in text
        # Unmarking both: the selected run alone again, raw and smoothed.
        await pilot.press("space", "up", "up", "space")
        await drawn(pilot, lambda c: not c.overlay and len(c.lines) == 1, "the selected run alone")
        assert chart(app).series.name == "k2-finetune"
        assert not any(name.startswith("●") for name in row_names(app))


async def test_p_pins_a_run_to_the_top_of_the_table(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: app.main.query_one(RunsTable).row_count == 3, what="three runs")
        before = row_names(app)
        assert before[0] == "k2-finetune"  # critical first
        last = before[-1]
        await pilot.press("down", "down", "p")
        await pilot.pause()
        after = row_names(app)
        assert after[0] == f"↑ {last}", after
        assert app.main.query_one(RunsTable).selected_path.name == last  # the cursor followed it
        await pilot.press("p")
        await pilot.pause()
        assert row_names(app) == before


async def test_t_filter_and_enter_put_that_series_on_the_chart_without_a_chance_line(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("t")
        await on_screen(pilot, MetricPickerScreen, "the series picker")
        picker = screen_as(app, MetricPickerScreen)
        assert ACC_TAG in picker.names and LOSS_TAG in picker.names
        await pilot.press(*"acc_0", "enter")
        await drawn(pilot, lambda c: c.metric == ACC_TAG and c.series is not None, "the accuracy")
        series = chart(app).series
        assert series.tag == ACC_TAG and series.chance_loss is None
        assert np.all(series.values < 0.1)  # the story run's accuracy, 2-7 %
        assert title(app).startswith(f"{ACC_TAG} · ")
        # Back to the loss: its option is first while the filter matches "loss".
        await pilot.press("t")
        await on_screen(pilot, MetricPickerScreen, "the series picker")
        await pilot.press(*"loss", "enter")
        await drawn(pilot, lambda c: c.metric is None and c.series is not None and c.series.tag == LOSS_TAG, "loss")
        assert chart(app).series.chance_loss == pytest.approx(math.log(32000))


async def test_a_bad_regex_says_so_in_one_line_and_esc_leaves_the_chart_as_it_was(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("t")
        await on_screen(pilot, MetricPickerScreen, "the series picker")
        picker = screen_as(app, MetricPickerScreen)
        await pilot.press(*"/acc_[/")
        error = picker.query_one("#metric-error")
        assert error.display and str(error.render()).startswith("not a regex:"), str(error.render())
        assert picker.choices == []
        # A good regex: the names it matches, the error gone.
        await pilot.press("backspace", "backspace", *"[0-9]$/")
        assert not error.display
        assert picker.choices == [ACC_TAG]
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, MetricPickerScreen), what="back")
        assert chart(app).metric is None and chart(app).series.tag == LOSS_TAG


async def test_series_names_with_markup_are_shown_as_text(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: app.main.query_one(RunsTable).row_count == 3, what="three runs")
        await pilot.press("down", "down", "t")
        await on_screen(pilot, MetricPickerScreen, "the series picker")
        assert HOSTILE_TAG in screen_as(app, MetricPickerScreen).names
        await pilot.press(*"click")
        await pilot.pause()
        assert any(f"● {HOSTILE_TAG}" in line or f"  {HOSTILE_TAG}" in line for line in screen_text(app))
        await pilot.press("enter")
        await drawn(pilot, lambda c: c.metric == HOSTILE_TAG and c.series is not None, "the hostile tag")
        assert app.is_running  # its click action was never run
        assert any(f"{HOSTILE_TAG} · small-vocab" in line for line in screen_text(app)), screen_text(app)


async def test_w_switches_the_x_axis_to_minutes_since_the_runs_first_point(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert "w time" in subtitle(app)
        await pilot.press("w")
        await drawn(pilot, lambda c: c.wall and c.series is not None and c.series.minutes is not None, "wall time")
        series = chart(app).series
        assert "x min (w)" in subtitle(app)
        assert series.minutes[0] == pytest.approx(0.0)
        # One point every SECONDS_PER_POINT seconds and every 50 steps.
        expected = (series.steps / 50) * SECONDS_PER_POINT / 60
        assert series.minutes == pytest.approx(expected)
        await pilot.press("w")
        await drawn(pilot, lambda c: not c.wall and c.series is not None and c.series.minutes is None, "steps")
        assert "w time" in subtitle(app)


async def test_the_help_and_the_command_palette_offer_the_new_keys(runs_root):
    from triage_tui.tui.screens.help import HelpScreen

    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        titles = [command.title for command in app.get_system_commands(app.screen)]
        for expected in ("Mark (space)", "Pin (p)", "Series (t)", "Wall time (w)"):
            assert expected in titles, titles
        await pilot.press("question_mark")
        await on_screen(pilot, HelpScreen, "help")
        rows = {key: what for _, key, what, _ in screen_as(app, HelpScreen).rows}
        assert {"space", "p", "t", "w"} <= set(rows), sorted(rows)
        assert "side by side" in rows["space"] and "wall time" in rows["w"]
        await pilot.press("escape")
        # From the palette too: the picker opens.
        await pilot.press("ctrl+p", *"Series", "enter")
        await on_screen(pilot, MetricPickerScreen, "the series picker from the palette")
