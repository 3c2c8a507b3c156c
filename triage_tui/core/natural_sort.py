"""The one natural sort: numbers in names compared as numbers (epoch_0_step_900 before epoch_0_step_1000)."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple:
    """Sort key that orders epoch_0_step_900 before epoch_0_step_1000."""
    # isdecimal, not isdigit: "²" is a digit that int() refuses (a directory may be named anything).
    return tuple(int(part) if part.isdecimal() else part for part in _NUMBER.split(text))
