"""Output directories as trainers leave them, found as the runs they are (docs/formats.md §7)."""

from __future__ import annotations

from builders.tensorboard import write_scalars
from builders.wandb_runs import write_run
from triage_tui.core.watch import Watcher


def test_event_files_and_wandb_runs_in_one_output_directory_are_one_run(tmp_path):
    """HF Trainer with report_to tensorboard and wandb, stopped before its first save: runs/ and
    wandb/ side by side and no checkpoint. One trainer wrote both: one run, both sources read."""
    out = tmp_path / "out"
    write_scalars(out / "runs" / "Dec03_10-00-00_node", {"train/loss": [(s, 3.0 - s / 100) for s in range(0, 100, 10)]})
    write_run(out, [{"train/loss": 3.0 - s / 100} for s in range(0, 100, 10)], steps=list(range(0, 100, 10)))
    (status,) = Watcher([tmp_path], use_watchdog=False, strict=True).poll_once()
    assert status.info.path == out and status.info.sources == ("tensorboard", "wandb")
    assert status.errors == ()
    assert status.loss_tag == "train/loss" and status.metrics["loss"]["count"] == 10
    assert len(status.scalars.get("wandb/train/loss")) == 10  # the W&B points, apart


def test_a_wandb_directory_alone_beside_nothing_is_still_its_own_run(tmp_path):
    write_run(tmp_path / "out", [{"train/loss": 2.0}, {"train/loss": 1.9}], steps=[0, 10])
    (status,) = Watcher([tmp_path], use_watchdog=False, strict=True).poll_once()
    assert status.info.path.parent == tmp_path / "out" / "wandb" and status.info.sources == ("wandb",)
