"""The bounds on what one poll of a tracker's store or log reads; tests turn them small.

Read as ``tuning.NAME`` by the code that uses them (tests/test_layers.py refuses
``from triage_tui.core.read.trackers.tuning import NAME``): a test's monkeypatch here reaches every
caller, wherever the code moves.
"""

from __future__ import annotations

# Rows one poll of a SQLite store reads for one run (MLflow's metrics, trackio's logged dicts);
# a run logged faster than that is caught up with over the next polls, so a poll stays bounded.
MAX_ROWS_PER_POLL = 500_000
# How long one statement waits on a writer's lock before the poll gives up and tries again at the
# next one (sqlite3's busy timeout). Short: a poll must not stall the watcher behind a writer.
BUSY_TIMEOUT_SECONDS = 0.25
# A store still locked after this many polls in a row is said to be, on its run.
LOCKED_POLLS_SAID = 20
# A line of a text log or JSON-lines file longer than this is no metrics line (a NeMo record of a
# few hundred metrics is ~20 KB): dropped whole and counted as damage, so memory stays bounded.
MAX_LINE_BYTES = 1 << 18
# One poll reads at most this much of a text log, CSV or JSON-lines file; the next poll continues.
MAX_READ_BYTES = 32 << 20
# A logged metric name longer than this is no metric's: its point is damage.
MAX_NAME_CHARS = 512
# A trackio row's JSON longer than this is no logged dict: damage.
MAX_JSON_CHARS = 1 << 20
