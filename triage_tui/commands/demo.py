"""`triage demo [--no-tui] [--workdir DIR] [--keep]`: a live fine-tune with the vocab-mapping bug, watched and fixed."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-tui",
        action="store_true",
        help="run the scenario headless (watch, flag, check, remap, the loss falls) and print what happened",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where to lay out the demo (default: a new temporary directory, removed afterwards)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--samples",
        type=Path,
        default=None,
        help="a sample_runs/ to copy the target and drafter-a from (default: the checkout's)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="--no-tui: give up after this many seconds (a bound on a hang: each turn of the story is due by a "
        "trainer step, so a slow machine only takes longer)",
    )
    parser.add_argument(
        "--step-delay",
        type=float,
        default=None,
        help="seconds the trainer sleeps between steps (default: 0.1 with the TUI, 0 without)",
    )


def run(args: argparse.Namespace) -> int:
    status = _run(args)
    if not args.no_tui:
        from triage_tui.samples.demo import exit_now

        exit_now(status)  # `q` hands the terminal back now, not after torch's teardown
    return status


def _run(args: argparse.Namespace) -> int:
    from triage_tui.core.errors import BadInput
    from triage_tui.samples.demo import TrainerProcess, run_headless, run_with_tui
    from triage_tui.samples.demo_layout import REPO_SAMPLES, prepare_demo

    made_temp = args.workdir is None
    if not made_temp and args.workdir.exists() and (not args.workdir.is_dir() or any(args.workdir.iterdir())):
        raise BadInput(args.workdir, "exists and is not an empty directory; the demo lays out its own files there")
    root = Path(tempfile.mkdtemp(prefix="triage-demo-")) if made_temp else args.workdir
    say = lambda message: print(message, file=sys.stderr if not args.no_tui else sys.stdout, flush=True)  # noqa: E731
    try:
        say(
            f"triage demo in {root}: drafter-a (trained with domain A's vocab mapping) fine-tuned on domain B "
            "with a mapping regenerated from domain B"
        )
        layout = prepare_demo(root, samples=args.samples or REPO_SAMPLES, progress=say)
        delay = args.step_delay if args.step_delay is not None else (0.0 if args.no_tui else 0.1)
        trainer = TrainerProcess(layout, step_delay=delay, paced=args.no_tui)  # the headless story paces it
        try:
            if args.no_tui:
                return run_headless(layout, trainer, timeout=args.timeout, say=say)
            return run_with_tui(layout, trainer)
        finally:
            trainer.stop()
    finally:
        if made_temp and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        elif made_temp:
            say(f"kept {root}")
