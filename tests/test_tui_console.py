"""The console pane (`o`) and the console's last error line in the drill-down, driven on runs whose
event files the real SummaryWriter wrote, beside a train.log written as trainers write theirs:
colours, a tqdm bar redrawn with carriage returns, a traceback ending in CUDA out of memory, and
a hostile line (a terminal title escape, Rich markup as text).
"""

from __future__ import annotations

import io

from textual.widgets import Static

from builders.console_pane import OOM, TRAIN_LOG, write_console
from builders.consoles import specforge_lines, torchrun_tee
from builders.pilot import SIZE, checked, loaded, make_app, on_screen, screen_as
from builders.tui import healthy_run, story_run
from builders.waiting import wait_for
from triage_tui.core.read.console.view import ERROR, TRACEBACK
from triage_tui.tui.screens.console import ConsoleLines, ConsoleScreen
from triage_tui.tui.screens.drilldown import DrillDownScreen
from triage_tui.tui.screens.main import MainScreen


def shown_lines(screen: ConsoleScreen) -> list[str]:
    return [line.text for line in screen.query_one(ConsoleLines).lines]


def drawn(widget: ConsoleLines) -> list[str]:
    return [widget.render_line(y).text.rstrip() for y in range(widget.size.height)]


def colours(widget: ConsoleLines, y: int) -> set[str]:
    return {segment.style.color.name for segment in widget.render_line(y) if segment.style and segment.style.color}


async def console_open(pilot, run_name: str) -> ConsoleScreen:
    app = pilot.app
    await loaded(pilot)
    row = next(index for index, row in enumerate(app.rows) if row.name == run_name)
    await pilot.press(*["down"] * row)
    await wait_for(pilot, lambda: app.main.selected_path == app.rows[row].path, what="the run selected")
    await pilot.press("o")
    await on_screen(pilot, ConsoleScreen, "the console")
    screen = app.screen
    assert isinstance(screen, ConsoleScreen)
    await wait_for(pilot, lambda: screen.updates > 0, what="the console read")
    await pilot.pause()
    return screen


async def test_o_shows_the_tail_marks_the_crash_and_follows_new_lines(tmp_path):
    run = healthy_run(tmp_path)
    log = write_console(run)
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = await console_open(pilot, run.name)
        lines = screen.query_one(ConsoleLines)
        assert shown_lines(screen) == [
            "INFO starting training on 8 GPUs",
            "[bold red]not markup[/bold red] [@click=app.quit]quit[/]",  # escapes gone, markup shown as text
            "Epoch 0: 100%|##########| 10/10 [00:10<00:00,  1.00it/s]",  # the bar's last redraw only
            "[rank0]: Traceback (most recent call last):",
            '[rank0]:   File "/work/train.py", line 12, in <module>',
            "[rank0]:     loss.backward()",
            f"[rank0]: {OOM}",
        ]
        assert [line.kind for line in lines.lines] == [None, None, None, TRACEBACK, TRACEBACK, TRACEBACK, ERROR]
        picture = drawn(lines)
        assert f"✖ [rank0]: {OOM}"[: lines.size.width - 1] in picture[6]
        assert picture[1].strip() == "[bold red]not markup[/bold red] [@click=app.quit]quit[/]"
        assert picture[3].startswith("│ [rank0]: Traceback")
        # The error line is red, a plain line is not.
        assert "red" in colours(lines, 6)
        assert "red" not in colours(lines, 0)
        assert app.screen is screen  # the markup did not click app.quit

        # Appended while open: shown, the view follows the end; a bar being drawn is the live line.
        with log.open("a") as handle:
            handle.write("resumed from checkpoint-500\nEpoch 1:  10%|#         | 1/10 [00:01<00:09]")
        await wait_for(pilot, lambda: "resumed from checkpoint-500" in shown_lines(screen), what="the new line")
        live = screen.query_one("#console-live", Static)
        await wait_for(pilot, lambda: live.display, what="the live bar")
        assert "Epoch 1:  10%" in str(live.content)
        with log.open("a") as handle:
            handle.write("\rEpoch 1:  20%|##        | 2/10 [00:02<00:08]\nstep 600 done\n")
        await wait_for(pilot, lambda: "step 600 done" in shown_lines(screen), what="the next lines")
        assert shown_lines(screen)[-2:] == ["Epoch 1:  20%|##        | 2/10 [00:02<00:08]", "step 600 done"]
        await pilot.pause()
        assert not live.display
        assert drawn(lines)[len(shown_lines(screen)) - 1].strip() == "step 600 done"

        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), what="back to the runs")


