"""The chart pane: the loss chart (or a series picked with `t`), the serving acceptance under it, and the
worker that computes what they draw.

The app says only what to chart (a ChartRequest: the runs, the selected one, the series); the pane owns
how: the smoothing (`s`/`S`), the x axis (`w`), log-y (`l`), its width in cells, and a thread worker that
smooths and thins the series off the UI thread. The scalars are live (the watcher's thread appends to
them), so the pane looks every ``refresh`` seconds whether what it drew is still current, and asks its
worker again when it is not. Each computation carries the generation it was asked in: an answer for an
older generation (another run, another weight) is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.worker import get_current_worker

from triage_tui.core.text import printable
from triage_tui.tui.view_data import (
    SMOOTHING_WEIGHT,
    ChartSeries,
    ServingSeries,
    chart_series,
    next_smoothing,
    overlay_colour,
    serving_series,
)
from triage_tui.tui.view_state import ChartRequest
from triage_tui.tui.widgets.loss_chart import LossChart
from triage_tui.tui.widgets.serving_chart import ServingChart

WORKER_GROUP = "chart"


@dataclass(frozen=True)
class ChartSubject:
    """What the chart shows, apart from how fresh its data is: an answer for another subject is dropped."""

    paths: tuple  # the runs drawn: the marked ones, else the selected one
    selected: object  # the selected run's path (its serving chart), or None
    overlay: bool  # runs are marked: each is drawn smoothed, in its colour
    metric: str | None  # the series picked with `t`; None: each run's loss
    wall: bool  # x is minutes since each run's first point
    smoothing: float  # the EMA weight of the bright curve


@dataclass(frozen=True)
class ChartKey:
    subject: ChartSubject
    # Per run (scalars version, loss tag, last step), and the selected run's serving evidence: the
    # scalars are live, the rest of a status is its poll's snapshot, so a status from before the poll
    # that found the loss tag can already read the new version; without the tag and step in the key a
    # chart drawn empty from that status matched the next status's key and stayed empty.
    freshness: tuple


class ChartPane(Vertical):
    """The loss chart and the serving chart of the runs the app names, drawn by a worker of its own."""

    @dataclass
    class Computed(Message):
        generation: int
        key: ChartKey
        lines: tuple[ChartSeries, ...]
        serving: ServingSeries | None

    def __init__(self, *, refresh: float = 0.25, **kwargs) -> None:
        super().__init__(**kwargs)
        self.refresh_interval = refresh
        self.request = ChartRequest()
        self.smoothing = SMOOTHING_WEIGHT
        self.wall = False
        self.drawn: ChartKey | None = None  # what the charts show now
        self._asked: ChartKey | None = None  # the last key a worker was started for
        self.generation = 0
        self._width = 80  # the loss chart's cells: two points a cell (braille markers)

    def compose(self) -> ComposeResult:
        yield LossChart(id="chart")
        yield ServingChart(id="serving-chart")

    def on_mount(self) -> None:
        self.border_title = "loss"
        self._show_keys()
        self.set_interval(self.refresh_interval, self.refresh_if_stale, name="chart")

    def on_resize(self) -> None:
        self.call_after_refresh(self._measure)

    def _measure(self) -> None:
        if self.is_attached:
            self._width = self.query_one(LossChart).size.width

    # -- what the app and the screen ask ---------------------------------------------------

    def chart(self, request: ChartRequest) -> None:
        """Chart these runs (the app's request; the pane decides whether that needs drawing again)."""
        self.request = request
        self.refresh_if_stale()

    def toggle_log_y(self) -> None:
        chart = self.query_one(LossChart)
        chart.log_y = not chart.log_y
        self._show_keys()

    def step_smoothing(self, step: int) -> None:
        self.smoothing = next_smoothing(self.smoothing, step)
        self._show_keys()
        self.refresh_if_stale()  # the weight is in the chart's key: it is drawn again

    def toggle_wall(self) -> None:
        self.wall = not self.wall
        self._show_keys()
        self.refresh_if_stale()

    # -- computing -------------------------------------------------------------------------

    def _key(self) -> ChartKey:
        request = self.request
        selected = request.selected
        subject = ChartSubject(
            tuple(status.info.path for status in request.statuses),
            selected.info.path if selected is not None else None,
            request.overlay,
            request.metric,
            self.wall,
            self.smoothing,
        )
        freshness = (
            tuple((int(s.scalars.version), s.loss_tag, s.last_step) for s in request.statuses),
            id(selected.serving) if selected is not None else None,
            selected.serving_errors if selected is not None else (),
        )
        return ChartKey(subject, freshness)

    def refresh_if_stale(self) -> None:
        if not self.request.statuses:
            if self.drawn is not None:
                # No run to chart (the filter matches none): the chart must not keep the last one's curve.
                self.drawn = None
                self._show((), None, self._title(None, (), None))
            return
        wanted = self._key()
        if wanted == self.drawn:
            return
        # Compared with what is drawn, not with what was asked: a computation that was cancelled, failed
        # or finished out of order is simply asked for again at the next tick.
        if wanted == self._asked and any(
            worker.group == WORKER_GROUP and not worker.is_finished for worker in self.workers
        ):
            return
        self._asked = wanted
        self.generation += 1
        self.run_worker(
            partial(self._compute, self.request, wanted, self.generation, max(64, 2 * self._width)),
            group=WORKER_GROUP,
            description="chart",
            exclusive=True,
            exit_on_error=False,
            thread=True,
        )

    def _compute(self, request: ChartRequest, key: ChartKey, generation: int, max_points: int) -> None:
        """In the worker's thread: smooth and thin each run's series."""
        subject = key.subject
        lines = []
        for index, status in enumerate(request.statuses):
            series = chart_series(status, max_points, subject.smoothing, tag=subject.metric, wall=subject.wall)
            if series is not None:
                lines.append(replace(series, colour=overlay_colour(index)) if subject.overlay else series)
        selected = request.selected
        serving = serving_series(selected, max_points) if selected is not None else None
        if not get_current_worker().is_cancelled:
            self.post_message(self.Computed(generation, key, tuple(lines), serving))

    @on(Computed)
    def _computed(self, message: Computed) -> None:
        message.stop()
        if message.generation != self.generation:
            return  # asked before the subject changed
        self.drawn = message.key
        self._show(message.lines, message.serving, self._title(message.key.subject, message.lines, message.serving))

    # -- drawing ---------------------------------------------------------------------------

    def _title(
        self, subject: ChartSubject | None, lines: tuple[ChartSeries, ...], serving: ServingSeries | None
    ) -> Text:
        if subject is None:
            return Text("loss")
        what = subject.metric if subject.metric is not None else "loss"
        if subject.overlay:
            marked = len(subject.paths)
            missing = marked - len(lines)
            about = f"{marked} marked run{'s' if marked != 1 else ''}" + (f", {missing} without it" if missing else "")
        else:
            status = self.request.selected
            name = status.info.name if status is not None else ""
            if subject.metric is not None:
                about = name if lines else f"{name} has none"
            else:
                about = f"{lines[0].tag if lines else 'no loss tag'} · {name}"
        served = serving.acceptance_length if serving else None
        # A Text: a tag or directory named "[@click=app.quit]" or "[/]" is shown, never applied.
        return Text(
            f"{printable(what)} · {printable(about)}" + (f" · served {served:.2f}" if served is not None else "")
        )

    def _show(self, lines: tuple[ChartSeries, ...], serving: ServingSeries | None, title: Text) -> None:
        subject = self.drawn.subject if self.drawn is not None else None
        overlay = subject.overlay if subject is not None else False
        self.query_one(LossChart).show(
            lines,
            overlay=overlay,
            wall=subject.wall if subject is not None else False,
            metric=subject.metric if subject is not None else None,
        )
        # Serving acceptance under the loss, for a run whose triage.toml names [serving].
        self.set_class(serving is not None, "-serving")
        self.query_one(ServingChart).show(serving)
        self.border_title = title
        self._show_keys()

    def _show_keys(self) -> None:
        # Say which scale is on (a log axis read as linear misleads) and the smoothing the bright
        # curve has (TensorBoard's debiased EMA; the table's smoothed column keeps TensorBoard's 0.6).
        scale = "log y (l: linear)" if self.query_one(LossChart).log_y else "l log-y"
        # The x axis too: minutes and steps read alike on a tick label.
        x_axis = "x min (w)" if self.wall else "w time"
        if self.drawn is not None and self.drawn.subject.overlay:
            # Runs side by side are smoothed only, each in its colour: no raw, no "bright".
            line = f"smoothed {self.smoothing:g} (s/S) · {scale} · {x_axis}"
        else:
            line = f"raw dim · smoothed {self.smoothing:g} bright (s/S), as TensorBoard · {scale} · {x_axis}"
        self.border_subtitle = line
