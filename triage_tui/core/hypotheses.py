"""Flags + check results -> ranked causes, each with the numbers behind it.

How a score is made: every piece of evidence for a hypothesis carries a weight w in [0, 1],
the probability-like strength with which that piece alone would convince us, and the pieces
combine as ``1 - prod(1 - w_i)`` (a noisy-OR). Independent evidence therefore adds up
without ever passing 1, one strong piece suffices, and many weak pieces stay weak. Each
weight is a named constant below with the reason for its size. Symptoms from the loss curve
(a loss at or above chance) say that *something* is wrong, not what: they add weight to a
hypothesis only when a check already found structural evidence for it, except the one
symptom that points at one cause (see ``W_ABOVE_CHANCE_ALONE``).

Adding a cause: one function ``RunEvidence -> Hypothesis | None`` and one entry in
``HYPOTHESES`` (at the bottom), its weights named above it with their reasons, and a row of the
README's "Hypotheses" table. The module runs past 600 lines on purpose: every cause's weights sit
beside the others' so they can be compared (one scale for all), and each function is short.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triage_tui.core.checks.result import CheckResult, ran_details

if TYPE_CHECKING:
    from triage_tui.core.checks.config_contract import ConfigContractDetails
    from triage_tui.core.checks.hidden_state import HiddenIssue, HiddenStateDetails
    from triage_tui.core.checks.mapping_health import MappingHealthDetails
    from triage_tui.core.checks.replay import ReplayDetails
    from triage_tui.core.checks.verifier_mask import VerifierMaskDetails
    from triage_tui.core.checks.vocab import VocabDetails
    from triage_tui.core.curve_shapes import RunStart, StartingCheckpoint
    from triage_tui.core.serving.compare import ServingComparison
    from triage_tui.core.signals.flags import Flag

# A hypothesis scoring at least this is "likely": `triage check` exits 1 and marks it "!", the TUI
# shows it in red, and a healthy run scores nothing this high (docs/contracts.md). One half: the
# noisy-OR reaches it with one strong structural finding, never with symptoms alone.
LIKELY = 0.5

# -- vocab_mapping_mismatch -------------------------------------------------------------------
# The vocab check measured the share of draft positions whose target token differs; weight =
# W_VOCAB_CHECK x that share. 0.9 and not 1: a differing mapping is certain, that it is what
# broke *this* run is not (the run may not have started from that checkpoint's head).
W_VOCAB_CHECK = 0.9
# Replay: the checkpoint scores far better with its own mapping than with the run's on the
# run's own data. Weight = W_REPLAY_GAP x relative gap. It is direct evidence that the labels,
# not the model, are wrong, so it is nearly as strong as the check itself.
W_REPLAY_GAP = 0.7
# A gap below 5 points is noise for a few thousand replayed tokens (std of an accuracy near 0.5
# over 4096 tokens is 0.8 points; 5 points is > 6 sigma) or a drafter that predicts nothing.
MIN_REPLAY_GAP = 0.05
# Loss above chance (ln Vd) means confident *wrong* predictions: a trained head whose rows mean
# other tokens does exactly that, a random head sits at chance. So it points at this cause
# even with no check run, but alone it cannot pass 0.5 (a diverged run does it too). When the
# vocab check ran and passed (the mappings agree), the rows mean their tokens and the symptom
# points elsewhere: it is then shown as a note, with no weight.
W_ABOVE_CHANCE_ALONE = 0.35
# Any chance-level symptom (loss at/above chance, accuracy at chance) corroborating a
# structural finding: it shows the finding matters for this run.
W_SYMPTOM_CORROBORATES = 0.3

# -- hidden_state_format ----------------------------------------------------------------------
# Weights per issue kind the hidden-state check reports (the dumps against the drafter; the
# drafter against its own config and the target is config_contract's). Shape errors (width, chunk
# count, only the last layer) make training impossible or meaningless: 0.9. A repeated chunk or a
# reversed order keeps shapes valid but feeds states the drafter never saw: 0.75.
W_HIDDEN_ISSUE = {
    "aux_width": 0.9,
    "only_last_layer": 0.9,
    "aux_chunk_count": 0.9,
    "length_mismatch": 0.8,
    "inconsistent_dumps": 0.6,
    "repeated_aux_chunk": 0.75,
    "aux_chunk_order": 0.75,
    "aux_chunk_is_last_hidden": 0.75,
    "aux_layer_mismatch": 0.6,
}
# Replay: another chunk order scores clearly better than the stored one (low, mid, high).
W_REPLAY_CHUNK_ORDER = 0.7

# -- aux_layer_off_by_one ---------------------------------------------------------------------
# One layer off degrades rather than destroys (vLLM PR #43671: position-0 acceptance 10 % vs
# 45 %), so it can explain a poor run but not a loss at chance: 0.6.
W_AUX_OFF_BY_ONE = 0.6

# -- verifier_mask_mismatch -------------------------------------------------------------------
# A failed required invariant of the mask the trainer uses. Non-ascending ids with t2d masking
# misalign every row silently (SpecForge classic `specforge/core/eagle3.py`, `_compute_target_p`): 0.9. A mask whose
# count or length is
# wrong usually crashes (EAGLE #248) rather than trains at chance: 0.6. A stored mask that
# disagrees with d2t selects other target columns than the rows mean: 0.8.
W_MASK_INVARIANT = {
    "ascending": 0.9,
    "count": 0.6,
    "length": 0.6,
    "stored_t2d": 0.8,
    "in_range": 0.6,
    "unique": 0.6,
}
# The checkpoint's mask differs from the run's: a consequence of a different mapping, which
# vocab_mapping_mismatch already explains and remap fixes; small on its own.
W_MASKS_DIFFER = 0.1
# The invariants a t2d of all ones fails; with an all-zero d2t beside it (SpecForge's buffers as
# constructed) they restate the identity mapping and carry no weight here.
DEFAULT_BUFFER_INVARIANTS = ("count", "stored_t2d")
# Most verifier argmaxes fall outside the run's draft vocab: the vocab was built from other
# data (or another tokenizer), so most positions are dropped from the loss by position_mask.
# Weak: it starves training, it does not make the loss random or push it above chance.
W_ARGMAX_OUTSIDE = 0.15
ARGMAX_OUTSIDE_THRESHOLD = 0.5

# -- config_contract ----------------------------------------------------------------------------
# Weights per finding of the config_contract check (core/checks/config_contract.py). A missing or
# mis-sized fc, or aux states switched off beside an fc, make the drafter read nothing it was
# trained on (sglang PR #21272: accept length 1.00): 0.9 / 0.8. A norm the weights and the flags
# disagree on is skipped or left at its initial weights (vLLM PR #38111, SGLang #32226:
# acceptance collapsed): 0.7, like a draft/target hidden mismatch (vLLM #18906). Sizes the config
# states wrongly stop a loader that builds from the config, or make it load the target's head:
# 0.6; aux layers an engine reads one off or from its fallback degrade rather than destroy
# (vLLM PR #43671: position-0 acceptance 10 % vs 45 %): 0.6.
W_CONTRACT_FINDING = {
    "missing_fc": 0.9,
    "fc_width": 0.9,
    "aux_disabled": 0.8,
    "weights_without_flag": 0.7,
    "flag_without_weights": 0.7,
    "draft_hidden_mismatch": 0.7,
    "target_hidden_size_mismatch": 0.6,
    "draft_vocab_size_mismatch": 0.6,
    "draft_vocab_size_missing": 0.6,
    "aux_layer_out_of_range": 0.6,
    "aux_layers_engine_mismatch": 0.6,
    "exclusive_flags": 0.6,
    "target_vocab": 0.6,
    "vocab_size_mismatch": 0.4,
    "flag_not_at_top_level": 0.3,
}
# Missing aux layer ids are right whenever the drafter was trained on the engines' default layers,
# as every trainer's default is, and nothing in the checkpoint says which layers it was trained
# on: alone they are context (no weight). Beside a collapsed serving acceptance they are vLLM PR
# #50170's case (the fallback fed other layers: accept length 1.036): 0.35, which with the
# collapse's own 0.3 passes one half.
W_AUX_IDS_MISSING_WITH_COLLAPSE = 0.35
# A finding that holds for one engine only, when no serving evidence says which engine serves the
# drafter: three quarters of its weight (0.6 -> 0.45), so that one engine's reading alone stays
# below one half; with serving evidence it counts in full for that engine and not for the other.
ONE_ENGINE_UNKNOWN_SERVER = 0.75

# -- mapping_not_in_checkpoint / identity_mapping / mapping_drift ------------------------------
# A run checkpoint without d2t whose draft vocab is smaller than the target's is served with draft
# id i as target id i (NeMo Automodel PR #2447: acceptance collapsed): 0.85, not more because the
# run may publish its drafter through another exporter that writes the mapping. The starting
# drafter without d2t: its rows were trained for a mapping nobody can read back, so the vocab
# comparison cannot run: 0.6.
W_NOT_IN_RUN_CHECKPOINT = 0.85
W_NOT_IN_STARTING_DRAFTER = 0.6
# An all-zero d2t with Vd < V: the draft vocab is target ids 0..Vd-1, which no trainer builds on
# purpose (verl-SpeCo PR #66: SpecForge's and verl's defaults before a mapping is installed); the
# drafter can never propose a later id. 0.8: a tokenizer whose first ids are its most frequent
# tokens makes it a poor rather than a broken drafter.
W_IDENTITY = 0.8
# The mapping changed between two of the run's checkpoints: every changed position's row was
# trained for another token before the change. Weight = W_DRIFT x the share of positions changed,
# the vocab check's rule (a regenerated sorted vocab changes almost every position).
W_DRIFT = 0.9

# -- empty_loss_mask --------------------------------------------------------------------------
# Loss and accuracy both exactly 0 are what an all-zero loss mask produces (ploss is a mean over
# all positions; SpecForge #392). Nothing else gives exactly 0.0 for both: 0.9.
W_LOSS_AND_ACC_ZERO = 0.9
# The loss-mask check (core/checks/loss_mask.py) found most sampled dumps' masks empty: weight =
# this x the share of them (all: 0.8, a little short of certain because the dumps are a sample of
# the data; half: 0.4, the other half still trains).
W_DUMPS_ALL_MASKS_EMPTY = 0.8
# Most masks cover the prompt (position 0 supervised) or supervise no two adjacent tokens: the
# drafter learns text it will never draft, or almost nothing. Either bends a run rather than
# sends it to chance (the loss curve looks plausible: Megatron-Bridge #3359), so alone it ranks
# but stays below 0.5.
W_MASK_OFF_TEMPLATE = 0.4

# -- non_finite_dumps -------------------------------------------------------------------------
# A sampled dump holds NaN/inf hidden states: every batch that draws it trains on NaN, and one
# such step turns every weight NaN (core/checks/dump_values.py). 0.9: short of certain only
# because a trainer may skip non-finite steps.
W_NON_FINITE_DUMPS = 0.9

# -- target_mismatch from the dumps (core/checks/dump_target.py) ------------------------------
# The dumps' last hidden states break the named target's final-norm identity: they were
# normalised with other weights, i.e. captured from another verifier (or stored before the norm
# under SpecForge's after-the-norm key, which misleads the trainer's TargetHead the same way): 0.6,
# enough to convict alone (a measured deviation past rounding), short of the head's 0.7 because
# it assumes an RMSNorm target.
W_DUMPS_NORM_MISMATCH = 0.6
# The named target's lm_head reads the dumped states as noise (its top-1 matches the dumped next
# token under 10 % of the time): the labels the trainer computes from them are not this
# target's, and neither are the aux states of the same forward pass: 0.7.
W_DUMPS_HEAD_NOISE = 0.7

# -- missing_lm_head / non_finite / diverged ----------------------------------------------------
W_MISSING_LM_HEAD = 0.9  # a random head: accept length 1.00 (sglang PR #27908)
W_NON_FINITE = 0.9  # a NaN/inf loss is itself the failure
W_DIVERGING = 0.6  # a rising loss: learning rate or data, the flag cannot tell which

# -- warm_start_broken (core/curve_shapes.py measures the run's start) ---------------------------
# A fine-tune from a good drafter starts near that drafter's accuracy; one that starts near zero
# (SpecForge #300: 0.00-0.03 "for a long time" from lmsys/Qwen3-235B-A22B-EAGLE3) trains something
# else: the weights were not loaded, or were loaded under other names. The replay scores the named
# checkpoint on the run's own dumps with the run's own mapping; when it predicts well there
# (WARM_REPLAY_GOOD) while training's first points are near zero, weight W_WARM_REPLAY x the share of
# the replay's accuracy training lost. Direct evidence (one drafter, the same data and labels): 0.8.
W_WARM_REPLAY = 0.8
# "A good drafter": 20 % top-1 or more in the replay, twice core.signals' accuracy-at-chance line.
WARM_REPLAY_GOOD = 0.20
# The run names its starting checkpoint and starts near chance, with no replay to say whether that
# checkpoint is any good and no failed check to explain it: 0.4, below LIKELY, since a named
# checkpoint need not be a good drafter (only the replay can say so).
W_NAMED_START_COLD = 0.4

# -- ttt_position_collapse (core/curve_shapes.py raises the flag) --------------------------------
# The flag is the measurement itself (position 1 under a quarter of a position 0 that learned); 0.85,
# short of certain because a per-position metric can be biased (speculators PR #902: cond_acc low at
# assistant-span boundaries, by points, not by a factor of four).
W_POSITION_COLLAPSE = 0.85

# -- serving evidence (core/serving/) --------------------------------------------------------
# Serving acceptance collapsed to ~1 (later positions ~0): the engine rejects nearly every draft
# token. A drafter whose rows mean other tokens (vLLM #50170), aux hidden states from other layers
# or another capture convention (SGLang #25454, #30982), or a config flag the engine ignores
# (vLLM #38111, SGLang #32226) all do this, and serving alone cannot tell them apart: the same
# moderate weight for each, below 0.5 so that it ranks, with a check's finding, but never
# convicts alone.
W_SERVING_COLLAPSED = 0.3
# Training's per-position accuracies predict far more than the server accepts: the drafter the
# server runs is fine by training's measure, so the verifier it is checked against (a fine-tuned or
# quantized target: SpecForge #533, vLLM #9534) or the engine's reading of it differs.
W_SERVING_BELOW_TRAINING = 0.45
# The server accepts far more than training's accuracies predict: the drafter works, so the
# training number is not measuring it (mis-read metric, labels built with another mapping: the
# founding case, where the drafter "predicted well in inference" while training sat at chance).
W_SERVING_ABOVE_TRAINING = 0.45
# ... which corroborates a mapping mismatch a check already found (labels, not model, are wrong).
W_SERVING_ABOVE_CORROBORATES = 0.3

LINKS = {
    "config_contract": (
        "https://github.com/vllm-project/vllm/pull/50170",
        "https://github.com/sgl-project/sglang/pull/25454",
        "https://github.com/sgl-project/sglang/issues/32226",
        "https://github.com/vllm-project/vllm/pull/38111",
        "https://github.com/vllm-project/speculators/pull/610",
    ),
    "mapping_not_in_checkpoint": ("https://github.com/NVIDIA-NeMo/Automodel/pull/2447",),
    "identity_mapping": (
        "https://github.com/verl-project/verl-SpeCo/pull/66",
        "https://github.com/SafeAILab/EAGLE/issues/222",
    ),
    "mapping_drift": (
        "https://github.com/sgl-project/SpecForge/pull/534",
        "https://github.com/vllm-project/speculators/pull/1081",
        "https://github.com/NVIDIA-NeMo/Automodel/pull/2467",
    ),
    "target_mismatch": (
        "https://github.com/sgl-project/SpecForge/issues/533",
        "https://github.com/vllm-project/vllm/issues/9534",
    ),
    "training_metric_misread": ("https://github.com/vllm-project/vllm/issues/42508",),
    "warm_start_broken": ("https://github.com/sgl-project/SpecForge/issues/300",),
    "ttt_position_collapse": (
        "https://github.com/vllm-project/speculators/pull/818",
        "https://github.com/sgl-project/SpecForge/issues/424",
    ),
    # NaN from the first step: the model as built (speculators #238, num_layers 2) or its inputs
    # (NaN hidden states in the dumps: SpecForge #104).
    "non_finite_from_start": (
        "https://github.com/vllm-project/speculators/issues/238",
        "https://github.com/sgl-project/SpecForge/issues/104",
    ),
    "empty_loss_mask": (
        "https://github.com/sgl-project/SpecForge/issues/392",
        "https://github.com/NickL77/BaldEagle/issues/4",
        "https://github.com/SafeAILab/EAGLE/issues/286",
        "https://github.com/sgl-project/SpecForge/issues/296",
        "https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/3359",
    ),
    "non_finite_dumps": ("https://github.com/sgl-project/SpecForge/issues/104",),
}

CHANCE_SYMPTOMS = ("loss_at_chance", "loss_above_chance", "accuracy_at_chance")


@dataclass(frozen=True)
class Hypothesis:
    """One possible cause, scored in [0, 1], with one-line evidence carrying numbers."""

    id: str
    title: str
    score: float
    evidence: tuple[str, ...]
    action: str | None = None
    links: tuple[str, ...] = ()  # public issues the cause is known from
    # The checks whose details stand behind it, for the drill-down (not in the JSON); () = all.
    checks: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "score": round(self.score, 4),
            "evidence": list(self.evidence),
            "action": self.action,
            "links": list(self.links),
        }


class _Evidence:
    """Accumulates (weight, line) pairs and combines them as a noisy-OR."""

    def __init__(self) -> None:
        self.items: list[tuple[float, str]] = []

    def add(self, weight: float, line: str) -> None:
        self.items.append((min(max(float(weight), 0.0), 1.0), line))

    def note(self, line: str) -> None:
        """Context that carries no weight (why a hypothesis is *not* supported, say)."""
        self.items.append((0.0, line))

    @property
    def structural(self) -> bool:
        return any(w > 0 for w, _ in self.items)

    def score(self) -> float:
        remaining = 1.0
        for weight, _ in self.items:
            remaining *= 1.0 - weight
        return 1.0 - remaining

    def lines(self) -> tuple[str, ...]:
        return tuple(line for _, line in self.items)


@dataclass(frozen=True)
class RunEvidence:
    """Everything a hypothesis function may weigh: the checks' results, the run's flags (and those
    of them that are chance-level symptoms), the scan's metrics, the serving comparison."""

    checks: Mapping[str, CheckResult]
    flags: Sequence[Flag] = ()
    metrics: Mapping[str, Any] | None = None
    serving: ServingComparison | None = None
    start: RunStart | None = None  # the run's first logged points (core/curve_shapes.py)
    starting_checkpoint: StartingCheckpoint | None = None  # the checkpoint checked, and who named it

    @property
    def symptoms(self) -> list[Flag]:
        return [f for f in self.flags if f.kind in CHANCE_SYMPTOMS]

    # The details types are imported on call: the checks bring torch, and the TUI imports this
    # module (LIKELY) at start-up, before any check ran.

    def vocab(self) -> VocabDetails | None:
        from triage_tui.core.checks.vocab import NAME, VocabDetails

        return ran_details(self.checks, NAME, VocabDetails)

    def hidden(self) -> HiddenStateDetails | None:
        from triage_tui.core.checks.hidden_state import NAME, HiddenStateDetails

        return ran_details(self.checks, NAME, HiddenStateDetails)

    def mask(self) -> VerifierMaskDetails | None:
        from triage_tui.core.checks.verifier_mask import NAME, VerifierMaskDetails

        return ran_details(self.checks, NAME, VerifierMaskDetails)

    def replay(self) -> ReplayDetails | None:
        from triage_tui.core.checks.replay import NAME, ReplayDetails

        return ran_details(self.checks, NAME, ReplayDetails)

    def contract(self) -> ConfigContractDetails | None:
        from triage_tui.core.checks.config_contract import NAME, ConfigContractDetails

        return ran_details(self.checks, NAME, ConfigContractDetails)

    def mapping_health(self) -> MappingHealthDetails | None:
        from triage_tui.core.checks.mapping_health import NAME, MappingHealthDetails

        return ran_details(self.checks, NAME, MappingHealthDetails)

    def issues(self, kind: str) -> list[HiddenIssue]:
        hidden = self.hidden()
        return [i for i in hidden.issues if i.kind == kind] if hidden is not None else []


