"""`triage remap`: write a checkpoint whose lm_head rows follow the run's vocab mapping (core/fix/remap.py)."""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import os
import signal
import sys
import tempfile
import threading
from typing import Any

from triage_tui.core.read.runs.remote import shown_text
from triage_tui.core.text import printable

# Same values as triage_tui.core.fix.remap.plan.INIT_STRATEGIES (a test keeps them equal); spelled out here
# so that building the parser does not import torch.
INIT_CHOICES = ("target", "mean", "zeros")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "checkpoint", help="the drafter checkpoint directory (or its weights file), local or in a bucket (s3://...)"
    )
    parser.add_argument("--mapping", help="the run's vocab mapping: .pt {d2t,t2d}, d2t.npy, or a checkpoint")
    parser.add_argument(
        "--out",
        help="output directory, or a bucket prefix (s3://...; never over the source) "
        "(default: beside the checkpoint, <name>-remapped-<mapping sha256 prefix>; "
        "under $XDG_DATA_HOME/triage/remapped/ when that directory is in a git work tree, read-only or a bucket)",
    )
    parser.add_argument(
        "--init-missing",
        choices=INIT_CHOICES,
        default=None,
        help="rows for tokens the checkpoint never had: the target's lm_head row "
        "(default with --target), the mean of the old rows (default), or zeros",
    )
    parser.add_argument("--target", help="target model directory (lm_head rows for --init-missing target; replay)")
    parser.add_argument("--data", help="hidden-state dumps: replay accuracy before and after (needs --target)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda[:N] (gather and replay)")
    parser.add_argument("--max-tokens", type=int, default=4096, help="tokens the replay scores (default 4096)")
    parser.add_argument("--force", action="store_true", help="replace an existing output written by triage")
    parser.add_argument(
        "--keep-checkpoint-mapping",
        action="store_true",
        help="the opposite fix: write the checkpoint's own d2t/t2d (vocab_mapping.pt, "
        "d2t.npy, t2d.npy) for the trainer to load; no weights are written",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def skip_final_collection() -> None:
    """Freeze the heap at exit instead of letting the interpreter's last collection walk it.

    After a remap the process holds torch's import-time objects, all alive; the collection
    Python runs at shutdown walks every one of them and frees nothing: ~0.3 of the ~3.9
    CPU-seconds a 1.7 GB remap took here (perf showed gc_collect_main at 7 % of the samples).
    atexit runs before that collection; in-process callers (tests) see it only at their own exit.
    """
    atexit.unregister(gc.freeze)  # once, however many times the command runs in one process
    atexit.register(gc.freeze)


# The signals that end a remap early: `kill`, `timeout`, a scheduler's preemption; Ctrl-C; the terminal closed.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Stopping:
    """While a remap runs: the first stop signal sets ``cancel``, which the remap checks between its
    windows (it stops there and removes its temporary directory); a second one raises
    KeyboardInterrupt at once, unwinding the same way. The handlers before are put back on exit."""

    def __init__(self) -> None:
        self.cancel = threading.Event()
        self.signum: int | None = None
        self.twice = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Stopping:
        if threading.current_thread() is threading.main_thread():  # signal.signal's rule
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._stop)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _stop(self, signum: int, frame: object) -> None:
        self.twice = self.signum is not None
        self.signum = signum
        self.cancel.set()
        if self.twice:
            raise KeyboardInterrupt

    def line(self) -> str:
        """What the user is told: by what, and that nothing partial is left where the output goes."""
        by = signal.Signals(self.signum).name if self.signum is not None else "an interrupt"
        if self.twice or self.signum is None:
            return (
                f"remap stopped by {by} at once: its temporary directory was removed; the output's "
                "place holds an earlier output or this one whole, never a part"
            )
        return f"remap stopped by {by} before it finished: nothing was written, and an earlier output is as it was"

    def status(self) -> int:
        return 128 + (self.signum if self.signum is not None else signal.SIGINT)


def _progress_line(fraction: float, text: str) -> None:
    sys.stderr.write(f"\r{fraction:4.0%} {printable(text)[:60]:<60}")
    sys.stderr.flush()


def _percent(x: float) -> str:
    return f"{100 * x:.1f} %"


def _say(line: str) -> None:
    """One line of the text report; paths and notes shown as `cat -v` would, a bucket's by its URL."""
    print(printable(str(shown_text(line))))


def _check_out(out: str | None) -> None:
    """``--out`` on a filesystem that holds no files (/proc, /sys) read as "needs 0.00 GB but only
    0.00 GB is free", or a traceback: said as what it is, before anything is read or written."""
    from triage_tui.core.errors import BadInput

    if out is None:
        return  # the default lies beside the checkpoint
    parent = os.path.dirname(os.path.abspath(os.path.expanduser(out)))
    try:
        blocks = os.statvfs(parent).f_blocks
    except OSError:
        return  # a missing or unreadable directory: the remap itself says which
    if blocks == 0:
        raise BadInput(parent, "is on a filesystem that stores no files (such as /proc or /sys): choose another --out")


