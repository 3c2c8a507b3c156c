"""One buffer of whole records into points: the vectorised fast path, and upb for the rest.

Records are grouped by length and gathered into a (records x words) matrix; rows matching a known
template (``templates``) are read out with numpy, their data CRCs checked vectorised. New templates
are discovered from representatives, each walked (``wire``) and cross-checked against
``Event.FromString``. Whatever fits no template goes through ``Event.FromString`` (upb), data CRC
checked; a record upb refuses (a tag that is not UTF-8) is walked instead. Which value a tensor
holds follows tensorboard's data_compat: ``simple_value``, or a rank-0 numeric tensor.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2, summary_pb2

from triage_tui.core.read.events import tuning
from triage_tui.core.read.events.columns import decode_layout, decode_values, payload_rows
from triage_tui.core.read.events.crc import data_crc_ok
from triage_tui.core.read.events.framing import Frames
from triage_tui.core.read.events.templates import LayoutTemplates, Template
from triage_tui.core.read.events.wire import CONTENT_KIND, KIND_WIDTH, VAL_FIELD, Layout, Walked, plugin_name, walk

_MAX_TEMPLATE_LEN = 1024  # longer records (images, histograms, graphs) take the slow path
_MIN_GROUP = 8  # below this many records a numpy pass costs more than Event.FromString
_MAX_MISSES = 32  # representatives that fit no template before a discovery round gives up
_MAX_ROUNDS = 8  # template discovery rounds per record-length group and read
_DISCOVERY_SAMPLE = 4096  # unknown rows a discovery round draws representatives from

VALUE_BITS = 16  # ordering key of a point: record index << 16 | index of the value in its Summary

# Once the templates shared by this process's decoders number this many, decoders made after share
# a new set (those made before keep theirs): under 10 MB a set (tracemalloc: reading a file of
# 16 384 tags, one template each, left 9.4 MB held, its reader's own tables included).
_MAX_SHARED_TEMPLATES = 1 << 14


class KnownTemplates:
    """The templates and tags learned by this process's decoders, shared by them.

    A template is a function of its skeleton's bytes (every byte of the record but the wall time's,
    the step's and the value's), so what one decoder walked and upb agreed with holds for any: a
    sweep's runs log the same tags from the same writer, and a run read after another takes its
    templates at the first lookup, with no walk, no discovery and no cross-check. Each decoder had
    learned them anew (a 1 000-point run: 0.67 ms of decoding where 0.38 ms does with them known).
    A record's data CRC is checked whichever decoder learned its template. Decoders hold ``lock``
    while they decode: one learns while another looks up.
    """

    def __init__(self) -> None:
        self.layouts: dict[int, list[LayoutTemplates]] = {}
        self.tags: list[str] = []
        self.tag_index: dict[str, int] = {}
        self.templates = 0
        self.lock = threading.Lock()

    def full(self) -> bool:
        return max(self.templates, len(self.tags)) >= _MAX_SHARED_TEMPLATES


_KNOWN = KnownTemplates()
_KNOWN_LOCK = threading.Lock()


def known_templates() -> KnownTemplates:
    """The set a new decoder shares: the current one, or a new one where it is full."""
    global _KNOWN
    with _KNOWN_LOCK:
        if _KNOWN.full():
            _KNOWN = KnownTemplates()
        return _KNOWN


@dataclass
class Chunk:
    """What the records of one read produced, before restart rules and storage."""

    keys: list[np.ndarray] = field(default_factory=list)
    tag_ids: list[np.ndarray] = field(default_factory=list)
    steps: list[np.ndarray] = field(default_factory=list)
    walls: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    slow_points: list[tuple[int, int, int, float, float]] = field(default_factory=list)
    starts: list[tuple[int, int]] = field(default_factory=list)  # SessionLog.START: (key, step)
    versions: list[tuple[int, float]] = field(default_factory=list)  # file_version: (key, version)
    first_summary: int | None = None  # key of the first record carrying a summary
    first_plugin: dict[int, tuple[int, str | None]] = field(default_factory=dict)  # tag id -> (key, plugin)
    corrupt: int = 0
    slow: int = 0  # records that went through Event.FromString one at a time
    grouped: bool = False  # one array each, a tag's points together, in record order (``group``)

    def saw_summary(self, key: int) -> None:
        if self.first_summary is None or key < self.first_summary:
            self.first_summary = key

    def saw_tag(self, tag_id: int, key: int, plugin: str | None) -> None:
        known = self.first_plugin.get(tag_id)
        if known is None or key < known[0]:
            self.first_plugin[tag_id] = (key, plugin)

    def group(self) -> None:
        """The points as one array each, a tag's points together (ascending tag id) in record order:
        what storing them takes."""
        if self.grouped or not self.keys:
            return
        keys = np.concatenate(self.keys)
        tag_ids = np.concatenate(self.tag_ids)
        columns = [keys, tag_ids] + [np.concatenate(c) for c in (self.steps, self.walls, self.values)]
        self.keys = self.tag_ids = self.steps = self.walls = self.values = []  # peak memory
        # Record order within each tag: sort by key, then (stably) by tag.
        order = np.argsort(keys, kind="stable")
        tag_sorted = tag_ids[order]
        if tag_sorted.size and tag_sorted.max() < 65536:
            tag_sorted = tag_sorted.astype(np.uint16)  # radix sort
        order = order[np.argsort(tag_sorted, kind="stable")]
        self.keys, self.tag_ids, self.steps, self.walls, self.values = ([c[order]] for c in columns)
        self.grouped = True

    def collect_slow_points(self) -> None:
        """Points decoded one record at a time join the numpy columns in one go."""
        if not self.slow_points:
            return
        keys, tag_ids, steps, walls, values = zip(*self.slow_points, strict=True)
        self.keys.append(np.array(keys, np.int64))
        self.tag_ids.append(np.array(tag_ids, np.int64))
        self.steps.append(np.array(steps, np.int64))
        self.walls.append(np.array(walls, np.float64))
        self.values.append(np.array(values, np.float64))
        self.slow_points = []


def _parse_file_version(text: str) -> float:
    # tensorflow/tensorboard tensorboard/backend/event_processing/event_util.py: ParseFileVersion
    try:
        return float(text.split(":")[-1])
    except ValueError:
        return -1.0


def _proto_scalar(value: summary_pb2.Summary.Value) -> float | None:
    """The scalar a decoded Summary.Value holds: simple_value or a rank-0 numeric tensor."""
    which = value.WhichOneof("value")
    if which == "simple_value":
        return value.simple_value
    if which != "tensor":
        return None
    tensor = value.tensor
    if tensor.tensor_shape.dim or tensor.tensor_shape.unknown_rank:
        return None
    dtype = tensor.dtype
    content = tensor.tensor_content
    if content:  # tensor_content wins over the *_val fields (tensorboard.util.tensor_util.make_ndarray)
        kind = CONTENT_KIND.get(dtype)
        if kind is None or len(content) != KIND_WIDTH[kind]:
            return None
        return float(decode_values(payload_rows(content), 0, len(content), kind)[0][0])
    source = VAL_FIELD.get(dtype)
    if source is None:
        return None
    vals = getattr(tensor, tensor.DESCRIPTOR.fields_by_number[source[0]].name)
    if len(vals) != 1:
        return None
    raw, kind = vals[0], source[1]
    if kind == "v_f16":
        return float(np.array([raw & 0xFFFF], np.uint16).view(np.float16)[0])
    if kind == "v_bf16":
        return float((np.array([raw & 0xFFFF], np.uint32) << np.uint32(16)).view(np.float32)[0])
    return float(raw)


def _same_float(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)


def _metadata_bytes(value: summary_pb2.Summary.Value) -> bytes | None:
    return value.metadata.SerializeToString() if value.HasField("metadata") else None


class Decoder:
    """Turns whole records into points with the templates of this process (``KnownTemplates``),
    adding those it learns; a tag id indexes ``tags``, the set's tags."""

    def __init__(self) -> None:
        self.known = known_templates()
        self.layouts = self.known.layouts
        self.tags = self.known.tags
        self.tag_index = self.known.tag_index

    def tag_id(self, tag: str) -> int:
        found = self.tag_index.get(tag)
        if found is None:
            found = self.tag_index[tag] = len(self.tags)
            self.tags.append(tag)
        return found

    def decode(self, buf, frames: Frames) -> Chunk:
        with self.known.lock:
            return self._decode(buf, frames)

    def _decode(self, buf, frames: Frames) -> Chunk:
        chunk = Chunk()
        starts = frames.starts + 12  # payload offsets
        lengths = frames.lengths
        slow: list[np.ndarray] = []
        fits = (lengths >= 16) & (lengths <= _MAX_TEMPLATE_LEN) & tuning.TEMPLATES
        slow.append(np.flatnonzero(~fits))
        candidates = np.flatnonzero(fits)
        if candidates.size:
            by_length = candidates[np.argsort(lengths[candidates].astype(np.uint16), kind="stable")]
            edges = (np.flatnonzero(np.diff(lengths[by_length])) + 1).tolist()
            for group in np.split(by_length, edges):
                if group.size < _MIN_GROUP:
                    slow.append(group)
                    continue
                length = int(lengths[group[0]])
                width = 8 * -(-length // 8)  # whole words: the record's CRC and the buffer's slack fill the last
                # Every offset of the buffer as one opaque `width`-byte item: gathering whole
                # records this way costs a fifth of indexing word by word.
                records = np.ndarray((len(buf) - width + 1,), np.dtype((np.void, width)), buffer=buf, strides=(1,))
                for first in range(0, group.size, tuning.GROUP_ROWS):
                    part = group[first : first + tuning.GROUP_ROWS]
                    matrix = records[starts[part]].view("<u8").reshape(part.size, -1)  # one cache miss a record
                    slow.append(self._templated(buf, starts, part, matrix, length, chunk))
        for r in np.sort(np.concatenate(slow)).tolist():
            self._slow(buf, int(starts[r]), int(lengths[r]), r, chunk)
        chunk.collect_slow_points()
        return chunk

    def _templated(self, buf, starts, recs, matrix, length, chunk) -> np.ndarray:
        """Records of one payload length: known templates, then discovery. Returns the rest."""
        for lt in self.layouts.get(length, []):
            words = lt.words(matrix)
            ids = lt.lookup(words, lt.hashes(words))
            recs, matrix = self._take_hits(buf, starts, lt, recs, matrix, ids, ids >= 0, chunk)
            if recs.size == 0:
                return recs
        leftovers: list[np.ndarray] = []
        for _ in range(_MAX_ROUNDS):
            if recs.size == 0:
                break
            start = int(starts[recs[0]])
            walked = walk(bytes(buf[start : start + length]))
            keep = np.ones(recs.size, bool)
            if walked is not None:
                lt = self._layout(walked.layout)
                words = lt.words(matrix)
                hashes = lt.hashes(words)
                ids = lt.lookup(words, hashes)
                unknown = np.flatnonzero(ids < 0)
                if unknown.size:
                    keep[self._discover(buf, starts, recs, lt, words, hashes, unknown, walked, chunk)] = False
                    if unknown.size == ids.size:  # a first read: no copy of every row
                        ids = lt.lookup(words, hashes)
                    else:
                        ids[unknown] = lt.lookup(words[unknown], hashes[unknown])
                hit = (ids >= 0) & keep
                keep &= ~hit
                recs, matrix = self._take_hits(buf, starts, lt, recs, matrix, ids, hit, chunk, rest=keep)
                keep = keep[keep]
            if keep.size and keep[0]:
                leftovers.append(recs[:1])  # fits no template: Event.FromString decides
                keep[0] = False
            if not keep.all():
                recs, matrix = recs[keep], matrix[keep]
        leftovers.append(recs)
        return np.concatenate(leftovers)

    def _take_hits(self, buf, starts, lt, recs, matrix, ids, hit, chunk, rest=None):
        """The rows `hit` read out with template `ids`; returns (recs, matrix) of the rows `rest`
        (default: those not hit). Every row hit, the common case, takes no copies."""
        if hit.all():
            self._take(buf, starts, lt, recs, matrix, ids, chunk)
        elif hit.any():
            self._take(buf, starts, lt, recs[hit], matrix[hit], ids[hit], chunk)
        rest = ~hit if rest is None else rest
        if rest.all():
            return recs, matrix
        return recs[rest], matrix[rest]

    def _layout(self, layout: Layout) -> LayoutTemplates:
        known = self.layouts.setdefault(layout.length, [])
        for lt in known:
            if lt.layout == layout:
                return lt
        lt = LayoutTemplates(layout)
        known.append(lt)
        return lt

    def _discover(self, buf, starts, recs, lt, words, hashes, unknown, walked, chunk) -> np.ndarray:
        """New templates from rows with identical skeletons; returns the rows found corrupt.

        Representatives come from a sample of the unknown rows, biggest groups first: rows of
        another layout hash to scattered values and run out the miss budget quickly.
        """
        length = lt.layout.length
        sample = unknown[:_DISCOVERY_SAMPLE]
        _, first, counts = np.unique(hashes[sample], return_index=True, return_counts=True)
        reps = sample[first[np.argsort(-counts, kind="stable")]].tolist()
        if sample[0] == 0:  # the walked record's group goes first
            reps.remove(0)
            reps.insert(0, 0)
        dropped = []
        misses = 0
        for row in reps:
            start = int(starts[recs[row]])
            payload = bytes(buf[start : start + length])
            found = walked if row == 0 else walk(payload)
            if found is None or found.layout != lt.layout:
                misses += 1
                if misses >= _MAX_MISSES:
                    break
                continue
            misses = 0
            if not data_crc_ok(buf, start - 12, length):
                chunk.corrupt += 1
                dropped.append(row)
                continue
            tag = found.tag.decode("utf-8", "backslashreplace")
            if self._agrees(payload, found, tag):
                lt.add(Template(self.tag_id(tag), found.plugin), words[row], int(hashes[row]))
                self.known.templates += 1
        return np.array(dropped, np.int64)

    @staticmethod
    def _agrees(payload: bytes, walked: Walked, tag: str) -> bool:
        """Cross-check a new template against upb on its representative record."""
        try:
            event = event_pb2.Event.FromString(payload)
        except DecodeError:
            return True  # e.g. a tag that is not UTF-8: upb refuses it, the walker decodes it
        values = event.summary.value
        if len(values) != 1 or values[0].tag != tag:
            return False
        expected = _proto_scalar(values[0])
        if expected is None:
            return False
        wall, step, value, ok = decode_layout(payload_rows(payload), walked.layout)
        plugin = plugin_name(_metadata_bytes(values[0]), values[0].WhichOneof("value") == "simple_value")
        return (
            bool(ok[0])
            and _same_float(float(wall[0]), event.wall_time)
            and int(step[0]) == event.step
            and _same_float(float(value[0]), expected)
            and plugin == walked.plugin
        )

    def _take(self, buf, starts, lt, recs, matrix, ids, chunk) -> None:
        rows = np.ascontiguousarray(matrix).view(np.uint8)
        wall, step, value, ok = decode_layout(rows, lt.layout)
        if not ok.all():
            # A varint of another width in a variable field: another layout after all; upb decides.
            for r in recs[~ok].tolist():
                self._slow(buf, int(starts[r]), lt.layout.length, r, chunk)
            recs, ids, wall, step, value, rows = recs[ok], ids[ok], wall[ok], step[ok], value[ok], rows[ok]
        if recs.size:
            # Every record's data CRC: a flipped bit in a value or step field fits the template
            # and would otherwise be read as a silently wrong number.
            stored_at = starts[recs] + lt.layout.length
            stored = np.ndarray((len(buf) - 3,), "<u4", buffer=buf, strides=(1,))[stored_at]
            good = lt.data_crcs(rows, ids) == stored
            if not good.all():
                chunk.corrupt += int(good.size - good.sum())
                recs, ids, wall, step, value = recs[good], ids[good], wall[good], step[good], value[good]
        if recs.size == 0:
            return
        keys = recs.astype(np.int64) << VALUE_BITS
        chunk.keys.append(keys)
        chunk.tag_ids.append(lt.tag_ids()[ids])
        chunk.steps.append(step)
        chunk.walls.append(wall)
        chunk.values.append(value)
        chunk.saw_summary(int(keys.min()))
        # Each template's first row (np.unique would sort every row to find them).
        first = np.full(len(lt.templates), ids.size, np.int64)
        np.minimum.at(first, ids, np.arange(ids.size))
        present = np.flatnonzero(first < ids.size)
        for template, at in zip(present.tolist(), first[present].tolist(), strict=True):
            t = lt.templates[template]
            chunk.saw_tag(t.tag_id, int(keys[at]), t.plugin)

    def _slow(self, buf, start: int, length: int, rec: int, chunk: Chunk) -> None:
        """One record through upb (or the walker when upb refuses it); data CRC always checked."""
        chunk.slow += 1
        if not data_crc_ok(buf, start - 12, length):
            chunk.corrupt += 1
            return
        payload = bytes(buf[start : start + length])
        key = rec << VALUE_BITS
        try:
            event = event_pb2.Event.FromString(payload)
        except DecodeError:
            walked = walk(payload)  # e.g. a tag that is not UTF-8 (tags are proto3 strings)
            if walked is None:
                chunk.corrupt += 1
                return
            wall, step, value, ok = decode_layout(payload_rows(payload), walked.layout)
            if not ok[0]:
                chunk.corrupt += 1
                return
            chunk.saw_summary(key)
            tag = walked.tag.decode("utf-8", "backslashreplace")
            self._point(chunk, key, tag, walked.plugin, int(step[0]), float(wall[0]), float(value[0]))
            return
        which = event.WhichOneof("what")
        if which == "summary":
            chunk.saw_summary(key)
            for index, value in enumerate(event.summary.value):
                scalar = _proto_scalar(value)
                if scalar is None:
                    continue
                plugin = plugin_name(_metadata_bytes(value), value.WhichOneof("value") == "simple_value")
                point_key = key + min(index, (1 << VALUE_BITS) - 1)
                self._point(chunk, point_key, value.tag, plugin, event.step, event.wall_time, scalar)
        elif which == "file_version":
            chunk.versions.append((key, _parse_file_version(event.file_version)))
        elif which == "session_log" and event.session_log.status == event_pb2.SessionLog.START:
            chunk.starts.append((key, event.step))

    def _point(
        self, chunk: Chunk, key: int, tag: str, plugin: str | None, step: int, wall: float, value: float
    ) -> None:
        tag_id = self.tag_id(tag)
        chunk.saw_tag(tag_id, key, plugin)
        chunk.slow_points.append((key, tag_id, step, wall, value))