# A hypothesis function: the evidence in, a scored Hypothesis out, or None when it has nothing to
# say (only the always-present ones of docs/contracts.md must return one every time).
HypothesisFunction = Callable[[RunEvidence], Hypothesis | None]


def rank_hypotheses(
    checks: Mapping[str, CheckResult],
    flags: Sequence[Flag] = (),
    *,
    metrics: Mapping[str, Any] | None = None,
    serving: ServingComparison | None = None,
    start: RunStart | None = None,
    starting_checkpoint: StartingCheckpoint | None = None,
) -> list[Hypothesis]:
    """Score every cause the evidence can speak to (``HYPOTHESES``), best first.

    ``metrics`` is the scan's ``{"loss": {"last", ...}, "accuracy": {...}}`` (RunStatus.metrics),
    used for what no flag states, such as a loss and accuracy of exactly zero. ``serving`` is what
    the serving engine accepted beside the training estimate (core/serving/); with it, the
    hypotheses only serving speaks to (config_contract) are listed too; target_mismatch is
    always listed, from serving and from the dumps.
    """
    evidence = RunEvidence(checks, flags, metrics, serving, start, starting_checkpoint)
    hypotheses = [h for score in HYPOTHESES if (h := score(evidence)) is not None]
    # Stable sort: ties keep HYPOTHESES' order (the always-present ones first).
    return sorted(hypotheses, key=lambda h: -h.score)


