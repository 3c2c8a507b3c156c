"""Every cause, once (``HYPOTHESES``), and the ranking of a run's evidence over them.

Adding a cause: one function ``RunEvidence -> Hypothesis | None`` in the module of its family
(``mapping``, ``dumps``, ``curves``, ``serving``), its weights named above it with their reasons,
one entry in ``HYPOTHESES`` below, and a row of the README's "Hypotheses" table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from triage_tui.core.diagnose.checks.result import CheckResult
from triage_tui.core.diagnose.hypotheses.curves import (
    diverged,
    non_finite,
    past_acceptance_peak,
    ttt_position_collapse,
    warm_start_broken,
)
from triage_tui.core.diagnose.hypotheses.dumps import (
    aux_layer_off_by_one,
    empty_loss_mask,
    hidden_before_final_norm,
    hidden_state_format,
    non_finite_dumps,
)
from triage_tui.core.diagnose.hypotheses.mapping import (
    identity_mapping,
    mapping_drift,
    mapping_not_in_checkpoint,
    missing_lm_head,
    verifier_mask_mismatch,
    vocab_mapping_mismatch,
)
from triage_tui.core.diagnose.hypotheses.scoring import Hypothesis, HypothesisFunction, RunEvidence
from triage_tui.core.diagnose.hypotheses.serving import (
    algorithm_flag,
    backbone_fallback,
    config_contract,
    rope_layout,
    target_mismatch,
    training_metric_misread,
)
from triage_tui.core.diagnose.hypotheses.target_weights import tied_target_head, untrained_embeddings
from triage_tui.core.diagnose.hypotheses.weights import dropped_tensors, quantized_without_scales, rope_scaling_dropped
from triage_tui.core.watch.best_checkpoint import AcceptanceHistory

if TYPE_CHECKING:
    from triage_tui.core.formats.engine_launch import EngineLaunch
    from triage_tui.core.watch.curve_shapes import RunStart, StartingCheckpoint
    from triage_tui.core.watch.serving.compare import ServingComparison
    from triage_tui.core.watch.signals.flags import Flag
    from triage_tui.core.watch.signals.metrics import RunMetrics


def rank_hypotheses(
    checks: Mapping[str, CheckResult],
    flags: Sequence[Flag] = (),
    *,
    metrics: RunMetrics | None = None,
    serving: ServingComparison | None = None,
    start: RunStart | None = None,
    starting_checkpoint: StartingCheckpoint | None = None,
    launches: Sequence[EngineLaunch] = (),
    acceptance: AcceptanceHistory | None = None,
) -> list[Hypothesis]:
    """Score every cause the evidence can speak to (``HYPOTHESES``), best first.

    ``metrics`` is the scan's loss, accuracy and per-position accuracy (RunStatus.metrics),
    used for what no flag states, such as a loss and accuracy of exactly zero. ``serving`` is what
    the serving engine accepted beside the training estimate (core/watch/serving/); with it, the
    hypotheses only serving speaks to (config_contract) are listed too; target_mismatch is
    always listed, from serving and from the dumps. ``launches`` are how the serving engine was
    started (core/formats/engine_launch.py, from the serving logs), ``acceptance`` a held-out
    acceptance estimate over the run with its checkpoints (past_acceptance_peak).
    """
    evidence = RunEvidence(checks, flags, metrics, serving, start, starting_checkpoint, tuple(launches), acceptance)
    hypotheses = [h for score in HYPOTHESES if (h := score(evidence)) is not None]
    # Stable sort: ties keep HYPOTHESES' order (the always-present ones first).
    return sorted(hypotheses, key=lambda h: -h.score)


# Every hypothesis, once. Adding a cause = one function above and one entry here (and a row of
# the README's hypotheses table). The order breaks ties in the ranking: the always-present ones
# (docs/contracts.md) first.
HYPOTHESES: tuple[HypothesisFunction, ...] = (
    vocab_mapping_mismatch,
    hidden_state_format,
    verifier_mask_mismatch,
    warm_start_broken,
    ttt_position_collapse,
    config_contract,
    mapping_not_in_checkpoint,
    identity_mapping,
    mapping_drift,
    target_mismatch,
    aux_layer_off_by_one,
    missing_lm_head,
    empty_loss_mask,
    non_finite_dumps,
    non_finite,
    diverged,
    training_metric_misread,
    algorithm_flag,
    backbone_fallback,
    rope_layout,
    past_acceptance_peak,
    quantized_without_scales,
    dropped_tensors,
    rope_scaling_dropped,
    hidden_before_final_norm,
    untrained_embeddings,
    tied_target_head,
)
