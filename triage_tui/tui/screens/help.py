"""`?`: every key of the screen underneath, grouped by where it applies (k9s/lazygit style)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static


def _where(node, screen: Screen) -> str:
    if node is screen.app:
        return "everywhere"
    if node is screen:
        return "this screen"
    return f"in the focused {type(node).__name__}"


def _what(binding: Binding) -> str:
    return binding.tooltip or binding.description or binding.action.replace("_", " ")


# Textual's copy binding does nothing without a selection (Screen.action_copy_text raises SkipAction)
# and the key goes on to the app's binding: ctrl+c copies a selection, else quits. The help says both.
FALLS_THROUGH = frozenset({"screen.copy_text"})


def _falls_through_to(screen: Screen, key: str, binding: Binding) -> Binding | None:
    """The app's binding a key reaches when ``binding`` skips (the copy key with nothing selected)."""
    if binding.action not in FALLS_THROUGH:
        return None
    for candidate in getattr(type(screen.app), "BINDINGS", []):
        if isinstance(candidate, Binding) and key in candidate.key.split(",") and candidate.action != binding.action:
            return candidate
    return None


# Of the keys Textual's own classes bind, those that do something a triage user asks for: moving in a
# table or a list, opening a row, the command palette, copying. Focus cycling (tab), a table's column
# cursor, the macOS copy key (super+c) and Textual's second quit key are its machinery, not triage's.
TEXTUAL_KEYS_SHOWN = frozenset(
    {
        "cursor_up",
        "cursor_down",
        "page_up",
        "page_down",
        "scroll_home",
        "scroll_end",
        "scroll_top",
        "scroll_bottom",
        "select_cursor",
        "command_palette",
        "screen.copy_text",
    }
)


def _is_triages(node, key: str, binding: Binding) -> bool:
    """Whether a key is one of triage's: bound by one of its classes, or one of Textual's keys that
    mean something here (``TEXTUAL_KEYS_SHOWN``), never a ``super+`` key."""
    if key.startswith("super+"):
        return False
    for cls in type(node).__mro__:
        for candidate in cls.__dict__.get("BINDINGS", []):
            if (
                isinstance(candidate, Binding)
                and candidate.action == binding.action
                and key in candidate.key.split(",")
            ):
                return cls.__module__.startswith("triage_tui.") or binding.action in TEXTUAL_KEYS_SHOWN
    return binding.action in TEXTUAL_KEYS_SHOWN  # bound at run time (the palette's key)


def _keys_table() -> Table:
    # Not expanded: every group's table then has the same key column, so the descriptions line up.
    table = Table(box=None, show_header=False, padding=(0, 1))
    table.add_column("key", style="bold cyan", no_wrap=True, width=11)
    table.add_column("what")
    return table


class HelpScreen(ModalScreen[None]):
    """A read-only list of keys; Esc, q or ? closes it."""

    BINDINGS = [
        Binding("escape,q,question_mark,f1", "dismiss", "Close", key_display="esc"),
    ]

    def __init__(self, title: str, rows: list[tuple[str, str, str, bool]]) -> None:
        super().__init__()
        self.help_title = title
        self.rows = rows

    @classmethod
    def for_screen(cls, screen: Screen) -> HelpScreen:
        """Keys active on ``screen`` now: the app's, the screen's and the focused widget's."""
        rows: list[tuple[str, str, str, bool]] = []
        ranks: list[tuple[int, int]] = []
        seen: set[tuple[str, str]] = set()
        group_rank = {"this screen": 0, "everywhere": 2}
        for key, active in screen.active_bindings.items():
            binding = active.binding
            if not _is_triages(active.node, key, binding):
                continue
            what = _what(binding)
            fallback = _falls_through_to(screen, key, binding)
            if fallback is not None:
                what = f"{what}; with none selected, {_what(fallback).lower()}"
            display = screen.app.get_key_display(binding)
            if (display, what) in seen:
                continue
            seen.add((display, what))
            where = _where(active.node, screen)
            # triage's own keys first in each group, Textual's inherited ones (focus, copy) after.
            own = {b.action for b in type(active.node).__dict__.get("BINDINGS", []) if isinstance(b, Binding)}
            rows.append((where, display, what, active.enabled))
            ranks.append((group_rank.get(where, 1), 0 if binding.action in own else 1))
        rows = [row for _, row in sorted(zip(ranks, rows, strict=True), key=lambda pair: pair[0])]
        title = getattr(screen, "HELP_TITLE", None) or type(screen).__name__.replace("Screen", "").lower()
        return cls(title, rows)

    def compose(self) -> ComposeResult:
        # A heading per group on a line of its own, over the key and the description: in the key
        # column ("in the focused RunsTable") it was cut to the key's width.
        parts: list[RenderableType] = []
        table: Table | None = None
        group = None
        for where, key, what, enabled in self.rows:
            if where != group or table is None:
                if table is not None:
                    parts += [table, Text("")]
                parts.append(Text(where, style="bold underline"))
                table = _keys_table()
                group = where
            table.add_row(key, Text(what, style="" if enabled else "dim"))
        if table is not None:
            parts.append(table)  # ^p, the command palette, is among "everywhere"
        with VerticalScroll(id="help-body"):
            yield Static(Group(*parts))

    def on_mount(self) -> None:
        self.query_one("#help-body").border_title = f"keys · {self.help_title}"
        self.query_one("#help-body").border_subtitle = "esc closes · dim = not available now"