def _corroborate(evidence: _Evidence, symptoms: Sequence[Flag]) -> None:
    if evidence.structural and symptoms:
        flag = symptoms[0]
        evidence.add(W_SYMPTOM_CORROBORATES, f"run flag {flag.kind}: {flag.message}")


def _serving_collapsed(ev: _Evidence, serving: ServingComparison | None) -> None:
    finding = serving.finding("acceptance_collapsed") if serving is not None else None
    if finding is not None:
        ev.add(W_SERVING_COLLAPSED, f"serving: {finding.message}")


def vocab_mapping_mismatch(run: RunEvidence) -> Hypothesis:
    ev = _Evidence()
    vocab_result = run.checks.get("vocab_mapping")
    vocab = run.vocab()
    if vocab is not None:
        fraction = vocab.positional_match_fraction
        line = (
            f"{vocab.positional_match} / {vocab.draft_vocab_size} draft positions map to the same target "
            f"token in the checkpoint's and the run's mapping ({fraction:.2%})"
        )
        if vocab_result is not None and vocab_result.status == "fail":
            ev.add(W_VOCAB_CHECK * (1.0 - fraction), line)
            tokens = vocab.training_tokens
            if tokens is not None and tokens.same_row_fraction is not None:
                ev.note(
                    f"{tokens.same_row_fraction:.1%} of {tokens.tokens} loss-masked training tokens land "
                    f"on the lm_head row trained for them"
                )
        else:
            ev.note(line)
    replay = run.replay()
    if replay is not None:
        own, other = replay.accuracy_checkpoint_mapping, replay.accuracy_run_mapping
        if other is not None:
            line = (
                f"replay on {replay.tokens} tokens: accuracy {own:.1%} with the checkpoint's mapping, "
                f"{other:.1%} with the run's"
            )
            if own - other >= MIN_REPLAY_GAP:
                ev.add(W_REPLAY_GAP * (own - other) / own, line)
            else:
                ev.note(line)
    above = [f for f in run.flags if f.kind == "loss_above_chance"]
    mappings_agree = vocab is not None and vocab_result is not None and vocab_result.status == "pass"
    if above and mappings_agree:
        ev.note(
            f"run flag loss_above_chance: {above[0].message}; the vocab check found the mappings in agreement, "
            "so the symptom does not point at them"
        )
    elif above:
        ev.add(W_ABOVE_CHANCE_ALONE, f"run flag loss_above_chance: {above[0].message}")
    else:
        _corroborate(ev, run.symptoms)
    serving_above = run.serving.finding("serving_above_training") if run.serving is not None else None
    if serving_above is not None:
        if ev.structural:
            ev.add(W_SERVING_ABOVE_CORROBORATES, f"serving: {serving_above.message}")
        else:
            ev.note(f"serving: {serving_above.message}")
    _serving_collapsed(ev, run.serving)
    return Hypothesis(
        "vocab_mapping_mismatch",
        "The checkpoint's lm_head rows are ordered for another vocab mapping than the run's",
        ev.score(),
        ev.lines(),
        "remap",
        checks=("vocab_mapping", "replay"),
    )


