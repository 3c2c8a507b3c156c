"""A client's failure as one line: retryable or not, a missing object, a key the client cannot
parse; never with an endpoint's password or a secret of the environment in it (``redact``)."""

from __future__ import annotations

import os
import re

_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>([A-Za-z0-9]{1,64})</Code>")
# A try that failed this way is worth another (RFC 9110 section 15.6: 5xx; 429 Too Many Requests;
# S3's own SlowDown is a 503).
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_TRANSIENT_WORDS = ("timed out", "timeout", "error sending request", "connection", "reset by peer", "broken pipe")


class Failure(Exception):
    """One try's failure: ``retry`` when another try may succeed, ``missing`` for a 404,
    ``bad_key`` for a listing page holding a key the client cannot represent."""

    def __init__(
        self, line: str, *, retry: bool = False, missing: bool = False, bad_key: bool = False, silent: bool = False
    ) -> None:
        super().__init__(line)
        self.line, self.retry, self.missing, self.bad_key = line, retry, missing, bad_key
        self.silent = silent  # no answer came (a timeout, a dropped connection): the server said nothing


# A URL's user information (``http://user:password@host``): what an endpoint's credentials look like
# inside a client's error text, which names the URL it requested.
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]*@")
# Environment variables whose values are secrets (AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
# AZURE_STORAGE_ACCOUNT_KEY, a password): never shown, wherever a client's text repeats one.
_SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|_KEY$|^AZURE_STORAGE_SAS")
_MIN_SECRET_CHARS = 12  # shorter values would blank ordinary words (an AWS secret key has 40)


def redact(text: str) -> str:
    """``text`` without an endpoint's user and password or any secret value of the environment."""
    text = _USERINFO.sub(r"\1***@", text)
    for name, value in os.environ.items():
        if len(value) >= _MIN_SECRET_CHARS and _SECRET_NAME.search(name.upper()) and value in text:
            text = text.replace(value, "***")
    return text


def classify(err: BaseException) -> Failure:
    """Any client's exception as one line, retryable or not (no client type leaks past here), its
    credentials taken out (``redact``)."""
    text = redact(str(err))
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    if isinstance(err, FileNotFoundError):
        return Failure("not found", missing=True)
    if "invalid path" in first.lower():  # object_store's InvalidPath, raised while parsing a listing
        return Failure(f"a key here cannot be read by the client: {first[:200]}", bad_key=True)
    if isinstance(err, PermissionError) or type(err).__name__ in ("PermissionDeniedError", "UnauthenticatedError"):
        return Failure(f"access denied: {first[:200]}")
    status = _STATUS.search(text)
    code = _CODE.search(text)
    if status:
        n = int(status.group(1))
        if n == 404:
            return Failure("not found", missing=True)
        return Failure(f"server answered {n}" + (f" {code.group(1)}" if code else ""), retry=n in _RETRY_STATUS)
    response = getattr(err, "response", None)
    if isinstance(response, dict):  # s3fs re-raises some botocore ClientErrors as they are
        n = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        return Failure(f"server answered {n}", retry=n in _RETRY_STATUS)
    lowered = text.lower()
    if isinstance(err, TimeoutError) or any(word in lowered for word in _TRANSIENT_WORDS):
        return Failure(f"no answer: {first[:200]}", retry=True, silent=True)
    return Failure(first[:200])
