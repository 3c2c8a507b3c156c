"""One run's flags, chance line, tags, metrics and start from its scalars and settings: the one
derivation the watcher (core/watch/watcher.py) runs, and the one the tests call.

Nothing here reads a file or the clock: what is read (the scalars, the vocab size, the manifest,
the dumps' loss-mask fraction, the damaged records, the run's errors, the serving evidence, the
run's state from the processes: core.watch.run_state) and the time are handed in. Two steps, so an idle
poll stays cheap: ``derive`` holds everything that depends on the values and the settings (the
watcher recomputes it only when a run's scalars or settings changed), ``flags_at`` adds what
depends on the clock, on the run's files and on its writer's process (`stalled`, `crashed`,
damaged records, unreadable files) and the serving flags, every poll.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from triage_tui.core.errors import SourceError
from triage_tui.core.metric_names import TrainerNames, identified_by, match_trainer, ordered, per_position
from triage_tui.core.series import RunScalars
from triage_tui.core.watch.best_checkpoint import BestCheckpoint, best_checkpoint, impossible_acceptance
from triage_tui.core.watch.curve_shapes import RunStart, curve_flags, run_start
from triage_tui.core.watch.run_state import RunState
from triage_tui.core.watch.serving.compare import compare_serving, serving_flags, training_estimate_from_scalars
from triage_tui.core.watch.serving.evidence import ServingEvidence
from triage_tui.core.watch.signals.chance import MEAN_OVER_ALL_POSITIONS, ChanceLine, chance_line
from triage_tui.core.watch.signals.flags import Flag, sort_flags
from triage_tui.core.watch.signals.kinds import FlagKind, Severity, WriterState
from triage_tui.core.watch.signals.metrics import MetricSummary, PositionAccuracy, RunMetrics
from triage_tui.core.watch.signals.stall import Activity, stall_flag
from triage_tui.core.watch.signals.tags import comparable_to_chance, pick_metric_tags
from triage_tui.core.watch.signals.values import value_flags

if TYPE_CHECKING:
    from triage_tui.core.formats.hidden_states import LossMaskFraction
    from triage_tui.core.formats.specforge_output import BestMeta
    from triage_tui.core.read.runs.manifest import Manifest

DEFAULT_FLUSH_SECS = 120.0  # torch / tensorboardX / TF2 writers' default flush interval


@dataclass(frozen=True)
class RunSettings:
    """What a run's scalars are judged against, already read by the caller."""

    vocab_size: int
    # "flag" | "manifest" | "config.json" | "training_state.pt" | "wandb config" | "drafter config.json" | "default"
    vocab_size_source: str = "default"
    manifest: Manifest | None = None  # triage.toml: its loss and accuracy tags replace discovery and are trusted
    checkpoints: tuple[Path, ...] = ()  # the run's saves, oldest first: eval_peaked names the nearest
    best_meta: BestMeta | None = None  # SpecForge's own record of its best step (best_meta.json)
    # The loss-mask fraction of the run's dumps, or None; called only for a trainer whose loss averages
    # over all positions (core.watch.signals.chance MEAN_OVER_ALL_POSITIONS), so other runs' dumps are never read.
    valid_fraction: Callable[[], LossMaskFraction | None] | None = None


@dataclass(frozen=True)
class Derived:
    """What a run's values and settings say, before the clock: the watcher keeps it until they change."""

    vocab_size: int
    vocab_size_source: str
    trainer: str | None  # core.metric_names: whose metric names the run's tags matched
    trainer_identified: bool  # the tags hold a name only that trainer logs (not only generic ones)
    loss_tag: str | None
    accuracy_tag: str | None
    chance: ChanceLine
    metrics: RunMetrics  # scan --json's "metrics"
    last_step: int | None
    start: RunStart | None
    value_flags: tuple[Flag, ...]  # from the values and the curve shapes, in that order, unsorted
    activity: Activity  # when the run last logged and its rhythm, for `stalled`
    # Where the run's acceptance estimate peaked and the checkpoint saved nearest it (scan's "best")
    best: BestCheckpoint | None = None


def derive(scalars: RunScalars, settings: RunSettings) -> Derived:
    """Everything of the run that depends on its values and settings, not on the clock."""
    manifest = settings.manifest
    tags = scalars.metric_tags()  # an alternative record of a metric is not another metric
    trainer = match_trainer(tags)
    loss_tags, accuracy_tags = pick_metric_tags(tags, manifest)
    loss_tag = loss_tags[0] if loss_tags else None
    accuracy_tag = accuracy_tags[0] if accuracy_tags else None
    comparable = loss_tag is None or comparable_to_chance(loss_tag, tags, manifest)
    trainer_id = trainer.trainer if trainer is not None else None
    valid = (
        settings.valid_fraction()
        if settings.valid_fraction is not None and trainer_id in MEAN_OVER_ALL_POSITIONS
        else None
    )
    chance = chance_line(settings.vocab_size, trainer_id, valid)
    flags = value_flags(
        scalars,
        vocab_size=settings.vocab_size,
        loss_tags=loss_tags,
        accuracy_tags=accuracy_tags,
        chance_comparable=comparable,
        chance=chance,
    ) + curve_flags(
        scalars,
        loss_tags=loss_tags,
        accuracy_tags=accuracy_tags,
        trainer=trainer,
        checkpoints=settings.checkpoints,
    )
    impossible = impossible_acceptance(scalars, trainer)
    flags += [impossible] if impossible is not None else []
    return Derived(
        vocab_size=settings.vocab_size,
        vocab_size_source=settings.vocab_size_source,
        trainer=trainer_id,
        trainer_identified=trainer is not None and identified_by(trainer, tags),
        loss_tag=loss_tag,
        accuracy_tag=accuracy_tag,
        chance=chance,
        metrics=scan_metrics(scalars, tags, trainer, loss_tag, accuracy_tag),
        last_step=last_step_of(scalars, loss_tag),
        start=run_start(scalars, loss_tag, accuracy_tag, chance if comparable else None),
        value_flags=tuple(flags),
        activity=Activity.of(scalars, loss_tag),
        best=best_checkpoint(scalars, trainer, settings.checkpoints, recorded=settings.best_meta),
    )


