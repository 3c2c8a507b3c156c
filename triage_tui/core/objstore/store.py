"""One client per bucket: list a prefix, read an object whole or a byte range of it, its metadata.

Two ways in, chosen by scheme (``tuning.NATIVE_SCHEMES``): obstore (the Rust ``object_store``
crate's client) for ``s3://`` and ``gs://``, and fsspec for any other fsspec URL (``az://``,
``hf://``, ``memory://``, ...: whatever fsspec and the scheme's package read). Neither is a core
dependency: without the extra a URL needs, opening it is one BadInput naming what to install.

Credentials come only from each provider's standard chain, never from triage's own settings:
- S3: with ``AWS_ACCESS_KEY_ID`` in the environment, obstore reads the standard variables itself
  (``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``); otherwise botocore's chain
  (the AWS SDK's: profiles and ``AWS_PROFILE``, SSO, ``credential_process``, web identity,
  containers, instance roles), which obstore alone lacks for profiles; without botocore, obstore's
  own chain (web identity, containers, instance roles). The endpoint of an S3-compatible store is
  the standard ``AWS_ENDPOINT_URL`` (read by obstore; plain http allowed only when it says http).
- GCS: obstore's chain: ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's application default
  credentials (``~/.config/gcloud/application_default_credentials.json``), the metadata server.
  An emulator is the standard ``STORAGE_EMULATOR_HOST`` (Google's client libraries' and gcsfs'
  variable: ``host:port`` or a URL), asked without credentials as those clients ask it.
- fsspec URLs: whatever the scheme's fsspec package reads (s3fs: botocore; gcsfs: google-auth).

Every call runs under ``tuning.DEADLINE_SECS`` in all (a listing under ``LIST_DEADLINE_SECS``)
and within its pass's deadline (``budget``), each try under ``REQUEST_TIMEOUT_SECS``; every try
goes through the one request pool (``MAX_IN_FLIGHT`` at once) and is abandoned, not waited for,
when its deadline passes or its pass is stopped. A 5xx, a 429, a timeout or a dropped connection
is tried again (at most ``MAX_RETRIES`` times, with backoff) and anything else fails at once. A
store that has answered no try for ``STALLED_SECS`` is not asked again (but for a listing) until
one is answered. A listing holds at most ``MAX_LISTED_KEYS`` keys. A failure is
``BadInput(url, one line)``; callers turn it into their run's ``SourceError``. ``Store.stats``
counts requests and bytes of object bodies.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from triage_tui.core.errors import BadInput
from triage_tui.core.objstore import budget, tuning
from triage_tui.core.objstore.budget import KeySink
from triage_tui.core.objstore.failures import classify, redact
from triage_tui.core.objstore.url import ObjectURL, parse_url

if TYPE_CHECKING:
    from obstore import GetOptions
    from obstore import ObjectMeta as ObstoreMeta
    from obstore.store import ClientConfig, GCSConfig, RetryConfig, S3Config, S3Credential

T = TypeVar("T")

# Which extra brings which scheme's client (pyproject.toml [project.optional-dependencies]).
EXTRA_FOR_SCHEME = {"s3": "s3", "gs": "gcs"}


@dataclass(frozen=True)
class ObjectMeta:
    """What a listing says of one object: its key (relative to the bucket), size in bytes, ETag
    (without its quotes; "" where the store gives none) and last-modified time (seconds since the epoch)."""

    key: str
    size: int
    etag: str
    mtime: float

    def __post_init__(self) -> None:
        # One spelling for one ETag: GCS's XML API quotes it in a GET's or HEAD's answer but not in
        # a listing's, and S3 quotes it in both; compared as given, a GCS object would look
        # replaced between its listing and its read. RFC 9110 section 8.8.3: the quotes are syntax.
        if len(self.etag) >= 2 and self.etag[0] == self.etag[-1] == '"':
            object.__setattr__(self, "etag", self.etag[1:-1])


@dataclass
class StoreStats:
    """Requests sent (each try counts) and bytes of object bodies received, since the store opened."""

    requests: int = 0
    lists: int = 0
    body_bytes: int = 0


@dataclass(frozen=True)
class Listing:
    """One listing pass: the objects under a prefix, and the prefixes that could not be listed
    with why (a key there that the client cannot represent: an empty, "." or ".." segment);
    ``stopped``: why the listing ended before its last page ("" when it did not), its objects then
    those of the pages read."""

    objects: tuple[ObjectMeta, ...]
    unreadable: tuple[tuple[str, str], ...] = ()
    stopped: str = ""


class _Client(Protocol):
    def list_all(self, prefix: str, sink: KeySink) -> None: ...
    def list_raw(self, prefix: str, sink: KeySink) -> bool: ...
    def list_dir(self, prefix: str) -> tuple[list[ObjectMeta], list[str]]: ...
    def head(self, key: str) -> ObjectMeta: ...
    def get(self, key: str, start: int | None, end: int | None) -> tuple[bytes, ObjectMeta | None]: ...
    def put(self, key: str, path: str) -> None: ...


class ObjectMissing(BadInput):
    """The object or prefix is not in the bucket (404): a deleted run, not a broken one."""


class Unanswered(BadInput):
    """No answer within the deadline (the call's, or its pass's), or the pass was stopped: the
    request is abandoned where it stands, never waited for."""


class UnlistableKey(BadInput):
    """A listing page holds a key the client cannot represent (object_store's paths refuse empty,
    "." and ".." segments and control characters): the page fails as a whole."""


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, (int, float)):
        return float(value)
    return 0.0


# --- obstore -------------------------------------------------------------------------------------


def gcs_emulator() -> str:
    """The GCS emulator's base URL from ``STORAGE_EMULATOR_HOST`` ("" when unset); a bare
    ``host:port`` is plain http, as Google's client libraries read it."""
    host = os.environ.get("STORAGE_EMULATOR_HOST", "").strip().rstrip("/")
    return host if not host or "://" in host else f"http://{host}"


