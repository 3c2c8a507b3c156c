"""The one metric-names table: each trainer recognised by its own names, and real trainers' W&B runs
(SpecForge 0.2.0's tracker and metric reducer, speculators 0.9.0's W&B handler) flagged by them."""

from __future__ import annotations

import re
import time

import pytest

from triage_tui.core.metric_names import TRAINERS, match_trainer, ordered, per_position
from triage_tui.core.watch.signals.tags import pick_metric_tags


def instances(name: str, count: int = 3) -> list[str]:
    """A table name with its indices filled in (0..count-1; two-index names: parallel draft 0 and 1)."""
    slots = re.findall(r"\{[ijk]\}", name)
    if not slots:
        return [name]
    if len(slots) == 1:
        return [name.replace(slots[0], str(n)) for n in range(count)]
    return [name.replace(slots[0], str(i), 1).replace(slots[1], str(j), 1) for i in range(2) for j in range(count)]


@pytest.mark.parametrize("names", TRAINERS, ids=lambda n: n.trainer)
def test_each_trainer_is_recognised_by_its_own_names(names):
    tags = [tag for name in names.names for tag in instances(name)]
    assert match_trainer(tags) is names
    assert names.source and re.search(r"\d", names.source)  # every entry says which version it comes from


def test_every_name_is_one_pattern_and_positions_come_in_order():
    for names in TRAINERS:
        for name in names.names:
            assert re.fullmatch(r"[A-Za-z0-9_/{}.]+", name), name
    tags = ["train/acc_1", "train/acc", "train/acc_0", "eval/per_position_acc/1", "eval/per_position_acc/0"]
    assert ordered(tags, TRAINERS[0].accuracy) == [
        "train/acc_0",
        "train/acc",
        "eval/per_position_acc/0",
        "train/acc_1",
        "eval/per_position_acc/1",
    ]


def test_modelopt_positions_are_the_steps_of_the_first_parallel_draft():
    tags = [f"train_acc/parallel_{i}_step_{j}" for i in range(2) for j in range(3)] + ["loss", "estimated_training_ar"]
    names = match_trainer(tags)
    assert names.trainer == "modelopt"
    assert per_position(tags, names) == [(j, f"train_acc/parallel_0_step_{j}") for j in range(3)]
    _, accuracy = pick_metric_tags(tags)
    assert accuracy[0] == "train_acc/parallel_0_step_0"


def test_a_bare_hf_trainer_loss_is_hf_trainer():
    assert match_trainer(["train/loss", "train/learning_rate", "train/global_step"]).trainer == "hf-trainer"
    assert match_trainer(["something/else"]) is None


# ----------------------------------------------------------------- the trainers' own code, logging to W&B


SPECFORGE_RUN = """
from argparse import Namespace
import torch
from specforge.eval.evaluator import Evaluator
from specforge.training.controller import _reduce_eagle3_metrics
from specforge.training.tracking import create_tracker_logger

out = sys.argv[1]
args = Namespace(report_to="wandb", wandb_dir=out, wandb_offline=True, wandb_project="triage-test",
                 wandb_name="story", wandb_key=None, draft_vocab_size=32000)
log = create_tracker_logger(args, out)
for n in range(30):
    # The story's numbers: p-loss 18-20 nats, accuracy 2-7 %, 7 TTT steps, 4096 tokens a step.
    raw = {"acc_corrects": [4096 * (0.07 - 0.007 * i) for i in range(7)], "acc_denoms": [4096.0] * 7,
           "metric_losses": [18.0 + 0.3 * i + 0.01 * (n % 4) for i in range(7)], "metric_loss_denoms": [4096.0] * 7,
           "acceptance_rates": [0.02] * 7}
    metrics = _reduce_eagle3_metrics(raw, device=torch.device("cpu"), process_group=None, ploss_decay=0.8)
    metrics["lr"] = 1e-4
    log(metrics, 50 * n)
    if n % 10 == 9:
        per_position = [0.07 - 0.007 * i for i in range(7)]
        log({"eval/avg_loss": 19.0, "eval/avg_acc": per_position[0], "eval/per_position_acc": per_position,
             "eval/simulated_acc_len": Evaluator._simulated_acc_len(per_position)}, 50 * n + 25)
        # (a later step: W&B drops a row logged at a step it has already committed)
log.close()
"""


