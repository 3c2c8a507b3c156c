"""Flags from a run's scalars: loss at or above chance, accuracy at chance, NaN, divergence,
plateau, stall.

The chance line is ln V: a drafter whose logits are uniform over its V draft tokens has
cross-entropy ln V per position whatever the target (ln 32000 = 10.37). A loss clearly
*above* it means confident and wrong, the signature of an lm_head whose rows are ordered for
another vocab mapping (docs/case.md: loss 18-20, accuracy 2-7 %).

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

All thresholds below are module constants with the reason next to them; the signals are
computed on TensorBoard's debiased EMA (core.series.ema_smooth) of the finite points, and a
flag describes the run's *current* state: it names the step where the current episode began.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from triage_tui.core.json_numbers import json_number
from triage_tui.core.metric_names import match_trainer, ordered
from triage_tui.core.natural_sort import natural_key
from triage_tui.core.series import RunScalars, ScalarSeries, ema_smooth

if TYPE_CHECKING:
    from triage_tui.core.runs.manifest import Manifest

DEFAULT_VOCAB_SIZE = 32_000  # EAGLE-3's usual draft vocab (SpecForge/speculators default)

# EMA weight for the signals. TensorBoard's default slider is 0.6; the flags use a heavier
# 0.8 so one noisy batch can neither raise nor clear a flag, while a 20-point window still
# follows a real change within ~10 points.
SIGNAL_SMOOTHING = 0.8

# Warm-up: a from-scratch drafter starts at ~ln V and needs some steps to leave it, so no
# chance flag is raised before the run has logged WARMUP_POINTS points AND advanced
# WARMUP_STEPS steps (SpecForge logs every 50 steps by default: ~5 points, ~250 steps; the
# story's run would be flagged within minutes of starting). A run whose step never advances
# (global_step=None) uses WARMUP_POINTS_NO_STEPS points instead.
WARMUP_POINTS = 5
WARMUP_STEPS = 100
WARMUP_POINTS_NO_STEPS = 20

# Chance band: [ (1 - 0.10) ln V, ln V + max(1.0, 0.10 ln V) ].
# Lower edge: a model that learned only token frequencies already sits at the unigram
# entropy of the draft vocab (6-8 nats for text tokens over 32 000), far below 0.9 ln V
# (9.33); anything above it has learned next to nothing.
# Upper edge: a fresh random lm_head gives ln V plus half the logit variance, a few tenths of
# a nat with standard init; a full nat (or 10 %) above ln V is beyond that: the model is
# confidently wrong (the story's 18-20 against 10.37).
CHANCE_BAND_BELOW = 0.10
ABOVE_CHANCE_FRACTION = 0.10
ABOVE_CHANCE_MIN_NATS = 1.0
# "Sits" at chance: over the last quarter of the post-warm-up points (at least
# TREND_MIN_POINTS, clipped to the warm-up's end), the smoothed loss fell by less than 2 % of
# ln V (0.21 nats at 32 000). A from-scratch run still descending from ln V is learning and
# is left alone; 10 points (~500 steps at SpecForge's log interval) are enough to see a
# descent of 1 nat per 1 000 steps above the noise of the EMA.
TREND_WINDOW_FRACTION = 0.25
TREND_MIN_POINTS = 10
TREND_MAX_DROP_FRACTION = 0.02

# Accuracy at chance: below 10 % top-1 after warm-up. A uniform guess scores 1/V (0.003 %),
# predicting the most frequent tokens a few percent (the story's 2-7 %); a drafter that uses
# the target's hidden states is at 30-80 % on step 0 (fine-tune from a good drafter) or passes
# 10 % within the first few hundred steps from scratch. Not raised while still rising by more
# than 2 points over the trend window. Values above 1 are read as percent.
ACCURACY_CHANCE = 0.10
ACCURACY_MAX_RISE = 0.02

# Diverging: the smoothed loss has risen above its running minimum by more than half the
# minimum (x1.5) and by at least 0.5 nats (so 0.1 -> 0.16 near convergence is not a
# divergence), for DIVERGE_PERSIST consecutive points (one spike is not a divergence).
DIVERGE_RELATIVE = 0.5
DIVERGE_MIN_NATS = 0.5
DIVERGE_PERSIST = 3

# Plateau (info): at least PLATEAU_MIN_POINTS post-warm-up points, and over the last quarter
# (at least 10 points) the smoothed loss moved by under 1 % of its value. Convergence looks
# the same, hence only "info".
PLATEAU_MIN_POINTS = 20
PLATEAU_WINDOW_MIN_POINTS = 10
PLATEAU_MAX_CHANGE = 0.01

# Stall: writers buffer up to flush_secs (torch/tensorboardX/TF2 default 120 s,
# tensorboard `tensorboard/summary/writer/event_file_writer.py`), checkpoint saves and evals pause logging, so a run
# is stalled only when silent for longer than max(flush_secs + 60 s, 3 x its median gap
# between logged points, 1.5 x its longest gap so far).
STALL_MARGIN_SECS = 60.0
STALL_MEDIAN_GAPS = 3.0
STALL_LONGEST_GAP = 1.5
# Severity: "warning" while the silence is under an hour or the watcher saw the run grow in
# this session (it stopped under our eyes); otherwise "info": a finished or long-dead run
# opened for a post-mortem is not an alarm.
STALL_WARNING_SECS = 3600.0

# The one table of severities. A flag's, least to most severe; a run's status is its worst
# flag's, "ok" when it has none or only info flags (RUN_STATUSES[worst flag's order]).
FlagSeverity = str  # "info" | "warning" | "critical"
SEVERITY_ORDER = {"info": 0, "warning": 1, "critical": 2}
RUN_STATUSES = ("ok", "warning", "critical")


@dataclass(frozen=True)
class Flag:
    """One thing wrong (or worth knowing) about a run, with the step and value behind it."""

    kind: str  # loss_at_chance | loss_above_chance | accuracy_at_chance | non_finite | diverging | plateau | stalled
    #           | damaged_records | unreadable_file (core.watch) | starts_at_chance | ttt_position_collapse
    #           | resume_discontinuity | eval_peaked (core.curve_shapes)
    severity: FlagSeverity
    tag: str | None
    step: int | None
    value: float | None
    message: str
    # The condition holds from the series' first logged point (non_finite: no finite value was ever
    # logged before it), which points at the setup rather than at training (core.hypotheses).
    from_start: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "tag": self.tag,
            "step": self.step,
            "value": json_number(self.value),
            "message": self.message,
        }


# --------------------------------------------------------------------------- vocab size


def resolve_vocab_size(
    flag: int | None, manifest: Manifest | None, config: dict | None, training_state_vocab: int | None = None
) -> tuple[int, str]:
    """(V, where it came from): --vocab-size > triage.toml > config.json > training_state.pt > 32 000.

    ``training_state_vocab`` is the draft vocab of a SpecForge 0.2.0 ``draft_state_dict`` (its
    ``lm_head`` rows), for runs that save no config.json.
    """
    if flag is not None:
        return int(flag), "flag"
    if manifest is not None and manifest.vocab_size is not None:
        return manifest.vocab_size, "manifest"
    if config:
        # draft_vocab_size is the drafter's lm_head (sglang `python/sglang/srt/configs/model_config.py`); without it the
        # model predicts over its full vocab_size.
        for key in ("draft_vocab_size", "vocab_size"):
            value = config.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 2:
                return value, "config.json"
    if training_state_vocab is not None and training_state_vocab >= 2:
        return training_state_vocab, "training_state.pt"
    return DEFAULT_VOCAB_SIZE, "default"


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


# --------------------------------------------------------------------------- tag choice

_LOSS_WORD = re.compile(r"loss|kl_div", re.IGNORECASE)
_NOT_LOSS = re.compile(r"scale", re.IGNORECASE)  # AMP's loss_scale is not a loss
# acc / accuracy / full_acc_0 / cond_acc_1 / epochacc_0 / per_position_acc/0, not acceptance_rate
_ACC_WORD = re.compile(r"(^|[/_]|epoch|avg_)acc(uracy)?([/_]|$)", re.IGNORECASE)
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
        candidates = [t for t in tags if _ACC_WORD.search(t)]
        accuracy_tags = known + [t for t in _ranked(candidates, _ACCURACY_RANKS, set()) if t not in known]
    return loss_tags, accuracy_tags


def comparable_to_chance(tag: str, tags: Iterable[str], manifest: Manifest | None = None) -> bool:
    """Whether this loss tag may be compared with ln V (a manifest's choice is trusted)."""
    if manifest is not None and tag in manifest.loss_tags:
        return True
    return not is_summed_loss(tag, tags)


# --------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class _Curve:
    """The finite points of one series and their EMA."""

    tag: str
    steps: np.ndarray
    values: np.ndarray
    smooth: np.ndarray
    post_warmup: int  # index of the first point past warm-up (len(values) if none)

    @classmethod
    def of(cls, series: ScalarSeries, scale: float = 1.0) -> _Curve:
        values = np.asarray(series.values, dtype=np.float64)
        finite = np.isfinite(values)
        steps = np.asarray(series.steps)[finite]
        values = values[finite] * scale
        smooth = ema_smooth(values, SIGNAL_SMOOTHING) if len(values) else values
        return cls(series.tag, steps, values, smooth, _warmup_end(steps))

    @property
    def judged(self) -> int:
        return len(self.values) - self.post_warmup


def _warmup_end(steps: np.ndarray) -> int:
    n = len(steps)
    if n == 0:
        return 0
    if steps[-1] == steps[0]:
        return min(n, WARMUP_POINTS_NO_STEPS)
    past = np.nonzero(steps >= steps[0] + WARMUP_STEPS)[0]
    first_by_steps = int(past[0]) if len(past) else n
    return min(n, max(WARMUP_POINTS, first_by_steps))


def streak_start(condition: np.ndarray, start: int) -> int | None:
    """Index where the run of True values that ends at the last point begins (>= start)."""
    if len(condition) == 0 or not condition[-1] or len(condition) <= start:
        return None
    false_at = np.nonzero(~condition[start:])[0]
    return start + (int(false_at[-1]) + 1 if len(false_at) else 0)


def _trend_window(curve: _Curve) -> tuple[float, float]:
    """(smoothed value at the start of the trend window, smoothed value now)."""
    judged = curve.judged
    width = max(TREND_MIN_POINTS, int(math.ceil(judged * TREND_WINDOW_FRACTION)))
    first = max(curve.post_warmup, len(curve.smooth) - width)
    return float(curve.smooth[first]), float(curve.smooth[-1])


def fmt(value: float) -> str:
    """Numbers in messages: 4 significant digits, words for NaN/inf."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def fmt_duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


# --------------------------------------------------------------------------- value flags


def _first_with_points(scalars: RunScalars, tags: Sequence[str]) -> ScalarSeries | None:
    """The series of the first tag that has at least one point."""
    return next((s for t in tags if (s := scalars.get(t)) is not None and len(s)), None)


def value_flags(
    scalars: RunScalars,
    *,
    vocab_size: int,
    loss_tags: Sequence[str],
    accuracy_tags: Sequence[str],
    chance_comparable: bool = True,
    chance: ChanceLine | None = None,
) -> list[Flag]:
    """Every flag that depends on the values only (not on the clock); the loss is compared with
    `chance` (default ln V)."""
    chance = chance if chance is not None else ChanceLine(vocab_size)
    flags: list[Flag] = []
    non_finite = _non_finite([scalars.get(t) for t in dict.fromkeys([*loss_tags, *accuracy_tags])])
    if non_finite is not None:
        flags.append(non_finite)
    loss = _first_with_points(scalars, loss_tags)
    if loss is not None:
        curve = _Curve.of(loss)
        if len(curve.values):
            at_chance = _loss_vs_chance(curve, chance) if chance_comparable else None
            diverging = _diverging(curve)
            flags.extend(f for f in (at_chance, diverging) if f is not None)
            if at_chance is None and diverging is None:
                plateau = _plateau(curve)
                if plateau is not None:
                    flags.append(plateau)
    accuracy = _first_with_points(scalars, accuracy_tags)
    if accuracy is not None:
        flag = _accuracy_at_chance(accuracy, vocab_size)
        if flag is not None:
            flags.append(flag)
    return flags


def _non_finite(candidates: Sequence[ScalarSeries | None]) -> Flag | None:
    """One flag for the first NaN/inf among the loss and accuracy tags (primary first on ties).

    One flag, not one per tag: when training blows up every ploss_i and acc_i goes NaN at once.
    """
    found = []  # (step, order, series, first index, count)
    for order, series in enumerate(candidates):
        if series is None or not len(series):
            continue
        bad = ~np.isfinite(np.asarray(series.values))
        if bad.any():
            first = int(np.argmax(bad))
            found.append((int(series.steps[first]), order, series, first, int(bad.sum())))
    if not found:
        return None
    step, _, series, first, count = min(found, key=lambda item: item[:2])
    value = float(series.values[first])
    others = f"; also in {len(found) - 1} other tag{'s' if len(found) > 2 else ''}" if len(found) > 1 else ""
    # From the first logged point, nothing trained before it broke: the model as built or its inputs
    # (speculators #238: num_layers 2, "loss turns to nan from the first step"). After finite points, an
    # update broke it (learning rate, fp16 overflow, a bad batch): the last finite value says how it went.
    if first == 0:
        when = f"from its first logged step {step} (never finite before)"
    else:
        last_finite, last_step = float(series.values[first - 1]), int(series.steps[first - 1])
        when = f"at step {step}, after {first} finite points (last {fmt(last_finite)} at step {last_step})"
    return Flag(
        "non_finite",
        "critical",
        series.tag,
        step,
        value,
        f"{series.tag} = {fmt(value)} {when} ({count} of {len(series)} points not finite{others})",
        from_start=first == 0,
    )


def _loss_vs_chance(curve: _Curve, chance: ChanceLine) -> Flag | None:
    ln_v = chance.value
    upper = ln_v + max(ABOVE_CHANCE_MIN_NATS, ABOVE_CHANCE_FRACTION * ln_v)
    lower = ln_v * (1.0 - CHANCE_BAND_BELOW)
    now_step, now_value = int(curve.steps[-1]), float(curve.smooth[-1])
    chance_text = chance.label()
    above = streak_start(curve.smooth > upper, curve.post_warmup)
    if above is not None:
        step, value = int(curve.steps[above]), float(curve.values[above])
        return Flag(
            "loss_above_chance",
            "critical",
            curve.tag,
            step,
            value,
            f"{curve.tag} = {fmt(value)} at step {step}, above {chance_text} "
            f"(smoothed {fmt(now_value)} at step {now_step}): confidently wrong",
        )
    at = streak_start((curve.smooth >= lower) & (curve.smooth <= upper), curve.post_warmup)
    if at is None:
        return None
    start_value, end_value = _trend_window(curve)
    if start_value - end_value > TREND_MAX_DROP_FRACTION * ln_v:
        return None  # still descending from chance: learning, just early
    step, value = int(curve.steps[at]), float(curve.values[at])
    return Flag(
        "loss_at_chance",
        "critical",
        curve.tag,
        step,
        value,
        f"{curve.tag} = {fmt(value)} at step {step}, at chance {chance_text} "
        f"(smoothed {fmt(now_value)} at step {now_step}, not falling)",
    )


def _diverging(curve: _Curve) -> Flag | None:
    running_min = np.minimum.accumulate(curve.smooth)
    rise = curve.smooth - running_min
    diverged = rise > np.maximum(DIVERGE_RELATIVE * np.abs(running_min), DIVERGE_MIN_NATS)
    start = streak_start(diverged, 0)
    if start is None or len(diverged) - start < DIVERGE_PERSIST:
        return None
    best = float(running_min[-1])
    step, value = int(curve.steps[start]), float(curve.values[start])
    return Flag(
        "diverging",
        "critical",
        curve.tag,
        step,
        value,
        f"{curve.tag} rising since step {step}: smoothed {fmt(float(curve.smooth[-1]))} "
        f"at step {int(curve.steps[-1])}, best was {fmt(best)}",
    )


def _plateau(curve: _Curve) -> Flag | None:
    if curve.judged < PLATEAU_MIN_POINTS:
        return None
    width = max(PLATEAU_WINDOW_MIN_POINTS, int(math.ceil(curve.judged * TREND_WINDOW_FRACTION)))
    first = len(curve.smooth) - width
    start_value, end_value = float(curve.smooth[first]), float(curve.smooth[-1])
    if abs(end_value - start_value) > PLATEAU_MAX_CHANGE * max(abs(start_value), 1e-12):
        return None
    step = int(curve.steps[first])
    return Flag(
        "plateau",
        "info",
        curve.tag,
        step,
        float(curve.values[first]),
        f"{curve.tag} flat at {fmt(end_value)} since step {step} "
        f"(changed {fmt(end_value - start_value)} over the last {width} points)",
    )


def _accuracy_at_chance(series: ScalarSeries, vocab_size: int) -> Flag | None:
    values = np.asarray(series.values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    if not len(finite):
        return None
    percent = float(finite.max()) > 1.0
    curve = _Curve.of(series, 0.01 if percent else 1.0)
    at = streak_start(curve.smooth < ACCURACY_CHANCE, curve.post_warmup)
    if at is None:
        return None
    start_value, end_value = _trend_window(curve)
    if end_value - start_value > ACCURACY_MAX_RISE:
        return None  # climbing out of chance
    step, value = int(curve.steps[at]), float(curve.values[at])
    return Flag(
        "accuracy_at_chance",
        "critical",
        curve.tag,
        step,
        value * (100.0 if percent else 1.0),
        f"{curve.tag} = {value * 100:.1f} % at step {step}, below {ACCURACY_CHANCE * 100:.0f} % "
        f"(smoothed {end_value * 100:.1f} % at step {int(curve.steps[-1])}; "
        f"uniform over {vocab_size} is {100 / vocab_size:.3g} %)",
    )


# --------------------------------------------------------------------------- stall


@dataclass(frozen=True)
class Activity:
    """When a run last logged, and how far apart its points usually are (wall seconds)."""

    last_wall_time: float | None
    median_gap: float
    longest_gap: float

    @classmethod
    def of(cls, scalars: RunScalars, tag: str | None = None) -> Activity:
        series = scalars.get(tag) if tag else None
        if series is None or len(series) < 2:
            lengths = [(len(s), s) for s in scalars.series.values()]
            series = max(lengths, key=lambda pair: pair[0])[1] if lengths else None
        gaps = np.diff(np.asarray(series.wall_times)) if series is not None and len(series) > 1 else np.zeros(0)
        gaps = gaps[np.isfinite(gaps) & (gaps > 0)]
        return cls(
            scalars.last_wall_time,
            float(np.median(gaps)) if len(gaps) else 0.0,
            float(gaps.max()) if len(gaps) else 0.0,
        )

    def stall_after(self, flush_secs: float) -> float:
        return max(
            flush_secs + STALL_MARGIN_SECS, STALL_MEDIAN_GAPS * self.median_gap, STALL_LONGEST_GAP * self.longest_gap
        )


def stall_flag(
    activity: Activity,
    *,
    now: float,
    flush_secs: float = 120.0,
    seen_live: bool = False,
    last_step: int | None = None,
) -> Flag | None:
    """The `stalled` flag, measured against `now` (cheap: the watcher calls it every poll)."""
    last = activity.last_wall_time
    if last is None:
        return None
    silence = now - last
    limit = activity.stall_after(flush_secs)
    if silence <= limit:
        return None
    if seen_live or silence < STALL_WARNING_SECS:
        return Flag(
            "stalled",
            "warning",
            None,
            last_step,
            None,
            f"no new data for {fmt_duration(silence)} (expected within {fmt_duration(limit)}: "
            f"writers flush every {flush_secs:.0f} s, longest gap so far {fmt_duration(activity.longest_gap)})",
        )
    return Flag("stalled", "info", None, last_step, None, f"last data {fmt_duration(silence)} ago: finished or stopped")


def raise_flags(
    scalars: RunScalars,
    *,
    vocab_size: int,
    loss_tags: Sequence[str],
    accuracy_tags: Sequence[str],
    now: float,
    flush_secs: float = 120.0,
    seen_live: bool = False,
    chance_comparable: bool | None = None,
) -> list[Flag]:
    """All flags of one run, most severe first.

    ``chance_comparable`` defaults to "the primary loss tag is not a TTT-summed total".
    """
    if chance_comparable is None:
        chance_comparable = not loss_tags or not is_summed_loss(loss_tags[0], scalars.tags())
    flags = value_flags(
        scalars,
        vocab_size=vocab_size,
        loss_tags=loss_tags,
        accuracy_tags=accuracy_tags,
        chance_comparable=chance_comparable,
    )
    activity = Activity.of(scalars, loss_tags[0] if loss_tags else None)
    last_step = last_step_of(scalars, loss_tags[0] if loss_tags else None)
    stalled = stall_flag(activity, now=now, flush_secs=flush_secs, seen_live=seen_live, last_step=last_step)
    if stalled is not None:
        flags.append(stalled)
    return sort_flags(flags)


def sort_flags(flags: Iterable[Flag]) -> list[Flag]:
    return sorted(flags, key=lambda f: -SEVERITY_ORDER[f.severity])


def last_step_of(scalars: RunScalars, loss_tag: str | None = None) -> int | None:
    """The run's step: its loss series' last step; the largest of any series only without a loss
    (one stray tag logged at step 2**40 must not make a run of 200 steps read "1099511.6M")."""
    loss = scalars.get(loss_tag) if loss_tag is not None else None
    if loss is not None and (last := loss.last()) is not None:
        return last[0]
    steps = [last[0] for s in scalars.series.values() if (last := s.last()) is not None]
    return max(steps) if steps else None


def worst_severity(flags: Iterable[Flag]) -> str:
    """ "ok" when no flag or only info flags, else the worst severity."""
    return RUN_STATUSES[max((SEVERITY_ORDER[f.severity] for f in flags), default=0)]
