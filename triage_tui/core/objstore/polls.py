"""When each watched prefix is listed next, and what watching it has cost.

A prefix is listed at every rescan while its runs are written; once its newest object is old
(``tuning.IDLE_LISTING_TIERS``) it is listed less often, and a rescan in between sends it no
request at all (its local tree and last errors stay as they were). The book keeps, per prefix, the
requests, listing pages and body bytes its store sent for it (its passes, and the files fetched when
a reader opened them; a bucket named twice counts its store's requests in both), for ``scan --json`` and the TUI
(``objstore.cost``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace

from triage_tui.core.errors import SourceError
from triage_tui.core.objstore import cost
from triage_tui.core.objstore.mirror import PrefixMirror
from triage_tui.core.objstore.store import Store, StoreStats


def custom_endpoint(scheme: str) -> bool:
    """Whether ``scheme``'s requests go to an endpoint of the user's (an S3-compatible store, an
    emulator: the standard variables ``objstore.store`` reads), whose prices are not the provider's."""
    if scheme == "s3":
        return bool(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
    if scheme == "gs":
        return bool(os.environ.get("STORAGE_EMULATOR_HOST"))
    return True


@dataclass
class _Entry:
    url: str
    scheme: str
    requests: int = 0
    lists: int = 0
    body_bytes: int = 0
    passes: int = 0
    last_lists: int = 0
    last_other: int = 0
    next_listing: float = 0.0  # time.monotonic() of the next pass
    listed_every: float = 0.0
    newest_upload: float | None = None
    errors: list[SourceError] = field(default_factory=list)
    mark: StoreStats = field(default_factory=StoreStats)  # the store's counts when last recorded
    store: Store | None = None


class PollBook:
    """Per mirror (by identity): whether a pass is due, and the passes' costs.
    ``rescan_secs``: the watcher's rescan; ``price_custom``: price custom endpoints too."""

    def __init__(self, rescan_secs: float = 5.0, *, price_custom: bool = False) -> None:
        self.rescan_secs = rescan_secs
        self.price_custom = price_custom
        self._entries: dict[int, _Entry] = {}

    def due(self, mirror: PrefixMirror, now: float | None = None) -> bool:
        entry = self._entries.get(id(mirror))
        return entry is None or (time.monotonic() if now is None else now) >= entry.next_listing

    def last_errors(self, mirror: PrefixMirror) -> list[SourceError]:
        entry = self._entries.get(id(mirror))
        return list(entry.errors) if entry is not None else []

    def moved(self, old: PrefixMirror, new: PrefixMirror) -> None:
        """``new`` replaces ``old`` (a file's URL mirrored alone): its book goes on."""
        entry = self._entries.pop(id(old), None)
        if entry is not None:
            self._entries[id(new)] = entry

    def record(
        self,
        mirror: PrefixMirror,
        before: StoreStats,
        errors: list[SourceError],
        url: str,
        *,
        listing_pending: bool = False,
    ) -> None:
        """One pass of ``mirror``, begun when its store's counts were ``before``, and the objects
        that failed in it, under the URL the user named. What the store sent since the last pass
        (files fetched when a reader opened them) is counted too. ``listing_pending``: the pass
        returned while its listing went on, so the next pass is due at once, however idle."""
        entry = self._entries.get(id(mirror))
        if entry is None:
            entry = self._entries[id(mirror)] = _Entry(url, mirror.url.scheme, mark=before)
        now = replace(mirror.store.stats)
        entry.requests += now.requests - entry.mark.requests
        entry.body_bytes += now.body_bytes - entry.mark.body_bytes
        entry.lists += now.lists - entry.mark.lists
        entry.mark, entry.store = now, mirror.store
        entry.passes += 1
        lists = now.lists - before.lists
        entry.last_lists, entry.last_other = lists, max(0, now.requests - before.requests - lists)
        entry.newest_upload = mirror.newest_upload()
        entry.errors = list(errors)
        entry.listed_every = cost.listing_interval(self._idle(entry), self.rescan_secs)
        entry.next_listing = time.monotonic() + (0.0 if listing_pending else entry.listed_every)

    @staticmethod
    def _idle(entry: _Entry) -> float | None:
        return None if entry.newest_upload is None else max(0.0, time.time() - entry.newest_upload)

    def costs(self) -> tuple[cost.PrefixCost, ...]:
        """Each watched prefix's cost so far, in the order they were first synced."""
        found = []
        for entry in list(self._entries.values()):  # a copy: the watcher's thread may add one meanwhile
            priced = self.price_custom or not custom_endpoint(entry.scheme)
            # An idle poll is the last pass's requests; after a first pass only its listing recurs.
            other = entry.last_other if entry.passes > 1 else 0
            every = entry.listed_every or self.rescan_secs
            usd = cost.usd_per_day(entry.scheme, entry.last_lists, other, every) if priced else None
            # and what its store sent since the last pass (a file fetched when a reader opened it)
            now = replace(entry.store.stats) if entry.store is not None else entry.mark
            requests = entry.requests + now.requests - entry.mark.requests
            body_bytes = entry.body_bytes + now.body_bytes - entry.mark.body_bytes
            lists = entry.lists + now.lists - entry.mark.lists
            found.append(cost.PrefixCost(entry.url, requests, lists, body_bytes, self._idle(entry), every, usd))
        return tuple(found)
