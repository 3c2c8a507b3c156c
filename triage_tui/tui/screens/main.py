"""The main screen: runs, the selected run's loss chart and flags, checks and hypotheses.

Its bindings and one ``watch_`` per pane it shows, each a few lines: the panes' drawing is their
widgets' (widgets/), what it shows is the app's (view_state.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.events import Resize
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, Input, OptionList, Static

from triage_tui.core.text import printable
from triage_tui.tui import messages
from triage_tui.tui.view_state import AnalysisView, ChartRequest, CheckProgressView, FlagsState, RunsView
from triage_tui.tui.widgets.analysis_pane import AnalysisPane
from triage_tui.tui.widgets.chart_pane import ChartPane
from triage_tui.tui.widgets.flags_view import FlagsView
from triage_tui.tui.widgets.hypotheses_list import HypothesesList
from triage_tui.tui.widgets.keys_footer import KeysFooter
from triage_tui.tui.widgets.runs_table import RunsTable

# Below this width the panes stack (nvitop's compact mode); 80x24 must stay usable. Side by
# side, the runs pane needs ~70 columns for its eight columns and the chart ~50 to be readable.
COMPACT_BELOW_COLUMNS = 120


class MainScreen(Screen):
    """Watch, notice, check: everything about the selected run on one screen."""

    BINDING_GROUP_TITLE = "Runs"
    BINDINGS = [
        Binding("c", "check", "Check", tooltip="Run every check on the selected run", id="check"),
        Binding("m", "remap", "Remap", tooltip="Write a checkpoint with lm_head rows in the run's order", id="remap"),
        Binding("x", "cancel_checks", "Cancel", tooltip="Cancel the running checks", id="cancel"),
        Binding("escape", "escape", "Back", show=False, tooltip="Cancel the checks, clear the filter, or back to runs"),
        Binding(
            "h",
            "focus_hypotheses",
            "Hypotheses",
            show=False,
            tooltip="Go to the hypotheses (enter opens one)",
            id="hypotheses",
        ),
        Binding(
            "o", "console", "Console", show=False, tooltip="The selected run's console log, followed", id="console"
        ),
        Binding("r", "focus_runs", "Runs", show=False, tooltip="Go to the runs table", id="runs"),
        # priority: handled as the app receives the key, before the keys queued behind it (typed fast or
        # pasted) are routed, so those land in the filter and the `c` of "vocab" does not start the checks.
        Binding(
            "slash", "filter", "Filter", key_display="/", tooltip="Filter runs by name", id="filter", priority=True
        ),
        Binding("l", "toggle_log_y", "Log-y", show=False, tooltip="Loss chart: log or linear y axis", id="log_y"),
        Binding(
            "s", "smoothing(-1)", "Smooth less", show=False, tooltip="Loss chart: less EMA smoothing", id="smooth_less"
        ),
        Binding(
            "S", "smoothing(1)", "Smooth more", show=False, tooltip="Loss chart: more EMA smoothing", id="smooth_more"
        ),
        Binding("space", "mark", "Mark", show=False, tooltip="Mark the run: marked runs are charted side by side"),
        Binding("p", "pin", "Pin", show=False, tooltip="Pin the run to the top of the table (again: unpin)", id="pin"),
        Binding(
            "t", "pick_metric", "Series", show=False, tooltip="Chart another series: tags, W&B, console", id="series"
        ),
        Binding("w", "toggle_wall", "Wall time", show=False, tooltip="Chart x axis: step or wall time", id="wall"),
    ]

    # The app's state, bound to the app's reactives of the same names (TriageApp.get_default_screen);
    # each watcher shows its part. Nothing here reaches into the app: what the user asks is a message.
    topbar: reactive[Text] = reactive(Text, init=False, repaint=False)
    # Not bindings=True: the footer rebuilds every key at each refresh of the bindings, and the rows
    # change every poll; watch_runs_view refreshes them when what a key does changed.
    runs_view: reactive[RunsView] = reactive(RunsView, init=False, repaint=False)
    flags_state: reactive[FlagsState] = reactive(FlagsState, init=False, repaint=False)
    chart_request: reactive[ChartRequest] = reactive(ChartRequest, init=False, repaint=False)
    analysis: reactive[AnalysisView] = reactive(AnalysisView, init=False, bindings=True, repaint=False)
    check_progress: reactive[CheckProgressView] = reactive(CheckProgressView, init=False, repaint=False)

    def __init__(self, *, readonly: bool = False, now: Callable[[], float], chart_refresh: float = 0.25) -> None:
        super().__init__()
        self.readonly = readonly
        self.now = now  # the app's clock (frozen in snapshot tests): the age column
        self.chart_refresh = chart_refresh  # how often the chart pane looks whether its runs grew
        self._ready = False  # the widgets exist: bound values can be shown
        self._a_run_selected = False  # what the footer's bindings were last refreshed for

    def compose(self) -> ComposeResult:
        yield Static("", id="topbar")
        with Horizontal(id="upper"):
            with Vertical(id="runs-pane", classes="pane"):
                yield RunsTable(id="runs")
                yield Static("", id="runs-empty")
            yield ChartPane(id="chart-pane", classes="pane", refresh=self.chart_refresh)
        with Horizontal(id="lower"):
            with VerticalScroll(id="flags-pane", classes="pane"):
                yield FlagsView(id="flags")
            yield AnalysisPane(id="analysis-pane", classes="pane")
        yield Input(placeholder="filter runs by name (Esc clears)", id="filter")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#runs-pane").border_title = "runs"
        self.query_one("#flags-pane").border_title = "flags"
        self.query_one("#filter").display = False
        self._apply_layout(self.app.size.width)
        self.query_one(RunsTable).focus()
        # Values bound before the widgets existed are shown now (their watchers waited for this).
        self._ready = True
        self.watch_topbar()
        self.watch_runs_view()
        self.watch_flags_state()
        self.watch_chart_request()
        self.watch_analysis()
        self.set_interval(1.0, self._refresh_ages, name="ages")

    # -- layout -----------------------------------------------------------------------

    def on_resize(self, event: Resize) -> None:
        self._apply_layout(event.size.width)

    def _apply_layout(self, width: int) -> None:
        self.set_class(width < COMPACT_BELOW_COLUMNS, "compact")

    def _refresh_ages(self) -> None:
        self.query_one(RunsTable).refresh_ages(self.now())

    # -- the app's state, shown ------------------------------------------------------------

    def watch_topbar(self) -> None:
        if self._ready:
            # One row, full width (app.tcss): a repaint, no layout pass. With a layout pass it was painted
            # frames after the runs table it counts ("2 runs" over 5 rows while the first poll came in).
            self.query_one("#topbar", Static).update(self.topbar, layout=False)

    def watch_runs_view(self) -> None:
        if not self._ready:
            return
        view = self.runs_view
        table = self.query_one(RunsTable)
        for old, new in view.renamed:
            table.keep_selected(old, new)
        table.show_rows(view.rows, now=view.now, total=view.total, marks=view.marks, pinned=view.pinned)
        if (table.selected_path is not None) != self._a_run_selected:
            self._a_run_selected = not self._a_run_selected
            self.refresh_bindings()  # "c check" comes and goes with a selected run (check_action)
        # Why the table is empty (nothing found yet, or the filter matches nothing); None hides it.
        empty = self.query_one("#runs-empty", Static)
        empty.display = view.empty is not None
        if view.empty is not None:
            empty.update(view.empty)
        self.post_message(messages.RunSelected(table.selected_path))

    def watch_flags_state(self) -> None:
        if not self._ready:
            return
        state = self.flags_state
        self.query_one(FlagsView).show(
            state.flags, scanning=state.scanning, state=state.state, best=state.best, notes=state.notes
        )
        # On the pane's border: no line taken from the chart (80x24 has none to spare).
        self.query_one("#flags-pane").border_subtitle = Text(printable(state.subtitle)) if state.subtitle else ""

    def watch_chart_request(self) -> None:
        if self._ready:
            self.query_one(ChartPane).chart(self.chart_request)

    def watch_check_progress(self) -> None:
        if self._ready:
            self.query_one(AnalysisPane).progress(self.check_progress)

    def watch_analysis(self) -> None:
        if not self._ready:
            return
        shown = self.query_one(AnalysisPane).show(self.analysis)
        if self.has_class("has-analysis") != shown:
            self.set_class(shown, "has-analysis")
            # The compact layout shrinks the table: keep the selected run in view.
            table = self.query_one(RunsTable)
            self.call_after_refresh(lambda: table.move_cursor(row=table.cursor_row, animate=False))

    # -- actions --------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "remap":
            # --readonly: the action does not exist. Otherwise the key always answers: it remaps, or
            # says why it cannot (before the checks, on a run whose rows are in order, ...).
            return not self.readonly
        if action == "cancel_checks":
            return True if self.analysis.checks_running_for is not None else None
        if action in ("check", "console"):
            return True if self.selected_path is not None else None
        # A "/" typed into the filter is text (run names hold slashes), not the filter key.
        return not (action == "filter" and self.focused is self.query_one("#filter", Input))

    @property
    def selected_path(self) -> Path | None:
        return self.query_one(RunsTable).selected_path

    def action_check(self) -> None:
        path = self.selected_path
        if path is not None:
            self.post_message(messages.ChecksRequested(path))

    def action_console(self) -> None:
        if self.selected_path is not None:
            self.post_message(messages.ConsoleRequested(self.selected_path))

    def action_cancel_checks(self) -> None:
        self.post_message(messages.CancelChecks())

    def action_remap(self) -> None:
        if not self.readonly:
            self.post_message(messages.RemapRequested(self.selected_path))

    def action_escape(self) -> None:
        # The innermost thing first: an open filter closes before running checks are cancelled.
        filter_input = self.query_one("#filter", Input)
        if filter_input.display:
            filter_input.value = ""
            filter_input.display = False
            self.query_one(RunsTable).focus()
        elif self.analysis.checks_running_for is not None:
            self.post_message(messages.CancelChecks())
        elif self.focused is self.query_one(HypothesesList):
            self.query_one(RunsTable).focus()

    def action_filter(self) -> None:
        filter_input = self.query_one("#filter", Input)
        filter_input.display = True
        # Now, not at the next idle (Widget.focus defers): keys typed or pasted right after `/`
        # are already queued, and must go into the filter, not to `c` (check) or `m` (remap).
        self.set_focus(filter_input)

    def action_toggle_log_y(self) -> None:
        self.query_one(ChartPane).toggle_log_y()

    def action_smoothing(self, step: int) -> None:
        self.query_one(ChartPane).step_smoothing(step)

    def action_toggle_wall(self) -> None:
        self.query_one(ChartPane).toggle_wall()

    def action_mark(self) -> None:
        if self.selected_path is not None:
            self.post_message(messages.MarkToggled(self.selected_path))

    def action_pin(self) -> None:
        if self.selected_path is not None:
            self.post_message(messages.PinToggled(self.selected_path))

    def action_pick_metric(self) -> None:
        self.post_message(messages.MetricPickerRequested())

    def action_focus_hypotheses(self) -> None:
        hypotheses = self.query_one(HypothesesList)
        if hypotheses.option_count:
            hypotheses.focus()

    def action_focus_runs(self) -> None:
        self.query_one(RunsTable).focus()

    def action_open_hypothesis(self) -> None:
        hypotheses = self.query_one(HypothesesList)
        if hypotheses.selected is not None and self.selected_path is not None:
            self.post_message(messages.HypothesisOpened(self.selected_path, hypotheses.selected.id))

    # -- events ---------------------------------------------------------------------------

    @on(DataTable.RowHighlighted, "#runs")
    def _run_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.post_message(messages.RunSelected(self.selected_path))

    @on(DataTable.RowSelected, "#runs")
    def _run_selected(self, event: DataTable.RowSelected) -> None:
        # Enter on a checked run opens its best hypothesis, as the pane's title promises; the
        # list keeps focus afterwards so the others are one arrow key away.
        hypotheses = self.query_one(HypothesesList)
        if hypotheses.option_count:
            hypotheses.focus()
            self.action_open_hypothesis()
        elif self.selected_path is not None:
            # Nothing to open yet: say what enter will do, rather than nothing.
            running = self.analysis.checks_running_for == self.selected_path
            self.notify(
                "the checks are still running"
                if running
                else "press c to run the checks; enter then opens the most likely cause",
                title="enter",
                timeout=5,
            )

    @on(OptionList.OptionSelected, "#hypotheses")
    def _hypothesis_selected(self, event: OptionList.OptionSelected) -> None:
        if self.selected_path is not None and event.option.id is not None:
            self.post_message(messages.HypothesisOpened(self.selected_path, event.option.id))

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.post_message(messages.FilterChanged(event.value))

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        if not event.value:
            event.input.display = False
        self.query_one(RunsTable).focus()
