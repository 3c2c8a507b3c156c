"""Points read by one poll, gathered by name and appended to a run's series at once."""

from __future__ import annotations

import math

import numpy as np

from triage_tui.core.read.trackers import tuning
from triage_tui.core.series import RunScalars


class PointBatch:
    """The points of one poll by metric name, in the order they were logged: added one at a time
    (a text line's) or a column at a time (a store's rows, already grouped); a source uses one way."""

    def __init__(self) -> None:
        self._lists: dict[str, tuple[list[int], list[float], list[float]]] = {}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.points = 0

    def add(self, name: str, step: int, wall: float, value: float) -> None:
        columns = self._lists.get(name)
        if columns is None:
            columns = self._lists[name] = ([], [], [])
        columns[0].append(step)
        columns[1].append(wall)
        columns[2].append(value)
        self.points += 1

    def add_columns(self, name: str, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> None:
        """Every point of one name this poll read, at once."""
        if len(steps):
            self._arrays[name] = (steps, walls, values)
            self.points += len(steps)

    def append_to(self, scalars: RunScalars, prefix: str) -> int:
        """Extend ``scalars`` in place (a step that goes back is a restart: core.series); the points added."""
        for name, (steps, walls, values) in self._lists.items():
            series = scalars.series_for(prefix + name, None)
            if series is not None:  # None: a tag beyond the TUI's bound (core.series.display_series)
                series.extend(
                    np.asarray(steps, np.int64), np.asarray(walls, np.float64), np.asarray(values, np.float64)
                )
        for name, columns in self._arrays.items():
            series = scalars.series_for(prefix + name, None)
            if series is not None:
                series.extend(*columns)
        if self.points:
            scalars.version += 1
        added, self._lists, self._arrays, self.points = self.points, {}, {}, 0
        return added


def metric_name(name: object) -> str | None:
    """A logged name as a series name, or None where it cannot be one (not text, empty, too long)."""
    if not isinstance(name, str) or not name or len(name) > tuning.MAX_NAME_CHARS:
        return None
    return name


def number(value: object) -> float | None:
    """A logged value as a float, or None where it is no number (a bool is not one: JSON's true)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return float(value) if abs(value) < 1 << 1023 else None
    if isinstance(value, float):
        return value
    return None


def step_of(value: object) -> int | None:
    """A logged step: a non-negative integer that fits int64 (a float step with no fraction too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value < 1 << 63:
        return value
    return None