def test_specforge_logging_to_wandb_is_recognised_and_flagged(tmp_path):
    from builders.tensorboard import write_drafter_checkpoint
    from builders.wandb_runs import run_script
    from triage_tui.core.watch.watcher import Watcher

    out = tmp_path / "out"
    write_drafter_checkpoint(out / "epoch_0_step_1000")
    run_script(SPECFORGE_RUN, str(out))
    (status,) = Watcher([tmp_path], use_watchdog=False, strict=True).poll_once(now=time.time())
    document = status.to_json()
    assert document["path"] == str(out) and document["sources"] == ["wandb"]
    assert document["trainer"] == "specforge"
    metrics = document["metrics"]
    assert metrics["loss"]["tag"] == "train/ploss_0" and metrics["accuracy"]["tag"] == "train/acc_0"
    assert [p["tag"] for p in metrics["per_position_accuracy"]] == [f"train/acc_{i}" for i in range(7)]
    assert metrics["per_position_accuracy"][6]["last"] == pytest.approx(0.07 - 0.042)
    assert (
        metrics["acceptance_length"]["tag"] == "eval/simulated_acc_len" and metrics["acceptance_length"]["count"] == 3
    )
    assert {"loss_above_chance", "accuracy_at_chance"} <= {f["kind"] for f in document["flags"]}


SPECULATORS_RUN = """
import logging
from speculators.train.logger import setup_metric_logger
from speculators.train.utils import normalize_counted_metrics

setup_metric_logger(loggers="wandb", run_name="story", output_dir=sys.argv[1])
metric_logger = logging.getLogger("speculators.metrics")
for n in range(30):
    sums = {}
    for k in range(3):
        sums[f"loss_{k}_sum"], sums[f"loss_{k}_total"] = 10.3 + 0.01 * (n % 3), 1.0
        sums[f"full_acc_{k}_sum"], sums[f"full_acc_{k}_total"] = 3.0 / (k + 1), 100.0
        sums[f"cond_acc_{k}_sum"], sums[f"cond_acc_{k}_total"] = 3.0, 100.0
    metrics = normalize_counted_metrics(sums)
    metrics["loss"] = sum(metrics[f"loss_{k}"] for k in range(3))
    metric_logger.info({"train": metrics, "epoch": 0, "lr": 1e-4, "global_step": 50 * n}, extra={"step": 50 * n})
logging.shutdown()
import wandb
wandb.finish()
"""


def test_speculators_logging_to_wandb_is_recognised(tmp_path):
    from builders.wandb_runs import run_script
    from triage_tui.core.watch.watcher import Watcher

    run_script(SPECULATORS_RUN, str(tmp_path))
    (status,) = Watcher([tmp_path], use_watchdog=False, strict=True).poll_once(now=time.time())
    assert status.trainer == "speculators" and status.info.sources == ("wandb",)
    assert status.loss_tag == "train/loss_0" and status.accuracy_tag == "train/full_acc_0"
    assert "loss_at_chance" in {flag.kind for flag in status.flags}
    assert [p.tag for p in status.metrics.per_position_accuracy] == [f"train/full_acc_{k}" for k in range(3)]


HF_TRAINER_RUN = """
import os
os.environ["WANDB_DIR"] = sys.argv[1]  # where WandbCallback's wandb.init puts wandb/
import torch
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

class Tokens(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        ids = torch.randint(0, 128, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}

torch.manual_seed(0)
config = LlamaConfig(vocab_size=128, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
args = TrainingArguments(output_dir=sys.argv[1], report_to=["wandb"], logging_steps=2, max_steps=20,
                         per_device_train_batch_size=4, save_steps=10, use_cpu=True, disable_tqdm=True)
Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=Tokens()).train()
import wandb
wandb.finish()
"""


def test_hf_trainer_logging_to_wandb_is_keyed_by_its_global_step(tmp_path):
    """transformers' own WandbCallback: define_metric("*", step_metric="train/global_step")."""
    from builders.wandb_runs import run_script
    from triage_tui.core.watch.watcher import Watcher

    out = tmp_path / "out"
    run_script(HF_TRAINER_RUN, str(out), timeout=300)
    (status,) = Watcher([tmp_path], use_watchdog=False, strict=True).poll_once(now=time.time())
    assert status.info.path == out and status.info.sources == ("wandb", "trainer_state")
    assert status.trainer == "hf-trainer" and status.loss_tag == "train/loss"
    assert status.scalars.get("train/loss").steps.tolist() == list(range(2, 21, 2))
    assert status.vocab_size == 128 and status.vocab_size_source == "config.json"  # checkpoint-20/config.json
