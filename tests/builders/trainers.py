"""Runs laid out by the trainers' own code, at tiny sizes on a CPU (a few seconds each).

Which real function made each piece (the packages are installed with --no-deps; see pyproject's
``test`` extra for the few modules their import needs):

SpecForge 0.2.0 (``specforge_run``):
- the public drafter: ``specforge.data.preprocessing.generate_vocab_mapping_file`` (its
  mapping, from its own training data), ``specforge.modeling.draft.llama3_eagle.
  LlamaForCausalLMEagle3`` + ``load_vocab_mapping`` + ``save_pretrained``;
- the fine-tune's start: ``specforge.training.model_loading.warm_start_draft_model``;
- the fine-tune's mapping: ``specforge.training.vocab_mapping.count_effective_feature_tokens``
  over its offline features and ``specforge.training.assembly._install_dataset_vocab_mapping``
  (writes ``cache/vocab_mapping/<sha256>.pt`` and copies it into the drafter's buffers, as
  ``_ensure_offline_vocab_mapping`` does; the healthy control sets
  ``model.vocab_mapping_path`` to the drafter's own mapping, which skips it);
- ``training_state.pt``: ``specforge.training.checkpoint.CheckpointManager.save`` with the payload
  ``TrainerController.save_checkpoint`` builds (``draft_state_dict`` without the frozen
  embedding, as ``Eagle3TrainStrategy.checkpoint_state_filter`` leaves it out) and the model
  provenance of ``specforge.training.provenance._compute_model_resume_provenance``;
- the event file: ``specforge.tracker.TensorboardTracker``;
- the logged ``train/ploss_0``: ``specforge/core/loss.py`` ``_compute_loss``, compiled from its
  source alone (the module imports triton at the top, which needs a GPU stack), on a drafter at
  chance (uniform logits), with the dumps' loss masks;
- the offline features: ``scripts/prepare_hidden_states.py`` is not in the wheel, so they are
  written with ``torch.save`` in its format (``rows_0-5000/data_{i}.ckpt`` holding
  ``input_ids``, ``loss_mask``, ``hidden_state``, ``aux_hidden_state``).

SpecForge's ``specforge train`` (``specforge_train_output``): its output directory, console
included, by its own ``TrainerController`` (see that function).

HF Trainer (``hf_trainer_run``): ``transformers.Trainer(report_to=["tensorboard"])`` training a
tiny ``LlamaForCausalLM`` for a few CPU steps, saving ``checkpoint-N/``.
"""

from __future__ import annotations

import ast
import contextlib
import math
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

TARGET_VOCAB = 8192
DRAFT_VOCAB = 1000  # the real run's draft vocab: ln 1000 = 6.91
HIDDEN = 16
SEQ = 64
RUN_ID = "k2-ft"
STEPS = (100, 200)


@dataclass(frozen=True)
class SpecForgeRun:
    """Where each piece of a SpecForge 0.2.0 fine-tune lies, and what the trainer used."""

    work: Path  # the trainer's working directory
    drafter: Path  # the public drafter the fine-tune started from (save_pretrained)
    output: Path  # <output_dir>: runs/ beside <run_id>-step<N>/
    hidden_states: Path  # offline features
    mapping_file: Path  # cache/vocab_mapping/<sha256>.pt (the buggy run) or the drafter's own
    drafter_hot: np.ndarray  # target ids of the drafter's draft positions
    run_hot: np.ndarray  # target ids of the run's draft positions
    valid_fraction: float  # mean loss mask over the features (the loader zeroes the last position)
    plosses: tuple[float, ...]


def _hot(d2t: torch.Tensor) -> np.ndarray:
    return (np.arange(d2t.shape[0]) + d2t.numpy()).astype(np.int64)


