"""Columnar, exact scalar storage per (run, tag), plus TensorBoard's smoothing and a display downsampler.

Every point a run logged is kept (no reservoir sampling, unlike TensorBoard's default of 1 000
scalars per tag), but in the TUI, which holds a display series of at most ``DISPLAY_POINTS``
(``ScalarSeries.thin``: the newest exact, older ones as each bucket's extremes). A series holds
three growable numpy columns: int64 steps, float64 wall times and
float64 values: 24 bytes a point, exactly, for what one read fills; later appends grow the capacity by
1.25x (+16), so a series of more than a few hundred points stays under 32 bytes a point.
float64 values keep `double_val` / DT_DOUBLE / int64 scalars exact, which float32 would not.

The number of series is bounded in the TUI too (``display_series``): a run flooding its files with
ever-new tag names keeps the series it had, and says so, where `scan`, `check` and `scalars` keep
every one.

Views handed out are read-only snapshots: appends only write past every view's end, and a
truncation (restart preemption or purge) moves the series to fresh arrays, so a view taken by the
UI thread never changes under it while the reader thread polls.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator
from dataclasses import dataclass, fields

import numpy as np

_GROWTH = 1.25
_MIN_EXTRA = 16
# Restart steps kept per series: a run resumed more often than this is rare; a tag logged at one
# step forever (global_step=None) repeats one step, which is kept once.
_MAX_RESTARTS = 256
# Points a series keeps in the TUI (ScalarSeries.thin): 2.4 MB a series, hundreds of times the
# columns of a chart, and a quarter of them (the newest) exact for the flags' windows.
DISPLAY_POINTS = 100_000


@dataclass
class SeriesBound:
    """The bound of ``display_series``: at most ``limit`` series in each RunScalars; ``left_out``
    turns True when a new tag beyond them was not kept."""

    limit: int
    left_out: bool = False


# The bound of the poll under way on this thread (``display_series``); None: every series is kept.
# A context variable, not an argument: every reader creates its series through ``series_for``,
# however deep its own RunScalars lie (a console's per-file ones), and only the TUI's poll sets it.
_BOUND: contextvars.ContextVar[SeriesBound | None] = contextvars.ContextVar("series_bound", default=None)


@contextlib.contextmanager
def display_series(limit: int) -> Iterator[SeriesBound]:
    """Within it, each RunScalars keeps at most ``limit`` series: a tag first seen beyond them is
    not kept (``RunScalars.series_for`` gives None: its points are not stored) and the bound
    yielded says so. The TUI polls its runs within it; `scan`, `check` and `scalars` do not."""
    bound = SeriesBound(limit)
    token = _BOUND.set(bound)
    try:
        yield bound
    finally:
        _BOUND.reset(token)


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


class ScalarSeries:
    """One tag of one run: exact points in step order, steps non-decreasing (a step logged twice keeps both)."""

    __slots__ = ("tag", "plugin", "_steps", "_walls", "_values", "_n", "_restarts")

    def __init__(self, tag: str, plugin: str | None = None) -> None:
        self.tag = tag
        self.plugin = plugin  # plugin name from the tag's first occurrence
        self._steps = np.empty(0, np.int64)
        self._walls = np.empty(0, np.float64)
        self._values = np.empty(0, np.float64)
        self._n = 0
        self._restarts: list[int] = []

    @classmethod
    def of(cls, tag: str, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> ScalarSeries:
        """A series of points already in step order (non-decreasing), none of them a restart: a saved
        history, where a step logged twice (HF's ``epoch`` in a training and an evaluation entry) is
        two entries of one writer, not a resumed one."""
        series = cls(tag)
        series._append(np.asarray(steps, np.int64), np.asarray(walls, np.float64), np.asarray(values, np.float64))
        return series

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"ScalarSeries({self.tag!r}, plugin={self.plugin!r}, points={self._n})"

    @property
    def steps(self) -> np.ndarray:
        return _frozen(self._steps[: self._n])

    @property
    def wall_times(self) -> np.ndarray:
        return _frozen(self._walls[: self._n])

    @property
    def values(self) -> np.ndarray:
        return _frozen(self._values[: self._n])

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, wall_times, values) of one consistent length, even while another thread appends."""
        n = self._n
        steps, walls, values = self._steps, self._walls, self._values
        return _frozen(steps[:n]), _frozen(walls[:n]), _frozen(values[:n])

    def last(self) -> tuple[int, float, float] | None:
        n = self._n
        if n == 0:
            return None
        return int(self._steps[n - 1]), float(self._walls[n - 1]), float(self._values[n - 1])

    @property
    def restarts(self) -> tuple[int, ...]:
        """Steps at which this tag was logged again, went back, or went on in another event file, in the
        order read: where a trainer resumed from a checkpoint (its new process opens a new file and
        repeats or rewinds the step). The points a rewind evicted are gone; the step is what remains
        of them (core.watch.curve_shapes)."""
        return tuple(self._restarts)

    def mark_restart(self, step: int) -> None:
        """Note a step where the series was resumed: logged again, gone back, or continued by another
        event file (core.read.events)."""
        if len(self._restarts) < _MAX_RESTARTS and (not self._restarts or self._restarts[-1] != step):
            self._restarts.append(int(step))

    def finite_min(self) -> float | None:
        values = self._values[: self._n]
        finite = values[np.isfinite(values)]
        return float(finite.min()) if finite.size else None

    @property
    def nbytes(self) -> int:
        """Bytes held by the columns, slack included."""
        return self._steps.nbytes + self._walls.nbytes + self._values.nbytes

    # --- writer side (only the reader thread calls these) -------------------------------------

    def thin(self, max_points: int) -> bool:
        """Bound the series for display: past ``max_points`` points, the newest quarter of them stay
        exact and the older ones become buckets of equal count, each keeping its lowest and highest
        value (a NaN counts highest), down to half of ``max_points`` in all. Spikes, NaNs, the last
        point and the step range survive; every point is no longer here (``scalars`` reads the
        files). True when it thinned."""
        n = self._n
        if n <= max_points or max_points < 16:
            return False
        exact = max_points // 4
        buckets = max_points // 8
        head = n - exact
        size = -(-head // buckets)  # ceil: at most `buckets` rows
        rows = head // size
        cut = rows * size  # the head's points past whole rows stay exact with the tail
        values = self._values[:cut].reshape(rows, size)
        ranked = np.where(np.isnan(values), np.inf, values)
        lowest, highest = ranked.argmin(axis=1), ranked.argmax(axis=1)
        picked = np.sort(np.stack([lowest, highest], axis=1), axis=1) + (np.arange(rows) * size)[:, None]
        kept = np.concatenate([np.unique(picked.ravel()), np.arange(cut, n)])
        # Fresh arrays, never an in-place overwrite: views already handed out stay valid.
        self._steps, self._walls, self._values = self._steps[kept], self._walls[kept], self._values[kept]
        self._n = len(kept)
        return True

    def extend(self, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> None:
        """Append points in the order they were logged, with preemption on a step that goes back.

        A point whose step s is below the last step seen evicts every stored or earlier point of
        this tag with step >= s (tensorflow/tensorboard tensorboard/data/server/reservoir.rs,
        "Preemption"): a restart that goes back in steps replaces what the dead process wrote
        past it. A point at the same step as the last one evicts nothing: both are kept, as
        TensorBoard's EventAccumulator keeps them (HF Trainer logs ``train/epoch`` twice at its
        last step).
        """
        m = len(steps)
        if m == 0:
            return
        steps = np.asarray(steps, np.int64)
        n = self._n
        stored_last = int(self._steps[n - 1]) if n else None
        if (stored_last is None or steps[0] > stored_last) and bool((steps[1:] > steps[:-1]).all()):
            # Every step above the one before it (a run read in order): nothing repeats, nothing goes back.
            self._append(steps, walls, values)
            return
        # The step logged just before each point (after a regression purged everything from its
        # step on, the largest surviving step is that point's); a point below it goes back.
        before = np.empty(m, np.int64)
        before[0] = stored_last if stored_last is not None else steps[0]
        before[1:] = steps[:-1]
        regress = np.where(steps < before, steps, np.iinfo(np.int64).max)
        first_regress = int(regress.min())
        again = np.flatnonzero(steps <= before)
        if n == 0:
            again = again[again > 0]  # the first point ever read repeats nothing
        for step in steps[again].tolist():
            self.mark_restart(step)
        if m > 1:
            # Point i survives iff its step is below every later regression's step.
            later = np.minimum.accumulate(regress[::-1])[::-1]
            keep = np.empty(m, bool)
            keep[:-1] = steps[:-1] < later[1:]
            keep[-1] = True
            if not keep.all():
                steps, walls, values = steps[keep], walls[keep], values[keep]
        if stored_last is not None and stored_last >= first_regress:
            self._truncate(int(np.searchsorted(self._steps[:n], first_regress, side="left")), extra=len(steps))
        self._append(steps, walls, values)

    def purge_from(self, step: int) -> bool:
        """Drop points with step >= `step` (SessionLog.START restart purge); True if any went."""
        n = self._n
        if n == 0 or self._steps[n - 1] < step:
            return False
        self._truncate(int(np.searchsorted(self._steps[:n], step, side="left")), extra=0)
        return True

    def _truncate(self, keep: int, *, extra: int) -> None:
        # Fresh arrays, never an in-place overwrite: views already handed out stay valid.
        cap = keep + extra
        steps = np.empty(cap, np.int64)
        walls = np.empty(cap, np.float64)
        values = np.empty(cap, np.float64)
        steps[:keep] = self._steps[:keep]
        walls[:keep] = self._walls[:keep]
        values[:keep] = self._values[:keep]
        self._steps, self._walls, self._values, self._n = steps, walls, values, keep

    def _append(self, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> None:
        n, m = self._n, len(steps)
        need = n + m
        if need > len(self._steps):
            # First fill is exact (a finished run costs 24 bytes a point); live growth is 1.25x.
            cap = need if n == 0 else max(need, int(len(self._steps) * _GROWTH) + _MIN_EXTRA)
            for name in ("_steps", "_walls", "_values"):
                old = getattr(self, name)
                new = np.empty(cap, old.dtype)
                new[:n] = old[:n]
                setattr(self, name, new)
        self._steps[n:need] = steps
        self._walls[n:need] = walls
        self._values[n:need] = values
        self._n = need


class RunScalars:
    """All scalar series of one run, merged from all its event files."""

    def __init__(self) -> None:
        self.series: dict[str, ScalarSeries] = {}
        self.version = 0  # bumps on every change: the TUI redraws when it moved
        # Steps a restarted writer purged from (SessionLog.START, torch's purge_step): a resume.
        self.purges: list[int] = []
        # Another source's record of a metric the run shows under another name (a console's rounded
        # ``console/loss`` beside the exact ``loss``): alternative name -> the name shown.
        self.alternatives: dict[str, str] = {}

    def tags(self) -> list[str]:
        return sorted(self.series)

    def metric_tags(self) -> list[str]:
        """The tags that are the run's metrics: every tag but the alternatives (each is another
        record of one of them), so a metric is never taken twice."""
        return [tag for tag in sorted(self.series) if tag not in self.alternatives]

    def get(self, tag: str) -> ScalarSeries | None:
        return self.series.get(tag)

    def __len__(self) -> int:
        return len(self.series)

    @property
    def last_wall_time(self) -> float | None:
        walls = [last[1] for s in list(self.series.values()) if (last := s.last()) is not None]
        return max(walls) if walls else None

    @property
    def points(self) -> int:
        return sum(len(s) for s in list(self.series.values()))

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in list(self.series.values()))

    def series_for(self, tag: str, plugin: str | None) -> ScalarSeries | None:
        """The series of `tag`, created with `plugin` if it is new (first occurrence wins); None for
        a new tag beyond the display bound of the poll under way (``display_series``)."""
        found = self.series.get(tag)
        if found is None:
            bound = _BOUND.get()
            if bound is not None and len(self.series) >= bound.limit:
                bound.left_out = True
                return None
            found = self.series[tag] = ScalarSeries(tag, plugin)
        return found

    def thin(self, max_points: int) -> None:
        """Every series bounded for display (``ScalarSeries.thin``); the version bumps if one thinned."""
        thinned = [series.thin(max_points) for series in list(self.series.values())]  # every one, not the first
        if any(thinned):
            self.version += 1

    def purge_from(self, step: int) -> bool:
        """SessionLog.START purge: every tag loses its points with step >= `step`."""
        purged = False
        for series in list(self.series.values()):
            purged |= series.purge_from(step)
        if purged and len(self.purges) < _MAX_RESTARTS:
            self.purges.append(int(step))
        return purged

    def clear(self) -> None:
        """Forget everything (a file was replaced or truncated: the run is re-read from scratch)."""
        self.series = {}
        self.purges = []
        self.alternatives = {}
        self.version += 1


def overlay(base: ScalarSeries, top: ScalarSeries, *, resume: bool = False, tag: str | None = None) -> ScalarSeries:
    """One series of two that hold the same metric: ``top``'s points over its whole step range
    (first to last step), ``base``'s before and after it; a new series, neither input changed.

    What two sources of one run share is merged this way, so no step is counted twice: a run's
    console files (a later SLURM job's log over an earlier one's), or a checkpoint's saved history
    under a live series (the history fills only what the live series does not cover).
    ``resume``: ``top`` is a later writer of the same series (a resumed job): when ``base`` had
    points in ``top``'s range that are not ``top``'s own (same steps and values: a copy of the same
    log), ``top``'s first step is marked a restart (``restarts``, as a resumed event file's is).
    ``tag``: the merged series' name (default ``top``'s).
    """
    if len(top) == 0 or len(base) == 0:
        source = top if len(top) else base
        merged = ScalarSeries(tag or top.tag, base.plugin or top.plugin)
        merged._append(*source.columns())
        merged._restarts = list(source.restarts)
        return merged
    b_steps, b_walls, b_values = base.columns()
    t_steps, t_walls, t_values = top.columns()
    low, high = int(t_steps[0]), int(t_steps[-1])
    before = b_steps < low
    after = b_steps > high
    inside = ~(before | after)
    merged = ScalarSeries(tag or top.tag, base.plugin or top.plugin)
    merged._append(b_steps[before], b_walls[before], b_values[before])
    merged._append(t_steps, t_walls, t_values)
    merged._append(b_steps[after], b_walls[after], b_values[after])
    restarts = [step for step in base.restarts if step < low or step > high]
    if (
        resume
        and inside.any()
        and not (
            np.array_equal(b_steps[inside], t_steps) and np.array_equal(b_values[inside], t_values, equal_nan=True)
        )
    ):
        restarts.append(low)
    restarts.extend(top.restarts)
    merged._restarts = restarts[:_MAX_RESTARTS]
    return merged


def overlay_runs(layers: list[RunScalars], *, resume: bool = False) -> dict[str, ScalarSeries]:
    """The series of several sources of one run's metrics, each later layer ``overlay``-ed over the
    ones before it (a tag only one layer has is that layer's series itself)."""
    merged: dict[str, ScalarSeries] = {}
    for layer in layers:
        for tag, series in list(layer.series.items()):
            below = merged.get(tag)
            merged[tag] = series if below is None else overlay(below, series, resume=resume)
    return merged


def ema_smooth(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's debiased exponential moving average, point for point.

    Mirrors classicSmoothing in tensorflow/tensorboard
    tensorboard/webapp/widgets/line_chart_v2/data_transformer.ts: the weight is clamped to
    [0, 1] (non-finite -> 0); a constant series (all `==` the first) comes back untouched;
    non-finite points pass through and do not advance the average; each finite point is
    last / (1 - weight**count), with count the number of finite points so far.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return values.copy()
    if not math.isfinite(weight):
        weight = 0.0
    weight = min(max(float(weight), 0.0), 1.0)
    if bool(np.all(values == values[0])):  # NaN != NaN, as in JS, so a NaN makes it non-constant
        return values.copy()
    out = values.copy()
    finite = np.isfinite(values)
    x = values[finite]
    if weight == 1.0:
        out[finite] = 0.0  # last stays 0 and the debias weight is 1, as in the JS
        return out
    if weight == 0.0:
        out[finite] = x  # last = nextVal; debias 1 - 0**count = 1
        return out
    out[finite] = _iir(x, weight) / _debias(weight, x.size)
    return out


def _debias(weight: float, n: int) -> np.ndarray:
    """1 - weight**count for count = 1..n, as np.power gives it, but only computed while it is not 1.

    Past weight**count < 2**-60, 1 - weight**count rounds to exactly 1.0 in float64, so the tail is
    filled with 1.0: the same bits, without a pow per point (a sweep's first load smooths every
    run's series, 100k points each).
    """
    head = min(n, int(60 * math.log(2) / -math.log(weight)) + 2)
    out = np.ones(n, np.float64)
    out[:head] = 1.0 - np.power(weight, np.arange(1, head + 1, dtype=np.float64))
    return out


def _iir(x: np.ndarray, s: float) -> np.ndarray:
    """last_t = s * last_{t-1} + (1 - s) * x_t from last = 0, vectorised in blocks.

    Within a block, last_j = s**(j+1) * carry + (1 - s) * s**j * cumsum(x_i * s**-i); the block
    length keeps s**-i far from overflow.
    """
    n = x.size
    # Never longer than the series: a short run's powers are not computed a thousand points ahead.
    block = int(max(1, min(4096, 600.0 / -math.log(s), n)))
    powers = s ** np.arange(block, dtype=np.float64)
    inverse = 1.0 / powers
    out = np.empty(n, np.float64)
    carry = 0.0
    for start in range(0, n, block):
        chunk = x[start : start + block]
        m = chunk.size
        acc = np.cumsum(chunk * inverse[:m]) * powers[:m] * (1.0 - s)
        acc += carry * powers[:m] * s
        out[start : start + m] = acc
        carry = float(acc[-1])
    return out


def downsample(steps: np.ndarray, values: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most `max_points` points for display: per bucket of consecutive points, its min and max.

    The first and last points are always kept, so the live end of a curve never disappears; a
    spike inside a bucket survives (a mean would hide it). Only for drawing: statistics use the
    full series.
    """
    steps = np.asarray(steps)
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if n <= max_points or n == 0:
        return steps, values
    if max_points < 4:
        keep = np.array([0, n - 1]) if max_points > 1 else np.array([n - 1])
        return steps[keep], values[keep]
    buckets = (max_points - 2) // 2
    size = -(-n // buckets)
    padded = np.full(buckets * size, np.nan)
    padded[:n] = values
    grid = padded.reshape(buckets, size)
    nan = np.isnan(grid)
    lows = np.where(nan, np.inf, grid).argmin(axis=1)
    highs = np.where(nan, -np.inf, grid).argmax(axis=1)
    base = np.arange(buckets) * size
    picked = np.concatenate(([0, n - 1], base + lows, base + highs))
    keep = np.unique(picked[picked < n])
    return steps[keep], values[keep]


@dataclass
class ReadStats:
    """What one poll of a scalar source (core.read.source_kinds.kind.ScalarSource) did, or, as a reader's ``totals``,
    every poll so far. The counts are the event-file reader's; other sources fill those that apply."""

    files: int = 0  # files looked at
    bytes_read: int = 0
    records: int = 0  # whole records consumed
    scalars: int = 0  # scalar points decoded (before restart rules)
    skipped_bytes: int = 0  # damaged bytes stepped over to resync
    corrupt_records: int = 0  # records dropped: bad CRC, undecodable, or a resync
    resets: int = 0  # times the run was re-read from scratch (a file shrank or was replaced)
    pending_bytes: int = 0  # bytes at file ends not yet a whole record (half-written, zero-filled)
    dropped_points: int = 0  # points with a non-finite wall_time (rustboard rejects those too)
    slow_records: int = 0  # records parsed one by one by Event.FromString (no template fitted)
    unreadable_files: int = 0  # files that exist but could not be read (permissions, not a file)

    def add(self, other: ReadStats) -> None:
        """Another poll's stats after these (RunEvents.totals): counts add up, the state is the latest."""
        for f in fields(self):
            if f.name not in ("files", "pending_bytes", "unreadable_files"):
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        self.files = other.files
        self.pending_bytes = other.pending_bytes
        self.unreadable_files = other.unreadable_files
