"""What the widgets draw, computed off the UI thread from the core's RunStatus objects.

The watcher thread turns each ``RunStatus`` into a ``RunRow`` (one table row) and the
chart worker turns the selected run's loss series into a ``ChartSeries``; the UI thread
only copies these small immutable values into widgets, so it never touches a large
array or a file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triage_tui.core.series import RunScalars, ScalarSeries, downsample, ema_smooth
from triage_tui.core.text import format_accuracy
from triage_tui.core.watch.run_status import RunStatus
from triage_tui.core.watch.serving.compare import training_estimate_from_scalars
from triage_tui.core.watch.serving.evidence import ServingEvidence
from triage_tui.core.watch.signals.flags import RUN_STATUSES
from triage_tui.core.watch.signals.kinds import FlagKind, Severity
from triage_tui.core.watch.signals.metrics import MetricSummary

# TensorBoard's default smoothing slider value; the smoothed column and curve match TB's.
SMOOTHING_WEIGHT = 0.6
# The chart's smoothing, one step lower or higher per `s` / `S`: TensorBoard's slider spans [0, 0.999).
SMOOTHING_STEPS = (0.0, 0.3, 0.6, 0.8, 0.9, 0.95, 0.99)


def next_smoothing(weight: float, step: int) -> float:
    """The smoothing one step below (step -1) or above (+1) ``weight``, held at the ends."""
    index = min(range(len(SMOOTHING_STEPS)), key=lambda i: abs(SMOOTHING_STEPS[i] - weight))
    return SMOOTHING_STEPS[max(0, min(len(SMOOTHING_STEPS) - 1, index + step))]


# The colour of each run status and flag severity (core/watch/signals/flags.py orders them, core/text.py
# STATUS_GLYPHS draws them).
SEVERITY_STYLE = {
    "critical": "bold red",
    "warning": "yellow",
    "ok": "green",
    "info": "dim",
    "warming": "cyan",
    "error": "bold magenta",
}


@dataclass(frozen=True)
class RunRow:
    """One row of the runs table."""

    path: Path
    name: str
    status: str
    last_step: int | None
    loss_last: float | None
    loss_smoothed: float | None
    chance_loss: float | None
    vocab_size: int | None
    accuracy_last: float | None
    last_update: float | None
    critical_kinds: frozenset[str]
    loss_flagged: bool
    version: int
    shown_status: str  # RunStatus.shown_status: what the glyph says ("warming" inside the warm-up)
    # core.watch.run_state: "live" | "stalled" | "ended" | "crashed" | "unknown"; None where not judged
    state: str | None = None

    def sort_key(self) -> tuple[int, str]:
        """Worst first, then by name so the order is stable between polls."""
        rank = RUN_STATUSES.index(self.status) if self.status in RUN_STATUSES else -1
        return (-rank, self.name)


@dataclass(frozen=True)
class ChartSeries:
    """The selected run's loss, downsampled for the chart's width."""

    path: Path
    tag: str
    version: int
    chance_loss: float | None
    vocab_size: int | None
    steps: np.ndarray
    values: np.ndarray
    smoothed: np.ndarray
    last_step: int
    last_value: float
    first_non_finite_step: int | None = None  # where NaN/inf begins, marked on the chart
    chance_label: str | None = None  # "0.953 × ln 1000 = 6.58" when the trainer averages over masked positions
    name: str = ""  # the run's name, for the legend of runs drawn side by side
    # Where each point goes on a wall-time x axis: minutes since the run's first point (any series'),
    # so runs started hours apart are compared from their starts. None: the x axis is the step.
    minutes: np.ndarray | None = None
    colour: str = ""  # its curve's colour among runs side by side (overlay_colour of its mark)


def _last(metric: MetricSummary | None) -> float | None:
    return metric.last if metric is not None else None


def _smoothed_last(scalars: RunScalars, tag: str | None) -> float | None:
    if tag is None:
        return None
    series = scalars.get(tag)
    if series is None or len(series) == 0:
        return None
    smoothed = ema_smooth(np.asarray(series.values), SMOOTHING_WEIGHT)
    return float(smoothed[-1]) if len(smoothed) else None


_LOSS_FLAG_KINDS = frozenset(
    {FlagKind.LOSS_AT_CHANCE, FlagKind.LOSS_ABOVE_CHANCE, FlagKind.NON_FINITE, FlagKind.DIVERGING}
)


class RowCache:
    """Builds RunRows, re-smoothing a run's loss only when its scalars changed."""

    def __init__(self) -> None:
        self._smoothed: dict[Path, tuple[int, float | None]] = {}

    def row(self, status: RunStatus) -> RunRow:
        scalars = status.scalars
        version = int(getattr(scalars, "version", 0))
        cached = self._smoothed.get(status.info.path)
        if cached is None or cached[0] != version:
            cached = (version, _smoothed_last(scalars, status.loss_tag))
            self._smoothed[status.info.path] = cached
        critical = frozenset(f.kind for f in status.flags if f.severity == Severity.CRITICAL)
        loss_flagged = any(f.kind in _LOSS_FLAG_KINDS and f.severity != Severity.INFO for f in status.flags)
        return RunRow(
            path=status.info.path,
            name=status.info.name,
            status=status.status,
            last_step=status.last_step,
            loss_last=_last(status.metrics.loss),
            loss_smoothed=cached[1],
            chance_loss=status.chance_loss,
            vocab_size=status.vocab_size,
            accuracy_last=_last(status.metrics.accuracy),
            last_update=status.last_update,
            critical_kinds=critical,
            loss_flagged=loss_flagged,
            version=version,
            shown_status=status.shown_status,
            state=status.state.state if status.state is not None else None,
        )


