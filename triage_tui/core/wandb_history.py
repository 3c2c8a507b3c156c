"""W&B run files (``run-<id>.wandb``): incremental, damage-tolerant reading of history rows into scalars.

A W&B run always leaves its records on the training node, online or offline:
``wandb/run-<date>-<id>/run-<id>.wandb`` (``offline-run-…`` when offline). Nothing here contacts a
server or writes into the run directory; files are opened read-only.

File format (wandb/wandb ``core/pkg/leveldb/record.go`` and ``livereader.go``, the reader behind
``wandb leet``; before wandb-core, ``wandb/sdk/internal/datastore.py``): a 7-byte header
``":W&B" | u16 magic 0xBEE1 | u8 version 0``, then LevelDB log blocks of 32 KiB counted from the
start of the file. A block holds chunks ``u32 crc32(type byte + data) | u16 length | u8 type | data``
(CRC-32/IEEE, zlib's; type FULL=1, FIRST=2, MIDDLE=3, LAST=4); fewer than 7 bytes left in a block are
padding. A logical record (FULL, or FIRST MIDDLE* LAST) is a serialized ``wandb_internal_pb2.Record``,
decoded here with the wandb package's own generated protos (the optional extra ``triage-tui[wandb]``,
imported on first use, so TensorBoard-only users never load it).

What becomes a scalar:
- ``history`` records, one per committed ``wandb.log`` row. Every item whose JSON value is a number
  (``NaN`` and ``Infinity`` included, as the SDK writes them) is a point of the series named by its key
  (nested keys joined with ``.``, as W&B names them); booleans, strings, media and histograms are not.
  Wall time is the row's ``_timestamp``.
- The step is the row's ``_step``, unless ``define_metric`` gave the key a step metric (by name, or by
  glob: a metric defined by name wins over a glob, as in the W&B UI): then the row's value of that
  step metric. HF Trainer's WandbCallback does this for every key (``train/global_step``). A row
  without that value, or with a non-integer one, gives no point for the key (counted, never guessed:
  mixing two step scales would let preemption erase the series).
- ``run`` and ``config`` records update the run's config (``wandb.config``), used like config.json.

Robustness, as for event files (core.events): only whole records are consumed and a record still
being written (a header or payload not all there, a FIRST without its LAST) waits for the next poll;
a chunk whose CRC, type or length is bad is damage only when a valid chunk follows it, then it is
skipped (counted in ``corrupt_records``) and reading resyncs at that chunk; otherwise it is a tail
still being written. (W&B's own LiveReader stops at the first bad chunk for good.) A record that
does not decode as a Record is skipped and counted. A file that shrinks or changes inode is read again.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import stat
import struct
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from triage_tui.core import fileio
from triage_tui.core.errors import BadInput
from triage_tui.core.events.event_file import ReadStats
from triage_tui.core.events.reader import any_file_replaced
from triage_tui.core.natural_sort import natural_key
from triage_tui.core.runs.names import is_wandb_file_name
from triage_tui.core.series import RunScalars

__all__ = ["WANDB_HEADER", "WandbHistory", "WandbUnavailable", "find_wandb_files", "wandb_protos"]

WANDB_HEADER = b":W&B\xe1\xbe\x00"  # ident, magic 0xBEE1 (little-endian), version 0
_BLOCK = 32768
_CHUNK_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in (_FULL, _FIRST, _MIDDLE, _LAST)}
_UNPACK = struct.Struct("<IHB").unpack_from
_READ_LIMIT = 64 << 20  # bytes read per step; a live run appends far less between polls
STEP_KEY = "_step"
TIME_KEY = "_timestamp"
INSTALL_HINT = "pip install 'triage-tui[wandb]'"


class WandbUnavailable(BadInput):
    """W&B files were found but the wandb package (the optional extra) cannot be imported."""


_protos_module: Any = None


def wandb_protos():
    """wandb's generated ``wandb_internal_pb2`` (imported once, lazily: importing wandb takes ~1 s)."""
    global _protos_module
    if _protos_module is None:
        try:
            from wandb.proto import wandb_internal_pb2
        except ImportError as err:
            raise WandbUnavailable(None, f"reading W&B runs needs the wandb package ({INSTALL_HINT}): {err}") from None
        _protos_module = wandb_internal_pb2
    return _protos_module


# --------------------------------------------------------------------------- framing


@dataclass
class _Framed:
    records: list[bytes]
    consumed: int  # bytes done with, from the read's start (always a record boundary)
    ends: list[int] = field(default_factory=list)  # where each record ends, from the read's start
    corrupt: int = 0
    skipped_bytes: int = 0


