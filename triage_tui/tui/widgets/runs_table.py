"""The runs table: one row per run, worst first."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.text import Text
from textual.widgets import DataTable

from triage_tui.core.text import STATUS_GLYPHS, format_accuracy, printable
from triage_tui.core.watch.signals.kinds import RunHealth
from triage_tui.tui.view_data import SEVERITY_STYLE, STATE_STYLE, RunRow, format_age, format_loss, format_step
from triage_tui.tui.widgets.fitted_lines import fit_line

# The name column fills what the numbers leave, between these bounds.
MIN_NAME_WIDTH = 8
MAX_NAME_WIDTH = 40

# (label, key, width): every number column is as wide as the widest text its formatter gives
# (view_data.format_*), fixed, so a run found before its first point ("–") does not size the
# column for "–" and cut 12.15 to "12.1" once the points arrive. None: the name, sized to the pane.
COLUMNS = (
    ("", "status", 1),
    ("run", "name", None),
    ("step", "step", 6),  # 99999, 123k, 1.2M
    ("loss", "loss", 6),  # 12.15, 123.45, nan
    ("smooth", "smooth", 6),
    # The chance line the flags compare with: ln V, or valid_fraction × ln V where the trainer
    # averages over masked positions too (the chart's label and `scan` say which).
    ("chance", "chance", 6),  # 10.37
    ("acc", "acc", 6),  # 100.0%
    # Whether the run's writer is alive here (core.watch.run_state) and the time since its last event:
    # live 4s, ended 3h, stalled 12m, crashed 2d, unknown 365d; the age alone where not judged.
    ("state", "state", 12),
)
# More rows gone at once than this (a filter typed), the table is rebuilt: DataTable.remove_row
# renumbers every row after the one it removes.
_REMOVED_ONE_BY_ONE = 32
FIXED_WIDTH = sum(width for _, _, width in COLUMNS if width is not None)


def elide_middle(text: str, width: int) -> str:
    """``text`` in ``width`` cells, its middle replaced by "…": run names differ at their ends
    (``sweep/lr-3e-4/seed-1`` vs ``sweep/lr-3e-4/seed-2``), so both ends stay."""
    return fit_line(Text(text), width, tail_share=0.5).plain


def _name_cell(row: RunRow, width: int = MAX_NAME_WIDTH) -> Text:
    name = elide_middle(printable(row.name), width)  # a Text, never markup: run names are directory names
    if row.status == RunHealth.CRITICAL:
        return Text(name, style="bold red")
    return Text(name)


def _loss_cell(value: float | None, flagged: bool) -> Text:
    return Text(format_loss(value), style="bold red" if flagged else "", justify="right")


def _state_cell(row: RunRow, now: float) -> Text:
    """The run's state word, then the time since its last event (one column: "ended 3h")."""
    age = format_age(None if row.last_update is None else now - row.last_update)
    if row.state is None:
        return Text(age, style="dim")
    text = Text()
    text.append(row.state, style=STATE_STYLE.get(row.state, ""))
    text.append(f" {age}", style="dim")
    return text


def row_cells(row: RunRow, now: float, name_width: int = MAX_NAME_WIDTH) -> tuple[Text, ...]:
    glyph, style = STATUS_GLYPHS.get(row.shown_status, "?"), SEVERITY_STYLE.get(row.shown_status, "")
    return (
        Text(glyph, style=style),
        _name_cell(row, name_width),
        Text(format_step(row.last_step), justify="right"),
        _loss_cell(row.loss_last, row.loss_flagged),
        _loss_cell(row.loss_smoothed, row.loss_flagged),
        Text(format_loss(row.chance_loss), style="dim", justify="right"),
        Text(format_accuracy(row.accuracy_last), justify="right"),
        _state_cell(row, now),
    )


