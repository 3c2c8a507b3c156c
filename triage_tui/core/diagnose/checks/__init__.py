"""Checks: each a function from typed inputs to a `CheckResult`; none prints or asks."""

from triage_tui.core.diagnose.checks.result import CheckResult, CheckStatus

__all__ = ["CheckResult", "CheckStatus"]
