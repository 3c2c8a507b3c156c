"""Bounds on what triage fetches and on the numbers it believes (docs/contracts.md, Bounds).

Every fetch goes through ``fetch``: http and https only, a total deadline whatever the server
does (a server that trickles a byte a second is cut off, not waited on a read at a time), a byte
cap on the body, and redirects followed only to the same scheme, host and port. Numbers a source
reports pass ``count``, ``acceptance_length`` and ``rate`` before they are used; one that cannot
be what it claims raises ``Impossible`` with the reason, and the reader makes its source an
error, never an acceptance length.

The limits are read as ``bounds.NAME`` at the call (tests/test_layers.py refuses
``from triage_tui.core.bounds import NAME``), so a test that turns them small reaches every caller.
"""

from __future__ import annotations

import http.client
import math
import re
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from urllib.parse import SplitResult, urljoin, urlsplit

from triage_tui.core.errors import BadInput

# A fetch has this long in all: connecting, the headers, every byte of the body and every
# redirect. A /metrics endpoint answers in milliseconds; 15 s is an engine under heavy load.
FETCH_DEADLINE_SECS = 15.0
# The body, at most: vLLM's /metrics page is ~100 KiB with a few engines; a page this large is
# not a metrics page. (Headers are bounded by http.client: 100 lines of at most 64 KiB.)
FETCH_MAX_BYTES = 16 << 20
MAX_REDIRECTS = 5
FETCHED_SCHEMES = ("http", "https")

# Draft positions: EAGLE-3 drafts 3-8 tokens and no engine drafts more than a few dozen. A
# position index above this is an error, never the size of something allocated.
MAX_POSITION_INDEX = 64
# One draft step yields at most every drafted token plus the bonus token.
MAX_ACCEPTANCE_LENGTH = float(MAX_POSITION_INDEX + 2)
# Counts beyond 2**53 are not exact as the floats Prometheus writes: no server has drafted that much.
MAX_COUNT = 1 << 53
# Steps beyond 2**53 - 1 are no longer exact as JSON numbers (RFC 8259 section 6) or in the doubles
# trackers keep; no run takes that many (2**63 - 1 is int64's maximum, a sentinel, not a step).
MAX_STEP = (1 << 53) - 1
# Label sets of one metric on a page: engines x models x positions, with room to spare.
MAX_LABEL_SETS = 4096
# Series one source of a run keeps in the TUI (core.series.display_series): a trainer logging
# per-layer statistics of an 80-layer model has hundreds; a writer inventing tag names without end
# (a step or a sample id in the tag) would otherwise grow the TUI without bound. `scan`, `check` and
# `scalars` keep every series.
MAX_DISPLAY_SERIES = 2048

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_HOST = re.compile(r"^[A-Za-z0-9.:\[\]-]{1,255}$")


class Impossible(Exception):
    """A number from a source that cannot be what it claims (negative, not finite, beyond a bound).

    Not a ValueError: a parser's own ValueError (text that is no number) is a malformed record, this is not."""


def is_url(location: str) -> bool:
    """``scheme://...``: fetched (when ``fetch`` allows the scheme), never read as a path."""
    return _SCHEME.match(location) is not None


def count(value: float, what: str) -> int:
    """A counter's value as an int: finite, >= 0 and at most MAX_COUNT, else Impossible."""
    if isinstance(value, int):  # exact: a JSON or log integer may be far beyond what a float holds
        shown = str(value) if abs(value) <= MAX_COUNT else f"an integer of {len(str(abs(value)))} digits"
        if value < 0:
            raise Impossible(f"{what} is {shown} (a count cannot be negative)")
        if value > MAX_COUNT:
            raise Impossible(f"{what} is {shown} (beyond any count a server reaches: {MAX_COUNT})")
        return value
    if not math.isfinite(value):
        raise Impossible(f"{what} is {value} (not a finite count)")
    if value < 0:
        raise Impossible(f"{what} is {value:g} (a count cannot be negative)")
    if value > MAX_COUNT:
        raise Impossible(f"{what} is {value:.3g} (beyond any count a server reaches: {MAX_COUNT})")
    return round(value)


def acceptance_length(value: float, what: str = "acceptance length", k: int | None = None) -> float:
    """1 <= length <= k + 1 where ``k``, the tokens a step drafts, is known (every step yields the
    bonus token and at most every drafted one), else <= MAX_ACCEPTANCE_LENGTH."""
    if not math.isfinite(value):
        raise Impossible(f"{what} is {value} (not finite)")
    if value < 1.0:
        raise Impossible(f"{what} is {value:g} (below 1: every step keeps at least the bonus token)")
    if k is not None and value > k + 1 + 1e-9:
        raise Impossible(f"{what} is {value:.3g} (above {k + 1} with {k} speculative tokens: k drafted and the bonus)")
    if value > MAX_ACCEPTANCE_LENGTH:
        raise Impossible(f"{what} is {value:.3g} (above {MAX_ACCEPTANCE_LENGTH:g}: more than any draft holds)")
    return value


