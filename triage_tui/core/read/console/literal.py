"""A bounded parser of the Python literals trainers print (``print(dict)``, ``str(dict)``): never eval.

``ast.literal_eval`` cannot read what trainers print: ``str({'loss': float('nan')})`` is
``{'loss': nan}``, a name it refuses, and numpy 2 prints ``np.float64(1.5)``. This reads that subset
of Python's literal syntax and nothing else, with a depth bound (``tuning.MAX_DEPTH``) so nesting
cannot exhaust the stack:

- ``{key: value, ...}`` with string keys; ``[...]`` and ``(...)`` as lists;
- numbers as Python writes them (``1``, ``-2.5e-05``, ``1_000`` is not one), and the names ``nan``,
  ``inf`` (with a sign), ``NaN``, ``Infinity`` that ``repr``/``json`` give non-finite floats;
- strings in single or double quotes with backslash escapes (kept as written, escapes undone only
  for quotes and backslashes: the values read are numbers, a string is only ever a key or skipped);
- ``True``, ``False``, ``None``;
- one-argument wrappers numpy and torch print around a number: ``np.float64(x)``,
  ``np.float32(x)``, ``np.int64(x)``, ``tensor(x)`` (and ``numpy.``/``torch.`` spellings).

A number whose literal overflows a float (``1e999``) or whose integer has more than
``MAX_INT_DIGITS`` digits is impossible in a trainer's log: ``LiteralError``, which the line's
parser counts as damage.
"""

from __future__ import annotations

import math
import re
from typing import Any

from triage_tui.core.read.console import tuning

MAX_INT_DIGITS = 40
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_SPACE = re.compile(r"\s*")
_NON_FINITE = {"nan": math.nan, "NaN": math.nan, "inf": math.inf, "Infinity": math.inf}
_CONSTANTS: dict[str, Any] = {"True": True, "False": False, "None": None}
_WRAPPERS = frozenset(
    f"{module}{kind}"
    for module in ("np.", "numpy.")
    for kind in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool_")
) | frozenset({"tensor", "torch.tensor"})


class LiteralError(ValueError):
    """The text is not a literal this parser reads, or holds an impossible number."""


def parse_literal(text: str, pos: int = 0) -> tuple[Any, int]:
    """(the value of the literal starting at ``pos``, the position after it); LiteralError otherwise."""
    return _Parser(text).value(pos, 0)


def number(text: str) -> float | None:
    """A number written as text (HF Trainer's ``f"{v:.4g}"``, speculators' ``{v:.3f}``), or None.

    ``nan``/``inf`` spellings give non-finite floats; an overflowing literal is impossible:
    LiteralError."""
    text = text.strip()
    sign = -1.0 if text[:1] == "-" else 1.0
    bare = text[1:] if text[:1] in "+-" else text
    if bare in _NON_FINITE:
        return sign * _NON_FINITE[bare]
    if _NUMBER.fullmatch(text) is None:
        return None
    return _checked_number(text)


