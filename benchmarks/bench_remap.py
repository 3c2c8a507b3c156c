"""`triage remap` at real scale against `cp -r` of the same files, in one run, with peak memory.

Builds a drafter shaped like a Kimi-K2 EAGLE-3 drafter in benchmarks/.work/remap/ (deleted at the end):
hidden 7168, draft vocab 32 000, target vocab 163 840, bf16, SpecForge ``midlayer.*`` names,
64 query / 8 key-value heads of 128, MLP intermediate 12 288 (chosen to land the file in the
1-2 GB range), ``lm_head`` [32 000, 7168]. The source carries the story's checkpoint mapping
(tests/builders/mappings.py) and is remapped to the run's mapping with the default init (mean).

Each round times, as separate processes:
- ``cp -r SRC DST`` (what a user would otherwise run to get a second copy),
- ``cp -r`` followed by ``sync`` of the copied files (a copy that is on disk, as the remap's is),
- the script a user would write instead of the remap (``USER_SCRIPT``: safetensors ``load_file``,
  ``torch.load`` of the mapping, index ``lm_head``, ``save_file``; no sync, no verification, no provenance),
- the remap in a fresh process (``plan_remap`` + ``execute_remap``, what ``triage remap`` runs:
  write, fsync, verify, rename), reporting its peak RSS (``getrusage``), the RSS after imports
  alone, and phase times from its progress messages.
Page cache: before every step, "warm" reads the source once and "cold" evicts its pages with
``posix_fadvise(DONTNEED)`` (only those files; no global drop_caches); the share of the source
in the cache at the start of each step is measured with ``mincore`` and printed. Both orders
(cp first, remap first) are run for each cache state, 3 rounds each; cells are medians.
"plan" reads the inputs, "write" is the single pass over the source (each byte copied once, inside the
kernel, lm_head rows too; a thread beside it reads the old lm_head again for the mean), "verify + fsync"
the rest up to the rename (the comparison with the output, a thread hashing the source with BLAKE3
behind it); "remap CPU s: write / verify + fsync" is the process's user + system time (every thread)
in those two phases. A second table times each step alone (interpreter, torch import, SHA-256 and
BLAKE3 of the source, the byte comparison).

    .venv/bin/python benchmarks/bench_remap.py
    .venv/bin/python benchmarks/bench_remap.py --keep --rounds 1   # while developing: build once, reuse
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HIDDEN = 7168
HEADS, KV_HEADS, HEAD_DIM = 64, 8, 128
INTERMEDIATE = 12_288
DRAFT_VOCAB, TARGET_VOCAB = 32_000, 163_840  # the story's sizes (tests/builders/mappings.py)
REPEATS = 3
WORK = HERE / ".work" / "remap"  # only this benchmark's own folder: others share benchmarks/.work

# Runs in a child: imports, then plan + execute (what `triage remap` calls), with phase times
# taken from its progress messages, and getrusage peaks; prints one JSON line.
WRAPPER = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from triage_tui.commands.remap import skip_final_collection
from triage_tui.core.fix.remap.execute import execute_remap
from triage_tui.core.fix.remap.plan import plan_remap
skip_final_collection()  # as `triage remap` does
rss_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t1 = time.perf_counter()
plan = plan_remap(sys.argv[1], sys.argv[2], out=sys.argv[3])
t2 = time.perf_counter()
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process
    return usage.ru_utime + usage.ru_stime
marks = {}
cpu_t2 = cpu()
def progress(fraction, text):
    if text.startswith("verifying") and "verify" not in marks:
        marks["verify"], marks["verify_cpu"] = time.perf_counter(), cpu()
report = execute_remap(plan, progress=progress)
t3 = time.perf_counter()
cpu_t3 = cpu()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"report": report.to_json(), "import_s": t1 - t0, "plan_s": t2 - t1,
                  "write_s": marks["verify"] - t2, "verify_s": t3 - marks["verify"],
                  "write_cpu_s": marks["verify_cpu"] - cpu_t2, "verify_cpu_s": cpu_t3 - marks["verify_cpu"],
                  "rss_imports_kb": rss_imports, "rss_peak_kb": usage.ru_maxrss}))
"""

