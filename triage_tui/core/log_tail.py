"""A growing text file's complete new lines, across rotation and truncation: ``LogTail``.

The one follower of text logs: engine logs and JSONL sources (``core/watch/serving/``) and training
consoles (``core/read/console/``) read through it. Each poll reads only the bytes appended since the
last one (at most the caller's bound), returns the complete lines among them and keeps an
unterminated last line until its terminator arrives. ``LogPass`` is one pass of a reader that reads
on chunk after chunk (a console poll, ``scan``'s read of a serving log): it ends at the size the
file had when it began plus a growth budget, so a file growing faster than it is parsed cannot
keep it from returning.

``split_cr``: a carriage return ends a line as a newline does. Progress bars (tqdm) redraw one
terminal line with ``\\r`` and write no newline for as long as they run; in a file every redraw
is then a line of its own, and what ``tqdm.write`` prints between two redraws is one too.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

_LINE_ENDS = re.compile(b"[\r\n]")
_SEEN_BYTES = 64  # the last bytes read, kept to notice a file rewritten past the offset
# What one pass (LogPass) reads of what was written while it read, beyond the size the file had when
# it began: a log growing faster than it is parsed cannot keep a pass from returning, and a log not
# written to is read whole, whatever its size. The rest is read by the next pass.
PASS_GROWTH_BYTES = 1 << 20


class LogTail:
    """Complete new lines of a growing log, across rotation and truncation.

    Reopened on every poll (NFS close-to-open, as the event reader does). When the path names a
    new file (rotated by rename: logrotate, RotatingFileHandler), the rest of the old file is
    read first from the sibling that now holds the old inode, then the new file from its start
    (a second rotation between two polls loses the file in between). A file shorter than the
    offset, or whose bytes before the offset are no longer the ones read, was truncated in place
    and rewritten (copytruncate): read from the start. A line longer than ``max_line_bytes`` is
    dropped whole (counted in ``dropped``), so a binary file or a runaway writer cannot grow memory.
    """

    def __init__(self, path: str | Path, *, max_line_bytes: int, split_cr: bool = False) -> None:
        self.path = Path(path)
        self.line_limit = max_line_bytes
        self.split_cr = split_cr
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._skipping = False  # inside a line already found too long: dropped up to its end
        self._seen = b""
        self.bytes_read = 0  # by the last poll: 0 means the end of the file was reached
        self.dropped = 0  # lines longer than the limit, dropped
        self.restarts = 0  # times the file was found replaced or truncated and read from its start
        self.mtime: float | None = None  # the file's modification time at the last poll that found it
        self.size = 0  # the file's size at the last poll that found it
        self.problem: str | None = None  # why the last poll could not read the file, or None

    @property
    def offset(self) -> int:
        """Bytes of the current file read so far."""
        return self._offset

    def start_near_end(self, max_bytes: int) -> bool:
        """Begin at most ``max_bytes`` before the file's end as it is now, not at its start (a viewer
        of a long log shows its tail). True when that cut a line: the first line the next poll gives
        is the end of a longer one. A file not there (yet) is read from its start when it comes."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return False
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size <= max_bytes:
                return False
            self._ident, self._offset = (st.st_dev, st.st_ino), st.st_size - max_bytes
            handle.seek(self._offset - 1)
            return handle.read(1) not in (b"\r\n" if self.split_cr else b"\n")

    def poll(self, max_bytes: int) -> list[str]:
        """The complete lines appended since the last poll, reading at most ``max_bytes`` of the file."""
        lines: list[str] = []
        self.bytes_read = 0
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.problem = "no such file (yet)"  # not there yet, or between rename and re-create
            return lines
        except OSError as err:
            self.problem = f"cannot reach it: {err.strerror or err}"
            return lines
        self.problem = None
        self.mtime, self.size = st.st_mtime, st.st_size
        ident = (st.st_dev, st.st_ino)
        if self._ident is not None and ident != self._ident:
            rotated = self._find_rotated()
            if rotated is not None:
                lines += self._read(rotated, limit=None)
            lines += self.flush()
            self._ident = None
            self._restart()
        elif self._ident is not None and st.st_size < self._offset:
            self._restart()
        if self._ident is None:
            self._ident = ident
        lines += self._read(self.path, limit=max_bytes)
        return lines

    def _restart(self) -> None:
        self._offset, self._partial, self._skipping, self._seen = 0, b"", False, b""
        self.restarts += 1

    def _find_rotated(self) -> Path | None:
        try:
            siblings = list(self.path.parent.iterdir())
        except OSError:
            return None
        for sibling in siblings:
            if sibling == self.path or not sibling.name.startswith(self.path.name):
                continue
            try:
                st = os.stat(sibling)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == self._ident:
                return sibling
        return None

    def _read(self, path: Path, limit: int | None) -> list[str]:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO named like a log must not hang
        except OSError as err:
            if path == self.path:
                self.problem = f"cannot read it: {err.strerror or err}"
            return []
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != self._ident:
            os.close(fd)  # (os.fdopen refuses a directory)
            if path == self.path and not stat.S_ISREG(st.st_mode):
                self.problem = "not a regular file"
            return []
        with os.fdopen(fd, "rb") as handle:
            if self._seen:
                handle.seek(self._offset - len(self._seen))
                if handle.read(len(self._seen)) != self._seen:
                    self._restart()
            handle.seek(self._offset)
            data = handle.read(limit if limit is not None else -1)
        self._offset += len(data)
        self.bytes_read += len(data)
        if data:
            self._seen = (self._seen + data)[-_SEEN_BYTES:]
        chunk = self._partial + data
        parts = _LINE_ENDS.split(chunk) if self.split_cr else chunk.split(b"\n")
        self._partial = parts.pop()
        if self._skipping and len(parts):
            parts.pop(0)  # the end of the line found too long at an earlier read
            self.dropped += 1
            self._skipping = False
        if len(self._partial) > self.line_limit:
            self._partial, self._skipping = b"", True
        self.dropped += sum(len(p) > self.line_limit for p in parts)
        kept = [p.decode("utf-8", "replace") for p in parts if len(p) <= self.line_limit]
        return kept if self.split_cr else [line.rstrip("\r") for line in kept]

    def pending(self) -> str:
        """The unterminated rest read so far (a progress bar drawn after the last line ends), as text."""
        return "" if self._skipping else self._partial.decode("utf-8", "replace")

    def flush(self) -> list[str]:
        """The unterminated last line, as a line (a finished log may lack its final newline)."""
        rest, self._partial = self._partial, b""
        if self._skipping:
            self._skipping, rest = False, b""
            self.dropped += 1
        return [rest.decode("utf-8", "replace")] if rest else []