def count_label(rows: Sequence[RunRow], total: int) -> Text:
    """The name column's header: how many runs are shown (of how many, under a filter) and how many
    are critical. Drawn by the table with its rows, so the count is always of the rows on screen."""
    shown = len(rows)
    label = Text(f"{shown} run{'s' if shown != 1 else ''}" if shown == total else f"{shown} of {total} runs")
    critical = sum(1 for row in rows if row.status == RunHealth.CRITICAL)
    warning = sum(1 for row in rows if row.status == RunHealth.WARNING)
    error = sum(1 for row in rows if row.status == RunHealth.ERROR)
    if critical:
        label.append(f"  {STATUS_GLYPHS['critical']} {critical}", style=SEVERITY_STYLE["critical"])
    if warning:
        label.append(f"  {STATUS_GLYPHS['warning']} {warning}", style=SEVERITY_STYLE["warning"])
    if error:
        label.append(f"  {STATUS_GLYPHS['error']} {error}", style=SEVERITY_STYLE["error"])
    return label


def _same(a: Text, b: Text) -> bool:
    # Text.__eq__ ignores the base style, and colour is what changes when a run turns critical (or a
    # marked run's colour, a span of its name cell).
    return a.plain == b.plain and str(a.style) == str(b.style) and a.spans == b.spans


def _marked(cells: tuple[Text, ...], row: RunRow, width: int, colour: str | None, pinned: bool) -> tuple[Text, ...]:
    """The row's cells with its name after a mark in its curve's colour (space) and a pin (p)."""
    if colour is None and not pinned:
        return cells
    mark = Text()
    if colour is not None:
        mark.append("●", style=colour)
    if pinned:
        mark.append("↑", style="bold cyan")
    mark.append(" ")
    return (cells[0], Text.assemble(mark, _name_cell(row, width - len(mark))), *cells[2:])


