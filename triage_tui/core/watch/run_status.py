"""What the watcher reports about one run at one moment: ``RunStatus``, the object of ``scan --json``.

Apart from the watcher (core/watch/watcher.py) so the loop and the report can be read on their own: the
TUI, ``scan`` and the demo need the report, only the watcher builds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from triage_tui.core.errors import SourceError
from triage_tui.core.metric_names import match_trainer
from triage_tui.core.read.runs.info import RunInfo
from triage_tui.core.read.runs.names import MANIFEST_NAME
from triage_tui.core.read.runs.remote import shown_path
from triage_tui.core.read.source_kinds import registry
from triage_tui.core.series import RunScalars
from triage_tui.core.watch.best_checkpoint import AcceptanceHistory, BestCheckpoint, acceptance_history
from triage_tui.core.watch.curve_shapes import RunStart
from triage_tui.core.watch.run_state import RunState
from triage_tui.core.watch.serving import source as serving_source
from triage_tui.core.watch.serving.evidence import ServingEvidence
from triage_tui.core.watch.signals.chance import DEFAULT_VOCAB_SIZE, ChanceLine, chance_line
from triage_tui.core.watch.signals.flags import Flag
from triage_tui.core.watch.signals.kinds import FlagKind, RunHealth, Severity
from triage_tui.core.watch.signals.metrics import RunMetrics


@dataclass(frozen=True)
class RunStatus:
    """Everything the TUI and `scan --json` show about one run at one moment."""

    info: RunInfo
    status: RunHealth  # "error": the run has errors, and nothing of it could be read
    vocab_size: int
    # "flag" | "manifest" | "config.json" | "training_state.pt" | "wandb config" | "drafter config.json" | "default"
    vocab_size_source: str
    chance_loss: float
    last_step: int | None
    last_update: float | None  # unix time of the newest event
    metrics: RunMetrics
    flags: tuple[Flag, ...]
    loss_tag: str | None
    accuracy_tag: str | None
    scalars: RunScalars = field(compare=False, repr=False)  # live object, for plots
    # What the serving engine accepts (triage.toml [serving]; core/watch/serving/); its failing sources
    # are in ``errors`` (a dead metrics URL never stops the watch).
    serving: ServingEvidence | None = None
    # What an untrusted triage.toml named for serving and was not used (docs/contracts.md, Trust), one line each.
    serving_notices: tuple[str, ...] = ()
    trainer: str | None = None  # core.metric_names: whose metric names the run's tags matched
    chance: ChanceLine | None = None  # chance_loss with its basis (masked averaging), for JSON and labels
    start: RunStart | None = None  # the first logged points: near chance or not (core.watch.curve_shapes)
    # The fault boundary (docs/contracts.md): everything of this run that could not be read, as
    # values, each once; one run's bad file never reaches another run's report.
    errors: tuple[SourceError, ...] = ()
    # The peak of the run's acceptance estimate and the checkpoint nearest it (core.watch.best_checkpoint)
    best: BestCheckpoint | None = None
    # Whether the run's writer is alive here (live, stalled, ended, crashed, unknown) and the
    # evidence (core.watch.run_state); None where it was not judged (a run whose update failed).
    state: RunState | None = None
    # What was read of each of the run's files where its reader says (RunSources.notes: a console's
    # rank read, lines of other ranks skipped, unknown lines, a read cut short), one line each.
    source_notes: tuple[str, ...] = ()

    @property
    def source_errors(self) -> tuple[str, ...]:
        """The errors of the run's scalar sources (core/read/source_kinds/registry.py), one line each."""
        kinds = {kind.name for kind in registry.SCALAR_SOURCES}
        return tuple(error.line() for error in self.errors if error.source in kinds)

    @property
    def serving_errors(self) -> tuple[str, ...]:
        """What serving says went wrong, one line each: the notices of what an untrusted triage.toml
        named, then each serving source that failed at the last poll."""
        failed = tuple(error.line() for error in self.errors if error.source == serving_source.SOURCE_KIND)
        return self.serving_notices + failed

    @property
    def shown_status(self) -> str:
        """What the glyph says (core/text.py STATUS_GLYPHS): the status, or "warming" for a run with
        nothing worse than info flags that is still inside the warm-up (core.watch.signals.values), where
        "ok" would claim a health the flags have not judged yet. ``status`` and the exit codes keep "ok"."""
        if self.status == RunHealth.OK and any(flag.kind == FlagKind.WARMING_UP for flag in self.flags):
            return "warming"
        return self.status

    def acceptance_history(self) -> AcceptanceHistory | None:
        """The run's held-out acceptance over its evaluations, checkpoints and loss, for the
        hypotheses (past_acceptance_peak); built when a check asks, off the UI thread."""
        trainer = match_trainer(self.scalars.tags())
        return acceptance_history(self.scalars, trainer, self.info.artifacts.checkpoints, self.loss_tag)

    def to_json(self) -> dict[str, Any]:
        """The per-run object of docs/contracts.md's `scan --json`."""
        document: dict[str, Any] = {
            # A run mirrored from a bucket (runs/remote.py) is named by its URL, not the local copy.
            "path": shown_path(self.info.path),
            "name": self.info.name,
            "status": self.status,
            "vocab_size": self.vocab_size,
            "vocab_size_source": self.vocab_size_source,
            "chance_loss": self.chance_loss,
            **(
                {key: value for key, value in self.chance.to_json().items() if key != "chance_loss"}
                if self.chance is not None
                else {}
            ),
            "last_step": self.last_step,
            "last_update": self.last_update,
            "metrics": self.metrics.to_json(),
            "flags": [flag.to_json() for flag in self.flags],
            "sources": list(self.info.sources),
            "trainer": self.trainer,
            "errors": [error.to_json() for error in self.errors],
            "best": self.best.to_json() if self.best is not None else None,
        }
        # core.watch.run_state's keys; null where the run was not judged.
        state = self.state.to_json() if self.state is not None else {}
        document["state"] = state.get("state")
        document["state_reason"] = state.get("state_reason")
        document["writer"] = state.get("writer")
        document["crash_line"] = state.get("crash_line")
        document["source_notes"] = list(self.source_notes)
        if self.source_errors:
            document["source_errors"] = list(self.source_errors)
        if self.info.manifest_error:
            document["manifest_error"] = self.info.manifest_error
        if self.serving is not None or self.serving_errors:
            serving = self.serving.to_json(with_samples=False) if self.serving is not None else {}
            document["serving"] = {**serving, "errors": list(self.serving_errors)}
        return document


