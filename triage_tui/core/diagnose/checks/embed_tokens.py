"""Drafter-embedding check: is the drafter's ``embed_tokens`` the target's, or a fresh init?

An EAGLE-3 drafter embeds its input tokens with the target's embedding, frozen (SpecForge and
speculators load ``model.embed_tokens.weight`` from the target). A drafter that stores an
``embed_tokens`` of its own is served with it by vLLM, while SGLang replaces it with the target's;
an exporter that wrote the module's fresh random init instead (TorchSpec #38, vLLM #50158) leaves
a drafter that is fine under SGLang and accepts almost nothing under vLLM.

The comparison reads a sample of rows from both, never the whole tensors (a K2 embedding is
[163 840, 7168], 2.3 GB in bf16): SAMPLE_SPANS runs of SPAN_ROWS consecutive rows (one read each),
spread evenly over the vocab. Per row: equal within rounding, and the cosine between the two.
A random init has no row equal and a mean cosine near 0; a copy has every row equal. The scale of
the values is no evidence: a fresh init at std 0.02 looks like a real embedding's std.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from triage_tui.core.diagnose.checks.result import CheckResult
from triage_tui.core.formats.checkpoint import EMBED

NAME = "embed_tokens"

SAMPLE_SPANS = 16
SPAN_ROWS = 64  # 16 x 64 = 1 024 rows: a share over them has a standard error under 1.6 points
# A row is "equal" when no element differs by more than this share of the row's largest value:
# twice bfloat16's relative rounding (2^-8), so a copy stored in another float dtype still counts.
EQUAL_TOLERANCE = 2.0**-7
# A fresh init shares no row with the target (measured: 0 of 1 024) and its rows point anywhere
# (mean cosine within a few hundredths of 0 at any width: the std of a cosine between independent
# vectors is 1/sqrt(H)). Under 1 % equal rows and a mean cosine under 0.1 is not the target's
# embedding; a drafter that trained its copy of the embedding keeps cosines near 1.
MAX_EQUAL_SHARE = 0.01
MAX_COSINE = 0.1


@dataclass(frozen=True)
class DrafterEmbeddingDetails:
    checkpoint: str
    target: str
    rows_compared: int
    equal_rows: int
    mean_cosine: float
    drafter_std: float
    target_std: float
    drafter_dtype: str
    target_dtype: str
    notes: tuple[str, ...] = ()

    @property
    def equal_share(self) -> float:
        return self.equal_rows / self.rows_compared if self.rows_compared else 0.0

    @property
    def not_the_targets(self) -> bool:
        """The drafter's embedding is no copy of the target's and points elsewhere: a fresh init."""
        return self.rows_compared > 0 and self.equal_share < MAX_EQUAL_SHARE and abs(self.mean_cosine) < MAX_COSINE

    def line(self) -> str:
        return (
            f"{self.equal_rows} of {self.rows_compared} sampled rows ({self.equal_share:.1%}) of the drafter's "
            f"embed_tokens equal the target's model.embed_tokens.weight; mean row cosine {self.mean_cosine:.3f}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "target": self.target,
            "rows_compared": self.rows_compared,
            "equal_rows": self.equal_rows,
            "equal_share": self.equal_share,
            "mean_cosine": self.mean_cosine,
            "drafter_std": self.drafter_std,
            "target_std": self.target_std,
            "drafter_dtype": self.drafter_dtype,
            "target_dtype": self.target_dtype,
            "max_equal_share": MAX_EQUAL_SHARE,
            "max_cosine": MAX_COSINE,
            "not_the_targets": self.not_the_targets,
            "notes": list(self.notes),
        }

    def drilldown(self) -> list[str]:
        return [
            self.line(),
            f"values: drafter std {self.drafter_std:.4f} ({self.drafter_dtype}), target std {self.target_std:.4f} "
            f"({self.target_dtype}); the scale alone says nothing (a fresh init at 0.02 looks like a real one)",
            f"a fresh init: under {MAX_EQUAL_SHARE:.0%} equal rows and |mean cosine| under {MAX_COSINE}",
            *self.notes,
        ]


def sample_spans(rows: int, spans: int = SAMPLE_SPANS, length: int = SPAN_ROWS) -> list[tuple[int, int]]:
    """`spans` runs of `length` consecutive rows spread evenly over ``range(rows)``, first and last included."""
    if rows <= spans * length:
        return [(0, rows)] if rows > 0 else []
    starts = np.linspace(0, rows - length, spans).round().astype(int)
    return [(int(s), int(s) + length) for s in starts]


@torch.no_grad()
def check_embed_tokens(checkpoint: Any, target: Any) -> CheckResult:
    """A sample of the drafter's ``embed_tokens`` rows against the target's ``model.embed_tokens.weight``."""
    if checkpoint is None:
        return CheckResult.skipped(NAME, "no drafter checkpoint found for this run (pass --checkpoint)")
    info = checkpoint.tensors.get(EMBED)
    if info is None:
        return CheckResult.skipped(NAME, "the drafter stores no embed_tokens: engines and trainers use the target's")
    if target is None:
        return CheckResult.skipped(NAME, "no target model to compare the drafter's embed_tokens with: pass --target")
    if int(info.shape[1]) != int(target.hidden_size):
        return CheckResult.skipped(
            NAME,
            f"the drafter's embed_tokens is {info.shape[1]} wide, the target's hidden size {target.hidden_size}: "
            "it cannot be the target's embedding (config_contract judges the widths)",
        )
    notes = []
    rows = min(int(info.shape[0]), int(target.vocab_size))
    if int(info.shape[0]) != int(target.vocab_size):
        notes.append(f"the drafter's embed_tokens has {info.shape[0]} rows, the target's {target.vocab_size}")
    spans = sample_spans(rows)
    drafter = torch.cat(checkpoint.rows(EMBED, spans)).float()
    ids = torch.cat([torch.arange(start, stop) for start, stop in spans])
    theirs = target.embed_rows(ids).float()
    scale = theirs.abs().amax(dim=-1).clamp_min(torch.finfo(torch.float32).tiny)
    equal = (drafter - theirs).abs().amax(dim=-1) <= EQUAL_TOLERANCE * scale
    norms = drafter.norm(dim=-1) * theirs.norm(dim=-1)
    has_norm = norms > 0
    cosines = (drafter * theirs).sum(-1)[has_norm] / norms[has_norm]
    details = DrafterEmbeddingDetails(
        checkpoint=str(checkpoint.path),
        target=str(getattr(target, "path", "")),
        rows_compared=int(ids.numel()),
        equal_rows=int(equal.sum()),
        mean_cosine=float(cosines.mean()) if cosines.numel() else 0.0,
        drafter_std=float(drafter.std()),
        target_std=float(theirs.std()),
        drafter_dtype=str(info.dtype),
        target_dtype=str(target.embed_dtype()),
        notes=tuple(notes),
    )
    if details.not_the_targets:
        return CheckResult(
            NAME,
            "fail",
            "the drafter's embed_tokens is not the target's (a fresh init?): " + details.line(),
            details,
            (details.line(),),
        )
    return CheckResult(NAME, "pass", details.line(), details, (details.line(),))