class LogPass:
    """One pass over a followed file: its lines a chunk at a time, up to the size the file had when
    the pass began plus ``growth_bytes`` (PASS_GROWTH_BYTES) of what was written while it read. A file not written to is
    read whole, whatever its size; one growing faster than it is parsed cannot keep the pass from
    returning: the pass stops, ``cut_short`` says so, and the next pass continues where it stopped.
    A file found replaced or truncated ends the pass too (the next one reads the new file)."""

    def __init__(self, tail: LogTail, growth_bytes: int = PASS_GROWTH_BYTES) -> None:
        self.tail = tail
        self.growth = growth_bytes
        self.end: int | None = None  # the offset the pass reads to, from the size at its first poll
        self.bytes_read = 0  # by the pass so far: 0 means it found nothing new
        self._restarts = tail.restarts
        self._more = True

    def poll(self, max_bytes: int) -> list[str]:
        """The next chunk's complete lines, at most ``max_bytes`` and never past the pass's end."""
        tail = self.tail
        if self.end is not None:
            max_bytes = max(1, min(max_bytes, self.end - tail.offset))
        lines = tail.poll(max_bytes)
        self.bytes_read += tail.bytes_read
        if self.end is None:
            self.end = tail.size + self.growth
        self._more = bool(tail.bytes_read) and tail.offset < self.end and tail.restarts == self._restarts
        return lines

    @property
    def more(self) -> bool:
        """Whether the pass reads on after the last chunk."""
        return self._more

    def cut_short(self) -> str | None:
        """One line when the pass stopped at its end with more of the file there, else None."""
        tail = self.tail
        if self.end is None or tail.offset < self.end:
            return None
        try:
            size = max(tail.size, os.stat(tail.path).st_size)  # it may have grown since the last chunk's stat
        except OSError:
            size = tail.size
        if size <= tail.offset:
            return None
        return (
            f"read up to byte {tail.offset:,} of {size:,}: the file grew faster than it was read; "
            "the rest is read by the next pass"
        )