def _checked_number(text: str) -> float:
    if "." not in text and "e" not in text and "E" not in text:
        digits = len(text.lstrip("+-"))
        if digits > MAX_INT_DIGITS:
            raise LiteralError(f"an integer of {digits} digits")
        return float(int(text))
    value = float(text)
    if math.isinf(value):
        raise LiteralError(f"a number beyond a float's range: {text[:40]}")
    return value


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text

    def skip(self, pos: int) -> int:
        match = _SPACE.match(self.text, pos)
        return match.end() if match else pos

    def value(self, pos: int, depth: int) -> tuple[Any, int]:
        if depth > tuning.MAX_DEPTH:
            raise LiteralError(f"nested deeper than {tuning.MAX_DEPTH}")
        text = self.text
        pos = self.skip(pos)
        if pos >= len(text):
            raise LiteralError("the line ends inside a value")
        char = text[pos]
        if char == "{":
            return self.mapping(pos + 1, depth + 1)
        if char in "[(":
            return self.sequence(pos + 1, "]" if char == "[" else ")", depth + 1)
        if char in "'\"":
            return self.string(pos)
        number_match = _NUMBER.match(text, pos)
        if number_match is not None:
            return _checked_number(number_match.group()), number_match.end()
        sign = 1.0
        if char in "+-":
            sign = -1.0 if char == "-" else 1.0
            pos += 1
        name_match = _NAME.match(text, pos)
        if name_match is None:
            raise LiteralError(f"unexpected {text[pos : pos + 1]!r} at column {pos}")
        name, end = name_match.group(), name_match.end()
        if name in _NON_FINITE:
            return sign * _NON_FINITE[name], end
        if sign == 1.0 and char not in "+-" and name in _CONSTANTS:
            return _CONSTANTS[name], end
        if name in _WRAPPERS and end < len(text) and text[end] == "(":
            inner, end = self.value(end + 1, depth + 1)
            end = self.skip(end)
            # tensor(1.5, device='cuda:0') and np.float64(1.5): the number, then the closing bracket
            while end < len(text) and text[end] == ",":
                _key, end = self.keyword(self.skip(end + 1), depth + 1)
                end = self.skip(end)
            if end >= len(text) or text[end] != ")":
                raise LiteralError(f"{name}(...) not closed")
            if isinstance(inner, bool) or not isinstance(inner, (int, float)):
                raise LiteralError(f"{name}(...) of a non-number")
            return sign * inner, end + 1
        raise LiteralError(f"a name that is no literal: {name[:40]}")

    def keyword(self, pos: int, depth: int) -> tuple[str, int]:
        """``name=value`` inside a wrapper's call (``device='cuda:0'``, ``dtype=torch.float16``)."""
        match = _NAME.match(self.text, pos)
        if match is None or match.end() >= len(self.text) or self.text[match.end()] != "=":
            raise LiteralError("a wrapper's argument that is no keyword")
        end = match.end() + 1
        value_match = _NAME.match(self.text, end)
        if value_match is not None and value_match.group() not in _CONSTANTS and value_match.group() not in _NON_FINITE:
            return match.group(), value_match.end()  # dtype=torch.float16: a name, skipped
        _value, end = self.value(end, depth)
        return match.group(), end

    def string(self, pos: int) -> tuple[str, int]:
        text = self.text
        quote = text[pos]
        out: list[str] = []
        i = pos + 1
        while i < len(text):
            char = text[i]
            if char == "\\" and i + 1 < len(text):
                nxt = text[i + 1]
                out.append(nxt if nxt in "\\'\"" else char + nxt)
                i += 2
                continue
            if char == quote:
                return "".join(out), i + 1
            out.append(char)
            i += 1
        raise LiteralError("a string not closed")

    def sequence(self, pos: int, close: str, depth: int) -> tuple[list[Any], int]:
        items: list[Any] = []
        text = self.text
        pos = self.skip(pos)
        while True:
            if pos < len(text) and text[pos] == close:
                return items, pos + 1
            item, pos = self.value(pos, depth)
            items.append(item)
            if len(items) > tuning.MAX_KEYS:
                raise LiteralError(f"more than {tuning.MAX_KEYS} items")
            pos = self.skip(pos)
            if pos < len(text) and text[pos] == ",":
                pos = self.skip(pos + 1)
            elif pos >= len(text) or text[pos] != close:
                raise LiteralError(f"expected ',' or {close!r} at column {pos}")

    def mapping(self, pos: int, depth: int) -> tuple[dict[str, Any], int]:
        found: dict[str, Any] = {}
        text = self.text
        pos = self.skip(pos)
        while True:
            if pos < len(text) and text[pos] == "}":
                return found, pos + 1
            if pos >= len(text) or text[pos] not in "'\"":
                raise LiteralError(f"a key that is no string at column {pos}")
            key, pos = self.string(pos)
            if not key or len(key) > tuning.MAX_KEY_CHARS:
                raise LiteralError(f"a key of {len(key)} characters")
            pos = self.skip(pos)
            if pos >= len(text) or text[pos] != ":":
                raise LiteralError(f"expected ':' at column {pos}")
            found[key], pos = self.value(pos + 1, depth)
            if len(found) > tuning.MAX_KEYS:
                raise LiteralError(f"more than {tuning.MAX_KEYS} keys")
            pos = self.skip(pos)
            if pos < len(text) and text[pos] == ",":
                pos = self.skip(pos + 1)
            elif pos >= len(text) or text[pos] != "}":
                raise LiteralError(f"expected ',' or '}}' at column {pos}")