def hidden_state_format(run: RunEvidence) -> Hypothesis:
    ev = _Evidence()
    hidden = run.hidden()
    if hidden is not None:
        for issue in hidden.issues:
            weight = W_HIDDEN_ISSUE.get(issue.kind)
            if weight is not None and issue.severity == "error":
                ev.add(weight, issue.message)
        if not ev.structural:
            result = run.checks["hidden_state"]
            ev.note(f"hidden-state check {result.status}: {result.summary}")
    replay = run.replay()
    if replay is not None and replay.accuracy_by_chunk_order:
        orders = replay.accuracy_by_chunk_order
        stored = orders.get("0,1,2")
        best_order, best = max(orders.items(), key=lambda kv: kv[1])
        if stored is not None and best_order != "0,1,2" and best - stored >= MIN_REPLAY_GAP:
            ev.add(
                W_REPLAY_CHUNK_ORDER * (best - stored) / best,
                f"replay accuracy {best:.1%} with aux chunks in order {best_order}, {stored:.1%} as stored",
            )
    _corroborate(ev, run.symptoms)
    _serving_collapsed(ev, run.serving)
    return Hypothesis(
        "hidden_state_format",
        "The hidden-state dumps are not what the drafter's fc was trained to read",
        ev.score(),
        ev.lines(),
        None,
        checks=("hidden_state", "replay"),
    )


