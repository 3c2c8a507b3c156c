"""The sizes the event reader works in, turned small by tests so every boundary case occurs.

Read as ``tuning.NAME`` by the code that uses them (tests/test_layers.py refuses
``from triage_tui.core.read.events.tuning import NAME``): a test's monkeypatch here reaches every
caller, wherever the code moves.
"""

from __future__ import annotations

READ_WINDOW = 64 << 20  # bytes read per step; a longer record is read whole
SCAN_WORDS = 1 << 19  # 4 MiB of the buffer per step of the header scan
GROUP_ROWS = 1 << 16  # records of one length decoded together (bounds the temporaries)
# False: every record through Event.FromString (upb), the plain path the templates are measured
# against (benchmarks/ab.py) and checked against (tests/test_events_fastpath.py).
TEMPLATES = True
