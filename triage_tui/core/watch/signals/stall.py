"""The ``stalled`` flag: a run silent for longer than its writers and its own rhythm explain."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from triage_tui.core.series import RunScalars
from triage_tui.core.watch.signals.flags import Flag, fmt_duration
from triage_tui.core.watch.signals.kinds import FlagKind, Severity

# Stall: writers buffer up to flush_secs (torch/tensorboardX/TF2 default 120 s,
# tensorboard `tensorboard/summary/writer/event_file_writer.py`), checkpoint saves and evals pause logging, so a run
# is stalled only when silent for longer than max(flush_secs + 60 s, 3 x its median gap
# between logged points, 1.5 x its longest gap so far).
STALL_MARGIN_SECS = 60.0
STALL_MEDIAN_GAPS = 3.0
STALL_LONGEST_GAP = 1.5
# Severity: "warning" while the silence is under an hour or the watcher saw the run grow in
# this session (it stopped under our eyes); otherwise "info": a finished or long-dead run
# opened for a post-mortem is not an alarm.
STALL_WARNING_SECS = 3600.0


@dataclass(frozen=True)
class Activity:
    """When a run last logged, and how far apart its points usually are (wall seconds)."""

    last_wall_time: float | None
    median_gap: float
    longest_gap: float

    @classmethod
    def of(cls, scalars: RunScalars, tag: str | None = None) -> Activity:
        series = scalars.get(tag) if tag else None
        if series is None or len(series) < 2:
            # The longest series, the first by name among equals: the order series were met in
            # depends on how the files were read (windows, polls, helper processes).
            lengths = [(len(s), s) for _, s in sorted(scalars.series.items())]
            series = max(lengths, key=lambda pair: pair[0])[1] if lengths else None
        gaps = np.diff(np.asarray(series.wall_times)) if series is not None and len(series) > 1 else np.zeros(0)
        gaps = gaps[np.isfinite(gaps) & (gaps > 0)]
        return cls(
            scalars.last_wall_time,
            float(np.median(gaps)) if len(gaps) else 0.0,
            float(gaps.max()) if len(gaps) else 0.0,
        )

    def stall_after(self, flush_secs: float) -> float:
        return max(
            flush_secs + STALL_MARGIN_SECS, STALL_MEDIAN_GAPS * self.median_gap, STALL_LONGEST_GAP * self.longest_gap
        )


def stall_flag(
    activity: Activity,
    *,
    now: float,
    flush_secs: float = 120.0,
    seen_live: bool = False,
    last_step: int | None = None,
) -> Flag | None:
    """The `stalled` flag, measured against `now` (cheap: the watcher calls it every poll)."""
    last = activity.last_wall_time
    if last is None:
        return None
    silence = now - last
    limit = activity.stall_after(flush_secs)
    if silence <= limit:
        return None
    if seen_live or silence < STALL_WARNING_SECS:
        return Flag(
            FlagKind.STALLED,
            Severity.WARNING,
            None,
            last_step,
            None,
            f"no new data for {fmt_duration(silence)} (expected within {fmt_duration(limit)}: "
            f"writers flush every {flush_secs:.0f} s, longest gap so far {fmt_duration(activity.longest_gap)})",
        )
    return Flag(
        FlagKind.STALLED,
        Severity.INFO,
        None,
        last_step,
        None,
        f"last data {fmt_duration(silence)} ago: finished or stopped",
    )
