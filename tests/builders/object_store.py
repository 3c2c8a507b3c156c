"""A real S3-compatible server for tests and benchmarks, and a real HTTP proxy in front of it.

The server is moto's own server (``moto.server.ThreadedMotoServer``: Werkzeug serving moto's S3
implementation over HTTP) in a child process, on 127.0.0.1 and a port the OS picks: the clients
under test speak S3 over a socket to it exactly as to a bucket, nothing of theirs is replaced.
The child exits when its stdin closes, so a test that dies leaves no server behind.

``S3Proxy`` is a reverse proxy that forwards each request to the server and sees every answer:
it counts requests and response body bytes (what a poll really fetched, from the server's side)
and, on request, answers 503 or holds a request unanswered (a server that answers too slowly)
before forwarding. Objects are written by boto3 (the AWS SDK, the writer a trainer's upload uses).
"""

from __future__ import annotations

import html
import http.client
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

# AWS Signature Version 4: "AWS4-HMAC-SHA256 Credential=<key id>/<date>/<region>/s3/aws4_request, ..."
_SIGNED_BY = re.compile(r"Credential=([^/]+)/")

_CHILD = """
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()  # until the parent closes our stdin (or dies)
server.stop()
"""

# Dummy credentials: moto accepts any; the variables are the SDKs' standard ones.
DUMMY_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


class MovedClock:
    """The real clocks moved on by ``ahead`` seconds, for a module's ``time`` (objstore.levels',
    objstore.polls', the read schedule's): objects look that much older, tiers end that much sooner."""

    ahead = 0.0

    @classmethod
    def time(cls) -> float:
        return time.time() + cls.ahead

    @classmethod
    def monotonic(cls) -> float:
        return time.monotonic() + cls.ahead


