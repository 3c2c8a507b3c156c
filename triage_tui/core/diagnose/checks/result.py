"""What every check returns: a status, a one-line summary, and a typed details object.

The details are a frozen dataclass per check (``VocabDetails`` in ``checks/vocab.py``, ...):
hypotheses and the TUI read its typed fields, never string keys. It renders itself twice, at
the edges: ``to_json()`` is the check's part of ``check --json`` (docs/contracts.md lists the keys
other tools rely on) and ``drilldown()`` the plain lines the TUI's Details tab shows (never markup;
the TUI escapes them like every string from a file).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

CheckStatus = Literal["pass", "fail", "skipped", "error"]


class CheckDetails(Protocol):
    """What a check measured, typed; see the module docstring."""

    def to_json(self) -> dict[str, Any]: ...

    def drilldown(self) -> list[str]: ...


D = TypeVar("D")


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check. ``evidence`` holds one-line sentences with the numbers, for
    hypotheses and the TUI; ``details`` is None when the check measured nothing (skipped, error)."""

    name: str
    status: CheckStatus
    summary: str
    details: CheckDetails | None = None
    evidence: tuple[str, ...] = ()

    @property
    def ran(self) -> bool:
        """The check looked at its inputs and reached a verdict (hypotheses weigh only these)."""
        return self.status in ("pass", "fail")

    def details_as(self, kind: type[D]) -> D | None:
        """The details when the check ran and they are of ``kind``, else None."""
        return self.details if self.ran and isinstance(self.details, kind) else None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "summary": self.summary, **(self.details.to_json() if self.details else {})}

    @classmethod
    def skipped(cls, name: str, why: str) -> CheckResult:
        return cls(name, "skipped", why)

    @classmethod
    def error(cls, name: str, why: str) -> CheckResult:
        return cls(name, "error", why)


def ran_details(checks: Mapping[str, CheckResult], name: str, kind: type[D]) -> D | None:
    """``checks[name]``'s details of ``kind`` when that check ran, else None."""
    result = checks.get(name)
    return result.details_as(kind) if result is not None else None


# --------------------------------------------------------------------------- drill-down lines


def show(value: object) -> str:
    """One value as the drill-down shows it: ``–`` for none, floats to 4 significant digits, flat lists joined."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)) and all(not isinstance(v, (dict, list, tuple)) for v in value):
        return ", ".join(show(v) for v in value)
    return str(value)


def table_lines(header: Sequence[str] | None, rows: Sequence[Sequence[object]]) -> list[str]:
    """Rows as aligned plain-text columns (one space apart), with an optional header line."""
    cells = [[show(c) if not isinstance(c, str) else c for c in row] for row in rows]
    if header is not None:
        cells.insert(0, list(header))
    if not cells:
        return []
    widths = [max(len(row[i]) for row in cells if i < len(row)) for i in range(max(len(r) for r in cells))]
    return [" ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in cells]


def key_value_lines(pairs: Sequence[tuple[str, object]]) -> list[str]:
    """``name  value`` lines, names aligned; a float named ``*_fraction`` shows as a percentage."""
    rows = []
    for key, value in pairs:
        shown = f"{value:.2%}" if key.endswith("_fraction") and isinstance(value, float) else show(value)
        rows.append((key.replace("_", " "), shown))
    return table_lines(None, rows)
