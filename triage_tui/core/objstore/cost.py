"""What watching a bucket prefix costs: its requests and bytes, how often it is listed (runs idle for
long are listed less often), and an estimate of the requests' price a day at the provider's list
prices.

The estimate is of requests only, for a prefix watched as now: every listing of an idle poll (the
last pass's listing requests, or the first's when it is the only one) at the current listing
interval, for a day. Object bodies are counted in bytes and not priced: transfer is free within a
region and priced by where it goes otherwise. It is off (None) for a custom endpoint (an
S3-compatible store, an emulator), whose prices are not the provider's, unless asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from triage_tui.core.objstore import tuning

# List prices in USD per 1 000 requests, Standard storage class, US regions (December 2026):
# - AWS S3 Standard: PUT, COPY, POST, LIST requests $0.005; GET, SELECT and all other requests
#   $0.0004 (https://aws.amazon.com/s3/pricing/, "Requests & data retrievals").
# - Google Cloud Storage Standard: Class A operations (objects.list among them) $0.005; Class B
#   (objects.get, metadata reads) $0.0004 (https://cloud.google.com/storage/pricing, "Operation charges").
LIST_USD_PER_1000 = {"s3": 0.005, "gs": 0.005}
GET_USD_PER_1000 = {"s3": 0.0004, "gs": 0.0004}
SECONDS_A_DAY = 86_400.0


def idle_tier(idle_secs: float | None) -> tuple[float, float] | None:
    """The longest of ``tuning.IDLE_LISTING_TIERS`` that ``idle_secs`` reaches, as (idle at least,
    listed every); None below the first (or None: nothing known yet)."""
    if idle_secs is None:
        return None
    return max((tier for tier in tuning.IDLE_LISTING_TIERS if idle_secs >= tier[0]), default=None)


def listing_interval(idle_secs: float | None, rescan_secs: float) -> float:
    """Seconds between two listings of a prefix whose newest object was uploaded ``idle_secs`` ago
    (None: nothing listed yet): the watcher's rescan while it is active, longer the longer it is
    idle (``idle_tier``)."""
    tier = idle_tier(idle_secs)
    return rescan_secs if tier is None else max(rescan_secs, tier[1])


def usd_per_day(scheme: str, lists_per_poll: int, gets_per_poll: int, listed_every_secs: float) -> float | None:
    """The list price of a day of polls of ``lists_per_poll`` listing and ``gets_per_poll`` other
    requests each, one every ``listed_every_secs``; None where the scheme has no list price here."""
    if scheme not in LIST_USD_PER_1000:
        return None
    polls = SECONDS_A_DAY / max(listed_every_secs, 1.0)
    per_poll = lists_per_poll * LIST_USD_PER_1000[scheme] + gets_per_poll * GET_USD_PER_1000[scheme]
    return polls * per_poll / 1000.0


@dataclass(frozen=True)
class PrefixCost:
    """One watched prefix: requests sent, of them listing pages, object-body bytes received, since it
    was opened; how long its newest object has gone without an upload (None before a listing), how
    often it is listed now, and the estimated list price a day of watching it (None: off)."""

    url: str
    requests: int
    lists: int
    body_bytes: int
    idle_secs: float | None
    listed_every_secs: float
    usd_per_day: float | None

    def to_json(self) -> dict:
        return {
            "url": self.url,
            "requests": self.requests,
            "lists": self.lists,
            "body_bytes": self.body_bytes,
            "idle_s": None if self.idle_secs is None else round(self.idle_secs, 1),
            "listed_every_s": round(self.listed_every_secs, 1),
            "usd_per_day": None if self.usd_per_day is None else round(self.usd_per_day, 6),
        }

    def line(self) -> str:
        """One line for the TUI and the scan's text: ``s3://b/p: 12 requests, 3.4 MB; idle 3 d:
        listed every 15 min; ~$0.0288/day (list prices)``."""
        parts = [f"{self.url}: {self.requests} requests, {_size(self.body_bytes)}"]
        if self.idle_secs is not None and idle_tier(self.idle_secs) is not None:
            parts.append(f"idle {_duration(self.idle_secs)}: listed every {_duration(self.listed_every_secs)}")
        if self.usd_per_day is not None:
            parts.append(f"~${self.usd_per_day:.4f}/day (list prices)")
        return "; ".join(parts)


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _duration(secs: float) -> str:
    for unit, scale in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if secs >= scale:
            return f"{secs / scale:.0f} {unit}"
    return f"{secs:.0f} s"
