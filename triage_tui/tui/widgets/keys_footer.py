"""Textual's Footer, rebuilt only when the keys it shows change."""

from __future__ import annotations

from textual.widgets import Footer


class KeysFooter(Footer):
    """The keys of the focused screen, as Textual's Footer shows them.

    Textual's Footer removes and mounts every key again whenever the screen's bindings may have
    changed (each focus change, each ``refresh_bindings``): six times while a 100-run sweep loads
    (benchmarks/bench_sweep.py), each one a restyle of every key and a layout of the screen; two of
    them changed what it shows. Here a rebuild that would show the same keys is skipped (the
    stylesheet's node updates during that load: 83 -> 31).
    """

    _shown: tuple | None = None

    def _keys(self) -> tuple:
        """What compose draws from: each shown binding, whether it is enabled, its tooltip."""
        bindings = tuple(
            (key, binding.action, binding.description, binding.key_display, binding.group, enabled, tooltip)
            for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items()
            if binding.show or key == self.app.COMMAND_PALETTE_BINDING
        )
        return (self._bindings_ready, self.show_command_palette, bindings)

    async def recompose(self) -> None:
        if not self.is_attached:
            return
        keys = self._keys()
        if keys == self._shown:
            return
        self._shown = keys
        await super().recompose()