# The serving engine's acceptance length per reporting interval, offered beside the run's scalars.
SERVING_ACCEPTANCE = "serving/acceptance_length"

# One colour per run drawn side by side, in the order they were marked; the runs table's mark of a
# run has its curve's colour. No red: red is the chance line's.
OVERLAY_COLOURS = ("#ffa62b", "#4ec9b0", "#c586c0", "#569cd6", "#dcdcaa", "#b5cea8", "#ce9178", "#9cdcfe")


def overlay_colour(index: int) -> str:
    return OVERLAY_COLOURS[index % len(OVERLAY_COLOURS)]


def series_names(status: RunStatus) -> list[str]:
    """Every series of the run the chart can draw: its scalars (TensorBoard tags, ``wandb/...``,
    ``console/...``, ``trainer_state/...``) and its serving acceptance, when it has any."""
    names = status.scalars.tags()
    serving = status.serving
    if serving is not None and serving.samples and SERVING_ACCEPTANCE not in names:
        names.append(SERVING_ACCEPTANCE)
    return names


def _named_series(status: RunStatus, name: str) -> ScalarSeries | None:
    found = status.scalars.get(name)
    if found is not None or name != SERVING_ACCEPTANCE or status.serving is None:
        return found
    samples = status.serving.samples
    # The engine's intervals have no wall time triage can trust (its timestamps are free text).
    return ScalarSeries.of(
        name,
        np.array([s.index for s in samples], dtype=np.int64),
        np.full(len(samples), np.nan),
        np.array([s.acceptance_length for s in samples], dtype=np.float64),
    )


def _first_wall_time(scalars: RunScalars) -> float | None:
    firsts = [float(s.wall_times[0]) for s in list(scalars.series.values()) if len(s)]
    finite = [w for w in firsts if math.isfinite(w)]
    return min(finite) if finite else None


def chart_series(
    status: RunStatus,
    max_points: int,
    smoothing: float = SMOOTHING_WEIGHT,
    *,
    tag: str | None = None,
    wall: bool = False,
) -> ChartSeries | None:
    """One series of one run (its loss, or ``tag``), smoothed over all points with TensorBoard's
    debiased EMA of weight ``smoothing``, then thinned; with ``wall``, placed in minutes since the
    run's first point too. Only the loss has a chance line."""
    name = tag if tag is not None else status.loss_tag
    if name is None:
        return None
    series = _named_series(status, name)
    if series is None:
        return None
    version = int(getattr(status.scalars, "version", 0))
    # The watcher thread may append while we read: take one consistent prefix.
    steps_all, walls_all, values_all = series.columns()
    n = len(steps_all)
    if n == 0:
        return None
    steps_all, values_all = steps_all.copy(), values_all.astype(np.float64)
    smoothed_all = ema_smooth(values_all, smoothing)
    # Thin by the raw curve's min/max points (spikes survive) and take the smoothed curve at
    # the same points, so all three arrays stay aligned; given positions as "steps",
    # downsample returns the positions it kept.
    kept, _ = downsample(np.arange(n), values_all, max_points)
    minutes = None
    if wall:
        origin = _first_wall_time(status.scalars)
        minutes = (walls_all[kept] - (origin if origin is not None else np.nan)) / 60.0
    loss = name == status.loss_tag
    return ChartSeries(
        path=status.info.path,
        tag=name,
        version=version,
        chance_loss=status.chance_loss if loss else None,
        vocab_size=status.vocab_size if loss else None,
        chance_label=status.chance.label() if loss and status.chance is not None else None,
        steps=steps_all[kept],
        values=values_all[kept],
        smoothed=smoothed_all[kept],
        last_step=int(steps_all[-1]),
        last_value=float(values_all[-1]),
        first_non_finite_step=_first_non_finite_step(steps_all, values_all),
        name=status.info.name,
        minutes=minutes,
    )


