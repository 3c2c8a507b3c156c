"""The five sample runs' recipes and the world they share: the target, the pretrained drafters and the
mappings; each fine-tune laid out as a SpecForge output directory, trained by samples/trainer.py."""

from __future__ import annotations

import hashlib
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from triage_tui.core.formats.mapping import write_mapping_pt
from triage_tui.core.vocab import VocabMapping
from triage_tui.samples.spec import DUMP_GROUP, REVERSED_CHUNKS, SampleSpec
from triage_tui.samples.trainer import (
    ComputeDtype,
    DrafterTrainer,
    LabelOrder,
    RunData,
    TrainConfig,
    load_saved_drafter,
    new_drafter,
    save_drafter,
)
from triage_tui.samples.world import (
    Corpus,
    TinyTarget,
    build_target,
    generate_corpus,
    modelopt_mapping,
    specforge_mapping,
    token_counts,
)


@dataclass(frozen=True)
class World:
    """The shared pieces every run is built from."""

    spec: SampleSpec
    target: TinyTarget
    data_a: Corpus
    data_b: Corpus
    eval_a: Corpus
    eval_b: Corpus
    mapping_a: VocabMapping
    mapping_b: VocabMapping
    mapping_modelopt: VocabMapping


def build_world(spec: SampleSpec) -> World:
    w = spec.world
    data_a = generate_corpus(w, "A", spec.dataset_sequences)
    data_b = generate_corpus(w, "B", spec.dataset_sequences)
    target = build_target(w)
    counts_b = token_counts(data_b)
    return World(
        spec=spec,
        target=target,
        data_a=data_a,
        data_b=data_b,
        eval_a=generate_corpus(w, "A", spec.batch_size, salt=1),
        eval_b=generate_corpus(w, "B", spec.batch_size, salt=1),
        mapping_a=specforge_mapping(token_counts(data_a), w.draft_vocab_size, source="domain A"),
        mapping_b=specforge_mapping(counts_b, w.draft_vocab_size, source="domain B"),
        # modelopt counts every token (no loss mask) and keeps frequency order
        mapping_modelopt=modelopt_mapping(
            token_counts(data_b, loss_masked_only=False), w.draft_vocab_size, source="domain B, modelopt order"
        ),
    )


def mapping_cache_name(data_name: str, spec: SampleSpec, target: str) -> str:
    """SpecForge classic cache key: md5 of ``train_data_path-max_length-chat_template-target_model_path``."""
    key = f"{data_name}-{spec.world.seq_len}-none-{target}"
    return hashlib.md5(key.encode()).hexdigest() + ".pt"


def write_dumps(
    world: World, corpus: Corpus, out_dir: Path, count: int, chunk_order: tuple[int, int, int] = (0, 1, 2)
) -> Path:
    """SpecForge offline format: ``rows_{g}-{g+2000}/data_{i}.ckpt`` dicts, target dtype (fp16)."""
    root = out_dir / "hidden_states"
    ids = torch.from_numpy(corpus.input_ids[:count])
    aux, last = world.target.hidden_states(ids)
    if chunk_order != (0, 1, 2):
        aux = torch.cat([aux.chunk(3, dim=-1)[i] for i in chunk_order], dim=-1)
    for i in range(count):
        group = (i // DUMP_GROUP) * DUMP_GROUP
        path = root / f"rows_{group}-{group + DUMP_GROUP}" / f"data_{i}.ckpt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "input_ids": ids[i].clone(),
                "loss_mask": torch.from_numpy(corpus.loss_mask[i].copy()),
                "hidden_state": last[i : i + 1].to(torch.float16).clone(),
                "aux_hidden_state": aux[i : i + 1].to(torch.float16).clone(),
            },
            path,
        )
    return root


def write_manifest(run_dir: Path, *, mapping: str, data: str, target: str, checkpoint: str | None, note: str) -> None:
    lines = [f"# {line}" for line in note.strip().splitlines()]
    lines += ["[run]", "vocab_size = 32000"]
    if checkpoint is not None:
        lines.append(f'checkpoint = "{checkpoint}"')
    lines += [
        f'mapping = "{mapping}"',
        f'data = "{data}"',
        f'target = "{target}"',
        'loss_tags = ["train/ploss_0"]',
        'accuracy_tags = ["train/acc_0"]',
    ]
    (run_dir / "triage.toml").write_text("\n".join(lines) + "\n")


@dataclass(frozen=True)
class RunRecord:
    name: str
    steps: int
    seconds: float
    first_ploss_0: float
    last_ploss_0: float
    min_ploss_0: float
    last_acc_0: float
    non_finite_from: int | None

    @classmethod
    def of(cls, name: str, trainer: DrafterTrainer, seconds: float) -> RunRecord:
        loss = trainer.history.series("plosses")
        acc = trainer.history.series("accs")
        bad = np.flatnonzero(~np.isfinite(loss))
        finite = loss[np.isfinite(loss)]
        return cls(
            name,
            len(loss),
            round(seconds, 1),
            float(loss[0]),
            float(loss[-1]),
            float(finite.min()) if finite.size else math.nan,
            float(acc[-1]),
            int(bad[0]) + 1 if bad.size else None,
        )


