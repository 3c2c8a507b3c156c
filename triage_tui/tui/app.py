"""TriageApp: the Textual front end over triage_tui.core.

The app holds the state the screens show and runs every slow thing in a thread worker:
the Watcher (reading event files), diagnose() and remap (the chart pane runs its own). Workers
hand results back as Messages; the UI thread only copies small values into its reactives
(view_state.py). The screens are bound to those (``data_bind``) and show them; what the user
asks comes back as the Messages of messages.py. The app never reaches into a screen's widgets,
and the screens never import the app.

It is the one place every screen's message is answered. The two workflows a key starts, the
checks (`c`) and the remap (`m`), live in check_flow.py and remap_flow.py, each with its state
and its workers; the app's handlers hand them their messages, and they call back only through
what they need of the app (CheckHost, RemapHost).

What is not about routing lives beside it: the watching worker (watch_flow.py), the runs' list
state (run_list.py), the top bar's line (topbar.py), the palette's entries (palette.py); the chart
pane (widgets/chart_pane.py) owns its worker, the app only says which runs to chart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from triage_tui.tui import check_flow, messages
from triage_tui.tui.check_flow import CheckFlow
from triage_tui.tui.palette import screen_commands
from triage_tui.tui.remap_flow import RemapFlow
from triage_tui.tui.run_list import RunList
from triage_tui.tui.screens.console import ConsoleScreen
from triage_tui.tui.screens.help import HelpScreen
from triage_tui.tui.screens.main import MainScreen
from triage_tui.tui.screens.metric_picker import MetricPickerScreen
from triage_tui.tui.screens.node import NodeScreen
from triage_tui.tui.topbar import topbar_text
from triage_tui.tui.view_data import RunRow, series_names
from triage_tui.tui.view_state import AnalysisView, ChartRequest, CheckProgressView, FlagsState, RunsView
from triage_tui.tui.watch_flow import PollNotices, watch_runs
from triage_tui.tui.widgets.fitted_lines import toast_text

if TYPE_CHECKING:
    from triage_tui.core.watch.run_status import RunStatus
    from triage_tui.core.watch.watcher import Watcher


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
    chart_request: reactive[ChartRequest] = reactive(ChartRequest, init=False, repaint=False)
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
        """``watcher``: one `triage` built from the same settings and began the first poll of
        (start_first_poll) before it imported Textual; else the app builds it."""
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

        self.runs = RunList()  # every run of the last poll, the filter, pins and marks
        self.polls = 0  # RunsUpdated messages taken in
        self.notices = PollNotices()
        self.watcher_poll = 0  # the Watcher poll the last of them came from
        self.checks = CheckFlow(self)  # `c`: diagnose() in a worker, its results per run
        self.remap = RemapFlow(self)  # `m`: plan, confirm, write, in workers; each run's last report
        self.bells = 0
        self.watcher: Watcher | None = None  # set by the watch worker; tests wait on its polls
        self._started_watcher = watcher
        self._selected: Path | None = None
        self._news: tuple[Path, str] | None = None  # checks that finished on a run not selected
        self._metric: str | None = None  # the series the chart draws (t); None: each run's loss
        self._main: MainScreen | None = None

    @property
    def statuses(self) -> dict[Path, RunStatus]:
        """Each run's status from the last poll, by path."""
        return self.runs.statuses

    @property
    def rows(self) -> list[RunRow]:
        """Every run's row, worst first (the filter's hidden ones too)."""
        return self.runs.rows

    # -- lifecycle ----------------------------------------------------------------------

    def get_default_screen(self) -> Screen:
        self._main = MainScreen(readonly=self.readonly, now=self.now, chart_refresh=self.chart_refresh).data_bind(
            TriageApp.topbar,
            TriageApp.runs_view,
            TriageApp.flags_state,
            TriageApp.chart_request,
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
        """Every toast is plain text (toast_text): its message names paths and errors that may hold
        brackets or terminal escapes; the newest only, stacked toasts hid the panes they spoke of."""
        self.clear_notifications()
        super().notify(toast_text(message, title, self.size.width), markup=False, **kwargs)

    def on_mount(self) -> None:
        """Paint at once (the main screen shows these as soon as its widgets exist), then start reading."""
        self._show_topbar()
        self._watch_runs()

    # -- watching -----------------------------------------------------------------------

    def _watch_runs(self) -> None:
        from triage_tui.core.watch.watcher import Watcher

        build = partial(
            Watcher,
            self.paths,
            vocab_size=self.vocab_size,
            poll_interval=self.poll_interval,
            rescan_interval=self.rescan_interval,
            use_watchdog=self.use_watchdog,
            clock=self.now,
        )
        keep = partial(setattr, self, "watcher")
        work = partial(watch_runs, build, self._started_watcher, keep, self.post_message)
        self.run_worker(work, group="watch", description="watch runs", exit_on_error=False, thread=True)

    @on(messages.RunsUpdated)
    def _runs_updated(self, message: messages.RunsUpdated) -> None:
        self.polls += 1
        self.watcher_poll = message.poll
        for text, severity, timeout in self.notices.changed(message):
            self.notify(text, severity=severity, timeout=timeout)
        turned_critical, renamed = self.runs.update(message.statuses, message.rows, self._selected)
        if turned_critical:
            self.ring_bell()
        self._show_rows(renamed)
        self._show_topbar()
        self._show_selected_flags()
        self._show_chart()

    def ring_bell(self) -> None:
        self.bells += 1
        self.bell()

    def _show_rows(self, renamed: tuple[tuple[Path, Path], ...] = ()) -> None:
        self.runs_view = self.runs.view(self.now(), self.polls > 0, self.paths, renamed)

    def _show_topbar(self) -> None:
        self.topbar = topbar_text(
            self.paths,
            polled=self.polls > 0,
            filter_text=self.runs.filter,
            news=self._news[1] if self._news is not None else None,
            poll_interval=self.poll_interval,
            readonly=self.readonly,
            buckets=self._bucket_lines(),
        )

    def _bucket_lines(self) -> tuple[str, ...]:
        mirrors = self.watcher.mirrors if self.watcher is not None else None
        return tuple(found.line() for found in mirrors.costs()) if mirrors is not None else ()

    @on(messages.FilterChanged)
    def _filter_changed(self, message: messages.FilterChanged) -> None:
        self.runs.set_filter(message.text)
        self._show_rows()
        self._show_topbar()

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
            self._show_chart()

    def _show_selected_flags(self) -> None:
        status = self.statuses.get(self._selected) if self._selected else None
        self.flags_state = FlagsState.of(status, scanning=self.polls == 0)

    def show_analysis(self) -> None:
        path = self._selected
        self.analysis = AnalysisView(
            path,
            self.checks.running_for,
            self.checks.diagnoses.get(path) if path is not None else None,
            self.checks.outcomes.get(path) if path is not None else None,
            self.remap.reports.get(path) if path is not None else None,
        )

    def _show_chart(self) -> None:
        """Tell the chart pane which runs to chart; it decides whether that needs drawing again."""
        selected = self.statuses.get(self._selected) if self._selected else None
        self.chart_request = ChartRequest(
            tuple(self.runs.charted(self._selected)), selected, bool(self.runs.marked), self._metric
        )

    @on(messages.MarkToggled)
    def _mark_toggled(self, message: messages.MarkToggled) -> None:
        self.runs.toggle_mark(message.path)
        self._show_rows()
        self._show_chart()

    @on(messages.PinToggled)
    def _pin_toggled(self, message: messages.PinToggled) -> None:
        self.runs.toggle_pin(message.path)
        self._show_rows()

    @on(messages.MetricPickerRequested)
    def _metric_picker_requested(self, message: messages.MetricPickerRequested) -> None:
        """`t`: every series name of the runs shown (names only: the dict of series is in memory, and
        the series' points are read by the chart pane's worker, off this thread)."""
        charted = self.runs.charted(self._selected)
        names = sorted({name for status in charted for name in series_names(status)})
        alternatives = {alt: shown for status in charted for alt, shown in status.scalars.alternatives.items()}

        def chosen(name: str | None) -> None:
            if name is not None:  # esc: the chart stays as it was
                self._metric = name or None
                self._show_chart()

        self.push_screen(MetricPickerScreen(names, self._metric, alternatives), chosen)

    # -- checks and remap: each workflow is a module of its own; this hands it its messages --

    @on(messages.ChecksRequested)
    @on(messages.CancelChecks)
    @on(messages.CheckProgress)
    @on(messages.ChecksFinished)
    @on(messages.HypothesisOpened)
    @on(messages.RemapRequested)
    @on(messages.RemapPlanned)
    @on(messages.CancelRemap)
    @on(messages.RemapProgress)
    @on(messages.RemapFinished)
    def _to_workflow(self, message: Message) -> None:
        WORKFLOW_ROUTES[type(message)](self, message)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if worker.group == check_flow.GROUP and event.state == WorkerState.CANCELLED:
            self.checks.worker_cancelled()
        elif worker.group == "watch" and event.state == WorkerState.ERROR:
            self.notify(f"watching stopped: {worker.error}", severity="error", timeout=30)

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
        from triage_tui.core.watch.node import NodeSampler

        sampler = NodeSampler(lambda: [status.info.directory for status in list(self.statuses.values())])
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
        yield from screen_commands(screen)
        yield SystemCommand("Help: every key", "List the keys of this screen", self.action_help)


# Each workflow message, handed to its flow (check_flow.py, remap_flow.py).
WORKFLOW_ROUTES: dict[type[Message], Callable[[TriageApp, Any], object]] = {
    messages.ChecksRequested: lambda app, m: app.checks.start(m.path),
    messages.CancelChecks: lambda app, m: app.checks.cancel(),
    messages.CheckProgress: lambda app, m: app.checks.progress(m),
    messages.ChecksFinished: lambda app, m: app.checks.finished(m),
    messages.HypothesisOpened: lambda app, m: app.checks.open_hypothesis(m.path, m.hypothesis_id),
    messages.RemapRequested: lambda app, m: app.remap.request(m.path),
    messages.RemapPlanned: lambda app, m: app.remap.planned(m),
    messages.CancelRemap: lambda app, m: app.remap.cancel(),
    messages.RemapProgress: lambda app, m: app.remap.progress(m),
    messages.RemapFinished: lambda app, m: app.remap.finished(m),
}
