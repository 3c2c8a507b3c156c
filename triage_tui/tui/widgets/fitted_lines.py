"""Lines that fit their pane: each drawn whole when it fits, else with its middle cut to "…".

Paths and shell commands end in what says what they are (a checkpoint's directory name, the last
option), so the cut keeps more of the tail than of the head; "…" says that something was cut, where a
line cut at the pane's edge would not. Never wrapped: a path split across two lines reads as two.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.widget import Widget

from triage_tui.core.text import printable

ELLIPSIS = "…"
# The share of the room a cut line keeps for its tail.
TAIL_SHARE = 2 / 3


def _chars_within(text: str, cells: int, *, from_end: bool) -> int:
    """How many characters from one end of ``text`` fit in ``cells`` terminal cells."""
    used = count = 0
    for char in reversed(text) if from_end else text:
        width = cell_len(char)
        if used + width > cells:
            break
        used += width
        count += 1
    return count


def fit_line(line: Text, width: int, tail_share: float = TAIL_SHARE) -> Text:
    """``line`` in ``width`` cells: whole, or its head and tail around "…" (styles kept)."""
    if line.cell_len <= width:
        return line
    if width <= 1:
        return Text(ELLIPSIS[:width])
    room = width - 1
    tail_cells = int(room * tail_share)
    plain = line.plain
    tail = _chars_within(plain, tail_cells, from_end=True)
    head = _chars_within(plain, room - tail_cells, from_end=False)
    cut = line[:head]
    cut.append(ELLIPSIS, style="dim")
    cut.append_text(line[len(plain) - tail :] if tail else Text())
    return cut


def fit_lines(text: Text, width: int) -> Text:
    """Every line of ``text`` fitted to ``width`` (``fit_line``)."""
    return Text("\n").join(fit_line(line, width) for line in text.split("\n", allow_blank=True))


def toast_text(message: str, title: str, screen_width: int) -> str:
    """A toast's one plain line: a run named "[/]" must not take the app down, nor "[@click=...]" act.

    At most two lines over the keys footer and the panes' bottom border (app.tcss). The title leads;
    a longer text ends in "…", or, when it ends in a path, keeps the path's tail (its name), "…" in
    its middle."""
    line = printable((f"{title}: {message}" if title else message).replace("\n", " "))
    # Two lines of the toast's width (less its severity edge and padding), less what wrapping at
    # spaces may leave unused at the end of the first.
    width = max(screen_width - 3, 8)
    room = 2 * width - width // 4
    ends_in_path = "/" in line.rsplit(" ", 1)[-1]
    return fit_line(Text(line), room, tail_share=2 / 3 if ends_in_path else 0.0).plain


class FittedLines(Widget):
    """``text``'s lines fitted to the widget's width on every draw (a resize refits them)."""

    DEFAULT_CSS = """
    FittedLines {
        width: 1fr;
        height: auto;
    }
    """

    def __init__(self, text: Text | str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.text = Text(text) if isinstance(text, str) else text

    @property
    def content(self) -> Text:
        """The text before fitting (as a Static's ``content`` is what it was given)."""
        return self.text

    def update(self, text: Text | str) -> None:
        self.text = Text(text) if isinstance(text, str) else text
        self.refresh(layout=True)

    def render(self) -> Text:
        return fit_lines(self.text, max(self.size.width, 1))

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self.text.split("\n", allow_blank=True)) if self.text.plain else 0
