"""Causes in what the drafter takes from the target's weights: an embedding that is a fresh init
instead of the target's, a target head a trainer never loaded because the target ties it."""

from __future__ import annotations

from triage_tui.core.diagnose.checks.result import ran_details
from triage_tui.core.diagnose.hypotheses.scoring import (
    W_SYMPTOM_CORROBORATES,
    Evidence,
    Hypothesis,
    RunEvidence,
    serving_collapsed,
)

# -- untrained_embeddings (core/diagnose/checks/embed_tokens.py) ------------------------------------------
# The drafter's stored embed_tokens shares (almost) no row with the target's and its rows point
# elsewhere (mean cosine near 0): an exporter wrote the module's fresh init (TorchSpec #38). vLLM
# serves the drafter with it and accepts almost nothing (vLLM #50158); SGLang replaces it with the
# target's, so the same drafter looks fine there. Measured on the weights themselves: 0.7, short of
# certain because a drafter trained with an embedding of its own would show it too.
W_EMBEDDING_NOT_TARGETS = 0.7
UNTRAINED_EMBEDDINGS_LINKS = (
    "https://github.com/lightseekorg/TorchSpec/issues/38",
    "https://github.com/vllm-project/vllm/issues/50158",
)

# -- tied_target_head (core/diagnose/checks/target_tie.py, the run's curves) ------------------------------
# The target ties its head (tie_word_embeddings: true) and stores no lm_head.weight, and the run's
# per-position loss sits on its chance line (the trainer's own basis) from its first logged points
# on: a trainer that loads the target head by name kept a random one, whose near-uniform targets no
# drafter can beat (SpecForge #473). The structure alone is healthy (most small targets are tied),
# and the curve alone says only that something is wrong: together, with the mapping and the dumps
# checking out, 0.6.
W_TIED_HEAD_CHANCE_FROM_START = 0.6
# The same loss flag with too few points to say how the run started: 0.4, it ranks, it does not convict
# (the accuracy flag corroborates only a run seen at chance from its start).
W_TIED_HEAD_CHANCE = 0.4
# ... and when a check found something else that sends a run to chance (the checks below failed):
# that finding explains the curve as well, so the tie is context.
W_TIED_HEAD_OTHER_FINDING = 0.15
# Checks whose failure alone puts a run at chance: "the mapping and the dumps check out" is them passing.
EXPLAINING_CHECKS = ("vocab_mapping", "verifier_mask", "hidden_state", "dump_target", "loss_mask", "dump_values")
TIED_TARGET_HEAD_LINKS = ("https://github.com/sgl-project/SpecForge/issues/473",)


def untrained_embeddings(run: RunEvidence) -> Hypothesis | None:
    """The drafter's stored embed_tokens is a fresh init, not the target's (TorchSpec #38); listed
    whenever its check is among the results (score 0 when nothing points at it)."""
    from triage_tui.core.diagnose.checks.embed_tokens import NAME, DrafterEmbeddingDetails

    if NAME not in run.checks:
        return None
    ev = Evidence()
    embedding = ran_details(run.checks, NAME, DrafterEmbeddingDetails)
    if embedding is None:
        ev.note(f"embed_tokens check {run.checks[NAME].status}: {run.checks[NAME].summary}")
    elif embedding.not_the_targets:
        ev.add(
            W_EMBEDDING_NOT_TARGETS,
            f"{embedding.line()}: a fresh init (values std {embedding.drafter_std:.4f}, the target's "
            f"{embedding.target_std:.4f}); vLLM serves with it, SGLang replaces it with the target's",
        )
        serving_collapsed(ev, run.serving)
    else:
        ev.note(embedding.line())
    return Hypothesis(
        "untrained_embeddings",
        "The drafter's exported embed_tokens is a fresh random init, not the target's embedding",
        ev.score(),
        ev.lines(),
        "copy the target's model.embed_tokens.weight into the drafter's embed_tokens.weight (or drop the "
        "tensor so that the engine takes the target's), then serve again",
        UNTRAINED_EMBEDDINGS_LINKS,
        checks=(NAME,),
    )


def tied_target_head(run: RunEvidence) -> Hypothesis | None:
    """A tied target stores no lm_head.weight and the run trained against a random head (SpecForge #473);
    listed whenever its check is among the results."""
    from triage_tui.core.diagnose.checks.target_tie import NAME, TargetTieDetails

    if NAME not in run.checks:
        return None
    ev = Evidence()
    tie = ran_details(run.checks, NAME, TargetTieDetails)
    at_chance = next((f for f in run.flags if f.kind == "loss_at_chance"), None)
    if tie is None:
        ev.note(f"target tie check {run.checks[NAME].status}: {run.checks[NAME].summary}")
    elif not tie.head_missing:
        ev.note(tie.line())
    elif at_chance is None:
        ev.note(f"{tie.line()}; the loss is not on its chance line: the trainer found a head")
    else:
        failed = [name for name in EXPLAINING_CHECKS if name in run.checks and run.checks[name].status == "fail"]
        start = run.start
        from_start = start is not None and start.near_chance
        if failed:
            weight = W_TIED_HEAD_OTHER_FINDING
        else:
            weight = W_TIED_HEAD_CHANCE_FROM_START if from_start else W_TIED_HEAD_CHANCE
        curve = f"run flag loss_at_chance: {at_chance.message}"
        if start is not None:
            curve += f"; {start.describe()}" + ("" if from_start else ", not near chance")
        ev.add(weight, f"{tie.line()}, and {curve}")
        if failed:
            ev.note(f"the {', '.join(failed)} check failed, which puts a run at chance by itself")
        accuracy = next((f for f in run.flags if f.kind == "accuracy_at_chance"), None)
        if accuracy is not None and weight >= W_TIED_HEAD_CHANCE_FROM_START:
            ev.add(W_SYMPTOM_CORROBORATES, f"run flag accuracy_at_chance: {accuracy.message}")
    return Hypothesis(
        "tied_target_head",
        "The target ties its head to its embedding and stores no lm_head.weight: the trainer kept a random "
        "head, so its targets are near-uniform and the loss never leaves the chance line",
        ev.score(),
        ev.lines(),
        "load the target head from model.embed_tokens.weight when tie_word_embeddings is true (or save the "
        "target with an explicit lm_head.weight) and train again",
        TIED_TARGET_HEAD_LINKS,
        checks=(NAME,),
    )
