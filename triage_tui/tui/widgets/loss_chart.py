"""The selected run's loss, its TensorBoard-smoothed curve and the chance line ln V."""

from __future__ import annotations

import math
from typing import cast

import numpy as np
from textual.color import Color
from textual.reactive import reactive
from textual_plotext import PlotextPlot

from triage_tui.tui.view_data import ChartSeries, format_step, log_ticks, nice_ticks


def _rgb(app, variable: str, fallback: str) -> tuple[int, int, int]:
    value = app.theme_variables.get(variable, fallback)
    return Color.parse(value).rgb


class LossChart(PlotextPlot):
    """A PlotextPlot that redraws from a ChartSeries; it never reads run data itself."""

    HELP = "Loss of the selected run: raw (dim), smoothed like TensorBoard (bright), chance ln V (red)."

    log_y: reactive[bool] = reactive(False)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.series: ChartSeries | None = None

    @property
    def last_point(self) -> tuple[int, float] | None:
        """The newest (step, loss) drawn; tests and the pane title read it."""
        if self.series is None:
            return None
        return self.series.last_step, self.series.last_value

    def show(self, series: ChartSeries | None) -> None:
        self.series = series
        self._draw()

    def watch_log_y(self) -> None:
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_figure()
        series = self.series
        if series is None or len(series.steps) == 0:
            plt.title("no loss scalars yet")
            self.refresh()
            return
        finite = np.isfinite(series.values) & np.isfinite(series.smoothed)
        if self.log_y:
            finite &= (series.values > 0) & (series.smoothed > 0)
        steps = series.steps[finite].tolist()
        values = series.values[finite].tolist()
        smoothed = series.smoothed[finite].tolist()
        if not steps:
            plt.title("loss has no finite points")
            self.refresh()
            return
        muted = _rgb(self.app, "foreground-darken-3", "#777777")
        bright = _rgb(self.app, "accent", "#ffa62b")
        danger = _rgb(self.app, "error", "#ba3c5b")
        surface = _rgb(self.app, "surface", "#1e1e1e")
        plt.plot(steps, values, marker="braille", color=muted)
        plt.plot(steps, smoothed, marker="braille", color=bright)
        low = min(min(values), min(smoothed))
        high = max(max(values), max(smoothed))
        chance = series.chance_loss
        if chance is not None and math.isfinite(chance):
            # Keep the chance line in view even when the loss is far below it.
            low, high = min(low, chance), max(high, chance)
            plt.horizontal_line(chance, color=danger)
            label = series.chance_label or (
                f"ln {series.vocab_size} = {chance:.2f}" if series.vocab_size else f"chance {chance:.2f}"
            )
            plt.text(label, x=steps[0], y=chance, color=danger, background=surface, alignment="left")
        if series.first_non_finite_step is not None:
            # Where the loss stopped being a number: a flag's step, drawn where the curve ends.
            plt.vertical_line(series.first_non_finite_step, color=danger)
            plt.text(
                f"NaN from {format_step(series.first_non_finite_step)}",
                x=series.first_non_finite_step,
                y=high,
                color=danger,
                background=surface,
                alignment="right",
            )
        # Round ticks; the chance value is a tick of its own, so its label sits on the chance line's
        # row and no other value's tick shares that row, on a linear axis or a log one.
        rows = max(self.size.height - 3, 4)
        count = max(3, min(6, rows // 2))
        with_chance = chance is not None and math.isfinite(chance) and (chance > 0 or not self.log_y)
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
        if with_chance and chance is not None:
            row_height = span / rows
            ticks = [t for t in ticks if abs(position(t) - position(chance)) > 1.5 * row_height] + [chance]
        ticks.sort()
        plt.yticks(ticks, [f"{t:.2f}" if t == chance else f"{t:g}" for t in ticks])
        if len(steps) == 1:
            plt.xlim(steps[0] - 1, steps[0] + 1)
        else:
            # Steps are integers: label them so (plotext would print 737.5).
            step_ticks = sorted({int(round(t)) for t in np.linspace(steps[0], steps[-1], 5)})
            # plotext's stub types positions as list[float]; ints are what it is given, as before
            plt.xticks(cast("list[float]", step_ticks), [format_step(t) for t in step_ticks])
        self.refresh()
