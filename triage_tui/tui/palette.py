"""The command palette's entries for a screen: its keys, by what they do, as the help lists them."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from textual.app import SystemCommand
from textual.binding import Binding
from textual.screen import Screen


def screen_commands(screen: Screen) -> Iterable[SystemCommand]:
    """One palette entry per key of the screen that is offered there now."""
    for binding in screen.BINDINGS:
        if not isinstance(binding, Binding) or binding.action == "escape":
            continue
        if screen.check_action(binding.action, ()) is False:
            continue  # not offered here (e.g. remap in --readonly)
        title = binding.tooltip or binding.description
        yield SystemCommand(
            f"{binding.description} ({binding.key_display or binding.key})",
            title,
            _action_runner(screen, binding.action),
        )


def _action_runner(screen: Screen, action: str) -> Callable[[], object]:
    async def run() -> None:
        await screen.run_action(action)

    return run