def _valid_chunk(buf: bytes, pos: int, n: int, in_block: int) -> tuple[int, int] | None:
    """(type, length) of a whole, CRC-valid chunk at `pos` that fits in its block, else None."""
    if pos + _CHUNK_HEADER > n:
        return None
    crc, length, kind = _UNPACK(buf, pos)
    end = pos + _CHUNK_HEADER + length
    if kind not in _TYPE_CRC or in_block + _CHUNK_HEADER + length > _BLOCK or end > n:
        return None
    if zlib.crc32(buf[pos + _CHUNK_HEADER : end], _TYPE_CRC[kind]) != crc:
        return None
    return kind, length


def _record_start_after(buf: bytes, pos: int, n: int, base: int) -> int:
    """Offset of the first whole valid FULL or FIRST chunk at or after `pos`, or -1.

    `base` is buf's offset in the file (blocks are counted from the file's start). MIDDLE and
    LAST chunks of a record whose head was damaged are stepped over: they cannot start a record.
    """
    while pos + _CHUNK_HEADER <= n:
        in_block = (base + pos) % _BLOCK
        if _BLOCK - in_block < _CHUNK_HEADER:
            pos += _BLOCK - in_block
            continue
        found = _valid_chunk(buf, pos, n, in_block)
        if found is not None and found[0] in (_FULL, _FIRST):
            return pos
        pos += 1
    return -1


def _frame(buf: bytes, base: int) -> _Framed:
    """Split buf (file bytes from offset `base`, a record boundary) into whole logical records."""
    n = len(buf)
    out = _Framed([], 0)
    pos = 0
    while True:
        start = pos
        parts: list[bytes] = []
        outcome = ""
        while not outcome:
            in_block = (base + pos) % _BLOCK
            if _BLOCK - in_block < _CHUNK_HEADER:
                pos += _BLOCK - in_block  # a block's trailer: padding
                continue
            if pos + _CHUNK_HEADER > n:
                outcome = "wait"  # a header still being written
                break
            _, length, kind = _UNPACK(buf, pos)
            fits = kind in _TYPE_CRC and in_block + _CHUNK_HEADER + length <= _BLOCK
            if fits and pos + _CHUNK_HEADER + length > n:
                outcome = "wait"  # a plausible header whose payload is still being written
                break
            chunk = _valid_chunk(buf, pos, n, in_block)
            if chunk is None:
                outcome = "damage"
                break
            kind, length = chunk
            in_sequence = (kind in (_FULL, _FIRST)) == (not parts)
            if not in_sequence:
                outcome = "damage"  # e.g. a FIRST whose LAST never came, then a new record
                break
            parts.append(buf[pos + _CHUNK_HEADER : pos + _CHUNK_HEADER + length])
            pos += _CHUNK_HEADER + length
            if kind in (_FULL, _LAST):
                outcome = "record"
        if outcome == "record":
            out.records.append(parts[0] if len(parts) == 1 else b"".join(parts))
            out.ends.append(pos)
            out.consumed = pos
            continue
        if outcome == "damage":
            # A whole valid record start further on proves these bytes are damage; without one they
            # may be a record still being written (or zeros not yet overwritten): wait for them.
            target = _record_start_after(buf, pos, n, base)
            if target >= 0:
                in_block = (base + pos) % _BLOCK
                zeros_to_block_end = target == pos - in_block + _BLOCK and not any(buf[pos:target])
                if not (zeros_to_block_end and not parts):
                    out.corrupt += 1  # (zeros up to the next block are unused space, not damage)
                    out.skipped_bytes += target - start
                out.consumed = pos = target
                continue
        out.consumed = start
        return out


# --------------------------------------------------------------------------- one file


@dataclass
class _FileState:
    path: Path
    dev: int = -1
    ino: int = -1
    offset: int = 0  # file offset of the next record; 0 = the header is not read yet


# Points of one poll before they go into the series: tag -> (steps, wall times, values), row order.
_Rows = dict[str, tuple[list[int], list[float], list[float]]]


_NUMBER_START = frozenset("-0123456789NI")  # JSON numbers, and NaN/Infinity as Python's json writes them


def _item_key(item) -> str:
    return item.key or ".".join(item.nested_key)


