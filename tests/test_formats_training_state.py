"""read_training_state on a training_state.pt saved the way SpecForge classic saves it."""

from __future__ import annotations

import argparse
import os

import pytest
import torch

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.training_state import read_training_state


def specforge_args(tmp_path) -> argparse.Namespace:
    # A subset of scripts/train_eagle3.py's parser, parsed from a real command line.
    parser = argparse.ArgumentParser()
    parser.add_argument("--target-model-path", type=str, required=True)
    parser.add_argument("--draft-model-config", type=str)
    parser.add_argument("--train-data-path", type=str)
    parser.add_argument("--output-dir", type=str)
    parser.add_argument("--cache-dir", type=str, default="./cache")
    parser.add_argument("--ckpt-dir", type=str, default=None)
    parser.add_argument("--num-epochs", type=int, default=10)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--ttt-length", type=int, default=7)
    return parser.parse_args(
        [
            "--target-model-path",
            "/models/Kimi-K2.5",
            "--draft-model-config",
            "configs/kimi-k2-eagle3.json",
            "--train-data-path",
            "data/k25.jsonl",
            "--output-dir",
            str(tmp_path / "outputs"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--ckpt-dir",
            "/drafters/AQ-MedAI-K2-eagle3",
        ]
    )


def save_training_state(path, args, extra=None) -> None:
    """scripts/train_eagle3.py: {"epoch", "global_step", "args"} + BF16Optimizer.state_dict()."""
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=100)
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    scheduler.step()
    state = {
        "epoch": 2,
        "global_step": 1200,
        "args": args,
        "optimizer_state_dict": optimizer.state_dict(),
        "scheduler_state_dict": scheduler.state_dict(),
    }
    state.update(extra or {})
    torch.save(state, path)


def test_args_of_a_specforge_training_state(tmp_path):
    args = specforge_args(tmp_path)
    folder = tmp_path / "outputs" / "epoch_2_step_1200"
    folder.mkdir(parents=True)
    save_training_state(folder / "training_state.pt", args)
    for path in (folder, folder / "training_state.pt"):
        got = read_training_state(path).args
        assert got == vars(args)
        assert got["ckpt_dir"] == "/drafters/AQ-MedAI-K2-eagle3"
        assert got["target_model_path"] == "/models/Kimi-K2.5" and got["cache_dir"] == str(tmp_path / "cache")


def test_allow_list_grows_by_namespace_only(tmp_path):
    class Opener:
        def __init__(self, marker):
            self.marker = str(marker)

        def __reduce__(self):
            return (os.system, (f"touch {self.marker}",))

    marker = tmp_path / "PWNED"
    args = specforge_args(tmp_path)
    args.hook = Opener(marker)  # a Namespace is allowed; what it carries is still checked
    save_training_state(tmp_path / "training_state.pt", args)
    with pytest.raises(BadInput, match="refused to unpickle: posix.system"):
        read_training_state(tmp_path / "training_state.pt")
    assert not marker.exists()

    # Only Namespace was added: a Path inside the args (type=Path arguments) is refused too.
    args = specforge_args(tmp_path)
    args.output_dir = tmp_path / "outputs"
    save_training_state(tmp_path / "training_state.pt", args)
    with pytest.raises(BadInput, match="refused to unpickle: pathlib.PosixPath"):
        read_training_state(tmp_path)


def test_state_without_args(tmp_path):
    torch.save({"epoch": 1, "global_step": 3}, tmp_path / "training_state.pt")
    with pytest.raises(
        BadInput,
        match=r"no 'args' namespace and no 'draft_state_dict' in this training state \(keys: epoch, global_step\)",
    ):
        read_training_state(tmp_path)
    with pytest.raises(BadInput, match="no such file"):
        read_training_state(tmp_path / "elsewhere")
