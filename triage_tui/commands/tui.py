"""`triage [PATH ...]`: the TUI. Textual is imported only here, so the headless commands never load it."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from triage_tui.core.errors import BadInput
from triage_tui.core.runs.discover import check_watch_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="*", default=["."], metavar="PATH", help="runs, or directories to find runs in (default: .)"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often to look for new event data (default: 1.0)",
    )
    parser.add_argument(
        "--poll",
        action="store_true",
        help="poll only; do not use filesystem notifications (for NFS and other network mounts)",
    )
    parser.add_argument(
        "--readonly", action="store_true", help="no action that writes files: the remap key does not exist"
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        metavar="N",
        help="draft vocab size for the chance line ln N, when runs do not say",
    )
    parser.add_argument("--device", default="auto", help="device for the replay check and remap (default: auto)")


def run(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in (args.paths or ["."])]
    for path in paths:
        check_watch_path(path)  # `triage README.md` is told so, as `triage scan README.md` is
    if not math.isfinite(args.interval) or args.interval <= 0:
        # nan slipped past `<= 0` and made the watcher spin a core.
        raise BadInput(None, f"--interval must be a positive number of seconds, got {args.interval}")
    if args.vocab_size is not None and args.vocab_size < 2:
        raise BadInput(None, f"--vocab-size must be at least 2, got {args.vocab_size}")

    from triage_tui.core.parallel_read import start_helpers_early

    # A sweep's first load is read by helper processes: they start up while Textual is imported.
    start_helpers_early(paths)
    from triage_tui.tui.app import TriageApp

    TriageApp(
        paths,
        readonly=args.readonly,
        poll_interval=args.interval,
        vocab_size=args.vocab_size,
        use_watchdog=not args.poll,
        device=args.device,
    ).run()
    return 0