# The script a user would write instead (load the checkpoint, index lm_head, save it): safetensors'
# load_file/save_file and torch indexing, the run's mapping through torch.load, the config copied.
# It neither syncs, verifies nor records provenance; it is timed in its own process like the remap.
USER_SCRIPT = r"""
import json, os, shutil, sys
import torch
from safetensors.torch import load_file, save_file
src, mapping_path, out = sys.argv[1], sys.argv[2], sys.argv[3]
state = load_file(os.path.join(src, "model.safetensors"))
run = torch.load(mapping_path, weights_only=True)
vocab = run["t2d"].numel()
old_hot = torch.arange(state["d2t"].numel()) + state["d2t"]
new_hot = torch.arange(run["d2t"].numel()) + run["d2t"]
position = torch.full((vocab,), -1, dtype=torch.long)
position[old_hot] = torch.arange(old_hot.numel())
rows = position[new_hot]
old = state["lm_head.weight"]
head = old.double().mean(0).to(old.dtype).expand(rows.numel(), -1).clone()
head[rows >= 0] = old[rows[rows >= 0]]
state.update({"lm_head.weight": head, "d2t": run["d2t"], "t2d": run["t2d"]})
os.makedirs(out)
save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
config = json.load(open(os.path.join(src, "config.json")))
config["draft_vocab_size"] = rows.numel()
json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
"""

# What each step the remap must take costs on its own, each in a fresh process on the warm source:
# the floor under the remap's time on this machine (see RESULTS-remap.md).
PARTS = {
    "python start + numpy (no torch)": "import numpy",
    "python start + import torch + exit": "import torch",
    "SHA-256 of the source (the digest before)": "import hashlib, sys\n"
    "digest, f = hashlib.sha256(), open(sys.argv[1], 'rb')\n"
    "while block := f.read(8 << 20):\n"
    "    digest.update(block)",
    "BLAKE3 of the source (the digest now)": "import sys; from triage_tui.core.fix.remap.digest import file_blake3; "
    "from pathlib import Path; file_blake3(Path(sys.argv[1]))",
    "compare source with a copy (verification, memcmp)": "import os, sys; "
    "from triage_tui.core import fileio; from triage_tui.core.fix.remap import tuning\n"
    "a, b = os.open(sys.argv[1], os.O_RDONLY), os.open(sys.argv[2], os.O_RDONLY)\n"
    "size = os.fstat(a).st_size\n"
    "for at in range(0, size, tuning.WINDOW_BYTES):\n"
    "    n = min(tuning.WINDOW_BYTES, size - at)\n"
    "    with fileio.mapped(a, at, n) as x, fileio.mapped(b, at, n) as y:\n"
    "        assert fileio.equal_bytes(x, y)\n"
    "        del x, y",
}


