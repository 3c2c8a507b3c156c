"""`o`: the selected run's console log (what its trainer printed), its tail followed while shown.

The newest console file is shown first (most recently modified); `f` goes to the next one when
the run has several (``train.log`` beside ``slurm-<job>.out``). The screen's own thread worker
reads the file (core.read.console.view.ConsoleView: bounded, tqdm redraws collapsed, escapes removed)
every ``interval`` seconds and posts what changed; popping the screen cancels it. The UI thread
only draws the lines it was handed, as plain Text (never markup): the log is untrusted.

`/` searches (case-insensitive), `n` / `N` go to the next / previous matching line. Tracebacks
and crash lines (an exception, CUDA out of memory, NCCL) are marked in red with a glyph.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.cells import cell_len
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input, Static
from textual.worker import get_current_worker

from triage_tui.core.read.console.view import ERROR, TRACEBACK, ConsoleView, ViewLine, newest_console
from triage_tui.core.text import printable
from triage_tui.tui.widgets.keys_footer import KeysFooter

FOLLOW_INTERVAL_SECS = 0.5
# The gutter: a glyph before a crash's line and a traceback's, so they read without colour too.
GUTTER = {ERROR: ("✖ ", "bold red"), TRACEBACK: ("│ ", "red")}
MATCH_STYLE = "black on yellow"
CURRENT_MATCH_STYLE = "bold black on bright_cyan"


class ConsoleLines(ScrollView, can_focus=True):
    """The lines, drawn only where they are in view (Textual's line API): thousands cost nothing."""

    DEFAULT_CSS = "ConsoleLines { height: 1fr; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.lines: tuple[ViewLine, ...] = ()
        self.first = 0  # the absolute number of lines[0] (lines older than it were let go)
        self.query_text = ""  # lower case; "" when no search
        self.current: int | None = None  # the absolute number of the current match

    def show(self, lines: tuple[ViewLine, ...], first: int) -> None:
        following = self.scroll_y >= self.max_scroll_y  # at the end: stay at the end as lines come
        self.lines, self.first = lines, first
        width = max((cell_len(line.text) for line in lines), default=0) + 2
        self.virtual_size = Size(width, len(lines))
        if following:
            self.scroll_end(animate=False)
        self.refresh()

    def matches(self) -> list[int]:
        """The absolute numbers of the lines holding the search text."""
        if not self.query_text:
            return []
        return [self.first + i for i, line in enumerate(self.lines) if self.query_text in line.text.lower()]

    def go_to(self, number: int) -> None:
        self.current = number
        self.scroll_to(y=max(0, number - self.first - self.size.height // 2), animate=False)
        self.refresh()

    def line_text(self, index: int) -> Text:
        line = self.lines[index]
        glyph, style = GUTTER.get(line.kind or "", ("  ", ""))
        text = Text(glyph, style=style)
        body = Text(line.text, style=style)  # plain Text: "[bold]" in a log is shown, not applied
        if self.query_text:
            lowered = line.text.lower()
            match = CURRENT_MATCH_STYLE if self.first + index == self.current else MATCH_STYLE
            start = lowered.find(self.query_text)
            while start >= 0:
                body.stylize(match, start, start + len(self.query_text))
                start = lowered.find(self.query_text, start + len(self.query_text))
        text.append_text(body)
        return text

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        if index >= len(self.lines):
            return Strip.blank(width, self.rich_style)
        text = self.line_text(index)
        segments = [segment for segment in text.render(self.app.console) if segment.text != "\n"]
        strip = Strip(segments, text.cell_len).crop_extend(scroll_x, scroll_x + width, self.rich_style)
        return strip.apply_style(self.rich_style)


class ConsoleScreen(Screen):
    """The run's console log, followed while shown. Esc, o or backspace goes back."""

    HELP_TITLE = "console"
    BINDING_GROUP_TITLE = "Console"
    BINDINGS = [
        Binding("escape", "escape", "Back", key_display="esc", tooltip="Close the search, else back to the runs"),
        Binding("o,backspace", "app.pop_screen", "Back", show=False, tooltip="Back to the runs", id="back"),
        Binding("slash", "search", "Search", key_display="/", tooltip="Search the console's lines", priority=True),
        Binding("n", "match(1)", "Next", tooltip="The next line the search matches"),
        Binding("N", "match(-1)", "Previous", tooltip="The previous line the search matches"),
        Binding("f", "next_file", "Next file", tooltip="The run's next console file (newest first)"),
    ]

    @dataclass
    class Updated(Message):
        path: Path
        lines: tuple[ViewLine, ...]
        first: int  # the absolute number of lines[0]
        live: str | None
        problem: str | None

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, ConsoleScreen.Updated) and message.path == self.path

    @dataclass
    class Ordered(Message):
        files: list[Path]  # the console files, newest first

    def __init__(self, run_name: str, files: tuple[Path, ...], *, interval: float = FOLLOW_INTERVAL_SECS) -> None:
        super().__init__()
        self.run_name = run_name
        self.files = list(files)  # newest first once the worker has looked (Ordered)
        self.index = 0
        self.interval = interval
        self.updates = 0  # Updated messages shown (tests wait on it)

    @property
    def path(self) -> Path:
        return self.files[self.index]

    def compose(self) -> ComposeResult:
        yield Static("", id="console-title")
        yield ConsoleLines(id="console-lines")
        yield Static("", id="console-live")
        yield Static("", id="console-note")
        yield Input(placeholder="search the console (enter finds, esc closes)", id="console-search")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#console-live").display = False
        self.query_one("#console-note").display = False
        self.query_one("#console-search").display = False
        self._show_title()
        self.query_one(ConsoleLines).focus()
        self._follow(None)

    # -- reading, in the worker -------------------------------------------------------------

    @work(thread=True, exclusive=True, group="console", exit_on_error=False, description="follow the console")
    def _follow(self, path: Path | None) -> None:
        stop = get_current_worker().cancelled_event
        if path is None:  # the first file: the newest
            files = newest_console(self.files)
            self.post_message(self.Ordered(files))
            path = files[0]
        view = ConsoleView(path)
        shown: tuple | None = None
        while not stop.is_set():
            view.poll()
            state = (view.appended, view.live, view.problem, view.tail.restarts)
            if state != shown:
                shown = state
                first = view.appended - len(view.lines)
                self.post_message(self.Updated(path, tuple(view.lines), first, view.live, view.problem))
            stop.wait(self.interval)

    def on_console_screen_ordered(self, message: Ordered) -> None:
        self.files, self.index = message.files, 0
        self._show_title()
        self.refresh_bindings()

    def on_console_screen_updated(self, message: Updated) -> None:
        if message.path != self.path:
            return  # the file shown before `f`
        self.updates += 1
        lines = self.query_one(ConsoleLines)
        lines.show(message.lines, message.first)
        live = self.query_one("#console-live", Static)
        live.display = message.live is not None
        if message.live is not None:
            live.update(Text(message.live, style="dim"))
        if message.problem is not None:
            self._note(f"{self.path.name}: {message.problem}")
        elif not message.lines and message.live is None:
            self._note(f"{self.path.name} is empty (so far)")
        elif not lines.query_text:
            self._note(None)

    # -- what is shown ------------------------------------------------------------------------

    def _show_title(self) -> None:
        title = Text(" console ", style="bold reverse")
        title.append(f"  {printable(self.path.name)}")
        if len(self.files) > 1:
            title.append(f"  · {self.index + 1} of {len(self.files)} (f: next)", style="dim")
        title.append(f"  · {printable(self.run_name)}", style="dim")
        title.append(f"  · followed every {self.interval:g} s", style="dim")
        self.query_one("#console-title", Static).update(title)

    def _note(self, text: str | None) -> None:
        note = self.query_one("#console-note", Static)
        note.display = text is not None
        note.update(Text(text or "", style="dim"))

    def _show_matches(self) -> None:
        lines = self.query_one(ConsoleLines)
        found = lines.matches()
        shown = f"/{lines.query_text}"
        if not found:
            self._note(f"{shown}: no line holds it")
            return
        position = found.index(lines.current) + 1 if lines.current in found else 0
        self._note(f"{shown}: match {position} of {len(found)} · n next, N previous")

    # -- actions ------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "next_file":
            return len(self.files) > 1
        if action == "match":
            return True if self.query_one(ConsoleLines).query_text else None
        # A "/" typed into the search is text, not the search key.
        return not (action == "search" and self.focused is self.query_one("#console-search", Input))

    def action_escape(self) -> None:
        search = self.query_one("#console-search", Input)
        if search.display:
            search.display = False
            self.query_one(ConsoleLines).focus()
        else:
            self.app.pop_screen()

    def action_search(self) -> None:
        search = self.query_one("#console-search", Input)
        search.display = True
        self.set_focus(search)  # now: keys typed right after `/` go into the search

    def action_match(self, step: int) -> None:
        lines = self.query_one(ConsoleLines)
        found = lines.matches()
        if not found:
            self._show_matches()
            return
        if lines.current in found:
            number = found[(found.index(lines.current) + step) % len(found)]
        else:
            number = found[-1] if step < 0 else next((n for n in found if n > (lines.current or -1)), found[0])
        lines.go_to(number)
        self._show_matches()

    def action_next_file(self) -> None:
        if len(self.files) > 1:
            self.index = (self.index + 1) % len(self.files)
            self.query_one(ConsoleLines).show((), 0)
            self._show_title()
            self._follow(self.path)

    @on(Input.Submitted, "#console-search")
    def _search(self, event: Input.Submitted) -> None:
        lines = self.query_one(ConsoleLines)
        lines.query_text = event.value.lower()
        lines.current = None
        event.input.display = False
        lines.focus()
        found = lines.matches()
        if found:
            lines.go_to(found[-1])  # the match nearest the end: a console is read from its tail
        else:
            lines.refresh()
        if lines.query_text:
            self._show_matches()
        else:
            self._note(None)
        self.refresh_bindings()
