"""Runs for the TUI tests, written by the real writers at the story's sizes.

``story_run`` is the fine-tune of docs/case.md: SpecForge-style scalars
(train/ploss_0 at 18-20, train/acc_0 at 2-7 %), the drafter it started from (a safetensors
checkpoint whose d2t/t2d are the checkpoint's mapping, 32 000 of 163 840) and the run's own
mapping (.pt, SpecForge cache form), named by a triage.toml. ``healthy_run`` learns.
Wall times are fixed so the screens do not depend on the clock.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.tensorboard import SummaryWriter

from builders.children import finished
from builders.drafter import write_eagle3_drafter
from builders.mappings import DRAFT_VOCAB, story_mappings, write_specforge_mapping

WALLTIME0 = 1_750_000_000.0
STEP_EVERY = 50
SECONDS_PER_POINT = 30.0
# The clock the snapshot tests freeze the app at: 90 s after the last point of a 60-point run.
FROZEN_NOW = WALLTIME0 + 59 * SECONDS_PER_POINT + 90.0
LOSS_TAG = "train/ploss_0"
ACC_TAG = "train/acc_0"
HIDDEN = 64


def write_scalars(log_dir: Path, losses, accuracies, *, first_point: int = 0) -> None:
    """SpecForge tags, one point every STEP_EVERY steps, fixed wall times; written by a child process
    that has ended when this returns (a finished run, whoever looks: builders.children.finished)."""
    # The child works in the fork server's directory, not the test's: it is given an absolute path.
    finished(
        _write_scalars, Path(log_dir).absolute(), np.asarray(losses), np.asarray(accuracies), first_point=first_point
    )


def _write_scalars(log_dir: Path, losses, accuracies, *, first_point: int) -> None:
    writer = SummaryWriter(log_dir=str(log_dir), flush_secs=1)
    for index, (loss, acc) in enumerate(zip(losses, accuracies, strict=True), start=first_point):
        step = index * STEP_EVERY
        walltime = WALLTIME0 + index * SECONDS_PER_POINT
        writer.add_scalar(LOSS_TAG, float(loss), step, walltime=walltime)
        writer.add_scalar(ACC_TAG, float(acc), step, walltime=walltime)
    writer.close()


def story_curves(points: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    losses = 19.0 + 0.8 * np.sin(np.arange(points) / 5.0) + rng.uniform(-0.4, 0.4, points)
    accuracies = rng.uniform(0.02, 0.07, points)
    return losses, accuracies


def healthy_curves(points: int = 60, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.arange(points)
    losses = 2.4 + 7.5 * np.exp(-x / 12.0) + rng.uniform(-0.15, 0.15, points)
    accuracies = 0.72 - 0.6 * np.exp(-x / 12.0) + rng.uniform(-0.01, 0.01, points)
    return losses, accuracies


def story_run(root: Path, name: str = "k2-finetune", *, drafter: Path | None = None) -> Path:
    """The mismatch run: scalars at 18-20 / 2-7 %, a triage.toml naming the drafter and the run's mapping."""
    checkpoint_map, run_map = story_mappings()
    if drafter is None:
        drafter = write_eagle3_drafter(root / "drafters" / "aq-medai-k2", checkpoint_map.hot_ids)
    run = root / name
    write_scalars(run / "runs", *story_curves())
    write_specforge_mapping(run / "cache" / "vocab_mapping" / "k25.pt", run_map.hot_ids)
    (run / "triage.toml").write_text(
        "[run]\n"
        f"vocab_size = {DRAFT_VOCAB}\n"
        f"checkpoint = {json.dumps(str(Path('..') / drafter.relative_to(root)))}\n"
        'mapping = "cache/vocab_mapping/k25.pt"\n'
        f'loss_tags = ["{LOSS_TAG}"]\n'
        f'accuracy_tags = ["{ACC_TAG}"]\n'
    )
    return run


def healthy_run(root: Path, name: str = "scratch-drafter") -> Path:
    run = root / name
    write_scalars(run / "runs", *healthy_curves())
    (run / "triage.toml").write_text(f"[run]\nvocab_size = {DRAFT_VOCAB}\n")
    return run


def chance() -> float:
    return math.log(DRAFT_VOCAB)


def node_samples():
    """Fixed node samples for the node pane's snapshots (the seam: NodeScreen takes its sampler):
    a node without an NVIDIA driver, and one with two H200s, one training, one idle."""
    from triage_tui.core.watch.node import NO_DRIVER, DiskSample, GpuProcess, GpuSample, NodeSample

    gib = 1 << 30
    disks = (
        DiskSample("/scratch", 180 * gib, 1800 * gib, 2),
        DiskSample("/home", 812 * gib, 2048 * gib, 1),
    )
    host: dict[str, Any] = dict(
        hostname="gpu-node-07", cpu_percent=41.0, cpu_count=64, memory_used=310 * gib, memory_total=1024 * gib
    )
    no_driver = NodeSample(**host, gpu_error=f"{NO_DRIVER} (NVML Shared Library Not Found)", disks=disks)
    h200 = 143_771 * (1 << 20)  # NVML's memory total of an H200 (141 GB)
    gpus = (
        GpuSample(
            0,
            "NVIDIA H200",
            97,
            118 * gib,
            h200,
            71,
            612.4,
            700.0,
            (GpuProcess(48211, "python", 116 * gib), GpuProcess(48388, "pt_data_worker", None)),
        ),
        GpuSample(1, "NVIDIA H200", 0, 1 * gib, h200, 34, 74.9, 700.0),
    )
    two_gpus = NodeSample(**host, gpus=gpus, driver="570.124.06", disks=disks)
    return no_driver, two_gpus