def step(value: int, what: str = "step") -> int:
    """A training step: a whole number in [0, MAX_STEP]."""
    if not 0 <= value <= MAX_STEP:
        raise Impossible(f"{what} is {_short(str(value))} (a step lies in [0, 2^53 - 1])")
    return value


def rate(value: float, what: str) -> float:
    """A fraction: finite and within [0, 1]."""
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise Impossible(f"{what} is {value:g} (a rate lies in [0, 1])")
    return value


def position_index(label: str, what: str = "position") -> int:
    """A draft position label ("0", "1", ...) as an int no larger than MAX_POSITION_INDEX."""
    if not label.isascii() or not label.isdigit():
        raise Impossible(f'{what} label "{_short(label)}" is not a position number')
    if len(label) > 4 or int(label) > MAX_POSITION_INDEX:
        raise Impossible(f"{what} {_short(label)} is above {MAX_POSITION_INDEX} (no engine drafts that many tokens)")
    return int(label)


def accepted_within(
    accepted: int, *, drafts: int | None, draft_tokens: int | None, per_position: Sequence[int] = ()
) -> None:
    """Impossible when more tokens were accepted than drafted, a position's count exceeds the
    drafts, there are more positions than any draft holds, or the length they give is absurd."""
    if draft_tokens is not None and accepted > draft_tokens:
        raise Impossible(f"{accepted} tokens accepted of {draft_tokens} drafted (accepted cannot exceed drafted)")
    if len(per_position) > MAX_POSITION_INDEX + 1:
        raise Impossible(f"{len(per_position)} draft positions (at most {MAX_POSITION_INDEX + 1})")
    if drafts is None:
        return
    if draft_tokens is not None and drafts > draft_tokens:
        raise Impossible(f"{drafts} drafts of {draft_tokens} drafted tokens (a draft holds at least one token)")
    for index, value in enumerate(per_position):
        if value > drafts:
            raise Impossible(f"{value} accepted at position {index} of {drafts} drafts (at most one per draft)")
    if drafts:
        k = len(per_position) if per_position else None
        acceptance_length(1.0 + accepted / drafts, f"1 + {accepted} accepted / {drafts} drafts", k)


def _short(text: str, limit: int = 40) -> str:
    """At most ``limit`` characters of untrusted text, ASCII letters, digits and punctuation only:
    the reason names what was wrong without echoing what the source sent."""
    kept = "".join(c if " " <= c <= "~" else "?" for c in text[:limit])
    return kept + ("..." if len(text) > limit else "")


# -- fetching ---------------------------------------------------------------------------------