def _botocore_provider() -> tuple[Callable[[], S3Credential], str | None] | None:
    """botocore's credential chain as an obstore credential provider, with the profile's region;
    None without botocore or when the chain finds nothing (obstore's own chain then tries)."""
    try:
        import botocore.session
    except ImportError:
        return None
    session = botocore.session.get_session()
    credentials = session.get_credentials()
    if credentials is None:
        return None

    def provide() -> S3Credential:
        # get_frozen_credentials refreshes expiring ones (SSO, roles) itself; obstore asks again
        # once expires_at passes, so a refreshed token reaches it within this margin.
        frozen = credentials.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": datetime.now(timezone.utc) + timedelta(minutes=5),
        }

    return provide, session.get_config_variable("region")


class _Obstore:
    def __init__(self, url: ObjectURL) -> None:
        import obstore
        from obstore.store import GCSStore, S3Store

        self._obs = obstore
        self.scheme, self.bucket = url.scheme, url.bucket
        client_options: ClientConfig = {
            "timeout": timedelta(seconds=tuning.REQUEST_TIMEOUT_SECS),
            "connect_timeout": timedelta(seconds=tuning.CONNECT_TIMEOUT_SECS),
        }
        retry: RetryConfig = {"max_retries": 0}  # retried here, under one deadline for both clients
        if url.scheme == "s3":
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
            if endpoint.startswith("http://"):
                client_options["allow_http"] = True  # the user's own endpoint says plain http
            config: S3Config = {}
            provider = None
            if not os.environ.get("AWS_ACCESS_KEY_ID"):
                found = _botocore_provider()
                if found is not None:
                    provider, region = found
                    if region and not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
                        config["region"] = region
            self.store: Any = S3Store(
                url.bucket,
                config=config or None,
                client_options=client_options,
                retry_config=retry,
                credential_provider=provider,
            )
        else:
            emulator = gcs_emulator()
            gcs_config: GCSConfig = {}
            if emulator:
                # object_store's way to an emulator: a service account naming the base URL, no OAuth
                # (object_store gcp/credential.rs, ServiceAccountKey's gcs_base_url, disable_oauth).
                account = {
                    "gcs_base_url": emulator,
                    "disable_oauth": True,
                    "client_email": "",
                    "private_key": "",
                    "private_key_id": "",
                }
                gcs_config["service_account_key"] = json.dumps(account)
                client_options["allow_http"] = emulator.startswith("http://")
            self.store = GCSStore(
                url.bucket, config=gcs_config or None, client_options=client_options, retry_config=retry
            )

    @staticmethod
    def _meta(entry: ObstoreMeta) -> ObjectMeta:
        etag = str(entry.get("e_tag") or "")
        return ObjectMeta(str(entry["path"]), int(entry["size"]), etag, _epoch(entry.get("last_modified")))

    def list_all(self, prefix: str, sink: KeySink) -> None:
        for chunk in self._obs.list(self.store, prefix or None, chunk_size=tuning.LIST_CHUNK_KEYS):
            if not sink.add([self._meta(e) for e in chunk]):
                return  # the next page is never asked for

    def list_raw(self, prefix: str, sink: KeySink) -> bool:
        """Every key under ``prefix`` as S3 lists it, through botocore (which asks for keys
        URL-encoded and decodes them): the keys object_store refuses to parse (a control character)
        are listed too, so one such key hides nothing else. False off S3 or without botocore."""
        if self.scheme != "s3":
            return False
        try:
            import botocore.session
            from botocore.config import Config
        except ImportError:
            return False
        session = botocore.session.get_session()
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
        config = Config(
            connect_timeout=tuning.CONNECT_TIMEOUT_SECS,
            read_timeout=tuning.REQUEST_TIMEOUT_SECS,
            retries={"max_attempts": 1},  # retried by Store._call, under its deadline
        )
        client = session.create_client("s3", endpoint_url=endpoint, region_name=region, config=config)
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            found = []
            for item in page.get("Contents", ()):
                etag, mtime = str(item.get("ETag") or ""), _epoch(item.get("LastModified"))
                found.append(ObjectMeta(str(item["Key"]), int(item.get("Size") or 0), etag, mtime))
            if not sink.add(found):
                break
        return True

    def list_dir(self, prefix: str) -> tuple[list[ObjectMeta], list[str]]:
        found = self._obs.list_with_delimiter(self.store, prefix or None)
        subdirs = [p if p.endswith("/") else p + "/" for p in found["common_prefixes"]]
        return [self._meta(e) for e in found["objects"]], subdirs

    def head(self, key: str) -> ObjectMeta:
        return self._meta(self._obs.head(self.store, key))

    def get(self, key: str, start: int | None, end: int | None) -> tuple[bytes, ObjectMeta | None]:
        options: GetOptions | None = {"range": (start, end)} if start is not None and end is not None else None
        result = self._obs.get(self.store, key, options=options)
        return bytes(result.bytes()), self._meta(result.meta)

    def put(self, key: str, path: str) -> None:
        self._obs.put(self.store, key, Path(path))  # multipart above obstore's chunk size


