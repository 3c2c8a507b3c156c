"""Whole numpy columns as text, vectorised: ``repr`` of every float64 and ``str`` of every int64.

``repr(float)`` costs ~0.3-1 µs a value (David Gay's dtoa, one value at a time); a 1 000 000-point
export has two million of them. Here the same strings are computed for a whole column with numpy:
the digits by Schubfach (Raffaello Giulietti, "The Schubfach way to render doubles", 2020; the
64-bit form follows Alexander Bolz's public-domain C++ port, abolz/Drachennest
src/schubfach_64.cc), which yields the shortest decimal that reads back to the same double and,
among those, the one closest to it, as dtoa's mode 0 does; then the layout of CPython's
``float_repr_style == "short"`` (Python/pystrtod.c, format_float_short with 'r'): positional
notation for decimal exponents -4 <= e < 16, else ``d.ddde±XX``; ``nan``, ``inf``, ``-inf``.
tests/test_decimal_text.py checks the strings against ``repr`` value for value.

A column's text comes back as a ``Texts``: a (rows x width) uint8 matrix of ASCII, each row
left-aligned, and each row's length; ``join_rows`` lays several of them (and constant bytes)
side by side and drops the padding, which is how the ``scalars`` command builds its CSV and JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Texts", "float_reprs", "int_texts", "join_rows"]

_U64 = np.uint64
_M32 = _U64(0xFFFFFFFF)
_FLOAT_WIDTH = 24  # "-2.2250738585072014e-308"


@dataclass(frozen=True)
class Texts:
    """One string per row: row i's ASCII text is the first ``lengths[i]`` bytes of ``chars[i]``
    (the last ones when ``right_aligned``); the other bytes are 0."""

    chars: np.ndarray  # (n, width) uint8
    lengths: np.ndarray  # (n,) int64
    right_aligned: bool = False

    def __len__(self) -> int:
        return int(self.lengths.size)

    def used(self) -> np.ndarray:
        """(n, width) bool: which bytes are text."""
        columns = np.arange(self.chars.shape[1])[None, :]
        if self.right_aligned:
            return columns >= (self.chars.shape[1] - self.lengths)[:, None]
        return columns < self.lengths[:, None]

    def strings(self) -> list[str]:
        """As Python strings (tests and small outputs)."""
        return [bytes(row[used]).decode("ascii") for row, used in zip(self.chars, self.used(), strict=True)]


# --- Schubfach's table: g(k) = ceil(10^k / 2^r) with 2^127 <= g < 2^128, for k in [-292, 324] -------

_K_MIN, _K_MAX = -292, 324


def _pow10_table() -> tuple[np.ndarray, ...]:
    """g(k) for every k, as four arrays of its 32-bit limbs, lowest first (what the products take)."""
    limbs: list[list[int]] = [[], [], [], []]
    for k in range(_K_MIN, _K_MAX + 1):
        if k >= 0:
            p = 10**k
            r = p.bit_length() - 1 - 127  # floor(log2 10^k) - 127
            g = -((-p) >> r) if r >= 0 else p << -r
        else:
            d = 10**-k
            r = -(d - 1).bit_length() - 127  # floor(log2 10^k) - 127, 10^k = 1/d
            g = -((-(1 << -r)) // d)  # ceil(2^-r / d)
        assert 1 << 127 <= g < 1 << 128, k
        for i in range(4):
            limbs[i].append((g >> (32 * i)) & 0xFFFFFFFF)
    return tuple(np.array(limb, np.uint64) for limb in limbs)


_G_LIMBS = _pow10_table()
_POW10 = np.array([10**i for i in range(20)], np.uint64)


def _round_to_odd(g: tuple[np.ndarray, ...], cp: np.ndarray) -> np.ndarray:
    """floor(g * cp / 2^128), its lowest bit set when the division was inexact (Schubfach's RoundToOdd).

    g comes as its four 32-bit limbs, cp (uint64) is split in two here: 32 x 32-bit products do
    not overflow uint64. As in Bolz's RoundToOdd, the low 64 bits of g_lo * cp are left out."""
    g0, g1, g2, g3 = g
    c0, c1 = cp & _M32, cp >> _U64(32)
    # x_hi: bits 64..127 of (g1:g0) * cp
    ll, lh, hl = g0 * c0, g0 * c1, g1 * c0
    mid = (ll >> _U64(32)) + (lh & _M32) + (hl & _M32)  # < 3 * 2^32: no overflow
    x_hi = g1 * c1 + (lh >> _U64(32)) + (hl >> _U64(32)) + (mid >> _U64(32))
    # y = (g3:g2) * cp, both halves
    ll, lh, hl = g2 * c0, g2 * c1, g3 * c0
    mid = (ll >> _U64(32)) + (lh & _M32) + (hl & _M32)
    y_lo = (mid << _U64(32)) | (ll & _M32)
    y_hi = g3 * c1 + (lh >> _U64(32)) + (hl >> _U64(32)) + (mid >> _U64(32))
    z_lo = y_lo + x_hi
    z_hi = y_hi + (z_lo < y_lo)
    return z_hi | (z_lo > _U64(1))


def _shortest(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(digits, exponent) with value = digits * 10^exponent, for finite non-zero |x| given as uint64 bits."""
    fraction = bits & _U64((1 << 52) - 1)
    biased = (bits >> _U64(52)).astype(np.int64)
    normal = biased != 0
    c = np.where(normal, fraction | _U64(1 << 52), fraction)
    q = np.where(normal, biased - 1075, -1074)
    even = (c & _U64(1)) == 0
    closer = (fraction == 0) & (biased > 1)  # a power of two: the gap below is half the gap above
    cb = c << _U64(2)
    cbl = cb - _U64(2) + closer.astype(np.uint64)
    cbr = cb + _U64(2)
    k = (q * 1262611 - np.where(closer, 524031, 0)) >> 22  # floor(log10(2^q)) or floor(log10(3/4 2^q))
    h = (q + ((-k * 1741647) >> 19) + 1).astype(np.uint64)  # q + floor(log2(10^-k)) + 1, in 1..4
    index = -k - _K_MIN
    g = tuple(limb[index] for limb in _G_LIMBS)
    vbl = _round_to_odd(g, cbl << h)
    vb = _round_to_odd(g, cb << h)
    vbr = _round_to_odd(g, cbr << h)
    odd = (~even).astype(np.uint64)
    lower = vbl + odd
    upper = vbr - odd
    s = vb >> _U64(2)
    # One digit shorter: is exactly one of the two neighbours 10*sp, 10*(sp+1) inside the interval?
    sp = s // _U64(10)
    up_in = lower <= sp * _U64(40)
    wp_in = sp * _U64(40) + _U64(40) <= upper
    take_short = (s >= _U64(10)) & (up_in != wp_in)
    # Same length: s or s + 1, whichever is inside; both inside: the closer, ties to even.
    u_in = lower <= s << _U64(2)
    w_in = (s << _U64(2)) + _U64(4) <= upper
    mid = (s << _U64(2)) + _U64(2)
    round_up = (vb > mid) | ((vb == mid) & ((s & _U64(1)) != 0))
    same = s + np.where(u_in != w_in, w_in, round_up).astype(np.uint64)
    digits = np.where(take_short, sp + wp_in.astype(np.uint64), same)
    exponent = k + take_short
    return digits, exponent


def _strip_zeros(digits: np.ndarray, exponent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`digits` without trailing decimal zeros, `exponent` raised to match (at most 16 of them)."""
    for step in (16, 8, 4, 2, 1):
        power = _U64(10**step)
        high = digits // power
        zeros = high * power == digits
        digits = np.where(zeros, high, digits)
        exponent = exponent + zeros * step
    return digits, exponent


def _digit_count(digits: np.ndarray) -> np.ndarray:
    return np.searchsorted(_POW10, digits, side="right").astype(np.int64)  # 1..19 for digits >= 1


# "00".."99" as little-endian uint16 pairs of ASCII digits.
_PAIRS = np.array([(48 + i // 10) | ((48 + i % 10) << 8) for i in range(100)], np.uint16)


def _right_aligned(digits: np.ndarray, width: int) -> np.ndarray:
    """(n, width) ASCII decimal digits of uint64 `digits` < 10^width, right-aligned, zero-filled; width even.

    Made two digits at a time, in 32-bit arithmetic (eight-digit blocks) where it can be."""
    out = np.empty((digits.size, width // 2), np.uint16)
    blocks: list[np.ndarray] = []
    rest = digits
    for _ in range(-(-width // 8)):
        if len(blocks) * 8 + 8 >= width:
            blocks.append(rest.astype(np.uint32))  # what is left fits: no more division
            break
        high = rest // _U64(10**8)
        blocks.append((rest - high * _U64(10**8)).astype(np.uint32))
        rest = high
    col = width // 2
    hundred = np.uint32(100)
    for block in blocks:
        for _ in range(min(4, col)):
            col -= 1
            quotient = block // hundred
            out[:, col] = _PAIRS[block - quotient * hundred]
            block = quotient
    return out.view(np.uint8)


def _even_width(digits: np.ndarray) -> int:
    """Columns enough for the largest of `digits` (an even number, at least 2)."""
    most = int(digits.max()) if digits.size else 0
    return max(2, len(str(most)) + (len(str(most)) & 1))


def _repr_template(sign: int, count: int, point: int) -> bytes:
    """repr's layout for a value of `count` significant digits, as bytes with 0x01..0x11 for digit 1..count.

    Digits d1..dn mean 0.d1..dn * 10^point; CPython's format_float_short ('r' mode) writes
    exponent notation when point <= -4 or point > 16, at least two exponent digits.
    """
    digits = bytes(range(1, count + 1))
    if point <= -4 or point > 16:
        mantissa = digits[:1] + (b"." + digits[1:] if count > 1 else b"")
        body = mantissa + b"e" + f"{point - 1:+03d}".encode()
    elif point <= 0:
        body = b"0." + b"0" * -point + digits
    elif point < count:
        body = digits[:point] + b"." + digits[point:]
    else:
        body = digits + b"0" * (point - count) + b".0"
    return (b"-" if sign else b"") + body


def _digit_runs(template: bytes) -> list[tuple[int, int, int]]:
    """(output column, first digit index, run length) of each stretch of consecutive digits."""
    runs: list[list[int]] = []
    for at, byte in enumerate(template):
        if byte >= 32:
            continue
        if runs and runs[-1][0] + runs[-1][2] == at and runs[-1][1] + runs[-1][2] == byte - 1:
            runs[-1][2] += 1
        else:
            runs.append([at, byte - 1, 1])
    return [(a, f, r) for a, f, r in runs]


_REPR_NON_FINITE = (b"nan", b"inf", b"-inf")


def float_reprs(values: np.ndarray, non_finite: tuple[bytes, bytes, bytes] = _REPR_NON_FINITE) -> Texts:
    """``repr(float(v))`` of every value of a float64 array, vectorised.

    ``non_finite``: the texts of NaN, +inf and -inf (JSON output wants quoted names instead).
    """
    values = np.ascontiguousarray(values, np.float64)
    n = values.size
    bits = values.view(np.uint64)
    negative = (bits >> _U64(63)) != 0
    magnitude = bits & _U64((1 << 63) - 1)
    finite = magnitude < _U64(0x7FF0 << 48)
    regular = finite & (magnitude != 0)
    chars = np.zeros((n, _FLOAT_WIDTH), np.uint8)
    lengths = np.zeros(n, np.int64)

    rows = np.flatnonzero(regular)
    if rows.size:
        digits, exponent = _shortest(magnitude[rows])
        digits, exponent = _strip_zeros(digits, exponent)
        count = _digit_count(digits)
        point = count + exponent
        width = _even_width(digits)
        ascii_digits = _right_aligned(digits, width)
        # Values of one column share a few layouts (sign, digit count, decimal point): each
        # layout is one fixed byte template, its digits copied in by one column gather.
        # < 2 * 18 * 1024: uint16, which numpy sorts by radix.
        shape = ((negative[rows].astype(np.int64) * 18 + count) * 1024 + (point + 400)).astype(np.uint16)
        order = np.argsort(shape, kind="stable")
        sorted_shape = shape[order]
        edges = np.flatnonzero(np.diff(sorted_shape)) + 1
        groups = []
        for lo, hi in zip([0, *edges.tolist()], [*edges.tolist(), order.size], strict=True):
            key = int(sorted_shape[lo])
            sign, count_k, point_k = key // 1024 // 18, key // 1024 % 18, key % 1024 - 400
            groups.append((lo, hi, count_k, _repr_template(sign, count_k, point_k)))
        widest = max(len(template) for *_, template in groups)
        by_shape = np.zeros((rows.size, widest), np.uint8)
        by_length = np.empty(rows.size, np.int64)
        for lo, hi, count_k, template in groups:
            block = by_shape[lo:hi]
            block[:, : len(template)] = np.frombuffer(template, np.uint8)
            source = ascii_digits[order[lo:hi]]
            for at, first, run in _digit_runs(template):
                block[:, at : at + run] = source[:, width - count_k + first : width - count_k + first + run]
            by_length[lo:hi] = len(template)
        chars[rows[order], :widest] = by_shape
        lengths[rows[order]] = by_length

    for mask, text in (
        (finite & ~regular & ~negative, b"0.0"),
        (finite & ~regular & negative, b"-0.0"),
        (~finite & (magnitude == _U64(0x7FF0 << 48)) & ~negative, non_finite[1]),
        (~finite & (magnitude == _U64(0x7FF0 << 48)) & negative, non_finite[2]),
        (~finite & (magnitude != _U64(0x7FF0 << 48)), non_finite[0]),
    ):
        if mask.any():
            chars[mask, : len(text)] = np.frombuffer(text, np.uint8)
            lengths[mask] = len(text)
    return Texts(chars, lengths)


def int_texts(values: np.ndarray) -> Texts:
    """``str(int(v))`` of every value of an int64 array, vectorised (right-aligned)."""
    values = np.ascontiguousarray(values, np.int64)
    negative = values < 0
    # |int64 min| does not fit int64; as a uint64 two's complement negation it does.
    magnitude = np.where(negative, ~values.view(np.uint64) + _U64(1), values.view(np.uint64))
    lengths = np.maximum(_digit_count(magnitude), 1) + negative
    width = _even_width(magnitude) + 2 * bool(negative.any())  # room for the sign
    chars = _right_aligned(magnitude, width)
    signed = np.flatnonzero(negative)
    chars[signed, width - lengths[signed]] = ord("-")
    texts = Texts(chars, lengths, right_aligned=True)
    chars *= texts.used()  # 0 bytes, not '0's, left of the digits
    return texts


def join_rows(pieces: list[Texts | bytes]) -> bytes:
    """Row i of every piece side by side (a ``bytes`` piece is the same on every row), rows concatenated.

    The rows are laid side by side in one byte matrix whose padding, 0 bytes, ``bytes.translate``
    then drops: ~25 % less CPU than gathering the bytes kept through a mask. A constant that holds a
    0 (a tag may) stands in as one 0x01 byte, replaced after; no text holds either byte."""
    n = next(len(p) for p in pieces if isinstance(p, Texts))
    columns: list[np.ndarray] = []
    stand_in: bytes | None = None
    for piece in pieces:
        if isinstance(piece, bytes):
            if b"\0" in piece or b"\1" in piece:
                if stand_in is not None:
                    raise ValueError("join_rows: at most one constant piece may hold a 0 or 0x01 byte")
                stand_in, piece = piece, b"\1"
            columns.append(np.frombuffer(piece, np.uint8))
        elif piece.right_aligned or not n:
            columns.append(piece.chars)
        else:  # padded to the widest possible value: keep the columns used
            columns.append(piece.chars[:, : int(piece.lengths.max())])
    widths = [column.shape[-1] for column in columns]
    matrix = np.empty((n, sum(widths)), np.uint8)
    at = 0
    for column, width in zip(columns, widths, strict=True):
        matrix[:, at : at + width] = column
        at += width
    text = matrix.tobytes().translate(None, b"\0")
    return text if stand_in is None else text.replace(b"\1", stand_in)
