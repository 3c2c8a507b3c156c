"""`triage scan [PATH ...] [--json] [--vocab-size N] [--jobs N] [--poll]`: one pass over the runs.

Exit status (docs/contracts.md, the fault boundary): 2 for a bad command line or a PATH that does
not exist, cannot be listed or holds no run (one line on stderr says what was looked for: a
mistyped directory must not pass a CI gate); otherwise 1 when some run is critical or has an
error, else 0.
A run's own bad file is an error of that run: it is listed with it, and the JSON is always printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

from triage_tui.core.read.runs.discover import LOOKED_FOR, skipped_links_note
from triage_tui.core.read.runs.manifest import expand_user
from triage_tui.core.read.runs.remote import Mirrors, shown_path, shown_text
from triage_tui.core.read.runs.tracker_runs import trackio_elsewhere_note
from triage_tui.core.read.runs.walk import walk_limits_note
from triage_tui.core.text import STATUS_GLYPHS, format_accuracy, printable
from triage_tui.core.watch.fanout import default_workers
from triage_tui.core.watch.run_status import RunStatus
from triage_tui.core.watch.signals.flags import fmt
from triage_tui.core.watch.signals.kinds import RunHealth, Severity
from triage_tui.core.watch.watcher import Watcher

# Where stdout cannot encode STATUS_GLYPHS.
ASCII_GLYPHS = {"ok": "ok", "warning": "!", "critical": "X", "warming": "~", "error": "E"}
# Once the runs are printed nothing is left to do: cli.main exits without the interpreter's teardown.
EXIT_WITHOUT_TEARDOWN = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="run directories or parents of runs, or a bucket prefix: s3://bucket/runs, gs://... (default .)",
    )
    parser.add_argument("--json", action="store_true", help='print {"runs": [...]} as in docs/contracts.md')
    parser.add_argument(
        "--vocab-size",
        type=_vocab_size,
        metavar="N",
        help="draft vocab size: the chance line is ln N (overrides triage.toml and config.json)",
    )
    parser.add_argument(
        "--bucket-cost",
        action="store_true",
        help="estimate a bucket's cost a day at the provider's list prices even on a custom endpoint "
        "(AWS_ENDPOINT_URL, STORAGE_EMULATOR_HOST), where it is off by default",
    )
    parser.add_argument(
        "--jobs",
        type=_jobs,
        default=0,
        metavar="N",
        help="read local runs in N processes (default: one per CPU this process may use, at most 16; 1: in this one)",
    )
    parser.add_argument(
        "--poll",
        action="store_true",
        help="polling only, no inotify (a single pass never uses it; accepted for symmetry with the TUI)",
    )


def _vocab_size(text: str) -> int:
    value = int(text)
    if value < 2:
        raise argparse.ArgumentTypeError("must be >= 2")
    return value


def _jobs(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def run(args: argparse.Namespace) -> int:
    mirrors = Mirrors(price_custom_endpoints=args.bucket_cost)
    paths = [mirrors.local(text) for text in args.paths or ["."]]
    watcher = Watcher(
        paths,
        vocab_size=args.vocab_size,
        use_watchdog=not args.poll,
        strict=True,
        mirrors=mirrors if mirrors.mirrors else None,
        tier_idle_reads=False,  # one poll: every run read, nothing scheduled
        processes=args.jobs or default_workers(),
    )
    statuses = watcher.poll_once()
    for error in watcher.unplaced_errors:  # an object of a bucket under no run: said, not lost
        print(f"triage scan: {printable(error.line())}", file=sys.stderr)
    for note in (skipped_links_note(watcher.skipped_links), walk_limits_note(watcher.walk_limits)):
        if note is not None:
            print(f"triage scan: {note}", file=sys.stderr)
    empty = _paths_without_runs(watcher.paths, statuses)
    if args.json:
        document: dict = {"runs": [status.to_json() for status in statuses]}
        if watcher.skipped_links:
            # docs/contracts.md: symlinks not followed, exact (the stderr line above escapes them).
            document["skipped_links"] = [
                {"link": link, "target": target} for link, target in sorted(watcher.skipped_links.items())
            ]
        if watcher.walk_limits:
            # docs/contracts.md: where the walk stopped at its bounds, exact paths.
            limits = sorted(watcher.walk_limits.items())
            document["walk_limits"] = [{"path": path, "reason": why} for path, why in limits]
        if mirrors.mirrors:
            document = shown_text(document)  # type: ignore[assignment]  # a dict stays a dict
            # docs/contracts.md: what each bucket prefix cost (requests, bytes, a day's estimate).
            document["buckets"] = [found.to_json() for found in mirrors.costs()]
        json.dump(document, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    elif statuses:
        glyphs = STATUS_GLYPHS if _can_print(STATUS_GLYPHS) else ASCII_GLYPHS
        width = max(len(printable(status.info.name)) for status in statuses)
        for status in statuses:
            line = summary_line(status, glyphs, width)
            print(shown_text(line) if mirrors.mirrors else line)
    for path in empty:
        print(f"triage scan: {printable(shown_path(path))}: no run here or below: {LOOKED_FOR}", file=sys.stderr)
    if empty:
        note = trackio_elsewhere_note([Path(expand_user(path)) for path in empty])
        if note is not None:
            print(f"triage scan: {printable(note)}", file=sys.stderr)
        return 2
    failed = watcher.unplaced_errors or any(status.status == RunHealth.CRITICAL or status.errors for status in statuses)
    return 1 if failed else 0


def _paths_without_runs(paths: list[Path], statuses: list[RunStatus]) -> list[Path]:
    """The PATHs no run was found in or above (``triage scan out/runs`` finds the run ``out``)."""
    runs = [Path(os.path.abspath(status.info.path)) for status in statuses]
    empty = []
    for path in paths:
        where = Path(os.path.abspath(expand_user(path)))
        if not any(_within(run, where) or _within(where, run) for run in runs):
            empty.append(path)
    return empty


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def summary_line(status: RunStatus, glyphs: dict[str, str], width: int = 0) -> str:
    """One line: glyph, name, step, loss against ln V, flag kinds; names and tags shown as `cat -v` would."""
    parts = [f"{glyphs[status.shown_status]} {printable(status.info.name).ljust(width)}"]
    parts.append(f"step {status.last_step}" if status.last_step is not None else "no scalars yet")
    loss = status.metrics.loss
    chance = (
        status.chance.label() if status.chance is not None else f"ln {status.vocab_size} = {status.chance_loss:.2f}"
    )
    if loss is not None and loss.last is not None:
        parts.append(f"{printable(loss.tag)} {fmt(loss.last)} vs {chance}")
    elif loss is not None:
        parts.append(f"{printable(loss.tag)} (no finite value) vs {chance}")
    accuracy = status.metrics.accuracy
    if accuracy is not None and accuracy.last is not None:
        parts.append(f"{printable(accuracy.tag)} {format_accuracy(accuracy.last)}")
    if status.errors:
        first = status.errors[0]
        more = f" (+{len(status.errors) - 1} more)" if len(status.errors) > 1 else ""
        parts.append(f"error: {printable(first.line())}{more}")
    if status.flags:
        # Info flags (a plateau, a run that ended long ago) in parentheses: worth knowing, no alarm.
        # A kind once however many flags share it (one unreadable_file a failing source); the count
        # beside it where there are several (their lines are in check and scan --json).
        counts = Counter(str(flag.kind) for flag in status.flags)
        shown = dict.fromkeys(
            f"({flag.kind})" if flag.severity == Severity.INFO else flag.kind for flag in status.flags
        )
        parts.append(
            ", ".join(f"{kind} x{counts[kind.strip('()')]}" if counts[kind.strip("()")] > 1 else kind for kind in shown)
        )
    return "  ".join(parts)


def _can_print(glyphs: dict[str, str]) -> bool:
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        "".join(glyphs.values()).encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True
