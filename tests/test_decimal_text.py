"""decimal_text: the vectorised repr(float) / str(int) give exactly Python's strings, value for value."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage_tui.core.decimal_text import float_reprs, int_texts, join_rows

EDGES = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.1,
    0.3,
    1 / 3,
    2 / 3,
    100.0,
    12345.678,
    1e-4,
    1e-5,
    9.999999999999999e-5,
    1e15,
    1e16,
    9999999999999998.0,
    1e17,
    123456789012345678.0,
    1e22,
    1e23,
    2e23,
    1.5e-7,
    5e-324,
    1e-323,
    2.2250738585072009e-308,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    9007199254740992.0,
    9007199254740993.0,
    4.35,
    0.000123,
    1e100,
    1e-100,
    1.25e-310,
    math.inf,
    -math.inf,
    math.nan,
    -math.nan,
    10.369999885559082,
    1.7e9 + 0.0137,
]


def _check(values: np.ndarray) -> None:
    got = float_reprs(values).strings()
    want = [repr(v) for v in values.tolist()]
    assert got == want


def test_edges_and_every_power_of_two_and_ten():
    _check(np.array(EDGES, np.float64))
    _check(np.ldexp(1.0, np.arange(-1074, 1024)))
    _check(-np.ldexp(1.5, np.arange(-1074, 1023)))
    _check(10.0 ** np.arange(-323, 309, dtype=np.float64))
    # Both neighbours of every power of two: where the gap below is half the gap above.
    powers = np.ldexp(1.0, np.arange(-1073, 1023))
    _check(np.nextafter(powers, 0.0))
    _check(np.nextafter(powers, np.inf))


def test_random_bit_patterns_float32_values_and_wall_times():
    rng = np.random.default_rng(252)
    _check(rng.integers(0, 2**64, 100_000, dtype=np.uint64).view(np.float64))
    # What simple_value holds: float32 widened to float64 (17 significant digits as a double).
    _check(rng.normal(0, 3, 100_000).astype(np.float32).astype(np.float64))
    with np.errstate(invalid="ignore"):  # float32 NaNs among the bit patterns
        _check(rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32).astype(np.float64))
    _check(1.7e9 + np.cumsum(rng.exponential(0.37, 100_000)))
    _check(np.concatenate([np.round(rng.normal(0, 1e6, 20_000), decimals) for decimals in range(8)]))
    _check(rng.integers(-(2**53), 2**53, 100_000).astype(np.float64))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=50))
def test_any_floats(values):
    _check(np.array(values, np.float64))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), min_size=1, max_size=50))
def test_any_int64(values):
    array = np.array(values, np.int64)
    assert int_texts(array).strings() == [str(v) for v in values]


def test_int64_extremes_and_widths():
    values = np.array([0, 1, -1, 9, 10, -10, 99, 100, 2**63 - 1, -(2**63), 10**18, -(10**18) + 1], np.int64)
    assert int_texts(values).strings() == [str(v) for v in values.tolist()]
    small = np.arange(0, 1000, dtype=np.int64)
    assert int_texts(small).strings() == [str(v) for v in range(1000)]


def test_non_finite_texts_can_be_chosen():
    texts = float_reprs(
        np.array([math.nan, math.inf, -math.inf, 1.5]), non_finite=(b'"NaN"', b'"Infinity"', b'"-Infinity"')
    )
    assert texts.strings() == ['"NaN"', '"Infinity"', '"-Infinity"', "1.5"]


def test_join_rows_lays_pieces_side_by_side():
    steps = np.array([1, 20, -300], np.int64)
    values = np.array([0.5, math.nan, 1e-7])
    joined = join_rows([b"t,", int_texts(steps), b",", float_reprs(values), b"\n"])
    assert joined == b"t,1,0.5\nt,20,nan\nt,-300,1e-07\n"
    # A constant may hold the bytes the padding and its stand-in use.
    joined = join_rows([b"\0\1,", int_texts(steps), b",", float_reprs(values), b"\n"])
    assert joined == b"\0\1,1,0.5\n\0\1,20,nan\n\0\1,-300,1e-07\n"


@pytest.mark.parametrize("bits", [0x0000000000000001, 0x000FFFFFFFFFFFFF, 0x0010000000000000, 0x7FEFFFFFFFFFFFFF])
def test_subnormal_and_extreme_bit_patterns(bits):
    value = struct.unpack("<d", bits.to_bytes(8, "little"))[0]
    _check(np.array([value, -value]))
