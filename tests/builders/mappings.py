"""The two vocab mappings of docs/case.md, built at full size.

Both are SpecForge-style (draft vocab sorted by target id, d2t offsets). The story's
numbers: 252 of 32 000 positions map to the same target token, 25 750 target tokens are
in both draft vocabs, 6 250 only in the checkpoint's, target vocab 163 840.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from triage_tui.core.vocab import VocabMapping

TARGET_VOCAB = 163_840
DRAFT_VOCAB = 32_000
POSITIONAL_MATCH = 252
OVERLAP = 25_750
ONLY_IN_CHECKPOINT = DRAFT_VOCAB - OVERLAP  # 6 250


def story_hot_ids(seed: int = 252) -> tuple[np.ndarray, np.ndarray]:
    """(checkpoint hot ids, run hot ids), both ascending, with exactly the story's counts.

    Ids 0..251 are shared at the same positions. The run's vocab then has its 6 250 own
    tokens at low ids, which pushes every shared token 6 250 positions later than in the
    checkpoint's vocab, whose own 6 250 tokens sit above all shared ones: no further
    position can coincide.
    """
    rng = np.random.default_rng(seed)
    shared_head = np.arange(POSITIONAL_MATCH)
    run_only = np.arange(POSITIONAL_MATCH, POSITIONAL_MATCH + ONLY_IN_CHECKPOINT)
    shared_pool = np.arange(run_only[-1] + 1, 140_000)
    shared_tail = np.sort(rng.choice(shared_pool, OVERLAP - POSITIONAL_MATCH, replace=False))
    checkpoint_only = np.sort(rng.choice(np.arange(140_000, TARGET_VOCAB), ONLY_IN_CHECKPOINT, replace=False))
    checkpoint = np.concatenate([shared_head, shared_tail, checkpoint_only])
    run = np.concatenate([shared_head, run_only, shared_tail])
    return checkpoint.astype(np.int64), run.astype(np.int64)


def story_mappings(seed: int = 252) -> tuple[VocabMapping, VocabMapping]:
    """(the drafter checkpoint's mapping, the fine-tune run's mapping)."""
    checkpoint, run = story_hot_ids(seed)
    return (
        VocabMapping(checkpoint, TARGET_VOCAB, source="story:checkpoint"),
        VocabMapping(run, TARGET_VOCAB, source="story:run"),
    )


def write_specforge_mapping(path: Path, hot_ids: np.ndarray) -> Path:
    """SpecForge's cache/vocab_mapping/<key>.pt (specforge/data/preprocessing.py): {"d2t": offsets, "t2d": mask}."""
    path.parent.mkdir(parents=True, exist_ok=True)
    hot_ids = np.asarray(hot_ids, dtype=np.int64)
    t2d = torch.zeros(TARGET_VOCAB, dtype=torch.bool)
    t2d[torch.from_numpy(hot_ids.copy())] = True
    torch.save({"d2t": torch.from_numpy(hot_ids - np.arange(hot_ids.shape[0])), "t2d": t2d}, path)
    return path
