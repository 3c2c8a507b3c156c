"""Numbers in JSON output: NaN and inf are not JSON (RFC 8259), so they become null.

The one place that rule lives: typed results call ``json_number`` on each float they write,
and ``check --json`` passes its whole document through ``finite_json`` at the edge (a check's
details may hold a NaN loss). A message beside the number keeps the word (``nan``, ``inf``).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["finite_json", "json_number"]


def json_number(value: float | None) -> float | None:
    """``value`` as a JSON number, or None for None, NaN and inf."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def finite_json(value: Any) -> Any:
    """A JSON-ready document with every non-finite float replaced by None (tuples become lists)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(item) for item in value]
    return value
