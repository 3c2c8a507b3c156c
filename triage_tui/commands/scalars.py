"""`triage scalars`: placeholder until its issue lands (see the issue tracker)."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*")


def run(args: argparse.Namespace) -> int:
    print("triage scalars: not built yet", file=sys.stderr)
    return 2
