"""SpecForge's output directory (``specforge train --config``): its checkpoints, the ``-latest`` and
``-best`` pointers, and ``<run_id>.best_meta.json``.

From sgl-project/SpecForge ``specforge/training/checkpoint.py`` (``CheckpointManager``, at
a6b6b0230009d15ec2a97a57384e6f53f0f96946; the same file ships in the package installed here):

- a checkpoint is ``<output_dir>/<run_id>-step<N>/`` holding ``training_state.pt`` (rank 0's shared
  payload: the drafter's weights, ``global_step``, ``run_id``, ...) and ``training_state_rank<r>.pt``
  per rank; a directory without ``training_state.pt`` is an unfinished save, never a target;
- after each save ``<run_id>-latest`` is a relative symlink to the checkpoint's directory name
  (``_point``: ``os.symlink(os.path.basename(ckpt_dir), link)``; without symlink support there is
  none, and the step directories are the record);
- when an evaluation beats the best so far on ``best_metric`` (``eval/simulated_acc_len`` by
  default, higher wins), ``<run_id>-best`` points at that step's checkpoint and
  ``<run_id>.best_meta.json`` holds ``{"run_id", "step", "score", "metric", "metrics"}``
  (``update_best``; json with indent 2, replaced atomically); the trainer ignores a meta whose
  run id or metric differs, or whose checkpoint is gone (``_load_best_meta``);
- saving step S first deletes every step directory >= S, and the best record with them
  (``_rewind``: a rollback forks the timeline).

``run_id`` is ``specforge-run`` and ``output_dir`` ``./output`` unless the config says otherwise
(``specforge/config/schema.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triage_tui.core import bounds
from triage_tui.core.errors import BadInput
from triage_tui.core.formats.json_file import read_json
from triage_tui.core.metric_names import ACCEPTANCE_LENGTH_WORD

STATE_FILE = "training_state.pt"
STEP_DIR = re.compile(r"^(?P<run_id>.+)-step(?P<step>\d{1,18})$")  # CheckpointManager.resolve_resume_dir's pattern
LATEST_SUFFIX = "-latest"
BEST_SUFFIX = "-best"
BEST_META_SUFFIX = ".best_meta.json"
# A best_meta.json is a few hundred bytes (one evaluation's metrics); its metrics nest 2 levels.
MAX_META_BYTES = 1 << 20
MAX_META_DEPTH = 8
# What a score's metric measures, by its last name part: tokens per draft, or a fraction.
_ACCEPTANCE_LENGTH = re.compile(ACCEPTANCE_LENGTH_WORD + "$")
_ACCURACY = re.compile(r"(^|_)acc(uracy)?$")
_POSITION = re.compile(r"^eval/per_position_acc/\d+$")  # SpecForge's evaluator: one accuracy per TTT position


@dataclass(frozen=True)
class BestMeta:
    """``<run_id>.best_meta.json``: the step whose evaluation scored best, and that evaluation."""

    path: Path
    run_id: str
    step: int
    score: float  # the value of ``metric`` at ``step`` (higher is better)
    metric: str
    metrics: tuple[tuple[str, float], ...]  # the evaluation's numeric metrics (lists as name/i)
    checkpoint: Path  # <output_dir>/<run_id>-step<step>
    complete: bool  # that checkpoint holds its training_state.pt (else the trainer ignores the meta)


def is_complete(checkpoint: Path) -> bool:
    """A finished save: the directory holds ``training_state.pt`` (CheckpointManager._all_checkpoints)."""
    try:
        return (checkpoint / STATE_FILE).is_file()
    except OSError:
        return False


def read_best_meta(path: str | Path) -> BestMeta:
    """A ``<run_id>.best_meta.json``; BadInput naming the file when it is unreadable, not JSON, or
    lacks what ``update_best`` writes (a string run_id and metric, a whole step, a finite score)."""
    path = Path(path)
    document = read_json(path, max_bytes=MAX_META_BYTES, max_depth=MAX_META_DEPTH)
    if not isinstance(document, dict):
        raise BadInput(path, "not a SpecForge best_meta.json: the document is not an object")
    run_id, metric, step, score = (document.get(k) for k in ("run_id", "metric", "step", "score"))
    if not isinstance(run_id, str) or not run_id or not isinstance(metric, str) or not metric:
        raise BadInput(path, "not a SpecForge best_meta.json: no run_id or metric string")
    named = path.name.removesuffix(BEST_META_SUFFIX)
    if run_id != named:  # its checkpoint is <run_id>-step<N> beside it: never a path elsewhere
        raise BadInput(path, f"run_id {_short(run_id)} is not {_short(named)}, the run its name says")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**63:
        raise BadInput(path, f"not a SpecForge best_meta.json: step is no whole number ({_short(step)})")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise BadInput(path, f"not a SpecForge best_meta.json: score is no finite number ({_short(score)})")
    metrics = document.get("metrics")
    numbers = tuple(_numbers(metrics)) if isinstance(metrics, dict) else ()
    try:
        bounds.step(step)
        _check_score(metric, float(score), numbers)
    except bounds.Impossible as err:
        raise BadInput(path, str(err)) from None
    checkpoint = path.parent / f"{run_id}-step{step}"
    return BestMeta(path, run_id, step, float(score), metric, numbers, checkpoint, is_complete(checkpoint))


def _check_score(metric: str, score: float, numbers: tuple[tuple[str, float], ...]) -> None:
    """The score in its metric's range: an accuracy in [0, 1]; an acceptance length in [0, k + 1],
    k the evaluation's positions where it lists them (SpecForge's ``simulated_acc_len`` is the sum of
    the chained per-position accuracies, without the bonus token: specforge/eval/evaluator.py
    ``_simulated_acc_len``; an engine's counts it), else at most ``bounds.MAX_ACCEPTANCE_LENGTH``."""
    positions = [value for name, value in numbers if _POSITION.match(name)]
    for index, value in enumerate(positions):
        bounds.rate(value, f"eval/per_position_acc {index}")
    name = metric.rsplit("/", 1)[-1]
    if _ACCEPTANCE_LENGTH.search(name):
        limit = len(positions) + 1 if positions else bounds.MAX_ACCEPTANCE_LENGTH
        if not 0.0 <= score <= limit:
            raise bounds.Impossible(f"score {score:.4g} of {metric} lies outside [0, {limit:g}]")
    elif _ACCURACY.search(name):
        bounds.rate(score, f"score of {metric}")


def _numbers(metrics: dict[str, Any]) -> Iterable[tuple[str, float]]:
    """The evaluation's numbers; a list (``eval/per_position_acc``) as ``name/i``, as SpecForge's
    trackers name it (``specforge/training/tracking.py`` ``scalar_metrics``)."""
    for key, value in metrics.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            yield from _number(key, value)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, (int, float)) and not isinstance(item, bool):
                    yield from _number(f"{key}/{index}", item)


def _number(key: str, value: float) -> Iterable[tuple[str, float]]:
    try:
        yield key, float(value)
    except OverflowError:  # an integer beyond a float: no evaluation logs one
        return


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
