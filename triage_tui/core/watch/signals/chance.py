"""The chance line: the loss of a uniform guess over the draft vocab, ln V, as the run's trainer
averages it, and where V comes from (flag > triage.toml > config.json > training_state.pt > W&B
config > the config.json of the drafter the run names > 32 000).

A drafter whose logits are uniform over its V draft tokens has cross-entropy ln V per position
whatever the target (ln 32000 = 10.37). A SpecForge ploss averages over all B*T positions, masked
ones adding 0, so at chance it reads (valid fraction) * ln V, which can be well under ln V.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triage_tui.core.read.runs.manifest import Manifest


DEFAULT_VOCAB_SIZE = 32_000  # EAGLE-3's usual draft vocab (SpecForge/speculators default)


def resolve_vocab_size(
    flag: int | None,
    manifest: Manifest | None,
    config: dict | None,
    training_state_vocab: int | None = None,
    *,
    wandb_vocab: int | None = None,
    drafter_config: dict | None = None,
) -> tuple[int, str]:
    """(V, where it came from): --vocab-size > triage.toml > the run's config.json > training_state.pt
    > W&B config > the named drafter's config.json > 32 000.

    ``training_state_vocab`` is the draft vocab of a SpecForge 0.2.0 ``draft_state_dict`` (its
    ``lm_head`` rows), for runs that save no config.json; ``wandb_vocab`` the draft vocab a W&B run's
    config records; ``drafter_config`` the config.json of the drafter the run starts from
    (``named_drafter_config``): a fine-tune keeps its starting drafter's head, so its draft vocab is
    the run's when nothing closer says otherwise (a ModelOpt export of 1 000 draft tokens trains at
    ln 1 000, not ln 32 000).
    """
    if flag is not None:
        return int(flag), "flag"
    if manifest is not None and manifest.vocab_size is not None:
        return manifest.vocab_size, "manifest"
    from_config = config_vocab(config)
    if from_config is not None:
        return from_config, "config.json"
    if training_state_vocab is not None and training_state_vocab >= 2:
        return training_state_vocab, "training_state.pt"
    if wandb_vocab is not None and wandb_vocab >= 2:
        return wandb_vocab, "wandb config"
    from_drafter = config_vocab(drafter_config)
    if from_drafter is not None:
        return from_drafter, "drafter config.json"
    return DEFAULT_VOCAB_SIZE, "default"


def config_vocab(config: dict | None) -> int | None:
    """The vocab a model with this config.json predicts over: ``draft_vocab_size`` (the drafter's
    lm_head, sglang `python/sglang/srt/configs/model_config.py`), else ``vocab_size`` (without a
    draft vocab the head spans the full vocab); None when neither is an integer >= 2."""
    for key in ("draft_vocab_size", "vocab_size"):
        value = (config or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 2:
            return value
    return None


def named_drafter_config(manifest: Manifest | None, problems: list[str] | None = None) -> dict | None:
    """The config.json of the drafter triage.toml names (``checkpoint = ...``: a directory, a weights
    file beside its config.json, or a hub id the manifest resolved in the local cache), read leniently
    like the run's own; None when the run names none or it has no readable config.json."""
    from triage_tui.core.read.runs.config import read_config

    config_path = named_drafter_config_path(manifest)
    if config_path is None:
        return None
    drafter_problems: list[str] = []
    config = read_config(config_path, drafter_problems)
    if problems is not None:
        problems.extend(f"{config_path}: {problem}" for problem in drafter_problems)
    return config


def named_drafter_config_path(manifest: Manifest | None) -> Path | None:
    """Where the config.json of the drafter triage.toml names is (a directory's, or the one beside a
    weights file), when it is a file; None otherwise."""
    checkpoint = manifest.checkpoint if manifest is not None else None
    if checkpoint is None:
        return None
    path = Path(checkpoint)
    config_path = path / "config.json" if path.is_dir() else path.parent / "config.json"
    return config_path if config_path.is_file() else None


def config_vocab_problems(config: dict | None) -> list[str]:
    """Vocab sizes in config.json that resolve_vocab_size passes over, said (a string "32000",
    -5, 1e400 read as inf): the chance line then comes from elsewhere, and the run says why."""
    problems = []
    for key in ("draft_vocab_size", "vocab_size"):
        value = (config or {}).get(key)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 2):
            problems.append(f"{key} is {value!r}, not an integer >= 2; ignored")
    return problems


def chance_loss(vocab_size: int) -> float:
    return math.log(vocab_size)


# Trainers whose per-step loss is a mean over every batch x length position, masked ones adding
# 0 (so a head at chance reads valid_fraction x ln V): SpecForge's _compute_loss,
# ``-torch.sum(position_mask * target_p * log_softmax(logits), 2).mean()`` (specforge 0.2.0
# specforge/core/loss.py; the Triton LogSoftmaxLoss scales by 1 / (B * T) too), and EAGLE's
# traineagle3 loss, the same expression. speculators 0.9.0 divides by the mask's sum
# (speculators/losses/utils.py loss_function), modelopt by loss_mask.sum(), HF Trainer's
# cross-entropy ignores -100 labels: for them chance is ln V itself.
MEAN_OVER_ALL_POSITIONS = frozenset({"specforge", "specforge-classic", "eagle"})


@dataclass(frozen=True)
class ChanceLine:
    """The loss of a uniform guess over the draft vocab, as the run's trainer averages it."""

    vocab_size: int
    valid_fraction: float | None = None  # set when the loss averages over masked positions too
    valid_fraction_source: str | None = None
    convention: str = ""  # which averaging was assumed and why, in words

    @property
    def value(self) -> float:
        return (self.valid_fraction if self.valid_fraction is not None else 1.0) * chance_loss(self.vocab_size)

    @property
    def basis(self) -> str:
        return "valid_fraction × ln V" if self.valid_fraction is not None else "ln V"

    def label(self) -> str:
        if self.valid_fraction is None:
            return f"ln {self.vocab_size} = {self.value:.2f}"
        return f"{self.valid_fraction:.3f} × ln {self.vocab_size} = {self.value:.2f}"

    def to_json(self) -> dict[str, Any]:
        return {
            "chance_loss": self.value,
            "chance_basis": self.basis,
            "valid_fraction": self.valid_fraction,
            "valid_fraction_source": self.valid_fraction_source,
            "chance_convention": self.convention,
        }


def chance_line(vocab_size: int, trainer: str | None, valid: Any = None) -> ChanceLine:
    """The run's chance line: ``valid`` is a formats.hidden_states.LossMaskFraction, or None."""
    if trainer not in MEAN_OVER_ALL_POSITIONS:
        who = trainer or "an unrecognised trainer"
        return ChanceLine(
            vocab_size,
            convention=f"ln V: {who} averages its loss over the valid positions only"
            if trainer
            else "ln V assumed: the trainer was not recognised from the tag names",
        )
    if valid is None:
        return ChanceLine(
            vocab_size,
            convention=(
                f"ln V assumed: {trainer} averages over all positions (masked ones add 0), so chance reads "
                "valid_fraction × ln V, but no hidden-state dump with a loss_mask was found to measure the "
                "fraction (set data in triage.toml)"
            ),
        )
    return ChanceLine(
        vocab_size,
        valid.fraction,
        valid.describe(),
        convention=(
            f"{trainer} averages over all positions (masked ones add 0): a head at chance reads "
            "valid_fraction × ln V (an upper bound: positions whose target falls outside the draft vocab "
            "and batch padding are masked too)"
        ),
    )
