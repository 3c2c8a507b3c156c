"""Untrusted text (names of files, directories and tags) made safe to show to a person.

Every string that comes from a file or a path may hold terminal control sequences: an OSC 52
clipboard write, ``ESC[2J``, a bell. ``printable`` shows them the way ``cat -v`` does (``^[`` for
ESC, ``^?`` for DEL), so a name reads the same on every terminal and changes none; the TUI puts the
result in a rich ``Text`` so it is never read as markup either. JSON output stays exact (its
encoder escapes control characters itself).
"""

from __future__ import annotations

import math
import re

__all__ = ["STATUS_GLYPHS", "format_accuracy", "printable"]

# C0 controls and DEL, C1 controls (U+0080-U+009F: U+009B is a CSI to some terminals), the
# line/paragraph separators, bidirectional overrides and isolates (they reorder what follows
# them on screen), and lone surrogates (undecodable bytes of a file name, surrogateescape).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\udc80-\udcff\ud800-\udfff]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return "^" + chr(code + 0x40)  # cat -v: ^@ .. ^_
    if code == 0x7F:
        return "^?"
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"  # the byte os.fsdecode could not decode
    return f"\\u{code:04x}"


def printable(text: object, *, newlines: bool = False) -> str:
    """``str(text)`` with every control character shown as ``cat -v`` would (``^[``, ``^M``).

    ``newlines=True`` keeps line feeds (for a block of text whose lines are ours); a name or
    tag never keeps them, so it cannot forge a line of output.
    """
    text = str(text)
    if newlines:
        return "\n".join(_UNSAFE.sub(_shown, line) for line in text.split("\n"))
    return _UNSAFE.sub(_shown, text)


# ---- how a run's status and numbers are written for a person: one way, in `scan` and in the TUI

# A run's status (critical, warning, ok) and a flag's severity (critical, warning, info): the TUI
# colours them (tui/view_data.py SEVERITY_STYLE); `scan` falls back to ASCII words.
# "warming": a run still inside the warm-up (RunStatus.shown_status), not yet judged healthy.
# "error": a run none of whose files could be read (RunStatus.errors says why).
STATUS_GLYPHS = {"critical": "✖", "warning": "▲", "ok": "●", "info": "·", "warming": "◌", "error": "⊘"}


def format_accuracy(value: float | None) -> str:
    """Accuracy as a percentage; trainers log fractions (SpecForge acc_i) or percents."""
    if value is None:
        return "–"
    if not math.isfinite(value):
        return "nan"
    percent = value * 100 if abs(value) <= 1.0 else value
    return f"{percent:.1f}%"
