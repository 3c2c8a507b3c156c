"""The bounds on what one poll of a serving source reads; tests turn them small.

Read as ``tuning.NAME`` by the code that uses them (tests/test_layers.py refuses
``from triage_tui.core.watch.serving.tuning import NAME``): a test's monkeypatch here reaches every
caller, wherever the code moves. What a fetch may take (deadline, bytes, redirects) and the
bounds on numbers are core/bounds.py's, for every source.
"""

from __future__ import annotations

# A log line longer than this without a newline is not an engine's stats line: dropped, so a
# binary file or a runaway writer cannot grow memory.
MAX_LINE_BYTES = 1 << 16
# A JSONL line holds a whole response (its text too): a long generation is a few hundred KiB.
MAX_JSONL_LINE_BYTES = 4 << 20
# A speculation profile is a few KiB (vectors of K rates, a histogram, per-category means): one
# this large is not a profile.
MAX_PROFILE_BYTES = 1 << 20
# One poll reads at most this much of a log, so the first poll of a huge log stays bounded;
# the next poll continues where it stopped.
MAX_READ_BYTES = 32 << 20
# The first bytes of a file, read to tell the formats apart (serving/registry.py).
HEAD_BYTES = 1 << 12
# In the TUI a metrics URL is scraped at most this often (the engines update per interval).
SCRAPE_INTERVAL_SECS = 10.0
