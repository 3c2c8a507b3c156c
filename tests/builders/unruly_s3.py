"""A small real S3 endpoint on 127.0.0.1 that misbehaves on purpose, for the attacks moto cannot stage.

It speaks what a reader of a bucket sends, over HTTP on a socket, exactly as a bucket answers it:
ListObjectsV2 (``GET /<bucket>?list-type=2``, pages of at most 1 000 keys with continuation tokens,
the XML of the S3 API reference's ListObjectsV2 response), HEAD and GET of an object, a GET with a
``Range: bytes=a-b`` header answered 206 with its Content-Range (RFC 9110 section 14). Nothing of
the clients under test is replaced: obstore and botocore talk to it as to S3, through the standard
``AWS_ENDPOINT_URL``.

The misbehaviours a test turns on:
- an object listed larger than anything it holds (``UnrulyObject.size``: 1 TiB); its bytes are its
  ``head`` and then zeros, made up for each range asked (nothing of that size exists anywhere);
- ``endless_listing``: every page after the objects says IsTruncated with a new continuation token
  and 1 000 more made-up keys, forever;
- ``hang_gets``: every GET and HEAD of an object is held unanswered until the server stops (the
  listing is answered as usual); ``hang_keys``: only those of the keys holding one of these;
- ``one_at_a_time_secs``: a slow server that keeps answering: the GETs and HEADs of objects are
  answered one after another, each this many seconds after the one before.
It counts what it answered (``gets``, ``get_bytes``, ``list_pages``), the server's view of the cost.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")
PAGE_KEYS = 1000  # ListObjectsV2's MaxKeys default


@dataclass(frozen=True)
class UnrulyObject:
    """An object as listed: ``size`` bytes, the first ``len(head)`` of them ``head``, then zeros."""

    size: int
    head: bytes = b""

    def bytes_of(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object (end exclusive, clipped to its size)."""
        end = min(end, self.size)
        if start >= end:
            return b""
        known = self.head[start:end]
        return known + bytes(end - start - len(known))


