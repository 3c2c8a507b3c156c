"""`triage remap` on checkpoints written by the real writers, with the story's mappings at full size.

Source checkpoints come from ``safetensors.torch.save_file`` / ``torch.save`` (test_formats_checkpoint's
writers: SpecForge ``midlayer.*``, speculators ``layers.0.*`` + embedding, modelopt, sharded), the
run's mapping from ``write_mapping_pt``. Outputs are read back with safetensors' own ``load_file``,
never with the code under test, and every copied row is compared bit for bit.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import blake3
import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from builders.drafter import HIDDEN, drafter_config, drafter_state, write_drafter
from builders.mappings import DRAFT_VOCAB, OVERLAP, TARGET_VOCAB
from builders.remap import expected_source_rows, listing, run_cli, tree_digest
from builders.samples import git
from builders.target import save_target
from triage_tui import __version__
from triage_tui.commands import remap as remap_command
from triage_tui.core import fileio
from triage_tui.core.errors import BadInput
from triage_tui.core.fix.remap import rows, staging, tuning, writer
from triage_tui.core.fix.remap.execute import execute_remap, remap_checkpoint
from triage_tui.core.fix.remap.job import Cancelled
from triage_tui.core.fix.remap.keep import keep_checkpoint_mapping
from triage_tui.core.fix.remap.plan import INIT_STRATEGIES, plan_remap
from triage_tui.core.formats.mapping import write_mapping_npy, write_mapping_pt
from triage_tui.core.vocab import VocabMapping

ONLY_IN_CHECKPOINT = DRAFT_VOCAB - OVERLAP


# ------------------------------------------------------------------------------------------
# helpers


def bits(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes, so that equality means bit-for-bit (NaN and -0.0 included)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def check_output(
    out: Path,
    state: dict[str, torch.Tensor],
    run: VocabMapping,
    rows: np.ndarray,
    *,
    weights: str = "model.safetensors",
) -> dict[str, torch.Tensor]:
    """Read the output with safetensors and check every row, buffer and untouched tensor."""
    written = load_file(str(out / weights)) if weights.endswith(".safetensors") else None
    if written is None:
        raise AssertionError(weights)
    head, old = written["lm_head.weight"], state["lm_head.weight"]
    assert head.shape == (run.draft_vocab_size, old.shape[1]) and head.dtype == old.dtype
    copied = np.flatnonzero(rows >= 0)
    assert torch.equal(bits(head[torch.from_numpy(copied)]), bits(old[torch.from_numpy(rows[copied])]))
    assert torch.equal(written["d2t"], torch.from_numpy(run.d2t())) and written["d2t"].dtype == torch.int64
    assert torch.equal(written["t2d"], torch.from_numpy(run.t2d())) and written["t2d"].dtype == torch.bool
    for name, tensor in state.items():
        if name not in ("lm_head.weight", "d2t", "t2d"):
            assert written[name].dtype == tensor.dtype and torch.equal(bits(written[name]), bits(tensor)), name
    assert set(written) == set(state) | {"d2t", "t2d"}
    return written


# ------------------------------------------------------------------------------------------
# the story's case, full size


def test_story_rows_move_bit_for_bit_and_the_rest_is_the_mean(world, story, expected_rows):
    ckpt_mapping, run_mapping = story
    before = tree_digest(world["source"])
    report = remap_checkpoint(world["source"], world["mapping"], device="cpu")
    assert tree_digest(world["source"]) == before
    assert (report.rows_copied, report.rows_initialized) == (OVERLAP, ONLY_IN_CHECKPOINT) == (25_750, 6_250)
    assert report.verified and report.init == "mean" and report.draft_vocab_size == DRAFT_VOCAB
    mapping_sha = hashlib.sha256(world["mapping"].read_bytes()).hexdigest()
    assert report.output == world["root"] / f"drafter-remapped-{mapping_sha[:8]}"
    assert report.mapping_sha256 == mapping_sha

    written = check_output(report.output, world["state"], run_mapping, expected_rows)
    old = world["state"]["lm_head.weight"]
    mean = old.double().mean(0).to(old.dtype)
    initialised = torch.from_numpy(np.flatnonzero(expected_rows < 0))
    assert initialised.numel() == 6_250
    torch.testing.assert_close(written["lm_head.weight"][initialised], mean.expand(6_250, -1), rtol=0, atol=1e-7)
    # the rows a fine-tune labels correctly now: all 25 750 shared tokens, not 252
    hot_new = run_mapping.hot_ids
    position_old = {int(t): i for i, t in enumerate(ckpt_mapping.hot_ids)}
    j = 12_345
    assert expected_rows[j] == position_old[int(hot_new[j])] != j

    config = json.loads((report.output / "config.json").read_text())
    original = json.loads((world["source"] / "config.json").read_text())
    assert config == {**original, "draft_vocab_size": DRAFT_VOCAB}
    assert listing(report.output) == ["config.json", "generation_config.json", "model.safetensors", "triage-remap.json"]
    assert any("training_state.pt" in note for note in report.notes)


def test_provenance_in_metadata_and_json(world):
    report = remap_checkpoint(world["source"], world["mapping"], init="zeros", device="cpu")
    source_b3 = blake3.blake3((world["source"] / "model.safetensors").read_bytes()).hexdigest()
    mapping_sha = hashlib.sha256(world["mapping"].read_bytes()).hexdigest()
    with safe_open(str(report.output / "model.safetensors"), framework="pt") as f:
        meta = f.metadata()
    assert meta["format"] == "pt"  # the source's own metadata is kept
    assert json.loads(meta["triage.source_blake3"]) == {"model.safetensors": source_b3}
    assert meta["triage.source"] == str(world["source"].resolve())
    assert meta["triage.mapping_sha256"] == mapping_sha
    assert (meta["triage.rows_copied"], meta["triage.rows_initialized"], meta["triage.init"]) == (
        "25750",
        "6250",
        "zeros",
    )
    assert meta["triage.version"] == __version__
    provenance = json.loads((report.output / "triage-remap.json").read_text())
    assert provenance["source_blake3"] == {"model.safetensors": source_b3}
    assert provenance["mapping_sha256"] == mapping_sha and provenance["mapping_sha256_of"] == "file"
    assert (provenance["rows_copied"], provenance["rows_initialized"], provenance["init"]) == (25_750, 6_250, "zeros")
    assert provenance["version"] == __version__ and provenance["source"] == str(world["source"].resolve())
    assert provenance["files"] == listing(report.output)
    assert report.source_blake3 == {"model.safetensors": source_b3}
    umask = staging.umask()
    assert report.output.stat().st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0700
    assert all(p.stat().st_mode & 0o777 == 0o666 & ~umask for p in report.output.iterdir())


def test_zeros_init(world, story, expected_rows):
    report = remap_checkpoint(world["source"], world["mapping"], init="zeros", device="cpu")
    written = check_output(report.output, world["state"], story[1], expected_rows)
    initialised = torch.from_numpy(np.flatnonzero(expected_rows < 0))
    assert torch.count_nonzero(written["lm_head.weight"][initialised]) == 0
    assert report.init == "zeros"


def test_plan_describes_exactly_what_will_be_written(world):
    plan = plan_remap(world["source"], world["mapping"])
    assert plan.describe() == (
        f"Write {plan.output} from {world['source'].resolve()}: 25 750 lm_head rows move to the run's order, "
        f"6 250 rows initialised from the mean of the old rows; d2t/t2d replaced by {world['mapping'].resolve()}; "
        "source untouched."
    )
    assert not plan.output.exists()  # planning writes nothing
    assert listing(world["root"]) == ["drafter", "run_mapping.pt"]


# ------------------------------------------------------------------------------------------
# layouts and file kinds


@pytest.mark.parametrize(
    "layout,file_kind",
    [
        ("specforge", "bin"),
        ("speculators", "safetensors"),
        ("speculators", "bin"),
        ("specforge", "sharded"),
    ],
)
def test_layouts_and_file_kinds(tmp_path, story, expected_rows, layout, file_kind):
    ckpt_mapping, run_mapping = story
    state = drafter_state(layout, ckpt_mapping)
    source = write_drafter(tmp_path / "src", state, drafter_config(layout), file_kind=file_kind)
    mapping = write_mapping_npy(run_mapping, tmp_path / "run")[0]  # speculators' d2t.npy / t2d.npy
    before = tree_digest(source)
    report = remap_checkpoint(source, mapping, out=tmp_path / "out", device="cpu")
    assert tree_digest(source) == before
    assert (report.rows_copied, report.rows_initialized) == (25_750, 6_250)
    if file_kind == "sharded":
        index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
        shards = sorted(set(index["weight_map"].values()))
        assert shards == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        written = {}
        for shard in shards:
            written.update(load_file(str(tmp_path / "out" / shard)))
        assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in written.values())
        save_file(written, str(tmp_path / "merged.safetensors"))
        (tmp_path / "merged").mkdir()
        (tmp_path / "merged.safetensors").rename(tmp_path / "merged" / "model.safetensors")
        check_output(tmp_path / "merged", state, run_mapping, expected_rows)
    else:
        written = check_output(tmp_path / "out", state, run_mapping, expected_rows)
    prefix = "layers.0." if layout == "speculators" else "midlayer."
    assert all(not n.startswith(("layers.", "midlayer.")) or n.startswith(prefix) for n in written)
    if file_kind == "bin":
        assert report.written_as == "model.safetensors"
        assert "pytorch_model.bin" not in listing(tmp_path / "out")
        assert any("pytorch_model.bin is written as model.safetensors" in n for n in report.notes)
    else:
        assert report.written_as is None
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["draft_vocab_size"] == DRAFT_VOCAB


def test_frequency_ordered_checkpoint_and_many_windows(tmp_path, monkeypatch):
    """modelopt order (not ascending) scatters the rows: the gather must not depend on order or window size."""
    rng = np.random.default_rng(5)
    ckpt_mapping = VocabMapping(rng.permutation(TARGET_VOCAB)[:DRAFT_VOCAB], TARGET_VOCAB)
    run_mapping = VocabMapping(
        np.sort(
            np.concatenate(
                [
                    rng.choice(ckpt_mapping.hot_ids, 20_000, replace=False),
                    rng.choice(np.setdiff1d(np.arange(TARGET_VOCAB), ckpt_mapping.hot_ids), 12_000, replace=False),
                ]
            )
        ),
        TARGET_VOCAB,
    )
    state = drafter_state("modelopt", ckpt_mapping)
    state["lm_head.weight"][7] = float("nan")  # NaN rows are copied as they are
    state["lm_head.weight"][8] = -0.0
    source = write_drafter(tmp_path / "src", state, drafter_config("modelopt"))
    mapping = write_mapping_pt(run_mapping, tmp_path / "run.pt")
    monkeypatch.setattr(tuning, "WINDOW_BYTES", 1000 * HIDDEN * 4)  # 32 windows over the old head
    report = remap_checkpoint(source, mapping, out=tmp_path / "out", init="zeros", device="cpu")
    rows = expected_source_rows(ckpt_mapping, run_mapping)
    assert report.rows_copied == 20_000 == np.count_nonzero(rows >= 0)
    check_output(tmp_path / "out", state, run_mapping, rows)


@pytest.mark.parametrize("init", ["mean", "zeros"])
def test_the_single_pass_and_the_torch_paths_write_the_same_bytes(world, monkeypatch, init):
    """The single pass over the safetensors source (numpy, rows scattered as they pass) against the path
    through torch (.bin sources), gathering on the CPU and staged on a device, byte for byte."""
    streamed = remap_checkpoint(
        world["source"], world["mapping"], out=world["root"] / "streamed", init=init, device="cpu"
    )
    monkeypatch.setattr(tuning, "SINGLE_PASS", False)
    direct = remap_checkpoint(world["source"], world["mapping"], out=world["root"] / "direct", init=init, device="cpu")
    monkeypatch.setattr(tuning, "STAGE_ON", "cpu")
    staged = remap_checkpoint(world["source"], world["mapping"], out=world["root"] / "staged", init=init, device="cpu")
    a, b, c = (r.output / "model.safetensors" for r in (streamed, direct, staged))
    assert a.read_bytes() == b.read_bytes() == c.read_bytes()
    assert streamed.source_blake3 == direct.source_blake3 == staged.source_blake3


@pytest.mark.parametrize("init", ["mean", "zeros"])
def test_the_single_pass_writes_the_same_bytes_where_the_kernel_cannot_copy(world, monkeypatch, init):
    """Where copy_file_range is refused (another filesystem pair, an old kernel), every tensor and the
    lm_head's rows go through this process's buffer instead: the same bytes, the same digest."""
    in_kernel = remap_checkpoint(
        world["source"], world["mapping"], out=world["root"] / "kernel", init=init, device="cpu"
    )

    def refused(*args) -> None:
        raise fileio.NoInKernelCopy

    monkeypatch.setattr(fileio, "copy_range", refused)
    buffered = remap_checkpoint(
        world["source"], world["mapping"], out=world["root"] / "buffer", init=init, device="cpu"
    )
    a, b = (r.output / "model.safetensors" for r in (in_kernel, buffered))
    assert a.read_bytes() == b.read_bytes()
    assert in_kernel.source_blake3 == buffered.source_blake3 and buffered.verified


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_gather_writes_the_same_bytes(world, monkeypatch):
    cpu = remap_checkpoint(world["source"], world["mapping"], out=world["root"] / "cpu", device="cpu")
    monkeypatch.setattr(tuning, "GPU_MIN_BYTES", 0)
    monkeypatch.setattr(tuning, "SINGLE_PASS", False)  # the gather path, staged on the GPU
    gpu = remap_checkpoint(world["source"], world["mapping"], out=world["root"] / "gpu", device="cuda")
    assert (cpu.output / "model.safetensors").read_bytes() == (gpu.output / "model.safetensors").read_bytes()


def test_draft_vocab_of_another_size(tmp_path, story):
    """A run with a 16 000-token draft vocab gets a 16 000-row head and config.json says so."""
    ckpt_mapping, _ = story
    run_mapping = VocabMapping(np.sort(ckpt_mapping.hot_ids[::2]), TARGET_VOCAB)
    state = drafter_state("specforge", ckpt_mapping)
    source = write_drafter(tmp_path / "src", state, drafter_config("specforge"))
    report = remap_checkpoint(
        source, write_mapping_pt(run_mapping, tmp_path / "half.pt"), out=tmp_path / "out", device="cpu"
    )
    assert (report.rows_copied, report.rows_initialized, report.draft_vocab_size) == (16_000, 0, 16_000)
    check_output(tmp_path / "out", state, run_mapping, expected_source_rows(ckpt_mapping, run_mapping))
    assert json.loads((tmp_path / "out" / "config.json").read_text())["draft_vocab_size"] == 16_000


def test_checkpoint_without_d2t_is_read_as_identity(tmp_path, story):
    _, run_mapping = story
    state = drafter_state("specforge", None)
    source = write_drafter(tmp_path / "src", state, drafter_config("specforge"))
    report = remap_checkpoint(
        source, write_mapping_pt(run_mapping, tmp_path / "run.pt"), out=tmp_path / "out", device="cpu"
    )
    identity = VocabMapping.identity(DRAFT_VOCAB, TARGET_VOCAB)
    rows = expected_source_rows(identity, run_mapping)
    assert report.rows_copied == np.count_nonzero(rows >= 0)
    assert any("no d2t" in note for note in report.notes)
    written = load_file(str(tmp_path / "out" / "model.safetensors"))
    copied = np.flatnonzero(rows >= 0)
    assert torch.equal(written["lm_head.weight"][copied], state["lm_head.weight"][rows[copied]])


# ------------------------------------------------------------------------------------------
# init from the target's lm_head


def write_target(root: Path, *, hidden: int = HIDDEN, vocab: int = TARGET_VOCAB) -> tuple[Path, torch.Tensor]:
    """A Hugging Face style target: config.json and model.safetensors with lm_head and embeddings."""
    g = torch.Generator().manual_seed(11)
    lm_head = torch.randn(vocab, hidden, generator=g).to(torch.bfloat16)
    tensors = {
        "model.embed_tokens.weight": torch.randn(vocab, hidden, generator=g).to(torch.bfloat16),
        "lm_head.weight": lm_head,
        "model.norm.weight": torch.ones(hidden),
    }
    written = save_target(
        root, tensors, num_hidden_layers=4, rms_norm_eps=1e-6, intermediate_size=128, num_attention_heads=4
    )
    return written, lm_head


def test_target_init_takes_the_targets_rows(world, story, expected_rows):
    target, target_head = write_target(world["root"] / "target")
    before = tree_digest(target)
    plan = plan_remap(world["source"], world["mapping"], target=target)
    assert plan.init == "target"  # the default when a target is given
    assert f"6 250 rows initialised from the target's lm_head ({target.resolve()})" in plan.describe()
    report = execute_remap(plan, device="cpu")
    written = check_output(report.output, world["state"], story[1], expected_rows)
    initialised = np.flatnonzero(expected_rows < 0)
    tokens = torch.from_numpy(story[1].hot_ids[initialised])
    # bf16 target rows become the drafter's float32 rows exactly (bf16 -> fp32 is lossless)
    assert torch.equal(written["lm_head.weight"][torch.from_numpy(initialised)], target_head[tokens].float())
    assert tree_digest(target) == before


def test_target_of_another_width_falls_back_to_mean_and_says_so(world):
    target, _ = write_target(world["root"] / "wide", hidden=2 * HIDDEN)
    plan = plan_remap(world["source"], world["mapping"], init="target", target=target)
    assert plan.init == "mean"
    assert any(f"{2 * HIDDEN} wide but the drafter's are {HIDDEN}" in note for note in plan.notes)
    assert "the mean of the old rows" in plan.describe()


def test_target_with_another_vocab_is_bad_input(world):
    target, _ = write_target(world["root"] / "small", vocab=100_000)
    with pytest.raises(BadInput, match="100000 tokens"):
        plan_remap(world["source"], world["mapping"], target=target)


# ------------------------------------------------------------------------------------------
# --keep-checkpoint-mapping


def test_keep_checkpoint_mapping_writes_the_mapping_and_no_weights(world, story, capsys):
    before = tree_digest(world["source"])
    code, out, err = run_cli([str(world["source"]), "--keep-checkpoint-mapping", "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    output = Path(result["output"])
    assert output == world["root"] / "drafter-vocab-mapping"
    assert listing(output) == ["d2t.npy", "t2d.npy", "triage-mapping.json", "vocab_mapping.pt"]
    ckpt_mapping = story[0]
    loaded = torch.load(output / "vocab_mapping.pt", weights_only=True)  # what SpecForge's load_vocab_mapping does
    assert torch.equal(loaded["d2t"], torch.from_numpy(ckpt_mapping.d2t()))
    assert torch.equal(loaded["t2d"], torch.from_numpy(ckpt_mapping.t2d()))
    assert np.array_equal(np.load(output / "d2t.npy"), ckpt_mapping.d2t())
    assert np.array_equal(np.load(output / "t2d.npy"), ckpt_mapping.t2d())
    assert tree_digest(world["source"]) == before
    assert not any(p.suffix in (".safetensors", ".bin") for p in output.iterdir())
    assert all(p.stat().st_mode & 0o777 == 0o666 & ~staging.umask() for p in output.iterdir())
    code, _, err = run_cli([str(world["source"]), "--keep-checkpoint-mapping"], capsys)
    assert code == 2 and "already exists" in err


def test_keep_checkpoint_mapping_warns_about_frequency_order(tmp_path):
    rng = np.random.default_rng(3)
    mapping = VocabMapping(rng.permutation(TARGET_VOCAB)[:DRAFT_VOCAB], TARGET_VOCAB)
    source = write_drafter(tmp_path / "src", drafter_state("modelopt", mapping), drafter_config("modelopt"))
    kept = keep_checkpoint_mapping(source, tmp_path / "kept")
    assert any("not ascending" in note for note in kept.notes)
    assert np.array_equal(np.load(tmp_path / "kept" / "d2t.npy"), mapping.d2t())


# ------------------------------------------------------------------------------------------
# never overwrite, never half-write


def test_existing_output_is_refused_without_force(world, capsys):
    out = world["root"] / "out"
    out.mkdir()
    (out / "precious.txt").write_text("mine")
    code, stdout, err = run_cli([str(world["source"]), "--mapping", str(world["mapping"]), "--out", str(out)], capsys)
    assert code == 2 and stdout == ""
    assert err.strip().count("\n") == 0 and "already exists; pass --force" in err
    # --force replaces only what triage wrote
    code, _, err = run_cli(
        [str(world["source"]), "--mapping", str(world["mapping"]), "--out", str(out), "--force"], capsys
    )
    assert code == 2 and "not a triage output" in err
    assert listing(out) == ["precious.txt"]


def test_force_replaces_a_previous_remap(world, capsys):
    out = world["root"] / "out"
    args = [str(world["source"]), "--mapping", str(world["mapping"]), "--out", str(out)]
    assert run_cli(args + ["--init-missing", "zeros"], capsys)[0] == 0
    first = tree_digest(out)
    code, stdout, err = run_cli(args + ["--force", "--json"], capsys)
    assert code == 0, err
    assert json.loads(stdout)["replaced"] is True
    assert tree_digest(out) != first
    assert [p.name for p in world["root"].iterdir() if p.name.startswith(".")] == []


def test_interrupt_during_the_swap_puts_the_old_output_back(world, monkeypatch):
    out = world["root"] / "out"
    remap_checkpoint(world["source"], world["mapping"], out=out, init="zeros", device="cpu")
    first = tree_digest(out)
    real_rename = os.rename

    def rename(src, dst):
        if ".triage-tmp-" in str(src) and Path(dst) == out:  # the old output is aside by now
            assert not out.exists()
            raise KeyboardInterrupt
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        remap_checkpoint(world["source"], world["mapping"], out=out, force=True, device="cpu")
    assert tree_digest(out) == first
    assert [p for p in os.listdir(world["root"]) if ".triage-" in p] == []


def test_output_that_would_replace_an_input_is_refused(world, capsys):
    for out in (world["source"], world["root"]):
        code, _, err = run_cli(
            [str(world["source"]), "--mapping", str(world["mapping"]), "--out", str(out), "--force"], capsys
        )
        assert code == 2 and "an input" in err


def inject_failure(monkeypatch, calls: int, error: BaseException) -> None:
    """Output bytes go to disk through fileio.write_at and fileio.copy_range (in-kernel copies):
    both succeed ``calls`` times in all, then raise ``error``."""
    count = {"n": 0}

    def failing(real):
        def wrapped(*args):
            count["n"] += 1
            if count["n"] > calls:
                raise error
            return real(*args)

        return wrapped

    monkeypatch.setattr(fileio, "write_at", failing(fileio.write_at))
    monkeypatch.setattr(fileio, "copy_range", failing(fileio.copy_range))


def count_writes(world, monkeypatch) -> int:
    """How many times a whole remap writes (a dry run into a scratch directory)."""
    count = {"n": 0}
    for name in ("write_at", "copy_range"):
        real = getattr(fileio, name)
        monkeypatch.setattr(fileio, name, lambda *a, real=real: (count.__setitem__("n", count["n"] + 1), real(*a))[1])
    remap_checkpoint(world["source"], world["mapping"], out=world["root"] / "scratch", device="cpu")
    monkeypatch.undo()
    shutil.rmtree(world["root"] / "scratch")
    return count["n"]


@pytest.mark.parametrize("calls", [0, 3, 9, "last"])
def test_full_disk_mid_write_leaves_nothing_and_says_so(world, monkeypatch, capsys, calls):
    if calls == "last":  # the very last write (the provenance file, just before the rename)
        calls = count_writes(world, monkeypatch) - 1
        assert calls > 9
    inject_failure(monkeypatch, calls, OSError(errno.ENOSPC, "No space left on device"))
    before = tree_digest(world["source"])
    code, out, err = run_cli(
        [str(world["source"]), "--mapping", str(world["mapping"]), "--out", str(world["root"] / "out")], capsys
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "no space left on the device" in err and "nothing was written" in err
    assert listing(world["root"]) == ["drafter", "run_mapping.pt"]  # no output, no temporary directory
    assert tree_digest(world["source"]) == before


def test_interrupt_mid_write_leaves_nothing(world, monkeypatch):
    inject_failure(monkeypatch, 5, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        remap_checkpoint(world["source"], world["mapping"], out=world["root"] / "out", device="cpu")
    assert listing(world["root"]) == ["drafter", "run_mapping.pt"]


def test_cancel_leaves_nothing(world):
    import threading

    cancel = threading.Event()
    seen = []

    def progress(fraction, text):
        seen.append(fraction)
        if fraction > 0.2:
            cancel.set()

    with pytest.raises(Cancelled):
        remap_checkpoint(
            world["source"], world["mapping"], out=world["root"] / "out", device="cpu", progress=progress, cancel=cancel
        )
    assert seen and listing(world["root"]) == ["drafter", "run_mapping.pt"]


@pytest.mark.parametrize(
    "tensor,byte,kind",
    [
        ("lm_head.weight", 10_000 * HIDDEN * 4 + 3, "differs from row"),  # a copied row
        ("lm_head.weight", 300 * HIDDEN * 4 + 3, "is not the mean row"),  # an initialised row (ids 252..6501)
        ("fc.weight", 17, "fc.weight differs from the source"),
        ("t2d", 5, "d2t/t2d differ"),
    ],
)
def test_a_corrupted_write_fails_verification_and_is_not_renamed(world, monkeypatch, capsys, tensor, byte, kind):
    """Flip one bit on its way to disk: verification must name it, and nothing is renamed into place."""
    real = writer.SafetensorsWriter.write

    def corrupting(self, name, offset, data):
        if name == tensor and offset <= byte < offset + data.nbytes:
            data = data.copy()
            data.reshape(-1).view(np.uint8)[byte - offset] ^= 0x01
        real(self, name, offset, data)

    real_copy = writer.SafetensorsWriter.copy

    def corrupting_copy(self, name, offset, source_fd, source_offset, length):
        real_copy(self, name, offset, source_fd, source_offset, length)
        if name == tensor and offset <= byte < offset + length:
            at = self.data_start + self.offsets[name] + byte
            with open(self.path, "rb") as f:
                f.seek(at)
                flipped = bytes([f.read(1)[0] ^ 0x01])
            os.pwrite(self.fd, flipped, at)

    monkeypatch.setattr(writer.SafetensorsWriter, "write", corrupting)
    monkeypatch.setattr(writer.SafetensorsWriter, "copy", corrupting_copy)
    code, _, err = run_cli(
        [str(world["source"]), "--mapping", str(world["mapping"]), "--out", str(world["root"] / "out")], capsys
    )
    assert code == 2 and "verification failed" in err and kind in err and err.count("\n") == 1, err
    assert listing(world["root"]) == ["drafter", "run_mapping.pt"]


def test_without_in_kernel_copy_tensors_stream_through_memory(world, story, expected_rows, monkeypatch):
    """Where copy_file_range is refused (across filesystems on old kernels, some FUSE mounts)."""

    def refuse(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    report = remap_checkpoint(world["source"], world["mapping"], out=world["root"] / "out", device="cpu")
    check_output(report.output, world["state"], story[1], expected_rows)


def test_stale_temporary_is_removed_and_a_live_one_kept(world):
    out = world["root"] / "out[1]"  # a name glob would misread
    stale = world["root"] / ".out[1].triage-tmp-dead"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    live = world["root"] / ".out[1].triage-tmp-live"
    live.mkdir()
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a running remap holds it
    try:
        remap_checkpoint(world["source"], world["mapping"], out=out, device="cpu")
        assert not stale.exists() and live.exists()
    finally:
        os.close(fd)


def tmpfs_or_skip(path: Path, options: str) -> Path:
    path.mkdir()
    if os.geteuid() != 0 or os.system(f"mount -t tmpfs -o {options} tmpfs {path} 2>/dev/null") != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    return path


def unmount(path: Path) -> None:
    if os.system(f"umount {path}") != 0:
        os.system(f"umount -l {path}")


def test_read_only_filesystem(world, capsys):
    read_only = tmpfs_or_skip(world["root"] / "ro", "size=64m,ro")
    try:
        code, _, err = run_cli(
            [str(world["source"]), "--mapping", str(world["mapping"]), "--out", str(read_only / "out")], capsys
        )
        assert code == 2 and "Read-only file system" in err and err.count("\n") == 1, err
    finally:
        unmount(read_only)


def open_fds_under(path: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            found.append(target)
    return found


def test_full_tmpfs(world, monkeypatch, capsys):
    """A real ENOSPC from the kernel: a 3 MB tmpfs for an ~11 MB checkpoint."""
    small = tmpfs_or_skip(world["root"] / "small", "size=3m")
    try:
        args = [str(world["source"]), "--mapping", str(world["mapping"]), "--out", str(small / "out")]
        code, _, err = run_cli(args, capsys)  # caught by the free-space check before anything is created
        assert code == 2 and "GB is free" in err and os.listdir(small) == []
        monkeypatch.setattr(fileio, "free_bytes", lambda directory: 1 << 40)  # let the kernel say it
        code, _, err = run_cli(args, capsys)
        assert code == 2 and "no space left on the device" in err and err.count("\n") == 1
        assert os.listdir(small) == []
        assert open_fds_under(small) == []  # nothing left open on the full filesystem
    finally:
        unmount(small)


# ------------------------------------------------------------------------------------------
# bad input: one line, exit 2, nothing written


def bad_cases(world, story, tmp_path) -> dict[str, tuple[list[str], str]]:
    src, mapping = str(world["source"]), str(world["mapping"])
    ckpt_mapping, run_mapping = story
    other_vocab = write_mapping_pt(VocabMapping(run_mapping.hot_ids, 200_000), tmp_path / "other_vocab.pt")
    repeated = run_mapping.hot_ids.copy()
    repeated[5] = repeated[4]
    repeated_pt = tmp_path / "repeated.pt"
    torch.save({"d2t": torch.from_numpy(repeated - np.arange(DRAFT_VOCAB))}, repeated_pt)
    outside_pt = tmp_path / "outside.pt"
    torch.save({"d2t": torch.full((DRAFT_VOCAB,), TARGET_VOCAB, dtype=torch.int64)}, outside_pt)
    no_head = drafter_state("specforge", ckpt_mapping)
    del no_head["lm_head.weight"]
    no_head_dir = write_drafter(tmp_path / "no_head", no_head, drafter_config("specforge"))
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}......")
    # degenerate inputs that used to come out "verified" with exit 0 (issue 11, item 9)
    off_vocab = drafter_state("specforge", ckpt_mapping)
    off_vocab["d2t"] = torch.full((DRAFT_VOCAB,), TARGET_VOCAB, dtype=torch.int64)  # every id past the vocab
    off_vocab_dir = write_drafter(tmp_path / "off_vocab", off_vocab, drafter_config("specforge"))
    empty_head = drafter_state("specforge", None)
    empty_head["lm_head.weight"] = torch.empty(0, HIDDEN)
    empty_head_dir = write_drafter(tmp_path / "empty_head", empty_head, drafter_config("specforge"))
    empty_run = tmp_path / "empty_run.pt"
    torch.save(
        {"d2t": torch.empty(0, dtype=torch.int64), "t2d": torch.zeros(TARGET_VOCAB, dtype=torch.bool)}, empty_run
    )
    # d2t tensors a weights-only load rebuilds but that hold no plain ids (issue 11, item 4)
    d2t_kinds = {
        "meta": torch.zeros(DRAFT_VOCAB, dtype=torch.int64, device="meta"),
        "sparse_coo": torch.from_numpy(run_mapping.d2t().copy()).to_sparse(),
        "float8_e4m3fn": torch.from_numpy(run_mapping.d2t().copy()).float().to(torch.float8_e4m3fn),
        "quantized": torch.quantize_per_tensor(torch.zeros(DRAFT_VOCAB), 0.1, 0, torch.quint8),
        "nested": torch.nested.nested_tensor([torch.zeros(3, dtype=torch.int64), torch.zeros(5, dtype=torch.int64)]),
    }
    kind_cases = {}
    for kind, d2t in d2t_kinds.items():
        path = tmp_path / f"d2t_{kind}.pt"
        torch.save({"d2t": d2t, "t2d": torch.from_numpy(run_mapping.t2d())}, path)
        kind_cases[f"{kind} d2t"] = ([src, "--mapping", str(path)], kind)
    return {
        **kind_cases,
        "--out longer than a file name may be": (
            [src, "--mapping", mapping, "--out", str(tmp_path / ("o" * 256))],
            "--out name is 256 bytes long",
        ),
        "--out too long once the temporary suffix is added": (
            [src, "--mapping", mapping, "--out", str(tmp_path / ("o" * 240))],
            "allows at most 234",
        ),
        "d2t entirely outside the target vocab": (
            [str(off_vocab_dir), "--mapping", mapping],
            "32000 of its 32000 positions outside the target vocab",
        ),
        "lm_head with no rows": ([str(empty_head_dir), "--mapping", mapping], "no rows"),
        "run mapping with no entries": ([src, "--mapping", str(empty_run)], "0 draft positions"),
        "target vocab mismatch": ([src, "--mapping", str(other_vocab)], "target vocab of 200000"),
        "repeated token": ([src, "--mapping", str(repeated_pt)], "repeat a target id"),
        "outside the vocab": ([src, "--mapping", str(outside_pt)], "outside the target vocab"),
        "missing lm_head": ([str(no_head_dir), "--mapping", mapping], "no lm_head.weight"),
        "unreadable checkpoint": ([str(garbage), "--mapping", mapping], "not valid JSON"),
        "missing checkpoint": ([str(tmp_path / "nope"), "--mapping", mapping], "no such file"),
        "missing mapping": ([src, "--mapping", str(tmp_path / "nope.pt")], "no such file"),
        "no mapping": ([src], "--mapping is required"),
        "target init without target": ([src, "--mapping", mapping, "--init-missing", "target"], "needs --target"),
        "output inside the source": (
            [src, "--mapping", mapping, "--out", str(world["source"] / "remapped")],
            "inside the source checkpoint",
        ),
    }


def test_bad_inputs_one_line_exit_2_nothing_written(world, story, tmp_path_factory, capsys):
    cases = bad_cases(world, story, tmp_path_factory.mktemp("bad"))
    before = listing(world["root"]), tree_digest(world["source"])
    for case, (argv, words) in cases.items():
        code, out, err = run_cli(argv, capsys)
        assert code == 2, case
        assert out == "" and err.startswith("triage: ") and err.count("\n") == 1, (case, err)
        assert words in err, (case, err)
        assert (listing(world["root"]), tree_digest(world["source"])) == before, case


def test_json_report_keys(world, capsys):
    code, out, err = run_cli([str(world["source"]), "--mapping", str(world["mapping"]), "--json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    design = {"source", "output", "mapping", "draft_vocab_size", "rows_copied", "rows_initialized", "init", "verified"}
    assert design | {"accuracy_before", "accuracy_after", "written_as"} <= set(report)
    assert (report["rows_copied"], report["rows_initialized"], report["verified"]) == (25_750, 6_250, True)
    assert report["accuracy_before"] is None and report["accuracy_after"] is None
    assert report["source"] == str(world["source"].resolve()) and Path(report["output"]).is_dir()


def test_human_report(world, capsys):
    code, out, _ = run_cli([str(world["source"]), "--mapping", str(world["mapping"])], capsys)
    assert code == 0
    assert out.startswith("wrote ") and "(verified)" in out
    assert "25750 lm_head rows copied bit for bit" in out and "6250 initialised (mean)" in out


def test_cli_choices_match_the_core():
    assert remap_command.INIT_CHOICES == INIT_STRATEGIES
    parser = argparse.ArgumentParser()
    remap_command.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["x", "--init-missing", "random"])


# ------------------------------------------------------------------------------------------
# the source's digest, hashed from the moment plan_remap knows the files


def test_source_rewritten_after_planning_is_refused_and_nothing_written(world):
    """The digest recorded must be that of the bytes the output was made from: a source rewritten
    between plan and execute (the TUI's confirm dialog can sit open) stops the remap."""
    plan = plan_remap(world["source"], world["mapping"], out=world["root"] / "out")
    weights = world["source"] / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data)  # same bytes, but rewritten: the remap cannot know what was read when
    os.utime(weights, ns=(1, 1))
    with pytest.raises(BadInput, match="changed while it was being remapped"):
        execute_remap(plan, device="cpu")
    assert listing(world["root"]) == ["drafter", "run_mapping.pt"]


