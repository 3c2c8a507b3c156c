"""The training state a SpecForge run saved next to (or as) its checkpoints.

Two generations of SpecForge write a ``training_state.pt``:

- classic (``scripts/train_eagle3.py``, 2025): ``epoch_{e}_step_{s}/training_state.pt`` is
  ``torch.save({"epoch", "global_step", "args": argparse.Namespace, **optimizer.state_dict()})``
  beside ``config.json`` + ``model.safetensors`` (SpecForge classic `specforge/modeling/draft/llama3_eagle.py`);
  SpecForge
  itself loads it with ``weights_only=False``. Here the allow-list grows by exactly
  ``argparse.Namespace``.
- 0.2.0 (``specforge/training/controller.py`` ``save_checkpoint`` through
  ``specforge/training/checkpoint.py`` ``CheckpointManager.save``):
  ``<run_id>-step<N>/training_state.pt`` is the checkpoint itself: ``{"draft_state_dict":
  {name: tensor}, "global_step", "epoch", "strategy", "run_id", "world_size", ...}`` plus the
  resume contract, whose ``"specforge_model_provenance"`` is a tuple of ``(key, value)`` pairs
  naming the target model and the draft config source by absolute path
  (``specforge/training/provenance.py`` ``model_source_identity``). No ``args``, no
  config.json, no safetensors; SpecForge 0.2.0 reads it back with ``weights_only=True``
  (``specforge/training/model_loading.py``), as triage does.

Optimizer state is tensors and plain containers, which the weights-only loader allows;
anything else is refused and named.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.safe_torch import safe_torch_load

TRAINING_STATE = "training_state.pt"
DRAFT_STATE_DICT = "draft_state_dict"  # SpecForge 0.2.0: the drafter's weights and d2t/t2d buffers
PROVENANCE_KEY = "specforge_model_provenance"


@dataclass(frozen=True)
class TrainingState:
    """What a training_state.pt says about its run (tensors of the drafter stay out of it)."""

    path: Path
    args: dict[str, Any] = field(default_factory=dict)  # classic: vars(args); 0.2.0: provenance paths
    generation: str = "classic"  # "classic" | "0.2.0"
    draft_vocab_size: int | None = None  # 0.2.0: rows of draft_state_dict's lm_head (or d2t)
    target_vocab_size: int | None = None  # 0.2.0: entries of draft_state_dict's t2d


def _state_path(path: str | Path) -> Path:
    path = Path(path)
    return path / TRAINING_STATE if path.is_dir() else path


def read_training_state(path: str | Path) -> TrainingState:
    """A classic or 0.2.0 ``training_state.pt`` (or the one in the directory ``path``)."""
    path = _state_path(path)
    state = safe_torch_load(path, allowed_globals=(argparse.Namespace,))
    if not isinstance(state, dict):
        raise BadInput(path, f"holds a {type(state).__name__}, not a training-state dict")
    args = state.get("args")
    if isinstance(args, argparse.Namespace):
        return TrainingState(path, dict(vars(args)))
    if isinstance(args, dict):
        return TrainingState(path, dict(args))
    draft = state.get(DRAFT_STATE_DICT)
    if isinstance(draft, dict):
        return TrainingState(
            path,
            _provenance_paths(state.get(PROVENANCE_KEY)),
            "0.2.0",
            draft_vocab_size=_rows(draft, "lm_head.weight", "d2t"),
            target_vocab_size=_rows(draft, "t2d"),
        )
    keys = ", ".join(sorted(map(str, state))[:8])
    raise BadInput(path, f"no 'args' namespace and no '{DRAFT_STATE_DICT}' in this training state (keys: {keys})")


def _rows(state: dict, *names: str) -> int | None:
    for name in names:
        shape = getattr(state.get(name), "shape", None)
        if shape:
            return int(shape[0])
    return None


def _provenance_paths(provenance: Any) -> dict[str, str]:
    """``{"target_model": path, "draft_config": path, "vocab_mapping": path}`` from the resume contract.

    Each value is ``(kind, absolute path, ...)`` for a local file or directory, or
    ``("reference", name)`` for a source that was no local path when the run started, a hub id
    (``model_source_identity``); both are kept, a reference with the commit the run loaded it at
    (``target_revision``/``draft_revision``, the configs' ``_commit_hash``) as ``name@commit``, which
    core/diagnose/check_inputs.py looks up in the local Hugging Face cache.
    """
    try:
        items = dict(provenance) if provenance is not None else {}
    except (TypeError, ValueError):
        return {}
    revisions = {"target_model": items.get("target_revision"), "draft_config": items.get("draft_revision")}
    paths = {}
    for key in ("target_model", "draft_config", "vocab_mapping"):
        identity = items.get(key)
        if isinstance(identity, (tuple, list)) and len(identity) >= 2 and isinstance(identity[1], str) and identity[1]:
            revision = revisions.get(key)
            reference = identity[0] == "reference" and isinstance(revision, str) and revision.isalnum()
            paths[key] = f"{identity[1]}@{revision}" if reference else identity[1]
    return paths