Progress = Callable[[str], None]


def _train(
    world: World, run_dir: Path, drafter, data: RunData, config: TrainConfig, *, stop_after_nan: int | None = None
) -> DrafterTrainer:
    def killed(history) -> bool:  # the user noticed the NaNs and stopped the run
        nans = sum(not math.isfinite(s.plosses[0]) for s in history.steps)
        return stop_after_nan is not None and nans >= stop_after_nan

    trainer = DrafterTrainer(run_dir, world.target, drafter, data, config)
    trainer.run(killed)
    trainer.close()
    return trainer


def _config(
    spec: SampleSpec,
    steps: int,
    lr: float,
    *,
    save: bool = False,
    warmup: int = 10,
    compute_dtype: ComputeDtype = "bfloat16",
    max_grad_norm: float | None = 0.5,
    batch_size: int | None = None,
) -> TrainConfig:
    return TrainConfig(
        total_steps=steps,
        batch_size=batch_size or spec.batch_size,
        learning_rate=lr,
        warmup_steps=warmup,
        ttt_length=spec.ttt_length,
        eval_interval=spec.eval_interval,
        save_steps=(steps,) if save else (),
        compute_dtype=compute_dtype,
        max_grad_norm=max_grad_norm,
    )


def lay_out_run(
    world: World, out: Path, name: str, mapping: VocabMapping, chunk_order: tuple[int, int, int] = (0, 1, 2)
) -> tuple[Path, Path]:
    """A run's SpecForge inputs before training: the mapping in the cache, a few dumps.

    Returns (run directory, the mapping's path relative to it).
    """
    run = out / name
    cache = Path("cache/vocab_mapping") / mapping_cache_name("domain-b.jsonl", world.spec, "../_target")
    write_mapping_pt(mapping, run / cache)
    write_dumps(world, world.data_b, run, world.spec.dumps_per_run, chunk_order=chunk_order)
    return run, cache


def generate_healthy(world: World, out: Path) -> RunRecord:
    spec, start = world.spec, time.monotonic()
    run, cache = lay_out_run(world, out, "healthy", world.mapping_b)
    drafter = new_drafter(spec.world, world.mapping_b, seed=21, target=world.target)
    trainer = _train(
        world,
        run,
        drafter,
        RunData(world.data_b, world.eval_b, world.mapping_b),
        _config(spec, spec.healthy_steps, spec.scratch_lr, save=True),
    )
    write_manifest(
        run,
        mapping=str(cache),
        data="hidden_states",
        target="../_target",
        checkpoint=f"epoch_0_step_{spec.healthy_steps}",
        note="From-scratch drafter on domain B with the mapping built from domain B.\n"
        "Nothing is wrong here: the loss falls far below ln 32000.",
    )
    return RunRecord.of("healthy", trainer, time.monotonic() - start)


def generate_vocab_mismatch(world: World, out: Path) -> RunRecord:
    spec, start = world.spec, time.monotonic()
    run, cache = lay_out_run(world, out, "vocab-mismatch", world.mapping_b)
    # SpecForge PR #534: --ckpt-dir loads the weights, then the mapping regenerated from the
    # new data overwrites the checkpoint's d2t/t2d; lm_head rows keep mapping A's order.
    drafter = load_saved_drafter(out / "_drafters" / "drafter-a")
    trainer = _train(
        world,
        run,
        drafter,
        RunData(world.data_b, world.eval_b, world.mapping_b),
        _config(spec, spec.finetune_steps, spec.finetune_lr),
    )
    write_manifest(
        run,
        mapping=str(cache),
        data="hidden_states",
        target="../_target",
        checkpoint="../_drafters/drafter-a",
        note="The story (docs/case.md): drafter-a, trained with the mapping\n"
        "of domain A, fine-tuned on domain B with a mapping regenerated from domain B.",
    )
    return RunRecord.of("vocab-mismatch", trainer, time.monotonic() - start)


def generate_hidden_state_format(world: World, out: Path) -> RunRecord:
    spec, start = world.spec, time.monotonic()
    run, cache = lay_out_run(world, out, "hidden-state-format", world.mapping_b, chunk_order=REVERSED_CHUNKS)
    init = f"../healthy/epoch_0_step_{spec.healthy_steps}"
    drafter = load_saved_drafter((run / init).resolve())
    trainer = _train(
        world,
        run,
        drafter,
        RunData(world.data_b, world.eval_b, world.mapping_b, chunk_order=REVERSED_CHUNKS),
        _config(spec, spec.finetune_steps, spec.finetune_lr),
    )
    write_manifest(
        run,
        mapping=str(cache),
        data="hidden_states",
        target="../_target",
        checkpoint=init,
        note="healthy's drafter fine-tuned on dumps whose aux_hidden_state concatenates the\n"
        f"capture layers high|mid|low (layers {list(reversed(spec.world.aux_layer_ids))}) "
        "instead of low|mid|high.",
    )
    return RunRecord.of("hidden-state-format", trainer, time.monotonic() - start)