class S3Server:
    """moto's S3 server in a child process; ``endpoint`` is its http://127.0.0.1:PORT."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # blocks until the server listens (or the child died)
        if not line.strip().isdigit():
            self.process.kill()
            raise RuntimeError(f"moto server did not start (exit {self.process.wait()})")
        self.port = int(line)
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> S3Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_child(process: subprocess.Popen) -> None:
    """A server's child process ended: asked to (SIGTERM), then killed after 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def s3_client(endpoint: str):
    """A boto3 S3 client for the writer's side (uploads, deletes) of a test."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=DUMMY_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_ENV["AWS_SECRET_ACCESS_KEY"],
        region_name=DUMMY_ENV["AWS_REGION"],
    )


def upload_tree(client, bucket: str, prefix: str, root: Path) -> list[str]:
    """Every file under ``root`` put as ``prefix/<relative path>``; the keys written."""
    keys = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            key = (
                f"{prefix.rstrip('/')}/{path.relative_to(root).as_posix()}"
                if prefix
                else path.relative_to(root).as_posix()
            )
            client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
            keys.append(key)
    return keys


def without_roots(document: object, *roots: str) -> str:
    """``document`` as sorted JSON with each root (a local tree, a bucket URL) written ROOT: a
    bucket run's output compared with the same run's on disk."""
    text = json.dumps(document, sort_keys=True)
    for root in roots:
        text = text.replace(root.rstrip("/"), "ROOT")
    return text


@contextmanager
def s3_environment(endpoint: str) -> Iterator[None]:
    """The standard AWS variables pointing at ``endpoint`` with dummy credentials, restored after."""
    wanted = {**DUMMY_ENV, "AWS_ENDPOINT_URL": endpoint}
    saved = {name: os.environ.get(name) for name in [*wanted, "AWS_PROFILE"]}
    os.environ.update(wanted)
    os.environ.pop("AWS_PROFILE", None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass
class ProxyCounts:
    """What went through the proxy: requests by method, and response body bytes by method."""

    requests: dict[str, int] = field(default_factory=dict)
    body_bytes: dict[str, int] = field(default_factory=dict)
    paths: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path with query, body bytes)
    access_keys: set[str] = field(default_factory=set)  # the key ids requests were signed with (SigV4)
    listed_keys: list[str] = field(default_factory=list)  # every key a listing answered with

    def total_requests(self) -> int:
        return sum(self.requests.values())

    def get_body_bytes(self) -> int:
        """Bytes of object bodies sent (GET answers that are not listings)."""
        return sum(n for method, path, n in self.paths if method == "GET" and "list-type" not in path)


class S3Proxy:
    """A reverse proxy on 127.0.0.1 in front of ``upstream``: counts, and injects 503s or stalls.

    ``fail_next(n)``: the next n requests are answered 503 SlowDown without being forwarded;
    ``fail_paths(...)``: so is every request for those paths.
    ``stall_next(n)``: the next n requests are held unanswered until ``release()`` (or stop);
    ``stall_paths(...)``: so is every request whose path holds one of those.
    ``page_keys(n)``: every listing is asked for pages of n keys (S3's ``max-keys``), as if the
    bucket held thousands of keys a page.
    ``partial_as_206``: a GET answered 200 with a Content-Range is passed on as 206, as S3 answers a
    range (rclone's S3 server answers every range 200, which object_store refuses).
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.counts = ProxyCounts()
        self._lock = threading.Lock()
        self._fail = 0
        self._stall = 0
        self._fail_paths: tuple[str, ...] = ()
        self._stall_paths: tuple[str, ...] = ()
        self._page_keys: int | None = None
        self.partial_as_206 = False
        self.held = 0  # requests held unanswered now
        self._released = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                action = proxy._next_action(self.path)
                if action == "stall":
                    with proxy._lock:
                        proxy.held += 1
                    proxy._released.wait()
                    with proxy._lock:
                        proxy.held -= 1
                    self.close_connection = True
                    return
                path = proxy._paged(self.command, self.path)
                if action == "fail":
                    payload = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
                upstream.request(self.command, path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                upstream.close()
                # counted before the client can see the answer: a test reading the counts after
                # its call returns finds this request there
                body_bytes = 0 if self.command == "HEAD" else len(data)
                proxy._count(self.command, self.path, body_bytes, self.headers.get("Authorization", ""))
                if self.command == "GET" and "list-type" in self.path and answer.status == 200:
                    proxy._listed(data)
                partial = proxy.partial_as_206 and answer.status == 200 and answer.getheader("Content-Range")
                self.send_response(206 if partial else answer.status)
                skipped = ("connection", "keep-alive", "transfer-encoding", "server", "date")
                for k, v in answer.getheaders():
                    # a HEAD's Content-Length is the object's size: passed on as the server said it
                    if k.lower() not in skipped and (k.lower() != "content-length" or self.command == "HEAD"):
                        self.send_header(k, v)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle  # http.server's method names

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _next_action(self, path: str) -> str:
        with self._lock:
            # as the client wrote it or decoded (GCS's XML API escapes every "/" and "-" of a key)
            if any(part in path or part in urllib.parse.unquote(path) for part in self._fail_paths):
                return "fail"
            if self._fail:
                self._fail -= 1
                return "fail"
            if any(part in path for part in self._stall_paths):
                return "stall"
            if self._stall:
                self._stall -= 1
                return "stall"
        return "forward"

    def _count(self, method: str, path: str, n: int, authorization: str = "") -> None:
        signed = _SIGNED_BY.search(authorization)
        with self._lock:
            if signed:
                self.counts.access_keys.add(signed.group(1))
            self.counts.requests[method] = self.counts.requests.get(method, 0) + 1
            self.counts.body_bytes[method] = self.counts.body_bytes.get(method, 0) + n
            self.counts.paths.append((method, path, n))

    def _listed(self, page: bytes) -> None:
        # ListObjectsV2's XML (S3's, and GCS's XML API's): each key as <Key>...</Key>
        keys = [html.unescape(key.decode()) for key in re.findall(rb"<Key>(.*?)</Key>", page)]
        with self._lock:
            self.counts.listed_keys += keys

    def reset_counts(self) -> ProxyCounts:
        with self._lock:
            counts, self.counts = self.counts, ProxyCounts()
        return counts

    def fail_next(self, n: int) -> None:
        with self._lock:
            self._fail = n

    def fail_paths(self, *parts: str) -> None:
        """Every request whose path holds one of ``parts`` is answered 503 (until called with none)."""
        with self._lock:
            self._fail_paths = parts

    def _paged(self, method: str, path: str) -> str:
        """``path``, a listing's asking for pages of ``page_keys`` keys (moto checks no signature)."""
        with self._lock:
            keys = self._page_keys
        if keys is None or method != "GET" or "list-type=2" not in path:
            return path
        base, _, query = path.partition("?")
        params = [p for p in query.split("&") if p and not p.startswith("max-keys=")]
        return f"{base}?{'&'.join([*params, f'max-keys={keys}'])}"

    def page_keys(self, n: int | None) -> None:
        with self._lock:
            self._page_keys = n

    def stall_paths(self, *parts: str) -> None:
        """Every request whose path holds one of ``parts`` is held until ``release()`` (none: no more)."""
        with self._lock:
            self._stall_paths = parts
            if parts:
                self._released.clear()

    def stall_next(self, n: int) -> None:
        with self._lock:
            self._stall = n
            if n:
                self._released.clear()  # held again, after an earlier release

    def release(self) -> None:
        self._released.set()

    def stop(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


# --- fixtures (registered in conftest.py's pytest_plugins) -------------------------------------

_BUCKETS = itertools.count()


@pytest.fixture(scope="module")
def server():
    """moto's server and the counting proxy in front of it, the AWS variables pointing at the proxy."""
    with S3Server() as running:
        proxy = S3Proxy(running.port)
        with s3_environment(proxy.endpoint):
            yield running, proxy
        proxy.stop()


@pytest.fixture
def bucket(server):
    """A fresh bucket on the module's server: (its name, a boto3 client, the proxy)."""
    running, proxy = server
    name = f"bucket-{os.getpid()}-{next(_BUCKETS)}"
    client = s3_client(running.endpoint)  # the writer talks to the server directly: not counted
    client.create_bucket(Bucket=name)
    return name, client, proxy


@dataclass(frozen=True)
class AnyBucket:
    """A fresh bucket on S3 (moto) or GCS (fake-gcs-server): ``base`` is its URL (``s3://name``,
    ``gs://name``), ``writer`` writes and deletes objects directly (not counted), ``proxy`` counts
    what the code under test sent."""

    scheme: str
    name: str
    writer: object
    proxy: S3Proxy

    @property
    def base(self) -> str:
        return f"{self.scheme}://{self.name}"


@pytest.fixture(params=["s3", "gs"])
def any_bucket(request) -> AnyBucket:
    """The same test on both servers: S3 through moto's, GCS through fake-gcs-server."""
    name = f"bucket-{os.getpid()}-{next(_BUCKETS)}"
    if request.param == "s3":
        running, proxy = request.getfixturevalue("server")
        writer: object = s3_client(running.endpoint)
    else:
        from builders.gcs_store import GcsWriter

        running, proxy = request.getfixturevalue("gcs_server")
        writer = GcsWriter(running.endpoint)
    writer.create_bucket(Bucket=name)  # type: ignore[attr-defined]  # boto3's client or GcsWriter
    return AnyBucket(request.param, name, writer, proxy)
