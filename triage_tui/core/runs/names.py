"""The names discovery recognises: the files and directories of a run, told apart by name alone.

Nothing here opens a file; ``core/runs/listing.py`` applies these to each directory listing.
"""

from __future__ import annotations

import re

MANIFEST_NAME = "triage.toml"
CONFIG_NAME = "config.json"
TRAINING_STATE_NAME = "training_state.pt"  # SpecForge: inside each epoch_{e}_step_{s}/ checkpoint
RUN_YAML_NAME = "run.yaml"  # speculators 0.9.0: in --save-path, beside the <epoch>/ checkpoints
# Event-file predicate of TensorBoard (io_wrapper.IsSummaryEventsFile) and rustboard
# (EVENT_FILE_BASENAME_INFIX): basename contains "tfevents"; profiler placeholders excluded.
EVENT_INFIX = "tfevents"
PROFILE_EMPTY_SUFFIX = ".profile-empty"
LOG_DIR_NAMES = frozenset({"runs", "logs", "tensorboard"})
# W&B writes <dir>/wandb/{run,offline-run}-<date>-<id>/run-<id>.wandb (wandb/sdk/wandb_settings.py:
# sync_dir, sync_file); besides them wandb/ holds latest-run (a link) and debug logs.
WANDB_DIR_NAME = "wandb"
WANDB_SUFFIX = ".wandb"
TARGET_DIR_NAMES = frozenset({"target", "target_model"})
SKIPPED_DIR_NAMES = frozenset({"__pycache__"})
WEIGHT_NAMES = frozenset({"pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json"})
HS_SAFETENSORS = re.compile(r"^hs_\d+\.safetensors$")  # speculators offline dumps
SPECFORGE_DUMP = re.compile(r"^data_\d+\.ckpt(\.gz)?$")  # SpecForge prepare_hidden_states.py
MAPPING_FILE = re.compile(r"(vocab.*mapping.*\.pt|^d2t\.pt|^d2t\.npy|^t2d\.npy|^t2d-\d+\.npy)$", re.IGNORECASE)
MAPPING_DIR = re.compile(r"vocab.*mapping", re.IGNORECASE)  # SpecForge cache/vocab_mapping/<hash>.pt
HIDDEN_DIR = re.compile(r"hidden", re.IGNORECASE)  # hidden_states/, hidden-states/, ...


def is_event_file_name(name: str) -> bool:
    """tensorboard io_wrapper.IsSummaryEventsFile: "tfevents" in the name, profiler dummies excluded."""
    return EVENT_INFIX in name and not name.endswith(PROFILE_EMPTY_SUFFIX)


def is_wandb_file_name(name: str) -> bool:
    """A W&B run's transaction log: run-<id>.wandb (not the .wandb.synced marker beside it)."""
    return name.startswith("run-") and name.endswith(WANDB_SUFFIX)