def manifest_error(info: RunInfo) -> SourceError | None:
    """The run's malformed triage.toml as an error of the run (its other sources are still read)."""
    if not info.manifest_error:
        return None
    path = str(info.path / MANIFEST_NAME)
    what = info.manifest_error.removeprefix(f"{path}: ")
    return SourceError("manifest", path, what)


def failed_status(info: RunInfo, vocab_size: int | None, err: Exception) -> RunStatus:
    """The report of a run whose update failed outright (a bug the readers did not catch): listed,
    status "error", the failure said; every other run's report is untouched."""
    vocab, source = (vocab_size, "flag") if vocab_size is not None else (DEFAULT_VOCAB_SIZE, "default")
    chance = chance_line(vocab, None)
    error = SourceError("triage", str(info.path), f"cannot update this run: {type(err).__name__}: {err}")
    return RunStatus(
        info=info,
        status=RunHealth.ERROR,
        vocab_size=vocab,
        vocab_size_source=source,
        chance_loss=chance.value,
        last_step=None,
        last_update=None,
        metrics=RunMetrics(),
        flags=(Flag(FlagKind.UNREADABLE_FILE, Severity.WARNING, None, None, None, error.line()),),
        loss_tag=None,
        accuracy_tag=None,
        scalars=RunScalars(),
        chance=chance,
        errors=(error,),
    )
