"""A bucket prefix kept as a local tree: one listing a pass, then only what changed is fetched.

Each object is handled as a policy says, by its key: followed (a growing log or event file: only
its appended bytes, ``follow``), read whole when its ETag changes (manifests, configs, the small
files a scan opens; from the cache when it holds that ETag), or left a placeholder (a sparse file
of the object's size with no byte fetched: weights, which discovery recognises by name and size
alone and the checks fetch by range, ``sparse``), or left a placeholder fetched whole when a reader
first opens it (``deferred``: what a layout says no scan reads). A pass over an unchanged prefix sends the
listing's requests and nothing else (the directories a layout says are written once are listed
once: ``levels``). The local files carry the objects' last-modified times, so
the clock-based flags see the upload times.

A pass spends within its budget (``objstore.budget``): its listing holds at most
``tuning.MAX_LISTED_KEYS`` keys, every request ends by the pass's deadline
(``tuning.PASS_DEADLINE_SECS``) or at once when the pass is stopped, the pass fetches at most
``tuning.PASS_MAX_BYTES`` and a followed object is read to ``tuning.FOLLOW_MAX_BYTES`` at most, by
ranged reads of ``tuning.MAX_POLL_BYTES``. What a pass did not reach is an error of that object
and the next pass goes on from there. A followed object not fetched yet is there as a one-byte
hole, so that its run is discovered at once and its error, if any, said on it. A pass that waits
``wait_secs`` (the TUI's) waits so long for its first listing too: the directories listed whole
by then are mirrored, and the next pass goes on with the pages that came since.

Keys are untrusted: a key that is not a plain relative path (an empty, ``.`` or ``..`` component,
a NUL, an over-long name) or that collides with another key's directory is not mirrored and is
reported. One object that cannot be read is an error of that object only; the rest are mirrored.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal

from triage_tui.core.errors import BadInput, SourceError
from triage_tui.core.objstore import budget, deferred, tuning
from triage_tui.core.objstore.cache import ObjectCache, default_cache
from triage_tui.core.objstore.follow import ObjectFollower, read_range
from triage_tui.core.objstore.levels import LevelListing
from triage_tui.core.objstore.store import Listing, ObjectMeta, ObjectMissing, Store, store_for
from triage_tui.core.objstore.url import ObjectURL

How = Literal["follow", "whole", "deferred", "placeholder", "skip"]
NAME_MAX = 255  # bytes of one path component (POSIX NAME_MAX on Linux filesystems)
# How the objects are handled whose local files are made without a request (their bytes are
# fetched when a reader asks for them).
_MADE_HERE = ("placeholder", "deferred")


# Every placeholder a mirror in this process wrote, by its local absolute path: a reader handed a
# path (a check's checkpoint) asks ``placeholder_of`` before it reads, and reads the object by
# range instead of a placeholder's zeros (formats.remote_safetensors).
_PLACEHOLDERS: dict[str, tuple[Store, ObjectMeta]] = {}
_PLACEHOLDERS_LOCK = threading.Lock()


def placeholder_of(path: str | os.PathLike[str]) -> tuple[Store, ObjectMeta] | None:
    """The store and listed object whose placeholder ``path`` is; None for any other file."""
    with _PLACEHOLDERS_LOCK:
        return _PLACEHOLDERS.get(os.path.abspath(path))


def _set_placeholder(path: Path, entry: tuple[Store, ObjectMeta] | None) -> None:
    with _PLACEHOLDERS_LOCK:
        if entry is None:
            _PLACEHOLDERS.pop(os.path.abspath(path), None)
        else:
            _PLACEHOLDERS[os.path.abspath(path)] = entry


def fill_placeholders(root: str | os.PathLike[str]) -> int:
    """Every placeholder at or below ``root`` given its object's bytes (by range, a chunk at a time,
    never whole in memory), so that a reader of whole files (a remap copying a checkpoint) reads
    the object; the bytes fetched. BadInput naming the URL when one cannot be read."""
    base = os.path.abspath(root)
    deferred.materialize_under(base)  # the small files left for their reader: read whole too
    with _PLACEHOLDERS_LOCK:
        found = [
            (path, entry) for path, entry in _PLACEHOLDERS.items() if path == base or path.startswith(base + os.sep)
        ]
    fetched = 0
    for path, (store, meta) in found:
        fd = os.open(path, os.O_WRONLY)
        try:
            for start in range(0, meta.size, tuning.RANGE_CHUNK_BYTES):
                stop = min(meta.size, start + tuning.RANGE_CHUNK_BYTES)
                view = memoryview(read_range(store, meta.key, start, stop, meta.etag))
                position = start
                while view:
                    written = os.pwrite(fd, view, position)
                    view, position = view[written:], position + written
        finally:
            os.close(fd)
        os.utime(path, (meta.mtime, meta.mtime))
        _set_placeholder(Path(path), None)
        fetched += meta.size
    return fetched


@dataclass(frozen=True)
class MirrorPass:
    """One pass: objects listed, requests sent and object-body bytes received in it, the relative
    paths written (appended, rewritten or created) and removed, and the objects that failed."""

    listed: int
    requests: int
    body_bytes: int
    written: tuple[str, ...]
    removed: tuple[str, ...]
    errors: tuple[SourceError, ...]
    cut_short: bool = False  # it ran into its deadline or byte budget: objects are left for the next
    running: int = 0  # fetches still under way when it returned (the TUI's passes do not wait for them)
    # Its listing was still under way when it returned (a TUI's first listing, of many pages): it
    # mirrored the directories listed whole so far, removed nothing, and the next pass goes on.
    partial: bool = False


def local_relative(key: str) -> str | None:
    """``key`` as a safe relative path, or None when it is not one."""
    parts = key.split("/")
    if not key or key.startswith("/") or "\0" in key or "\\" in key:
        return None
    if any(p in ("", ".", "..") or len(p.encode(errors="surrogateescape")) > NAME_MAX for p in parts):
        return None
    return key


def listed_whole(objects: list[ObjectMeta]) -> tuple[ObjectMeta, ...]:
    """Of the objects a listing still under way has listed (in key order, as S3's and GCS's
    listings give them), those whose directory it has passed: each directory's keys come
    together, so one whose last key came before the last listed is whole. An object in the
    directory of the last key listed, or in one above it, may have siblings still to come."""
    if not objects:
        return ()
    last = objects[-1].key.split("/")
    kept = []
    for meta in objects:
        parts = meta.key.split("/")
        same = 0
        while same < len(parts) - 1 and same < len(last) and parts[same] == last[same]:
            same += 1
        if same < len(parts) - 1:  # it parts from the last key at a directory of its own: listed whole
            kept.append(meta)
    return tuple(kept)


@dataclass
class _Local:
    meta: ObjectMeta
    how: How
    follower: ObjectFollower | None = None
    behind: bool = False  # a followed object read short of its listed size: the next pass reads on
    complaint: str = ""  # why it was read short: said again by each pass until it changes


def _stand_in(path: Path, meta: ObjectMeta) -> None:
    """A followed object not fetched yet as a file of one zero byte, a hole: its run is found
    (discovery passes over an empty event file) and its error said on it; the readers take a
    zero tail for bytes still to land, and the first fetch writes over it."""
    # an object listed empty is not stood in for; a file the first poll created before it failed is
    if meta.size and (not path.exists() or path.stat().st_size == 0):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(1)
        os.utime(path, (meta.mtime, meta.mtime))


def _hole_of_size(path: Path, size: int) -> None:
    """``path`` as a file of ``size`` bytes, all a hole: nothing fetched, no block written."""
    with open(path, "wb") as f:
        f.truncate(size)


def _unfetched_stand_in(path: Path, meta: ObjectMeta, url: str, failed: BadInput) -> bool:
    """A JSON object a pass could not fetch (its deadline passed, the server failed) as a
    placeholder whose reader is told why at once, with no request (``deferred``); whether it was
    made (what an earlier pass fetched stays until a fetch replaces it). The run's files are then
    the bucket's, so discovery takes the same config.json as on disk, where its absence had a scan
    fall back to a checkpoint's config.json and fetch that, one GET after another, past the pass's
    deadline."""
    if path.exists():
        return False

    def unfetched() -> None:
        raise BadInput(url, failed.what)

    _hole_of_size(path, meta.size)
    os.utime(path, (meta.mtime, meta.mtime))
    deferred.register(path, unfetched)
    return True


@dataclass
class PrefixMirror:
    """``url`` (a prefix) mirrored under ``root``; ``sync()`` brings the local tree up to date."""

    url: ObjectURL
    root: Path
    policy: Callable[[str], How]
    # One object's key below ``url`` to mirror alone (a file's URL): asked for by its own key, the
    # rest of the prefix neither listed nor fetched.
    only_key: str | None = None
    # Set when the pass must end now (the TUI quits): every request of the pass ends at once.
    stop: threading.Event | None = None
    # How long ``sync`` waits for its fetches (None: until they end, by the pass's deadline): the TUI
    # waits ``tuning.LIVE_PASS_SECS`` and leaves the rest running, their results taken by a later pass.
    wait_secs: float | None = None
    # Which of the listed relative paths the policy reads whole are only fetched when a reader opens
    # them (``objstore.deferred``): a layout's files that no scan reads (runs/remote.py).
    defer: Callable[[Collection[str]], frozenset[str]] | None = None
    # Which directories (relative paths) a layout says are written once: listed once, then kept
    # while their parent names them (``objstore.levels``).
    written_once: Callable[[str], bool] | None = None
    store: Store = field(init=False)
    _listing: LevelListing = field(init=False)
    cache: ObjectCache | None = field(init=False)
    _known: dict[str, _Local] = field(default_factory=dict, init=False)
    # The fetches under way, by relative path: each object is fetched by one task at a time.
    _running: dict[str, Future[tuple[str, bool, SourceError | None]]] = field(default_factory=dict, init=False)
    _pool: budget.RequestPool = field(init=False)
    # A first listing still under way, left running by a pass that did not wait for it (``_list``).
    _first_listing: tuple[Future[Listing], budget.ListingProgress] | None = field(default=None, init=False)
    _listed: bool = field(default=False, init=False)  # a listing has ended: passes wait for theirs

    def __post_init__(self) -> None:
        self.store = store_for(self.url)
        self._pool = budget.RequestPool(tuning.FETCH_THREADS)  # daemon threads: never hold an exit
        self.cache = default_cache()
        self._listing = LevelListing(self.store, self.url.prefix(), self.written_once or (lambda _: False))
        if not self.root.is_file():  # a file's URL mirrored before in this process: its object is there
            self.root.mkdir(parents=True, exist_ok=True)

    def sync(self) -> MirrorPass:
        """One listing of the prefix, then each changed object fetched as the policy says.
        BadInput when the prefix itself cannot be listed."""
        requests0, bytes0 = self.store.stats.requests, self.store.stats.body_bytes
        prefix = self.url.prefix()
        listing, pending, fetch_wait = self._list()
        spending = budget.PassBudget.starting_now(self.stop)
        seen: dict[str, ObjectMeta] = {}
        errors = [SourceError("objstore", self.store.url(where), why) for where, why in listing.unreadable]
        if listing.stopped:
            errors.append(SourceError("objstore", self.url.text, listing.stopped))
        written: list[str] = []
        for meta in listing.objects:
            rel = local_relative(meta.key[len(prefix) :].rstrip("/") if meta.size == 0 else meta.key[len(prefix) :])
            if rel is None:
                errors.append(SourceError("objstore", self.store.url(meta.key), "key is not a plain relative path"))
                continue
            seen[rel] = meta
        directories = {rel.rsplit("/", 1)[0] for rel in seen if "/" in rel}
        directories = {"/".join(d.split("/")[: i + 1]) for d in directories for i in range(d.count("/") + 1)}
        for rel in sorted(set(seen) & directories):
            if seen[rel].size:
                url = self.store.url(seen[rel].key)
                errors.append(SourceError("objstore", url, "an object of the same name as a directory of others"))
            del seen[rel]  # an empty one is a console's folder marker: the directory says it all
        later = self.defer(seen.keys()) if self.defer is not None else frozenset()
        work = [(rel, meta, how) for rel, meta in seen.items() if (how := self._how(rel, later)) != "skip"]
        errors += self._finished(written)  # fetches an earlier pass left running, ended since
        # an idle pass stops here; an object still being fetched by an earlier pass is left to it
        work = [item for item in work if self._changed(*item) and item[0] not in self._running]
        # what a scan reads first, the placeholders (a checkpoint's shards, no request) after: a
        # run's rows do not wait on its 50 shards' files being made
        work.sort(key=lambda item: item[2] in _MADE_HERE)
        fetched = {rel for rel, _, _ in work} | set(self._running)
        for rel in seen:  # an object read short and unchanged since: said again, as long as it is so
            known = self._known.get(rel)
            if rel not in fetched and known is not None and known.complaint:
                errors.append(SourceError("objstore", self.store.url(known.meta.key), known.complaint))
        for rel, meta, how in work:
            if how == "follow":
                _stand_in(self.root / rel, meta)  # its run is found now, however long its fetch takes

        # The first pass of a sweep is thousands of small GETs: a pool keeps that many in flight
        # (the clients release the GIL while they wait); each object is one task's.
        def update(item: tuple[str, ObjectMeta, How]) -> tuple[str, bool, SourceError | None]:
            with budget.spending(spending):
                return self._update_one(*item)

        for item in work:
            self._running[item[0]] = self._pool.submit(partial(update, item))
        if work and self.wait_secs is None:
            wait(list(self._running.values()))
        elif work:  # a live pass waits for what a scan reads, not for the placeholders made after it
            wait([self._running[rel] for rel, _, how in work if how not in _MADE_HERE], timeout=fetch_wait)
        errors += self._finished(written)
        hidden = tuple(where[len(prefix) :] for where, _ in listing.unreadable)
        # what lies under a prefix that could not be listed, past where a listing stopped or not
        # listed yet, is unknown now, not gone: kept (and what is being fetched, until its fetch ends)
        known_now = list(self._known)
        kept = listing.stopped or pending
        unlisted = [] if kept else [rel for rel in known_now if rel not in seen and rel not in self._running]
        removed = [rel for rel in unlisted if not rel.startswith(hidden)]
        for rel in removed:
            self._remove(rel)
        return MirrorPass(
            listed=len(listing.objects),
            requests=self.store.stats.requests - requests0,
            body_bytes=self.store.stats.body_bytes - bytes0,
            written=tuple(written),
            removed=tuple(sorted(removed)),
            errors=tuple(errors),
            cut_short=spending.cut_short(),
            running=len(self._running),
            partial=pending,
        )

    def _list(self) -> tuple[Listing, bool, float | None]:
        """This pass's listing, whether it is part of one still under way, and how long the pass
        may wait for its fetches. A pass that waits ``wait_secs`` (the TUI's) waits no longer for
        its first listing and fetches together, and leaves the listing running: the runs of its
        first pages (of 1 000 keys, one after another) are shown while the rest is listed."""
        if self._first_listing is None and (self.wait_secs is None or self._listed or self.only_key is not None):
            listing = self._whole_listing(None)
            self._listed = True
            return listing, False, self.wait_secs
        if self._first_listing is None:
            progress = budget.ListingProgress()
            self._first_listing = (self._pool.submit(partial(self._whole_listing, progress)), progress)
        future, progress = self._first_listing
        deadline = time.monotonic() + (self.wait_secs or 0.0)  # None: a scan after a live pass, waits
        wait([future], timeout=self.wait_secs)
        left = None if self.wait_secs is None else max(0.0, deadline - time.monotonic())
        if not future.done():
            return Listing(listed_whole(progress.keys_so_far())), True, left
        self._first_listing = None
        listing = future.result()  # BadInput: the prefix cannot be listed (the next pass lists again)
        self._listed = True
        return listing, False, left

    def _whole_listing(self, progress: budget.ListingProgress | None) -> Listing:
        """The prefix listed (under its own deadline, ``tuning.LIST_DEADLINE_SECS``, not the pass's)."""
        with budget.spending(budget.PassBudget(math.inf, 0, self.stop)):
            return self._listing.listing(progress) if self.only_key is None else self._only_object()

    def _finished(self, written: list[str]) -> list[SourceError]:
        """The fetches that ended since the last look, taken off ``_running``: the paths they wrote
        appended to ``written``, their errors returned."""
        errors = []
        for rel, future in list(self._running.items()):
            if future.done():
                del self._running[rel]
                _, wrote, error = future.result()
                if wrote:
                    written.append(rel)
                if error is not None:
                    errors.append(error)
        return errors

    def newest_upload(self) -> float | None:
        """The last-modified time of the newest object the last pass listed (None: none listed)."""
        # Fetches a live pass left running add to the book from the pool's threads: read from a copy
        # taken in one step (list() of a dict holds the GIL throughout), never iterated as it grows.
        known = list(self._known.values())
        return max((entry.meta.mtime for entry in known), default=None)

    def _how(self, rel: str, later: frozenset[str]) -> How:
        how = self.policy(rel)
        return "deferred" if how == "whole" and rel in later else how

    def _only_object(self) -> Listing:
        """``only_key`` as a listing (one HEAD: object_store lists a key's "directory", not the key)."""
        assert self.only_key is not None
        try:
            return Listing((self.store.head(self.only_key),))
        except ObjectMissing:
            return Listing(())

    def _changed(self, rel: str, meta: ObjectMeta, how: How) -> bool:
        known = self._known.get(rel)
        if known is not None and (known.how, how) == ("whole", "deferred"):
            how = "whole"  # fetched already (read before a newer checkpoint came): kept as it is
        if known is None or known.how != how or known.behind or not (self.root / rel).exists():
            return True
        return known.meta.size != meta.size or known.meta.etag != meta.etag or known.meta.mtime != meta.mtime

    def _update_one(self, rel: str, meta: ObjectMeta, how: How) -> tuple[str, bool, SourceError | None]:
        """(rel, whether the local file was written, the error that stopped it)."""
        try:
            wrote, complaint = self._update(rel, meta, how)
            return rel, wrote, SourceError("objstore", self.store.url(meta.key), complaint) if complaint else None
        except BadInput as err:
            where = err.path or self.store.url(meta.key)
            if how == "follow":
                _stand_in(self.root / rel, meta)
            elif how == "whole" and rel.endswith(".json") and _unfetched_stand_in(self.root / rel, meta, where, err):
                self._known[rel] = _Local(meta, "deferred", behind=True)  # the next pass fetches it again
            return rel, False, SourceError("objstore", where, err.what)
        except OSError as err:
            return rel, False, SourceError("objstore", str(self.root / rel), f"cannot write: {err.strerror or err}")

    def _update(self, rel: str, meta: ObjectMeta, how: How) -> tuple[bool, str]:
        """Whether the local file was written, and what stopped it short ("" when nothing did)."""
        known = self._known.get(rel)
        if known is not None and known.how != how:
            known = None
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if how != "placeholder":
            _set_placeholder(path, None)
        if how != "deferred":
            deferred.forget(path)
        if how == "follow":
            follower = known.follower if known is not None and known.follower is not None else None
            wrote, complaint = self._follow(rel, meta, follower or ObjectFollower(self.store, meta.key), path)
            if not wrote:
                return False, complaint
        else:
            if known is not None and known.meta.size == meta.size and known.meta.etag == meta.etag:
                return False, ""
            if how == "whole":
                self._write_whole(path, meta)
            elif how == "deferred":
                _hole_of_size(path, meta.size)
                deferred.register(path, lambda: self._write_whole(path, meta, keep_mtime=True))
            else:
                _hole_of_size(path, meta.size)
                _set_placeholder(path, (self.store, meta))
            self._known[rel] = _Local(meta, how)
            complaint = ""
        os.utime(path, (meta.mtime, meta.mtime))
        return True, complaint

    def _follow(self, rel: str, meta: ObjectMeta, follower: ObjectFollower, path: Path) -> tuple[bool, str]:
        """The object's new bytes appended to ``path`` (all of it again when it was replaced), one
        bounded poll at a time, as far as the pass's byte budget and ``tuning.FOLLOW_MAX_BYTES``
        allow; whether ``path`` was written, and why it stops short of the listed size."""
        spending = budget.current()
        # recorded first: a poll that fails leaves the follower as far as the file is written
        self._known[rel] = _Local(meta, "follow", follower, behind=True)
        wrote = not path.exists()
        with open(path, "r+b" if path.exists() else "w+b") as f:
            while True:
                granted = spending.grant(tuning.MAX_POLL_BYTES) if spending is not None else tuning.MAX_POLL_BYTES
                step = follower.poll(meta, granted)
                if spending is not None:
                    spending.refund(granted - len(step.data))
                if step.restarted or (step.data and step.size == len(step.data)):
                    f.truncate(0)  # read from its start: what the file held goes (a stand-in's zero too)
                if step.data:
                    f.seek(step.size - len(step.data))  # where the last poll ended
                    f.write(step.data)
                wrote = wrote or bool(step.data) or step.restarted
                if not step.remaining or not step.data:
                    break
        behind = step.remaining > 0 and not step.capped
        complaint = ""
        if step.capped:
            complaint = f"listed as {meta.size} bytes: read to byte {step.size}, as far as a followed object is read"
        elif behind:
            complaint = f"read to byte {step.size} of {meta.size}: this pass's byte budget is spent, the next reads on"
        self._known[rel] = _Local(meta, "follow", follower, behind, complaint)
        return wrote, complaint

    def _write_whole(self, path: Path, meta: ObjectMeta, *, keep_mtime: bool = False) -> None:
        if meta.size > tuning.MAX_WHOLE_BYTES:
            raise BadInput(
                self.store.url(meta.key), f"{meta.size} bytes: larger than {tuning.MAX_WHOLE_BYTES} read whole"
            )
        url = self.store.url(meta.key)
        data = self.cache.get(url, meta.etag) if self.cache is not None else None
        if data is None or len(data) != meta.size:
            data = read_range(self.store, meta.key, 0, meta.size, meta.etag)
            if self.cache is not None:
                self.cache.put(url, meta.etag, data)
        tmp = path.with_name(path.name + ".triage-tmp")
        tmp.write_bytes(data)
        if keep_mtime:  # filled when first read: the file keeps the object's upload time
            os.utime(tmp, (meta.mtime, meta.mtime))
        os.replace(tmp, path)

    def _remove(self, rel: str) -> None:
        del self._known[rel]
        path = self.root / rel
        _set_placeholder(path, None)
        deferred.forget(path)
        path.unlink(missing_ok=True)
        parent = path.parent
        while parent != self.root and parent.is_relative_to(self.root):
            try:
                parent.rmdir()  # only when empty
            except OSError:
                break
            parent = parent.parent
