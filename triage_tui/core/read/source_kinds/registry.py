"""``SCALAR_SOURCES``: every kind of a run's scalar source, once.

Discovery takes each run's files of each kind from here, ``RunSources`` (core/read/sources.py) builds
their readers, the watcher wakes for the names they claim, and ``scan --json``'s ``sources`` lists
the kinds a run has in this order. A kind's series are prefixed (its ``prefix``) when a kind listed
before it has files in the run: the first writer a run has keeps its names. A new kind is one
module beside these and one entry here (CONTRIBUTING.md, "A new scalar log format").
"""

from __future__ import annotations

from triage_tui.core.read.source_kinds import (
    console,
    deepspeed_csv,
    lightning,
    mlflow,
    nanogpt,
    nemo_automodel,
    tensorboard,
    torchtune,
    trackio,
    trainer_state,
    wandb,
)
from triage_tui.core.read.source_kinds.kind import ScalarSourceKind

# nanoGPT's consoles before the training consoles' kind, which reads the same *.log for other
# trainers' lines: its series keep their printed names.
SCALAR_SOURCES: tuple[ScalarSourceKind, ...] = (
    tensorboard.KIND,
    wandb.KIND,
    nanogpt.KIND,
    console.KIND,
    trainer_state.KIND,
    mlflow.KIND,
    trackio.KIND,
    lightning.KIND,
    deepspeed_csv.KIND,
    torchtune.KIND,
    nemo_automodel.KIND,
)
