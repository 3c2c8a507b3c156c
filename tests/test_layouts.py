"""Output directories as trainers leave them, found as the runs they are (docs/formats.md §7)."""

from __future__ import annotations

from builders.tensorboard import write_scalars
from builders.wandb_runs import write_run
from triage_tui.core.watch.watcher import Watcher


def test_event_files_and_wandb_runs_in_one_output_directory_are_one_run(tmp_path):
    """HF Trainer with report_to tensorboard and wandb, stopped before its first save: runs/ and
    wandb/ side by side and no checkpoint. One trainer wrote both: one run, both sources read."""
    out = tmp_path / "out"
    write_scalars(out / "runs" / "Dec03_10-00-00_node", {"train/loss": [(s, 3.0 - s / 100) for s in range(0, 100, 10)]})
    write_run(out, [{"train/loss": 3.0 - s / 100} for s in range(0, 100, 10)], steps=list(range(0, 100, 10)))
    (status,) = Watcher([tmp_path], use_watchdog=False, strict=True).poll_once()
    assert status.info.path == out and status.info.sources == ("tensorboard", "wandb")
    assert status.errors == ()
    assert status.loss_tag == "train/loss" and status.metrics.loss.count == 10
    assert len(status.scalars.get("wandb/train/loss")) == 10  # the W&B points, apart


def test_a_wandb_directory_alone_beside_nothing_is_still_its_own_run(tmp_path):
    write_run(tmp_path / "out", [{"train/loss": 2.0}, {"train/loss": 1.9}], steps=[0, 10])
    (status,) = Watcher([tmp_path], use_watchdog=False, strict=True).poll_once()
    assert status.info.path.parent == tmp_path / "out" / "wandb" and status.info.sources == ("wandb",)


def test_two_wandb_runs_in_one_output_directory_keep_every_point(tmp_path):
    """A re-run into the same --output-dir: a second W&B run (another id) from step 0. The newest
    run's series keep their names; the earlier run's are kept apart under wandb/<id>/, never replaced."""
    from builders.tensorboard import write_drafter_checkpoint

    out = tmp_path / "out"
    write_drafter_checkpoint(out / "checkpoint-160")
    steps = list(range(160))
    first = write_run(out, [{"train/loss": 5.0} for _ in steps], steps=steps)
    # The second run as wandb writes it beside the first (its own offline-run-<time>-<id> directory).
    second = write_run(tmp_path / "rerun", [{"train/loss": 2.0} for _ in steps], steps=steps)
    second.parent.rename(out / "wandb" / second.parent.name)
    assert first.name != second.name and first.parent.name < second.parent.name
    statuses = Watcher([tmp_path], use_watchdog=False, strict=True).poll_once()
    assert len(statuses) == 1, [(s.info.path, s.info.sources) for s in statuses]
    (status,) = statuses
    assert status.info.path == out and status.errors == ()
    newest, earlier = status.scalars.get("train/loss"), status.scalars.get(f"wandb/{first.stem[4:]}/train/loss")
    assert newest is not None and earlier is not None
    assert (len(newest), set(newest.values.tolist())) == (160, {2.0})
    assert (len(earlier), set(earlier.values.tolist())) == (160, {5.0})
    assert status.loss_tag == "train/loss"
