"""Pilot tests of the TUI on runs written by the real writers (tests/builders/tui.py).

Each test drives the real app (real Watcher thread, real diagnose(), real remap) with key
presses and asserts on what it holds and shows.
"""

from __future__ import annotations

import asyncio
import io
import math
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from textual.widgets import Input, Label, Static, TabbedContent

from builders.check_run import details_of
from builders.mappings import DRAFT_VOCAB, POSITIONAL_MATCH, story_mappings
from builders.pilot import SIZE, checked, loaded, make_app, on_screen, polled, screen_as, screen_text
from builders.samples import copy_samples, git
from builders.tui import (
    ACC_TAG,
    LOSS_TAG,
    STEP_EVERY,
    healthy_run,
    story_run,
)
from builders.waiting import wait_for
from triage_tui.core.diagnose.checks.replay import ReplayDetails
from triage_tui.core.diagnose.checks.vocab import VocabDetails
from triage_tui.tui.screens.drilldown import CommandLines, DrillDownScreen, command_text
from triage_tui.tui.screens.help import HelpScreen
from triage_tui.tui.screens.remap import ConfirmRemapScreen, RemapRefusedScreen, RemapScreen
from triage_tui.tui.widgets.chart_pane import ChartPane
from triage_tui.tui.widgets.hypotheses_list import HypothesesList
from triage_tui.tui.widgets.loss_chart import LossChart
from triage_tui.tui.widgets.runs_table import RunsTable


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    """A story run and a healthy run, written once per module (the drafter is 9 MB)."""
    root = tmp_path_factory.mktemp("runs")
    story_run(root)
    healthy_run(root)
    return root


@pytest.fixture
def fresh_root(tmp_path) -> Path:
    """Its own copy for tests that write (remap writes beside the source checkpoint)."""
    story_run(tmp_path)
    healthy_run(tmp_path)
    return tmp_path


