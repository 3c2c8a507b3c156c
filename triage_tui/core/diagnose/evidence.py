"""Everything a diagnosis weighs about one run, gathered in one place: ``gather_evidence``.

`triage check` (text and JSON), the TUI's `c` (in its worker thread) and the demo each call
``gather_evidence`` and then ``core/diagnose/diagnosis.py`` ``diagnose``, so for the same run and options
every surface ranks the same causes with the same scores and evidence. The run is discovered once
and its triage.toml read once (``check_inputs.resolve_run``); that discovery is what the run's
scalars are read from (``watch.scan_run``: flags, metrics, chance line, how it started, its
acceptance history) and what names its serving sources (triage.toml ``[serving]``, else
``--serving``, and the speculation profile beside the drafter checked), which are read with the
engine's launch commands in their logs. A run in a bucket (``s3://``, ``gs://``) is mirrored first.

The TUI reads the run again here rather than reusing its watcher's status: the watcher follows
[serving] for the table (a dead URL is a row's error there, bad input here) and fills its scalars
in place on its own thread, where this is one consistent read, the one `check` makes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triage_tui.core import bounds
from triage_tui.core.diagnose.check_inputs import CheckInputs, ResolvedRun, resolve_run
from triage_tui.core.errors import SourceError
from triage_tui.core.read.runs.remote import Mirrors
from triage_tui.core.watch.signals.kinds import WriterState

if TYPE_CHECKING:
    from triage_tui.core.formats.engine_launch import EngineLaunch
    from triage_tui.core.read.runs.manifest import Manifest
    from triage_tui.core.watch.best_checkpoint import AcceptanceHistory
    from triage_tui.core.watch.curve_shapes import RunStart
    from triage_tui.core.watch.run_status import RunStatus
    from triage_tui.core.watch.serving.compare import ServingComparison
    from triage_tui.core.watch.signals.chance import ChanceLine
    from triage_tui.core.watch.signals.flags import Flag
    from triage_tui.core.watch.signals.metrics import RunMetrics


@dataclass(frozen=True)
class Overrides:
    """What the user says on top of the run's own files (`check`'s flags; the TUI's remapped checkpoint)."""

    checkpoint: str | Path | None = None
    mapping: str | Path | None = None
    data: str | Path | None = None
    target: str | Path | None = None
    # --serving: these sources instead of triage.toml's [serving] and the profile beside the drafter.
    serving: tuple[str, ...] = ()
    device: str = "auto"  # where the replay runs (core/device.py)
    all_chunk_orders: bool = False  # the replay tries every order of the aux chunks


@dataclass(frozen=True)
class Evidence:
    """One run's inputs and everything else the checks and hypotheses weigh (``diagnose`` takes it whole)."""

    inputs: CheckInputs
    device: str = "auto"
    all_chunk_orders: bool = False
    flags: tuple[Flag, ...] = ()
    metrics: RunMetrics | None = None  # the scan's loss, accuracy, ...; None where no scalars were read
    chance: ChanceLine | None = None  # the line the flags compared the loss with, and its basis
    start: RunStart | None = None  # how the run's curves started (warm_start_broken)
    acceptance: AcceptanceHistory | None = None  # held-out acceptance over the run and its checkpoints
    serving_sources: tuple[str, ...] = ()  # what was read for serving, the speculation profile included
    serving: ServingComparison | None = None  # serving against the run's training estimate
    launches: tuple[EngineLaunch, ...] = ()  # how the engine was started, from the serving logs
    # Objects of a bucket run that could not be mirrored (one line each on stderr; the rest is checked).
    unread: tuple[SourceError, ...] = ()
    crash: Crash | None = None  # a crashed run's crash, which `check` names before any cause
    # What was read of the run's files where a reader says (RunStatus.source_notes), one line each.
    source_notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Crash:
    """How a crashed run ended, as `scan` judged it (core.watch.run_state): the console's error line (or
    W&B's exit code), the last step logged, and when (unix time)."""

    line: str | None
    step: int | None
    time: float | None

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "step": self.step, "time": self.time}


