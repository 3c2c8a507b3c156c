"""Drill-down for one hypothesis: its evidence, the numbers of the checks behind it, the action."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static, TabbedContent, TabPane

from triage_tui.core.read.console.view import last_error_line, newest_console
from triage_tui.core.text import printable
from triage_tui.tui import messages
from triage_tui.tui.widgets.checks_progress import STATUS_STYLE, check_lines
from triage_tui.tui.widgets.fitted_lines import FittedLines
from triage_tui.tui.widgets.hypotheses_list import score_bar
from triage_tui.tui.widgets.keys_footer import KeysFooter

if TYPE_CHECKING:
    from triage_tui.core.diagnose.checks.result import CheckResult
    from triage_tui.core.diagnose.diagnosis import Diagnosis
    from triage_tui.core.diagnose.hypotheses.scoring import Hypothesis


def check_section(result: CheckResult) -> RenderableType:
    """One check: its status line, then the plain lines its details render (``drilldown()``), as text."""
    glyph, style = STATUS_STYLE.get(result.status, ("?", ""))
    header = Text()
    header.append(f"{glyph} {result.name}", style=f"{style} bold")
    header.append(f"  {result.status}: ", style=style)
    header.append(printable(result.summary))
    if result.status in ("skipped", "error") or result.details is None:
        return Group(header, Text(""))
    body = Text("\n".join(printable(line) for line in result.details.drilldown()))
    return Group(header, body, Text(""))


def command_text(command: str) -> Text:
    """A shell command (``shlex.join``'s) an option a line: each ``--option value`` starts a line and
    every line but the last ends in " \\", so the lines copied together are the same command."""
    words = shlex.split(command)
    lines: list[list[str]] = []
    for word in words:
        if not lines or word.startswith("--"):
            lines.append([])
        lines[-1].append(word)
    shown = [shlex.join(line) for line in lines]
    text = Text(style="cyan")
    for index, line in enumerate(shown):
        if index:
            text.append(" \\\n  ")
        text.append(printable(line))
    return text


class CommandLines(FittedLines):
    """A shell command drawn by ``command_text``; ``command`` is the one line `c` copies."""

    def __init__(self, command: str, **kwargs) -> None:
        super().__init__(command_text(command), **kwargs)
        self.command = command


class DrillDownScreen(Screen):
    """Tabs: Evidence, Details (the checks' numbers), Action. Esc goes back."""

    HELP_TITLE = "hypothesis"
    BINDING_GROUP_TITLE = "Hypothesis"
    BINDINGS = [
        Binding("escape,backspace", "app.pop_screen", "Back", key_display="esc", id="back"),
        Binding("m", "remap", "Remap", tooltip="Write a checkpoint with lm_head rows in the run's order", id="remap"),
        Binding(
            "c", "copy_command", "Copy command", tooltip="Copy the fix's shell command (OSC 52, tmux too)", id="copy"
        ),
        Binding("1", "tab('evidence')", "Evidence", show=False),
        Binding("2", "tab('details')", "Details", show=False),
        Binding("3", "tab('action')", "Action", show=False),
    ]

    class ConsoleRead(Message):
        """The console's last error line (None: none in its tail), and the file it is in."""

        def __init__(self, file: Path, line: str | None) -> None:
            super().__init__()
            self.file = file
            self.line = line

    def __init__(
        self,
        path: Path,
        run_name: str,
        diagnosis: Diagnosis,
        hypothesis: Hypothesis,
        *,
        readonly: bool = False,
        console_files: tuple[Path, ...] = (),
    ) -> None:
        """``console_files``: the run's console logs; the newest one's last error line is read when
        the screen opens (off the UI thread) and shown atop the Details tab."""
        super().__init__()
        self.path = path
        self.run_name = run_name
        self.diagnosis = diagnosis
        self.hypothesis = hypothesis
        self.readonly = readonly
        self.console_files = console_files
        self.console_line: Text | None = None  # what the Details tab says of the console, once read

    def compose(self) -> ComposeResult:
        hypothesis = self.hypothesis
        title = Text(" ")
        title.append_text(score_bar(hypothesis.score))
        title.append(printable(hypothesis.title), style="bold")
        title.append(f"  · {printable(self.run_name)}", style="dim")
        yield Static(title, id="drill-title")
        with TabbedContent(initial="evidence", id="drill-tabs"):
            with TabPane("Evidence", id="evidence"):
                with VerticalScroll():
                    yield Static(self._evidence(), id="evidence-body")
            with TabPane("Details", id="details"):
                with VerticalScroll():
                    yield Static("", id="details-console")
                    yield Static(self._details(), id="details-body")
            with TabPane("Action", id="action"):
                with VerticalScroll():
                    yield Static(self._action(), id="action-body")
                    for index, command in enumerate(self._commands()):
                        if index:
                            yield Static(
                                "\nOr the opposite fix: keep the weights and give the trainer the "
                                "checkpoint's own mapping:"
                            )
                        # An option a line, continued with "\": copied from the terminal (tmux) it still
                        # runs. A line wider than the pane keeps its tail, "…" where its middle was;
                        # `c` copies the whole command (OSC 52).
                        yield CommandLines(command, classes="command")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#details-console").display = False
        if self.console_files:
            self._read_console()

    @work(thread=True, exclusive=True, group="drill-console", exit_on_error=False, description="console's last error")
    def _read_console(self) -> None:
        newest = newest_console(self.console_files)[0]
        try:
            line = last_error_line(newest)
        except OSError:
            return  # gone or unreadable: the Details tab says nothing of it
        self.post_message(self.ConsoleRead(newest, line))

    def on_drill_down_screen_console_read(self, message: ConsoleRead) -> None:
        text = Text()
        text.append("console: ", style="bold")
        if message.line is None:
            text.append(f"no error line in the tail of {printable(message.file.name)}", style="dim")
        else:
            text.append("last error line ", style="dim")
            text.append(f"✖ {message.line}", style="bold red")  # printable already (core.read.console.view)
            text.append(f"  ({printable(message.file.name)})", style="dim")
        text.append("\n")
        self.console_line = text
        shown = self.query_one("#details-console", Static)
        shown.update(text)
        shown.display = True

    def _evidence(self) -> RenderableType:
        text = Text()
        for line in self.hypothesis.evidence:
            text.append("• ", style="bold")
            text.append(f"{printable(line)}\n")
        if not self.hypothesis.evidence:
            text.append("no evidence recorded\n", style="dim")
        if self.hypothesis.links:
            text.append("\nknown from\n", style="bold")
            for link in self.hypothesis.links:
                text.append(f"  {printable(link)}\n")
        text.append("\nchecks\n", style="bold")
        text.append_text(check_lines({name: (r.status, r.summary) for name, r in self.diagnosis.checks.items()}))
        text.append("\n")
        inputs = self.diagnosis.inputs
        text.append("\ninputs\n", style="bold")
        for label in ("checkpoint", "mapping", "data", "target"):
            value = getattr(inputs, label)
            text.append(f"  {label:<11}", style="dim")
            text.append(f"{printable(value) if value is not None else '–'}\n")
        return text

    def _details(self) -> RenderableType:
        names = self.hypothesis.checks or tuple(self.diagnosis.checks)
        sections = [check_section(self.diagnosis.checks[n]) for n in names if n in self.diagnosis.checks]
        return Group(*sections) if sections else Text("no check details", style="dim")

    def _commands(self) -> tuple[str, ...]:
        """The fix's shell commands, when this hypothesis has one and the vocab check calls for it."""
        return self.diagnosis.fix_commands() if self.hypothesis.action == "remap" else ()

    def _remap_called_for(self) -> bool:
        return self.diagnosis.remap_blocker() is None

    def _action(self) -> RenderableType:
        text = Text()
        if self.hypothesis.action == "remap" and not self._remap_called_for():
            vocab = self.diagnosis.checks.get("vocab_mapping")
            text.append("Nothing to remap\n", style="bold")
            text.append(
                "The vocab check "
                + (f"{vocab.status}: {printable(vocab.summary)}" if vocab is not None else "did not run")
                + "\n"
            )
            return text
        if self.hypothesis.action == "remap":
            text.append("Remap the drafter's lm_head rows into the run's order\n", style="bold")
            text.append(
                "Row j of the new head is the old row of the run's token j; tokens the drafter never had "
                "get new rows; d2t/t2d become the run's. The source is not touched.\n\n"
            )
            if self.readonly:
                text.append("read-only: the remap key is disabled here. From a shell:", style="magenta")
            else:
                text.append("press ", style="dim")
                text.append("m", style="bold")
                text.append(" to see exactly what would be written, then y to write it. From a shell (", style="dim")
                text.append("c", style="bold")
                text.append(" copies the command):", style="dim")
            return text
        # No fix triage can apply: show what the checks behind this hypothesis found, in their words.
        text.append("triage has no one-key fix for this. What the checks found:\n\n", style="bold")
        names = self.hypothesis.checks or tuple(self.diagnosis.checks)
        for name in names:
            result = self.diagnosis.checks.get(name)
            if result is None or result.status not in ("fail", "error"):
                continue
            glyph, style = STATUS_STYLE.get(result.status, ("?", ""))
            text.append(f"{glyph} {name}: ", style=style)
            text.append(f"{printable(result.summary)}\n")
        for line in self.hypothesis.evidence:
            text.append("• ", style="bold")
            text.append(f"{printable(line)}\n")
        return text

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "remap":
            # Remaps, or says why not; absent in --readonly, on the other hypotheses, and where the
            # vocab check found nothing to remap (the Action tab says so; offering `m` would contradict it).
            return not (self.readonly or self.hypothesis.action != "remap" or not self._remap_called_for())
        if action == "copy_command":
            return bool(self._commands())
        return True

    def action_remap(self) -> None:
        if not self.readonly:
            self.post_message(messages.RemapRequested(self.path))  # the app remaps, or says why not

    def action_copy_command(self) -> None:
        commands = self._commands()
        if not commands:
            self.notify("this hypothesis has no shell command to copy", title="c", timeout=4)
            return
        self.app.copy_to_clipboard(commands[0])
        self.notify(commands[0], title="copied to the clipboard", timeout=6)

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