def verifier_mask_mismatch(run: RunEvidence) -> Hypothesis:
    ev = _Evidence()
    mask = run.mask()
    # A t2d of all ones beside an all-zero d2t is SpecForge's untouched default buffers: the mask
    # is as wrong as the d2t because no mapping was ever installed, which identity_mapping weighs.
    health = run.mapping_health()
    default_buffers = health is not None and any(f.default_buffers for f in health.found("identity_mapping"))
    if mask is not None:
        for inv in mask.invariants:
            if inv.ok:
                continue
            line = f"{inv.name}: {inv.detail}"
            if default_buffers and inv.kind in DEFAULT_BUFFER_INVARIANTS:
                ev.note(f"{line} (SpecForge's default buffers: see identity_mapping)")
                continue
            if not inv.required:
                if inv.kind == "masks_equal":
                    ev.add(W_MASKS_DIFFER, line)
                else:
                    ev.note(line)
                continue
            ev.add(W_MASK_INVARIANT.get(inv.kind, 0.6), line)
        outside = mask.target_argmax_outside_draft_vocab
        share = outside.run if outside is not None else None
        if share is not None and share > ARGMAX_OUTSIDE_THRESHOLD:
            ev.add(W_ARGMAX_OUTSIDE, f"{share:.1%} of verifier argmaxes fall outside the run's draft vocab")
        if not ev.items:
            result = run.checks["verifier_mask"]
            ev.note(f"verifier-mask check {result.status}: {result.summary}")
    # Only a failed required invariant is structural evidence here; differing masks follow from
    # a differing mapping and should not pull in the chance-level symptom.
    if any(w >= LIKELY for w, _ in ev.items):
        _corroborate(ev, run.symptoms)
    return Hypothesis(
        "verifier_mask_mismatch",
        "The verifier mask (t2d) does not select target logits in the drafter's row order",
        ev.score(),
        ev.lines(),
        None,
        checks=("verifier_mask", "replay"),
    )


