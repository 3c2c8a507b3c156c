"""The bounds on what one poll of a serving source reads; tests turn them small.

Read as ``tuning.NAME`` by the code that uses them (tests/test_layers.py refuses
``from triage_tui.core.serving.tuning import NAME``): a test's monkeypatch here reaches every
caller, wherever the code moves.
"""

from __future__ import annotations

# A log line longer than this without a newline is not an engine's stats line: dropped, so a
# binary file or a runaway writer cannot grow memory.
MAX_LINE_BYTES = 1 << 16
# One poll reads at most this much of a log, so the first poll of a huge log stays bounded;
# the next poll continues where it stopped.
MAX_READ_BYTES = 32 << 20
# A /metrics endpoint answers in milliseconds on the node; longer means it is not there.
SCRAPE_TIMEOUT_SECS = 5.0
MAX_SCRAPE_BYTES = 16 << 20
# In the TUI a metrics URL is scraped at most this often (the engines update per interval).
SCRAPE_INTERVAL_SECS = 10.0