def _token_data(seed: int, rows: int, low: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids skewed toward [low, low + 1500): two sources give two different top-1000 vocabs."""
    g = torch.Generator().manual_seed(seed)
    skewed = low + torch.randint(0, 1500, (rows, SEQ), generator=g)
    uniform = torch.randint(0, TARGET_VOCAB, (rows, SEQ), generator=g)
    ids = torch.where(torch.rand(rows, SEQ, generator=g) < 0.8, skewed, uniform)
    mask = torch.ones(rows, SEQ, dtype=torch.long)
    mask[:, :2] = 0  # the prompt's first tokens are not trained on
    return ids, mask


def _draft_config():
    from transformers import LlamaConfig

    config = LlamaConfig(
        hidden_size=HIDDEN,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_hidden_layers=1,
        vocab_size=TARGET_VOCAB,
        max_position_embeddings=SEQ,
        rms_norm_eps=1e-5,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    config.draft_vocab_size = DRAFT_VOCAB
    config.architectures = ["LlamaForCausalLMEagle3"]
    return config


def specforge_compute_loss():
    """``_compute_loss`` from specforge/core/loss.py, compiled alone (see the module doc)."""
    import specforge

    source = (Path(specforge.__file__).parent / "core" / "loss.py").read_text()
    tree = ast.parse(source)
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_compute_loss"]
    namespace = {"torch": torch, "nn": torch.nn}
    exec(compile(ast.Module(body=[node], type_ignores=[]), "specforge/core/loss.py", "exec"), namespace)
    return namespace["_compute_loss"]


def specforge_run(root: Path, *, buggy: bool) -> SpecForgeRun:
    """A SpecForge 0.2.0 offline fine-tune from a public drafter; `buggy`: the trainer rebuilt the
    mapping from the fine-tune's data (SpecForge PR #534's story), else it kept the drafter's."""
    import datasets
    from specforge.data.preprocessing import generate_vocab_mapping_file
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    from specforge.tracker import TensorboardTracker
    from specforge.training.assembly import _install_dataset_vocab_mapping
    from specforge.training.checkpoint import CheckpointManager
    from specforge.training.model_loading import warm_start_draft_model
    from specforge.training.provenance import _compute_model_resume_provenance
    from specforge.training.vocab_mapping import count_effective_feature_tokens

    work = root
    work.mkdir(parents=True, exist_ok=True)

    # The public drafter, trained on another model's data (tokens around 4000).
    ids, mask = _token_data(1, 48, low=4000)
    public_data = datasets.Dataset.from_dict({"input_ids": ids.tolist(), "loss_mask": mask.tolist()})
    public_mapping = Path(
        generate_vocab_mapping_file(
            public_data.with_format("torch"),
            TARGET_VOCAB,
            DRAFT_VOCAB,
            cache_dir=str(work / "public" / "vocab_mapping"),
            cache_key="public",
        )
    )
    torch.manual_seed(0)
    drafter_model = LlamaForCausalLMEagle3(_draft_config())
    drafter_model.load_vocab_mapping(str(public_mapping))
    drafter = work / "drafter"
    drafter_model.save_pretrained(str(drafter))

    # The fine-tune's offline features (tokens around 1000).
    hidden_states = work / "hidden_states"
    rows = hidden_states / "rows_0-5000"
    rows.mkdir(parents=True)
    ids, mask = _token_data(2, 12, low=1000)
    g = torch.Generator().manual_seed(3)
    for i in range(ids.shape[0]):
        torch.save(
            {
                "input_ids": ids[i],
                "loss_mask": mask[i],
                "hidden_state": torch.randn(1, SEQ, HIDDEN, generator=g).bfloat16(),
                "aux_hidden_state": torch.randn(1, SEQ, 3 * HIDDEN, generator=g).bfloat16(),
            },
            rows / f"data_{i}.ckpt",
        )
    trained_mask = mask.clone()
    trained_mask[:, -1] = 0  # process_offline_eagle3_sample zeroes the last position
    valid_fraction = float(trained_mask.float().mean())

    # The fine-tune: warm start, then the trainer's vocab mapping step.
    config = _draft_config()
    config._name_or_path = str(drafter)  # what resolve_draft_config's from_pretrained records
    model = LlamaForCausalLMEagle3(config)
    warm_start_draft_model(model, str(drafter), draft_config=config, strategy="eagle3")
    vocab_mapping_path = "" if buggy else str(public_mapping)
    cfg = types.SimpleNamespace(
        model=types.SimpleNamespace(
            vocab_mapping_path=vocab_mapping_path,
            draft_model_config=None,
            target_model_path=str(work / "target"),
            embedding_key="model.embed_tokens.weight",
            lm_head_key="lm_head.weight",
            load_target_embedding=True,
            input_modality="text",
            torch_dtype="bfloat16",
        ),
        data=types.SimpleNamespace(cache_dir=str(work / "cache")),
    )
    bundle = types.SimpleNamespace(draft_model=model, draft_vocab_size=DRAFT_VOCAB, target_vocab_size=TARGET_VOCAB)
    counts = count_effective_feature_tokens(str(hidden_states), max_length=SEQ, target_vocab_size=TARGET_VOCAB)
    _install_dataset_vocab_mapping(cfg, bundle, counts=counts, dataset_identity="offline-features")
    if buggy:
        (mapping_file,) = (work / "cache" / "vocab_mapping").glob("*.pt")
    else:
        mapping_file = public_mapping
    provenance = _compute_model_resume_provenance(cfg, config, None, capture_layers=None)

    # Logging and checkpoints, as the trainer does them. The loss is the one a drafter at chance
    # reads: uniform logits over the draft vocab, SpecForge's mean over all positions.
    output = work / "output"
    tracker = TensorboardTracker(types.SimpleNamespace(), str(output))
    compute_loss = specforge_compute_loss()
    plosses = []
    for step in range(0, STEPS[-1] + 1, 10):
        sample = (step // 10) % ids.shape[0]
        target_p = torch.softmax(torch.randn(1, SEQ, DRAFT_VOCAB, generator=g), dim=-1)
        position_mask = trained_mask[sample].view(1, SEQ, 1).float()
        ploss = float(compute_loss(torch.zeros(1, SEQ, DRAFT_VOCAB), target_p, position_mask))
        plosses.append(ploss)
        tracker.log({"train/ploss_0": ploss, "train/acc_0": 1.0 / DRAFT_VOCAB, "train/lr": 1e-4}, step=step)
        if step in STEPS:
            draft_state = {k: v for k, v in model.state_dict().items() if "embed" not in k.lower()}
            shared = {
                "draft_state_dict": draft_state,
                "global_step": step,
                "epoch": 0,
                "epoch_batch": step,
                "epoch_samples": step,
                "strategy": "eagle3",
                "run_id": RUN_ID,
                "world_size": 1,
                "specforge_model_provenance": tuple((k, provenance[k]) for k in sorted(provenance)),
            }
            CheckpointManager(str(output), RUN_ID).save(shared, step, rank_state={"optimizer": None, "rng": {}})
    tracker.close()
    return SpecForgeRun(
        work=work,
        drafter=drafter,
        output=output,
        hidden_states=hidden_states,
        mapping_file=mapping_file,
        drafter_hot=_hot(drafter_model.d2t),
        run_hot=_hot(model.d2t),
        valid_fraction=valid_fraction,
        plosses=tuple(plosses),
    )


def vocab_numbers(checkpoint_hot: np.ndarray, run_hot: np.ndarray) -> dict[str, int]:
    """The vocab check's counts, computed here with numpy alone."""
    overlap = np.intersect1d(checkpoint_hot, run_hot).size
    return {
        "positional_match": int((checkpoint_hot == run_hot).sum()),
        "overlap": int(overlap),
        "only_in_checkpoint": int(checkpoint_hot.size - overlap),
        "only_in_run": int(run_hot.size - overlap),
    }


def hf_trainer_run(root: Path, *, steps: int = 4, save_steps: int = 2) -> Path:
    """``Trainer(report_to=["tensorboard"])`` on a tiny LlamaForCausalLM; the output_dir."""
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=16,
            intermediate_size=32,
            num_attention_heads=2,
            num_key_value_heads=1,
            num_hidden_layers=1,
            vocab_size=256,
            max_position_embeddings=32,
        )
    )
    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": x, "labels": x} for x in torch.randint(0, 256, (16, 16), generator=g)]
    output = root / "hf-out"
    args = TrainingArguments(
        output_dir=str(output),
        max_steps=steps,
        save_steps=save_steps,
        logging_steps=1,
        per_device_train_batch_size=4,
        report_to=["tensorboard"],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    Trainer(model=model, args=args, train_dataset=data).train()
    return output


def chance(vocab: int, fraction: float = 1.0) -> float:
    return fraction * math.log(vocab)


@dataclass(frozen=True)
class SpeculatorsRun:
    """A speculators 0.9.0 run: <root>/logs/<run_name>/ beside <root>/checkpoints/<epoch>/, and
    --data-path <root>/data."""

    root: Path
    verifier: Path
    data: Path  # --data-path: token_freq.pt, d2t-<Vd>.npy, t2d-<Vd>.npy
    hot: np.ndarray


def speculators_run(root: Path) -> SpeculatorsRun:
    """speculators 0.9.0's own functions: ``build_vocab_mappings_from_distribution`` (the
    d2t/t2d that ``train/cli.py`` caches as ``d2t-<Vd>.npy``/``t2d-<Vd>.npy`` in the data path, with
    ``np.save`` as it does), ``Eagle3DraftModel.from_training_args`` on a tiny verifier saved by
    transformers, ``SingleGPUCheckpointer.save_checkpoint`` (``<save_path>/<epoch>/``) and
    ``TensorBoardHandler`` (``<log_dir>/<run_name>/``). ``python -m speculators.train`` itself needs
    a vLLM hidden-state server or dumps and flex attention on a GPU, so its steps are called here."""
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    torch.manual_seed(0)
    verifier = root.parent / f"{root.name}-verifier"  # a model directory of its own, outside the run
    config = _speculators_verifier(verifier)
    data = root / "data"
    data.mkdir(parents=True)
    ids, mask = _token_data(4, 12, low=2000)
    tokens, counts = ids[mask.bool()].unique(return_counts=True)
    token_freq = dict(zip(tokens.tolist(), counts.tolist(), strict=True))
    torch.save(token_freq, data / "token_freq.pt")
    d2t, t2d = build_vocab_mappings_from_distribution(
        token_freq_dict=token_freq, draft_vocab_size=DRAFT_VOCAB, target_vocab_size=TARGET_VOCAB
    )
    np.save(data / f"d2t-{DRAFT_VOCAB}.npy", d2t.cpu().numpy())
    np.save(data / f"t2d-{DRAFT_VOCAB}.npy", t2d.cpu().numpy())
    model = speculators_model(speculators_layer_config(config), verifier, DRAFT_VOCAB, d2t=d2t, t2d=t2d)
    _speculators_train(model, root / "checkpoints", root / "logs")
    return SpeculatorsRun(root, verifier, data, _hot(d2t))


def _speculators_verifier(path: Path):
    """A tiny Llama verifier saved by transformers: the target both speculators runs name."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=HIDDEN,
        intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_hidden_layers=8,
        vocab_size=TARGET_VOCAB,
        max_position_embeddings=SEQ,
    )
    LlamaForCausalLM(config).save_pretrained(str(path))
    return config


def speculators_model(layer_config, verifier: Path, draft_vocab: int, *, d2t=None, t2d=None, **kwargs):
    """speculators 0.9.0's ``Eagle3DraftModel.from_training_args`` with its train CLI's settings (one TTT
    loop of 3, no norm before the residual, sdpa); kwargs: config flags such as norm_before_fc, fc_norm."""
    from speculators.models.eagle3 import Eagle3DraftModel

    return Eagle3DraftModel.from_training_args(
        layer_config,
        t2d=t2d,
        d2t=d2t,
        verifier_name_or_path=str(verifier),
        draft_vocab_size=draft_vocab,
        norm_before_residual=False,
        ttt_steps=3,
        draft_attn_impl="sdpa",
        **kwargs,
    )


def speculators_layer_config(config):
    """The one-layer draft config speculators builds from its verifier's config (its train CLI's keys)."""
    from transformers import LlamaConfig

    keys = (
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "max_position_embeddings",
    )
    return LlamaConfig(**{k: v for k, v in config.to_dict().items() if k in keys}, num_hidden_layers=1)


def _speculators_train(model, save_path: Path, log_dir: Path) -> None:
    """Two epochs as speculators' Trainer records them: ``TensorBoardHandler`` events (loss near
    ln Vd) and ``SingleGPUCheckpointer.save_checkpoint`` after each epoch (``<save_path>/<epoch>/``)."""
    import logging

    from speculators.train.checkpointer import SingleGPUCheckpointer
    from speculators.train.logger import TensorBoardHandler

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    checkpointer = SingleGPUCheckpointer(save_path)
    handler = TensorBoardHandler(run_name="k25-ft", log_dir=str(log_dir))
    record = logging.LogRecord("speculators.metrics", logging.INFO, __file__, 0, {}, None, None)
    for epoch in range(2):
        for step in range(epoch * 10, epoch * 10 + 10):
            record.msg = {"train": {"loss_0": math.log(DRAFT_VOCAB) - step / 100, "full_acc_0": step / 1000}}
            record.step = step
            handler.emit(record)
        checkpointer.save_checkpoint(model, optimizer, epoch)
    handler.close()


@dataclass(frozen=True)
class SpeculatorsFineTune:
    """A speculators 0.9.0 fine-tune ``--from-pretrained`` a public drafter, whose ``--data-path``
    (outside the run) holds a mapping built from other data than the drafter's."""

    root: Path  # checkpoints/ (with run.yaml) beside logs/
    drafter: Path  # the public drafter (save_pretrained), mapping from its own data
    data: Path  # --data-path: token_freq.pt, and the d2t/t2d speculators generated from it
    verifier: Path
    drafter_hot: np.ndarray
    run_hot: np.ndarray


