"""Target-tie check: does the target tie its head to its embedding and store no ``lm_head.weight``?

A target with ``tie_word_embeddings: true`` (Qwen3 up to 4B, Llama 3.2 1B/3B, Gemma) stores no
``lm_head.weight``: its head is ``model.embed_tokens.weight``. A trainer that loads the target's
head by that name from the index keeps a randomly initialised head (SpecForge #473): its targets
are then near-uniform and the drafter's loss sits on the chance line from the first step on.
Nothing is wrong with such a target, so this check only states the structure (the config's flag,
the tensors its weights hold, from the headers and the index alone); ``tied_target_head`` weighs it
against the run's curves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from triage_tui.core.diagnose.checks.result import CheckResult

NAME = "target_tie"


@dataclass(frozen=True)
class TargetTieDetails:
    target: str
    tie_word_embeddings: bool | None  # config.json's flag; None when it says nothing
    tied: bool  # the head is the embedding (the flag, or transformers' default for a missing head)
    lm_head_stored: str | None  # the stored name of the head, None when the weights hold none
    embed_tokens: str | None  # the stored name of the embedding

    @property
    def head_missing(self) -> bool:
        """Tied, and no head stored: a trainer loading ``lm_head.weight`` by name finds nothing."""
        return self.tied and self.lm_head_stored is None

    def line(self) -> str:
        flag = "unset" if self.tie_word_embeddings is None else str(self.tie_word_embeddings).lower()
        stored = (
            f"store {self.lm_head_stored}"
            if self.lm_head_stored
            else f"store no lm_head.weight (its head is {self.embed_tokens})"
        )
        return f"the target's config.json says tie_word_embeddings: {flag}; its weights {stored}"

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "tie_word_embeddings": self.tie_word_embeddings,
            "tied": self.tied,
            "lm_head_stored": self.lm_head_stored,
            "embed_tokens": self.embed_tokens,
            "head_missing": self.head_missing,
        }

    def drilldown(self) -> list[str]:
        lines = [f"target {self.target}", self.line()]
        if self.head_missing:
            lines.append(
                "a trainer that loads lm_head.weight by name keeps a random head (SpecForge #473): "
                "its targets are near-uniform and the loss stays on the chance line"
            )
        return lines


def check_target_tie(target: Any) -> CheckResult:
    """The target's tie flag and whether its weights hold an ``lm_head.weight`` (headers and index only)."""
    if target is None:
        return CheckResult.skipped(NAME, "no target model to read the head of: pass --target")
    names = target.tensor_names
    details = TargetTieDetails(
        target=str(target.path),
        tie_word_embeddings=target.tie_word_embeddings,
        tied=bool(target.tied),
        lm_head_stored=names.get("lm_head"),
        embed_tokens=names.get("embed_tokens"),
    )
    return CheckResult(NAME, "pass", details.line(), details, (details.line(),))
