"""The selected run's serving acceptance length over time, beside its loss (core/watch/serving/)."""

from __future__ import annotations

import math
from typing import cast

import numpy as np
from textual_plotext import PlotextPlot

from triage_tui.tui.view_data import ServingSeries
from triage_tui.tui.widgets.loss_chart import _rgb

# Acceptance length 1 is the floor: the bonus token only, every draft token rejected.
FLOOR = 1.0


class ServingChart(PlotextPlot):
    """Acceptance length per reporting interval, the floor 1.0 and the training estimate."""

    HELP = (
        "Serving acceptance length of the selected run (triage.toml [serving]): per interval (bright), "
        "1.0 = every draft token rejected (red), the run's own per-position accuracies' estimate (dim)."
    )

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.series: ServingSeries | None = None

    def show(self, series: ServingSeries | None) -> None:
        self.series = series
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_figure()
        series = self.series
        if series is None:
            self.refresh()
            return
        plt.title(title_of(series))
        if len(series.lengths) == 0:
            self.refresh()
            return
        bright = _rgb(self.app, "accent", "#ffa62b")
        muted = _rgb(self.app, "foreground-darken-3", "#777777")
        danger = _rgb(self.app, "error", "#ba3c5b")
        x = series.intervals.tolist()
        y = series.lengths.tolist()
        plt.plot(x, y, marker="braille", color=bright)
        surface = _rgb(self.app, "surface", "#1e1e1e")
        plt.horizontal_line(FLOOR, color=danger)
        plt.text("1.0 nothing accepted", x=x[0], y=FLOOR, color=danger, background=surface, alignment="left")
        low, high = min(min(y), FLOOR), max(y)
        estimate = series.training_estimate
        if estimate is not None and math.isfinite(estimate):
            plt.horizontal_line(estimate, color=muted)
            plt.text(
                f"training est. {estimate:.2f}", x=x[-1], y=estimate, color=muted, background=surface, alignment="right"
            )
            high = max(high, estimate)
        pad = max((high - low) * 0.1, 0.05)
        plt.ylim(low - pad, high + pad)
        if len(x) == 1:
            plt.xlim(x[0] - 1, x[0] + 1)
        else:
            # Intervals are counted: integer labels (plotext would print 7.2).
            ticks = sorted({int(round(t)) for t in np.linspace(x[0], x[-1], 5)})
            # plotext's stub types positions as list[float]; ints are what it is given, as before
            plt.xticks(cast("list[float]", ticks), [str(t) for t in ticks])
        self.refresh()


def title_of(series: ServingSeries) -> str:
    """One line: engine, pooled acceptance length, per position, the training estimate."""
    parts = [f"serving · {series.engine or 'no data'}"]
    if series.unscored is not None:
        parts.append(f"{series.unscored}, not scored")
    if series.acceptance_length is not None:
        parts.append(f"accept length {series.acceptance_length:.2f}")
    if series.per_position:
        parts.append("per pos " + " ".join(f"{p:.2f}" for p in series.per_position[:5]))
    if series.training_estimate is not None:
        parts.append(f"training est. {series.training_estimate:.2f}")
    if series.failing:
        parts.append("a source failed or was not used")
    return " · ".join(parts)
