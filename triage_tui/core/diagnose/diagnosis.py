"""What `triage check` and the TUI's check key call: run every registered check on a run's inputs, rank causes.

The inputs and the rest of the run's evidence come gathered (``core/diagnose/evidence.py`` ``gather_evidence``,
or an ``Evidence`` of inputs alone from ``core/diagnose/check_inputs.py`` ``resolve_run``); the checks are those of
``core/diagnose/checks/registry.py``, in its order, each isolated: a file that is not what it claims
(BadInput) or any other exception in one check becomes that check's ``status="error"`` with a
one-line reason, and the others still run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from triage_tui.core.diagnose.check_inputs import CheckInputs
from triage_tui.core.diagnose.checks.registry import CHECK_NAMES, COUNTING_CHECKS, CheckContext, Progress, run_checks
from triage_tui.core.diagnose.checks.result import CheckResult
from triage_tui.core.diagnose.evidence import Evidence
from triage_tui.core.diagnose.hypotheses.rank import rank_hypotheses
from triage_tui.core.diagnose.hypotheses.scoring import LIKELY, Hypothesis
from triage_tui.core.json_numbers import finite_json
from triage_tui.core.watch.curve_shapes import StartingCheckpoint
from triage_tui.core.watch.serving.compare import ServingComparison


@dataclass(frozen=True)
class Diagnosis:
    """Every check's result and the ranked hypotheses, for one run."""

    inputs: CheckInputs
    checks: dict[str, CheckResult]
    hypotheses: list[Hypothesis]
    serving: ServingComparison | None = None

    def to_json(self) -> dict[str, Any]:
        """docs/contracts.md `check --json`, plus where each input came from; NaN and inf as null."""
        document = {
            "run": str(self.inputs.run),
            "inputs": self.inputs.paths(),
            "input_sources": dict(self.inputs.sources),
            "input_notes": list(self.inputs.notes),
            "checks": {name: self.checks[name].to_json() for name in CHECK_NAMES if name in self.checks},
            "hypotheses": [h.to_json() for h in self.hypotheses],
        }
        if self.serving is not None:
            document["serving"] = self.serving.to_json()
        # Which checks could not run, and why (docs/contracts.md: a partial result is visible).
        document["not_run"] = {
            name: self.checks[name].summary
            for name in CHECK_NAMES
            if name in self.checks and self.checks[name].status in ("skipped", "error")
        }
        return finite_json(document)

    def remap_blocker(self) -> str | None:
        """Why this diagnosis calls for no remap, in a sentence; None when it does: the vocab check
        failed (the rows are ordered for another mapping) and both mapping files are known. `check`'s
        `fix:` line, the TUI's `m` key and its Action tab all ask here."""
        vocab = self.checks.get("vocab_mapping")
        if vocab is None or vocab.status == "pass":
            return "the vocab check found the drafter's rows in the run's order: nothing to remap"
        if vocab.status != "fail":
            return f"the vocab check {vocab.status}: {vocab.summary}"
        if self.inputs.checkpoint is None or self.inputs.mapping is None:
            return "the run names no checkpoint or no mapping (triage.toml: checkpoint = …, mapping = …)"
        return None

    def fix_commands(self) -> tuple[str, ...]:
        """The remap's two shell commands (``CheckInputs.fix_commands``) when a remap is called for, else ()."""
        if self.remap_blocker() is not None:
            return ()
        return self.inputs.fix_commands() or ()

    @property
    def top_score(self) -> float:
        return max((h.score for h in self.hypotheses), default=0.0)

    def nothing_checked(self) -> str | None:
        """Why this diagnosis cannot say "healthy" (exit 2), or None when it can.

        docs/contracts.md: a clean result needs the mapping comparison or the replay to have
        run; every check skipped or errored is nothing checked, whatever the flags suggest.
        """
        ran = {name for name, result in self.checks.items() if result.ran}
        if not ran:
            missing = [name for name in CHECK_NAMES if name in self.checks]
        elif ran & set(COUNTING_CHECKS) or self.top_score >= LIKELY:
            return None
        else:
            missing = [name for name in COUNTING_CHECKS if name in self.checks]
        why = "; ".join(f"{name} {self.checks[name].status}: {self.checks[name].summary}" for name in missing)
        head = "nothing was checked" if not ran else "neither the vocab-mapping comparison nor the replay ran"
        return f"{head} ({why})"


def diagnose(
    evidence: Evidence, *, progress: Progress | None = None, cancel: threading.Event | None = None
) -> Diagnosis:
    """Run every registered check (each isolated) on the evidence's inputs and rank the hypotheses.

    ``evidence`` is what ``core/diagnose/evidence.py`` ``gather_evidence`` gathered of the run (its flags,
    metrics, serving comparison and launches, how it started, its acceptance history), or an
    ``Evidence`` of bare inputs. ``progress(fraction, message)`` reports per check: ``fraction`` is
    that check's own progress and ``message`` starts with the check's name, so the TUI can show one
    bar each. ``evidence.start`` is how the run's curves started, which a fine-tune from a good
    drafter must not do near chance (warm_start_broken, against the checkpoint the inputs name).
    """
    inputs = evidence.inputs
    context = CheckContext(
        checkpoint=inputs.checkpoint,
        mapping=inputs.mapping,
        data=inputs.data,
        target=inputs.target,
        run_checkpoints=inputs.run_checkpoints,
        device=evidence.device,
        progress=progress,
        cancel=cancel,
        all_chunk_orders=evidence.all_chunk_orders,
    )
    checks = run_checks(context)
    starting = (
        StartingCheckpoint(
            inputs.start, inputs.start_source or "discovery", inputs.run, inputs.checkpoint, inputs.remapped_from
        )
        if inputs.start is not None
        else None
    )
    hypotheses = rank_hypotheses(
        checks,
        evidence.flags,
        metrics=evidence.metrics,
        serving=evidence.serving,
        start=evidence.start,
        starting_checkpoint=starting,
        launches=evidence.launches,
        acceptance=evidence.acceptance,
    )
    return Diagnosis(inputs, checks, hypotheses, evidence.serving)