def speculators_finetune(root: Path) -> SpeculatorsFineTune:
    """What ``python -m speculators.train --from-pretrained <drafter> --data-path <data>
    --draft-vocab-size 1000`` does before its first step, by its own functions:
    ``TrainConfig.resolve`` (the argv) and ``TrainConfig.save`` (``run.yaml`` in --save-path,
    ``speculators/train/config/artifacts.py``), ``parse_vocab_mappings`` (generates the mapping
    from ``<data>/token_freq.pt`` with ``build_vocab_mappings_from_distribution`` and caches it
    as ``d2t-1000.npy``/``t2d-1000.npy``), ``build_draft_model`` (``Eagle3DraftModel.
    from_pretrained`` with that mapping installed); then ``_speculators_train``. The public
    drafter: ``Eagle3DraftModel.from_training_args`` with a mapping from other data, and
    ``save_pretrained``."""
    import argparse

    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.train.cli import build_draft_model, parse_vocab_mappings
    from speculators.train.config.schema import TrainConfig
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    torch.manual_seed(0)
    verifier = root.parent / f"{root.name}-verifier"
    config = _speculators_verifier(verifier)

    def frequencies(seed: int, low: int) -> dict[int, int]:
        ids, mask = _token_data(seed, 40, low=low)  # enough tokens that each top-1000 is its own
        tokens, counts = ids[mask.bool()].unique(return_counts=True)
        return dict(zip(tokens.tolist(), counts.tolist(), strict=True))

    drafter = root.parent / f"{root.name}-public-drafter"
    d2t, t2d = build_vocab_mappings_from_distribution(
        token_freq_dict=frequencies(1, low=0), draft_vocab_size=DRAFT_VOCAB, target_vocab_size=TARGET_VOCAB
    )
    public = speculators_model(speculators_layer_config(config), verifier, DRAFT_VOCAB, d2t=d2t, t2d=t2d)
    public.save_pretrained(str(drafter))

    data = root.parent / f"{root.name}-data"  # --data-path outside the run directory
    data.mkdir(parents=True)
    torch.save(frequencies(2, low=4000), data / "token_freq.pt")
    save_path = root / "checkpoints"
    argv = [
        *("--verifier-name-or-path", str(verifier), "--from-pretrained", str(drafter)),
        *("--data-path", str(data), "--draft-vocab-size", str(DRAFT_VOCAB), "--draft-attn-impl", "sdpa"),
        *("--save-path", str(save_path), "--log-dir", str(root / "logs"), "--run-name", "k25-ft"),
        *("--logger", "tensorboard"),
    ]
    cfg = TrainConfig.resolve(argv)
    cfg.save(str(save_path))
    args = argparse.Namespace(**cfg.flatten())
    run_d2t, run_t2d, vocab = parse_vocab_mappings(args)
    model = build_draft_model(args, Eagle3DraftModel, run_t2d, run_d2t, vocab)
    _speculators_train(model, save_path, root / "logs")
    return SpeculatorsFineTune(root, drafter, data, verifier, _hot(d2t), _hot(run_d2t))


