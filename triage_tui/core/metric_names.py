"""The metric names each drafter trainer logs, with the source version they come from.

One table for the whole program: signals pick a run's loss and accuracy tags from it (the trainer's
names first, in the order given here), the scan JSON names the trainer whose names a run matched,
and per-position (TTT step) accuracies and an evaluation acceptance-length series are found by it.
The same names reach TensorBoard (tag = dict key) and W&B (history key); ``{i}``, ``{j}``, ``{k}``
stand for a position (TTT step) index.

Which loss is comparable to ln V is decided in core.watch.signals.tags (a per-position cross-entropy is, a
0.8-weighted sum over positions is not); ``summed_loss`` here only lists the totals each trainer logs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

# The last word of an acceptance-length name (tokens accepted per draft, not a fraction):
# SpecForge's ``simulated_acc_len``, ``accept_len``, ``acceptance_length``.
ACCEPTANCE_LENGTH_WORD = r"(accept(ance)?_?len(gth)?|acc_len|simulated_acc_len)"


@dataclass(frozen=True)
class TrainerNames:
    """One trainer's logged scalar names, preferred first within each role."""

    trainer: str  # the id the scan JSON reports as "trainer"
    source: str  # public project, version and file the names were read from
    loss: tuple[str, ...]  # per-position losses (comparable with ln V), then evaluation ones
    accuracy: tuple[str, ...]  # per-position accuracies first, then overall ones
    summed_loss: tuple[str, ...] = ()  # totals over the TTT steps (listed, never compared with ln V)
    acceptance_length: tuple[str, ...] = ()  # evaluation acceptance length, tokens per draft
    other: tuple[str, ...] = ()  # the rest it logs (lr, grad norm, acceptance rates): they identify it too

    @property
    def names(self) -> tuple[str, ...]:
        return self.loss + self.accuracy + self.summed_loss + self.acceptance_length + self.other

    @cached_property
    def patterns(self) -> tuple[re.Pattern, ...]:
        return tuple(compile_name(name) for name in self.names)

    def matched(self, tags: Iterable[str]) -> int:
        """How many of this trainer's names the tags use (each name counted once)."""
        tags = list(tags)
        return sum(1 for pattern in self.patterns if any(pattern.match(tag) for tag in tags))


_INDEX = re.compile(r"\\\{[ijk]\\\}")


@lru_cache(maxsize=4096)
def compile_name(name: str) -> re.Pattern:
    """A table name as an anchored regex: ``{i}``/``{j}``/``{k}`` match a position index."""
    return re.compile("^" + _INDEX.sub(r"(\\d+)", re.escape(name)) + "$")


def position_of(name: str, tag: str) -> int | None:
    """The position (TTT step) `tag` stands for as an instance of `name`, or None.

    With two indices (ModelOpt's ``parallel_{i}_step_{j}``) the position is the last one, and only
    the first parallel draft (i = 0) has positions: the others repeat them for later tokens.
    """
    match = compile_name(name).match(tag)
    if match is None or not match.groups():
        return None
    indices = [int(g) for g in match.groups()]
    if any(indices[:-1]):
        return None
    return indices[-1]


