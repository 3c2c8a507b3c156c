"""The names discovery recognises: the files and directories of a run, told apart by name alone.

Nothing here opens a file; ``core/read/runs/listing.py`` applies these to each directory listing.
"""

from __future__ import annotations

import re

from triage_tui.core.formats import specforge_output, trainer_state

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


# Training consoles (core/read/console/): what a trainer's output is redirected to. ``*.log`` (``> train.log
# 2>&1``), ``nohup.out`` (nohup(1)), SLURM's ``slurm-%j.out`` and, for arrays, ``slurm-%A_%a.out``
# (sbatch(1) --output default), and any other ``*.out``. Not under a W&B directory: its
# ``debug*.log`` are the SDK's own, and ``files/output.log`` copies the console W&B's history holds.
CONSOLE_SUFFIXES = (".log", ".out")
# HF Trainer: <output_dir>/checkpoint-<global_step>/trainer_state.json (core/formats/trainer_state.py).
HF_CHECKPOINT_DIR = trainer_state.CHECKPOINT_DIR
TRAINER_STATE_NAME = trainer_state.TRAINER_STATE_NAME
# SpecForge ``specforge train``: <output_dir>/<run_id>-step<N>/ beside <run_id>-latest, <run_id>-best
# and <run_id>.best_meta.json (core/formats/specforge_output.py). For discovery, such a directory is
# one run per run id, its checkpoints the complete <run_id>-step<N>/ (a training_state.pt inside),
# oldest first, whether or not it holds event files: with tracking off (SpecForge's default) its
# only curves are in the console the user redirected (a *.log or *.out beside them, or named in
# triage.toml). The pointers are symlinks discovery lists but does not follow.
SPECFORGE_STEP_DIR = specforge_output.STEP_DIR
SPECFORGE_POINTER_SUFFIXES = (specforge_output.LATEST_SUFFIX, specforge_output.BEST_SUFFIX)
SPECFORGE_BEST_META_SUFFIX = specforge_output.BEST_META_SUFFIX


# A console is a run's by what it holds when nothing else says so (a directory with only ``train.log``:
# SpecForge with tracking off, before its first checkpoint): one of the metrics lines the console
# readers take (core/read/console/): SpecForge's ``step N: {...}`` (``specforge/training/assembly.py``
# ``_logger``), HF Trainer's printed log dict, which always holds ``'epoch'`` (``Trainer.log``), and
# speculators' Rich record with ``global_step=`` (``speculators/train/trainer.py``). Discovery
# looks for them in a console's first and last ``CONSOLE_SNIFF_BYTES`` only.
TRAINER_LINE = re.compile(rb"step \d{1,20}: \{|\{'[^\n]{0,4096}'epoch': |\bglobal_step=\d")
CONSOLE_SNIFF_BYTES = 64 << 10


def is_console_log_name(name: str) -> bool:
    """A training console log, by its base name: ``*.log``, ``*.out`` (``slurm-<job>.out``,
    ``nohup.out``). The caller leaves out W&B's directory and the serving logs a triage.toml names."""
    return name.endswith(CONSOLE_SUFFIXES) and not name.startswith(".")


def specforge_run_id(name: str) -> str | None:
    """The run id a SpecForge output entry belongs to (``<run_id>-step<N>``, ``<run_id>-latest``,
    ``<run_id>-best``, ``<run_id>.best_meta.json``), or None."""
    match = SPECFORGE_STEP_DIR.match(name)
    if match is not None:
        return match["run_id"]
    for suffix in (*SPECFORGE_POINTER_SUFFIXES, SPECFORGE_BEST_META_SUFFIX):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return None


def is_event_file_name(name: str) -> bool:
    """tensorboard io_wrapper.IsSummaryEventsFile: "tfevents" in the name, profiler dummies excluded."""
    return EVENT_INFIX in name and not name.endswith(PROFILE_EMPTY_SUFFIX)


def is_wandb_file_name(name: str) -> bool:
    """A W&B run's transaction log: run-<id>.wandb (not the .wandb.synced marker beside it)."""
    return name.startswith("run-") and name.endswith(WANDB_SUFFIX)
