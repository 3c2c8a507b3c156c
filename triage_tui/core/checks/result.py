"""What every check returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

CheckStatus = Literal["pass", "fail", "skipped", "error"]


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check.

    ``details`` holds the JSON-ready numbers the check measured (docs/contracts.md lists the keys
    other tools rely on, e.g. ``positional_match`` for the vocab check); ``evidence`` holds
    one-line sentences with those numbers, for hypotheses and the TUI.
    """

    name: str
    status: CheckStatus
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    evidence: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "summary": self.summary, **self.details}

    @classmethod
    def skipped(cls, name: str, why: str) -> CheckResult:
        return cls(name, "skipped", why)

    @classmethod
    def error(cls, name: str, why: str) -> CheckResult:
        return cls(name, "error", why)
