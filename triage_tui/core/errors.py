"""The one exception that crosses the core's boundary for bad input."""

from __future__ import annotations

from pathlib import Path


class BadInput(Exception):
    """A file or argument that is not what it claims to be.

    The CLI prints it as one line, ``triage: <path>: <what>``, and exits 2; a check that
    meets it reports ``status="error"`` with the same line instead of failing.
    """

    def __init__(self, path: str | Path | None, what: str) -> None:
        self.path = str(path) if path is not None else None
        self.what = what
        super().__init__(self.line())

    def line(self) -> str:
        return f"{self.path}: {self.what}" if self.path else self.what
