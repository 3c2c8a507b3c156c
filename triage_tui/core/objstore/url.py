"""Object-store URLs: ``scheme://bucket/key``, told apart from local paths by their scheme.

A URL is untrusted text from the command line, a ``triage.toml`` or a bucket's listing: it is
kept as given (shown through ``text.printable``) and never interpreted beyond scheme, bucket and key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# RFC 3986 section 3.1: a scheme is a letter then letters, digits, "+", "-" or ".".
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/]*)/?(.*)$", re.DOTALL)
# gcsfs accepts both spellings (gcsfs/core.py, GCSFileSystem.protocol = ("gs", "gcs")).
_ALIASES = {"gcs": "gs"}


def is_object_url(text: str) -> bool:
    """True for ``s3://…``, ``gs://…`` or any other ``scheme://…`` but ``file://`` (a local path)."""
    match = _URL.match(text)
    return match is not None and match.group(1).lower() != "file"


@dataclass(frozen=True)
class ObjectURL:
    """One object or prefix: ``scheme`` (lower case, ``gcs`` read as ``gs``), ``bucket`` (the
    URL's authority) and ``key`` (the rest, no leading slash; "" for the bucket's root)."""

    scheme: str
    bucket: str
    key: str

    @property
    def text(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}"

    def __str__(self) -> str:
        return self.text

    def child(self, relative: str) -> ObjectURL:
        """The key ``relative`` below this prefix."""
        base = self.key.rstrip("/")
        return ObjectURL(self.scheme, self.bucket, f"{base}/{relative}" if base else relative)

    def prefix(self) -> str:
        """The key as a listing prefix: "" or ending in "/"."""
        key = self.key.strip("/")
        return key + "/" if key else ""


def parse_url(text: str) -> ObjectURL:
    """``text`` as an ObjectURL; ValueError when it is not one (a local path, an empty bucket)."""
    match = _URL.match(text)
    if match is None or match.group(1).lower() == "file":
        raise ValueError(f"not an object-store URL: {text!r}")
    scheme, bucket, key = match.groups()
    scheme = _ALIASES.get(scheme.lower(), scheme.lower())
    if not bucket:
        raise ValueError(f"no bucket in {text!r}")
    return ObjectURL(scheme, bucket, key.lstrip("/"))