class RunsTable(DataTable):
    """Runs sorted by severity; keyed by run path so updates keep the cursor on its run."""

    HELP = "Runs, worst first. ↑/↓ select a run; its loss, flags and hypotheses show beside it."

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._order: list[Path] = []
        self._rows: dict[Path, RunRow] = {}
        self._cells: dict[Path, tuple[Text, ...]] = {}  # the cells the table holds, by run
        self._made: dict[Path, tuple[RunRow, tuple]] = {}  # what each run's cells were made from
        self._moved: dict[Path, Path] = {}
        self._marks: dict[Path, str] = {}
        self._pinned: frozenset[Path] = frozenset()

        self._name_width = MIN_NAME_WIDTH
        self._now = 0.0

    def on_mount(self) -> None:
        for label, key, width in COLUMNS:
            self.add_column(label, key=key, width=width if width is not None else self._name_width)

    @property
    def name_width(self) -> int:
        return self._name_width

    def _fitting_name_width(self) -> int:
        """What the pane leaves for names once the numbers have their columns (and cell padding)."""
        spare = self.scrollable_content_region.width - FIXED_WIDTH - 2 * self.cell_padding * len(COLUMNS)
        return max(MIN_NAME_WIDTH, min(MAX_NAME_WIDTH, spare))

    def on_resize(self) -> None:
        width = self._fitting_name_width()
        if width != self._name_width:
            self._name_width = width
            self.columns[self._column_key("name")].width = width
            # Every row again, names elided to the new width.
            self.show_rows([self._rows[path] for path in self._order], now=self._now, redraw=True)

    def _column_key(self, key: str):
        return next(column_key for column_key in self.columns if column_key.value == key)

    @property
    def selected_path(self) -> Path | None:
        if not self._order or self.cursor_row < 0 or self.cursor_row >= len(self._order):
            return None
        return self._order[self.cursor_row]

    def show_rows(
        self,
        rows: Sequence[RunRow],
        *,
        now: float,
        redraw: bool = False,
        total: int | None = None,
        marks: dict[Path, str] | None = None,
        pinned: frozenset[Path] | None = None,
    ) -> None:
        """Show rows in their given order, touching only what changed; the name column's label
        counts them (of ``total`` found, when a filter hides some). ``marks`` and ``pinned``, when
        given, replace the runs marked (with their colours) and pinned.

        A run whose row is unchanged keeps its cells (only its age is redone), a new run is added,
        a gone one removed and the rows are sorted into the new order: the table measures only new
        cells. Rebuilt whole (every cell made and measured again) only on ``redraw`` or when most
        rows go at once (a filter): each removal is linear in the rows.
        """
        self._now = now
        if total is not None:
            self._show_count(count_label(rows, total))
        self._marks = self._marks if marks is None else marks
        self._pinned = self._pinned if pinned is None else pinned
        order = [row.path for row in rows]
        cells = {row.path: self._cells_of(row, now, redraw) for row in rows}
        selected = self.selected_path
        selected = self._moved.pop(selected, selected) if selected is not None else None
        self._moved.clear()
        gone = [path for path in self._order if path not in cells]
        if redraw or len(gone) > _REMOVED_ONE_BY_ONE:
            self.clear()
            for path in order:
                self.add_row(*cells[path], key=str(path))
            self._order = order
        else:
            self._change_rows(order, cells, gone)
        self._cells = cells
        self._rows = {row.path: row for row in rows}
        self._made = {row.path: (row, self._made_with(row)) for row in rows}
        if selected in cells and self.selected_path != selected:
            self.move_cursor(row=order.index(selected), animate=False)

    def _made_with(self, row: RunRow) -> tuple:
        """What a row's cells are made from besides the clock: the row, its mark, its pin, the name width."""
        return (self._marks.get(row.path), row.path in self._pinned, self._name_width)

    def _cells_of(self, row: RunRow, now: float, redraw: bool) -> tuple[Text, ...]:
        made = self._made.get(row.path)
        old = self._cells.get(row.path)
        if not redraw and made is not None and old is not None and made == (row, self._made_with(row)):
            return (*old[:-1], _state_cell(row, now))  # the state column holds the age: the clock moved
        return _marked(
            row_cells(row, now, self._name_width),
            row,
            self._name_width,
            self._marks.get(row.path),
            row.path in self._pinned,
        )

    def _change_rows(self, order: list[Path], cells: dict[Path, tuple[Text, ...]], gone: list[Path]) -> None:
        """Remove the gone rows, add the new, update the changed cells, then sort into ``order``."""
        for path in gone:
            self.remove_row(str(path))
        shown = [path for path in self._order if path in cells]
        for path in order:
            old = self._cells.get(path)
            if old is None:
                self.add_row(*cells[path], key=str(path))
                shown.append(path)
                continue
            kept = []
            for index, (_, key, _) in enumerate(COLUMNS):
                if cells[path][index] is old[index] or _same(cells[path][index], old[index]):
                    kept.append(old[index])  # the table's own object: sort below finds rows by it
                else:
                    self.update_cell(str(path), key, cells[path][index])
                    kept.append(cells[path][index])
            cells[path] = tuple(kept)
        if shown != order:
            # DataTable.sort hands the key a row's cells, not its key: the name cell objects, which
            # are the ones this table holds (kept above), say which run a row is.
            position = {id(cells[path][1]): index for index, path in enumerate(order)}
            self.sort("name", key=lambda name: position[id(name)])
        self._order = order

    def _show_count(self, label: Text) -> None:
        column = self.columns.get(self._column_key("name"))
        if column is None or (column.label.plain == label.plain and column.label.spans == label.spans):
            return
        column.label = label
        self._clear_caches()  # the header row is cached like any other row
        self.refresh()

    def keep_selected(self, old: Path, new: Path) -> None:
        """The run at ``old`` is now at ``new``: the next show_rows keeps the cursor on it."""
        self._moved[old] = new

    def refresh_ages(self, now: float) -> None:
        """The clock moved: redo only the state column (its age), and only the cells whose text changed."""
        age_index = len(COLUMNS) - 1
        for path, row in self._rows.items():
            cell = _state_cell(row, now)
            old = self._cells[path]
            if cell.plain != old[age_index].plain:
                self.update_cell(str(path), "state", cell)
                self._cells[path] = (*old[:age_index], cell)