def fetchable(url: str) -> str | None:
    """Why ``url`` is not fetched (a scheme other than http/https, no host); None when it is."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in FETCHED_SCHEMES:
        scheme = _short(parts.scheme or url.partition(":")[0], 12)
        return f"{scheme}:// is not fetched (only {' and '.join(FETCHED_SCHEMES)})"
    try:
        parts.port  # noqa: B018 - a port that is not a number raises here, before a socket is made
    except ValueError:
        return "the port is not a number"
    if not parts.hostname:
        return "names no host"
    return None


def _origin(parts: SplitResult) -> tuple[str, str, int]:
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


class _Fetch:
    """One fetch's state, shared by the thread that does it and the caller that waits for it."""

    def __init__(self, url: str, seconds: float, max_bytes: int) -> None:
        self.url = url
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.max_bytes = max_bytes
        self.body: bytes | None = None
        self.error: BadInput | None = None
        self.aborted = False
        self._lock = threading.Lock()
        # The socket in use, held here: http.client drops its own reference once the headers are
        # read (HTTP/1.0, "Connection: close") while the response goes on reading from it.
        self._sock: socket.socket | None = None

    def abort(self) -> None:
        """Shut the socket down: a read blocked on a trickling server returns at once."""
        with self._lock:
            self.aborted = True
            sock = self._sock
        if sock is not None:
            try:
                # socket.socket's own shutdown, also for an SSLSocket (whose override tears down
                # the TLS object under the reading thread's feet).
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0 or self.aborted:
            raise TimeoutError
        return left

    def run(self) -> None:
        try:
            self.body = self._get()
        except BadInput as err:
            self.error = err
        except TimeoutError:
            self.error = _late(self.url, self.seconds)
        except (OSError, http.client.HTTPException, ValueError) as err:
            if not self.aborted:  # else the caller has reported the deadline
                self.error = BadInput(self.url, f"metrics URL does not answer: {_reason(err)}")

    def _get(self) -> bytes:
        url = self.url
        for _ in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            scheme, host, port = _origin(parts)
            connection: http.client.HTTPConnection
            if scheme == "https":
                connection = http.client.HTTPSConnection(
                    host, port, timeout=self._left(), context=ssl.create_default_context()
                )
            else:
                connection = http.client.HTTPConnection(host, port, timeout=self._left())
            try:
                connection.connect()
                with self._lock:
                    self._sock = connection.sock
                    if self.aborted:
                        raise TimeoutError
                target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                headers = {"Accept": "text/plain", "Accept-Encoding": "identity", "User-Agent": "triage"}
                connection.request("GET", target, headers=headers)
                response = connection.getresponse()
                if response.status in (301, 302, 303, 307, 308):
                    url = self._redirect(url, response.getheader("Location") or "")
                    continue
                if response.status != 200:
                    # The status code only: the reason phrase and the body are the server's text.
                    raise BadInput(self.url, f"metrics URL answered HTTP {response.status}")
                return self._read(response)
            finally:
                connection.close()
                if self._sock is not None:
                    self._sock.close()
        raise BadInput(self.url, f"metrics URL redirected more than {MAX_REDIRECTS} times")

    def _redirect(self, url: str, location: str) -> str:
        if not location:
            raise BadInput(self.url, "metrics URL answered a redirect without a Location")
        target = urljoin(url, location)
        parts = urlsplit(target)
        try:
            same = _origin(parts) == _origin(urlsplit(url))
        except ValueError:  # a port that is not a number
            same = False
        if not same:
            host = parts.hostname or ""
            where = f"{_short(parts.scheme, 12)}://{host if _HOST.match(host) else 'another host'}"
            try:
                where += f":{parts.port}" if parts.port else ""
            except ValueError:
                where += ":?"
            raise BadInput(
                self.url, f"metrics URL redirected to {where}: not followed (only the same scheme, host and port)"
            )
        return target

    def _read(self, response: http.client.HTTPResponse) -> bytes:
        chunks, size = [], 0
        while chunk := response.read(min(1 << 16, self.max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_bytes:
                raise BadInput(self.url, f"metrics page larger than {_size(self.max_bytes)}: not read")
        if response.length:  # http.client's read(n) ends quietly when the server closes early
            raise BadInput(self.url, f"metrics URL does not answer: {_reason(http.client.IncompleteRead(b''))}")
        return b"".join(chunks)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} bytes"


def _reason(err: BaseException) -> str:
    """The OS's or http.client's reason, short, without text the server sent (BadStatusLine and
    IncompleteRead carry the server's bytes in their messages: named, never shown)."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    reasons = {
        http.client.RemoteDisconnected: "it closed the connection without an answer",
        http.client.IncompleteRead: "it closed the connection mid-answer",
        http.client.LineTooLong: "a header line longer than http.client reads (64 KiB)",
        http.client.BadStatusLine: "no HTTP status line",
        http.client.HTTPException: "more header lines than http.client reads (100)",
        http.client.InvalidURL: "the URL holds characters a request line cannot",
    }
    return next((text for kind, text in reasons.items() if type(err) is kind), type(err).__name__)


def _late(url: str, seconds: float) -> BadInput:
    return BadInput(url, f"metrics URL gave no complete answer within {seconds:g} s")


def fetch(url: str) -> bytes:
    """The body of a GET of ``url``, whole, within FETCH_DEADLINE_SECS and FETCH_MAX_BYTES.

    BadInput naming the URL (one line, none of the server's text) for another scheme, no answer,
    an HTTP status other than 200, a redirect to another scheme, host or port, a body over the cap,
    or no complete answer by the deadline. The fetch runs on a thread of its own so that even a
    name lookup that hangs cannot hold the caller past the deadline.
    """
    why = fetchable(url)
    if why is not None:
        raise BadInput(url, f"metrics URL: {why}")
    seconds = FETCH_DEADLINE_SECS
    state = _Fetch(url, seconds, FETCH_MAX_BYTES)
    worker = threading.Thread(target=state.run, name=f"fetch {_short(url, 60)}", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        state.abort()
        raise _late(url, seconds)
    if state.error is not None:
        raise state.error
    assert state.body is not None
    return state.body