def config_contract(run: RunEvidence) -> Hypothesis:
    ev = _Evidence()
    contract = run.contract()
    engine = run.serving.serving.engine if run.serving is not None else None
    collapsed = run.serving is not None and run.serving.finding("acceptance_collapsed") is not None
    if contract is not None:
        for finding in contract.findings:
            line = f"{finding.message} ({finding.link})" if finding.link else finding.message
            if finding.kind == "aux_layer_ids_missing":
                if collapsed:
                    ev.add(W_AUX_IDS_MISSING_WITH_COLLAPSE, line)
                else:
                    ev.note(line)
                continue
            weight = W_CONTRACT_FINDING.get(finding.kind)
            if weight is None:
                continue  # missing_lm_head is a hypothesis of its own
            if finding.engine is not None and engine is not None and finding.engine != engine:
                ev.note(f"not the engine serving it ({engine}): {line}")
                continue
            if finding.engine is not None and engine is None:
                weight *= ONE_ENGINE_UNKNOWN_SERVER
            ev.add(weight, line)
        if not ev.items:
            ev.note(
                f"config contract check {run.checks['config_contract'].status}: {run.checks['config_contract'].summary}"
            )
    # A chance-level run corroborates a finding strong enough to explain it, not a weak warning.
    if any(w >= LIKELY for w, _ in ev.items):
        _corroborate(ev, run.symptoms)
    _serving_collapsed(ev, run.serving)
    if run.serving is not None and not collapsed:
        ev.note(f"serving acceptance length {_length(run.serving)}: not collapsed")
    return Hypothesis(
        "config_contract",
        "The drafter's config asks for something its weights or the serving engine do not give "
        "(aux layer ids, fc width, norm flags, vocab sizes)",
        ev.score(),
        ev.lines(),
        None,
        LINKS["config_contract"],
        checks=("config_contract",),
    )


def mapping_not_in_checkpoint(run: RunEvidence) -> Hypothesis:
    ev = _Evidence()
    health = run.mapping_health()
    if health is not None:
        for finding in health.found("mapping_not_in_checkpoint"):
            weight = W_NOT_IN_RUN_CHECKPOINT if finding.role == "run checkpoint" else W_NOT_IN_STARTING_DRAFTER
            ev.add(weight, finding.message)
        for finding in health.found("unknown_target_vocab"):
            ev.note(finding.message)
        if any(w > 0 for w, _ in ev.items):
            _corroborate(ev, run.symptoms)
        else:
            ev.note(f"every checkpoint read holds its d2t, or needs none ({len(health.checkpoints)} read)")
    return Hypothesis(
        "mapping_not_in_checkpoint",
        "A checkpoint holds no d2t/t2d while its draft vocab is smaller than the target's: "
        "engines serve draft id i as target id i",
        ev.score(),
        ev.lines(),
        None,
        LINKS["mapping_not_in_checkpoint"],
        checks=("mapping_health",),
    )


def identity_mapping(run: RunEvidence) -> Hypothesis:
    ev = _Evidence()
    health = run.mapping_health()
    if health is not None:
        for finding in health.found("identity_mapping"):
            ev.add(W_IDENTITY, finding.message)
        if ev.structural:
            _corroborate(ev, run.symptoms)
        else:
            ev.note("no mapping read is the identity (an all-zero d2t) with a draft vocab smaller than the target's")
    return Hypothesis(
        "identity_mapping",
        "The vocab mapping is the identity (d2t all zeros): the draft vocab is the first Vd target ids",
        ev.score(),
        ev.lines(),
        None,
        LINKS["identity_mapping"],
        checks=("mapping_health",),
    )


def mapping_drift(run: RunEvidence) -> Hypothesis:
    ev = _Evidence()
    health = run.mapping_health()
    if health is not None:
        for finding in health.found("mapping_drift"):
            ev.add(W_DRIFT * (finding.fraction or 0.0), finding.message)
        if any(w >= LIKELY for w, _ in ev.items):
            _corroborate(ev, run.symptoms)
        if not ev.items:
            steps = len(health.drift)
            ev.note(
                f"the mapping is the same in all {steps + 1} run checkpoints that hold one"
                if steps
                else "fewer than two run checkpoints hold a mapping: nothing to compare"
            )
    return Hypothesis(
        "mapping_drift",
        "The vocab mapping changed between the run's checkpoints (a resume regenerated it)",
        ev.score(),
        ev.lines(),
        None,
        LINKS["mapping_drift"],
        checks=("mapping_health",),
    )