def flags_at(
    derived: Derived,
    *,
    now: float,
    flush_secs: float = DEFAULT_FLUSH_SECS,
    seen_live: bool = False,
    damaged: Mapping[Path, int] | None = None,
    errors: Iterable[SourceError] = (),
    serving: Sequence[Flag] = (),
    state: RunState | None = None,
) -> tuple[Flag, ...]:
    """All of the run's flags at ``now``, most severe first.

    ``state``: whether the run's writer is alive here (core.watch.run_state, judged at ``now``). A
    stalled or crashed run carries a critical flag of that kind; a live or ended one no silence
    flag at all; an unknown one (or None: not judged) the silence rule of core.watch.signals.stall.
    ``seen_live``: the watcher saw the run grow in this session (that rule's stall is then a warning
    however old). ``damaged``: records skipped per file; ``errors``: what of the run could not be
    read, one `unreadable_file` flag each; ``serving``: the serving flags (``serving_flags_of``).
    """
    if state is None or state.state == WriterState.UNKNOWN:
        stalled = stall_flag(
            derived.activity, now=now, flush_secs=flush_secs, seen_live=seen_live, last_step=derived.last_step
        )
    else:
        stalled = state.flag(derived.last_step)
    # A run that stopped inside the warm-up is not warming up: it will never be judged (the stalled
    # or crashed flag says so). One that ended there keeps it: its health was never judged.
    values = tuple(f for f in derived.value_flags if stalled is None or f.kind != FlagKind.WARMING_UP)
    flags = (
        values
        + tuple(f for f in (stalled, damaged_records_flag(damaged or {})) if f is not None)
        + tuple(Flag(FlagKind.UNREADABLE_FILE, Severity.WARNING, None, None, None, error.line()) for error in errors)
    )
    return tuple(sort_flags(flags + tuple(serving)))


def serving_flags_of(serving: ServingEvidence, scalars: RunScalars) -> tuple[Flag, ...]:
    """Collapsed serving acceptance, or serving far from the run's own estimate, as flags."""
    return tuple(serving_flags(compare_serving(serving, training_estimate_from_scalars(scalars))))


def last_step_of(scalars: RunScalars, loss_tag: str | None = None) -> int | None:
    """The run's step: its loss series' last step; the largest of any series only without a loss
    (one stray tag logged at step 2**40 must not make a run of 200 steps read "1099511.6M")."""
    loss = scalars.get(loss_tag) if loss_tag is not None else None
    if loss is not None and (last := loss.last()) is not None:
        return last[0]
    steps = [last[0] for s in scalars.series.values() if (last := s.last()) is not None]
    return max(steps) if steps else None


def _summary(scalars: RunScalars, tag: str) -> tuple[float | None, float | None, int]:
    series = scalars.get(tag)
    if series is None or not len(series):
        return None, None, 0
    last = series.last()
    return (last[2] if last else None), series.finite_min(), len(series)


def _metric(scalars: RunScalars, tag: str | None) -> MetricSummary | None:
    return MetricSummary(tag, *_summary(scalars, tag)) if tag is not None else None


def scan_metrics(
    scalars: RunScalars, tags: list[str], trainer: TrainerNames | None, loss_tag: str | None, accuracy_tag: str | None
) -> RunMetrics:
    """The scan JSON's "metrics": loss and accuracy, plus per-position accuracy and acceptance length."""
    loss, accuracy = _metric(scalars, loss_tag), _metric(scalars, accuracy_tag)
    if trainer is None:
        return RunMetrics(loss, accuracy)
    positions = tuple(
        PositionAccuracy(tag, *_summary(scalars, tag), position=position)
        for position, tag in per_position(tags, trainer)
    )
    acceptance = ordered(tags, trainer.acceptance_length)
    return RunMetrics(loss, accuracy, positions, _metric(scalars, acceptance[0]) if acceptance else None)


def damaged_records_flag(damaged: Mapping[Path, int]) -> Flag | None:
    """A warning when records were dropped for a bad checksum or proto: the curve has gaps there."""
    if not damaged:
        return None
    count = sum(damaged.values())
    worst = max(damaged, key=lambda path: damaged[path])
    where = worst.name + (f" and {len(damaged) - 1} other file(s)" if len(damaged) > 1 else "")
    return Flag(
        FlagKind.DAMAGED_RECORDS,
        Severity.WARNING,
        None,
        None,
        float(count),
        f"{count} damaged record(s) skipped (bad checksum or proto) in {where}; their points are missing",
    )
