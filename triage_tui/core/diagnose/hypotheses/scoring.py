"""How a cause is scored: ``Hypothesis``, the evidence a cause may weigh (``RunEvidence``), the
noisy-OR that combines it, ``LIKELY``, and the weights and links more than one family uses.

Every piece of evidence for a hypothesis carries a weight w in [0, 1], the probability-like strength
with which that piece alone would convince us, and the pieces combine as ``1 - prod(1 - w_i)`` (a
noisy-OR). Independent evidence therefore adds up without ever passing 1, one strong piece suffices,
and many weak pieces stay weak. Each weight is a named constant with the reason for its size, beside
the cause that uses it (``core/diagnose/hypotheses/<family>.py``); all of them are on this one scale. Symptoms
from the loss curve (a loss at or above chance) say that *something* is wrong, not what: they add
weight to a hypothesis only when a check already found structural evidence for it, except the one
symptom that points at one cause (``mapping.W_ABOVE_CHANCE_ALONE``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triage_tui.core.diagnose.checks.result import CheckResult, ran_details

if TYPE_CHECKING:
    from triage_tui.core.diagnose.checks.config_contract import ConfigContractDetails
    from triage_tui.core.diagnose.checks.hidden_state import HiddenIssue, HiddenStateDetails
    from triage_tui.core.diagnose.checks.mapping_health import MappingHealthDetails
    from triage_tui.core.diagnose.checks.replay import ReplayDetails
    from triage_tui.core.diagnose.checks.verifier_mask import VerifierMaskDetails
    from triage_tui.core.diagnose.checks.vocab import VocabDetails
    from triage_tui.core.formats.engine_launch import EngineLaunch
    from triage_tui.core.watch.best_checkpoint import AcceptanceHistory
    from triage_tui.core.watch.curve_shapes import RunStart, StartingCheckpoint
    from triage_tui.core.watch.serving.compare import ServingComparison
    from triage_tui.core.watch.signals.flags import Flag
    from triage_tui.core.watch.signals.metrics import RunMetrics


# A hypothesis scoring at least this is "likely": `triage check` exits 1 and marks it "!", the TUI
# shows it in red, and a healthy run scores nothing this high (docs/contracts.md). One half: the
# noisy-OR reaches it with one strong structural finding, never with symptoms alone.
LIKELY = 0.5
# A gap below 5 points is noise for a few thousand replayed tokens (std of an accuracy near 0.5
# over 4096 tokens is 0.8 points; 5 points is > 6 sigma) or a drafter that predicts nothing.
MIN_REPLAY_GAP = 0.05
# Any chance-level symptom (loss at/above chance, accuracy at chance) corroborating a
# structural finding: it shows the finding matters for this run.
W_SYMPTOM_CORROBORATES = 0.3

# -- serving evidence (core/watch/serving/) --------------------------------------------------------
# Serving acceptance collapsed to ~1 (later positions ~0): the engine rejects nearly every draft
# token. A drafter whose rows mean other tokens (vLLM #50170), aux hidden states from other layers
# or another capture convention (SGLang #25454, #30982), or a config flag the engine ignores
# (vLLM #38111, SGLang #32226) all do this, and serving alone cannot tell them apart: the same
# moderate weight for each, below 0.5 so that it ranks, with a check's finding, but never
# convicts alone.
W_SERVING_COLLAPSED = 0.3

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
    "algorithm_flag": ("https://github.com/sgl-project/sglang/pull/21272",),
    "backbone_fallback": (
        "https://github.com/vllm-project/speculators/issues/796",
        "https://github.com/vllm-project/vllm/pull/43132",
    ),
    "rope_layout": (
        "https://github.com/vllm-project/vllm/issues/53063",
        "https://github.com/vllm-project/vllm/pull/54373",
        "https://github.com/NVIDIA/TensorRT-LLM/pull/19036",
    ),
    "past_acceptance_peak": ("https://github.com/deepseek-ai/DeepSpec/issues/84",),
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


class Evidence:
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
    metrics: RunMetrics | None = None
    serving: ServingComparison | None = None
    start: RunStart | None = None  # the run's first logged points (core/watch/curve_shapes.py)
    starting_checkpoint: StartingCheckpoint | None = None  # the checkpoint checked, and who named it
    launches: tuple[EngineLaunch, ...] = ()  # how the serving engine was launched (its log, a command line)
    acceptance: AcceptanceHistory | None = None  # held-out acceptance over the run, for past_acceptance_peak

    @property
    def symptoms(self) -> list[Flag]:
        return [f for f in self.flags if f.kind in CHANCE_SYMPTOMS]

    # The details types are imported on call: the checks bring torch, and the TUI imports this
    # module (LIKELY) at start-up, before any check ran.

    def vocab(self) -> VocabDetails | None:
        from triage_tui.core.diagnose.checks.vocab import NAME, VocabDetails

        return ran_details(self.checks, NAME, VocabDetails)

    def hidden(self) -> HiddenStateDetails | None:
        from triage_tui.core.diagnose.checks.hidden_state import NAME, HiddenStateDetails

        return ran_details(self.checks, NAME, HiddenStateDetails)

    def mask(self) -> VerifierMaskDetails | None:
        from triage_tui.core.diagnose.checks.verifier_mask import NAME, VerifierMaskDetails

        return ran_details(self.checks, NAME, VerifierMaskDetails)

    def replay(self) -> ReplayDetails | None:
        from triage_tui.core.diagnose.checks.replay import NAME, ReplayDetails

        return ran_details(self.checks, NAME, ReplayDetails)

    def contract(self) -> ConfigContractDetails | None:
        from triage_tui.core.diagnose.checks.config_contract import NAME, ConfigContractDetails

        return ran_details(self.checks, NAME, ConfigContractDetails)

    def mapping_health(self) -> MappingHealthDetails | None:
        from triage_tui.core.diagnose.checks.mapping_health import NAME, MappingHealthDetails

        return ran_details(self.checks, NAME, MappingHealthDetails)

    def issues(self, kind: str) -> list[HiddenIssue]:
        hidden = self.hidden()
        return [i for i in hidden.issues if i.kind == kind] if hidden is not None else []


# A hypothesis function: the evidence in, a scored Hypothesis out, or None when it has nothing to
# say (only the always-present ones of docs/contracts.md must return one every time).
HypothesisFunction = Callable[[RunEvidence], Hypothesis | None]


def corroborate(evidence: Evidence, symptoms: Sequence[Flag]) -> None:
    if evidence.structural and symptoms:
        flag = symptoms[0]
        evidence.add(W_SYMPTOM_CORROBORATES, f"run flag {flag.kind}: {flag.message}")


def serving_collapsed(ev: Evidence, serving: ServingComparison | None, ruled_out: str | None = None) -> None:
    """A serving collapse weighs for each cause it may come from (W_SERVING_COLLAPSED), unless a
    check's finding rules this cause out: ``ruled_out`` says which, and the collapse is then a note.
    Serving alone cannot tell the causes apart; a check that looked at one can."""
    finding = serving.finding("acceptance_collapsed") if serving is not None else None
    if finding is None:
        return
    if ruled_out is not None:
        ev.note(f"serving: {finding.message}; {ruled_out}, so the collapse does not point here")
    else:
        ev.add(W_SERVING_COLLAPSED, f"serving: {finding.message}")