# --- fsspec --------------------------------------------------------------------------------------


class _Fsspec:
    def __init__(self, url: ObjectURL) -> None:
        import fsspec

        # skip_instance_cache: a listing must show the bucket as it is now, never a cached one.
        self.fs = fsspec.filesystem(url.scheme, skip_instance_cache=True)
        self.root = url.bucket

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def _meta(self, info: dict) -> ObjectMeta:
        name = str(info.get("name", ""))
        key = name[len(self.root) + 1 :] if name.startswith(self.root + "/") else name.lstrip("/")
        etag = info.get("ETag") or info.get("etag") or info.get("md5Hash") or ""
        mtime = info.get("LastModified") or info.get("mtime") or info.get("updated") or info.get("created")
        if isinstance(mtime, str):
            try:
                mtime = datetime.fromisoformat(mtime.replace("Z", "+00:00"))
            except ValueError:
                mtime = None
        return ObjectMeta(key, int(info.get("size") or 0), str(etag), _epoch(mtime))

    def list_all(self, prefix: str, sink: KeySink) -> None:
        # fsspec's find returns the whole listing at once: the cap applies after it (a listing that
        # never ends is ended by its deadline, its pages held by the abandoned call until then)
        self.fs.invalidate_cache()
        path = self._path(prefix.rstrip("/")) if prefix else self.root
        found = self.fs.find(path, detail=True)
        sink.add([self._meta(info) for info in found.values() if info.get("type", "file") == "file"])

    def list_raw(self, prefix: str, sink: KeySink) -> bool:
        return False  # fsspec lists any key: list_all never meets an unlistable one

    def list_dir(self, prefix: str) -> tuple[list[ObjectMeta], list[str]]:
        raise NotImplementedError  # fsspec lists any key: list() never meets an unlistable one

    def head(self, key: str) -> ObjectMeta:
        self.fs.invalidate_cache()
        info = self.fs.info(self._path(key))
        if info.get("type") == "directory":
            raise FileNotFoundError(key)
        return self._meta(info)

    def get(self, key: str, start: int | None, end: int | None) -> tuple[bytes, ObjectMeta | None]:
        return bytes(self.fs.cat_file(self._path(key), start=start, end=end)), None

    def put(self, key: str, path: str) -> None:
        self.fs.put_file(path, self._path(key))