class UnrulyS3:
    """The server: ``endpoint`` is its http://127.0.0.1:PORT; ``stop()`` releases every held request."""

    def __init__(
        self,
        bucket: str,
        objects: dict[str, UnrulyObject],
        *,
        endless_listing: bool = False,
        hang_gets: bool = False,
        hang_keys: tuple[str, ...] = (),
        one_at_a_time_secs: float = 0.0,
    ) -> None:
        self.bucket = bucket
        self.objects = dict(sorted(objects.items()))
        self.endless_listing = endless_listing
        self.hang_gets = hang_gets
        self.hang_keys = hang_keys
        self.one_at_a_time_secs = one_at_a_time_secs
        self._one_at_a_time = threading.Lock()
        self.gets = 0
        self.whole_gets = 0  # GETs of an object without a Range: a client asking it whole
        self.get_bytes = 0
        self.list_pages = 0
        self.held = 0  # requests being held unanswered now
        self.most_held = 0  # the most held at once
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server._answer(self, with_body=True)

            def do_HEAD(self) -> None:
                server._answer(self, with_body=False)

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    # --- answers ---------------------------------------------------------------------------------

    def _answer(self, handler: BaseHTTPRequestHandler, *, with_body: bool) -> None:
        split = urlsplit(handler.path)
        query = parse_qs(split.query)
        parts = split.path.lstrip("/").split("/", 1)
        if parts[0] != self.bucket:
            self._send(handler, 404, b"<Error><Code>NoSuchBucket</Code></Error>", {}, with_body)
            return
        if len(parts) == 1 or not parts[1]:
            if "list-type" in query:
                self._list(handler, query, with_body)
            else:
                self._send(handler, 200, b"", {}, with_body)  # HeadBucket
            return
        key = unquote(parts[1])
        if self.hang_gets or any(part in key for part in self.hang_keys):
            with self._lock:
                self.held += 1
                self.most_held = max(self.most_held, self.held)
            self._stopping.wait()
            with self._lock:
                self.held -= 1
            handler.close_connection = True
            return
        if self.one_at_a_time_secs:
            with self._one_at_a_time:
                self._stopping.wait(self.one_at_a_time_secs)
        found = self.objects.get(key)
        if found is None:
            self._send(handler, 404, b"<Error><Code>NoSuchKey</Code></Error>", {}, with_body)
            return
        headers = {
            "ETag": f'"{abs(hash((key, found.size))):x}"',
            "Last-Modified": formatdate(1_700_000_000, usegmt=True),
            "Accept-Ranges": "bytes",
        }
        wanted = _RANGE.match(handler.headers.get("Range") or "")
        if wanted is None:
            # The whole object: its length is said, and as much is sent as the client reads before
            # it gives up (a client that asks a 1 TiB object whole is what the tests catch).
            headers["Content-Length"] = str(found.size)
            if with_body:
                with self._lock:
                    self.whole_gets += 1
            self._stream(handler, found, headers, with_body)
            return
        start = int(wanted.group(1))
        end = min(found.size, int(wanted.group(2)) + 1 if wanted.group(2) else found.size)
        if start >= found.size:
            headers["Content-Range"] = f"bytes */{found.size}"
            self._send(handler, 416, b"", headers, with_body)
            return
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{found.size}"
        headers["Content-Length"] = str(end - start)
        self._stream(handler, found, headers, with_body, status=206, start=start, end=end)

    def _stream(
        self,
        handler: BaseHTTPRequestHandler,
        found: UnrulyObject,
        headers: dict[str, str],
        with_body: bool,
        *,
        status: int = 200,
        start: int = 0,
        end: int | None = None,
    ) -> None:
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        if not with_body:
            return
        with self._lock:
            self.gets += 1
        stop = found.size if end is None else end
        position = start
        try:
            while position < stop and not self._stopping.is_set():
                chunk = found.bytes_of(position, min(stop, position + (1 << 20)))
                handler.wfile.write(chunk)
                position += len(chunk)
                with self._lock:
                    self.get_bytes += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True

    def _list(self, handler: BaseHTTPRequestHandler, query: dict[str, list[str]], with_body: bool) -> None:
        prefix = query.get("prefix", [""])[0]
        token = query.get("continuation-token", [""])[0]
        with self._lock:
            self.list_pages += 1
        keys = [key for key in self.objects if key.startswith(prefix)]
        page = int(token) if token.isdigit() else 0
        listed = [(key, self.objects[key].size) for key in keys[page * PAGE_KEYS : (page + 1) * PAGE_KEYS]]
        more = (page + 1) * PAGE_KEYS < len(keys)
        if self.endless_listing and not more and not listed:
            # past the real objects: a page of made-up keys that sort after them, and one more page
            listed = [(f"{prefix}zz-endless/{page:09d}/{n:04d}.bin", 1) for n in range(PAGE_KEYS)]
        more = more or self.endless_listing
        contents = "".join(
            f"<Contents><Key>{escape(key)}</Key><LastModified>2023-11-14T22:13:20.000Z</LastModified>"
            f'<ETag>"{abs(hash((key, size))):x}"</ETag><Size>{size}</Size><StorageClass>STANDARD</StorageClass>'
            "</Contents>"
            for key, size in listed
        )
        following = f"<NextContinuationToken>{page + 1}</NextContinuationToken>" if more else ""
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{escape(self.bucket)}</Name><Prefix>{escape(prefix)}</Prefix><KeyCount>{len(listed)}</KeyCount>"
            f"<MaxKeys>{PAGE_KEYS}</MaxKeys><IsTruncated>{'true' if more else 'false'}</IsTruncated>"
            f"{following}{contents}</ListBucketResult>"
        ).encode()
        self._send(handler, 200, body, {"Content-Type": "application/xml"}, with_body)

    @staticmethod
    def _send(
        handler: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str], with_body: bool
    ) -> None:
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if with_body:
            handler.wfile.write(body)

    def stop(self) -> None:
        self._stopping.set()
        self._http.shutdown()
        self._http.server_close()

    def __enter__(self) -> UnrulyS3:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