def specforge_log(output: Path, rows: list[tuple[int, dict[str, float]]]) -> None:
    """SpecForge 0.2.0's own tracker: ``<output_dir>/runs/`` event files, ``rows`` as (step, values)."""
    from specforge.tracker import TensorboardTracker

    tracker = TensorboardTracker(types.SimpleNamespace(), str(output))
    for step, values in rows:
        tracker.log(values, step=step)
    tracker.close()


# --------------------------------------------------------------------------- SpecForge's `specforge train`


@dataclass(frozen=True)
class SpecForgeOutput:
    """A ``specforge train`` output directory and the schedule that wrote it."""

    output: Path  # <output_dir>: <run_id>-step<N>/, the pointers, best_meta.json, train.log
    console: Path
    run_id: str
    steps: int
    log_interval: int
    eval_interval: int
    save_interval: int
    checkpoint_steps: tuple[int, ...]  # the steps whose checkpoints are on disk

    @classmethod
    def at(cls, output: Path, run_id: str) -> SpecForgeOutput:
        saved = tuple(sorted(int(p.name.rsplit("-step", 1)[1]) for p in output.glob(f"{run_id}-step*")))
        return cls(output, output / "train.log", run_id, *SPECFORGE_SCHEDULE, saved)


SPECFORGE_TRAIN_RUN_ID = "k2-eagle3"
SPECFORGE_SCHEDULE = (30, 3, 10, 10)  # steps, log_interval, eval_interval, save_interval
CONSOLE_DRAFT_VOCAB = 32_000  # the real draft vocab: ln 32 000 = 10.37 is the chance line