def _missing_extra(url: ObjectURL, err: ImportError) -> BadInput:
    extra = EXTRA_FOR_SCHEME.get(url.scheme)
    if extra:
        return BadInput(url.text, f"reading {url.scheme}:// needs an optional extra: pip install 'triage-tui[{extra}]'")
    return BadInput(url.text, f"reading {url.scheme}:// needs fsspec and its {url.scheme} package ({str(err)[:120]})")


class Store:
    """One bucket (or fsspec root), thread-safe: the client is opened once and shared by every run."""

    def __init__(self, url: ObjectURL) -> None:
        self.scheme, self.bucket = url.scheme, url.bucket
        self.stats = StoreStats()
        self._lock = threading.Lock()
        # When the oldest try still without any answer was sent (None: the last try was answered):
        # a store silent for tuning.STALLED_SECS is not asked again in this pass.
        self._silent_since: float | None = None
        native = url.scheme in tuning.NATIVE_SCHEMES
        try:
            self._client: _Client = _Obstore(url) if native else _Fsspec(url)
        except ImportError as err:
            if native and url.scheme in EXTRA_FOR_SCHEME:
                # Python 3.10 has no obstore (it needs 3.11): the extra brings s3fs / gcsfs there.
                try:
                    self._client = _Fsspec(url)
                except ImportError:
                    raise _missing_extra(url, err) from None
            else:
                raise _missing_extra(url, err) from None
        except ValueError as err:  # an fsspec protocol nobody registered, a malformed bucket
            raise BadInput(url.text, redact(str(err)).splitlines()[0][:200] if str(err) else "cannot open") from None
        # obstore lists one directory level with a delimiter (``directory``); fsspec's find does not
        self.lists_by_level = isinstance(self._client, _Obstore)

    def url(self, key: str) -> str:
        return f"{self.scheme}://{self.bucket}/{key}"

    def _call(self, key: str, what: Callable[[], T], *, deadline_secs: float | None = None, probe: bool = False) -> T:
        """``what()`` sent through the request pool and tried again after a transient failure, all
        tries within ``deadline_secs`` (``tuning.DEADLINE_SECS``) and within the pass's deadline
        (``budget.current()``): a try not answered by then is abandoned, never waited for.
        ``probe``: asked even of a store silent for long (a listing: its answer says it is back)."""
        started = time.monotonic()
        spending = budget.current()
        limit = started + (tuning.DEADLINE_SECS if deadline_secs is None else deadline_secs)
        backoff = tuning.BACKOFF_FIRST_SECS
        tries = 0
        while True:
            refused = self._refused(spending, probe)
            if refused:
                raise Unanswered(self.url(key), refused)
            tries += 1
            with self._lock:
                self.stats.requests += 1
            sent = time.monotonic()
            future = _request_pool().submit(what)
            if not budget.answered_by(future, limit, spending):
                self._heard(False, sent)
                after = f" ({tries} tries)" if tries > 1 else ""
                if spending is not None and spending.stopped():
                    raise Unanswered(self.url(key), "stopped before it was answered") from None
                ended = budget.ends_at(limit, spending)
                by_pass = ended < limit
                which = " (the pass's deadline)" if by_pass else ""
                raise Unanswered(self.url(key), f"no answer within {ended - started:.1f} s{which}{after}") from None
            try:
                result = future.result()
            except Exception as err:  # noqa: BLE001 - every client error becomes one line on its URL
                failure = classify(err)
            else:
                self._heard(True, sent)
                if spending is not None:
                    spending.answered()
                return result
            self._heard(not failure.silent, sent)
            spent = time.monotonic() - started
            if failure.missing:
                raise ObjectMissing(self.url(key), "not found") from None
            if failure.bad_key:
                raise UnlistableKey(self.url(key), failure.line) from None
            out_of_time = started + spent + backoff >= budget.ends_at(limit, spending)
            if not failure.retry or tries > tuning.MAX_RETRIES or out_of_time:
                after = f" after {tries} tries in {spent:.1f} s" if tries > 1 else ""
                raise BadInput(self.url(key), failure.line + after) from None
            if spending is not None and spending.stop is not None:
                spending.stop.wait(backoff)
            else:
                time.sleep(backoff)
            backoff = min(backoff * 2, tuning.BACKOFF_MAX_SECS)

    def _refused(self, spending: budget.PassBudget | None, probe: bool) -> str:
        """Why a try is not sent at all ("" when it is sent)."""
        if spending is not None and spending.stopped():
            return "not asked: stopped"
        if spending is not None and spending.expired():
            return "not fetched: the pass's deadline passed first; the next pass fetches it"
        with self._lock:
            silent_since = self._silent_since
        silent = time.monotonic() - silent_since if silent_since is not None else 0.0
        if not probe and silent >= tuning.STALLED_SECS:
            return f"not asked: the store has answered no request for {silent:.0f} s"
        return ""

    def _heard(self, answered: bool, sent: float) -> None:
        with self._lock:
            if answered:
                self._silent_since = None
            elif self._silent_since is None or sent < self._silent_since:
                self._silent_since = sent

    def listing(self, prefix: str, progress: budget.ListingProgress | None = None) -> Listing:
        """Every object whose key starts with ``prefix`` (a "directory": "" or ending in "/"), in
        one listing pass (ListObjectsV2 pages of 1 000 keys); none when there is none.

        At most ``tuning.MAX_LISTED_KEYS`` keys are held and the listing ends by
        ``tuning.LIST_DEADLINE_SECS`` (or its pass's deadline): past either, ``Listing.stopped``
        says which and the objects are those of the pages read (a listing that never ends).

        A key the client cannot represent (object_store: a control character, an empty or ".."
        segment) fails its whole page; on S3 the pass is then asked again through botocore, which
        lists every key as it is (the mirror reports those it cannot hold); elsewhere it is repeated
        one directory level at a time below ``prefix`` so that only the directory holding that key
        is lost (``Listing.unreadable``), the other runs listed as usual. ``progress`` holds the
        keys listed so far while the pages come."""
        objects, unreadable, stopped = self._list_isolating(prefix, progress)
        return Listing(tuple(m for m in objects if m.key.startswith(prefix)), tuple(unreadable), stopped)

    def _list_capped(
        self, prefix: str, lister: Callable[[str, KeySink], object], progress: budget.ListingProgress | None = None
    ) -> tuple[list[ObjectMeta], str]:
        """``lister``'s keys, at most ``tuning.MAX_LISTED_KEYS`` of them, by the listing's deadline;
        with why it stopped early ("" when it did not)."""
        sinks: list[KeySink] = []

        def once() -> KeySink:
            sink = KeySink()
            sinks.append(sink)
            if progress is not None:
                progress.sink = sink
            answered = lister(prefix, sink)
            if answered is False:
                sink.abandoned = True  # this client has no such listing
            # a page is one request; the clients page inside, so pages are counted from the keys
            pages = max(1, -(-len(sink.found) // 1000))
            with self._lock:
                self.stats.requests += pages - 1
                self.stats.lists += pages
            return sink

        try:
            sink = self._call(prefix, once, deadline_secs=tuning.LIST_DEADLINE_SECS, probe=True)
        except Unanswered as err:
            if not sinks or not sinks[-1].found:
                raise
            sinks[-1].abandoned = True  # its thread stops at its next page
            found = list(sinks[-1].found)
            return found, f"listing stopped at {len(found)} keys: {err.what}"
        if sink.full:
            return (
                sink.found,
                f"listing stopped at {len(sink.found)} keys, the most one listing holds: list a narrower prefix",
            )
        return sink.found, ""

    def _list_isolating(
        self, prefix: str, progress: budget.ListingProgress | None = None
    ) -> tuple[list[ObjectMeta], list[tuple[str, str]], str]:
        try:
            objects, stopped = self._list_capped(prefix, self._client.list_all, progress)
            return objects, [], stopped
        except ObjectMissing:
            # A prefix with no object under it lists empty; a listing answered "not found" is the
            # bucket's absence (S3's NoSuchBucket): the runs mirrored from it are not gone, unseen.
            raise BadInput(self.url(prefix), "no such bucket: its listing answered not found") from None
        except UnlistableKey as err:
            raw, stopped = self._list_capped(prefix, self._client.list_raw)
            if raw or stopped:
                return raw, [], stopped
            try:
                objects, subdirs = self.directory(prefix)
            except UnlistableKey:
                return [], [(prefix, err.what)], ""
        unreadable: list[tuple[str, str]] = []
        stopped = ""
        for subdir in subdirs:
            if subdir.startswith(prefix) and len(subdir) > len(prefix):  # strictly deeper: ends
                found, bad, stopped_below = self._list_isolating(subdir)
                objects += found
                unreadable += bad
                stopped = stopped or stopped_below
        return objects, unreadable, stopped

    def directory(self, prefix: str) -> tuple[list[ObjectMeta], list[str]]:
        """One level of ``prefix`` (ListObjectsV2 with Delimiter "/"): its objects, and the prefixes
        of the directories below it (each ending in "/"), none of their keys listed."""

        def once() -> tuple[list[ObjectMeta], list[str]]:
            objects, subdirs = self._client.list_dir(prefix)
            pages = max(1, -(-(len(objects) + len(subdirs)) // 1000))  # the client pages inside
            with self._lock:
                self.stats.requests += pages - 1
                self.stats.lists += pages
            return objects, subdirs

        return self._call(prefix, once, deadline_secs=tuning.LIST_DEADLINE_SECS, probe=True)

    def head(self, key: str) -> ObjectMeta:
        """The object's metadata (one HEAD); ObjectMissing when it is not there."""
        return self._call(key, lambda: self._client.head(key))

    def read(self, key: str, start: int | None = None, end: int | None = None) -> tuple[bytes, ObjectMeta | None]:
        """The object's bytes, or bytes [start, end) of it (fewer where it is shorter), and the
        object's metadata as the answer gave it (None where the client does not say)."""
        if start is not None and end is not None and end <= start:
            return b"", None

        def once() -> tuple[bytes, ObjectMeta | None]:
            data, meta = self._client.get(key, start, end)
            with self._lock:
                self.stats.body_bytes += len(data)
            return data, meta

        return self._call(key, once)

    def put(self, key: str, path: str | os.PathLike[str]) -> None:
        """The local file ``path`` written as the object ``key`` (replacing one of that key)."""
        self._call(key, lambda: self._client.put(key, os.fspath(path)))


_POOL: list[budget.RequestPool] = []  # the process's one pool, made on first use


def _request_pool() -> budget.RequestPool:
    """Every store's requests go through one pool: at most ``tuning.MAX_IN_FLIGHT`` in flight."""
    with _STORES_LOCK:
        if not _POOL:
            _POOL.append(budget.RequestPool(tuning.MAX_IN_FLIGHT))
        return _POOL[0]


_STORES: dict[tuple[str, str, tuple[str, ...]], Store] = {}
_STORES_LOCK = threading.Lock()


def store_for(url: ObjectURL | str) -> Store:
    """The one Store of ``url``'s bucket in this process (opened on first use)."""
    parsed = parse_url(url) if isinstance(url, str) else url
    # Stores opened under other settings (a test's endpoint, another native list) are not shared.
    endpoints = (os.environ.get("AWS_ENDPOINT_URL", ""), os.environ.get("STORAGE_EMULATOR_HOST", ""))
    key = (parsed.scheme, parsed.bucket, (*endpoints, *tuning.NATIVE_SCHEMES))
    with _STORES_LOCK:
        store = _STORES.get(key)
        if store is None:
            store = _STORES[key] = Store(parsed)
        return store
