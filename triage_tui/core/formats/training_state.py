"""The training arguments a SpecForge run saved next to its checkpoints.

SpecForge ``epoch_{e}_step_{s}/training_state.pt`` is ``torch.save({"epoch", "global_step",
"args": argparse.Namespace, **optimizer.state_dict()})`` (reference/eagle3.md section 1.1), and
SpecForge itself loads it with ``weights_only=False``. Here the allow-list grows by exactly
``argparse.Namespace``: optimizer state is tensors and plain containers, which the default
allows; anything else is refused and named.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.safe_torch import safe_torch_load

TRAINING_STATE = "training_state.pt"


def read_training_args(path: str | Path) -> dict:
    """``vars(args)`` of a ``training_state.pt`` (or of the one in the directory ``path``)."""
    path = Path(path)
    if path.is_dir():
        path = path / TRAINING_STATE
    state = safe_torch_load(path, allowed_globals=(argparse.Namespace,))
    if not isinstance(state, dict):
        raise BadInput(path, f"holds a {type(state).__name__}, not a training-state dict")
    args = state.get("args")
    if isinstance(args, argparse.Namespace):
        return dict(vars(args))
    if isinstance(args, dict):
        return dict(args)
    keys = ", ".join(sorted(map(str, state))[:8])
    raise BadInput(path, f"no 'args' namespace in this training state (keys: {keys})")
