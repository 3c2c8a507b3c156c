"""Hidden-state dumps as the trainers' own data preparation writes them (SpecForge's
prepare_hidden_states.py: rows_{g}-{g+group}/data_{idx}.ckpt, torch.save of a DataPoint dict).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import torch

HT = 64  # target hidden size


def states(seed: int, tokens: int, layers: int = 3) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 163_840, (tokens,), generator=gen)
    aux = [torch.randn(tokens, HT, generator=gen).to(torch.bfloat16) for _ in range(layers)]
    last = torch.randn(tokens, HT, generator=gen).to(torch.bfloat16)
    return ids, last, aux


def write_specforge(root: Path, count: int, *, group: int = 4, gz: bool = False) -> dict[int, tuple]:
    """prepare_hidden_states.py: rows_{g}-{g+group}/data_{idx}.ckpt, torch.save of a DataPoint dict."""
    written = {}
    for idx in range(count):
        ids, last, aux = states(idx, 20 + idx)
        loss_mask = torch.ones(len(ids), dtype=torch.long)
        loss_mask[:5] = 0
        data = {
            "input_ids": ids,
            "loss_mask": loss_mask,
            "hidden_state": last.unsqueeze(0),
            "aux_hidden_state": torch.cat(aux, dim=-1).unsqueeze(0),
        }
        g = idx // group * group
        folder = root / f"rows_{g}-{g + group}"
        folder.mkdir(parents=True, exist_ok=True)
        if gz:
            with gzip.open(folder / f"data_{idx}.ckpt.gz", "wb") as f:
                torch.save(data, f)  # type: ignore[arg-type]  # a GzipFile is a binary file; typeshed does not call it IO[bytes]
        else:
            torch.save(data, folder / f"data_{idx}.ckpt")
        written[idx] = (ids, loss_mask, last, aux)
    return written