def target_mismatch(run: RunEvidence) -> Hypothesis:
    from triage_tui.core.checks.dump_target import DumpTargetDetails

    ev = _Evidence()
    serving = run.serving
    if serving is not None:
        below = serving.finding("serving_below_training")
        if below is not None:
            ev.add(W_SERVING_BELOW_TRAINING, f"serving: {below.message}")
        elif serving.training is not None:
            ev.note(f"training estimates {serving.training.acceptance_length:.2f}, serving accepts {_length(serving)}")
        else:
            ev.note("the run logs no per-position accuracy (acc_i, full_acc_i, cond_acc_i) to compare serving with")
    dumps = ran_details(run.checks, "dump_target", DumpTargetDetails)
    if dumps is not None:
        if dumps.norm_mismatch:
            ev.add(W_DUMPS_NORM_MISMATCH, dumps.norm_line())
        if dumps.head_noise:
            ev.add(W_DUMPS_HEAD_NOISE, dumps.head_line())
        if not (dumps.norm_mismatch or dumps.head_noise):
            ev.note(f"dumps against the target: {run.checks['dump_target'].summary}")
    if not ev.items:
        ev.note("no serving evidence, and no dumps compared with the target (pass --data and --target)")
    return Hypothesis(
        "target_mismatch",
        "The verifier the drafter learns from or is served with is not the target the run names "
        "(another model, a fine-tuned or quantized copy)",
        ev.score(),
        ev.lines(),
        None,
        LINKS["target_mismatch"],
        checks=("dump_target",),
    )


def aux_layer_off_by_one(run: RunEvidence) -> Hypothesis | None:
    found = run.issues("aux_layer_off_by_one")
    if not found:
        return None
    ev = _Evidence()
    ev.add(W_AUX_OFF_BY_ONE, found[0].message)
    return Hypothesis(
        "aux_layer_off_by_one",
        "The aux hidden states come from layers one off from those the config names",
        ev.score(),
        ev.lines(),
        None,
    )


def missing_lm_head(run: RunEvidence) -> Hypothesis | None:
    contract = run.contract()
    found = [f for f in contract.findings if f.kind == "missing_lm_head"] if contract is not None else []
    if not found:
        return None
    ev = _Evidence()
    ev.add(W_MISSING_LM_HEAD, found[0].message)
    _corroborate(ev, run.symptoms)
    return Hypothesis(
        "missing_lm_head",
        "The checkpoint has no lm_head: the draft head starts random",
        ev.score(),
        ev.lines(),
        None,
        checks=("config_contract",),
    )


def empty_loss_mask(run: RunEvidence) -> Hypothesis:
    from triage_tui.core.checks.loss_mask import LossMaskDetails

    ev = _Evidence()
    loss = (run.metrics or {}).get("loss") or {}
    acc = (run.metrics or {}).get("accuracy") or {}
    if loss.get("last") == 0.0 and acc.get("last") == 0.0:
        ev.add(
            W_LOSS_AND_ACC_ZERO,
            f"{loss.get('tag')} and {acc.get('tag')} are exactly 0 at the last step (SpecForge #392)",
        )
    mask = ran_details(run.checks, "loss_mask", LossMaskDetails)
    if mask is not None and mask.samples:
        n, fraction = len(mask.samples), mask.fraction or 0.0
        if mask.majority(mask.empty):
            ev.add(
                W_DUMPS_ALL_MASKS_EMPTY * mask.share(mask.empty),
                f"{mask.empty} of {n} sampled dumps have an all-zero loss_mask "
                f"({mask.supervised} of {mask.positions} positions supervised)",
            )
        elif mask.empty:
            ev.note(f"{mask.empty} of {n} sampled dumps have an all-zero loss_mask")
        for count, what in (
            (mask.covering_prompt, "supervise position 0: the mask covers the prompt"),
            (mask.starved, "supervise no two adjacent tokens"),
        ):
            if mask.majority(count):
                ev.add(
                    W_MASK_OFF_TEMPLATE, f"{count} of {n} sampled dumps {what} ({fraction:.1%} of positions supervised)"
                )
        if not ev.items:
            ev.note(f"loss mask: {fraction:.1%} of {mask.positions} positions supervised over {n} sampled dumps")
    elif not ev.items:
        ev.note("no dumped loss mask was measured (the loss_mask check needs dumps that store one: --data)")
    return Hypothesis(
        "empty_loss_mask",
        "The loss mask is empty or does not follow the chat template: no token, or the wrong ones, are trained",
        ev.score(),
        ev.lines(),
        None,
        LINKS["empty_loss_mask"],
        checks=("loss_mask",),
    )


def non_finite_dumps(run: RunEvidence) -> Hypothesis:
    from triage_tui.core.checks.dump_values import DumpValuesDetails

    ev = _Evidence()
    values = ran_details(run.checks, "dump_values", DumpValuesDetails)
    if values is not None:
        if values.non_finite:
            ev.add(
                W_NON_FINITE_DUMPS,
                f"{values.files_with_non_finite} of {values.samples} sampled dumps hold NaN/inf hidden states; "
                f"{values.non_finite[0].line()}",
            )
            loss = [f for f in run.flags if f.kind == "non_finite"]
            if loss:
                ev.add(W_SYMPTOM_CORROBORATES, f"run flag non_finite: {loss[0].tag} at step {loss[0].step}")
        else:
            ev.note(f"{values.values} hidden-state values in {values.samples} sampled dumps, all finite")
        for line in values.dtype_findings:
            ev.note(line)
    else:
        ev.note("no hidden-state dumps were read (pass --data)")
    return Hypothesis(
        "non_finite_dumps",
        "The hidden-state dumps hold NaN or inf: every batch that draws one trains on NaN",
        ev.score(),
        ev.lines(),
        None,
        LINKS["non_finite_dumps"],
        checks=("dump_values",),
    )