class WandbHistory:
    """Incremental reader for the .wandb files of one run; `scalars` is updated in place.

    ``prefix`` is put in front of every tag (``wandb/`` when the run also has event files, so that
    the two sources' series never merge). Files are read in the order given (discovery's natural
    order: a resumed run's later directory after the earlier one); a step going back replaces what
    came after it, as for event files. ``problems`` names what could not be read, per file.
    """

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.scalars = RunScalars()
        self.totals = ReadStats()
        self.config: dict[str, Any] = {}
        self.config_version = 0  # bumps whenever a run or config record changed `config`
        self.unkeyed_points = 0  # values whose step metric was missing from the row or not an integer
        # The run's ``exit`` record (RunExitRecord.exit_code, wandb/proto/wandb_internal.proto): what
        # wandb.finish(exit_code=...) or the process's exit hook recorded; None while the run has none.
        self.exit_code: int | None = None
        self.problems: dict[Path, str] = {}
        self.damaged: dict[Path, int] = {}  # file -> damaged records skipped in it, every poll so far
        self._files: dict[Path, _FileState] = {}
        self._named_metrics: dict[str, str] = {}  # key -> its step metric ("" = _step)
        self._glob_metrics: list[tuple[str, str]] = []  # (glob, step metric), in definition order
        self._step_of: dict[str, tuple[str, str]] = {}  # cache: key -> (tag, step metric or "" for _step)
        self._typed = False
        self._lock = threading.Lock()

    def set_files(self, paths: Iterable[Path]) -> None:
        with self._lock:
            self._files = {Path(p): self._files.get(Path(p)) or _FileState(Path(p)) for p in paths}

    def poll(self) -> ReadStats:
        """Stat every file and decode only the records appended since the last poll."""
        with self._lock:
            stats = ReadStats(files=len(self._files))
            if not self._files:
                return stats
            try:
                pb = wandb_protos()
                # Newer protos carry typed values (a `value` oneof); older ones only value_json.
                self._typed = "value" in pb.HistoryItem.DESCRIPTOR.oneofs_by_name
            except WandbUnavailable as err:
                self.problems = dict.fromkeys(self._files, err.what)
                stats.unreadable_files = len(self._files)
                return stats
            if any_file_replaced(self._files.values()):
                self._forget_all()
                stats.resets += 1
            rows: _Rows = {}
            for state in self._files.values():
                self._read(pb, state, stats, rows)
            for tag, (steps, walls, values) in rows.items():
                self.scalars.series_for(tag, "wandb").extend(
                    np.array(steps, np.int64), np.array(walls, np.float64), np.array(values, np.float64)
                )
            if stats.scalars or stats.resets:
                self.scalars.version += 1
            self.totals.add(stats)
            return stats

    # ------------------------------------------------------------------ files

    def _forget_all(self) -> None:
        # A rewritten file: every file of the run is read again, in order (as RunEvents does).
        self.scalars.clear()
        self.config = {}
        self.unkeyed_points = 0
        self.exit_code = None
        self.problems = {}
        self.damaged = {}
        self._named_metrics, self._glob_metrics, self._step_of = {}, [], {}
        self._files = {p: _FileState(p) for p in self._files}

    def _read(self, pb, state: _FileState, stats: ReadStats, rows: _Rows) -> None:
        try:
            handle = fileio.open_polled(state.path)  # a FIFO named like a run file must not hang the poll
        except FileNotFoundError:
            return
        except OSError as err:
            self.problems[state.path] = f"cannot read: {err.strerror or err}"
            stats.unreadable_files += 1
            return
        with handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode):
                self.problems[state.path] = "not a regular file"
                stats.unreadable_files += 1
                return
            if state.dev < 0:
                state.dev, state.ino = st.st_dev, st.st_ino
            elif (st.st_dev, st.st_ino) != (state.dev, state.ino):
                return  # replaced since the stat: the next poll starts over
            size = st.st_size
            if state.offset == 0:
                header = handle.read(len(WANDB_HEADER))
                stats.bytes_read += len(header)
                if len(header) < len(WANDB_HEADER) and WANDB_HEADER.startswith(header):
                    stats.pending_bytes += len(header)
                    return  # the writer has not finished the header yet
                if header != WANDB_HEADER:
                    self.problems[state.path] = "not a W&B run file (no ':W&B' version 0 header)"
                    stats.unreadable_files += 1
                    return
                self.problems.pop(state.path, None)
                state.offset = len(WANDB_HEADER)
            window = _READ_LIMIT
            corrupt_before = stats.corrupt_records
            while state.offset < size:
                handle.seek(state.offset)
                buf = handle.read(min(size - state.offset, window))
                stats.bytes_read += len(buf)
                framed = _frame(buf, state.offset)
                stats.corrupt_records += framed.corrupt
                stats.skipped_bytes += framed.skipped_bytes
                for payload in framed.records:
                    self._decode(pb, payload, stats, rows)
                state.offset += framed.consumed
                if state.offset + len(buf) - framed.consumed >= size:
                    break  # the rest is a record still being written
                window = _READ_LIMIT if framed.consumed else 2 * window  # a record longer than the window
            stats.pending_bytes += max(size - state.offset, 0)
            if stats.corrupt_records > corrupt_before:
                self.damaged[state.path] = self.damaged.get(state.path, 0) + stats.corrupt_records - corrupt_before

    # ------------------------------------------------------------------ records

    def _decode(self, pb, payload: bytes, stats: ReadStats, rows: _Rows) -> None:
        stats.records += 1
        try:
            record = pb.Record.FromString(payload)
        except DecodeError:  # the CRC matched, so the writer wrote something that is not a Record
            stats.corrupt_records += 1
            return
        kind = record.WhichOneof("record_type")
        if kind == "history":
            self._history(record.history, stats, rows)
        elif kind == "metric":
            self._metric(record.metric)
        elif kind == "run":
            self._config(record.run.config.update, ())
        elif kind == "config":
            self._config(record.config.update, record.config.remove)
        elif kind == "exit":
            self.exit_code = int(record.exit.exit_code)

    def _history(self, history, stats: ReadStats, rows: _Rows) -> None:
        # The hot loop of a cold read (one pass per item of every row): attribute reads on upb
        # messages are the cost, so each is read once and the common case (value_json) goes first.
        values: dict[str, float] = {}
        step = history.step.num
        wall = 0.0
        typed = self._typed
        for item in history.item:
            nested = item.nested_key
            key = item.key or (nested[0] if len(nested) == 1 else ".".join(nested))
            text = item.value_json
            if text:
                if text[0] not in _NUMBER_START:
                    continue  # strings, booleans, null, lists and objects (media, histograms)
                if key == STEP_KEY:
                    try:
                        step = int(text)  # exact, even past 2**53
                        continue
                    except ValueError:
                        pass
                try:
                    value = float(text)
                except ValueError:
                    continue
            elif typed:
                which = item.WhichOneof("value")
                if which == "number":
                    value = item.number
                elif which == "integer":
                    value = float(item.integer)
                else:
                    continue
            else:
                continue
            if key == TIME_KEY:
                wall = value
            elif key == STEP_KEY:
                if math.isfinite(value):
                    step = int(value)
            elif key[0] != "_":  # W&B's own keys (_runtime, _wandb.*): not metrics
                values[key] = value
        step_of = self._step_of
        for key, value in values.items():
            target = step_of.get(key)
            if target is None:
                target = step_of[key] = (self.prefix + key, self._step_metric(key))
            tag, metric = target
            point_step = step
            if metric:
                x = values.get(metric)
                if x is None or not math.isfinite(x) or x != int(x):
                    self.unkeyed_points += 1
                    continue
                point_step = int(x)
            columns = rows.get(tag)
            if columns is None:
                columns = rows[tag] = ([], [], [])  # steps, wall times, values
            columns[0].append(point_step)
            columns[1].append(wall)
            columns[2].append(value)
            stats.scalars += 1

    def _step_metric(self, key: str) -> str:
        """The step metric define_metric gave `key` ("" = _step): by name, else the first glob that matches."""
        found = self._named_metrics.get(key)
        if found is None:
            found = next((s for glob, s in self._glob_metrics if fnmatch.fnmatchcase(key, glob)), "")
        return "" if found == key else found  # a step metric itself is plotted against _step

    def _metric(self, metric) -> None:
        if metric.name:
            self._named_metrics[metric.name] = metric.step_metric
        elif metric.glob_name:
            self._glob_metrics.append((metric.glob_name, metric.step_metric))
        else:
            return
        self._step_of = {}

    def _config(self, update, remove) -> None:
        for item in update:
            try:
                self.config[_item_key(item)] = json.loads(item.value_json)
            except ValueError:
                continue
        for item in remove:
            self.config.pop(_item_key(item), None)
        self.config_version += 1


def find_wandb_files(path: str | Path) -> list[Path]:
    """Every W&B run file (run-*.wandb) below `path`, hidden dirs skipped, in natural order."""
    path = Path(path)
    if path.is_file():
        return [path]
    found: list[Path] = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted((d for d in dirs if not d.startswith(".")), key=natural_key)
        found.extend(Path(root) / name for name in sorted(files, key=natural_key) if is_wandb_file_name(name))
    return found
