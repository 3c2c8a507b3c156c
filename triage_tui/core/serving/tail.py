"""A growing text file's complete new lines, across rotation and truncation: what a log or a JSONL source reads."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from triage_tui.core.serving import tuning


class LogTail:
    """Complete new lines of a growing log, across rotation and truncation.

    Reopened on every poll (NFS close-to-open, as the event reader does). When the path names a
    new file (rotated by rename: logrotate, RotatingFileHandler), the rest of the old file is
    read first from the sibling that now holds the old inode, then the new file from its start
    (a second rotation between two polls loses the file in between). A file shorter than the
    offset, or whose bytes before the offset are no longer the ones read, was truncated in place
    and rewritten (copytruncate): read from the start. A line longer than ``max_line`` bytes is
    dropped whole (counted in ``dropped``), so a binary file or a runaway writer cannot grow memory.
    """

    def __init__(self, path: str | Path, max_line: int | None = None) -> None:
        self.path = Path(path)
        self.max_line = max_line
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._skipping = False  # inside a line already found too long: dropped up to its newline
        self._seen = b""  # the last bytes read, to notice a file rewritten past the offset
        self.bytes_read = 0  # by the last poll: 0 means the end of the file was reached
        self.dropped = 0  # lines longer than max_line, dropped

    @property
    def line_limit(self) -> int:
        return self.max_line if self.max_line is not None else tuning.MAX_LINE_BYTES

    def poll(self) -> list[str]:
        lines: list[str] = []
        self.bytes_read = 0
        try:
            st = os.stat(self.path)
        except OSError:
            return lines  # not there yet, or between rename and re-create
        ident = (st.st_dev, st.st_ino)
        if self._ident is not None and ident != self._ident:
            rotated = self._find_rotated()
            if rotated is not None:
                lines += self._read(rotated, limit=None)
            lines += self.flush()
            self._ident, self._offset, self._seen = None, 0, b""
        elif self._ident is not None and st.st_size < self._offset:
            self._restart()
        if self._ident is None:
            self._ident = ident
        lines += self._read(self.path, limit=tuning.MAX_READ_BYTES)
        return lines

    def _restart(self) -> None:
        self._offset, self._partial, self._skipping, self._seen = 0, b"", False, b""

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
        except OSError:
            return []
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != self._ident:
                return []
            if self._seen:
                handle.seek(self._offset - len(self._seen))
                if handle.read(len(self._seen)) != self._seen:
                    self._restart()
            handle.seek(self._offset)
            data = handle.read(limit if limit is not None else -1)
        self._offset += len(data)
        self.bytes_read += len(data)
        if data:
            self._seen = (self._seen + data)[-64:]
        parts = (self._partial + data).split(b"\n")
        self._partial = parts.pop()
        if self._skipping and len(parts):
            parts.pop(0)  # the end of the line found too long at an earlier read
            self.dropped += 1
            self._skipping = False
        if len(self._partial) > self.line_limit:
            self._partial, self._skipping = b"", True
        long = sum(len(p) > self.line_limit for p in parts)
        self.dropped += long
        return [p.decode("utf-8", "replace").rstrip("\r") for p in parts if len(p) <= self.line_limit]

    def flush(self) -> list[str]:
        """The unterminated last line, as a line (a finished log may lack its final newline)."""
        rest, self._partial = self._partial, b""
        if self._skipping:
            self._skipping, rest = False, b""
            self.dropped += 1
        return [rest.decode("utf-8", "replace")] if rest else []
