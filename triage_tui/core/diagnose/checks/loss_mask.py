"""Loss-mask check: which positions of the dumped samples does the trainer's loss supervise?

The loss mask is built from the chat template before the hidden states are dumped (SpecForge
``specforge/data/parse.py`` ``GeneralParser.parse``: 1 inside every match of the template's
assistant pattern, 0 elsewhere) and stored beside them (``loss_mask [T]``). Three shapes of it break
or bend a fine-tune without any error:

- **empty**: no position supervised. SpecForge's ploss is a mean over all positions and its
  accuracy divides by ``loss_mask.sum()`` clamped, so both sit at exactly 0
  (https://github.com/sgl-project/SpecForge/issues/392, preformatted text whose markers did not
  match the template; https://github.com/NickL77/BaldEagle/issues/4).
- **starved**: supervised tokens, but never two adjacent ones. SpecForge 0.2.0 drops such samples
  from DFlash-family training (``specforge/data/loss_mask.py`` ``has_consecutive_supervised_tokens``);
  for EAGLE-3 the test-time-training steps k >= 1 read the mask shifted by k, so isolated tokens
  (an end-of-turn marker matched alone) train step 0 at most.
- **covering the prompt**: the first position supervised. No chat template puts assistant content
  at position 0 (every one opens with BOS, a system or a user header), so a mask that is 1 there
  trains the drafter on prompt text it will never draft: an all-ones fallback
  (https://github.com/NVIDIA-NeMo/Megatron-Bridge/issues/3359) or a mask built for another
  tokenizer (https://github.com/SafeAILab/EAGLE/issues/286,
  https://github.com/sgl-project/SpecForge/issues/296).

These need no dataset-dependent fraction: each is a property of one sample's mask. The fractions
are reported beside them (per sample and overall) for the reader to compare with the template.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from triage_tui.core.diagnose.checks.result import CheckResult

NAME = "loss_mask"

# A finding is the check's verdict when it holds for at least this share of the sampled files:
# a few odd samples (a conversation truncated before its first answer) are normal in real data;
# most of the sample is the data set.
MAJORITY = 0.5

# Per-sample rows listed in the JSON and the drill-down: the reader samples at most 8 files
# (formats/hidden_states.py read_dumps), so this lists all of them.
MAX_LISTED_SAMPLES = 16


@dataclass(frozen=True)
class SampleMask:
    """One dumped sample's loss mask."""

    file: str
    positions: int
    supervised: int
    first_supervised: int | None  # index of the first supervised position, None when empty
    adjacent_pair: bool  # two consecutive supervised positions exist

    @property
    def fraction(self) -> float:
        return self.supervised / self.positions if self.positions else 0.0

    @property
    def empty(self) -> bool:
        return self.supervised == 0

    @property
    def starved(self) -> bool:
        return self.supervised > 0 and not self.adjacent_pair

    @property
    def covers_prompt(self) -> bool:
        return self.first_supervised == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "positions": self.positions,
            "supervised": self.supervised,
            "fraction": round(self.fraction, 6),
            "first_supervised": self.first_supervised,
        }


