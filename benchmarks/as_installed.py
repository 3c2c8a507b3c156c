"""What a benchmark does first: triage's bytecode written, as `pip install` writes it.

An editable install compiles nothing at install time, and under PYTHONDONTWRITEBYTECODE=1 (set
on the machine these benchmarks ran on) Python never writes what it compiles: every timed
`triage` process compiled each triage module that had no up-to-date .pyc, ~50 of them after a
few changes to the code, 0.1-0.16 s before its first poll on one core. An installed triage never pays that.
"""

from __future__ import annotations

import compileall
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "triage_tui"


def compile_triage() -> None:
    """Write an up-to-date .pyc for every triage module (compileall writes whatever the environment says)."""
    if not compileall.compile_dir(str(PACKAGE), quiet=1):
        raise SystemExit(f"{PACKAGE}: a module does not compile")
