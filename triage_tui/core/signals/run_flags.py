"""All flags of one run from its scalars and the clock (the watcher's entry point), and the run's step."""

from __future__ import annotations

from collections.abc import Sequence

from triage_tui.core.series import RunScalars
from triage_tui.core.signals.flags import Flag, sort_flags
from triage_tui.core.signals.stall import Activity, stall_flag
from triage_tui.core.signals.tags import is_summed_loss
from triage_tui.core.signals.values import value_flags


def raise_flags(
    scalars: RunScalars,
    *,
    vocab_size: int,
    loss_tags: Sequence[str],
    accuracy_tags: Sequence[str],
    now: float,
    flush_secs: float = 120.0,
    seen_live: bool = False,
    chance_comparable: bool | None = None,
) -> list[Flag]:
    """All flags of one run, most severe first.

    ``chance_comparable`` defaults to "the primary loss tag is not a TTT-summed total".
    """
    if chance_comparable is None:
        chance_comparable = not loss_tags or not is_summed_loss(loss_tags[0], scalars.tags())
    flags = value_flags(
        scalars,
        vocab_size=vocab_size,
        loss_tags=loss_tags,
        accuracy_tags=accuracy_tags,
        chance_comparable=chance_comparable,
    )
    activity = Activity.of(scalars, loss_tags[0] if loss_tags else None)
    last_step = last_step_of(scalars, loss_tags[0] if loss_tags else None)
    stalled = stall_flag(activity, now=now, flush_secs=flush_secs, seen_live=seen_live, last_step=last_step)
    if stalled is not None:
        flags.append(stalled)
    return sort_flags(flags)


def last_step_of(scalars: RunScalars, loss_tag: str | None = None) -> int | None:
    """The run's step: its loss series' last step; the largest of any series only without a loss
    (one stray tag logged at step 2**40 must not make a run of 200 steps read "1099511.6M")."""
    loss = scalars.get(loss_tag) if loss_tag is not None else None
    if loss is not None and (last := loss.last()) is not None:
        return last[0]
    steps = [last[0] for s in scalars.series.values() if (last := s.last()) is not None]
    return max(steps) if steps else None
