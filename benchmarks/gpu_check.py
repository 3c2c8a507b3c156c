"""The replay and the remap gather at Kimi-K2 size on CUDA and on CPU: same numbers, same bytes, and the times.

Builds bench_checks.py's K2-shaped world (drafter: hidden 7168, draft vocab 32 000, target vocab
163 840, bf16; a sharded target head; SpecForge dumps holding --tokens scored positions; the
story's two mappings), then
- runs ``run_replay`` (all six aux chunk orders, so every code path of the check runs) on cpu and
  on cuda over the same dumps and compares every number: the accuracies to one token in a
  thousand (float32 kernels sum in different orders, so a near-tied argmax may flip), the losses
  to 1e-4 relative;
- runs ``remap_checkpoint`` (the lm_head gather, staged on the GPU for a head this size) with
  device cpu and cuda and compares the two written checkpoints byte for byte.
Prints one line per measurement and a Markdown table (for RESULTS-checks.md). Exits 1 on a mismatch,
2 when torch sees no GPU (``--second-device cpu`` dry-runs it without one).

    python benchmarks/gpu_check.py                   # ~6 GB in a temporary directory, a few minutes
    python benchmarks/gpu_check.py --tokens 512 --second-device cpu   # what can run without a GPU
"""

from __future__ import annotations

import argparse
import filecmp
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import bench_checks  # noqa: E402  (the one builder of the K2-sized world)
from triage_tui.core.diagnose.checks.replay import run_replay  # noqa: E402
from triage_tui.core.fix.remap.execute import remap_checkpoint  # noqa: E402
from triage_tui.core.formats.checkpoint import read_checkpoint  # noqa: E402
from triage_tui.core.formats.hidden_states import read_dumps  # noqa: E402
from triage_tui.core.formats.mapping import read_mapping  # noqa: E402
from triage_tui.core.formats.target import read_target  # noqa: E402

TOKENS_PER_DUMP = 344  # a quarter of each dump is prompt (loss_mask 0): 257 scored positions each


def timed(device: str, work):
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    result = work()
    if device == "cuda":  # time the work, not the launch
        torch.cuda.synchronize()
    return result, time.perf_counter() - t0


def compare_replays(a: dict, b: dict, second: str) -> list[str]:
    problems = []
    if (a["tokens"], a["samples"]) != (b["tokens"], b["samples"]):
        problems.append("tokens/samples differ")
    tolerance = max(1, a["tokens"] // 1000) / max(1, a["tokens"])
    accuracies = [
        ("accuracy_checkpoint_mapping", a["accuracy_checkpoint_mapping"], b["accuracy_checkpoint_mapping"]),
        ("accuracy_run_mapping", a["accuracy_run_mapping"], b["accuracy_run_mapping"]),
    ]
    accuracies += [
        (f"chunk order {o}", a["accuracy_by_chunk_order"][o], b["accuracy_by_chunk_order"].get(o, -1.0))
        for o in a["accuracy_by_chunk_order"]
    ]
    for name, x, y in accuracies:
        if abs(x - y) > tolerance + 1e-12:
            problems.append(f"{name}: cpu {x} {second} {y}")
    for name in ("loss_checkpoint_mapping", "loss_run_mapping"):
        x, y = a[name], b[name]
        if x is None or y is None or math.isnan(x) or math.isnan(y):
            same = (x is None and y is None) or (x is not None and y is not None and math.isnan(x) and math.isnan(y))
        else:
            same = abs(x - y) <= 1e-4 * max(1.0, abs(x))
        if not same:
            problems.append(f"{name}: cpu {x} {second} {y}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4096, help="scored positions replayed")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="build the world here, or reuse it (bench_checks.py --keep leaves one in benchmarks/.work/checks)",
    )
    parser.add_argument(
        "--second-device",
        default="cuda",
        help="device compared with cpu (cpu only to dry-run this script without a GPU)",
    )
    args = parser.parse_args()
    second = args.second_device
    if second == "cuda" and not torch.cuda.is_available():
        print("no CUDA device visible to torch; nothing to compare")
        return 2
    torch.set_num_threads(torch.get_num_threads())
    name = torch.cuda.get_device_name(0) if second == "cuda" else "cpu"
    print(f"{name}; torch {torch.__version__}; {torch.get_num_threads()} CPU threads", flush=True)
    problems: list[str] = []
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        dumps_count = -(-args.tokens // (TOKENS_PER_DUMP - TOKENS_PER_DUMP // 4 - 1))
        t0 = time.perf_counter()
        bench_checks.build(work, dumps_count, TOKENS_PER_DUMP)
        print(f"built the K2-sized world in {time.perf_counter() - t0:.0f} s ({dumps_count} dumps)", flush=True)
        checkpoint = read_checkpoint(work / "kimi-k2-eagle3")
        run_mapping = read_mapping(work / "run_vocab_mapping.pt")
        dumps = read_dumps(work / "hidden_states", max_files=dumps_count)
        target = read_target(work / "target")

        replays = []
        for device in ("cpu", second):
            result, seconds = timed(
                device,
                lambda d=device: run_replay(
                    checkpoint,
                    dumps,
                    target,
                    checkpoint.mapping,
                    run_mapping,
                    device=d,
                    max_tokens=args.tokens,
                    all_chunk_orders=True,
                ),
            )
            replays.append((result, seconds))
            print(f"replay {device:5s} {seconds:7.2f} s  {json.dumps(result.to_json(), sort_keys=True)}", flush=True)
        (cpu, cpu_s), (other, other_s) = replays
        if cpu.status != other.status:
            problems.append(f"replay status: cpu {cpu.status} {second} {other.status}")
        problems += compare_replays(cpu.to_json(), other.to_json(), second)
        rows.append((f"replay, {cpu.to_json()['tokens']} tokens, 6 aux chunk orders", cpu_s, other_s))

        remaps: list[tuple[Path, float]] = []
        for turn, device in enumerate(("cpu", second)):
            out = Path(tmp) / f"remapped-{turn}-{device}"
            report, seconds = timed(
                device,
                lambda d=device, o=out: remap_checkpoint(
                    work / "kimi-k2-eagle3", work / "run_vocab_mapping.pt", out=o, device=d
                ),
            )
            remaps.append((out, seconds))
            summary = json.dumps(report.to_json(), sort_keys=True, default=str)[:400]
            print(f"remap  {device:5s} {seconds:7.2f} s  {summary}", flush=True)
        (cpu_out, cpu_remap_s), (other_out, other_remap_s) = remaps
        written = sorted(p.name for p in cpu_out.iterdir())
        if written != sorted(p.name for p in other_out.iterdir()):
            problems.append("remap: the two outputs hold different files")
        for file in written:
            if file.endswith(".json") and file != "config.json":
                continue  # triage's provenance notes name the device and times
            if not filecmp.cmp(cpu_out / file, other_out / file, shallow=False):
                problems.append(f"remap: {file} differs between cpu and {second}")
        rows.append(("remap (lm_head gather + write + verify)", cpu_remap_s, other_remap_s))

    print(f"\n| {name} | cpu ({torch.get_num_threads()} threads) s | {second} s | speed-up |")
    print("|---|---|---|---|")
    for what, a, b in rows:
        print(f"| {what} | {a:.2f} | {b:.2f} | {a / b:.1f}× |")
    if problems:
        print("\nMISMATCH: " + "; ".join(problems))
        return 1
    print(
        f"\nOK: cpu and {second} agree (replay accuracies within one token in a thousand, losses 1e-4 relative; "
        f"remapped checkpoints byte-identical)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