def generate_verifier_mask(world: World, out: Path) -> RunRecord:
    spec, start = world.spec, time.monotonic()
    # The trainer was pointed at the drafter's own (modelopt, frequency-ordered) mapping,
    # written SpecForge-style with a t2d; SpecForge builds target_p with logits[..., t2d].
    run, cache = lay_out_run(world, out, "verifier-mask", world.mapping_modelopt)
    drafter = load_saved_drafter(out / "_drafters" / "drafter-modelopt")
    trainer = _train(
        world,
        run,
        drafter,
        RunData(world.data_b, world.eval_b, world.mapping_modelopt),
        _config(spec, spec.finetune_steps, spec.finetune_lr),
    )
    write_manifest(
        run,
        mapping=str(cache),
        data="hidden_states",
        target="../_target",
        checkpoint="../_drafters/drafter-modelopt",
        note="drafter-modelopt (frequency-ordered d2t, trained with modelopt's d2t gather)\n"
        "fine-tuned by a SpecForge-style trainer, whose labels come from logits[..., t2d].",
    )
    return RunRecord.of("verifier-mask", trainer, time.monotonic() - start)


def generate_diverged(world: World, out: Path) -> RunRecord:
    spec, start = world.spec, time.monotonic()
    run, cache = lay_out_run(world, out, "diverged", world.mapping_b)
    drafter = new_drafter(spec.world, world.mapping_b, seed=61, target=world.target)
    # fp16 compute and a learning rate 5000x SpecForge's default, warmed up over 40 steps:
    # the loss falls, creeps back up as the rate grows, then activations overflow fp16's
    # 65504 and the loss turns NaN (and stays NaN: the NaN gradients poison the weights)
    trainer = _train(
        world,
        run,
        drafter,
        RunData(world.data_b, world.eval_b, world.mapping_b),
        _config(
            spec,
            spec.diverged_steps,
            spec.diverged_lr,
            warmup=spec.diverged_warmup,
            compute_dtype="float16",
            batch_size=spec.diverged_batch_size,
        ),
        stop_after_nan=spec.diverged_nan_steps,
    )
    write_manifest(
        run,
        mapping=str(cache),
        data="hidden_states",
        target="../_target",
        checkpoint=None,
        note=f"From scratch, fp16 compute, learning rate {spec.diverged_lr} "
        f"(warmed up over {spec.diverged_warmup} steps): "
        "the loss blows up to NaN.",
    )
    return RunRecord.of("diverged", trainer, time.monotonic() - start)


GENERATORS = {
    "healthy": generate_healthy,
    "vocab-mismatch": generate_vocab_mismatch,
    "hidden-state-format": generate_hidden_state_format,
    "verifier-mask": generate_verifier_mask,
    "diverged": generate_diverged,
}

# Independent chains of work (a run after the drafter it starts from), longest first, so
# that two processes finish together.
CHAINS = (
    ("healthy", "hidden-state-format"),
    ("drafter-modelopt", "verifier-mask"),
    ("drafter-a", "vocab-mismatch"),
    ("diverged",),
)
PRETRAINED: dict[str, tuple[LabelOrder, str]] = {"drafter-a": ("t2d", "A"), "drafter-modelopt": ("d2t", "B")}


def pretrain_drafter(world: World, out: Path, name: str) -> float:
    """One of the drafters the fine-tunes start from (its training log is not kept)."""
    spec = world.spec
    start = time.monotonic()
    order, domain = PRETRAINED[name]
    mapping = world.mapping_a if name == "drafter-a" else world.mapping_modelopt
    data, evald = (world.data_a, world.eval_a) if domain == "A" else (world.data_b, world.eval_b)
    drafter = new_drafter(spec.world, mapping, seed=11, target=world.target)
    # drafter-modelopt: modelopt's trainer gathers logits[..., arange(Vd) + d2t], which is
    # self-consistent with its frequency-ordered d2t
    with tempfile.TemporaryDirectory() as scratch:
        trainer = _train(
            world,
            Path(scratch),
            drafter,
            RunData(data, evald, mapping, label_order=order),
            _config(spec, spec.pretrain_steps, spec.scratch_lr),
        )
    save_drafter(trainer.drafter, out / "_drafters" / name)
    return round(time.monotonic() - start, 1)


def run_chain(out: Path, spec: SampleSpec, chain: tuple[str, ...]) -> tuple[dict[str, float], list[RunRecord]]:
    """Build the world (deterministic, seconds) and do one chain; runs in a worker process."""
    torch.use_deterministic_algorithms(True)
    # one thread per process: these matmuls are small, and a second thread costs more in
    # synchronisation than it brings (measured: 0.17 s vs 0.28 s per step)
    torch.set_num_threads(1)
    world = build_world(spec)
    timings, records = {}, []
    for name in chain:
        if name in PRETRAINED:
            timings[name] = pretrain_drafter(world, out, name)
        else:
            records.append(GENERATORS[name](world, out))
            timings[name] = records[-1].seconds
    return timings, records