def build_drafter(root: Path) -> None:
    """The Kimi-K2-shaped drafter and the run's mapping file (run in a child process: the parent stays
    small, and a child's getrusage peak starts from its parent's size at fork)."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    sys.path.insert(0, str(REPO / "tests"))
    from builders.mappings import story_mappings
    from triage_tui.core.formats.mapping import write_mapping_pt

    ckpt_mapping, run_mapping = story_mappings()
    assert (ckpt_mapping.draft_vocab_size, ckpt_mapping.target_vocab_size) == (DRAFT_VOCAB, TARGET_VOCAB)
    gen = torch.Generator().manual_seed(0)
    block = torch.randint(-(1 << 15), 1 << 15, (1 << 23,), dtype=torch.int16, generator=gen).view(torch.bfloat16)

    def filled(*shape: int) -> torch.Tensor:
        """Random bf16 bits (tiled from one 16 MB block: the content is only copied)."""
        n = int(np.prod(shape))
        return block.repeat(n // block.numel() + 1)[:n].reshape(shape).clone()

    p = "midlayer."
    state = {
        "fc.weight": filled(HIDDEN, 3 * HIDDEN),
        f"{p}self_attn.q_proj.weight": filled(HEADS * HEAD_DIM, 2 * HIDDEN),
        f"{p}self_attn.k_proj.weight": filled(KV_HEADS * HEAD_DIM, 2 * HIDDEN),
        f"{p}self_attn.v_proj.weight": filled(KV_HEADS * HEAD_DIM, 2 * HIDDEN),
        f"{p}self_attn.o_proj.weight": filled(HIDDEN, HEADS * HEAD_DIM),
        f"{p}mlp.gate_proj.weight": filled(INTERMEDIATE, HIDDEN),
        f"{p}mlp.up_proj.weight": filled(INTERMEDIATE, HIDDEN),
        f"{p}mlp.down_proj.weight": filled(HIDDEN, INTERMEDIATE),
        f"{p}hidden_norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        f"{p}input_layernorm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        f"{p}post_attention_layernorm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        "norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        # every lm_head row distinct, so a wrong gather could not pass verification by luck
        "lm_head.weight": torch.randn(DRAFT_VOCAB, HIDDEN, generator=gen).to(torch.bfloat16),
        "d2t": torch.from_numpy(ckpt_mapping.d2t().copy()),
        "t2d": torch.from_numpy(ckpt_mapping.t2d()),
    }
    source = root / "kimi-k2-eagle3"
    source.mkdir(parents=True)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "num_hidden_layers": 1,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": TARGET_VOCAB,
        "draft_vocab_size": DRAFT_VOCAB,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]},
    }
    (source / "config.json").write_text(json.dumps(config, indent=2))
    save_file(state, str(source / "model.safetensors"), metadata={"format": "pt"})
    write_mapping_pt(run_mapping, root / "run_vocab_mapping.pt")


def evict(paths: list[Path]) -> None:
    """Drop these files' pages from the page cache (they are clean: the source was synced)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm(paths: list[Path]) -> None:
    for path in paths:
        with open(path, "rb") as f:
            while f.read(64 << 20):
                pass


def cached_fraction(paths: list[Path]) -> float:
    """Share of the files' pages in the page cache (mincore on a private, untouched mapping)."""
    libc = ctypes.CDLL(None, use_errno=True)
    page = os.sysconf("SC_PAGE_SIZE")
    resident = total = 0
    for path in paths:
        size = path.stat().st_size
        if not size:
            continue
        with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as mapped:
            anchor = ctypes.c_char.from_buffer(mapped)
            pages = (size + page - 1) // page
            vector = (ctypes.c_ubyte * pages)()
            if libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size), vector) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            del anchor
            resident += sum(byte & 1 for byte in vector)
            total += pages
    return resident / max(1, total)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_cp(source: Path, dest: Path, *, sync: bool) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of ``cp -r`` (and ``sync``)."""
    cpu, t0 = children_cpu(), time.perf_counter()
    subprocess.run(["cp", "-r", str(source), str(dest)], check=True)
    if sync:
        subprocess.run(["sync", *(str(p) for p in sorted(dest.iterdir())), str(dest)], check=True)
    return time.perf_counter() - t0, children_cpu() - cpu


def time_remap(source: Path, mapping: Path, out: Path) -> dict:
    cpu, t0 = children_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(source), str(mapping), str(out)], cwd=REPO, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    cpu = children_cpu() - cpu  # the whole process, exit included, as for cp and the script
    if done.returncode != 0:
        raise SystemExit(f"remap failed: {done.stderr}")
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    assert stats["report"]["verified"], stats
    stats["wall_s"], stats["cpu_s"] = wall, cpu
    return stats


def time_user_script(source: Path, mapping: Path, out: Path) -> tuple[float, float]:
    cpu, t0 = children_cpu(), time.perf_counter()
    subprocess.run([sys.executable, "-c", USER_SCRIPT, str(source), str(mapping), str(out)], check=True, cwd=REPO)
    return time.perf_counter() - t0, children_cpu() - cpu


def settle(*paths: Path) -> None:
    """Remove outputs and let the disk finish before the next measurement."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    os.sync()


