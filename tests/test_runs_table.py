"""The runs table as a sweep fills it: rows arrive in batches, between the rows already shown, some
change, some go, one is renamed. Whatever the sequence, the table shows exactly the rows it was
given, in their order, the cursor stays on the run it was on, and a row that did not change keeps
the cells it was drawn with (a 10 000-run sweep is not redrawn whole for each batch)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from textual.app import App, ComposeResult

from triage_tui.core.watch.signals.kinds import RunHealth
from triage_tui.tui.view_data import RunRow
from triage_tui.tui.widgets.runs_table import RunsTable

NOW = 1_750_000_000.0


def _row(index: int, status: str = RunHealth.OK, step: int = 100) -> RunRow:
    return RunRow(
        path=Path(f"/sweep/run_{index:05d}"),
        name=f"run_{index:05d}",
        status=status,
        last_step=step,
        loss_last=2.5,
        loss_smoothed=2.6,
        chance_loss=10.37,
        vocab_size=32000,
        accuracy_last=0.5,
        last_update=NOW - 60,
        critical_kinds=frozenset(),
        loss_flagged=False,
        version=1,
        shown_status=status,
        state="ended",
    )


def _worst_first(rows: list[RunRow]) -> list[RunRow]:
    return sorted(rows, key=RunRow.sort_key)


class _TableApp(App):
    def compose(self) -> ComposeResult:
        yield RunsTable()


def _shown(table: RunsTable) -> list[str]:
    """The run names in the table's rows, top to bottom, as drawn."""
    return [table.get_row_at(index)[1].plain for index in range(table.row_count)]


async def test_rows_arriving_changing_and_going_are_shown_in_order_with_the_cursor_kept():
    rng = random.Random(252)
    app = _TableApp()
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(RunsTable)
        present = {i: _row(i) for i in rng.sample(range(400), 150)}
        table.show_rows(_worst_first(list(present.values())), now=NOW)
        await pilot.pause()
        table.move_cursor(row=40, animate=False)
        selected = table.selected_path
        for _ in range(12):
            for i in rng.sample(range(400), 30):  # new runs, most of them between the rows shown
                present.setdefault(i, _row(i))
            for i in rng.sample(sorted(present), 5):  # a run turns critical: it moves to the top
                present[i] = replace(present[i], status=RunHealth.CRITICAL, shown_status=RunHealth.CRITICAL)
            for i in rng.sample(sorted(present), 3):  # a run's step moves on: its cells change in place
                present[i] = replace(present[i], last_step=present[i].last_step + 1, version=2)
            for i in rng.sample(sorted(p for p in present if present[p].path != selected), 4):
                del present[i]  # gone (the selected run stays)
            rows = _worst_first(list(present.values()))
            table.show_rows(rows, now=NOW)
            await pilot.pause()
            assert _shown(table) == [row.name for row in rows]
            assert table.selected_path == selected
            assert _shown(table)[table.cursor_row] == selected.name
            for row in rows:  # each cell as the row says, the changed ones included
                assert table.get_row(str(row.path))[2].plain == str(row.last_step)


async def test_an_unchanged_row_keeps_its_cells_and_a_filter_shows_only_its_rows():
    app = _TableApp()
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(RunsTable)
        rows = [_row(i) for i in range(300)]
        table.show_rows(rows, now=NOW)
        await pilot.pause()
        drawn = {row.path: table.get_row(str(row.path))[1] for row in rows}
        more = _worst_first([*rows, *(_row(i) for i in range(1000, 1020))])
        table.show_rows(more, now=NOW + 5)
        await pilot.pause()
        assert all(table.get_row(str(row.path))[1] is drawn[row.path] for row in rows)
        assert _shown(table) == [row.name for row in more]
        # A filter hides most rows at once: the table is rebuilt with the rows that match.
        matching = [row for row in more if row.name.endswith("7")]
        table.show_rows(matching, now=NOW + 6, total=len(more))
        await pilot.pause()
        assert _shown(table) == [row.name for row in matching]
        table.show_rows(more, now=NOW + 7, total=len(more))
        await pilot.pause()
        assert _shown(table) == [row.name for row in more]
