"""The bounds on what one poll of a training console reads; tests turn them small.

Read as ``tuning.NAME`` by the code that uses them (tests/test_layers.py refuses
``from triage_tui.core.read.console.tuning import NAME``): a test's monkeypatch here reaches every
caller, wherever the code moves.
"""

from __future__ import annotations

# A console line longer than this is no trainer's metrics line (SpecForge's eval line with seven
# per-position lists is ~1 KB; an HF dict of a hundred keys ~5 KB): dropped and counted as damage,
# so a binary file or a runaway writer cannot grow memory.
MAX_LINE_BYTES = 1 << 16
# A poll reads a console log this much at a time, each chunk's records placed before the next is read
# (what a poll holds follows this, not the file); it reads on to the size the file had when it began.
MAX_READ_BYTES = 1 << 20
# A record that waits on the line after it (an HF dict on its bar, a Rich record on its wrapped lines)
# is settled once the file has not been written for this long: the writer stopped after it.
SETTLED_SECS = 2.0
# A metrics literal nested deeper than this is not a trainer's (SpecForge's lists sit at depth 2,
# a speculators dict at 3): the line is damage, and the parser's recursion stays bounded.
MAX_DEPTH = 8
# Keys longer than this, or more keys than this in one line, are no trainer's: the line is damage.
MAX_KEY_CHARS = 256
MAX_KEYS = 4096
# A Rich log record (speculators) wraps its message over lines; one longer than this is damage.
MAX_RECORD_LINES = 256
# The console pane (``view``): the lines it keeps (the oldest go), the characters it keeps of one
# line (a longer one ends in "…"), how far before the end it starts, and how much one poll reads
# (a writer faster than that is caught up with over the next polls).
VIEW_MAX_LINES = 5000
VIEW_MAX_LINE_CHARS = 2000
VIEW_START_BYTES = 256 << 10
VIEW_READ_BYTES = 1 << 20