def measure(source: Path, mapping: Path, files: list[Path], cache: str, order: str) -> dict:
    """One round: cp, cp + sync, the user's script and remap, each from the same cache state, in the given order."""
    results: dict = {"cached": []}
    steps = ["cp", "cp+sync", "script", "remap"] if order == "cp first" else ["remap", "script", "cp", "cp+sync"]
    for step in steps:
        (evict if cache == "cold" else warm)(files)
        results["cached"].append(cached_fraction(files))
        if step == "remap":
            results["remap"] = time_remap(source, mapping, WORK / "remapped")
            settle(WORK / "remapped")
        elif step == "script":
            results["script"] = time_user_script(source, mapping, WORK / "scripted")
            settle(WORK / "scripted")
        else:
            results[step] = time_cp(source, WORK / "copy", sync=step == "cp+sync")
            settle(WORK / "copy")
    return results


def measure_parts(source: Path, files: list[Path], rounds: int) -> str:
    """Median wall time of each of the remap's required steps alone (warm cache, fresh process)."""
    weights = source / "model.safetensors"
    copy = WORK / "copy"
    subprocess.run(["cp", "-r", str(source), str(copy)], check=True)
    lines = [f"| step alone (warm source, own process) | wall, median of {rounds} |", "|---|---|"]
    try:
        for label, code in PARTS.items():
            times = []
            for _ in range(rounds):
                warm(files + [copy / weights.name])
                t0 = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-c", code, str(weights), str(copy / weights.name)], check=True, cwd=REPO
                )
                times.append(time.perf_counter() - t0)
            lines.append(f"| {label} | {statistics.median(times):.2f} s |")
    finally:
        settle(copy)
    return "\n".join(lines)


