"""Numbers printed by a trainer, read back as exactly what was printed (never Python's laxer ``float``:
it takes ``1_0`` and surrounding spaces)."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_SPECIAL = {"nan": float("nan"), "-nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "+inf": float("inf")}
_MAX_CHARS = 64


def parse_number(text: str) -> float | None:
    """``text`` as a float if it is a plain decimal number (or nan/inf as Python prints them), else None."""
    if len(text) > _MAX_CHARS:
        return None
    if _NUMBER.match(text):
        return float(text)
    return _SPECIAL.get(text.lower())
