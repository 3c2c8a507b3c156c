"""`triage samples [--out DIR] [--small] [--jobs N]`: regenerate sample_runs/ from the tiny EAGLE-3 world."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("sample_runs"),
        help="directory to (re)build; its runs, _target/ and _drafters/ are replaced (default: sample_runs)",
    )
    parser.add_argument(
        "--small", action="store_true", help="the reduced version the tests build: same sizes, far fewer training steps"
    )
    parser.add_argument("--jobs", type=int, default=2, help="training processes to run at once (default: 2)")


def run(args: argparse.Namespace) -> int:
    from triage_tui.samples.generate import generate
    from triage_tui.samples.spec import SampleSpec

    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[{time.monotonic() - started:5.0f} s] {message}", file=sys.stderr, flush=True)

    spec = SampleSpec.small() if args.small else SampleSpec()
    try:
        summary = generate(args.out, spec, jobs=max(1, args.jobs), progress=progress)
    except KeyboardInterrupt:
        print(f"triage samples: interrupted; {args.out} is as it was", file=sys.stderr)
        return 130
    for name, record in summary["runs"].items():
        nan = f", NaN from step {record['non_finite_from']}" if record["non_finite_from"] else ""
        print(
            f"{name:20s} {record['steps']:4d} steps  train/ploss_0 {record['first_ploss_0']:6.2f} -> "
            f"{record['last_ploss_0']:6.2f}  train/acc_0 {record['last_acc_0']:.3f}{nan}"
        )
    print(f"wrote {args.out} in {summary['seconds']:.0f} s")
    return 0
