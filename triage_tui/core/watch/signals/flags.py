"""A run's flags: ``Flag`` (one thing wrong, or worth knowing, with the step and value behind it),
the one table of severities, and how numbers read in a flag's message."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from triage_tui.core.json_numbers import json_number
from triage_tui.core.watch.signals.kinds import FlagKind, RunHealth, Severity

# The one table of severities. A flag's, least to most severe; a run's status is its worst
# flag's, "ok" when it has none or only info flags (RUN_STATUSES[worst flag's order]).
SEVERITY_ORDER = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}
RUN_STATUSES = (RunHealth.OK, RunHealth.WARNING, RunHealth.CRITICAL)


@dataclass(frozen=True)
class Flag:
    """One thing wrong (or worth knowing) about a run, with the step and value behind it."""

    kind: FlagKind
    severity: Severity
    tag: str | None
    step: int | None
    value: float | None
    message: str
    # The condition holds from the series' first logged point (non_finite: no finite value was ever
    # logged before it), which points at the setup rather than at training (core.diagnose.hypotheses).
    from_start: bool = False
    # How much of the series shows it, for the hypotheses to weigh (core.diagnose.hypotheses.curves); not in
    # the JSON, whose message says the same in words. ``points``: non_finite, the points not finite;
    # diverging, the points since the rise began. ``extent``: non_finite, the share of the points
    # from the first bad one on that are not finite (1.0: it never came back); diverging, the
    # smoothed loss now over its best.
    points: int | None = None
    extent: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "tag": self.tag,
            "step": self.step,
            "value": json_number(self.value),
            "message": self.message,
        }


def sort_flags(flags: Iterable[Flag]) -> list[Flag]:
    return sorted(flags, key=lambda f: -SEVERITY_ORDER[f.severity])


def worst_severity(flags: Iterable[Flag]) -> RunHealth:
    """ "ok" when no flag or only info flags, else the worst severity."""
    return RUN_STATUSES[max((SEVERITY_ORDER[f.severity] for f in flags), default=0)]


def fmt(value: float) -> str:
    """Numbers in messages: 4 significant digits, words for NaN/inf."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def fmt_duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
