"""Build ``sample_runs/``: five real training runs of the tiny EAGLE-3 world, one per failure triage knows.

``triage samples [--out DIR] [--small]`` calls :func:`generate`. Layout::

    _target/                  the target model (config.json + model.safetensors, fp16), shared
    _drafters/drafter-a/      a "public" drafter trained on domain A with mapping A (SpecForge way)
    _drafters/drafter-modelopt/  a drafter trained the modelopt way: frequency-ordered d2t, d2t gather
    healthy/                  from scratch on domain B; loss falls far below ln 32000
    vocab-mismatch/           drafter-a fine-tuned with a mapping regenerated from domain B (the story)
    hidden-state-format/      healthy's checkpoint fine-tuned on dumps whose aux chunks are high|mid|low
    verifier-mask/            drafter-modelopt fine-tuned by a SpecForge trainer (labels via logits[..., t2d])
    diverged/                 from scratch with a learning rate that blows up to NaN
    GENERATED.json            the spec it was built from, timings, final numbers per run

Each run holds what a SpecForge output directory holds: ``runs/`` (TensorBoard events),
``cache/vocab_mapping/<md5>.pt``, ``hidden_states/rows_0-2000/data_{i}.ckpt`` (a few offline
dumps), checkpoints ``epoch_0_step_{s}/`` where the run saved one, plus a ``triage.toml``.

Over 600 lines on purpose: the five runs' recipes sit side by side with the one build that trains them.

Size: one builder of the five runs and the world they share, step by step in the order the
runs depend on each other (target, drafters, fine-tunes); the committed samples' digest covers it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.mapping import write_mapping_pt
from triage_tui.core.vocab import VocabMapping
from triage_tui.samples.readme import readme_text
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
    WorldSpec,
    build_target,
    generate_corpus,
    modelopt_mapping,
    save_target,
    specforge_mapping,
    token_counts,
)

RUN_NAMES = ("healthy", "vocab-mismatch", "hidden-state-format", "verifier-mask", "diverged")
# SpecForge prepare_hidden_states.py groups files by --file-group-size (default 2000)
DUMP_GROUP = 2000
REVERSED_CHUNKS = (2, 1, 0)


@dataclass(frozen=True)
class SampleSpec:
    """Everything the generator depends on; GENERATED.json records it and a test compares it."""

    world: WorldSpec = field(default_factory=WorldSpec)
    dataset_sequences: int = 100_000  # the dataset the mappings are counted over (loss-masked tokens)
    batch_size: int = 4
    ttt_length: int = 2
    pretrain_steps: int = 150
    healthy_steps: int = 200
    finetune_steps: int = 150
    diverged_steps: int = 150
    scratch_lr: float = 1e-2
    finetune_lr: float = 5e-5
    diverged_lr: float = 0.5
    diverged_batch_size: int = 2  # fp16 matmuls are 50x slower than bf16 on CPU
    diverged_warmup: int = 40
    diverged_nan_steps: int = 10  # the user stops the run after this many NaN steps
    dumps_per_run: int = 16
    eval_interval: int = 25

    @classmethod
    def small(cls) -> SampleSpec:
        """The reduced version the tests regenerate (same sizes of vocab and model, fewer steps)."""
        return cls(
            dataset_sequences=40_000,
            # enough pretraining that drafter-a is confident: after 55 steps the mismatched fine-tune's
            # loss stays above ln 32000 = 10.37 (its lowest: 10.82; 11.69 after 70)
            pretrain_steps=55,
            healthy_steps=45,
            finetune_steps=12,
            diverged_steps=40,
            diverged_lr=1.0,
            diverged_warmup=15,
            # an fp16 step costs ~7x a bf16 one per sequence on a CPU without fp16 units (measured:
            # 1.1 s for 2 sequences, 0.33 s for 4): one sequence a step, and two NaN steps are enough
            diverged_batch_size=1,
            diverged_nan_steps=2,
            dumps_per_run=6,
            eval_interval=0,
        )

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


# Modules the generator imports whose edits need no rebuild, each for a reason a test holds:
# - samples.readme: README.md is text, compared whole with readme_text's output (tests/test_samples.py);
# - the checkpoint readers: the fine-tunes start from drafters the generator wrote and reads back
#   (load_saved_drafter); tests/test_samples.py checks that the read-back drafter is exactly the one
#   written, so a reader edit that changed it fails there, and the many that cannot (bounds, messages,
#   other layouts) do not ask for sample_runs/ to be rebuilt.
OUTSIDE_THE_DIGEST = frozenset(
    {
        "triage_tui.samples.readme",
        "triage_tui.core.formats.checkpoint",
        "triage_tui.core.formats.weights",
        "triage_tui.core.formats.safe_torch",
        "triage_tui.core.formats.json_file",
        "triage_tui.core.formats.training_state",
    }
)
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def generator_sources(root: Path = _PACKAGE_ROOT) -> list[Path]:
    """Every triage_tui module whose code decides what ``generate`` writes, as source files under ``root``.

    This module and every module it imports, transitively, lazy imports inside functions too,
    read from the source as tests/test_layers.py reads it, less OUTSIDE_THE_DIGEST and less the
    imports under ``if TYPE_CHECKING:`` (a type shapes no byte).
    """
    found: dict[str, Path] = {}
    todo = [__name__]
    while todo:
        name = todo.pop()
        if name in found or name in OUTSIDE_THE_DIGEST or not name.startswith("triage_tui."):
            continue
        path = _module_source(root, name)
        if path is None:
            continue  # a name imported from a module, not a module
        found[name] = path
        todo.extend(_imported_names(ast.parse(path.read_text(encoding="utf-8"))))
    return sorted(found.values())


def _imported_names(node: ast.AST) -> list[str]:
    """Modules (and names in them) ``node`` imports anywhere, but under ``if TYPE_CHECKING:``."""
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        return [name for child in node.orelse for name in _imported_names(child)]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if not node.module or node.level:
            return []
        return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return [name for child in ast.iter_child_nodes(node) for name in _imported_names(child)]


def _module_source(root: Path, name: str) -> Path | None:
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def code_digest(root: Path = _PACKAGE_ROOT) -> str:
    """SHA-256 (16 hex digits) over the generator's sources under ``root``, each with its path in the package."""
    digest = hashlib.sha256()
    for path in generator_sources(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def built_by_this_generator(recorded: dict, spec: SampleSpec) -> bool:
    """A GENERATED.json's digests are this generator's: its spec's fields and its code."""
    return recorded.get("spec_digest") == spec.digest() and recorded.get("code_digest") == code_digest()


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


TEMP_PREFIX = ".triage-samples-"  # the sibling a new tree is built in, hidden, same filesystem
_REPLACED = (*RUN_NAMES, "_target", "_drafters", "GENERATED.json", "README.md")


def generate(out: Path, spec: SampleSpec | None = None, *, jobs: int = 2, progress: Progress | None = None) -> dict:
    """Build every run and replace ``out``'s with them; returns what GENERATED.json holds.

    The new tree is built in a hidden sibling of ``out`` and moved in only once complete: an
    interrupted or failed build (Ctrl-C, a full disk) leaves ``out`` exactly as it was.
    """
    spec = spec or SampleSpec()
    progress = progress or (lambda message: None)
    if out.exists() and not out.is_dir():
        raise BadInput(out, "is not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / "GENERATED.json").is_file():
        # it would replace directories named like the runs: only in a tree it built itself
        raise BadInput(
            out, "exists and was not built by `triage samples` (no GENERATED.json); pass a new or empty directory"
        )
    out = out.absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f"{TEMP_PREFIX}{out.name}-*"):
        shutil.rmtree(stale, ignore_errors=True)  # left by a build that was killed outright
    building = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{out.name}-", dir=out.parent))
    try:
        summary = _build(building, spec, jobs, progress)
        _move_in(building, out)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return summary


def _move_in(built: Path, out: Path) -> None:
    """Replace ``out``'s generated entries with ``built``'s; what else a user keeps there stays."""
    out.mkdir(exist_ok=True)
    old = built / ".replaced"
    old.mkdir()
    for name in _REPLACED:
        if (out / name).exists() or (out / name).is_symlink():
            os.replace(out / name, old / name)
        os.replace(built / name, out / name)


def _ignore_sigint() -> None:
    # Ctrl-C reaches the whole process group; the parent alone decides, so workers stay quiet.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _build(out: Path, spec: SampleSpec, jobs: int, progress: Progress) -> dict:
    started = time.monotonic()
    progress("building the world (corpus, target, mappings)")
    world = build_world(spec)
    save_target(world.target, out / "_target")
    timings: dict[str, float] = {"world": round(time.monotonic() - started, 1)}
    records: dict[str, RunRecord] = {}

    def collect(chain: tuple[str, ...], result: tuple[dict[str, float], list[RunRecord]]) -> None:
        timings.update(result[0])
        records.update({r.name: r for r in result[1]})
        progress("done: " + ", ".join(f"{name} ({result[0][name]:.0f} s)" for name in chain))

    if jobs <= 1:
        for chain in CHAINS:
            progress("training " + " -> ".join(chain))
            collect(chain, run_chain(out, spec, chain))
    else:
        context = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_ignore_sigint)
        try:
            futures = {pool.submit(run_chain, out, spec, chain): chain for chain in CHAINS}
            progress(
                f"training {len(CHAINS)} chains in {jobs} processes: "
                + "; ".join(" -> ".join(chain) for chain in CHAINS)
            )
            for future in as_completed(futures):
                collect(futures[future], future.result())
        except BaseException:
            # Ctrl-C (or a failed chain): stop the workers now rather than wait for their chains.
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    summary = {
        "generator": "triage_tui.samples.generate",
        "command": "triage samples" + (" --small" if spec == SampleSpec.small() else ""),
        "spec_digest": spec.digest(),
        "code_digest": code_digest(),
        "spec": asdict(spec),
        "torch": torch.__version__,
        "seconds": round(time.monotonic() - started, 1),
        "jobs": jobs,
        "timings": timings,
        "mappings": mapping_stats(world),
        "runs": {name: asdict(records[name]) for name in RUN_NAMES},
    }
    (out / "GENERATED.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "README.md").write_text(readme_text(summary))  # text only: OUTSIDE_THE_DIGEST
    return summary


EVENT_FILE_PATTERN = "runs/events.out.tfevents.*"


def expected_files(spec: SampleSpec) -> list[str]:
    """Every file ``generate`` writes, relative to ``out``; the event file's name is a pattern."""
    files = ["GENERATED.json", "README.md", "_target/config.json", "_target/model.safetensors"]
    for name in PRETRAINED:
        files += [f"_drafters/{name}/config.json", f"_drafters/{name}/model.safetensors"]
    cache = "cache/vocab_mapping/" + mapping_cache_name("domain-b.jsonl", spec, "../_target")
    for run in RUN_NAMES:
        files += [f"{run}/triage.toml", f"{run}/{cache}", f"{run}/{EVENT_FILE_PATTERN}"]
        files += [f"{run}/hidden_states/rows_0-{DUMP_GROUP}/data_{i}.ckpt" for i in range(spec.dumps_per_run)]
    step = f"healthy/epoch_0_step_{spec.healthy_steps}"
    files += [f"{step}/config.json", f"{step}/model.safetensors"]
    return sorted(files)


def written_files(out: Path) -> list[str]:
    """What is under ``out`` now, in ``expected_files`` form (event file names folded to the pattern)."""
    found = []
    for path in out.rglob("*"):
        if path.is_file():
            rel = path.relative_to(out).as_posix()
            head, _, tail = rel.rpartition("/runs/")
            if tail.startswith("events.out.tfevents."):
                rel = f"{head}/{EVENT_FILE_PATTERN}"
            found.append(rel)
    return sorted(found)


def mapping_stats(world: World) -> dict:
    a, b = world.mapping_a.hot_ids, world.mapping_b.hot_ids
    modelopt = world.mapping_modelopt.hot_ids
    return {
        "draft_vocab_size": int(a.size),
        "target_vocab_size": world.mapping_a.target_vocab_size,
        "a_vs_b_positional_match": int((a == b).sum()),
        "a_vs_b_overlap": int(np.intersect1d(a, b).size),
        "modelopt_in_ascending_place": int((modelopt == np.sort(modelopt)).sum()),
    }