def test_the_command_freezes_the_heap_at_exit_instead_of_collecting_it():
    """`triage remap` skips the interpreter's last full collection (torch's objects, all alive)."""
    import sys

    code = (
        "import atexit, gc\n"
        "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"  # runs after: LIFO
        "from triage_tui.commands.remap import skip_final_collection\n"
        "skip_final_collection(); skip_final_collection()\n"
        "print('frozen now:', gc.get_freeze_count() > 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["frozen now: False", "frozen at exit: True"], done.stdout


def test_importing_remap_does_not_import_torch():
    """plan_remap hashes the source while torch (~1 s) is imported for the first tensor read;
    an import of torch at module level would put the import before the hash again."""
    import sys

    code = (
        "import sys, triage_tui.core.fix.remap.execute, triage_tui.core.fix.remap.keep, triage_tui.commands.remap; "
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_the_mean_rounds_as_torch_does(dtype):
    """The single pass rounds the float64 mean with numpy; torch's .to(dtype) is the reference,
    on values that sit on rounding ties, subnormals, overflow and NaN."""
    gen = np.random.default_rng(0)
    values = np.concatenate(
        [
            gen.standard_normal(20_000) * 10.0 ** gen.integers(-40, 40, 20_000),
            (np.arange(-4096, 4096) + 0.5) * 2.0**-7,  # ties at bf16's precision
            1 + (np.arange(1, 2000) * 2.0**-24),  # ties and near-ties of float32 -> bf16
            [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, 3.5e38, 1e300, -1e300, 65520.0, 6e-8],
        ]
    )
    reference = torch.from_numpy(values).to(getattr(torch, dtype))
    got = torch.from_numpy(rows.float64_to_bytes(values, dtype).copy()).view(getattr(torch, dtype))
    nan = np.isnan(values)
    # torch's NaN bits depend on its code path (0x7fc0 or 0xffff for bf16); any NaN stays NaN
    assert torch.isnan(got[torch.from_numpy(nan)]).all()
    keep = torch.from_numpy(~nan)
    assert torch.equal(got[keep].view(torch.uint8), reference[keep].contiguous().view(torch.uint8))


# ------------------------------------------------------------------------------------------
# where the default output goes: never into a checkout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to make a work tree")
def test_the_walkthrough_remap_leaves_a_git_checkout_clean(tmp_path, monkeypatch, capsys):
    """The README's walkthrough (`m`, `y` on vocab-mismatch; the opposite fix from a shell) in a
    git-initialised copy of the checkout: both outputs go under $XDG_DATA_HOME/triage/remapped/,
    the dialog and `remap --json` say where and why, and `git status --porcelain` stays empty."""
    from builders.samples import copy_samples
    from triage_tui.core.diagnose.check_inputs import resolve_run
    from triage_tui.tui.screens.remap import describe_plan

    checkout = tmp_path / "checkout"
    samples = copy_samples(checkout / "sample_runs", ("vocab-mismatch",))
    git("init", "-q", cwd=checkout)
    git("add", "-A", cwd=checkout)
    git("commit", "-qm", "samples", cwd=checkout)
    data_home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data_home))
    home = data_home / "triage" / "remapped"

    # `m`: the TUI plans from the run's inputs, shows the plan, and `y` writes it (the same plan).
    inputs = resolve_run(samples / "vocab-mismatch").inputs
    plan = plan_remap(inputs.checkpoint, inputs.mapping, target=inputs.target)
    drafters = samples / "_drafters"
    assert plan.output == home / drafters.relative_to("/") / plan.output.name
    assert plan.output.name.startswith("drafter-a-remapped-")
    shown = describe_plan(plan).plain.splitlines()
    assert str(plan.output) in shown
    assert "not beside the source, which is in this git work tree:" in " ".join(shown)
    assert str(checkout) in shown
    report = execute_remap(plan, device="cpu")
    assert report.output == plan.output and (plan.output / "model.safetensors").is_file()
    assert f"git work tree {checkout}" in report.to_json()["output_outside_because"]

    # The shell's `triage remap --json`, both fixes: the same place, said in the JSON.
    code, out, _ = run_cli([str(inputs.checkpoint), "--keep-checkpoint-mapping", "--json"], capsys)
    kept = json.loads(out)
    assert code == 0 and Path(kept["output"]).parent == plan.output.parent
    assert kept["output_outside_because"].startswith(f"the source's directory is in the git work tree {checkout}")

    assert git("status", "--porcelain", "--untracked-files=all", cwd=checkout) == ""
    assert not [p.name for p in drafters.iterdir() if "-remapped-" in p.name or "-vocab-mapping" in p.name]


def test_the_default_output_stays_beside_the_source_outside_a_checkout_or_where_git_ignores_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    plain = tmp_path / "models" / "drafter-a"
    plain.mkdir(parents=True)
    assert staging.default_output(plain, "out") == staging.OutputPlace(plain.parent / "out")
    if shutil.which("git") is None:
        return
    repo = tmp_path / "repo"
    (repo / "models" / "drafter-a").mkdir(parents=True)
    git("init", "-q", cwd=repo)
    (repo / ".gitignore").write_text("models/*-remapped-*/\n")
    ignored = staging.default_output(repo / "models" / "drafter-a", "drafter-a-remapped-12345678")
    assert ignored == staging.OutputPlace(repo / "models" / "drafter-a-remapped-12345678")
    tracked = staging.default_output(repo / "models" / "drafter-a", "drafter-a-vocab-mapping")
    assert tracked.outside_of == (staging.GIT_WORK_TREE, repo)
    assert (
        tracked.path
        == tmp_path / "data" / "triage" / "remapped" / (repo / "models").relative_to("/") / "drafter-a-vocab-mapping"
    )
