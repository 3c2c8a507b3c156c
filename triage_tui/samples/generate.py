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

The runs' recipes are samples/recipes.py, the spec samples/spec.py, the digest GENERATED.json records
samples/provenance.py.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from triage_tui.core.errors import BadInput
from triage_tui.samples.provenance import code_digest
from triage_tui.samples.readme import readme_text
from triage_tui.samples.recipes import (
    CHAINS,
    PRETRAINED,
    Progress,
    RunRecord,
    World,
    build_world,
    mapping_cache_name,
    run_chain,
)
from triage_tui.samples.spec import DUMP_GROUP, RUN_NAMES, SampleSpec
from triage_tui.samples.world import (
    save_target,
)

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


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Hold SIGINT back from this thread while the workers start; they keep it held for life.

    Ctrl-C reaches the whole process group, and the parent alone decides. A worker that took it
    while its interpreter started, before any handler of its own could run, would die printing
    "Fatal Python error: init_import_site". A blocked signal stays blocked across fork and exec,
    so each worker is born deaf to it; the parent's own Ctrl-C waits and arrives when this ends.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


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
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context)
        try:
            with _ctrl_c_held():  # a spawn pool starts its workers on submit
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
