"""The main screen: runs, the selected run's loss chart and flags, checks and hypotheses."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.events import Resize
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, OptionList, Static

from triage_tui.core.hypotheses import LIKELY
from triage_tui.tui.widgets.checks_progress import STATUS_STYLE, ChecksProgress
from triage_tui.tui.widgets.flags_view import FlagsView
from triage_tui.tui.widgets.hypotheses_list import HypothesesList
from triage_tui.tui.widgets.loss_chart import LossChart
from triage_tui.tui.widgets.runs_table import RunsTable
from triage_tui.tui.widgets.serving_chart import ServingChart

if TYPE_CHECKING:
    from triage_tui.tui.app import TriageApp
    from triage_tui.tui.view_data import ServingSeries

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
        Binding("r", "focus_runs", "Runs", show=False, tooltip="Go to the runs table", id="runs"),
        # priority: handled as the app receives the key, before the keys queued behind it (typed fast or
        # pasted) are routed, so those land in the filter and the `c` of "vocab" does not start the checks.
        Binding(
            "slash", "filter", "Filter", key_display="/", tooltip="Filter runs by name", id="filter", priority=True
        ),
        Binding("l", "toggle_log_y", "Log-y", show=False, tooltip="Loss chart: log or linear y axis", id="log_y"),
    ]

    @property
    def triage(self) -> TriageApp:
        return self.app  # type: ignore[return-value]  # Screen.app is an App; this screen only runs in TriageApp

    def compose(self) -> ComposeResult:
        yield Static("", id="topbar")
        with Horizontal(id="upper"):
            with Vertical(id="runs-pane", classes="pane"):
                yield RunsTable(id="runs")
                yield Static("", id="runs-empty")
            with Vertical(id="chart-pane", classes="pane"):
                yield LossChart(id="chart")
                yield ServingChart(id="serving-chart")
        with Horizontal(id="lower"):
            with VerticalScroll(id="flags-pane", classes="pane"):
                yield FlagsView(id="flags")
            with Vertical(id="analysis-pane", classes="pane"):
                yield Static("", id="analysis-hint")
                yield ChecksProgress(id="checks")
                yield HypothesesList(id="hypotheses")
        yield Input(placeholder="filter runs by name (Esc clears)", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#runs-pane").border_title = "runs"
        self.query_one("#chart-pane").border_title = "loss"
        self.query_one("#chart-pane").border_subtitle = "raw dim · smoothed 0.6 bright, as TensorBoard · l log-y"
        self.query_one("#flags-pane").border_title = "flags"
        self.query_one("#analysis-pane").border_title = "checks"
        self.query_one("#filter").display = False
        self._apply_layout(self.app.size.width)
        self.query_one(RunsTable).focus()
        self.triage.main_ready()

    # -- layout -----------------------------------------------------------------------

    def on_resize(self, event: Resize) -> None:
        self._apply_layout(event.size.width)

    def _apply_layout(self, width: int) -> None:
        self.set_class(width < COMPACT_BELOW_COLUMNS, "compact")

    # -- what the app pushes in ---------------------------------------------------------

    def show_topbar(self, text: Text) -> None:
        self.query_one("#topbar", Static).update(text)

    def show_serving(self, series: ServingSeries | None) -> None:
        """Serving acceptance under the loss, for a run whose triage.toml names [serving]."""
        self.query_one("#chart-pane").set_class(series is not None, "-serving")
        self.query_one(ServingChart).show(series)

    def show_empty(self, text: Text | None) -> None:
        """Why the table is empty (nothing found yet, or the filter matches nothing); None hides it."""
        empty = self.query_one("#runs-empty", Static)
        empty.display = text is not None
        if text is not None:
            empty.update(text)

    def show_chart_title(self, title: Text) -> None:
        self.query_one("#chart-pane").border_title = title

    def show_analysis(self, path: Path | None) -> None:
        """Show the checks/hypotheses of the selected run (or the hint to run them); CSS picks what shows."""
        app = self.triage
        hint = self.query_one("#analysis-hint", Static)
        checks = self.query_one("#checks", ChecksProgress)
        hypotheses = self.query_one("#hypotheses", HypothesesList)
        pane = self.query_one("#analysis-pane")
        running = path is not None and app.checks_running_for == path
        diagnosis = None if running or path is None else app.diagnoses.get(path)
        outcome = None if running or path is None else app.check_outcomes.get(path)
        state = "-running" if running else "-done" if diagnosis else "-outcome" if outcome is not None else ""
        for name in ("-running", "-done", "-outcome"):
            pane.set_class(name == state, name)
        if self.has_class("has-analysis") != bool(state):
            self.set_class(bool(state), "has-analysis")
            # The compact layout shrinks the table: keep the selected run in view.
            table = self.query_one(RunsTable)
            self.call_after_refresh(lambda: table.move_cursor(row=table.cursor_row, animate=False))
        if not state:
            hint.update(
                Text("no run selected", style="dim")
                if path is None
                else Text.assemble(("press ", "dim"), ("c", "bold"), (" to run the checks on this run", "dim"))
            )
            pane.border_title = "checks"
            hypotheses.show(())
        elif running:
            pane.border_title = "checks · running (x cancels)"
        elif diagnosis is None:
            pane.border_title = "checks"
            checks.finish(None, outcome or "")
            hypotheses.show(())
        else:
            counts: Counter[str] = Counter(result.status for result in diagnosis.checks.values())
            tally = " ".join(f"{STATUS_STYLE[status][0]}{counts[status]}" for status in STATUS_STYLE if counts[status])
            pane.border_title = f"hypotheses · checks {tally} · enter opens"
            remapped = app.remap_reports.get(path) if path is not None else None
            stale = remapped is not None and diagnosis.inputs.checkpoint != Path(remapped.output)
            # Results older than the remap must look old: they describe the drafter before the fix.
            pane.set_class(stale, "-stale")
            if stale:
                pane.border_title = "hypotheses · BEFORE the remap · c checks the remapped checkpoint"
            elif remapped is not None:
                pane.border_title = f"hypotheses · of the remapped checkpoint · checks {tally}"
            # Nothing stands out: the small layout shows why (skipped checks say what they need).
            pane.set_class(max((h.score for h in diagnosis.hypotheses), default=0.0) < LIKELY, "-quiet")
            checks.finish({name: (result.status, result.summary) for name, result in diagnosis.checks.items()})
            if hypotheses.hypotheses != list(diagnosis.hypotheses):
                hypotheses.show(diagnosis.hypotheses)

    # -- actions --------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        app = self.triage
        if action == "remap":
            # --readonly: the action does not exist. Otherwise the key always answers: it remaps, or
            # says why it cannot (before the checks, on a run whose rows are in order, ...).
            return not app.readonly
        if action == "cancel_checks":
            return True if app.checks_running_for is not None else None
        if action == "check":
            return True if self.selected_path is not None else None
        # A "/" typed into the filter is text (run names hold slashes), not the filter key.
        return not (action == "filter" and self.focused is self.query_one("#filter", Input))

    @property
    def selected_path(self) -> Path | None:
        return self.query_one(RunsTable).selected_path

    def action_check(self) -> None:
        path = self.selected_path
        if path is not None:
            self.triage.start_checks(path)

    def action_cancel_checks(self) -> None:
        self.triage.cancel_checks()

    def action_remap(self) -> None:
        path = self.selected_path
        if self.triage.readonly:
            return
        if path is not None and self.triage.remap_available(path):
            self.triage.request_remap(path)
        else:
            self.triage.explain_remap_blocker(path)

    def action_escape(self) -> None:
        # The innermost thing first: an open filter closes before running checks are cancelled.
        filter_input = self.query_one("#filter", Input)
        if filter_input.display:
            filter_input.value = ""
            filter_input.display = False
            self.query_one(RunsTable).focus()
        elif self.triage.checks_running_for is not None:
            self.triage.cancel_checks()
        elif self.focused is self.query_one(HypothesesList):
            self.query_one(RunsTable).focus()

    def action_filter(self) -> None:
        filter_input = self.query_one("#filter", Input)
        filter_input.display = True
        # Now, not at the next idle (Widget.focus defers): keys typed or pasted right after `/`
        # are already queued, and must go into the filter, not to `c` (check) or `m` (remap).
        self.set_focus(filter_input)

    def action_toggle_log_y(self) -> None:
        chart = self.query_one(LossChart)
        chart.log_y = not chart.log_y
        # Say which scale is on: a log axis read as linear misleads.
        scale = "log y (l: linear)" if chart.log_y else "l log-y"
        self.query_one("#chart-pane").border_subtitle = f"raw dim · smoothed 0.6 bright, as TensorBoard · {scale}"

    def action_focus_hypotheses(self) -> None:
        hypotheses = self.query_one(HypothesesList)
        if hypotheses.option_count:
            hypotheses.focus()

    def action_focus_runs(self) -> None:
        self.query_one(RunsTable).focus()

    def action_open_hypothesis(self) -> None:
        hypotheses = self.query_one(HypothesesList)
        if hypotheses.selected is not None and self.selected_path is not None:
            self.triage.open_hypothesis(self.selected_path, hypotheses.selected.id)

    # -- events ---------------------------------------------------------------------------

    @on(DataTable.RowHighlighted, "#runs")
    def _run_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.triage.select_run(self.selected_path)

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
            running = self.triage.checks_running_for == self.selected_path
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
            self.triage.open_hypothesis(self.selected_path, event.option.id)

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.triage.set_filter(event.value)

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        if not event.value:
            event.input.display = False
        self.query_one(RunsTable).focus()
