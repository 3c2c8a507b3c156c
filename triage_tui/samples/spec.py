"""The sample set's spec: everything the generator depends on, recorded in GENERATED.json."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from triage_tui.samples.world import (
    WorldSpec,
)

RUN_NAMES = ("healthy", "vocab-mismatch", "hidden-state-format", "verifier-mask", "diverged")
# SpecForge prepare_hidden_states.py groups files by --file-group-size (default 2000)
DUMP_GROUP = 2000
REVERSED_CHUNKS = (2, 1, 0)


@dataclass(frozen=True)
class SampleSpec:
    """Everything the generator depends on; GENERATED.json records it and a test compares it."""

    world: WorldSpec = field(default_factory=WorldSpec)
    dataset_sequences: int = 100_000  # the dataset the mappings are counted over (loss-masked tokens)
    batch_size: int = 4
    ttt_length: int = 2
    pretrain_steps: int = 150
    healthy_steps: int = 200
    finetune_steps: int = 150
    diverged_steps: int = 150
    scratch_lr: float = 1e-2
    finetune_lr: float = 5e-5
    diverged_lr: float = 0.5
    diverged_batch_size: int = 2  # fp16 matmuls are 50x slower than bf16 on CPU
    diverged_warmup: int = 40
    diverged_nan_steps: int = 10  # the user stops the run after this many NaN steps
    dumps_per_run: int = 16
    eval_interval: int = 25

    @classmethod
    def small(cls) -> SampleSpec:
        """The reduced version the tests regenerate (same sizes of vocab and model, fewer steps)."""
        return cls(
            dataset_sequences=40_000,
            # enough pretraining that drafter-a is confident: after 55 steps the mismatched fine-tune's
            # loss stays above ln 32000 = 10.37 (its lowest: 10.82; 11.69 after 70)
            pretrain_steps=55,
            healthy_steps=45,
            finetune_steps=12,
            diverged_steps=40,
            diverged_lr=1.0,
            diverged_warmup=15,
            # an fp16 step costs ~7x a bf16 one per sequence on a CPU without fp16 units (measured:
            # 1.1 s for 2 sequences, 0.33 s for 4): one sequence a step, and two NaN steps are enough
            diverged_batch_size=1,
            diverged_nan_steps=2,
            dumps_per_run=6,
            eval_interval=0,
        )

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]