def _first_non_finite_step(steps: np.ndarray, values: np.ndarray) -> int | None:
    bad = np.flatnonzero(~np.isfinite(values))
    return int(steps[bad[0]]) if bad.size else None


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values (1, 2 or 5 × 10^k apart) inside [low, high], evenly spaced."""
    span = high - low
    if not math.isfinite(span) or span <= 0:
        return [low]
    raw = span / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [round(first + i * step, 10) for i in range(int((high - first) / step + 1e-9) + 1)]


def log_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round values (1, 2 and 5 × 10^k) inside [low, high] > 0 for a log axis, thinned to about
    ``count``; the ends themselves when no round value falls inside (a loss between 10.4 and 13.5)."""
    if not (math.isfinite(low) and math.isfinite(high)) or low <= 0 or high <= low:
        return [low] if math.isfinite(low) and low > 0 else []
    found = [
        round(m * 10.0**k, 10)
        for k in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
        for m in (1, 2, 5)
        if low <= m * 10.0**k <= high
    ]
    if len(found) < 2:
        return [float(f"{t:.3g}") for t in np.geomspace(low, high, max(count, 2))]
    stride = max(1, math.ceil(len(found) / count))
    return found[::stride]


# The colour of each run state's word in the runs table (core.watch.run_state STATES).
STATE_STYLE = {"live": "green", "stalled": "bold red", "crashed": "bold red", "ended": "dim", "unknown": "dim"}


def state_line(status: RunStatus) -> tuple[str, str] | None:
    """The run's state and the evidence for it, for the flags pane: ("live", "writer pid 4242
    (python): pid 4242 named in events.out.tfevents..."); None where the run was not judged, or
    where its stalled or crashed flag already says it. (The table's state column says since when.)"""
    state = status.state
    if state is None or any(flag.kind.value == state.state.value for flag in status.flags):
        return None
    return state.state, state.reason


def format_age(seconds: float | None) -> str:
    """Time since the last event, short: 4s, 12m, 3h, 2d."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


@dataclass(frozen=True)
class ServingSeries:
    """The selected run's serving acceptance length per reporting interval, for the serving chart."""

    engine: str | None
    intervals: np.ndarray  # interval numbers (log lines, or scrapes after the first)
    lengths: np.ndarray
    acceptance_length: float | None  # pooled over every interval
    per_position: tuple[float, ...]
    training_estimate: float | None  # the run's per-position accuracies, same number of positions
    failing: bool  # a source failed at the last poll, or an untrusted triage.toml named one not used
    unscored: str | None = None  # "synthetic" or "not measured": shown, never flagged (ServingEvidence.scored)


def serving_series(status: RunStatus, max_points: int) -> ServingSeries | None:
    """Serving acceptance over time beside the training estimate; None when the run names no serving."""
    serving = status.serving
    if serving is None and not status.serving_errors:
        return None
    samples = serving.samples if serving is not None else ()
    intervals = np.array([s.index for s in samples], dtype=np.int64)
    lengths = np.array([s.acceptance_length for s in samples], dtype=np.float64)
    if len(samples) > max_points:
        kept, _ = downsample(np.arange(len(samples)), lengths, max_points)
        intervals, lengths = intervals[kept], lengths[kept]
    estimate = training_estimate_from_scalars(status.scalars)
    if estimate is not None and serving is not None and serving.per_position:
        estimate = estimate.truncated(len(serving.per_position))
    return ServingSeries(
        engine=serving.engine if serving is not None else None,
        intervals=intervals,
        lengths=lengths,
        acceptance_length=serving.acceptance_length if serving is not None else None,
        per_position=serving.per_position if serving is not None else (),
        training_estimate=estimate.acceptance_length if estimate is not None else None,
        failing=bool(status.serving_errors),
        unscored=_unscored(serving),
    )


def _unscored(serving: ServingEvidence | None) -> str | None:
    if serving is None or serving.scored:
        return None
    return "not measured" if not serving.measured else "synthetic (forced acceptance)"


def format_step(step: int | None) -> str:
    if step is None:
        return "–"
    if step >= 1_000_000:
        return f"{step / 1_000_000:.1f}M"
    if step >= 100_000:
        return f"{step / 1000:.0f}k"
    return str(step)


def format_minutes(minutes: float) -> str:
    """A wall-time axis label: minutes since the run's first point, hours past two of them."""
    if minutes >= 120:
        return f"{minutes / 60:.3g}h"
    return f"{minutes:.3g}m"


def format_loss(value: float | None) -> str:
    if value is None:
        return "–"
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return f"{value:.2f}" if abs(value) < 1000 else f"{value:.3g}"


def metrics_line(status: RunStatus) -> str | None:
    """The trainer whose names the run uses, its accuracy per position (TTT step) and its evaluation
    acceptance length, as ``scan --json`` reports them, in one short line; None when there is none."""
    parts = []
    if status.trainer:
        parts.append(status.trainer)
    positions = status.metrics.per_position_accuracy
    if positions:
        parts.append("acc by position " + " ".join(format_accuracy(p.last) for p in positions))
    acceptance = status.metrics.acceptance_length
    if acceptance is not None and acceptance.last is not None:
        parts.append(f"acceptance length {acceptance.last:.3g}")
    return " · ".join(parts) or None
