"""`triage [PATH ...]`: the TUI. Textual is imported only here, so the headless commands never load it."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from triage_tui.core.errors import BadInput
from triage_tui.core.read.runs.discover import check_watch_path
from triage_tui.core.read.runs.remote import Mirrors

if TYPE_CHECKING:
    from triage_tui.core.watch.watcher import Watcher
    from triage_tui.tui.app import TriageApp


# How long `triage` lets discovery run alone before it imports Textual (a 100-run sweep: ~35 ms
# alone, ~0.2 s beside the import): the first screen of a tree too big to discover by then waits
# no longer than this.
DISCOVERY_WAIT_SECS = 0.15


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        default=["."],
        metavar="PATH",
        help="runs, or directories to find runs in, or a bucket prefix: s3://bucket/runs, gs://... (default: .)",
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
    # A bucket prefix is watched as a local mirror, synced on the watcher's thread once a rescan.
    mirrors = Mirrors()
    paths = [mirrors.local(p) for p in (args.paths or ["."])]
    for path in paths:
        check_watch_path(path)  # `triage README.md` is told so, as `triage scan README.md` is
    if not math.isfinite(args.interval) or args.interval <= 0:
        # nan slipped past `<= 0` and made the watcher spin a core.
        raise BadInput(None, f"--interval must be a positive number of seconds, got {args.interval}")
    if args.vocab_size is not None and args.vocab_size < 2:
        raise BadInput(None, f"--vocab-size must be at least 2, got {args.vocab_size}")
    if not sys.stdout.isatty():
        # Textual would draw its screens into a pipe or a file, forever: say so in one line instead.
        raise BadInput(
            None, "the TUI needs a terminal and stdout is not one: for a report use `triage scan [PATH ...]` (--json)"
        )

    watcher = start_reading(
        paths,
        vocab_size=args.vocab_size,
        poll_interval=args.interval,
        use_watchdog=not args.poll,
        mirrors=mirrors if mirrors.mirrors else None,
    )
    import_app()(
        paths,
        # A remap written into a mirror would be lost with it: runs in a bucket are only read.
        readonly=args.readonly or bool(mirrors.mirrors),
        poll_interval=args.interval,
        vocab_size=args.vocab_size,
        use_watchdog=not args.poll,
        device=args.device,
        watcher=watcher,
    ).run()
    return 0


def start_reading(
    paths: list[Path],
    *,
    vocab_size: int | None = None,
    poll_interval: float = 1.0,
    use_watchdog: bool = True,
    mirrors: Mirrors | None = None,
) -> Watcher:
    """What `triage` does before it imports Textual: the first poll (discovery, then the runs) begins
    on a thread of its own, so it goes on while Textual is imported and the UI starts
    (benchmarks/bench_sweep.py times the TUI this way)."""
    from triage_tui.core.series import DISPLAY_POINTS
    from triage_tui.core.watch.watcher import Watcher

    watcher = Watcher(
        paths,
        vocab_size=vocab_size,
        poll_interval=poll_interval,
        use_watchdog=use_watchdog,
        mirrors=mirrors,
        max_points=DISPLAY_POINTS,  # a run that logs for weeks is shown in bounded memory
    )
    watcher.start_first_poll(wait_for_discovery=DISCOVERY_WAIT_SECS)
    return watcher


def import_app() -> type[TriageApp]:
    """Textual and the app, imported once the reading has begun (``start_reading``)."""
    from triage_tui.tui.app import TriageApp

    return TriageApp
