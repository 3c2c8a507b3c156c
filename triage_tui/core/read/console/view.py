"""A console log as a person reads it: ``ConsoleView``, the bounded tail of its lines as a terminal
would have shown them, each told as plain text, a traceback's or a crash's.

The view starts ``tuning.VIEW_START_BYTES`` before the file's end (a week-long log is not read
from its start) and follows it through ``core/log_tail.LogTail`` (rotation, truncation, a line
too long). Lines end at newlines only: a carriage return redraws the line it is on, so a tqdm bar
redrawn a thousand times and then ended is one line, its last redraw (and the text ``tqdm.write``
printed over a cleared bar is that text). The unterminated rest of the file is ``live``: the bar
being drawn now, as its last redraw. Every line is made plain (``lines.plain``: colours, cursor
moves, titles and other control characters gone) and then ``printable`` (C1 controls, bidi
overrides shown, not obeyed): the text is untrusted and shown as is, never as markup.

A line is marked by ``lines.CrashMarks`` (what ``core/watch/run_state.console_error`` finds a crash by):
``ERROR`` when ``lines.is_fatal`` or ``lines.is_exception`` says it, ``TRACEBACK`` for a
traceback's header and the indented frames under it (a frame's source line quoting an error too).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path

from triage_tui.core.log_tail import LogTail
from triage_tui.core.read.console import tuning
from triage_tui.core.read.console.lines import ERROR_KIND, FRAME_KIND, CrashMarks, plain, split_rank
from triage_tui.core.text import printable

ERROR = ERROR_KIND
TRACEBACK = FRAME_KIND


@dataclass(frozen=True)
class ViewLine:
    """One line as shown: its text (plain, printable, bounded) and ``ERROR``, ``TRACEBACK`` or None."""

    text: str
    kind: str | None = None


def shown(raw: str) -> str:
    """What a terminal leaves of a line: its last redraw (the text after its last carriage return
    that is not the line's end), plain and printable, at most ``tuning.VIEW_MAX_LINE_CHARS``."""
    parts = raw.rstrip("\r").split("\r")
    text = printable(plain(parts[-1]).expandtabs())
    limit = tuning.VIEW_MAX_LINE_CHARS
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ConsoleView:
    """The last ``tuning.VIEW_MAX_LINES`` lines of a console log, followed by ``poll()``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.tail = LogTail(self.path, max_line_bytes=tuning.MAX_LINE_BYTES)
        self.lines: deque[ViewLine] = deque(maxlen=tuning.VIEW_MAX_LINES)
        self.live: str | None = None  # the unterminated last line (a bar being drawn), as shown
        self.appended = 0  # lines ever appended: a reader knows what is new
        self._cut = self.tail.start_near_end(tuning.VIEW_START_BYTES)
        self.started_at = self.tail.offset  # bytes of the file before the view's first line
        self._marks = CrashMarks()
        self._dropped = 0

    @property
    def problem(self) -> str | None:
        """Why the last poll could not read the file (missing, unreadable), or None."""
        return self.tail.problem

    def poll(self) -> bool:
        """Read what was appended (at most ``tuning.VIEW_READ_BYTES``); True when what is shown changed."""
        before = (self.appended, self.live, self.tail.restarts)
        lines = self.tail.poll(tuning.VIEW_READ_BYTES)
        if self.tail.restarts != before[2]:
            self.lines.clear()  # the file was replaced or truncated: what was shown is no longer in it
            self._marks.reset()
        if self._cut and lines:
            lines, self._cut = lines[1:], False  # the end of a line begun before where the view started
        for raw in lines:
            self._append(shown(raw))
        if self.tail.dropped != self._dropped:
            count, self._dropped = self.tail.dropped - self._dropped, self.tail.dropped
            self._append_line(ViewLine(f"({count} line(s) over {tuning.MAX_LINE_BYTES} bytes left out)"))
        pending = self.tail.pending()
        self.live = shown(pending) if pending and not self._cut else None
        return (self.appended, self.live, self.tail.restarts) != before

    def _append(self, text: str) -> None:
        self._append_line(ViewLine(text, self._marks.mark(split_rank(text)[1])))

    def _append_line(self, line: ViewLine) -> None:
        self.lines.append(line)
        self.appended += 1


def newest_console(files: tuple[Path, ...] | list[Path]) -> list[Path]:
    """The console files, the most recently modified first (one that cannot be looked at last)."""

    def mtime(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return float("-inf")

    return sorted(files, key=mtime, reverse=True)


def last_error_line(path: Path) -> str | None:
    """The last line of the console's tail (``tuning.VIEW_START_BYTES``) marked ``ERROR``, without
    its launcher's rank prefix (as ``core/watch/run_state.console_error`` says it), or None."""
    view = ConsoleView(path)
    view.poll()
    while view.tail.bytes_read:
        view.poll()
    for raw in view.tail.flush():  # a log that ends without its newline still ends in its line
        view._append(shown(raw))
    found = next((line.text for line in reversed(view.lines) if line.kind == ERROR), None)
    return split_rank(found)[1].strip() if found is not None else None