def main() -> None:
    import as_installed  # benchmarks/: the script's own directory is on sys.path

    as_installed.compile_triage()  # timed processes start as an installed triage does
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=REPEATS, help=f"rounds per row (default {REPEATS})")
    parser.add_argument(
        "--keep",
        action="store_true",
        help=f"keep the drafter built in {WORK.relative_to(REPO)} (1.7 GB) and reuse one an earlier --keep run left",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the run, append nothing to RESULTS-remap.md")
    args = parser.parse_args()
    import record

    run = record.Run("remap", dry_run=args.dry_run)
    record_rows: list[dict] = []
    built = WORK / ".built"  # written once a drafter is complete there
    reuse = args.keep and built.is_file()
    if not reuse:
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        if reuse:
            settle(WORK / "remapped", WORK / "scripted", WORK / "copy")  # what an interrupted run left
        else:
            subprocess.run([sys.executable, __file__, "--build", str(WORK)], check=True, cwd=REPO)
            built.touch()
        source, mapping = WORK / "kimi-k2-eagle3", WORK / "run_vocab_mapping.pt"
        lm_head_bytes = DRAFT_VOCAB * HIDDEN * 2
        files = sorted(source.iterdir())
        total = sum(p.stat().st_size for p in files)
        os.sync()
        print(
            f"{'reused' if reuse else 'built'} {source.name}: {total / 1e9:.2f} GB ({total / 2**30:.2f} GiB), lm_head "
            f"{lm_head_bytes / 2**20:.0f} MiB, in {time.perf_counter() - t0:.1f} s"
        )
        load_before = os.getloadavg()[0]
        header = (
            "| cache (source cached at start) | order | cp -r | cp -r + sync | user's script | remap (process) | "
            "imports | plan | write | verify + fsync | remap / cp | remap / (cp + sync) | remap / script | "
            "CPU s: cp + sync / script / remap | CPU remap / (cp + sync) | CPU remap / script | "
            "remap CPU s: write / verify + fsync | peak RSS | RSS after imports | peak / lm_head |"
        )
        lines = [header, "|" + "---|" * (header.count("|") - 1)]
        report = None
        for cache in ("warm", "cold"):
            for order in ("cp first", "remap first"):
                rounds = [measure(source, mapping, files, cache, order) for _ in range(args.rounds)]
                median = lambda values: statistics.median(values)  # noqa: E731
                cp = median([r["cp"][0] for r in rounds])
                cps = median([r["cp+sync"][0] for r in rounds])
                script = median([r["script"][0] for r in rounds])
                cps_cpu = median([r["cp+sync"][1] for r in rounds])
                script_cpu = median([r["script"][1] for r in rounds])
                remap = {
                    key: median([r["remap"][key] for r in rounds])
                    for key in (
                        "wall_s",
                        "import_s",
                        "plan_s",
                        "write_s",
                        "verify_s",
                        "cpu_s",
                        "write_cpu_s",
                        "verify_cpu_s",
                    )
                }
                peak = max(r["remap"]["rss_peak_kb"] for r in rounds) * 1024
                after_imports = max(r["remap"]["rss_imports_kb"] for r in rounds) * 1024
                cached = [c for r in rounds for c in r["cached"]]
                report = rounds[0]["remap"]["report"]
                lines.append(
                    f"| {cache} ({min(cached):.0%}-{max(cached):.0%}) | {order} | {cp:.2f} s | {cps:.2f} s | "
                    f"{script:.2f} s | {remap['wall_s']:.2f} s | {remap['import_s']:.2f} s | {remap['plan_s']:.2f} s | "
                    f"{remap['write_s']:.2f} s | {remap['verify_s']:.2f} s | "
                    f"{remap['wall_s'] / cp:.2f}x | {remap['wall_s'] / cps:.2f}x | {remap['wall_s'] / script:.2f}x | "
                    f"{cps_cpu:.2f} / {script_cpu:.2f} / {remap['cpu_s']:.2f} | {remap['cpu_s'] / cps_cpu:.2f}x | "
                    f"{remap['cpu_s'] / script_cpu:.2f}x | {remap['write_cpu_s']:.2f} / {remap['verify_cpu_s']:.2f} | "
                    f"{peak / 2**20:.0f} MiB | "
                    f"{after_imports / 2**20:.0f} MiB | {peak / lm_head_bytes:.2f}x |"
                )
                if order == "cp first":
                    record_rows.append(
                        {
                            "what": f"remap a {total / 1e9:.2f} GB drafter for the run's mapping, page cache {cache}",
                            "triage": {
                                "name": "triage",
                                "label": "`triage remap` (writes, fsyncs, verifies every byte, records provenance)",
                                "seconds": remap["wall_s"],
                                "cpu": remap["cpu_s"],
                                "rss_mib": peak / 2**20,
                            },
                            "other": {
                                "name": "a user's script",
                                "label": "the script a user writes: load with safetensors, index `lm_head`, save "
                                "(no sync, no verification; `USER_SCRIPT`)",
                                "seconds": script,
                                "cpu": script_cpu,
                            },
                        }
                    )
        print(
            f"load average (1 min) {load_before:.1f} before the rounds, {os.getloadavg()[0]:.1f} after, "
            f"on {os.cpu_count()} CPUs; each row: median of {args.rounds} rounds (peak RSS: the largest)"
        )
        print(
            f"checkpoint {total / 1e9:.2f} GB, lm_head {lm_head_bytes / 2**20:.0f} MiB "
            f"({DRAFT_VOCAB} x {HIDDEN} bf16); remap: {report['rows_copied']} rows copied, "
            f"{report['rows_initialized']} initialised ({report['init']}), verified {report['verified']}"
        )
        print("\n".join(lines))
        print()
        print(measure_parts(source, files, args.rounds))
        print(f"load average (1 min) {os.getloadavg()[0]:.1f} after the parts")
        run.save("Remap at real size", "\n".join(lines), record_rows)
    finally:
        if not args.keep:
            shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--build"]:
        build_drafter(Path(sys.argv[2]))
    else:
        main()