def run(args: argparse.Namespace) -> int:
    from triage_tui.core.errors import BadInput

    _check_out(args.out)
    try:
        return _run(args)
    except OSError as err:
        # An OSError that escaped the remap with its file named (mkdir on a read-only filesystem, ...):
        # one line naming it, exit 2. The output is written into a temporary directory first, so
        # the failed step left nothing behind.
        if err.filename is None:
            raise
        raise BadInput(err.filename, err.strerror or str(err)) from None


def _run(args: argparse.Namespace) -> int:
    from triage_tui.core.fix.remap.job import Cancelled

    skip_final_collection()
    with _Stopping() as stopping:
        try:
            return _remap(args, stopping.cancel)
        except (Cancelled, KeyboardInterrupt):
            try:
                print(f"triage: {stopping.line()}", file=sys.stderr, flush=True)
            except OSError:  # the terminal it would go to is gone (SIGHUP)
                pass
            return stopping.status()


def _remap(args: argparse.Namespace, cancel: threading.Event) -> int:
    from triage_tui.core.errors import BadInput
    from triage_tui.core.fix.remap.execute import remap_checkpoint
    from triage_tui.core.fix.remap.keep import keep_checkpoint_mapping
    from triage_tui.core.objstore import scratch
    from triage_tui.core.objstore.url import is_object_url, parse_url
    from triage_tui.core.read.runs.remote import Mirrors, refuse_output_url, upload_output

    # URLs (s3://, gs://) are read from their buckets: mirrored, the checkpoint's weights whole
    # (a remap copies them); the output is written locally (beside nothing in the bucket).
    mirrors = Mirrors()
    args.checkpoint, args.mapping, args.target, args.data = (
        mirrors.local_input(value) for value in (args.checkpoint, args.mapping, args.target, args.data)
    )
    if mirrors.mirrors:
        for error in mirrors.sync():
            print(f"triage remap: {printable(error.line())}", file=sys.stderr)
        mirrors.fill_placeholders(args.checkpoint)
    out_url = args.out if args.out is not None and is_object_url(args.out) else None
    if out_url is not None:
        # Written here first (verified as any remap), then put below the URL; never over a source.
        sources = [args.checkpoint, args.mapping, args.target, args.data]
        refuse_output_url(out_url, sources=sources, force=args.force)
        staging = tempfile.mkdtemp(prefix="out-", dir=scratch.scratch_dir())
        args.out = os.path.join(staging, parse_url(out_url).key.rstrip("/").rsplit("/", 1)[-1] or "out")
    if args.keep_checkpoint_mapping:
        kept = keep_checkpoint_mapping(args.checkpoint, args.out, force=args.force)
        kept_output = upload_output(kept.output, out_url) if out_url is not None else str(kept.output)
        if args.json:
            print(json.dumps(shown_text({**kept.to_json(), "output": kept_output}), indent=2))
        else:
            _say(
                f"wrote the checkpoint's own mapping ({kept.draft_vocab_size} draft of "
                f"{kept.target_vocab_size} target tokens) to {kept_output}; no weights were touched"
            )
            if kept.output_outside_because:
                _say(f"  not beside the checkpoint: {kept.output_outside_because}")
            for file in kept.files:
                _say(f"  {file}")
            _say(
                "  SpecForge: vocab_mapping_path = vocab_mapping.pt;  speculators: --d2t-path d2t.npy "
                "--t2d-path t2d.npy"
            )
            for note in kept.notes:
                _say(f"  note: {note}")
        return 0
    if not args.mapping:
        raise BadInput(None, "--mapping is required (the run's vocab mapping), unless --keep-checkpoint-mapping")
    show_progress = not args.json and sys.stderr.isatty()
    try:
        report = remap_checkpoint(
            args.checkpoint,
            args.mapping,
            out=args.out,
            init=args.init_missing,
            target=args.target,
            data=args.data,
            force=args.force,
            device=args.device,
            max_tokens=args.max_tokens,
            progress=_progress_line if show_progress else None,
            cancel=cancel,
        )
    finally:
        if show_progress:
            sys.stderr.write("\r" + " " * 66 + "\r")
    output = upload_output(report.output, out_url) if out_url is not None else str(report.output)
    if args.json:
        print(json.dumps(shown_text({**report.to_json(), "output": output}), indent=2))
        return 0
    _say(f"wrote {output} ({'verified' if report.verified else 'NOT verified'})")
    if report.output_outside_because:
        _say(f"  not beside the checkpoint: {report.output_outside_because}")
    _say(
        f"  {report.rows_copied} lm_head rows copied bit for bit to the run's order, "
        f"{report.rows_initialized} initialised ({report.init}), {report.draft_vocab_size} in all"
    )
    _say(f"  d2t/t2d from {report.mapping} (sha256 {report.mapping_sha256[:12]})")
    if report.accuracy_before is not None and report.accuracy_after is not None:
        _say(
            f"  replay accuracy under the run's mapping: {_percent(report.accuracy_before)} -> "
            f"{_percent(report.accuracy_after)} ({report.accuracy_device})"
        )
    for note in report.notes:
        _say(f"  note: {note}")
    return 0
