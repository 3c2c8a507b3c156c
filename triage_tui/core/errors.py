"""The one exception that crosses the core's boundary for bad input, and the error value a source leaves on its run."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class SourceError:
    """What one source of one run could not read, as a value on that run (never an exception that
    crosses runs): the source's kind ("tensorboard", "wandb", "serving", "manifest", "config", ...),
    the file or URL, and why in one line. Every text is untrusted: shown through ``text.printable``."""

    source: str
    path: str
    message: str

    def to_json(self) -> dict[str, str]:
        """The ``errors`` entry of ``scan --json`` (docs/contracts.md, the fault boundary)."""
        return {"source": self.source, "path": self.path, "message": self.message}

    def line(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    @classmethod
    def of(cls, source: str, err: BadInput) -> SourceError:
        """A reader's BadInput, said of the source it came from."""
        return cls(source, err.path or "", err.what)
