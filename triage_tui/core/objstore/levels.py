"""A prefix's listing that lists the directories a layout says are written once (a checkpoint's:
shards, and files fetched when a check opens them) once, and never again while they are there.

The first pass lists the prefix whole (pages of 1 000 keys: the fewest requests). From what it
found, the directories a layout names (``written_once``: an HF ``checkpoint-N/``, a SpecForge
``epoch_E_step_S/``) whose newest object is older than ``tuning.SETTLED_SECS`` (an upload that
may still be under way is listed again) are kept as listed. A later pass walks down one level
at a time (a listing with the delimiter "/", ``Store.directory``) through the directories above
such a directory, takes a kept directory's objects from what it kept while its parent's listing
still names it, and lists every other directory below whole. An idle pass then lists no key of a
checkpoint, and sends one request per directory above a checkpoint (a run's) and one per other
directory below those (an event-file folder), whatever the shards. A walk is taken only when it
sends no more requests than the whole listing would (a few runs with small checkpoints are
cheaper listed whole: their keys then come back with the pages).

A directory right below the prefix (a sweep's run) whose newest object is as old as the first of
``tuning.IDLE_LISTING_TIERS`` is kept too, whole, and listed again only at its tier (idle 30 min:
every minute; 6 h: 5 min; 2 d: 15 min): a bucket of many finished runs and a few live ones is then
walked through the live ones alone, not listed whole at every rescan because one run is written.
A walk's cost counts each such directory whose tier has come and the prefix's own level a page per
1 000 runs: runs that went idle together come due together, and are then cheaper listed whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from functools import partial

from triage_tui.core.objstore import budget, cost, tuning
from triage_tui.core.objstore.store import Listing, ObjectMeta, ObjectMissing, Store, UnlistableKey

PAGE_KEYS = 1000  # keys in one listing page (ListObjectsV2's MaxKeys default; GCS's too)


def _parent(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


@dataclass
class LevelListing:
    """The listing of ``prefix`` in ``store``; ``written_once(directory)`` (a path relative to
    ``prefix``, no trailing "/"): whether a layout says that directory is written once."""

    store: Store
    prefix: str
    written_once: Callable[[str], bool]
    # The directories kept as listed (relative to prefix) -> their objects.
    _kept: dict[str, tuple[ObjectMeta, ...]] = field(default_factory=dict, init=False)
    # The idle directories right below the prefix -> (their objects, time.monotonic() they are listed again).
    _idle: dict[str, tuple[tuple[ObjectMeta, ...], float]] = field(default_factory=dict, init=False)
    _reused: set[str] = field(default_factory=set, init=False)  # the idle ones this pass did not list
    _above: frozenset[str] = field(default=frozenset(), init=False)  # the directories above a kept one ("" too)
    _walk_requests: int = field(default=0, init=False)  # what a walk would send, from the last pass
    _whole_requests: int = field(default=0, init=False)  # what a whole listing would send
    _pool: budget.RequestPool = field(init=False)
    walked: bool = field(default=False, init=False)  # the last pass walked (for the tests and the benchmark)

    def __post_init__(self) -> None:
        self._pool = budget.RequestPool(tuning.FETCH_THREADS)

    def listing(self, progress: budget.ListingProgress | None = None) -> Listing:
        """This pass's listing; ``progress`` holds a whole listing's keys so far while its pages come."""
        kept = bool(self._kept or self._idle)  # a walk has something to pass by
        # An idle directory whose tier has come is listed by the walk: one request at least each (10 000
        # runs gone idle together come due together, and were 10 000 requests where the whole listing is 20)
        clock = time.monotonic()
        due = sum(1 for _, listed_again in self._idle.values() if clock >= listed_again)
        walk = self._walk_requests + due
        self.walked = kept and self.store.lists_by_level and walk <= self._whole_requests
        self._reused = set()
        found = self._walk() if self.walked else self.store.listing(self.prefix, progress)
        if not found.stopped and not found.unreadable:
            self._learn(found.objects)
        else:  # a partial listing teaches nothing: the next pass lists whole
            self._kept, self._above, self._idle = {}, frozenset(), {}
        return found

    def _rel(self, key: str) -> str:
        return key[len(self.prefix) :]

    def _learn(self, objects: tuple[ObjectMeta, ...]) -> None:
        """Which directories to keep, and what a walk and a whole listing would cost next time."""
        groups: dict[str, list[ObjectMeta]] = {}
        for meta in objects:
            parts = self._rel(meta.key).split("/")[:-1]
            for depth in range(len(parts)):  # the outermost directory a layout says is written once
                directory = "/".join(parts[: depth + 1])
                if self.written_once(directory):
                    groups.setdefault(directory, []).append(meta)
                    break
        settled_before = time.time() - tuning.SETTLED_SECS
        self._kept = {d: tuple(ms) for d, ms in groups.items() if max(m.mtime for m in ms) <= settled_before}
        above = {""}
        for directory in self._kept:
            parts = directory.split("/")
            above.update("/".join(parts[:i]) for i in range(1, len(parts)))
        self._above = frozenset(above)
        whole_below: set[str] = set()  # the directories a walk lists whole
        for meta in objects:
            rel = self._rel(meta.key)
            if self._kept_on_path(rel):
                continue
            directory = _parent(rel)
            while directory not in self._above:
                child, directory = directory, _parent(directory)
                if directory in self._above:
                    whole_below.add(child)
        self._learn_idle(objects)
        # What a walk sends: a request per directory it lists, none below an idle one not yet due, and
        # the prefix's own level a page per 1 000 of its entries (a sweep's runs).
        listed = [d for d in (*self._above, *whole_below) if d == "" or d.split("/")[0] not in self._idle]
        entries = {self._rel(meta.key).split("/", 1)[0] for meta in objects}
        self._walk_requests = len(listed) + max(0, -(-len(entries) // PAGE_KEYS) - 1)
        self._whole_requests = max(1, -(-len(objects) // PAGE_KEYS))

    def _learn_idle(self, objects: tuple[ObjectMeta, ...]) -> None:
        """The directories right below the prefix idle for long, kept until their tier's listing."""
        below: dict[str, list[ObjectMeta]] = {}
        for meta in objects:
            rel = self._rel(meta.key)
            if "/" in rel:
                below.setdefault(rel.split("/", 1)[0], []).append(meta)
        now, clock = time.time(), time.monotonic()
        idle: dict[str, tuple[tuple[ObjectMeta, ...], float]] = {}
        for directory, metas in below.items():
            quiet = now - max(m.mtime for m in metas)
            if cost.idle_tier(quiet) is None:
                continue
            # one not listed this pass keeps its time; one listed now is listed again a tier later
            due = self._idle[directory][1] if directory in self._reused else clock + cost.listing_interval(quiet, 0.0)
            idle[directory] = (tuple(metas), due)
        self._idle = idle

    def _kept_on_path(self, rel: str) -> list[str]:
        parts = rel.split("/")[:-1]
        return [d for d in ("/".join(parts[: i + 1]) for i in range(len(parts))) if d in self._kept]

    def _key(self, directory: str) -> str:
        return self.prefix + directory + "/" if directory else self.prefix

    def _walk(self) -> Listing:
        """The prefix one level at a time through the directories above a kept one (each level's
        directories listed at once, through the request pool)."""
        spending = budget.current()

        def under(call: Callable[[], Listing | tuple[list[ObjectMeta], list[str]]]) -> object:
            with budget.spending(spending):
                return call()

        objects: list[ObjectMeta] = []
        unreadable: list[tuple[str, str]] = []
        stopped = ""
        level = [""]
        while level:
            asked: list[tuple[str, Future[object]]] = [
                (d, self._pool.submit(partial(under, partial(self._one_level, d)))) for d in level
            ]
            wait([f for _, f in asked])
            whole: list[tuple[str, Future[object]]] = []
            level = []
            for directory, future in asked:
                result = future.result()  # BadInput: the prefix cannot be listed, as a whole listing's
                if isinstance(result, Listing):  # a key the client cannot parse: listed whole instead
                    objects += result.objects
                    unreadable += result.unreadable
                    stopped = stopped or result.stopped
                    continue
                assert isinstance(result, tuple)
                here, subdirs = result
                objects += here
                for subdir in subdirs:
                    child = self._rel(subdir).rstrip("/")
                    if not subdir.startswith(self._key(directory)) or child == directory:
                        continue  # not strictly below (a malformed answer): never a loop
                    if child in self._idle and time.monotonic() < self._idle[child][1]:
                        objects += self._idle[child][0]  # idle for long, named still: not listed before its tier
                        self._reused.add(child)
                    elif child in self._kept:
                        objects += self._kept[child]  # named by its parent still: unchanged
                    elif child in self._above:
                        level.append(child)
                    else:
                        whole.append((child, self._pool.submit(partial(under, partial(self._whole, child)))))
            wait([f for _, f in whole])
            for _, future in whole:
                result = future.result()
                assert isinstance(result, Listing)
                objects += result.objects
                unreadable += result.unreadable
                stopped = stopped or result.stopped
            if len(objects) > tuning.MAX_LISTED_KEYS:
                del objects[tuning.MAX_LISTED_KEYS :]
                return Listing(tuple(objects), tuple(unreadable), "listing stopped: the most keys one listing holds")
        return Listing(tuple(objects), tuple(unreadable), stopped)

    def _one_level(self, directory: str) -> Listing | tuple[list[ObjectMeta], list[str]]:
        key = self._key(directory)
        try:
            return self.store.directory(key)
        except UnlistableKey:
            return self.store.listing(key)
        except ObjectMissing:
            return self.store.listing(key)  # a bucket gone: said as a whole listing says it

    def _whole(self, directory: str) -> Listing:
        return self.store.listing(self._key(directory))