TRAINERS: tuple[TrainerNames, ...] = (
    # Its trackers add "train/" to the training names (training/tracking.py training_metric_names);
    # its console alone, the default (tracking.report_to = "none"), prints them bare
    # (training/assembly.py _logger): "ploss_0", "acc", "loss".
    TrainerNames(
        "specforge",
        "sgl-project/SpecForge 0.2.0 (specforge/training/controller.py, training/tracking.py, eval/evaluator.py, "
        "training/assembly.py)",
        loss=("train/ploss_{i}", "ploss_{i}", "eval/ploss_{i}"),
        accuracy=("train/acc_{i}", "acc_{i}", "train/acc", "acc", "eval/per_position_acc/{i}", "eval/avg_acc"),
        summed_loss=("train/loss", "loss", "eval/avg_loss"),
        acceptance_length=("eval/simulated_acc_len",),
        other=(
            "train/acceptance_rate_{i}",
            "acceptance_rate_{i}",
            "train/acceptance_rate",
            "acceptance_rate",
            "eval/acceptance_rate_{i}",
            "train/lr",
            "lr",
            "train/grad_norm",
            "grad_norm",
        ),
    ),
    TrainerNames(
        "specforge-classic",
        "sgl-project/SpecForge commit 886ab9cf, 2025-12-28 (scripts/train_eagle3.py, record_metrcs)",
        loss=("train/ploss_{i}", "eval/ploss_{i}"),
        accuracy=("train/acc_{i}", "eval/acc_{i}"),
        other=("train/lr",),
    ),
    TrainerNames(
        "speculators",
        "vllm-project/speculators 0.9.0 (src/speculators/train/trainer.py, models/eagle3/metrics.py)",
        loss=("train/loss_{k}", "train/kl_div_{k}", "val/loss_{k}_epoch", "val/kl_div_{k}_epoch"),
        accuracy=("train/full_acc_{k}", "train/cond_acc_{k}", "val/full_acc_{k}_epoch", "val/cond_acc_{k}_epoch"),
        summed_loss=("train/loss", "val/loss_epoch"),
        other=("lr", "epoch", "global_step"),
    ),
    TrainerNames(
        "eagle",
        "SafeAILab/EAGLE main, 2026-02 (eagle/traineagle3/main.py; logs to W&B only)",
        loss=("train/ploss_{i}", "train/epochploss_{i}", "test/epochploss_{i}"),
        accuracy=("train/acc_{i}", "train/epochacc_{i}", "test/epochacc_{i}"),
        other=("train/lr",),
    ),
    TrainerNames(
        "modelopt",
        "NVIDIA/TensorRT-Model-Optimizer (examples/speculative_decoding/eagle_utils.py, 2025-12 and later) "
        "on HF Trainer",
        loss=("loss", "train/loss", "eval/loss", "eval_loss"),
        accuracy=("train_acc/parallel_{i}_step_{j}", "parallel_{i}_step_{j}_train_acc", "step_{i}_train_acc"),
        acceptance_length=("validate_ar", "estimated_training_ar"),
    ),
    TrainerNames(
        "hf-trainer",
        "huggingface/transformers 5.24.0 (integrations/integration_utils.py: TensorBoardCallback, WandbCallback)",
        loss=("train/loss", "loss", "eval/loss", "eval_loss"),
        accuracy=(),
        other=(
            "train/learning_rate",
            "learning_rate",
            "train/grad_norm",
            "grad_norm",
            "train/epoch",
            "epoch",
            "train/global_step",
        ),
    ),
)


def match_trainer(tags: Sequence[str]) -> TrainerNames | None:
    """The trainer whose names the run uses most; ties go to the trainer with fewer names.

    Fewer names on a tie: the narrower explanation (a run with only ``train/loss`` is HF Trainer's,
    not SpecForge's, which logs a dozen more). None when no name matches.
    """
    return _match_trainer(tuple(tags))


def identified_by(trainer: TrainerNames, tags: Sequence[str]) -> bool:
    """Whether the tags hold a name only ``trainer`` logs (SpecForge's ``train/ploss_0``): generic
    names (``train/loss``, ``lr``, ``grad_norm``) that several trainers log pick the loss, but do not
    say who trained."""
    return _identified_by(trainer.trainer, tuple(tags))


@lru_cache(maxsize=256)
def _identified_by(trainer_id: str, tags: tuple[str, ...]) -> bool:
    mine = next(names for names in TRAINERS if names.trainer == trainer_id)
    others = [pattern for names in TRAINERS if names.trainer != trainer_id for pattern in names.patterns]
    return any(
        pattern.match(tag) and not any(other.match(tag) for other in others)
        for pattern in mine.patterns
        for tag in tags
    )


# The runs of a sweep log the same tags: each set of names is matched once, not once a run and a
# poll (100 runs: ~120 000 regex matches, a sixth of their flags' CPU).
@lru_cache(maxsize=256)
def _match_trainer(tags: tuple[str, ...]) -> TrainerNames | None:
    best: tuple[int, int] | None = None
    found = None
    for names in TRAINERS:
        count = names.matched(tags)
        if count == 0:
            continue
        key = (count, -len(names.names))
        if best is None or key > best:
            best, found = key, names
    return found


def ordered(tags: Iterable[str], names: Sequence[str]) -> list[str]:
    """The tags that are one of `names`: position 0 of every name first (in the table's order), then 1, ...

    A name without an index counts as position 0.
    """
    return list(_ordered(tuple(tags), tuple(names)))


@lru_cache(maxsize=256)
def _ordered(tags: tuple[str, ...], names: tuple[str, ...]) -> tuple[str, ...]:
    found: dict[str, tuple] = {}
    for rank, name in enumerate(names):
        pattern = compile_name(name)
        for tag in tags:
            match = pattern.match(tag)
            if match is not None and tag not in found:
                indices = tuple(int(g) for g in match.groups()) or (0,)
                found[tag] = (indices[::-1], rank)
    return tuple(sorted(found, key=lambda tag: found[tag]))


def per_position(tags: Iterable[str], names: TrainerNames) -> list[tuple[int, str]]:
    """(position, tag) of the trainer's first per-position accuracy name the run logs, by position."""
    return list(_per_position(tuple(tags), names))


@lru_cache(maxsize=256)
def _per_position(tags: tuple[str, ...], names: TrainerNames) -> tuple[tuple[int, str], ...]:
    for name in names.accuracy:
        if "{" not in name:
            continue
        found = sorted((p, tag) for tag in tags if (p := position_of(name, tag)) is not None)
        if found:
            return tuple(found)
    return ()
