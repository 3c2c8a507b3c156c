"""The selected run's loss, its TensorBoard-smoothed curve and the chance line ln V; or the marked
runs side by side, each in its colour, each with its own chance line; or any other series of theirs."""

from __future__ import annotations

import math
from typing import cast

import numpy as np
from textual.color import Color
from textual.reactive import reactive
from textual_plotext import PlotextPlot

from triage_tui.core.text import printable
from triage_tui.tui.view_data import (
    ChartSeries,
    format_minutes,
    format_step,
    log_ticks,
    nice_ticks,
    overlay_colour,
)


def _rgb(app, variable: str, fallback: str) -> tuple[int, int, int]:
    value = app.theme_variables.get(variable, fallback)
    return Color.parse(value).rgb


class LossChart(PlotextPlot):
    """A PlotextPlot that redraws from ChartSeries; it never reads run data itself."""

    HELP = (
        "Loss of the selected run: raw (dim), smoothed like TensorBoard (bright), chance ln V (red); "
        "marked runs (space) side by side, smoothed, each in its colour."
    )

    log_y: reactive[bool] = reactive(False)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.lines: tuple[ChartSeries, ...] = ()
        self.overlay = False  # marked runs: smoothed curves in their colours, named in a legend
        self.wall = False  # x is minutes since each run's first point, not the step
        self.metric: str | None = None  # a series chosen with `t`; None: each run's loss

    @property
    def series(self) -> ChartSeries | None:
        """The first run drawn (the selected one, or the first marked)."""
        return self.lines[0] if self.lines else None

    def show(
        self,
        lines: tuple[ChartSeries, ...],
        *,
        overlay: bool = False,
        wall: bool = False,
        metric: str | None = None,
    ) -> None:
        self.lines, self.overlay, self.wall, self.metric = lines, overlay, wall, metric
        self._draw()

    def watch_log_y(self) -> None:
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _x(self, series: ChartSeries) -> np.ndarray:
        if self.wall:
            return series.minutes if series.minutes is not None else np.full(len(series.steps), np.nan)
        return series.steps

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_figure()
        what = printable(self.metric) if self.metric is not None else "loss"
        if not any(len(series.steps) for series in self.lines):
            plt.title(f"no {what} scalars yet")
            self.refresh()
            return
        drawn: list[tuple[ChartSeries, list[float], list[float], list[float]]] = []
        for series in self.lines:
            x = self._x(series)
            finite = np.isfinite(series.values) & np.isfinite(series.smoothed) & np.isfinite(x)
            if self.log_y:
                finite &= (series.values > 0) & (series.smoothed > 0)
            if finite.any():
                drawn.append(
                    (series, x[finite].tolist(), series.values[finite].tolist(), series.smoothed[finite].tolist())
                )
        if not drawn:
            plt.title(f"{what} has no finite points" + (" with a wall time" if self.wall else ""))
            self.refresh()
            return
        muted = _rgb(self.app, "foreground-darken-3", "#777777")
        bright = _rgb(self.app, "accent", "#ffa62b")
        danger = _rgb(self.app, "error", "#ba3c5b")
        surface = _rgb(self.app, "surface", "#1e1e1e")
        for index, (series, xs, values, smoothed) in enumerate(drawn):
            if self.overlay:
                # Smoothed only: raw curves of several runs hide each other. The legend names the run.
                colour = Color.parse(series.colour or overlay_colour(index)).rgb
                plt.plot(xs, smoothed, marker="braille", color=colour, label=printable(series.name))
            else:
                plt.plot(xs, values, marker="braille", color=muted)
                plt.plot(xs, smoothed, marker="braille", color=bright)
        shown = [v for _, _, values, smoothed in drawn for v in (smoothed if self.overlay else values + smoothed)]
        low, high = min(shown), max(shown)
        x_low = min(xs[0] for _, xs, _, _ in drawn)
        x_high = max(xs[-1] for _, xs, _, _ in drawn)
        # Each run's own chance line (its V can differ), once per value; only the loss has one.
        chances: dict[float, str] = {}
        for series, _, _, _ in drawn:
            chance = series.chance_loss
            if chance is None or not math.isfinite(chance) or (self.log_y and chance <= 0) or chance in chances:
                continue
            chances[chance] = series.chance_label or (
                f"ln {series.vocab_size} = {chance:.2f}" if series.vocab_size else f"chance {chance:.2f}"
            )
        for chance, label in chances.items():
            # Keep the chance line in view even when the loss is far below it.
            low, high = min(low, chance), max(high, chance)
            plt.horizontal_line(chance, color=danger)
            plt.text(label, x=x_low, y=chance, color=danger, background=surface, alignment="left")
        first = drawn[0][0]
        if not self.overlay and not self.wall and first.first_non_finite_step is not None:
            # Where the loss stopped being a number: a flag's step, drawn where the curve ends.
            plt.vertical_line(first.first_non_finite_step, color=danger)
            plt.text(
                f"NaN from {format_step(first.first_non_finite_step)}",
                x=first.first_non_finite_step,
                y=high,
                color=danger,
                background=surface,
                alignment="right",
            )
        # Round ticks; each chance value is a tick of its own, so its label sits on the chance line's
        # row and no other value's tick shares that row, on a linear axis or a log one.
        rows = max(self.size.height - 3, 4)
        count = max(3, min(6, rows // 2))
        if self.log_y:
            plt.yscale("log")
            # plotext log-scales the ticks given (log10) as it does the data, so the chance tick lands
            # on the chance line's row; its limits it takes as they are, so they are left to it.
            ticks = log_ticks(low, high, count)
            position = math.log10
            span = max(math.log10(high) - math.log10(low), 1e-9)
        else:
            pad = max((high - low) * 0.08, 1e-3)
            plt.ylim(low - pad, high + pad)
            ticks = nice_ticks(low - pad, high + pad, count=count)
            position = float
            span = high - low + 2 * pad
        if chances:
            row_height = span / rows
            ticks = [t for t in ticks if all(abs(position(t) - position(c)) > 1.5 * row_height for c in chances)]
            ticks += list(chances)
        ticks.sort()
        plt.yticks(ticks, [f"{t:.2f}" if t in chances else f"{t:g}" for t in ticks])
        if x_high <= x_low:
            plt.xlim(x_low - 1, x_low + 1)
        elif self.wall:
            minute_ticks = nice_ticks(x_low, x_high, count=5)
            plt.xticks(minute_ticks, [format_minutes(t) for t in minute_ticks])
        else:
            # Steps are integers: label them so (plotext would print 737.5).
            step_ticks = sorted({int(round(t)) for t in np.linspace(x_low, x_high, 5)})
            # plotext's stub types positions as list[float]; ints are what it is given, as before
            plt.xticks(cast("list[float]", step_ticks), [format_step(t) for t in step_ticks])
        self.refresh()
