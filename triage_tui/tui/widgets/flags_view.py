"""The selected run's flags, as the core raised them."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from triage_tui.core.text import STATUS_GLYPHS, printable
from triage_tui.core.watch.signals.kinds import FlagKind
from triage_tui.tui.view_data import SEVERITY_STYLE, STATE_STYLE


class FlagsView(Static):
    """One line per flag: severity glyph, kind, and the core's message; under them, the run's state
    and its evidence where no flag says it (a live, ended or unknown run), and where the run's
    acceptance estimate peaked, with the checkpoint saved nearest it; last, what was read of the run's
    files where its reader says (a console's rank read, lines of other ranks skipped, unknown lines)."""

    HELP = "Flags the core raised for the selected run (same as `triage scan`), and the run's state."

    def show(
        self,
        flags: Sequence,
        *,
        scanning: bool = False,
        state: tuple[str, str] | None = None,
        best: str | None = None,
        notes: Sequence[str] = (),
    ) -> None:
        text = Text()
        if not flags:
            text.append("scanning…" if scanning else "no flags", style="dim")
        for index, flag in enumerate(flags):
            shown = "warming" if flag.kind == FlagKind.WARMING_UP else flag.severity
            glyph, style = STATUS_GLYPHS.get(shown, "?"), SEVERITY_STYLE.get(shown, "")
            if index:
                text.append("\n")
            text.append(f"{glyph} ", style=style)
            text.append(printable(flag.kind), style=style)
            text.append(f"  {printable(flag.message)}")
        if state is not None:
            name, reason = state
            text.append("\n  ")
            text.append(printable(name), style=STATE_STYLE.get(name, ""))
            text.append(f"  {printable(reason)}", style="dim")
        if best is not None:
            text.append("\n  ")
            text.append("acceptance", style="bold")
            text.append(f"  {printable(best)}")
        for note in notes:
            # Plain Text, printable: a file named "[bold]x.log" is shown as named, never applied.
            text.append("\n  ")
            text.append("read", style="bold")
            text.append(f"  {printable(note)}", style="dim")
        self.update(text)
