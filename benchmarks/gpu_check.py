"""Replay on CUDA and on CPU must give the same numbers.

GPU when there is one, CPU otherwise, same results.

Builds the synthetic world of tests/test_replay.py (163 840 target vocab, 32 000 draft vocab,
a drafter trained on CPU with SpecForge's loss), writes it with the real writers, runs
``run_replay`` on cpu and on cuda over the same dumps and compares every number. About two
minutes on a machine with a GPU; exits 1 on a mismatch, 2 when torch sees no GPU.

    python benchmarks/gpu_check.py [--tokens 2048]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_replay import (  # noqa: E402  (the one builder of the synthetic world)
    World,
    train_drafter,
    write_specforge_checkpoint,
    write_specforge_dumps,
    write_target,
)
from triage_tui.core.checks.replay import run_replay  # noqa: E402
from triage_tui.core.formats.checkpoint import read_checkpoint  # noqa: E402
from triage_tui.core.formats.hidden_states import read_dumps  # noqa: E402
from triage_tui.core.formats.target import read_target  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=2048)
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
    world = World()
    t0 = time.perf_counter()
    drafter, _ = train_drafter(world)
    print(f"trained drafter on cpu in {time.perf_counter() - t0:.1f}s")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        checkpoint = read_checkpoint(write_specforge_checkpoint(drafter, root / "drafter"))
        samples = args.tokens // 80 + 1
        dumps = read_dumps(write_specforge_dumps(world, root / "hs", samples=samples), max_files=samples)
        target = read_target(write_target(world, root / "target"))
        results = {}
        for device in ("cpu", second):
            t0 = time.perf_counter()
            result = run_replay(
                checkpoint, dumps, target, checkpoint.mapping, world.run_mapping, device=device, max_tokens=args.tokens
            )
            if device == "cuda":  # time the work, not the launch
                torch.cuda.synchronize()
            results[device] = (result, time.perf_counter() - t0)
    (cpu, cpu_s), (gpu, gpu_s) = results["cpu"], results[second]
    name = torch.cuda.get_device_name(0) if second == "cuda" else "cpu"
    print(f"{name}; torch {torch.__version__}")
    print(f"cpu  {cpu_s:6.2f}s  {json.dumps(cpu.to_json(), sort_keys=True)}")
    print(f"{second} {gpu_s:6.2f}s  {json.dumps(gpu.to_json(), sort_keys=True)}")
    a, b = cpu.details, gpu.details
    problems = []
    if (cpu.status, a["tokens"], a["samples"]) != (gpu.status, b["tokens"], b["samples"]):
        problems.append("status/tokens/samples differ")
    # float32 on both; kernels sum in different orders, so a near-tied argmax may flip:
    # allow one token in a thousand, no more.
    tolerance = max(1, a["tokens"] // 1000) / a["tokens"]
    accuracies = [
        ("accuracy_checkpoint_mapping", a["accuracy_checkpoint_mapping"], b["accuracy_checkpoint_mapping"]),
        ("accuracy_run_mapping", a["accuracy_run_mapping"], b["accuracy_run_mapping"]),
    ]
    accuracies += [
        (f"chunk order {o}", a["accuracy_by_chunk_order"][o], b["accuracy_by_chunk_order"][o])
        for o in a["accuracy_by_chunk_order"]
    ]
    for name, x, y in accuracies:
        if abs(x - y) > tolerance + 1e-12:
            problems.append(f"{name}: cpu {x} {second} {y}")
    for name in ("loss_checkpoint_mapping", "loss_run_mapping"):
        x, y = a[name], b[name]
        if abs(x - y) > 1e-4 * max(1.0, abs(x)):
            problems.append(f"{name}: cpu {x} {second} {y}")
    if problems:
        print("MISMATCH: " + "; ".join(problems))
        return 1
    print(
        f"OK: cpu and {second} agree on {a['tokens']} tokens (accuracy tolerance {tolerance:.4f}, loss 1e-4 relative); "
        f"replay {cpu_s / gpu_s:.1f}x faster on {second}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
