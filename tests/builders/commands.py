"""``triage`` commands run in the test's own process: the ``triage`` fixture.

``triage("check", run, "--json")`` calls ``cli.main`` as ``python -m triage_tui`` does and returns
what a ``subprocess.run(..., capture_output=True, text=True)`` would: the exit status and what was
printed to stdout and stderr. The xdist worker has imported torch once; a child process for each
command imported it again (about a second of CPU each, over a hundred commands a run). An exception
that escapes ``cli.main`` fails the test with its traceback, where a child would have printed it.

Tests about the process itself (a signal, an exit under another user, an interpreter's encoding,
an import's cost) still start one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from triage_tui import cli


@dataclass(frozen=True)
class Ran:
    """What one command did: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


Triage = Callable[..., Ran]


@pytest.fixture
def triage(capsys, monkeypatch) -> Triage:
    """``triage(*args, cwd=None)``: the command run by ``cli.main`` here, in ``cwd`` if given."""

    def run(*args: str | Path, cwd: Path | None = None) -> Ran:
        capsys.readouterr()  # what the test printed before is not the command's
        with monkeypatch.context() as scoped:
            if cwd is not None:
                scoped.chdir(cwd)
            try:
                code = cli.main([str(arg) for arg in args])
            except SystemExit as exit_:  # argparse's usage errors (2), --help and --version (0)
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run
