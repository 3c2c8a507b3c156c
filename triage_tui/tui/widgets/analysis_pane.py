"""The analysis pane: the hint to run the checks, their bars while they run, then the ranked hypotheses."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from triage_tui.core.diagnose.hypotheses.scoring import LIKELY
from triage_tui.tui.view_state import AnalysisView, CheckProgressView
from triage_tui.tui.widgets.checks_progress import STATUS_STYLE, ChecksProgress
from triage_tui.tui.widgets.hypotheses_list import HypothesesList


class AnalysisPane(Vertical):
    """Shows an AnalysisView; the CSS classes it sets (-running, -done, -outcome, -stale, -quiet) pick
    what shows (app.tcss)."""

    def compose(self) -> ComposeResult:
        yield Static("", id="analysis-hint")
        yield ChecksProgress(id="checks")
        yield HypothesesList(id="hypotheses")

    def on_mount(self) -> None:
        self.border_title = "checks"

    def progress(self, progress: CheckProgressView) -> None:
        checks = self.query_one(ChecksProgress)
        if progress.start:
            checks.start()
        else:
            checks.progress(progress.check, progress.fraction, progress.text)

    def show(self, view: AnalysisView) -> bool:
        """Show the checks/hypotheses of the selected run (or the hint to run them); True when there is
        something beyond the hint (checks running or done, or how they ended)."""
        hint = self.query_one("#analysis-hint", Static)
        checks = self.query_one(ChecksProgress)
        hypotheses = self.query_one(HypothesesList)
        running = view.running
        diagnosis = None if running else view.diagnosis
        outcome = None if running else view.outcome
        state = "-running" if running else "-done" if diagnosis else "-outcome" if outcome is not None else ""
        for name in ("-running", "-done", "-outcome"):
            self.set_class(name == state, name)
        if not state:
            hint.update(
                Text("no run selected", style="dim")
                if view.path is None
                else Text.assemble(("press ", "dim"), ("c", "bold"), (" to run the checks on this run", "dim"))
            )
            self.border_title = "checks"
            hypotheses.show(())
        elif running:
            self.border_title = "checks · running (x cancels)"
        elif diagnosis is None:
            self.border_title = "checks"
            checks.finish(None, outcome or "")
            hypotheses.show(())
        else:
            counts: Counter[str] = Counter(result.status for result in diagnosis.checks.values())
            tally = " ".join(f"{STATUS_STYLE[status][0]}{counts[status]}" for status in STATUS_STYLE if counts[status])
            self.border_title = f"hypotheses · checks {tally} · enter opens"
            remapped = view.remapped
            stale = remapped is not None and diagnosis.inputs.checkpoint != Path(remapped.output)
            # Results older than the remap must look old: they describe the drafter before the fix.
            self.set_class(stale, "-stale")
            if stale:
                self.border_title = "hypotheses · BEFORE the remap · c checks the remapped checkpoint"
            elif remapped is not None:
                self.border_title = f"hypotheses · of the remapped checkpoint · checks {tally}"
            # Nothing stands out: the small layout shows why (skipped checks say what they need).
            self.set_class(max((h.score for h in diagnosis.hypotheses), default=0.0) < LIKELY, "-quiet")
            checks.finish({name: (result.status, result.summary) for name, result in diagnosis.checks.items()})
            if hypotheses.hypotheses != list(diagnosis.hypotheses):
                hypotheses.show(diagnosis.hypotheses)
        return bool(state)