def all_files(root: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


async def test_flagged_run_is_sorted_first_with_the_chance_line(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        table = app.main.query_one(RunsTable)
        assert [row.name for row in app.rows] == ["k2-finetune", "scratch-drafter"]
        assert app.rows[0].status == "critical" and app.rows[1].status != "critical"
        assert table.row_count == 2 and table.selected_path == app.rows[0].path
        story_cells = [str(cell) for cell in table.get_row_at(0)]
        assert story_cells[0] == "✖" and story_cells[1] == "k2-finetune"
        # The loss column is the last logged point, the smoothed one TensorBoard's EMA of them.
        assert 18.0 <= float(story_cells[3]) <= 20.5 and 18.0 <= float(story_cells[4]) <= 20.5
        assert story_cells[5] == f"{math.log(DRAFT_VOCAB):.2f}"
        assert story_cells[6].endswith("%") and 2.0 <= float(story_cells[6][:-1]) <= 7.0
        chart = app.main.query_one(LossChart)
        assert chart.series.chance_loss == pytest.approx(math.log(DRAFT_VOCAB))
        assert chart.series.tag == LOSS_TAG and chart.series.last_step == 59 * STEP_EVERY
        # A critical flag rings the bell once, not on every poll.
        for _ in range(3):
            await polled(pilot)  # a few more polls
        assert app.bells == 1
        flags_text = str(app.main.query_one("#flags").render())
        assert "loss_above_chance" in flags_text


async def test_a_watcher_begun_before_textual_is_the_one_the_app_shows(runs_root):
    # `triage` begins the first poll before it imports Textual (start_reading).
    from triage_tui.commands.tui import start_reading

    watcher = start_reading([runs_root], poll_interval=0.2, use_watchdog=False)
    app = make_app(runs_root, watcher=watcher)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert app.watcher is watcher
        assert [row.name for row in app.rows] == ["k2-finetune", "scratch-drafter"]
        assert app.rows[0].status == "critical"
        polls = watcher.polls
        await polled(pilot)  # it goes on polling as the app's own would
        assert watcher.polls > polls


async def test_check_key_ranks_the_mapping_hypothesis_first(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await checked(pilot)
        story = app.rows[0].path
        diagnosis = app.checks.diagnoses[story]
        assert diagnosis.hypotheses[0].id == "vocab_mapping_mismatch"
        assert details_of(diagnosis.checks["vocab_mapping"], VocabDetails).positional_match == POSITIONAL_MATCH
        shown = app.main.query_one(HypothesesList)
        assert shown.option_count == len(diagnosis.hypotheses)
        assert shown.get_option_at_index(0).id == "vocab_mapping_mismatch"
        assert "252 / 32000" in str(shown.get_option_at_index(0).prompt)
        assert app.main.query_one("#analysis-pane").has_class("-done")


async def test_enter_on_a_checked_run_opens_its_best_hypothesis(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await checked(pilot)
        await pilot.press("enter")  # focus is still on the runs table after `c`
        await on_screen(pilot, DrillDownScreen, "drill-down")
        assert "252 / 32000 draft positions" in _plain(app.screen.query_one("#evidence-body"))


async def test_drilldown_tabs_hold_the_numbers(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await checked(pilot)
        await pilot.press("h", "enter")
        await on_screen(pilot, DrillDownScreen, "drill-down")
        screen = app.screen
        tabs = screen.query_one(TabbedContent)
        assert [pane.id for pane in tabs.query("TabPane")] == ["evidence", "details", "action"]
        evidence = _plain(screen.query_one("#evidence-body"))
        assert "252 / 32000 draft positions" in evidence
        details = _plain(screen.query_one("#details-body"))
        assert "252 / 32000 draft positions map to the same target token" in details
        assert "25750" in details and "6250" in details  # overlap, only in the checkpoint's vocab
        # The first mismatching position: 252, where the run's own tokens begin.
        checkpoint_hot, run_hot = (m.hot_ids for m in story_mappings())
        rows = [line.split() for line in details.splitlines()]
        assert ["252", str(checkpoint_hot[252]), "–", str(run_hot[252]), "–"] in rows
        await pilot.press("3")
        assert tabs.active == "action"
        inputs = app.checks.diagnoses[app.rows[0].path].inputs
        # Each fix is the CLI's own command, an option a line continued with "\": copied from tmux it
        # still runs. A line wider than the pane keeps its tail, "…" where its middle was; `c` copies it whole.
        widgets = list(screen.query(".command").results(CommandLines))
        commands = [widget.command for widget in widgets]
        assert commands == list(inputs.fix_commands())
        assert commands[0] == f"triage remap {inputs.checkpoint} --mapping {inputs.mapping}"  # no target known
        assert commands[1] == f"triage remap {inputs.checkpoint} --keep-checkpoint-mapping"
        for widget, command in zip(widgets, commands, strict=True):
            drawn = [widget.render_line(y).text.rstrip() for y in range(widget.size.height)]
            assert len(drawn) == 2 and all(len(line) <= widget.size.width for line in drawn), drawn
            assert drawn[1].lstrip().startswith("--")
            whole = [line.removesuffix(" \\").strip() for line in command_text(command).plain.splitlines()]
            for line, full in zip(drawn, whole, strict=True):
                shown = line.removesuffix(" \\").strip()
                assert shown == full or ("…" in shown and full.endswith(shown.split("…")[-1])), (shown, full)
            if not any("…" in line for line in drawn):
                assert " ".join(whole) == command
        await pilot.press("c")
        assert app.clipboard == commands[0]
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, DrillDownScreen), what="back")
        # The mask hypothesis: every invariant with its result; 2 x 6 250 ids differ in membership.
        ids = [h.id for h in app.checks.diagnoses[app.rows[0].path].hypotheses]
        await pilot.press(*["down"] * ids.index("verifier_mask_mismatch"), "enter")
        await on_screen(pilot, DrillDownScreen, "mask drill-down")
        assert screen_as(app, DrillDownScreen).hypothesis.id == "verifier_mask_mismatch"
        assert "m" not in app.screen.active_bindings  # remap belongs to the mapping hypothesis
        lines = [" ".join(line.split()) for line in _plain(app.screen.query_one("#details-body")).splitlines()]
        assert any(r.startswith("✖ checkpoint t2d == run t2d 12500 target ids differ") for r in lines)
        assert any(r.startswith("✔ run: hot ids strictly ascending") for r in lines)


def _plain(static) -> str:
    """The text a Static shows, as the user reads it (rendered at a generous width)."""
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(static.content)
    return console.export_text()


async def test_remap_dialog_says_what_it_writes_and_n_writes_nothing(fresh_root):
    from triage_tui.core.fix.remap.plan import plan_remap

    app = make_app(fresh_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await checked(pilot)
        before = all_files(fresh_root)
        await pilot.press("m")
        await on_screen(pilot, ConfirmRemapScreen, "confirm dialog")
        inputs = app.checks.diagnoses[app.rows[0].path].inputs
        expected = plan_remap(inputs.checkpoint, inputs.mapping, target=inputs.target)
        assert screen_as(app, ConfirmRemapScreen).plan.output == expected.output
        # Each count on one line as drawn; each path whole, folded at the dialog's edge when it is wider.
        plan_text = app.screen.query_one("#plan-text")
        drawn = [plan_text.render_line(y).text.rstrip() for y in range(plan_text.size.height)]
        assert_paths_shown(plan_text, (expected.output, expected.source, expected.mapping_path))
        for whole in (
            f"rows     {expected.rows_copied} copied into the run's order",
            f"{expected.rows_initialized} initialised from {expected.init_from}",
        ):
            assert any(whole in line for line in drawn), (whole, drawn)
        assert len(str(expected.output)) > 60  # at 80 columns it would have wrapped after a label
        assert app.screen.focused.id == "no"  # default No: Enter alone writes nothing
        await pilot.press("n")
        await wait_for(pilot, lambda: not app.remap.running, what="dialog closed")
        assert not isinstance(app.screen, ConfirmRemapScreen)
        await polled(pilot)
        assert not any(worker.group == "remap" and not worker.is_finished for worker in app.workers)
        assert all_files(fresh_root) == before


async def test_remap_y_writes_a_verified_checkpoint_in_the_runs_order(fresh_root):
    app = make_app(fresh_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await checked(pilot)
        story = app.rows[0].path
        inputs = app.checks.diagnoses[story].inputs
        await pilot.press("m")
        await on_screen(pilot, ConfirmRemapScreen, "confirm dialog")
        output = screen_as(app, ConfirmRemapScreen).plan.output
        await pilot.press("y")
        await wait_for(pilot, lambda: story in app.remap.reports, timeout=60, what="remap")
        report = app.remap.reports[story]
        assert report.verified and Path(report.output) == output
        assert screen_as(app, RemapScreen).report is report
        assert "wrote a verified checkpoint" in str(app.screen.query_one("#remap-status").render())
        await pilot.pause()
        result = app.screen.query_one("#remap-result")
        assert len(str(report.output)) > result.size.width  # at 80 columns the output's path folds
        assert_paths_shown(result, (report.output, report.source, report.mapping))
        # A second remap of the same checkpoint would write where the first did: refused, the reason
        # whole beside the path, not a toast cut to two lines.
        while not isinstance(app.screen, type(app.main)):
            await pilot.press("escape")
            await pilot.pause()
        await pilot.press("m")
        await on_screen(pilot, RemapRefusedScreen, "second remap refused")
        refused = app.screen.query_one("#remap-refused")
        assert_paths_shown(refused, (report.output,))
        said = " ".join(refused.render_line(y).text.strip() for y in range(refused.size.height))
        reason = "already exists (an earlier remap?): nothing was written; remove it or use `triage remap --force`"
        assert reason in said
        assert Path(report.output).is_dir()
        # Row j of the new head is the old row of the same target token.
        checkpoint_hot, run_hot = (m.hot_ids for m in story_mappings())
        old_position = {int(t): i for i, t in enumerate(checkpoint_hot)}
        new_files = sorted(Path(output).glob("*.safetensors"))
        with (
            safe_open(str(inputs.checkpoint / "model.safetensors"), "pt") as old,
            safe_open(str(new_files[0]), "pt") as new,
        ):
            old_head, new_head = old.get_tensor("lm_head.weight"), new.get_tensor("lm_head.weight")
            new_d2t = new.get_tensor("d2t").numpy()
        assert np.array_equal(new_d2t + np.arange(DRAFT_VOCAB), run_hot)
        for j in (0, 251, 252, 20_000, 31_999):
            token = int(run_hot[j])
            if token in old_position:
                assert np.array_equal(new_head[j].numpy(), old_head[old_position[token]].numpy())


async def test_readonly_has_no_remap(runs_root):
    app = make_app(runs_root, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await checked(pilot)
        assert "m" not in app.screen.active_bindings
        assert not any(c.title.startswith("Remap") for c in app.get_system_commands(app.screen))
        await pilot.press("m")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmRemapScreen) and not app.remap.running
        await pilot.press("h", "enter")
        await on_screen(pilot, DrillDownScreen, "drill-down")
        assert "m" not in app.screen.active_bindings
        assert "read-only" in _plain(app.screen.query_one("#action-body"))
        await pilot.press("question_mark")
        await on_screen(pilot, HelpScreen, "help")
        assert not any("Remap" in what or "lm_head" in what for _, _, what, _ in screen_as(app, HelpScreen).rows)


def assert_paths_shown(widget, paths) -> None:
    """Each path drawn whole in ``widget``: on one line, or folded over the lines that follow at the
    widget's edge, never cut (what a user selects and copies is the whole path)."""
    drawn = [widget.render_line(y).text for y in range(widget.size.height)]
    assert all(len(line.rstrip()) <= widget.size.width for line in drawn)
    assert "…" not in "".join(drawn)
    joined = "".join(line.strip() for line in drawn)
    for path in map(str, paths):
        assert path in joined, (path, drawn)


def notifications(app) -> list[str]:
    """The toasts shown now (the app shows the newest only, its title leading its one line)."""
    return [note.message for note in app._notifications]


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_a_toast_is_over_the_keys_footer_and_covers_no_pane(runs_root, size):
    from textual.widgets._toast import Toast

    app = make_app(runs_root)
    async with app.run_test(size=size, notifications=True) as pilot:
        await loaded(pilot)
        await pilot.press("m")  # before any check: the toast says why not
        await pilot.press("m")  # twice: still one toast
        await wait_for(pilot, lambda: bool(app.screen.query(Toast)), what="the toast")
        await pilot.pause()
        (toast,) = app.screen.query(Toast)
        assert toast.region.height <= 2 and toast.region.bottom == size[1]
        text = str(toast.render())
        assert text == "m: no remap: run the checks first (c): the remap follows from what the vocab check finds"
        for pane in app.main.query(".pane"):
            assert not pane.content_region.overlaps(toast.region), pane.id


async def test_keys_that_cannot_act_say_why(runs_root):
    """`m` before any check and `enter` on an unchecked run answer with the reason, not silence."""
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("m")
        assert not app.remap.running
        assert any("run the checks first (c)" in note for note in notifications(app))
        await pilot.press("enter")
        assert not isinstance(app.screen, DrillDownScreen)
        assert any("press c to run the checks" in note for note in notifications(app))
        await pilot.press("down")  # the healthy run: checks find nothing to remap
        await checked(pilot)
        app.clear_notifications()
        await pilot.press("m")
        assert not app.remap.running
        assert [note for note in notifications(app) if note.startswith("m: no remap: the vocab check")]


async def test_without_readonly_remap_is_a_key_and_a_command(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        # Before checks the key is there and says why it cannot remap yet.
        assert app.screen.check_action("remap", ()) is True
        await checked(pilot)
        assert app.screen.active_bindings["m"].enabled
        assert any(c.title.startswith("Remap") for c in app.get_system_commands(app.screen))


async def test_help_lists_every_key_in_context(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await on_screen(pilot, HelpScreen, "help")
        keys = {key for _, key, _, _ in screen_as(app, HelpScreen).rows}
        assert {"c", "m", "x", "/", "l", "q", "?"} <= keys
        assert any(where == "in the focused RunsTable" for where, _, _, _ in screen_as(app, HelpScreen).rows)
        # ctrl+c copies a selection, and with none (the usual case) quits: the help says what it does.
        (ctrl_c,) = [what for _, key, what, _ in screen_as(app, HelpScreen).rows if key == "^c"]
        assert ctrl_c == "Copy selected text; with none selected, quit", ctrl_c
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen), what="help closed")


async def test_help_lists_triages_keys_not_textuals_machinery(runs_root):
    """Focus cycling, a row table's column cursor, the macOS copy key and Textual's own quit line are
    not keys of triage: the help lists what a user of triage presses."""
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await on_screen(pilot, HelpScreen, "help")
        rows = screen_as(app, HelpScreen).rows
        keys = {key for _, key, _, _ in rows}
        assert not {"tab", "shift+tab", "super+c", "←", "→", "^q"} & keys, keys
        assert not any(what in ("Focus Next", "Focus Previous", "Page Left", "Page Right") for _, _, what, _ in rows)
        assert {"c", "m", "/", "q", "?", "↑", "↓", "⏎", "^c", "^p"} <= keys  # triage's own, and moving in the table


@pytest.mark.parametrize("size", [(100, 50), (200, 50)])
async def test_help_headings_are_whole(runs_root, size):
    """Each group's heading ("in the focused RunsTable") is drawn whole, not cut to the key column."""
    app = make_app(runs_root)
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await on_screen(pilot, HelpScreen, "help")
        shown = "\n".join(screen_text(app))
        for where in dict.fromkeys(where for where, _, _, _ in screen_as(app, HelpScreen).rows):
            assert f" {where} " in shown, (where, shown)


async def test_a_healthy_runs_action_tab_offers_no_remap(tmp_path):
    """The vocab check passed: the Action tab says there is nothing to remap, and neither the footer
    nor the help offers `m` (it would only say why not)."""
    runs = copy_samples(tmp_path / "sample_runs", ("healthy",))
    app = make_app(runs)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        await checked(pilot)
        diagnosis = app.checks.diagnoses[app.rows[0].path]
        assert diagnosis.checks["vocab_mapping"].status == "pass"
        await pilot.press("h", "enter")
        await on_screen(pilot, DrillDownScreen, "drill-down")
        assert screen_as(app, DrillDownScreen).hypothesis.id == "vocab_mapping_mismatch"
        await pilot.press("3")
        await pilot.pause()
        assert "Nothing to remap" in _plain(app.screen.query_one("#action-body"))
        assert not app.screen.query(".command")
        assert "m" not in app.screen.active_bindings
        assert "Remap" not in screen_text(app)[-1]  # the footer
        await pilot.press("question_mark")
        await on_screen(pilot, HelpScreen, "help")
        assert not any("lm_head" in what for _, _, what, _ in screen_as(app, HelpScreen).rows)


async def test_slash_filters_runs(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        table = app.main.query_one(RunsTable)
        await pilot.press("slash", *"scratch", "enter")
        assert table.row_count == 1 and str(table.get_row_at(0)[1]) == "scratch-drafter"
        await pilot.press("slash", "escape")
        assert table.row_count == 2


async def test_the_run_count_is_drawn_by_the_table_with_its_rows(runs_root):
    """The count of runs sits in the table's header row, so it is drawn in the same frame as the rows it
    counts: counted in the top bar, a widget painted apart, it read "2 runs" over 5 rows while the first
    poll came in (seen on a pseudo-terminal). The top bar carries no count of its own."""
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.pause()
        table = app.main.query_one(RunsTable)
        header = table_lines(table)[0]
        assert table.row_count == 2 and "2 runs  ✖ 1" in header, header
        topbar = str(app.main.query_one("#topbar", Static).content)
        assert not re.search(r"\d+ runs?\b|critical", topbar), topbar
        await pilot.press("slash", *"scratch", "enter")
        await pilot.pause()
        assert table.row_count == 1 and "1 of 2 runs" in table_lines(table)[0] and "✖" not in table_lines(table)[0]


async def test_log_y_key_toggles_the_scale(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        chart = app.main.query_one(LossChart)
        await pilot.press("l")
        assert chart.log_y
        await pilot.press("l")
        assert not chart.log_y


async def test_s_and_shift_s_set_the_charts_smoothing_and_say_it(runs_root):
    """TensorBoard's smoothing slider as keys: the bright curve is the debiased EMA of the weight the
    chart's border names, one step per key, held at 0 and 0.99."""
    from triage_tui.tui.view_data import chart_series

    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        chart = app.main.query_one(LossChart)
        subtitle = lambda: str(app.main.query_one("#chart-pane").border_subtitle)  # noqa: E731
        assert "smoothed 0.6 bright (s/S)" in subtitle()
        before = chart.series.smoothed.copy()
        for key, weight in (("S", 0.8), ("S", 0.9), ("s", 0.8), ("s", 0.6), ("s", 0.3), ("s", 0.0), ("s", 0.0)):
            await pilot.press(key)
            assert f"smoothed {weight:g} bright" in subtitle(), (key, subtitle())
        pane = app.main.query_one(ChartPane)
        await wait_for(pilot, lambda: pane.drawn is not None and pane.drawn.subject.smoothing == 0.0, what="redrawn")
        await pilot.pause()
        drawn = chart.series
        assert np.array_equal(drawn.smoothed, drawn.values)  # weight 0: the raw curve itself
        assert not np.array_equal(before, drawn.smoothed)
        again = chart_series(app.statuses[drawn.path], 10_000, 0.9)
        assert again is not None and not np.array_equal(again.smoothed, again.values)


async def test_live_writer_chart_follows_and_bell_rings_once(tmp_path):
    """A trainer appends in a thread; the next whole poll shows its last point, and the chart follows.

    Counted in the watcher's polls, not in seconds (how long a poll takes is benchmarked, not tested).
    """
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "live"
    (run / "runs").mkdir(parents=True)
    (run / "triage.toml").write_text(f"[run]\nvocab_size = {DRAFT_VOCAB}\n")
    writer = SummaryWriter(log_dir=str(run / "runs"), flush_secs=1)
    latest = {"step": -1}

    def write(points: range, loss, accuracy) -> None:
        for i in points:
            writer.add_scalar(LOSS_TAG, loss(i), i * STEP_EVERY)
            writer.add_scalar(ACC_TAG, accuracy(i), i * STEP_EVERY)
            writer.flush()
            latest["step"] = i * STEP_EVERY

    app = make_app(tmp_path, poll_interval=0.25)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.polls > 0, what="first poll")
        chart = app.main.query_one(LossChart)
        # Healthy, then worse than chance: the trainer writes while the app runs.
        for points, loss, accuracy in (
            (range(15), lambda i: 6.0 - i * 0.1, lambda i: 0.3 + i * 0.01),
            (range(15, 30), lambda i: 4.5 - i * 0.05, lambda i: 0.45 + i * 0.01),
        ):
            thread = threading.Thread(target=write, args=(points, loss, accuracy))
            thread.start()
            await polled(pilot)  # reads whatever part the writer has flushed meanwhile
            await asyncio.to_thread(thread.join)
            await polled(pilot)
            assert app.rows[0].last_step == latest["step"]
            await wait_for(
                pilot, lambda: chart.series and chart.series.last_step == latest["step"], what="chart to catch up"
            )
        assert app.bells == 0 and app.rows[0].status != "critical"
        await asyncio.to_thread(write, range(30, 60), lambda i: 19.0, lambda i: 0.03)
        await polled(pilot)
        assert app.rows[0].status == "critical" and app.rows[0].last_step == latest["step"]
        await wait_for(
            pilot, lambda: chart.series and chart.series.last_step == latest["step"], what="chart to catch up"
        )
        await asyncio.to_thread(write, range(60, 70), lambda i: 19.5, lambda i: 0.02)
        for _ in range(3):
            await polled(pilot)
        assert app.rows[0].last_step == latest["step"] and app.bells == 1
    writer.close()


def test_cli_bad_path_is_one_line_and_exit_2(tmp_path, capsys):
    from triage_tui.cli import main

    missing = tmp_path / "nope"
    assert main([str(missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"triage: {missing}: no such file or directory"]


async def test_first_screen_paints_and_answers_keys_before_the_first_poll(runs_root, monkeypatch):
    """The watcher is held inside its first poll: the UI must paint and take keys anyway."""
    from triage_tui.core.watch.watcher import Watcher

    gate = threading.Event()
    real_poll = Watcher.poll_once

    def held_poll(self, *args, **kwargs):
        gate.wait(timeout=30)
        return real_poll(self, *args, **kwargs)

    monkeypatch.setattr(Watcher, "poll_once", held_poll)
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.polls == 0
        assert "scanning" in str(app.main.query_one("#topbar", Static).content)
        await pilot.press("question_mark")
        await on_screen(pilot, HelpScreen, "help while scanning")
        await pilot.press("escape")
        gate.set()
        await loaded(pilot)
        assert app.main.query_one(RunsTable).row_count == 2


async def test_checks_show_a_bar_each_and_cancel_releases_the_ui(runs_root, monkeypatch):
    """The vocab check is held mid-run: its bar shows, x cancels, nothing is recorded as a diagnosis."""
    from triage_tui.core.diagnose.checks import vocab
    from triage_tui.core.diagnose.checks.registry import CHECK_NAMES
    from triage_tui.tui.messages import ChecksFinished
    from triage_tui.tui.widgets.checks_progress import CheckBar

    gate = threading.Event()
    returned = threading.Event()
    real_check = vocab.check_vocab_mapping

    def held_check(*args, **kwargs):
        gate.wait(timeout=60)
        return real_check(*args, **kwargs)

    monkeypatch.setattr(vocab, "check_vocab_mapping", held_check)
    app = make_app(runs_root)
    real_post = app.post_message

    def post_message(message) -> bool:
        posted = real_post(message)
        if isinstance(message, ChecksFinished):
            returned.set()  # queued: the next pause handles it
        return posted

    monkeypatch.setattr(app, "post_message", post_message)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        story = app.rows[0].path
        await pilot.press("c")
        bars = {bar.check: bar for bar in app.main.query(CheckBar)}
        assert list(bars) == list(CHECK_NAMES)  # one bar each, in the registry's order
        await wait_for(
            pilot,
            lambda: "running" in str(bars["vocab_mapping"].query_one(".check-note", Label).content),
            what="vocab_mapping bar",
        )
        assert app.checks.running_for == story and app.screen.active_bindings["x"].enabled
        await pilot.press("x")
        await wait_for(pilot, lambda: app.checks.running_for is None, what="cancel")
        assert app.checks.outcomes[story] == "checks cancelled" and story not in app.checks.diagnoses
        gate.set()
        # The held thread finishes late, and its result must be dropped.
        await wait_for(pilot, returned.is_set, what="the cancelled checks' thread to report")
        await pilot.pause()
        assert story not in app.checks.diagnoses


async def test_command_palette_reaches_the_actions(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        titles = [command.title for command in app.get_system_commands(app.screen)]
        for expected in ("Check (c)", "Remap (m)", "Filter (/)", "Log-y (l)", "Help: every key"):
            assert expected in titles
        assert "Keys" not in titles  # one help, not two
        chart = app.main.query_one(LossChart)
        await pilot.press("ctrl+p", *"Log-y", "enter")
        await wait_for(pilot, lambda: chart.log_y, what="log-y from the palette")


def test_long_noisy_loss_is_thinned_with_its_smoothed_curve_aligned(tmp_path):
    """min/max thinning keeps spikes; the smoothed curve is taken at the same points (TB's EMA of all)."""
    from torch.utils.tensorboard import SummaryWriter

    from triage_tui.core.series import ema_smooth
    from triage_tui.core.watch.watcher import Watcher
    from triage_tui.tui.view_data import SMOOTHING_WEIGHT, chart_series

    rng = np.random.default_rng(0)
    values = 19.0 + rng.normal(0, 0.5, 5000)
    values[1234] = 60.0  # one spike
    writer = SummaryWriter(log_dir=str(tmp_path / "run" / "runs"))
    for step, value in enumerate(values, start=1):
        writer.add_scalar(LOSS_TAG, float(value), step, walltime=1.0 + step)
    writer.close()
    (status,) = Watcher([tmp_path], use_watchdog=False).poll_once()
    stored = status.scalars.get(LOSS_TAG)
    smoothed_all = ema_smooth(np.asarray(stored.values), SMOOTHING_WEIGHT)
    for width in (64, 120, 317):
        chart = chart_series(status, width)
        assert len(chart.steps) == len(chart.values) == len(chart.smoothed) <= width
        assert chart.values.max() == pytest.approx(60.0) and chart.last_step == 5000
        positions = chart.steps - 1
        assert np.allclose(chart.smoothed, smoothed_all[positions])


@pytest.mark.parametrize("order", ["events first", "manifest first"])
async def test_a_new_run_appears_once_and_rings_once_whatever_order_its_files_land_in(tmp_path, order):
    """A trainer writes `runs/` and a user `triage.toml` in either order: one run, one bell.

    Events first, the run is `k2-finetune/runs` until the manifest lands, then `k2-finetune`: the
    same run (its points carried over), so no second bell, and the cursor stays on it. Rescans
    are asked for (`wake(rescan=True)`) rather than waited for, so the test never races a timer.
    """
    staging = tmp_path / "staging"
    story_run(staging)
    watched = tmp_path / "watched"
    healthy_run(watched)
    (staging / "drafters").rename(watched / "drafters")
    (watched / "k2-finetune").mkdir()
    app = make_app(watched, rescan_interval=3600)
    first, second = ("runs", "triage.toml") if order == "events first" else ("triage.toml", "runs")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert [row.name for row in app.rows] == ["scratch-drafter"] and app.bells == 0
        for name in ("cache", first):
            (staging / "k2-finetune" / name).rename(watched / "k2-finetune" / name)
        await polled(pilot, rescan=True)
        if order == "events first":
            # No manifest, no checkpoint beside runs/: for now it is a run of its own, and critical.
            assert [row.name for row in app.rows] == ["k2-finetune/runs", "scratch-drafter"]
            assert app.bells == 1
            await pilot.press("up")
            assert app.main.query_one(RunsTable).selected_path == watched / "k2-finetune" / "runs"
        (staging / "k2-finetune" / second).rename(watched / "k2-finetune" / second)
        await polled(pilot, rescan=True)
        await polled(pilot)
        assert [row.name for row in app.rows] == ["k2-finetune", "scratch-drafter"]
        assert app.rows[0].status == "critical" and app.bells == 1
        table = app.main.query_one(RunsTable)
        assert str(table.get_row_at(0)[1]) == "k2-finetune" and table.row_count == 2
        # The cursor stays on the run it was on: the moved run, or the healthy one.
        selected = "k2-finetune" if order == "events first" else "scratch-drafter"
        assert table.selected_path == watched / selected


async def test_state_column_follows_the_clock(runs_root):
    """The runs' writers exited (builders.children.finished): "ended", and since when, by the app's clock."""
    from builders.tui import FROZEN_NOW

    clock = [FROZEN_NOW]
    app = make_app(runs_root, now=lambda: clock[0])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        table = app.main.query_one(RunsTable)
        assert [str(table.get_row_at(i)[7]) for i in range(2)] == ["ended 1m", "ended 1m"]
        clock[0] += 3 * 3600
        await wait_for(pilot, lambda: str(table.get_row_at(0)[7]) == "ended 3h", what="age to tick")
        assert str(table.get_row_at(1)[7]) == "ended 3h"
        # No stall flag on an ended run, however long ago it stopped; the flags pane says why it ended.
        assert all(flag.kind != "stalled" for status in app.statuses.values() for flag in status.flags)
        assert app.flags_state.state == ("ended", "no process of this node writes it")


# A trainer learning as SpecForge logs it, a point every 50 ms, each flushed.
LEARNING_LOOP = """
import sys, time
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter(log_dir=sys.argv[1], flush_secs=1)
step = 0
while True:
    writer.add_scalar("train/ploss_0", 2.0 + 8.0 / (1 + step), global_step=step)
    writer.add_scalar("train/acc_0", 0.7 - 0.6 / (1 + step), global_step=step)
    writer.flush()
    step += 1
    time.sleep(0.05)
"""


async def test_a_stopped_writer_turns_its_row_stalled_and_rings_the_bell(tmp_path):
    """A SummaryWriter child writing: its row says live, the flags pane which process. Stopped with
    SIGSTOP and the app's clock ten minutes on (past the threshold, without waiting for it): the row
    says stalled, the run is critical, the bell rings once, and the stalled flag names the process."""
    import signal
    import time

    from builders.children import ended, process_state, start

    offset = [0.0]
    app = make_app(tmp_path, now=lambda: time.time() + offset[0])
    with ended(start(LEARNING_LOOP, str(tmp_path / "live"))) as child:
        async with app.run_test(size=SIZE) as pilot:
            table = app.main.query_one(RunsTable)

            def state_cell() -> str:
                return str(table.get_row_at(0)[7]) if table.row_count else ""

            await wait_for(pilot, lambda: state_cell().startswith("live "), what="the row to say live", timeout=120)
            # The flags pane follows the selection, which the table reports in a message of its own
            # after the row is drawn: on a loaded machine the row can be on screen a moment before it.
            await wait_for(pilot, lambda: app.flags_state.state is not None, what="the flags pane to say its state")
            assert app.flags_state.state[0] == "live"
            assert f"writer pid {child.pid} (python" in app.flags_state.state[1]
            assert app.bells == 0
            child.send_signal(signal.SIGSTOP)
            await wait_for(pilot, lambda: process_state(child.pid) == "T", what="the kernel to stop the child")
            offset[0] = 600.0
            await wait_for(pilot, lambda: state_cell().startswith("stalled "), what="the row to say stalled")
            await polled(pilot)
            assert app.rows[0].status == "critical" and app.bells == 1
            (flag,) = [f for f in app.flags_state.flags if f.kind == "stalled"]
            assert flag.severity == "critical" and f"writer pid {child.pid}" in flag.message
            assert "stopped (SIGSTOP or ctrl-Z)" in flag.message
            assert app.flags_state.state is None  # the flag says it


async def test_sample_runs_walkthrough_remap_raises_replay_accuracy(tmp_path):
    """`triage sample_runs`, as the README tells it: c, enter, m, y on the vocab-mismatch run.

    The sample run has dumps and a target, so the replay measures the fix: the remapped
    drafter's first-step accuracy under the run's mapping must rise well above the broken one's.
    """
    runs = copy_samples(tmp_path / "sample_runs", ("vocab-mismatch",))  # not what a user added there
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert [row.name for row in app.rows] == ["vocab-mismatch"] and app.rows[0].status == "critical"
        await checked(pilot)
        diagnosis = app.checks.diagnoses[app.rows[0].path]
        assert diagnosis.hypotheses[0].id == "vocab_mapping_mismatch"
        replay = details_of(diagnosis.checks["replay"], ReplayDetails)
        assert replay.accuracy_checkpoint_mapping > 4 * replay.accuracy_run_mapping
        await pilot.press("h", "enter")
        await on_screen(pilot, DrillDownScreen, "drill-down")
        await pilot.press("m")
        await on_screen(pilot, ConfirmRemapScreen, "confirm dialog")
        await pilot.press("y")
        await wait_for(pilot, lambda: app.rows[0].path in app.remap.reports, timeout=120, what="remap")
        report = app.remap.reports[app.rows[0].path]
        assert report.verified and report.accuracy_before is not None
        assert report.accuracy_after > 4 * report.accuracy_before
        shown = _plain(app.screen.query_one("#remap-result"))
        assert f"{report.accuracy_before:.1%} → {report.accuracy_after:.1%}" in shown
        # Back on the main screen the old results look old, and `c` checks the remapped checkpoint.
        while not isinstance(app.screen, type(app.main)):
            await pilot.press("escape")
            await pilot.pause()
        pane = app.main.query_one("#analysis-pane")
        assert pane.has_class("-stale") and "BEFORE the remap" in str(pane.border_title)
        await checked(pilot)
        after = app.checks.diagnoses[app.rows[0].path]
        assert after.inputs.checkpoint == Path(report.output)
        assert after.checks["vocab_mapping"].status == "pass"
        # No cause rises after the fix: the run's start is still judged against drafter-a, not the repair.
        before_scores = {h.id: h.score for h in diagnosis.hypotheses}
        assert not [h.id for h in after.hypotheses if h.score > before_scores.get(h.id, 0.0) + 1e-9]
        assert after.top_score < 0.5
        assert not pane.has_class("-stale") and "remapped checkpoint" in str(pane.border_title)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to make a work tree")
async def test_the_readme_walkthrough_in_a_git_checkout_leaves_git_status_clean(tmp_path, monkeypatch):
    """`triage sample_runs` from a checkout, then c, enter, m, y on vocab-mismatch, as the README tells
    it: the remap wrote its drafter beside the source, into the checkout, and `git status` showed it.
    The dialog says before `y` that the output goes under the data directory and why (the git work
    tree), the remap writes it there, and `git status` in the checkout shows nothing afterwards."""
    checkout = tmp_path / "checkout"
    runs = copy_samples(checkout / "sample_runs", ("vocab-mismatch",))
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "samples"]):
        git(*args, cwd=checkout)
    data_home, cache_home = tmp_path / "data", tmp_path / "cache"
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("XDG_DATA_HOME", str(data_home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    app = make_app(runs)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert [row.name for row in app.rows] == ["vocab-mismatch"]
        await checked(pilot)
        await pilot.press("h", "enter")
        await on_screen(pilot, DrillDownScreen, "drill-down")
        await pilot.press("m")
        await on_screen(pilot, ConfirmRemapScreen, "confirm dialog")
        plan = screen_as(app, ConfirmRemapScreen).plan
        assert plan.output.is_relative_to(data_home / "triage" / "remapped")
        said = str(app.screen.query_one("#plan-text", Static).content).splitlines()
        assert str(plan.output) in said and str(checkout) in said
        assert any("not beside the source, which is in this git work tree:" in line for line in said), said
        await pilot.press("y")
        await wait_for(pilot, lambda: app.rows[0].path in app.remap.reports, timeout=120, what="remap")
        report = app.remap.reports[app.rows[0].path]
        assert report.verified and Path(report.output) == plan.output
        assert (plan.output / "model.safetensors").is_file()
    assert git("status", "--porcelain", "--untracked-files=all", cwd=checkout) == ""


def table_lines(table: RunsTable) -> list[str]:
    """The runs table as drawn (header first), one string per line."""
    return [table.render_line(y).text for y in range(table.size.height)]


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (110, 30), (120, 40), (200, 50)])
async def test_numbers_found_after_the_run_are_drawn_whole(tmp_path, size):
    """A run found before its first point shows "–"; its numbers, when they come, are drawn whole.

    The live-monitoring case: the table must not keep columns sized for "–" (12.15 drawn "12.1",
    5.3 % drawn "5.3"), at any terminal width from a tmux pane to a full screen.
    """
    run = tmp_path / "k2-finetune"
    (run / "runs").mkdir(parents=True)
    (run / "triage.toml").write_text(f"[run]\nvocab_size = {DRAFT_VOCAB}\n")
    app = make_app(tmp_path, rescan_interval=3600)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.polls > 0, what="first poll")
        await pilot.pause()
        table = app.main.query_one(RunsTable)
        assert "–" in table_lines(table)[1]
        from builders.tui import write_scalars

        write_scalars(run / "runs", [12.148, 12.152], [0.0533, 0.643])
        await polled(pilot, rescan=True)
        await wait_for(pilot, lambda: app.rows[0].last_step is not None, what="the points")
        await pilot.pause()
        row = table_lines(table)[1]
        cells = [str(cell) for cell in table.get_row_at(0)]
        assert cells[3:7] == ["12.15", "12.15", "10.37", "64.3%"]
        for text in cells[1:]:
            assert text in row, (text, row)


async def test_long_run_names_keep_both_ends(tmp_path):
    """Sweep runs differ at the end of their names: elided in the middle, both ends stay."""
    names = ["sweep-2026-11-30-kimi-k2-drafter/lr-3e-4/seed-1", "sweep-2026-11-30-kimi-k2-drafter/lr-3e-4/seed-2"]
    for name in names:
        healthy_run(tmp_path, name)
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        table = app.main.query_one(RunsTable)
        await pilot.pause()
        shown = [str(table.get_row_at(i)[1]) for i in range(2)]
        assert shown[0] != shown[1] and all("…" in name for name in shown)
        assert [name[:6] for name in shown] == ["sweep-", "sweep-"]
        assert [name[-6:] for name in shown] == ["seed-1", "seed-2"]
        assert all(name in " ".join(table_lines(table)) for name in shown)


def test_cli_a_file_that_is_not_a_run_is_one_line_and_exit_2(tmp_path, capsys):
    """`triage README.md` says what `triage scan README.md` says, instead of watching nothing."""
    from triage_tui.cli import main

    readme = tmp_path / "README.md"
    readme.write_text("# not a run\n")
    assert main([str(readme)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"triage: {readme}: not a directory, an event file (*tfevents*), a W&B run file (run-*.wandb) or a triage.toml"
    ]
    assert main(["scan", str(readme)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == err


async def test_an_empty_directory_says_what_triage_looks_for_and_that_it_watches(tmp_path):
    app = make_app(tmp_path, rescan_interval=3600)
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot)
        empty = app.main.query_one("#runs-empty")
        shown = _plain(empty)
        assert empty.display and str(tmp_path) in shown
        assert "tfevents" in shown and "triage.toml" in shown and "watching" in shown
        healthy_run(tmp_path)
        await polled(pilot, rescan=True)
        assert [row.name for row in app.rows] == ["scratch-drafter"] and not empty.display


async def test_a_filter_matching_nothing_says_so_and_clears_the_chart(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        chart = app.main.query_one(LossChart)
        await pilot.press("slash", *"zzz")
        await wait_for(pilot, lambda: chart.series is None, what="the chart to clear")
        assert app.main.query_one("#chart-pane").border_title == "loss"
        assert "no run name contains zzz" in _plain(app.main.query_one("#runs-empty"))
        await pilot.press("escape")
        await wait_for(pilot, lambda: chart.series is not None, what="the chart to come back")
        assert not app.main.query_one("#runs-empty").display


async def test_the_footer_keeps_its_keys_until_what_they_show_changes(runs_root):
    """Textual's Footer mounts every key again at each refresh of the bindings (each focus change:
    six while a 100-run sweep loads); KeysFooter keeps them while what they show is the same, and
    follows a key that changes (c is disabled while no run is selected)."""
    from textual.widgets._footer import FooterKey

    from triage_tui.tui.widgets.keys_footer import KeysFooter

    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        footer = app.main.query_one(KeysFooter)

        def shown() -> dict:
            return {key.key: key for key in footer.query(FooterKey)}

        def disabled(key: str) -> bool:
            return shown()[key].has_class("-disabled")

        await wait_for(pilot, lambda: "c" in shown() and not disabled("c"), what="the footer's keys")
        before = shown()
        assert disabled("x")  # no checks running
        app.main.query_one("#flags-pane").focus()  # a focus change: the same keys are shown
        app.main.refresh_bindings()
        for _ in range(3):
            await pilot.pause()
        assert all(key is before[name] for name, key in shown().items()) and shown().keys() == before.keys()
        # A filter matching no run, kept (enter): back on the table, nothing is selected to check.
        await pilot.press("slash", *"zzz", "enter")
        await wait_for(pilot, lambda: "c" in shown() and disabled("c"), what="c disabled")
        assert shown()["c"] is not before["c"]


def burst(app, keys: str) -> None:
    """Keys as a fast typist or a paste delivers them: all queued before the app handles the first."""
    from textual import events

    for char in keys:
        key = {"/": "slash", " ": "space"}.get(char, char)
        event = events.Key(key, char)
        event.set_sender(app)
        app._driver.send_message(event)


async def test_typed_filter_text_never_reaches_the_keys_and_esc_closes_the_filter_first(runs_root, monkeypatch):
    """ "/vocab" typed fast must not start the checks with its `c`; esc closes the filter before it cancels."""
    from triage_tui.core.diagnose.checks import vocab

    gate = threading.Event()
    real_check = vocab.check_vocab_mapping

    def held_check(*args, **kwargs):
        gate.wait(timeout=60)
        return real_check(*args, **kwargs)

    monkeypatch.setattr(vocab, "check_vocab_mapping", held_check)
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        burst(app, "/vocab")
        filter_input = app.main.query_one("#filter", Input)
        await wait_for(pilot, lambda: filter_input.value == "vocab", timeout=10, what="the filter text")
        assert app.checks.running_for is None and not app.checks.diagnoses
        burst(app, "/x")  # a slash inside the filter is text: run names hold slashes
        await wait_for(pilot, lambda: filter_input.value == "vocab/x", timeout=10, what="a slash in the filter")
        await pilot.press("escape")
        assert not filter_input.display and app.checks.running_for is None
        # With checks running and the filter open, esc closes the filter; a second esc cancels.
        await pilot.press("c", "slash", "k", "escape")
        assert not filter_input.display and app.checks.running_for is not None
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.checks.running_for is None, what="cancel")
        gate.set()


def test_triage_help_shows_the_tui_its_flags_and_keys(capsys):
    from triage_tui.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    shown = capsys.readouterr().out
    assert shown.startswith("usage: triage [PATH ...] [--readonly] [--poll]")
    for flag in ("--readonly", "--poll", "--interval", "--vocab-size", "--device", "scan", "check", "remap"):
        assert flag in shown, flag
    assert "ctrl+c quit" in shown


async def test_ctrl_c_quits_as_in_htop(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert app.return_code is None
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: app.return_code == 0, what="the app to quit")


async def test_chart_chance_label_sits_on_its_own_tick_and_log_y_and_nan_are_marked(tmp_path):
    healthy_run(tmp_path, "a-diverged")
    from builders.tui import write_scalars

    write_scalars(tmp_path / "a-diverged" / "runs", [3.0, 2.5, float("nan"), float("nan")], [0.3] * 4, first_point=60)
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await pilot.pause()
        lines = screen_text(app)
        (chance_row,) = [line for line in lines if "ln 32000 = 10.37" in line]
        assert "│10.37├ln 32000 = 10.37" in chance_row, chance_row  # the row's tick is the chance value
        assert any("NaN from 3100" in line for line in lines), "\n".join(lines)  # the first NaN's step
        await pilot.press("l")
        assert "log y" in str(app.main.query_one("#chart-pane").border_subtitle)


async def test_a_run_inside_the_warm_up_shows_it_in_the_table_and_the_flags_pane(tmp_path):
    """Three points near ln V: not judged yet, so neither the healthy glyph nor "no flags"."""
    from builders.tui import SECONDS_PER_POINT, WALLTIME0, write_scalars

    write_scalars(tmp_path / "fresh" / "runs", [10.5, 10.3, 10.1], [0.0, 0.01, 0.02])
    app = make_app(tmp_path, now=lambda: WALLTIME0 + 2 * SECONDS_PER_POINT + 5)  # live: its last point just in
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.pause()
        assert app.rows[0].status == "ok" and app.rows[0].shown_status == "warming"
        table = app.main.query_one(RunsTable)
        assert str(table.get_row_at(0)[0]) == "◌"
        flags = [line for line in screen_text(app) if "warming_up" in line]
        assert flags and "◌ warming_up  warming up until step 100" in flags[0], flags


async def test_one_chance_line_with_its_basis_in_the_tui_scan_and_check(tmp_path, capsys):
    """A SpecForge run averages its loss over masked positions too: chance is 0.953 × ln 32000 = 9.89,
    not ln 32000 = 10.37. The runs table, the chart's label, `scan` and `check` say the same line, and
    the table's column is not headed "ln V" over a value that is not ln V."""
    import json

    from triage_tui import cli

    runs = copy_samples(tmp_path / "sample_runs", ("diverged",))
    assert cli.main(["scan", str(runs), "--json"]) == 1
    (scanned,) = json.loads(capsys.readouterr().out)["runs"]
    assert scanned["chance_basis"] == "valid_fraction × ln V"
    label = f"{scanned['valid_fraction']:.3f} × ln 32000 = {scanned['chance_loss']:.2f}"
    assert label == "0.953 × ln 32000 = 9.89"
    cli.main(["scan", str(runs)])
    assert f"vs {label}" in capsys.readouterr().out
    cli.main(["check", str(runs / "diverged"), "--device", "cpu"])
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  chance ")]
    assert line.startswith(f"  chance     {label}  (specforge-classic averages over all positions")
    cli.main(["check", str(runs / "diverged"), "--device", "cpu", "--json"])
    checked = json.loads(capsys.readouterr().out)["chance"]
    assert checked["chance_loss"] == scanned["chance_loss"] and checked["chance_basis"] == scanned["chance_basis"]

    app = make_app(runs)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        await pilot.pause()
        table = app.main.query_one(RunsTable)
        assert str(table.get_row_at(0)[5]) == "9.89"
        assert "chance" in table_lines(table)[0] and "ln V" not in table_lines(table)[0]
        assert any(f"├{label}" in line for line in screen_text(app))


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (120, 40)])
async def test_in_log_y_the_chance_line_is_labelled_on_its_own_row(tmp_path, size):
    """In log-y as in linear, the row the chance line is drawn on carries the chance value as its tick
    (not a neighbouring round value such as 10.42), for the story's run above chance and a healthy one below it."""
    from builders.tui import story_run

    story_run(tmp_path)
    healthy_run(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        await pilot.press("l")
        chart = app.main.query_one(LossChart)
        for index in range(2):
            app.main.query_one(RunsTable).move_cursor(row=index)

            def charted(i: int = index) -> bool:
                return chart.series is not None and chart.series.path == app.rows[i].path

            await wait_for(pilot, charted, what="the run's chart")
            await pilot.pause()
            assert chart.log_y
            # The chart's row: the label is drawn on the line, at its left end (the flags pane says it too).
            (chance_row,) = [line for line in screen_text(app) if "├ln 32000 = 10.37" in line]
            assert "10.37├ln 32000 = 10.37" in chance_row, (app.rows[index].name, chance_row)


async def test_finished_checks_cover_nothing_and_reach_a_user_who_moved_on(runs_root, monkeypatch):
    """No toast over the evidence column; a user on another run reads the result in the top bar."""
    from triage_tui.core.diagnose.checks import vocab

    gate = threading.Event()
    real_check = vocab.check_vocab_mapping

    def held_check(*args, **kwargs):
        gate.wait(timeout=60)
        return real_check(*args, **kwargs)

    monkeypatch.setattr(vocab, "check_vocab_mapping", held_check)
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        story = app.rows[0].path
        await pilot.press("c", "down")  # checks on the story run; the user moves on to the healthy one
        gate.set()
        await wait_for(pilot, lambda: story in app.checks.diagnoses, what="checks")
        await pilot.pause()
        assert notifications(app) == []
        topbar = str(app.main.query_one("#topbar", Static).content)
        assert "checks done on k2-finetune: vocab_mapping_mismatch" in topbar
        await pilot.press("up")
        assert "checks done" not in str(app.main.query_one("#topbar", Static).content)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.checks.running_for is None, what="checks again")
        assert notifications(app) == []  # the pane beside it shows the answer


async def test_every_flag_shows_in_an_80x24_pane(tmp_path):
    """The flags pane of the compact layout shows each flag on a line of its own, none behind a scrollbar."""
    runs = copy_samples(tmp_path / "sample_runs", ("diverged",))
    app = make_app(runs, now=lambda: 2e9)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.pause()
        kinds = [flag.kind for flag in app.statuses[app.rows[0].path].flags]
        assert len(kinds) >= 2, kinds  # non_finite and warming_up at least (diverging too where its loss climbs first)
        lines = screen_text(app)
        for kind in kinds:
            assert any(f" {kind}  " in line for line in lines), (kind, "\n".join(lines))


@pytest.mark.parametrize("checks", [False, True], ids=["runs", "with-hypotheses"])
async def test_the_selected_run_stays_in_view_after_a_resize(tmp_path, checks):
    """Wide, then a tmux pane (80x24): the table shrinks to a few rows and must scroll to the
    selected run, the one the chart shows, not leave it out of view."""
    story_run(tmp_path)
    for index in range(11):
        healthy_run(tmp_path, f"sweep-{index:02d}")
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await loaded(pilot)
        if checks:
            await checked(pilot)
        await pilot.press(*["down"] * 9)
        table = app.main.query_one(RunsTable)
        chart = app.main.query_one(LossChart)
        selected = app.rows[9]
        await wait_for(pilot, lambda: table.selected_path == selected.path and chart.series.path == selected.path)
        for size in (SIZE, (100, 30), SIZE):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            await pilot.pause()
            lines = table_lines(table)[1:]  # under the header
            assert len(lines) < 10, lines  # the small layout really scrolls
            assert any(selected.name in line for line in lines), (size, selected.name, lines)
            assert table.selected_path == selected.path and chart.series.path == selected.path
