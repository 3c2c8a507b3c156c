"""SQLite stores opened the one way a watcher may: read-only, never a byte written beside them.

A tracker's database (MLflow's ``mlflow.db``, trackio's ``<project>.db``) belongs to the
trainer writing it. It is opened with ``mode=ro`` (https://www.sqlite.org/uri.html): no write, and
no journal of ours; a WAL database's ``-wal`` and ``-shm`` are the writer's, read as SQLite reads
them (https://www.sqlite.org/wal.html, "Read-Only Databases"), and where its writer left neither
(a clean close checkpoints and deletes them), read as immutable, since a read-only connection would
create both and leave them behind. ``query_only`` refuses a write even
if a statement tried one. A statement that meets the writer's lock waits ``BUSY_TIMEOUT_SECONDS``,
then the poll gives up (``Locked``) and the next poll tries again: a poll never stalls behind a
writer. Every connection is closed when the read is done, so nothing stays open on a store between
polls (the trainer may delete, move or vacuum it).
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from triage_tui.core.errors import BadInput
from triage_tui.core.read.trackers import tuning

# The files whose change means the store may hold new rows: a commit in WAL mode writes the -wal
# file; in rollback mode, the database itself.
WAL_SUFFIX = "-wal"
SHM_SUFFIX = "-shm"
# SQLite's primary result codes for a lock held by another connection.
_LOCKED_CODES = frozenset({"SQLITE_BUSY", "SQLITE_LOCKED"})

StoreKey = tuple[tuple[int, int, int] | None, ...]


class Locked(Exception):
    """The store's writer held its lock past the busy timeout: read again at the next poll."""


class RowTail:
    """Where an incremental read of one run's rows in a store stands, the same for every store: the
    store's key when a poll last read it, whether that poll read to the end of the rows, the last
    row id read, the rows read so far, and how many polls in a row found the store locked (a lock
    is waited out quietly, the next poll tries again, until LOCKED_POLLS_SAID polls in a row: then
    it is said as an error of the run)."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.last_row = 0
        self.rows_read = 0  # a poll of an unchanged store adds none
        self._key: StoreKey | None = None
        self._caught_up = False
        self._locked_polls = 0

    def changed(self) -> StoreKey | None:
        """The store's key when a poll should read it; None when it is unchanged since a poll that
        read to the end of its rows."""
        key = store_key(self.store)
        return None if key == self._key and self._caught_up else key

    def locked(self) -> None:
        self._locked_polls += 1
        if self._locked_polls >= tuning.LOCKED_POLLS_SAID:
            raise BadInput(self.store, f"locked by its writer for {self._locked_polls} polls in a row")

    def took(self, key: StoreKey, rows: list, limit: int) -> None:
        """A poll at ``key`` read ``rows`` (row id first), at most ``limit``: fewer is the end."""
        self.took_through(key, len(rows), rows[-1][0] if rows else self.last_row, limit)

    def took_through(self, key: StoreKey, count: int, last_row: int, limit: int) -> None:
        """A poll at ``key`` read ``count`` rows, at most ``limit``, up to row id ``last_row``."""
        self._locked_polls = 0
        self._key, self._caught_up = key, count < limit
        self.last_row = last_row
        self.rows_read += count


def store_key(path: Path) -> StoreKey:
    """What changes when a store may hold new rows: inode, size and mtime of the database and its -wal."""
    key: list[tuple[int, int, int] | None] = []
    for candidate in (path, path.with_name(path.name + WAL_SUFFIX)):
        try:
            st = os.stat(candidate)
        except OSError:
            key.append(None)
        else:
            key.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(key)


def _uri(path: Path, *, immutable: bool) -> str:
    # Every character a URI gives meaning to (?, #, %) escaped: the path is the file's, whatever its name.
    return "file:" + quote(str(path.absolute()), safe="/") + ("?mode=ro&immutable=1" if immutable else "?mode=ro")


def _without_live_wal(path: Path) -> bool:
    """A WAL database (header bytes 18-19: 2, https://www.sqlite.org/fileformat2.html) whose -wal or
    -shm is absent: its last writer closed (and checkpointed) or the files were copied without them.
    A read-only connection would create both beside it and leave them (SQLite makes the -shm a reader
    needs); read as immutable instead: nothing is written, and no writer has rows in a WAL then."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    if len(header) < 20 or header[18] != 2:
        return False
    return not (path.with_name(path.name + WAL_SUFFIX).exists() and path.with_name(path.name + SHM_SUFFIX).exists())


@contextmanager
def reading(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the store at ``path`` for one poll, closed after it.

    Raises ``BadInput`` for a file SQLite cannot read (not a database, damaged, a hot journal a
    read-only reader may not roll back) and ``Locked`` for a writer's lock held past the timeout."""
    try:
        st = os.stat(path)
    except OSError as err:
        raise BadInput(path, f"cannot read it: {err.strerror or err}") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(path, "not a regular file")  # a FIFO named like a store must not hang the poll
    try:
        conn = sqlite3.connect(
            _uri(path, immutable=_without_live_wal(path)),
            uri=True,
            timeout=tuning.BUSY_TIMEOUT_SECONDS,
            isolation_level=None,
            check_same_thread=False,
        )
    except sqlite3.Error as err:
        raise BadInput(path, f"cannot open it as a SQLite database: {err}") from None
    try:
        conn.execute("PRAGMA query_only = ON")
        yield conn
    except sqlite3.Error as err:
        if getattr(err, "sqlite_errorname", "") in _LOCKED_CODES or "locked" in str(err):
            raise Locked(str(err)) from None
        raise BadInput(path, f"cannot read it as a SQLite database: {err}") from None
    finally:
        conn.close()


def columns_of(conn: sqlite3.Connection, table: str) -> frozenset[str]:
    """The column names of ``table`` (empty when there is no such table)."""
    return frozenset(row[1] for row in conn.execute(f"PRAGMA table_info({table})"))


def tables_of(conn: sqlite3.Connection) -> frozenset[str]:
    return frozenset(row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