async def test_slash_searches_and_n_moves_between_matches(tmp_path):
    run = healthy_run(tmp_path)
    write_console(run, TRAIN_LOG + "".join(f"step {step} loss 2.{step}\n" for step in range(40)))
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await console_open(pilot, run.name)
        lines = screen.query_one(ConsoleLines)
        await pilot.press("slash", *"OUTofMemory", "enter")
        index = shown_lines(screen).index(f"[rank0]: {OOM}")
        assert lines.current == lines.first + index
        assert lines.scroll_y <= index < lines.scroll_y + lines.size.height  # scrolled to it
        note = str(screen.query_one("#console-note", Static).content)
        assert "match 1 of 1" in note
        await pilot.press("slash", *"loss 2.1", "enter")
        found = [i for i, text in enumerate(shown_lines(screen)) if "loss 2.1" in text]
        assert len(found) == 11  # 2.1 and 2.10 .. 2.19
        assert lines.current == lines.first + found[-1]  # the match nearest the end first
        await pilot.press("N")
        assert lines.current == lines.first + found[-2]
        await pilot.press("n", "n")
        assert lines.current == lines.first + found[0]  # wraps
        assert "match 1 of 11" in str(screen.query_one("#console-note", Static).content)
        row = lines.current - lines.first - int(lines.scroll_y)
        assert "step 1 loss 2.1" in drawn(lines)[row]
        await pilot.press("slash", *"no such text", "enter")
        assert "no line holds it" in str(screen.query_one("#console-note", Static).content)
        assert isinstance(app.screen, ConsoleScreen)  # `n` was the console's, not the node pane's


async def test_o_on_a_run_without_a_console_says_so(tmp_path):
    run = healthy_run(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert app.statuses[app.rows[0].path].info.console_files == ()
        await pilot.press("o")
        await wait_for(pilot, lambda: app._notifications, what="the toast")
        assert isinstance(app.screen, MainScreen)
        assert [note.message for note in app._notifications] == [
            "o: this run has no console log (train.log, *.out) that triage found"
        ]
        assert run.name in [row.name for row in app.rows]


async def test_the_drilldown_shows_the_consoles_last_error_line(tmp_path):
    run = story_run(tmp_path)
    write_console(run)
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert app.statuses[app.rows[0].path].info.console_files == (run / "train.log",)
        await checked(pilot)
        await pilot.press("enter")
        await on_screen(pilot, DrillDownScreen, "drill-down")
        screen = screen_as(app, DrillDownScreen)
        await wait_for(pilot, lambda: screen.console_line is not None, what="the console's last error line")
        assert screen.console_line.plain == f"console: last error line ✖ {OOM}  (train.log)\n"
        assert screen.query_one("#details-console").display
        assert _plain(screen.query_one("#details-console")).startswith(
            "console: last error line ✖ torch.OutOfMemoryError"
        )


def _plain(static) -> str:
    from rich.console import Console

    console = Console(width=300, record=True, file=io.StringIO())
    console.print(static.content)
    return console.export_text()


async def test_the_console_keys_are_in_the_help_and_the_palette_and_f_goes_to_the_next_file(tmp_path):
    import os

    from triage_tui.tui.screens.help import HelpScreen

    run = healthy_run(tmp_path)
    older = run / "slurm-7.out"
    older.write_text("srun: job 7 queued\n")
    os.utime(older, (1_700_000_000, 1_700_000_000))
    write_console(run)
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        main_commands = [command.title for command in app.get_system_commands(app.main)]
        assert "Console (o)" in main_commands
        screen = await console_open(pilot, run.name)
        commands = [command.title for command in app.get_system_commands(screen)]
        assert {"Search (/)", "Next (n)", "Previous (N)", "Next file (f)"} <= set(commands)
        await pilot.press("question_mark")
        await on_screen(pilot, HelpScreen, "help")
        rows = {(key, what) for where, key, what, _ in screen_as(app, HelpScreen).rows if where == "this screen"}
        assert {("/", "Search the console's lines"), ("n", "The next line the search matches")} <= rows
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen, what="help closed")
        assert screen.path.name == "train.log"  # the newest first
        await pilot.press("f")
        await wait_for(pilot, lambda: shown_lines(screen) == ["srun: job 7 queued"], what="the next file")
        assert "slurm-7.out  · 2 of 2" in str(screen.query_one("#console-title", Static).content)


async def test_the_flags_pane_says_what_was_read_of_the_runs_console(tmp_path):
    # torchrun --tee copied two workers' SpecForge lines into one log named with Rich markup.
    workers = tmp_path / "workers"
    workers.mkdir()
    ranks = []
    for rank in (0, 1):
        path = workers / f"{rank}_stdout.log"
        path.write_text(specforge_lines([(step, {"loss": 2.0 - step / 100}) for step in range(1, 6)]))
        ranks.append((rank, path))
    run = story_run(tmp_path / "runs")
    name = "[@click=app.quit][reverse]train.log"
    torchrun_tee(run / name, ranks)
    app = make_app(tmp_path / "runs")
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert app.statuses[app.rows[0].path].info.console_files == (run / name,)
        flags = app.main.query_one("#flags")
        said = f"read  {name}: SpecForge records (5 printed); rank 0's lines; 5 line(s) of other ranks skipped"
        await wait_for(pilot, lambda: said in _plain(flags), what="the console's note")
        assert isinstance(app.screen, MainScreen)  # the name's markup was shown, never applied
