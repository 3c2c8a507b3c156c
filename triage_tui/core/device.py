"""Which torch device a computation runs on: the one place ``--device auto`` is decided.

The replay and verifier-mask checks and the remap's GPU gather all take a device; each asks
here, so "auto" means the same everywhere (docs/contracts.md, --device: GPU when there is one, CPU otherwise,
same results). torch is imported on call: the remap's single pass and the mapping readers
import this module without needing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"``: CUDA when torch sees a GPU, else CPU."""
    import torch

    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)
