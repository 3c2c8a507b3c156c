"""TriageApp: the Textual front end over triage_tui.core.

The app holds the state the screens show and runs every slow thing in a thread worker:
the Watcher (reading event files), the chart's smoothing and thinning, diagnose() and
remap. Workers hand results back as Messages; the UI thread only copies small values
into its reactives (view_state.py). The screens are bound to those (``data_bind``) and show
them; what the user asks comes back as the Messages of messages.py. The app never reaches into
a screen's widgets, and the screens never import the app.

It is the one place every screen's message is answered. The two workflows a key starts, the
checks (`c`) and the remap (`m`), live in check_flow.py and remap_flow.py, each with its state
and its workers; the app's handlers hand them their messages, and they call back only through
what they need of the app (CheckHost, RemapHost).

Size: the one place every screen's message is answered, most handlers a line or two; what keeps
it over 300 lines is the watching worker, the rows and the chart's worker, the next to move out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.reactive import reactive
from textual.screen import Screen
from textual.worker import Worker, WorkerState, get_current_worker

from triage_tui.core.runs.remote import shown_path
from triage_tui.core.text import printable
from triage_tui.tui import check_flow, messages
from triage_tui.tui.check_flow import CheckFlow
from triage_tui.tui.remap_flow import RemapFlow
from triage_tui.tui.screens.console import ConsoleScreen
from triage_tui.tui.screens.help import HelpScreen
from triage_tui.tui.screens.main import MainScreen
from triage_tui.tui.screens.metric_picker import MetricPickerScreen
from triage_tui.tui.screens.node import NodeScreen
from triage_tui.tui.view_data import (
    SMOOTHING_WEIGHT,
    RowCache,
    RunRow,
    chart_series,
    metrics_line,
    overlay_colour,
    series_names,
    serving_series,
    state_line,
)
from triage_tui.tui.view_state import AnalysisView, ChartView, CheckProgressView, FlagsState, RunsView
from triage_tui.tui.widgets.fitted_lines import fit_line

if TYPE_CHECKING:
    from triage_tui.core.run_status import RunStatus
    from triage_tui.core.watch import Watcher


class TriageApp(App[None]):
    """`triage [PATH ...]`: watch runs, notice loss at chance, check, drill down, remap."""

    CSS_PATH = "app.tcss"
    TITLE = "triage"
    BINDINGS = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("question_mark", "help", "Help", key_display="?", id="help"),
        Binding("f1", "help", "Help", show=False),
        Binding("n", "node", "Node", show=False, tooltip="The node: GPUs, CPU, memory, the runs' disks", id="node"),
        # Ctrl-C quits, as in htop and k9s (Textual's default only says "press ctrl+q"); the
        # workers are threads that stop with the app, and no write is ever left half-done.
        Binding("ctrl+c", "quit", "Quit", show=False, system=True),
    ]

    # What the main screen shows; it is bound to these (get_default_screen), and only these are set.
    topbar: reactive[Text] = reactive(Text, init=False, repaint=False)
    runs_view: reactive[RunsView] = reactive(RunsView, init=False, repaint=False)
    flags_state: reactive[FlagsState] = reactive(FlagsState, init=False, repaint=False)
    chart_view: reactive[ChartView] = reactive(ChartView, init=False, repaint=False)
    analysis: reactive[AnalysisView] = reactive(AnalysisView, init=False, repaint=False)
    check_progress: reactive[CheckProgressView] = reactive(CheckProgressView, init=False, repaint=False)

    def __init__(
        self,
        paths: Sequence[Path | str] = (".",),
        *,
        readonly: bool = False,
        poll_interval: float = 1.0,
        rescan_interval: float = 5.0,
        vocab_size: int | None = None,
        use_watchdog: bool = True,
        device: str = "auto",
        now: Callable[[], float] = time.time,
        chart_refresh: float = 0.25,
        watcher: Watcher | None = None,
    ) -> None:
        """``watcher``: one `triage` built from the same settings (core.watch.tui_watcher) and began
        the first poll of (start_first_poll) before it imported Textual; else the app builds it."""
        super().__init__()
        self.paths = [Path(p) for p in paths]
        self.readonly = readonly
        self.poll_interval = poll_interval
        self.rescan_interval = rescan_interval  # how often new runs are looked for
        self.vocab_size = vocab_size
        self.use_watchdog = use_watchdog
        self.device = device
        # Injected so snapshot tests can freeze the "age" column.
        self.now = now
        self.chart_refresh = chart_refresh

        self.statuses: dict[Path, RunStatus] = {}
        self.rows: list[RunRow] = []
        self.polls = 0  # RunsUpdated messages taken in
        self._skipped_links_shown: str | None = None
        self._walk_limits_shown: str | None = None
        self._unplaced_errors_shown: str | None = None
        self.watcher_poll = 0  # the Watcher poll the last of them came from
        self.checks = CheckFlow(self)  # `c`: diagnose() in a worker, its results per run
        self.remap = RemapFlow(self)  # `m`: plan, confirm, write, in workers; each run's last report
        self.bells = 0
        # The event files of the runs that were critical at the last update. A run is known by
        # its files, not its path: `out/runs` becoming `out` when out/triage.toml lands is the
        # same run, and must not ring again (nor lose its selection).
        self._critical_files: set[Path] = set()
        self.watcher: Watcher | None = None  # set by the watch worker; tests wait on its polls
        self._started_watcher = watcher
        self._filter = ""
        self._selected: Path | None = None
        self._news: tuple[Path, str] | None = None  # checks that finished on a run not selected
        self._chart_drawn: tuple | None = None  # the (path, version, serving) the chart shows
        self._chart_requested: tuple | None = None  # the one last asked of the chart worker
        self._chart_width = 80  # cells, as the main screen last said (ChartResized)
        self._smoothing = SMOOTHING_WEIGHT  # the chart's EMA weight, as the main screen last said (s / S)
        self._marked: list[Path] = []  # runs drawn side by side (space), in the order marked: their colours
        self._pinned: set[Path] = set()  # runs held at the top of the table (p)
        self._metric: str | None = None  # the series the chart draws (t); None: each run's loss
        self._wall = False  # the chart's x axis: minutes since each run's first point (w), else the step
        self._main: MainScreen | None = None

    # -- lifecycle ----------------------------------------------------------------------

    def get_default_screen(self) -> Screen:
        self._main = MainScreen(readonly=self.readonly, now=self.now).data_bind(
            TriageApp.topbar,
            TriageApp.runs_view,
            TriageApp.flags_state,
            TriageApp.chart_view,
            TriageApp.analysis,
            TriageApp.check_progress,
        )
        return self._main

    @property
    def main(self) -> MainScreen:
        """The main screen (tests look at its widgets; the app itself only sets its reactives)."""
        assert self._main is not None
        return self._main

    def notify(self, message: str, *, title: str = "", markup: bool = False, **kwargs) -> None:
        """Every toast is plain text: its message names paths and errors that may hold brackets or
        terminal escapes (a run named "[/]" must not take the app down, nor "[@click=...]" act).

        At most two lines over the keys footer and the panes' bottom border (app.tcss), the newest
        only: toasts stacked over the panes hid the flags and evidence they spoke of. The title leads;
        a longer text ends in "…", or, when it ends in a path, keeps the path's tail (its name), "…"
        in its middle."""
        line = printable((f"{title}: {message}" if title else message).replace("\n", " "))
        # Two lines of the toast's width (less its severity edge and padding), less what wrapping at
        # spaces may leave unused at the end of the first.
        width = max(self.size.width - 3, 8)
        room = 2 * width - width // 4
        ends_in_path = "/" in line.rsplit(" ", 1)[-1]
        self.clear_notifications()
        super().notify(
            fit_line(Text(line), room, tail_share=2 / 3 if ends_in_path else 0.0).plain, markup=False, **kwargs
        )

    def on_mount(self) -> None:
        """Paint at once (the main screen shows these as soon as its widgets exist), then start reading."""
        self._show_topbar()
        self._watch_runs()
        self.set_interval(self.chart_refresh, self._refresh_chart_if_stale, name="chart")

    # -- watching -----------------------------------------------------------------------

    @work(thread=True, group="watch", exit_on_error=False, description="watch runs")
    def _watch_runs(self) -> None:
        from triage_tui.core.runs.discover import skipped_links_note
        from triage_tui.core.runs.walk import walk_limits_note
        from triage_tui.core.watch import tui_watcher

        # Set when the app exits (Textual cancels every worker) or the worker is cancelled.
        stop = get_current_worker().cancelled_event
        rows = RowCache()
        # Built in the thread: discovery walks directories, the first poll reads whole files.
        watcher = self._started_watcher or tui_watcher(
            self.paths,
            vocab_size=self.vocab_size,
            poll_interval=self.poll_interval,
            rescan_interval=self.rescan_interval,
            use_watchdog=self.use_watchdog,
            clock=self.now,
        )
        self.watcher = watcher

        def on_update(statuses: list[RunStatus]) -> None:
            self.post_message(
                messages.RunsUpdated(
                    list(statuses),
                    [rows.row(s) for s in statuses],
                    watcher.polls,
                    skipped_links_note(watcher.skipped_links),
                    # A bucket prefix that could not be listed, an object under no run: said, not lost.
                    "\n".join(error.line() for error in watcher.unplaced_errors) or None,
                    walk_limits_note(watcher.walk_limits),
                )
            )

        watcher.run(on_update, stop)

    @on(messages.RunsUpdated)
    def _runs_updated(self, message: messages.RunsUpdated) -> None:
        self.polls += 1
        self.watcher_poll = message.poll
        if message.skipped_links != self._skipped_links_shown:
            # Once per change, as `scan` says it on stderr: a run behind such a link is not missing by accident.
            self._skipped_links_shown = message.skipped_links
            if message.skipped_links is not None:
                self.notify(message.skipped_links, severity="warning", timeout=10)
        if message.walk_limits != self._walk_limits_shown:
            # Once per change: runs below the bounds are not missing by accident.
            self._walk_limits_shown = message.walk_limits
            if message.walk_limits is not None:
                self.notify(message.walk_limits, severity="warning", timeout=10)
        if message.unplaced_errors != self._unplaced_errors_shown:
            self._unplaced_errors_shown = message.unplaced_errors
            if message.unplaced_errors is not None:
                self.notify(message.unplaced_errors, severity="error", timeout=30)
        previous = self.statuses
        self.statuses = {status.info.path: status for status in message.statuses}
        self._marked = [path for path in self._marked if path in self.statuses]
        self.rows = sorted(message.rows, key=RunRow.sort_key)
        critical = [status for status in message.statuses if status.status == "critical"]
        # One bell when a run turns critical (a second flag on a run already critical adds none);
        # it rings again only after the run's critical flags cleared and came back.
        if any(self._critical_files.isdisjoint(_run_identity(status)) for status in critical):
            self.ring_bell()
        self._critical_files = {item for status in critical for item in _run_identity(status)}
        self._show_rows(self._moved_selection(previous))
        self._show_topbar()
        self._show_selected_flags()

    def _moved_selection(self, previous: dict[Path, RunStatus]) -> tuple[tuple[Path, Path], ...]:
        """The selected run moved (`out/runs` became `out`): (old, new), to keep it selected under its new path."""
        selected_path = self._selected
        selected = previous.get(selected_path) if selected_path else None
        if selected_path is None or selected is None or selected_path in self.statuses:
            return ()
        files = set(selected.info.event_files) | set(selected.info.wandb_files)
        moved = next(
            (path for path, status in self.statuses.items() if not files.isdisjoint(_run_identity(status))), None
        )
        return ((selected_path, moved),) if moved is not None else ()

    def ring_bell(self) -> None:
        self.bells += 1
        self.bell()

    def _visible_rows(self) -> list[RunRow]:
        rows = self.rows if not self._filter else [row for row in self.rows if self._filter in row.name.lower()]
        # Pinned runs first, each part still worst first (a stable sort).
        return sorted(rows, key=lambda row: row.path not in self._pinned)

    def _show_rows(self, renamed: tuple[tuple[Path, Path], ...] = ()) -> None:
        # The screen shows them, then says which run its cursor is on (RunSelected).
        visible = self._visible_rows()
        empty = None if visible or self.polls == 0 else self._empty_text()
        total = len(self.rows) if self.polls else None  # before the first poll the header says "run", no count
        marks = {path: overlay_colour(index) for index, path in enumerate(self._marked)}
        self.runs_view = RunsView(
            tuple(visible), self.now(), empty, renamed, total=total, marks=marks, pinned=frozenset(self._pinned)
        )

    def _empty_text(self) -> Text:
        """What an empty table means: the filter matches nothing, or nothing was found (yet)."""
        if self.rows:
            return Text.assemble(
                ("no run name contains ", "dim"), (self._filter, "bold"), ("  (esc clears the filter)", "dim")
            )
        where = ", ".join(printable(shown_path(path)) for path in self.paths)
        return Text.assemble(
            ("No runs under ", ""),
            (where, "bold"),
            (" yet.\n\n", ""),
            ("triage looks, in every subdirectory, for TensorBoard event files (", "dim"),
            ("*tfevents*", "bold"),
            ("), W&B run files (", "dim"),
            ("run-*.wandb", "bold"),
            ("), training consoles beside checkpoints or holding a trainer's lines (", "dim"),
            ("*.log", "bold"),
            (", ", "dim"),
            ("*.out", "bold"),
            ("), HF Trainer's ", "dim"),
            ("trainer_state.json", "bold"),
            (" and ", "dim"),
            ("triage.toml", "bold"),
            (" files, and is watching: a run shows here as soon as its trainer writes its first event.", "dim"),
        )

    @on(messages.FilterChanged)
    def _filter_changed(self, message: messages.FilterChanged) -> None:
        self._filter = message.text.strip().lower()
        self._show_rows()
        self._show_topbar()

    def _shown_paths(self) -> list[str]:
        """The watched paths as the top bar names them: a directory by its name, a bucket prefix by its URL."""
        names = []
        for path in self.paths:
            shown = shown_path(path)
            names.append(printable(shown if shown != str(path) else (path.name or shown)))
        return names

    def _show_topbar(self) -> None:
        text = Text()
        text.append(" triage ", style="bold reverse")
        if self.polls == 0:
            text.append("  scanning " + ", ".join(self._shown_paths()) + " …", style="dim")
        else:
            # The runs and their counts are in the table's own header row (RunsTable.count_label), drawn
            # with the rows: counted here, a frame apart, it read "2 runs" over 5 rows while a poll came in.
            text.append("  watching " + ", ".join(self._shown_paths()), style="dim")
            if self._filter:
                text.append(f"  filter: {self._filter}", style="cyan")
        if self._news is not None:
            text.append(f"  {self._news[1]}", style="bold cyan")
        text.append(f"  poll {self.poll_interval:g}s", style="dim")
        if self.readonly:
            text.append("  read-only", style="bold magenta")
        self.topbar = text

    # -- selection, flags and chart -------------------------------------------------------

    @on(messages.RunSelected)
    def _run_selected(self, message: messages.RunSelected) -> None:
        self.select_run(message.path)

    def select_run(self, path: Path | None) -> None:
        changed = path != self._selected
        self._selected = path
        if self._news is not None and self._news[0] == path:
            self._news = None  # back on the run whose checks finished: its pane says it
            self._show_topbar()
        if changed:
            self._show_selected_flags()
            self.show_analysis()
            self._refresh_chart_if_stale()

    def _show_selected_flags(self) -> None:
        status = self.statuses.get(self._selected) if self._selected else None
        self.flags_state = FlagsState(
            tuple(status.flags) if status else (),
            self.polls == 0,
            (metrics_line(status) or "") if status else "",
            state_line(status) if status else None,
            status.best.describe() if status is not None and status.best is not None else None,
        )

    def show_analysis(self) -> None:
        path = self._selected
        self.analysis = AnalysisView(
            path,
            self.checks.running_for,
            self.checks.diagnoses.get(path) if path is not None else None,
            self.checks.outcomes.get(path) if path is not None else None,
            self.remap.reports.get(path) if path is not None else None,
        )

    @on(messages.ChartResized)
    def _chart_resized(self, message: messages.ChartResized) -> None:
        self._chart_width = message.width

    @on(messages.SmoothingChanged)
    def _smoothing_changed(self, message: messages.SmoothingChanged) -> None:
        self._smoothing = message.weight
        self._refresh_chart_if_stale()  # the weight is in the chart's key: it is drawn again

    @on(messages.XAxisChanged)
    def _x_axis_changed(self, message: messages.XAxisChanged) -> None:
        self._wall = message.wall
        self._refresh_chart_if_stale()

    @on(messages.MarkToggled)
    def _mark_toggled(self, message: messages.MarkToggled) -> None:
        if message.path in self._marked:
            self._marked.remove(message.path)
        elif message.path in self.statuses:
            self._marked.append(message.path)
        self._show_rows()
        self._refresh_chart_if_stale()

    @on(messages.PinToggled)
    def _pin_toggled(self, message: messages.PinToggled) -> None:
        self._pinned ^= {message.path}
        self._show_rows()

    @on(messages.MetricPickerRequested)
    def _metric_picker_requested(self, message: messages.MetricPickerRequested) -> None:
        """`t`: every series name of the runs shown (names only: the dict of series is in memory, and
        the series' points are read by the chart worker, off this thread)."""
        names = sorted({name for status in self._shown_statuses() for name in series_names(status)})

        def chosen(name: str | None) -> None:
            if name is not None:  # esc: the chart stays as it was
                self._metric = name or None
                self._refresh_chart_if_stale()

        self.push_screen(MetricPickerScreen(names, self._metric), chosen)

    def _shown_statuses(self) -> list[RunStatus]:
        """The runs the chart draws: the marked ones, else the selected one."""
        if self._marked:
            return [self.statuses[path] for path in self._marked if path in self.statuses]
        status = self.statuses.get(self._selected) if self._selected else None
        return [status] if status is not None else []

    def _chart_subject(self) -> tuple:
        """What the chart shows, apart from how fresh: a result for another subject is dropped."""
        shown = tuple(status.info.path for status in self._shown_statuses())
        return (shown, self._selected, bool(self._marked), self._metric, self._wall, self._smoothing)

    def _refresh_chart_if_stale(self) -> None:
        statuses = self._shown_statuses()
        if not statuses:
            if self._chart_drawn is not None:
                # No run selected (the filter matches none): the chart must not keep the last one's curve.
                self._chart_drawn = None
                self.chart_view = ChartView()
            return
        selected = self.statuses.get(self._selected) if self._selected else None
        # The serving evidence is a new object exactly when a source gave something new. The scalars
        # are live (the watcher thread appends to them), the rest of the status is the poll's snapshot:
        # a status from before the poll that found the loss tag can already read the new version, so
        # the snapshot's loss tag and last step are in the key too (without them a chart drawn empty
        # from that status matched the next status's key, and stayed empty: the live-writer test, at load 10).
        fresh = (
            tuple((int(status.scalars.version), status.loss_tag, status.last_step) for status in statuses),
            id(selected.serving) if selected is not None else None,
            selected.serving_errors if selected is not None else (),
        )
        wanted = (self._chart_subject(), fresh)
        if wanted == self._chart_drawn:
            return
        # Compared with what the chart shows, not with what was last asked for: a computation that
        # was cancelled, failed or finished out of order is simply asked for again at the next tick.
        if wanted == self._chart_requested and any(
            worker.group == "chart" and not worker.is_finished for worker in self.workers
        ):
            return
        self._chart_requested = wanted
        # Braille markers put two points in a cell.
        self._compute_chart(statuses, selected, max(64, 2 * self._chart_width), wanted)

    @work(thread=True, exclusive=True, group="chart", exit_on_error=False, description="chart")
    def _compute_chart(
        self, statuses: list[RunStatus], selected: RunStatus | None, max_points: int, key: tuple
    ) -> None:
        _, _, overlay, metric, wall, smoothing = key[0]
        lines = []
        for index, status in enumerate(statuses):
            series = chart_series(status, max_points, smoothing, tag=metric, wall=wall)
            if series is not None:
                lines.append(replace(series, colour=overlay_colour(index)) if overlay else series)
        serving = serving_series(selected, max_points) if selected is not None else None
        if not get_current_worker().is_cancelled:
            path = selected.info.path if selected is not None else None
            self.post_message(messages.ChartReady(tuple(lines), path, serving, key))

    @on(messages.ChartReady)
    def _chart_ready(self, message: messages.ChartReady) -> None:
        if message.key is None or message.key[0] != self._chart_subject():
            return
        self._chart_drawn = message.key
        _, _, overlay, metric, wall, _ = message.key[0]
        served = message.serving.acceptance_length if message.serving else None
        what = metric if metric is not None else "loss"
        if overlay:
            marked = len(message.key[0][0])
            missing = marked - len(message.lines)
            about = f"{marked} marked run{'s' if marked != 1 else ''}" + (f", {missing} without it" if missing else "")
        else:
            status = self.statuses.get(message.path) if message.path else None
            name = status.info.name if status else (message.path.name if message.path else "")
            if metric is not None:
                about = name if message.lines else f"{name} has none"
            else:
                about = f"{message.lines[0].tag if message.lines else 'no loss tag'} · {name}"
        # A Text: a tag or directory named "[@click=app.quit]" or "[/]" is shown, never applied.
        title = Text(
            f"{printable(what)} · {printable(about)}" + (f" · served {served:.2f}" if served is not None else "")
        )
        self.chart_view = ChartView(message.lines, message.serving, title, overlay=overlay, wall=wall, metric=metric)

    # -- checks and remap: each workflow is a module of its own; these handlers hand it its messages --

    @on(messages.ChecksRequested)
    def _checks_requested(self, message: messages.ChecksRequested) -> None:
        self.checks.start(message.path)

    @on(messages.CancelChecks)
    def _cancel_checks(self) -> None:
        self.checks.cancel()

    @on(messages.CheckProgress)
    def _check_progress(self, message: messages.CheckProgress) -> None:
        self.checks.progress(message)

    @on(messages.ChecksFinished)
    def _checks_finished(self, message: messages.ChecksFinished) -> None:
        self.checks.finished(message)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if worker.group == check_flow.GROUP and event.state == WorkerState.CANCELLED:
            self.checks.worker_cancelled()
        elif worker.group == "watch" and event.state == WorkerState.ERROR:
            self.notify(f"watching stopped: {worker.error}", severity="error", timeout=30)

    @on(messages.HypothesisOpened)
    def _hypothesis_opened(self, message: messages.HypothesisOpened) -> None:
        self.checks.open_hypothesis(message.path, message.hypothesis_id)

    @on(messages.RemapRequested)
    def _remap_requested(self, message: messages.RemapRequested) -> None:
        self.remap.request(message.path)

    @on(messages.RemapPlanned)
    def _remap_planned(self, message: messages.RemapPlanned) -> None:
        self.remap.planned(message)

    @on(messages.CancelRemap)
    def _cancel_remap(self) -> None:
        self.remap.cancel()

    @on(messages.RemapProgress)
    def _remap_progress(self, message: messages.RemapProgress) -> None:
        self.remap.progress(message)

    @on(messages.RemapFinished)
    def _remap_finished(self, message: messages.RemapFinished) -> None:
        self.remap.finished(message)

    # What the flows need of the app (check_flow.CheckHost, remap_flow.RemapHost).

    @property
    def selected(self) -> Path | None:
        """The run the main screen's cursor is on."""
        return self._selected

    def remapped_checkpoint(self, path: Path) -> Path | None:
        return self.remap.checkpoint(path)

    def show_check_progress(self, view: CheckProgressView) -> None:
        self.check_progress = view

    def show_news(self, path: Path, text: str) -> None:
        self._news = (path, text)
        self._show_topbar()

    # -- help and palette ----------------------------------------------------------------

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss()
            return
        self.push_screen(HelpScreen.for_screen(self.screen))

    def action_node(self) -> None:
        """`n`: the node's GPUs, CPU, memory and the disks of the watched runs, sampled while shown."""
        from triage_tui.core.node import NodeSampler

        sampler = NodeSampler(lambda: [status.info.path for status in list(self.statuses.values())])
        self.push_screen(NodeScreen(sampler.sample, close=sampler.close))

    @on(messages.ConsoleRequested)
    def _console_requested(self, message: messages.ConsoleRequested) -> None:
        """`o`: the run's console log, or why there is none."""
        status = self.statuses.get(message.path)
        if status is None or not status.info.console_files:
            self.notify("this run has no console log (train.log, *.out) that triage found", title="o", timeout=5)
            return
        self.push_screen(ConsoleScreen(status.info.name, status.info.console_files))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        # Textual's "Keys" panel repeats what our help (`?`) shows, in less detail: one help, not two.
        yield from (command for command in super().get_system_commands(screen) if command.title != "Keys")
        for binding in _screen_bindings(screen):
            if binding.action in ("escape",):
                continue
            state = screen.check_action(binding.action, ())
            if state is False:
                continue  # not offered here (e.g. remap in --readonly)
            title = binding.tooltip or binding.description
            yield SystemCommand(
                f"{binding.description} ({binding.key_display or binding.key})",
                title,
                _action_runner(screen, binding.action),
            )
        yield SystemCommand("Help: every key", "List the keys of this screen", self.action_help)


def _run_identity(status: RunStatus) -> set[Path]:
    """What makes a run the same run from one update to the next: its data files (event files, W&B
    run files), and its path for a run that has none yet."""
    return {status.info.path, *status.info.event_files, *status.info.wandb_files}


def _screen_bindings(screen: Screen) -> list[Binding]:
    return [b for b in screen.BINDINGS if isinstance(b, Binding)]


def _action_runner(screen: Screen, action: str) -> Callable[[], object]:
    async def run() -> None:
        await screen.run_action(action)

    return run
