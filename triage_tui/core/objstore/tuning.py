"""The sizes, timeouts and paths the object-store layer works with; tests turn them small.

Read as ``tuning.NAME`` by the code that uses them (tests/test_layers.py refuses
``from triage_tui.core.objstore.tuning import NAME``): a test's monkeypatch here reaches every
caller, wherever the code moves.
"""

from __future__ import annotations

from pathlib import Path

# The schemes read through obstore (a Rust client: ~6x less CPU a request than s3fs, 23x less a
# listing page, 0.04 s to import against 1.35 s: benchmarks/RESULTS-objstore.md); any other scheme
# goes through fsspec. Tests empty it to run the fsspec path against the same server.
NATIVE_SCHEMES: tuple[str, ...] = ("s3", "gs")
# docs/contracts.md "Bounds": every fetch has a total deadline, retries included.
DEADLINE_SECS = 15.0
# One request that has not answered in this long is abandoned and tried again (within the deadline).
REQUEST_TIMEOUT_SECS = 10.0
CONNECT_TIMEOUT_SECS = 5.0
# Retries of a 5xx, a 429, a timeout or a dropped connection, after the first try.
MAX_RETRIES = 4
BACKOFF_FIRST_SECS = 0.2  # doubled after each failed try, capped below
BACKOFF_MAX_SECS = 2.0
# Objects fetched at once by a mirror's pass (the first pass of a 1 000-run sweep is thousands of
# small GETs, each mostly waiting on the network).
FETCH_THREADS = 16
# A ranged read longer than this is split into requests of this size, each under its own deadline
# (a 1.3 GB lm_head at 100 MB/s would outlast any one request's timeout).
RANGE_CHUNK_BYTES = 64 << 20
# A growing object's poll re-reads this many bytes before its old end with the appended ones: an
# object rewritten with other content (S3 replaces the whole object on each upload) is told from
# one that grew by comparing them, in the same request.
TAIL_CHECK_BYTES = 4 << 10
# One poll of a followed object fetches at most this much (a first read of a multi-GB event file
# stays bounded in memory); the next poll goes on from there, its old end re-read as always.
MAX_POLL_BYTES = 64 << 20
# Objects read whole (manifests, configs, sentinels, the files a scan opens): larger is refused.
MAX_WHOLE_BYTES = 256 << 20
# The first ranged read of a safetensors file: its 8-byte length and, for a drafter, its whole header.
HEADER_PROBE_BYTES = 64 << 10
# The local cache of whole objects (keyed by URL and ETag): None turns it off. Checkpoints' fetched
# ranges are kept there only when CACHE_CHECKPOINTS is set (they can be gigabytes).
CACHE_DIR: Path | None = None  # None: $XDG_CACHE_HOME/triage/objects (~/.cache/triage/objects)
CACHE_ENABLED = True
CACHE_MAX_BYTES = 512 << 20
CACHE_CHECKPOINTS = False
# Ranges of safetensors checkpoints fetched in one process and kept for its later reads (the same
# check's, the next check of the run): past this, the least recently read checkpoints' are dropped
# (formats/remote_safetensors.py), to be fetched again if read again.
KEPT_RANGES_BYTES = 1 << 30

# --- budgets (objstore/budget.py): what one pass over a bucket may spend, whatever the server does ---
# One mirror pass's fetches end once none of its requests has been answered for this long (from its
# start, then from each answer), and by PASS_MAX_SECS whatever; what it did not reach is one error
# of that object, fetched by a later pass (the TUI's next rescan). A hanging server costs a `scan`
# this long at most, and `STALLED_SECS` sooner where nothing answers at all; a slow one that
# answers goes on being read (a 10 000-run bucket is ~12 000 GETs: at ~180 a second, more than a
# minute).
PASS_DEADLINE_SECS = 60.0
PASS_MAX_SECS = 900.0
# The TUI's passes wait this long for their fetches, and leave the slower ones running (a later
# pass takes their results): no run waits on the slowest, the first screen included. The first
# pass waits as long for its listing and fetches together: a listing of many pages goes on while
# the runs of the directories listed whole so far are shown (objstore/mirror.py, PrefixMirror._list).
LIVE_PASS_SECS = 1.0
# Bytes of object bodies one pass fetches in all; the objects beyond wait for the next pass.
PASS_MAX_BYTES = 4 << 30
# A followed object (event file, console, W&B run file) is read this far and no further, whatever
# size its listing says (an object listed as 1 TiB is never fetched whole); past it, one error. A
# pickled checkpoint (read whole by torch.load; a drafter that saves its embedding holds ~1 GB of
# it alone) larger than this is refused before any byte of it is fetched.
FOLLOW_MAX_BYTES = 4 << 30
# Keys held from one listing: a listing that never ends (IsTruncated forever) stops here with one
# error, and the runs among the keys listed so far are shown. 10 000 runs with 50-shard checkpoints
# are ~540 000 keys; a held key costs ~0.5 KB.
MAX_LISTED_KEYS = 1_000_000
# Keys the client hands over at a time while listing (obstore gathers them across pages): what a
# listing still under way holds so far grows by this many (budget.ListingProgress). A page's worth:
# ListObjectsV2's MaxKeys default, GCS's maxResults default.
LIST_CHUNK_KEYS = 1000
# A listing of many pages (one per 1 000 keys) runs under this deadline, not one request's.
LIST_DEADLINE_SECS = 120.0
# A checkpoint directory whose newest object is at least this old (seconds) is taken as written:
# listed no more while its parent names it (objstore/levels.py); a younger one may be mid-upload.
SETTLED_SECS = 600.0
# Requests in flight at once, to all buckets together (objstore/budget.py's RequestPool).
MAX_IN_FLIGHT = 32
# A store that has answered no request for this long while asked (every try timing out) is not
# asked again in this pass: the rest of its objects are one error each, at once. Any answer, the
# next pass's listing included, resets it.
STALLED_SECS = 15.0
# A prefix whose newest object was uploaded at least this long ago (seconds) is listed at most this
# often (seconds), whatever the watcher's rescan: a sweep that ended days ago costs a listing every
# 15 minutes, not every 5 seconds (objstore/cost.py says so, with what watching it costs).
IDLE_LISTING_TIERS: tuple[tuple[float, float], ...] = ((30 * 60, 60.0), (6 * 3600, 300.0), (2 * 86_400, 900.0))
