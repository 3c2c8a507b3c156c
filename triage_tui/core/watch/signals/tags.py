"""Which scalar tags are the run's loss and accuracy, and which loss may be compared with ln V.

Which loss is comparable to ln V matters (SpecForge classic `specforge/core/loss.py`, `scripts/train_eagle3.py`):
- SpecForge ``train/ploss_{i}`` is the soft cross-entropy at TTT step i, one position deep:
  comparable to ln V. ``train/ploss_0`` is the primary loss tag.
- SpecForge main ``train/loss`` is ``sum(0.8**i * ploss_i)`` over the TTT steps (about
  3.95 ln V at chance for 7 steps), speculators ``train/loss`` sums ``loss_k``/``kl_div_k``
  over its steps: NOT comparable to ln V. A ``P/loss`` (or ``P/avg_loss``) with per-step
  siblings ``P/ploss_i``, ``P/loss_i`` or ``P/kl_div_i`` is treated as such a sum: it is
  listed and watched for NaN, never compared with ln V, never the primary tag.
- A bare ``loss``/``train/loss`` without per-step siblings is an ordinary per-token
  cross-entropy (HF Trainer and most loops) and is compared with ln V.
- A SpecForge ploss averages over all B*T positions, masked ones adding 0, so at chance it
  reads (valid fraction) * ln V, which can be well under ln V. ln V is therefore an upper
  bound of chance-level ploss; the accuracy flag catches what the loss band misses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from triage_tui.core.metric_names import ACCEPTANCE_LENGTH_WORD, match_trainer, ordered
from triage_tui.core.natural_sort import natural_key

if TYPE_CHECKING:
    from triage_tui.core.read.runs.manifest import Manifest


_LOSS_WORD = re.compile(r"loss|kl_div", re.IGNORECASE)
_NOT_LOSS = re.compile(r"scale", re.IGNORECASE)  # AMP's loss_scale is not a loss
# acc / accuracy / full_acc_0 / cond_acc_1 / epochacc_0 / per_position_acc/0, not acceptance_rate
_ACC_WORD = re.compile(r"(^|[/_]|epoch|avg_)acc(uracy)?([/_]|$)", re.IGNORECASE)
# ... nor an acceptance length (``eval/simulated_acc_len`` holds "_acc_"): tokens, not a fraction
_NOT_ACCURACY = re.compile(rf"(^|[/_]){ACCEPTANCE_LENGTH_WORD}$", re.IGNORECASE)
_STEP_SIBLING = re.compile(r"^(?P<prefix>.*?)/?(ploss|loss|kl_div)_\d+$")
_SUMMED_CANDIDATE = re.compile(r"^(?P<prefix>.*?)/?(avg_)?loss$")

# Ranked patterns: the first group a tag matches decides its rank; ties by natural order.
_LOSS_RANKS = [
    re.compile(r"^train/ploss_0$"),  # SpecForge / EAGLE, TTT step 0
    re.compile(r"^train/(loss|kl_div)_0$"),  # speculators, step 0
    re.compile(r"^((train/)?loss|train_loss|loss/train|train/loss_epoch)$"),  # generic per-token
    re.compile(r"^(eval|val|valid|validation|test)/ploss_0$"),
    re.compile(r"^(eval|val|valid|validation|test)/(loss|kl_div)_0(_epoch)?$"),
    re.compile(r"^((eval|val|valid|validation|test)/(avg_)?loss(_epoch)?|eval_loss|val_loss)$"),
    re.compile(r"^train/(p?loss|kl_div)_\d+$"),
]
_ACCURACY_RANKS = [
    re.compile(r"^train/acc_0$"),  # SpecForge / EAGLE, TTT step 0
    re.compile(r"^train/full_acc_0$"),  # speculators
    re.compile(r"^((train/)?acc(uracy)?|train_acc(uracy)?)$"),  # generic; SpecForge main train/acc
    re.compile(r"^(eval|val|valid|validation|test)/(acc_0|full_acc_0(_epoch)?|per_position_acc/0)$"),
    re.compile(r"^((eval|val|valid|validation|test)/(avg_)?acc(uracy)?(_epoch)?|eval_acc(uracy)?|val_acc(uracy)?)$"),
    re.compile(r"^train/(full_|cond_)?acc_\d+$"),
]


def is_summed_loss(tag: str, tags: Iterable[str]) -> bool:
    """True for a TTT-summed total (P/loss beside P/ploss_i, P/loss_i or P/kl_div_i)."""
    match = _SUMMED_CANDIDATE.match(tag)
    if not match:
        return False
    prefix = match.group("prefix")
    for other in tags:
        sibling = _STEP_SIBLING.match(other)
        if sibling and sibling.group("prefix") == prefix:
            return True
    return False


def _ranked(tags: Sequence[str], ranks: Sequence[re.Pattern], demoted: set[str]) -> list[str]:
    def rank(tag: str) -> tuple:
        group = next((i for i, pattern in enumerate(ranks) if pattern.match(tag)), len(ranks))
        if tag in demoted:
            group = len(ranks) + 1
        return (group, natural_key(tag))

    return sorted(tags, key=rank)


def pick_metric_tags(tags: Iterable[str], manifest: Manifest | None = None) -> tuple[list[str], list[str]]:
    """(loss tags, accuracy tags), primary first; the manifest's lists replace discovery.

    Loss tags: every tag whose last word is a loss (not a loss *scale*), per-step
    losses comparable with ln V first, TTT-summed totals last (see the module docstring).
    The names of the trainer the run matched (core.metric_names) come first, in its table's order.
    """
    tags = list(tags)
    trainer = match_trainer(tags)
    if manifest is not None and manifest.loss_tags:
        loss_tags = list(manifest.loss_tags)
    else:
        known = ordered(tags, trainer.loss) if trainer else []
        candidates = [t for t in tags if _LOSS_WORD.search(t.rsplit("/", 1)[-1]) and not _NOT_LOSS.search(t)]
        summed = {t for t in candidates if is_summed_loss(t, tags)}
        known = [t for t in known if t not in summed]
        loss_tags = known + [t for t in _ranked(candidates, _LOSS_RANKS, summed) if t not in known]
    if manifest is not None and manifest.accuracy_tags:
        accuracy_tags = list(manifest.accuracy_tags)
    else:
        known = ordered(tags, trainer.accuracy) if trainer else []
        candidates = [t for t in tags if _ACC_WORD.search(t) and not _NOT_ACCURACY.search(t)]
        accuracy_tags = known + [t for t in _ranked(candidates, _ACCURACY_RANKS, set()) if t not in known]
    return loss_tags, accuracy_tags


def comparable_to_chance(tag: str, tags: Iterable[str], manifest: Manifest | None = None) -> bool:
    """Whether this loss tag may be compared with ln V (a manifest's choice is trusted)."""
    if manifest is not None and tag in manifest.loss_tags:
        return True
    return not is_summed_loss(tag, tags)
