"""Columnar series: rustboard preemption, purge, snapshot views, memory; the EMA against TensorBoard's own
shipped smoothing (builders/tensorboard_web.py); downsampling."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders.tensorboard_web import tensorboard_smoothing
from triage_tui.core.series import RunScalars, ScalarSeries, downsample, ema_smooth


def _extend(series, steps, start=0):
    steps = np.asarray(steps, np.int64)
    idx = np.arange(start, start + steps.size, dtype=np.float64)
    series.extend(steps, idx + 0.5, idx)


def _preempt_reference(steps):
    """Point by point: a point whose step is below the step logged just before it evicts stored
    points with step >= its step (rustboard reservoir.rs preemption); the same step twice keeps both
    (TensorBoard's EventAccumulator)."""
    kept = []
    previous = None
    for i, s in enumerate(steps):
        if previous is not None and s < previous:
            while kept and kept[-1][0] >= s:
                kept.pop()
        kept.append((s, float(i)))
        previous = s
    return kept


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-5, 40), max_size=60), st.lists(st.integers(1, 7), min_size=1, max_size=20))
def test_preemption_matches_point_by_point_reference_in_any_batching(steps, batch_sizes):
    series = ScalarSeries("t")
    i = b = 0
    while i < len(steps):
        size = batch_sizes[b % len(batch_sizes)]
        _extend(series, steps[i : i + size], start=i)
        i += size
        b += 1
    want = _preempt_reference(steps)
    assert series.steps.tolist() == [s for s, _ in want]
    assert series.values.tolist() == [v for _, v in want]
    assert np.all(np.diff(series.steps) >= 0)


def test_purge_from_and_run_level_purge():
    run = RunScalars()
    a, b = run.series_for("a", "scalars"), run.series_for("b", None)
    _extend(a, range(10))
    _extend(b, range(0, 20, 2))
    assert run.purge_from(5)
    assert a.steps.tolist() == [0, 1, 2, 3, 4] and b.steps.tolist() == [0, 2, 4]
    assert not run.purge_from(100)
    assert run.series_for("a", "other").plugin == "scalars"  # first occurrence wins


def test_views_are_read_only_snapshots_that_never_change():
    series = ScalarSeries("t")
    _extend(series, range(100))
    steps, walls, values = series.columns()
    before = (steps.copy(), walls.copy(), values.copy())
    with pytest.raises(ValueError):
        steps[0] = 7
    _extend(series, range(100, 1000))  # growth
    _extend(series, range(50, 60))  # preemption truncates
    series.purge_from(10)
    for view, copy in zip((steps, walls, values), before, strict=True):
        np.testing.assert_array_equal(view, copy)
    assert series.steps.tolist() == list(range(10))


def test_memory_per_point_under_32_bytes_cold_and_live():
    cold = ScalarSeries("cold")
    _extend(cold, range(100_000))
    assert cold.nbytes / len(cold) == 24
    live = ScalarSeries("live")
    rng = np.random.default_rng(0)
    step = 0
    while step < 100_000:
        size = int(rng.integers(1, 200))
        _extend(live, range(step, step + size), start=step)
        step += size
        assert live.nbytes / len(live) < 32 or len(live) < 100
    assert live.nbytes / len(live) < 32


def test_last_and_finite_min():
    series = ScalarSeries("t")
    assert series.last() is None and series.finite_min() is None
    series.extend(np.array([1, 2, 3]), np.array([10.0, 20.0, 30.0]), np.array([math.nan, -2.0, math.inf]))
    assert series.last() == (3, 30.0, math.inf)
    assert series.finite_min() == -2.0
    run = RunScalars()
    assert run.last_wall_time is None
    run.series_for("t", None).extend(np.array([5]), np.array([99.0]), np.array([1.0]))
    assert run.last_wall_time == 99.0 and run.tags() == ["t"]


def _assert_same_smoothing(cases):
    """ema_smooth against TensorBoard's own smoothing for every (values, weight), bit for bit but for rounding."""
    for (values, weight), drawn in zip(cases, tensorboard_smoothing(cases), strict=True):
        got = ema_smooth(np.array(values, dtype=np.float64), weight)
        want = np.array(drawn, dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, equal_nan=True)
        assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))


def test_ema_matches_tensorboard_on_a_long_noisy_curve():
    rng = np.random.default_rng(3)
    values = 10.37 + np.cumsum(rng.standard_normal(20_000)) * 0.01
    values[[5, 700, 19_000]] = [math.nan, math.inf, -math.inf]
    weights = [0.0, 0.3, 0.6, 0.9, 0.99, 0.999, 0.99999, 1.0, 1e-12, math.nan, -1.0, 2.0]
    _assert_same_smoothing([(values.tolist(), weight) for weight in weights])


@settings(max_examples=10, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.one_of(st.floats(-1e6, 1e6), st.just(math.nan), st.just(math.inf)), max_size=50),
            st.floats(0, 1),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_ema_matches_tensorboard_property(cases):
    _assert_same_smoothing(cases)


def test_ema_leaves_constant_series_untouched():
    values = np.full(10, 3.25)
    assert ema_smooth(values, 0.9).tolist() == values.tolist()
    assert ema_smooth(np.array([]), 0.6).size == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-1e9, 1e9), min_size=1, max_size=3000), st.integers(1, 300))
def test_downsample_keeps_extremes_first_and_last(values, max_points):
    values = np.array(values)
    steps = np.arange(values.size) * 3
    ds_steps, ds_values = downsample(steps, values, max_points)
    assert len(ds_steps) == len(ds_values) <= max_points
    assert np.all(np.diff(ds_steps) > 0)
    assert ds_steps[-1] == steps[-1]
    np.testing.assert_array_equal(ds_values, values[ds_steps // 3])
    if max_points >= 4:
        assert ds_steps[0] == 0
        assert values.max() in ds_values and values.min() in ds_values
