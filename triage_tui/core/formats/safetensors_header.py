"""A safetensors file's header, checked and held compactly: what the checks need per tensor (dtype,
shape, where its bytes are) in arrays, not a dict of Python objects per tensor.

The format (https://github.com/huggingface/safetensors, README "Format") is a u64 little-endian
header length N, N bytes of JSON ``{name: {"dtype", "shape", "data_offsets": [begin, end]},
"__metadata__": {str: str}}``, then the data, which the tensors tile exactly. N may reach 100 MB
(safetensors' ``MAX_HEADER_SIZE``): some 900 000 tensors of short names. Parsed into dicts, each
tensor costs ~1 KB; held here, ~200 bytes (its name and a row of a few arrays), and the JSON
parser hands each tensor's entry over as soon as it has read it (``object_pairs_hook``).
"""

from __future__ import annotations

import json
import struct
from array import array
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import cast

import numpy as np

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.safe_torch import MAX_SAFETENSORS_HEADER, SAFETENSORS_DTYPES, TensorInfo

__all__ = ["TensorTable", "read_safetensors_header"]

_DTYPE_CODES = {name: code for code, name in enumerate(SAFETENSORS_DTYPES)}
_TORCH_NAMES = [torch_name for torch_name, _ in SAFETENSORS_DTYPES.values()]
_ITEM_SIZES = [size for _, size in SAFETENSORS_DTYPES.values()]
_METADATA = "__metadata__"


class TensorTable(Mapping[str, TensorInfo]):
    """One safetensors file's tensors by name; a ``TensorInfo`` is built when one is asked for."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self._rows: dict[str, int] = {}
        self._dtypes = array("B")
        self._begins = array("q")  # absolute byte offsets in the file, header included
        self._ends = array("q")
        self._shape_starts = array("q", [0])  # row i's dims are dims[shape_starts[i]:shape_starts[i + 1]]
        self._dims = array("q")

    def __getitem__(self, name: str) -> TensorInfo:
        row = self._rows[name]
        shape = tuple(self._dims[self._shape_starts[row] : self._shape_starts[row + 1]])
        data = (self._begins[row], self._ends[row])
        return TensorInfo(name, shape, _TORCH_NAMES[self._dtypes[row]], self.file, data)

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, name: object) -> bool:
        return name in self._rows

    def _add(self, dtype: str, shape: list[int], begin: int, end: int) -> int:
        """A row for an entry already checked; its index."""
        self._dtypes.append(_DTYPE_CODES[dtype])
        self._begins.append(begin)
        self._ends.append(end)
        self._dims.extend(shape)
        self._shape_starts.append(len(self._dims))
        return len(self._begins) - 1

    def _name(self, name: str, row: int) -> None:
        self._rows[name] = row


class _Row:
    """A tensor's entry the parser has checked and put in the table: its row."""

    __slots__ = ("row",)

    def __init__(self, row: int) -> None:
        self.row = row


class _Object(list[tuple[str, object]]):
    """A JSON object of the header that is no valid tensor entry, as its (key, value) pairs, and why
    it is not one: the header itself, ``__metadata__``, or a bad entry (said with its name)."""

    def __init__(self, pairs: list[tuple[str, object]], problem: str) -> None:
        super().__init__(pairs)
        self.problem = problem


