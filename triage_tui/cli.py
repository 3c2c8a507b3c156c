"""Entry point `triage`: the TUI by default, plus the headless subcommands of docs/contracts.md.

Each subcommand lives in ``triage_tui/commands/<name>.py`` and exposes
``add_arguments(parser)`` and ``run(args) -> int``; this module only dispatches and turns
``BadInput`` into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from typing import NoReturn

from triage_tui import __version__
from triage_tui.core.errors import BadInput
from triage_tui.core.text import printable

SUBCOMMANDS = {
    "scan": "one pass: find runs, read scalars, raise flags",
    "scalars": "every scalar point of a run or event file, exact",
    "check": "all checks on a run and the ranked hypotheses",
    "remap": "write a checkpoint whose lm_head rows follow the run's vocab mapping",
    "demo": "a live fine-tune with the vocab-mapping bug, watched and fixed",
    "samples": "regenerate sample_runs/ from the tiny EAGLE-3 world",
}


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line on stderr, exit 2, as for every other bad input (argparse's own
    prints the whole usage first: five to eight lines before the one that says what was wrong)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {printable(message)} (see {self.prog} --help)\n")


def _command_module(name: str):
    return importlib.import_module(f"triage_tui.commands.{name}")


TUI_USAGE = "triage [PATH ...] [--readonly] [--poll] [--interval SECONDS] [--vocab-size N] [--device DEVICE]"


def tui_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="triage",
        usage=TUI_USAGE,
        description="The TUI (what `triage` runs without a COMMAND): watch PATHs for training runs, flag a "
        "loss at chance, and on a key check, drill down and remap.",
    )
    _command_module("tui").add_arguments(parser)
    return parser


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``only``, the other subcommands' arguments (and imports) are left out."""
    # The TUI is the default command: its usage and options come first in `triage --help`.
    tui_help = tui_parser().format_help().split("\n", 1)[1].strip() if only is None else ""
    parser = _Parser(
        prog="triage",
        usage=f"{TUI_USAGE}\n       triage COMMAND [options]   (triage COMMAND --help)",
        description="Watch training runs; diagnose EAGLE-3 drafters whose loss sits at chance.\n\n"
        + tui_help
        + "\n\nkeys in the TUI:\n  ↑/↓ select a run · c check · enter open a hypothesis · m remap · / filter · "
        "l log-y\n  ? help · ctrl+p every action · q or ctrl+c quit\n\ncommands:",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"triage {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, prog=f"triage {name}", help=help_text, description=help_text)
        if only is None or name == only:
            # A subcommand's module imports what it needs (torch for check, numpy for scalars):
            # `triage scalars` need not pay for check's imports.
            _command_module(name).add_arguments(sub_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    whole_process = argv is None  # `triage ...` itself, not a caller in Python (a test)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help", "--version"):
        # `triage [PATH ...]`: the TUI. Kept apart so `triage scan` never imports textual.
        module = _command_module("tui")
        args = tui_parser().parse_args(argv)
    else:
        args = build_parser(only=argv[0] if argv[0] in SUBCOMMANDS else None).parse_args(argv)
        module = _command_module(args.command)
    try:
        code = int(module.run(args))
        if whole_process and getattr(module, "EXIT_WITHOUT_TEARDOWN", False):
            # A command that has written its answer: tearing down the interpreter (every module,
            # a million points' arrays) would add ~30 ms to a 0.7 s export for nobody.
            sys.stdout.flush()
            sys.stderr.flush()
            scratch = sys.modules.get("triage_tui.core.objstore.scratch")
            if scratch is not None:  # atexit will not run: what a bucket's run left in the temp dir goes now
                scratch.remove()
            os._exit(code)
        return code
    except BadInput as err:
        print(f"triage: {printable(err.line())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `triage scalars ... | head`: the reader has what it wanted. Quietly, as `cat` would: stdout
        # points at /dev/null so the interpreter's final flush cannot raise again on the way out.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