def gather_evidence(run: str | Path, overrides: Overrides = Overrides()) -> Evidence:
    """The run's evidence, for ``diagnose``. BadInput (exit 2) for a path that is not a run, a flag's
    missing path, a malformed triage.toml or a serving source that cannot be read."""
    from triage_tui.core.watch.watcher import scan_run

    mirrors = Mirrors()
    run_path = mirrors.local(str(run))
    # a flag's URL (--checkpoint s3://...) is mirrored too: the user named it, as the run
    overrides = replace(
        overrides,
        checkpoint=mirrors.local_input(overrides.checkpoint),
        mapping=mirrors.local_input(overrides.mapping),
        data=mirrors.local_input(overrides.data),
        target=mirrors.local_input(overrides.target),
    )
    unread = mirrors.sync()
    resolved = _resolve(run_path, overrides)
    if mirrors.mirrors:
        # A bucket run's triage.toml may name directories out of its prefix in the same bucket:
        # mirrored too, and the inputs resolved again to find them there.
        inputs = resolved.inputs
        before = len(mirrors.mirrors)
        unread += mirrors.mirror_outside([inputs.checkpoint, inputs.mapping, inputs.data, inputs.target])
        if len(mirrors.mirrors) > before:
            resolved = _resolve(run_path, overrides)
    inputs = resolved.inputs
    status = scan_run(resolved.info) if resolved.info is not None else None
    sources, pages = serving_sources(resolved.manifest, overrides.serving, inputs.checkpoint)
    scalars = status.scalars if status is not None else None
    return Evidence(
        inputs=inputs,
        device=overrides.device,
        all_chunk_orders=overrides.all_chunk_orders,
        flags=tuple(status.flags) if status is not None else (),
        metrics=status.metrics if status is not None else None,
        chance=status.chance if status is not None else None,
        start=status.start if status is not None else None,
        acceptance=status.acceptance_history() if status is not None else None,
        serving_sources=tuple(sources),
        serving=_serving(sources, pages, scalars),
        launches=_launches(sources),
        unread=tuple(unread),
        crash=_crash(status),
        source_notes=status.source_notes if status is not None else (),
    )


def _resolve(run_path: Path, overrides: Overrides) -> ResolvedRun:
    return resolve_run(
        run_path,
        checkpoint=overrides.checkpoint,
        mapping=overrides.mapping,
        data=overrides.data,
        target=overrides.target,
    )


def serving_sources(
    manifest: Manifest | None, named: Sequence[str], checkpoint: Path | None
) -> tuple[list[str], tuple[str, ...]]:
    """(the serving sources, those of them named as a /metrics page): ``named`` (--serving) if any,
    else triage.toml's [serving] and the speculation profile beside the drafter checked."""
    from triage_tui.core.watch.serving.read import with_profile

    if named:
        return list(named), ()
    sources = manifest.serving_sources if manifest is not None else []
    pages = manifest.serving_metrics_pages if manifest is not None else ()
    return with_profile(sources, checkpoint), pages


def _launches(sources: Sequence[str]) -> tuple[EngineLaunch, ...]:
    """How the engine was launched, from the serving logs among the sources (never a URL)."""
    from triage_tui.core.formats.engine_launch import read_engine_launches

    return tuple(launch for source in sources if not bounds.is_url(source) for launch in read_engine_launches(source))


def _serving(sources: Sequence[str], pages: tuple[str, ...], scalars: Any) -> ServingComparison | None:
    """The serving sources read (BadInput for one that cannot be) and set beside the training estimate."""
    from triage_tui.core.watch.serving.compare import compare_serving, training_estimate_from_scalars
    from triage_tui.core.watch.serving.read import read_serving_sources

    evidence = read_serving_sources(sources, pages)
    if evidence is None:
        return None
    estimate = training_estimate_from_scalars(scalars) if scalars is not None else None
    return compare_serving(evidence, estimate)


def _crash(status: RunStatus | None) -> Crash | None:
    state = status.state if status is not None else None
    if status is None or state is None or state.state != WriterState.CRASHED:
        return None
    return Crash(state.line, status.last_step, state.last_update)