def read_safetensors_header(path: str | Path) -> TensorTable:
    """Tensor names, shapes, dtypes and byte ranges of a safetensors file, every one checked
    against the file's size and the format (dtype known, shape of whole sizes, offsets in bounds,
    tiling the data exactly), without reading any tensor data. BadInput naming the file else."""
    path = Path(path)
    try:
        if not path.is_file():
            raise BadInput(path, "no such file" if not path.exists() else "not a file")
        size = path.stat().st_size
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise BadInput(path, f"file is {size} bytes long; not a safetensors file")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > MAX_SAFETENSORS_HEADER:
                raise BadInput(
                    path,
                    f"safetensors header claims {header_len} bytes (limit "
                    f"{MAX_SAFETENSORS_HEADER}); not a safetensors file or corrupt",
                )
            if header_len > size - 8:
                raise BadInput(
                    path,
                    f"safetensors header claims {header_len} bytes but the file has "
                    f"{size - 8} after the length field (truncated?)",
                )
            header_bytes = f.read(header_len)
    except OSError as err:
        raise BadInput(path, f"cannot read it: {err.strerror or err}") from None
    table = TensorTable(path)
    data_start, data_size = 8 + header_len, size - 8 - header_len

    def entry(pairs: list[tuple[str, object]]) -> object:
        if any(isinstance(value, (_Row, _Object)) for _, value in pairs):
            return _Object(pairs, ": header entry is not an object")  # the header itself (or nested in one)
        fields = dict(pairs)
        problem = _entry_problem(fields, data_size)
        if problem is not None:
            return _Object(pairs, problem)
        begin, end = cast("list[int]", fields["data_offsets"])
        dtype, shape = cast(str, fields["dtype"]), cast("list[int]", fields["shape"])
        return _Row(table._add(dtype, shape, data_start + begin, data_start + end))

    try:
        text = header_bytes.decode("utf-8")
        del header_bytes  # the text alone from here: a 100 MB header is not held twice
        header = json.loads(text, object_pairs_hook=entry)
    except UnicodeDecodeError as err:
        raise BadInput(path, f"safetensors header is not valid JSON: not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise BadInput(path, f"safetensors header is not valid JSON: {str(err).splitlines()[0]}") from None
    except RecursionError:
        raise BadInput(path, "safetensors header is not valid JSON: nested too deeply") from None
    if isinstance(header, _Row):  # {"dtype": ..., "shape": ..., "data_offsets": ...} itself
        raise BadInput(path, "safetensors header is one tensor's entry, not tensors by name")
    if not isinstance(header, _Object):
        raise BadInput(path, "safetensors header is not a JSON object")
    for name, value in header:
        if name == _METADATA:
            continue
        if not isinstance(value, _Row):
            problem = value.problem if isinstance(value, _Object) else ": header entry is not an object"
            raise BadInput(path, f"tensor {name!r}{problem}")
        table._name(name, value.row)
    del header
    _check_tiling(path, table, data_start, data_size)
    return table


def _entry_problem(fields: dict[str, object], data_size: int) -> str | None:
    """Why one tensor's entry is not one safetensors reads (what follows its name), or None."""
    dtype, shape, offsets = fields.get("dtype"), fields.get("shape"), fields.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPES:
        return f": unknown dtype {dtype!r}"
    if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        return f": bad shape {shape!r}"
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        return f": bad data_offsets {offsets!r}"
    begin, end = offsets
    numel = 1
    for dim in shape:
        numel *= dim
    if not 0 <= begin <= end:
        return f": bad data_offsets {offsets!r}"
    if end > data_size:
        return f" claims bytes {begin}..{end} but the file holds only {data_size} data bytes (truncated?)"
    needed = numel * _ITEM_SIZES[_DTYPE_CODES[dtype]]
    if end - begin != needed:
        return f": shape {shape} {dtype} needs {needed} bytes, header gives {end - begin}"
    return None


def _check_tiling(path: Path, table: TensorTable, data_start: int, data_size: int) -> None:
    """safetensors requires the tensors to tile the data area exactly, and refuses files that don't."""
    rows = np.fromiter(table._rows.values(), np.int64, count=len(table._rows))
    begins = np.frombuffer(table._begins, np.int64)[rows] - data_start if len(rows) else np.zeros(0, np.int64)
    ends = np.frombuffer(table._ends, np.int64)[rows] - data_start if len(rows) else np.zeros(0, np.int64)
    order = np.lexsort((ends, begins))
    begins, ends, rows = begins[order], ends[order], rows[order]
    expected = np.concatenate(([0], ends[:-1]))
    gaps = np.flatnonzero(begins != expected)
    if len(gaps):
        first = int(gaps[0])
        name = next(name for name, row in table._rows.items() if row == rows[first])
        raise BadInput(
            path,
            f"tensor {name!r} starts at byte {begins[first]} of the data, expected {expected[first]} "
            "(overlapping or gapped offsets)",
        )
    covered = int(ends[-1]) if len(ends) else 0
    if covered != data_size:
        raise BadInput(path, f"tensors cover {covered} data bytes but the file has {data_size}")