def specforge_train_output(root: Path, *, tracker: bool = False) -> SpecForgeOutput:
    """``<root>/output`` as ``specforge train`` leaves it, with its console in ``train.log``:
    ``TrainerController.fit`` of the installed package (identical in ``specforge/training/`` and
    ``specforge/eval/`` to sgl-project/SpecForge a6b6b0230009d15ec2a97a57384e6f53f0f96946) with its
    console ``_logger``, ``Evaluator`` and ``CheckpointManager``: the step lines, the
    ``<run_id>-step<N>/`` checkpoints (``training_state.pt``, ``training_state_rank0.pt``), the
    ``-latest``/``-best`` pointers and ``<run_id>.best_meta.json`` are all its own, and so is the
    final save ``Trainer.fit`` adds. The GPU parts are stand-ins: the strategy's model is a linear
    drafter over a 32 000-token draft vocab returning ``Eagle3TrainStrategy.forward_loss``'s metric
    keys, and the backend a plain CPU optimizer behind ``TrainingBackend`` (``FSDPTrainingBackend``
    needs a process group).
    The optimizer turns to gradient ascent after two thirds of the steps, so evaluation peaks before the end and
    ``best`` is not ``latest``. ``tracker``: the console lines as ``TrackerLogger`` prints them beside
    a tracker (``train/`` names)."""
    steps, log_interval, eval_interval, save_interval = SPECFORGE_SCHEDULE
    import torch
    from specforge.runtime.contracts import TrainBatch
    from specforge.training.assembly import _logger
    from specforge.training.backend import TrainingBackend
    from specforge.training.controller import TrainerController, TrainerCore
    from specforge.training.strategies.base import DraftTrainStrategy, StepOutput

    ttt, hidden, batch, seq = 3, 8, 2, 4
    peak = steps * 2 // 3
    torch.manual_seed(0)
    # Targets the drafter can learn: each position's token is a fixed function of its features.
    teacher = torch.randn(hidden, CONSOLE_DRAFT_VOCAB)

    def make_batch(index: int, g: torch.Generator) -> TrainBatch:
        x = torch.randn(batch, seq, hidden, generator=g)
        y = torch.stack([((x + k) @ teacher).argmax(-1) for k in range(ttt)], dim=0)
        ids = [f"s{index}-{i}" for i in range(batch)]
        return TrainBatch(sample_ids=ids, strategy="eagle3", tensors={"x": x, "y": y})

    class LinearDrafter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm_head = torch.nn.Linear(hidden, CONSOLE_DRAFT_VOCAB, bias=False)

    class Strategy(DraftTrainStrategy):
        """Eagle3TrainStrategy.forward_loss's outputs (its metric keys), from a linear drafter."""

        name = "eagle3"
        required_features = {"x", "y"}
        ploss_decay = 0.8

        def __init__(self, model: LinearDrafter) -> None:
            self.model = model

        def trainable_module(self) -> torch.nn.Module:
            return self.model

        def forward_loss(self, batch, ctx=None):
            x, y = batch.tensors["x"], batch.tensors["y"]
            plosses, acces, rates, corrects, denoms = [], [], [], [], []
            for k in range(ttt):
                logits = self.model.lm_head(x + k).reshape(-1, CONSOLE_DRAFT_VOCAB)
                target = y[k].reshape(-1)
                ploss = torch.nn.functional.cross_entropy(logits, target)
                correct = (logits.argmax(-1) == target).sum().float()
                plosses.append(ploss)
                corrects.append(correct)
                denoms.append(torch.tensor(float(target.numel())))
                acces.append(correct / target.numel())
                rates.append(torch.softmax(logits, -1).gather(1, target[:, None]).mean())
            loss = sum(self.ploss_decay**k * p for k, p in enumerate(plosses))
            return StepOutput(
                loss=loss,
                metrics={
                    "plosses": [p.detach() for p in plosses],
                    "acces": [a.detach() for a in acces],
                    "acceptance_rates": [r.detach() for r in rates],
                    "acc_corrects": corrects,
                    "acc_denoms": denoms,
                    "metric_losses": [p.detach() for p in plosses],
                    "metric_loss_denoms": denoms,
                },
            )

    class LearningRate:
        def __init__(self, optimizer: torch.optim.Optimizer) -> None:
            self.optimizer = optimizer

        def get_learning_rate(self) -> float:
            return float(self.optimizer.param_groups[0]["lr"])

    class Backend(TrainingBackend):
        """A plain CPU optimizer behind SpecForge's backend interface."""

        def __init__(self, model: torch.nn.Module) -> None:
            self.model = model
            self.torch_optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
            self.optimizer = LearningRate(self.torch_optimizer)
            self.steps = 0

        def prepare_model(self, model):
            return model

        def backward(self, loss, *, is_boundary=True):
            loss.backward()

        def step(self):
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.steps += 1
            if self.steps > peak:  # past the peak: gradient ascent undoes what was learnt
                self.torch_optimizer.param_groups[0]["maximize"] = True
            self.torch_optimizer.step()
            self.torch_optimizer.zero_grad()
            return norm

        def state_dict(self):
            return {
                "model": self.model.state_dict(),
                "optimizer": self.torch_optimizer.state_dict(),
                "rng": {"cpu": torch.get_rng_state()},
            }

        def load_state_dict(self, state):
            self.model.load_state_dict(state["model"])

    output = root / "output"
    output.mkdir(parents=True, exist_ok=True)
    model = LinearDrafter()
    g = torch.Generator().manual_seed(1)
    data = [make_batch(i, g) for i in range(steps)]
    eval_data = [make_batch(10_000 + i, g) for i in range(2)]
    logger = _logger
    if tracker:
        from specforge.tracker import NoOpTracker
        from specforge.training.tracking import TrackerLogger

        logger = TrackerLogger(NoOpTracker(None, str(output)), console_logger=_logger)
    controller = TrainerController(
        TrainerCore(Strategy(model), Backend(model)),
        run_id=SPECFORGE_TRAIN_RUN_ID,
        output_dir=str(output),
        save_interval=save_interval,
        eval_interval=eval_interval,
        eval_data_factory=lambda: eval_data,
        log_interval=log_interval,
        max_steps=steps,
        logger=logger,
    )
    console = output / "train.log"
    with open(console, "w") as out, contextlib.redirect_stdout(out):
        step = controller.fit(data)
        # specforge/training/trainer.py Trainer.fit: a final save unless the last step was saved.
        if step > 0 and controller.last_checkpoint_step != step:
            controller.save_checkpoint(step)
    return SpecForgeOutput.at(output, SPECFORGE_TRAIN_RUN_ID)
