"""Writers shared by the tests: event files from torch's SummaryWriter (what SpecForge and
speculators use) and SpecForge-shaped output directories, at the story's vocab sizes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch.utils.tensorboard import SummaryWriter

from builders.children import finished

DRAFT_VOCAB = 32_000
TARGET_VOCAB = 163_840


def write_scalars(log_dir: Path, series: dict[str, list[tuple[int, float]]], *, wall_time: float | None = None) -> Path:
    """Write scalars with torch's SummaryWriter, in a child process that has ended when this returns
    (a finished run: builders.children.finished); the new event file."""
    # The child works in the fork server's directory, not the test's: it is given an absolute path.
    written = finished(_write_scalars, Path(log_dir).absolute(), series, wall_time=wall_time)
    return log_dir / written.name


def _write_scalars(log_dir: Path, series: dict[str, list[tuple[int, float]]], *, wall_time: float | None) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    before = set(log_dir.glob("*tfevents*"))
    writer = SummaryWriter(log_dir=str(log_dir))
    points = sorted((step, tag, value) for tag, pts in series.items() for step, value in pts)
    for step, tag, value in points:
        writer.add_scalar(tag, value, global_step=step, walltime=None if wall_time is None else wall_time + step)
    writer.close()
    (new_file,) = set(log_dir.glob("*tfevents*")) - before
    return new_file


def open_writer(log_dir: Path, first_steps=range(0, 100, 10), start: float = 10.0) -> SummaryWriter:
    """A SummaryWriter left open, as a trainer holds it, with some points already flushed."""
    writer = SummaryWriter(log_dir=str(log_dir))
    for step in first_steps:
        writer.add_scalar("train/ploss_0", start - step / 100, global_step=step)
    writer.flush()
    return writer


def write_drafter_checkpoint(directory: Path, *, draft_vocab: int = DRAFT_VOCAB, hidden: int = 8) -> None:
    """A SpecForge-style checkpoint dir: config.json + model.safetensors + training_state.pt."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": hidden,
        "vocab_size": TARGET_VOCAB,
        "draft_vocab_size": draft_vocab,
    }
    (directory / "config.json").write_text(json.dumps(config))
    save_file(
        {"lm_head.weight": torch.zeros(draft_vocab, hidden), "d2t": torch.zeros(draft_vocab, dtype=torch.int64)},
        str(directory / "model.safetensors"),
    )
    torch.save({"epoch": 0, "global_step": 100}, directory / "training_state.pt")


def write_specforge_output(out: Path) -> Path:
    """<out>/runs/events..., <out>/epoch_0_step_{100,1000}/, cache/vocab_mapping/<hash>.pt, dumps; the event file."""
    event_file = write_scalars(out / "runs", {"train/ploss_0": [(0, 10.4), (50, 9.0)]})
    write_drafter_checkpoint(out / "epoch_0_step_100")
    write_drafter_checkpoint(out / "epoch_0_step_1000")
    mapping_dir = out / "cache" / "vocab_mapping"
    mapping_dir.mkdir(parents=True)
    hot = np.sort(np.random.default_rng(0).choice(TARGET_VOCAB, DRAFT_VOCAB, replace=False))
    t2d = torch.zeros(TARGET_VOCAB, dtype=torch.bool)
    t2d[hot] = True
    torch.save(
        {"d2t": torch.from_numpy(hot - np.arange(DRAFT_VOCAB)), "t2d": t2d},
        mapping_dir / "8f14e45fceea167a5a36dedd4bea2543.pt",
    )
    rows = out / "hidden_states" / "rows_0-5000"
    rows.mkdir(parents=True)
    torch.save({"input_ids": torch.arange(4)}, rows / "data_0.ckpt")
    return event_file


def age_tree(root: Path, seconds: float = 60.0) -> None:
    """Set every directory's mtime into the past, as on a tree nobody touched lately."""
    past = time.time() - seconds
    for directory, _dirs, _files in os.walk(root):
        os.utime(directory, (past, past))