def non_finite(run: RunEvidence) -> Hypothesis | None:
    found = [f for f in run.flags if f.kind == "non_finite"]
    if not found:
        return None
    flag = found[0]
    ev = _Evidence()
    ev.add(W_NON_FINITE, f"{flag.tag} at step {flag.step}: {flag.message}")
    if not flag.from_start:
        ev.note("finite before: an update broke it (learning rate, fp16 overflow, a bad batch)")
        return Hypothesis("non_finite", "The loss became NaN or infinite", ev.score(), ev.lines(), None)
    ev.note(
        "never finite: nothing trained before it broke, so no learning rate did it; the model as built "
        "(a config the trainer mishandles: num_layers 2 in speculators #238) or its inputs (NaN in the "
        "hidden-state dumps: SpecForge #104)"
    )
    return Hypothesis(
        "non_finite",
        "The loss is NaN from the first step: the model as built or its inputs, not training",
        ev.score(),
        ev.lines(),
        None,
        LINKS["non_finite_from_start"],
    )


def warm_start_broken(run: RunEvidence) -> Hypothesis:
    """A fine-tune from a good drafter whose first logged points are near chance (SpecForge #300)."""
    ev = _Evidence()
    start, checkpoint = run.start, run.starting_checkpoint
    if start is None:
        ev.note("the run logged too few points of accuracy or loss to judge how it started")
    elif not start.near_chance:
        ev.note(f"{start.describe()}: not near chance")
    elif checkpoint is None or not checkpoint.named:
        ev.note(
            f"{start.describe()}; the run names no starting checkpoint (--checkpoint, triage.toml or the "
            "trainer's own record): a run from scratch starts there too"
        )
    elif checkpoint.saved_by_the_run(start):
        ev.note(
            f"{start.describe()}; {checkpoint.path.name} was saved by this run after it started, not where it started"
        )
    else:
        _warm_start_evidence(ev, run, start, checkpoint)
    return Hypothesis(
        "warm_start_broken",
        "The fine-tune did not start from the drafter it names: its first points are near chance",
        ev.score(),
        ev.lines(),
        None,
        LINKS["warm_start_broken"],
        checks=("replay",),
    )


def _warm_start_evidence(ev: _Evidence, run: RunEvidence, start: RunStart, checkpoint: StartingCheckpoint) -> None:
    name = f"{checkpoint.path.name} ({checkpoint.source})"
    failed = [name for name, result in run.checks.items() if result.status == "fail" and name != "replay"]
    if failed:
        ev.note(f"{start.describe()}; the failed {', '.join(failed)} check explains a cold start from {name}")
        return
    replay = run.replay()
    scored = replay.accuracy_run_mapping if replay is not None else None
    if replay is None or scored is None:
        ev.add(W_NAMED_START_COLD, f"{start.describe()}, though the run names {name} as its start")
        return
    line = (
        f"{start.describe()}, yet the replay scores its starting checkpoint {name} at {scored:.1%} top-1 on "
        f"the run's dumps with the run's mapping ({replay.tokens} tokens)"
    )
    lost = scored - (start.accuracy or 0.0)
    if scored >= WARM_REPLAY_GOOD and lost >= MIN_REPLAY_GAP:
        ev.add(W_WARM_REPLAY * lost / scored, line)
    else:
        ev.note(f"{line}: not a good drafter on this data, so a cold start is what it gives")


def ttt_position_collapse(run: RunEvidence) -> Hypothesis:
    """Later TTT positions far below a position 0 that learned (speculators PR #818, SpecForge #424)."""
    ev = _Evidence()
    found = [f for f in run.flags if f.kind == "ttt_position_collapse"]
    if found:
        ev.add(W_POSITION_COLLAPSE, f"run flag ttt_position_collapse: {found[0].message}")
        _serving_collapsed(ev, run.serving)
    elif (run.metrics or {}).get("per_position_accuracy"):
        ev.note("the per-position accuracies after position 0 hold up")
    else:
        ev.note("the run logs no per-position accuracy (acc_i, full_acc_i, cond_acc_i)")
    return Hypothesis(
        "ttt_position_collapse",
        "The later TTT positions do not learn while position 0 does: the training loop feeds them what "
        "inference does not",
        ev.score(),
        ev.lines(),
        None,
        LINKS["ttt_position_collapse"],
    )


def diverged(run: RunEvidence) -> Hypothesis | None:
    found = [f for f in run.flags if f.kind == "diverging"]
    if not found:
        return None
    ev = _Evidence()
    ev.add(W_DIVERGING, f"{found[0].tag} at step {found[0].step}: {found[0].message}")
    return Hypothesis(
        "diverged", "The run diverged (learning rate too high, or bad batches)", ev.score(), ev.lines(), None
    )


def training_metric_misread(run: RunEvidence) -> Hypothesis | None:
    above = run.serving.finding("serving_above_training") if run.serving is not None else None
    if above is None:
        return None
    ev = _Evidence()
    ev.add(W_SERVING_ABOVE_TRAINING, f"serving: {above.message}")
    return Hypothesis(
        "training_metric_misread",
        "Training's accuracy does not measure the drafter the server runs (labels or metric)",
        ev.score(),
        ev.lines(),
        None,
        LINKS["training_metric_misread"],
    )


def _length(serving: ServingComparison) -> str:
    length = serving.serving.acceptance_length
    return f"{length:.2f}" if length is not None else "unknown"


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
)