@dataclass(frozen=True)
class LossMaskDetails:
    """The supervised-token fraction of the sampled dumps, per sample and overall."""

    files_total: int  # dump files in the directory; len(samples) + samples_without_mask were read
    samples: tuple[SampleMask, ...]  # the sampled files that carry a loss_mask
    samples_without_mask: int

    @property
    def positions(self) -> int:
        return sum(s.positions for s in self.samples)

    @property
    def supervised(self) -> int:
        return sum(s.supervised for s in self.samples)

    @property
    def fraction(self) -> float | None:
        return self.supervised / self.positions if self.positions else None

    @property
    def empty(self) -> int:
        return sum(s.empty for s in self.samples)

    @property
    def starved(self) -> int:
        return sum(s.starved for s in self.samples)

    @property
    def covering_prompt(self) -> int:
        return sum(s.covers_prompt for s in self.samples)

    def share(self, count: int) -> float:
        return count / len(self.samples) if self.samples else 0.0

    def majority(self, count: int) -> bool:
        """``count`` of the sampled files is enough to call a finding the data set's (see MAJORITY)."""
        return count > 0 and self.share(count) >= MAJORITY

    def fraction_range(self) -> tuple[float, float, float] | None:
        """(min, median, max) of the per-sample fractions."""
        if not self.samples:
            return None
        values = np.array([s.fraction for s in self.samples])
        return float(values.min()), float(np.median(values)), float(values.max())

    def findings(self) -> list[str]:
        """One line per failing property that holds for a majority of the sampled files."""
        n = len(self.samples)
        lines = []
        if self.majority(self.empty):
            lines.append(
                f"{self.empty} of {n} sampled dumps have an all-zero loss_mask: no token is trained, "
                f"loss and accuracy read 0"
            )
        if self.majority(self.starved):
            lines.append(
                f"{self.starved} of {n} sampled dumps supervise no two adjacent tokens: "
                f"only isolated positions (an end-of-turn marker?) are trained"
            )
        if self.majority(self.covering_prompt):
            lines.append(
                f"{self.covering_prompt} of {n} sampled dumps supervise position 0: the mask covers the prompt "
                f"({self.fraction:.1%} of all positions supervised), not only the assistant turns"
            )
        return lines

    def to_json(self) -> dict[str, Any]:
        spread = self.fraction_range()
        return {
            "files_total": self.files_total,
            "samples": len(self.samples),
            "samples_without_loss_mask": self.samples_without_mask,
            "positions": self.positions,
            "supervised": self.supervised,
            "fraction": None if self.fraction is None else round(self.fraction, 6),
            "fraction_min": None if spread is None else round(spread[0], 6),
            "fraction_median": None if spread is None else round(spread[1], 6),
            "fraction_max": None if spread is None else round(spread[2], 6),
            "samples_empty": self.empty,
            "samples_without_adjacent_supervised_tokens": self.starved,
            "samples_supervising_position_0": self.covering_prompt,
            "per_sample": [s.to_json() for s in self.samples[:MAX_LISTED_SAMPLES]],
        }

    def drilldown(self) -> list[str]:
        if not self.samples:
            return [f"none of the {self.samples_without_mask} sampled dumps stores a loss_mask"]
        spread = self.fraction_range()
        assert spread is not None and self.fraction is not None
        lines = [
            f"{self.supervised} of {self.positions} positions supervised ({self.fraction:.1%}) in "
            f"{len(self.samples)} of {self.files_total} dump files",
            f"per sample: min {spread[0]:.1%}, median {spread[1]:.1%}, max {spread[2]:.1%}",
            f"empty masks {self.empty}, no two adjacent supervised tokens {self.starved}, "
            f"position 0 supervised {self.covering_prompt}",
        ]
        for sample in self.samples[:MAX_LISTED_SAMPLES]:
            first = "none" if sample.first_supervised is None else str(sample.first_supervised)
            lines.append(
                f"  {sample.file}: {sample.supervised}/{sample.positions} ({sample.fraction:.1%}), first at {first}"
            )
        return lines


def _sample_mask(file: str, mask: np.ndarray) -> SampleMask:
    on = np.asarray(mask).reshape(-1) != 0
    supervised = np.flatnonzero(on)
    return SampleMask(
        file=file,
        positions=int(on.size),
        supervised=int(supervised.size),
        first_supervised=int(supervised[0]) if supervised.size else None,
        adjacent_pair=bool(np.any(on[1:] & on[:-1])),
    )


def check_loss_mask(dumps: Any) -> CheckResult:
    """The loss masks of the sampled dumps: empty, starved, covering the prompt, and their fractions."""
    if dumps is None or not dumps.samples:
        return CheckResult.skipped(NAME, "no hidden-state dumps: pass --data")
    samples = tuple(
        _sample_mask(s.path.name, s.loss_mask) for s in dumps.samples if s.loss_mask is not None and s.loss_mask.size
    )
    details = LossMaskDetails(dumps.files_total, samples, len(dumps.samples) - len(samples))
    if not samples:
        # speculators keeps the mask in its preprocessed dataset, modelopt computes it at load time.
        return CheckResult(
            NAME,
            "skipped",
            f"the {dumps.format} dumps store no loss_mask ({len(dumps.samples)} sampled): nothing to measure",
            details,
        )
    findings = details.findings()
    if findings:
        return CheckResult(NAME, "fail", "; ".join(findings), details, tuple(findings))
    spread = details.fraction_range()
    assert spread is not None and details.fraction is not None
    summary = (
        f"{details.fraction:.1%} of {details.positions} positions supervised over {len(samples)} sampled dumps "
        f"(per sample {spread[0]:.1%} to {spread[2]:.1%}); empty {details.empty}, covering the prompt "
        f"{details.covering_prompt}"
    )
    return CheckResult(NAME, "pass", summary, details, (summary,))
