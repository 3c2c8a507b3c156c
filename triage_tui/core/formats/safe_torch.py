"""The only two ways the program reads tensors from disk: a weights-only ``torch.load`` and a
bounds-checked safetensors header.

Every ``.pt``/``.bin``/``.ckpt`` an EAGLE-3 stack writes is a pickle (PyTorch `torch/serialization.py`
section 7), and several trainers load them with ``weights_only=False``. triage never does:
a file that asks the unpickler for anything beyond tensors and plain containers is refused
and the class it wanted is named. safetensors files cannot carry code, but their header is
untrusted too: its length and offsets are checked against the file size before anything
is allocated or mapped.
"""

from __future__ import annotations

import gzip
import io
import pickle
import pickletools
import re
import struct
import threading
import warnings
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from triage_tui.core.errors import BadInput

if TYPE_CHECKING:
    import torch

# torch is imported where a tensor is read or written, not at module import: it takes ~1 s, and
# safetensors headers, .npy mappings and the remap's byte copies need none of it.

# torch < 2.6 let a crafted pickle run code even with weights_only=True (CVE-2025-32434).
_TORCH_MIN_SAFE = (2, 6)
# safetensors itself refuses headers over 100 MB (safetensors/src/tensor.rs MAX_HEADER_SIZE).
MAX_SAFETENSORS_HEADER = 100_000_000
# A .ckpt.gz is decompressed in memory; a gzip bomb must not take the machine down. Hidden states
# compress about 1.1-2x (bf16/fp32 noise), so a file may grow to GZIP_MAX_RATIO times its size (and
# always to GZIP_FLOOR_BYTES), never past MAX_GZIP_BYTES.
MAX_GZIP_BYTES = 8 << 30
GZIP_MAX_RATIO = 64
GZIP_FLOOR_BYTES = 64 << 20
# torch.save stores every zip entry uncompressed; a compressed entry declaring more than this is a
# zip bomb (a 261 KB file whose data.pkl inflates to 1 GB), refused before anything is inflated.
MAX_COMPRESSED_ENTRY_BYTES = 64 << 20

# Refusals name the classes a pickle wanted; they come early in a real data.pkl (100s of KB for a
# whole model), so disassembling its first MiB in Python finds them.
_SCAN_LIMIT = 1 << 20

_ZIP_MAGIC = b"PK\x03\x04"
_GZIP_MAGIC = b"\x1f\x8b"
_REFUSED = "refused to unpickle: {}; triage never runs code from a file"
_WIDENED_LOAD = threading.Lock()

# Every file written with pickle protocol > 2 makes the weights-only unpickler warn; nothing to act on.
warnings.filterwarnings(
    "ignore", message="Detected pickle protocol", category=UserWarning, module=r"torch\._weights_only_unpickler"
)


def _torch_version() -> tuple[int, int]:
    import torch

    found = re.match(r"(\d+)\.(\d+)", torch.__version__)
    if found is None:  # not a release-style version: too unusual to trust with a pickle
        return (0, 0)
    return int(found.group(1)), int(found.group(2))


def _first_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text[:200] + ("..." if len(text) > 200 else "")


def _pickle_stream(path: Path, raw: bytes | None) -> bytes:
    """The pickle bytes to disassemble: ``*/data.pkl`` of a torch zip, else the file's head."""
    if raw is None:
        with path.open("rb") as f:
            head = f.read(_SCAN_LIMIT)
    else:
        head = raw
    if head[:4] == _ZIP_MAGIC:
        with zipfile.ZipFile(io.BytesIO(raw) if raw is not None else path) as archive:
            for name in archive.namelist():
                if name.endswith("data.pkl"):
                    with archive.open(name) as entry:
                        return entry.read(_SCAN_LIMIT)
    return head[:_SCAN_LIMIT]


def _globals_wanted(path: Path, raw: bytes | None, also_allowed: set[str]) -> list[str]:
    """Classes/functions a pickle names, found by disassembling it (nothing is executed).

    Legacy torch files are several pickles in a row (magic, protocol, sys info, object),
    so disassembly continues after each STOP.
    """
    try:
        stream = io.BytesIO(_pickle_stream(path, raw))
    except (zipfile.BadZipFile, OSError, KeyError):
        return []
    import torch

    allowed = set(torch._weights_only_unpickler._get_allowed_globals()) | also_allowed
    found: list[str] = []
    recent_strings: list[str] = []
    try:
        for _ in range(8):
            for opcode, arg, _pos in pickletools.genops(stream):
                if opcode.name in ("GLOBAL", "INST"):
                    found.append(str(arg).replace(" ", "."))
                elif opcode.name == "STACK_GLOBAL" and len(recent_strings) >= 2:
                    found.append(f"{recent_strings[-2]}.{recent_strings[-1]}")
                elif isinstance(arg, str):
                    recent_strings.append(arg)
    except Exception:  # noqa: BLE001 - a broken stream or the binary data after the pickles: keep what was seen
        pass
    return [name for name in dict.fromkeys(found) if name not in allowed]


def _refusal(path: Path, err: pickle.UnpicklingError, raw: bytes | None, also_allowed: set[str]) -> BadInput:
    wanted = _globals_wanted(path, raw, also_allowed)
    if not wanted:
        match = re.search(r"GLOBAL ([\w.]+)", str(err))
        wanted = [match.group(1)] if match else []
    if wanted:
        return BadInput(path, _REFUSED.format(", ".join(wanted[:4])))
    opcode = re.search(r"Unsupported operand (\d+)", str(err))
    detail = f" (pickle opcode {opcode.group(1)} not allowed)" if opcode else ""
    return BadInput(path, f"not a torch.save file triage can read safely{detail}")


def _read_gzip(path: Path) -> bytes:
    size = path.stat().st_size
    limit = min(MAX_GZIP_BYTES, max(GZIP_FLOOR_BYTES, GZIP_MAX_RATIO * size))
    out = io.BytesIO()
    with gzip.open(path, "rb") as stream:
        while chunk := stream.read(1 << 24):
            out.write(chunk)
            if out.tell() > limit:
                raise BadInput(
                    path,
                    f"decompresses to more than {limit >> 20} MiB from {size} bytes (over "
                    f"{GZIP_MAX_RATIO}x: real dumps compress ~1.1-2x); refused as a gzip bomb",
                )
    return out.getvalue()


def _refuse_zip_bomb(path: Path) -> None:
    """BadInput when a torch zip holds a compressed entry declaring more than it could need."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # torch.load says what is wrong with it
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED and info.file_size > MAX_COMPRESSED_ENTRY_BYTES:
            raise BadInput(
                path,
                f"zip entry {info.filename!r} would inflate {info.compress_size} bytes to "
                f"{info.file_size} (torch.save stores entries uncompressed); refused as a zip bomb",
            )


def safe_torch_load(path: str | Path, *, allowed_globals: Sequence[type] = ()) -> object:
    """``torch.load(weights_only=True)`` on CPU, memory-mapped when the file is a zip archive.

    ``allowed_globals`` extends the allow-list for one call (``training_state.pt`` needs
    ``argparse.Namespace``); nothing else ever widens it. A ``.gz`` file is decompressed
    in memory first (SpecForge main writes ``data_*.ckpt.gz``).
    """
    import torch

    path = Path(path)
    if _torch_version() < _TORCH_MIN_SAFE:
        raise BadInput(
            path,
            f"refusing to unpickle with torch {torch.__version__} < 2.6 "
            "(CVE-2025-32434: weights_only is bypassable); upgrade torch",
        )
    try:
        if not path.is_file():
            raise BadInput(path, "no such file" if not path.exists() else "not a file")
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as err:
        raise BadInput(path, f"cannot read it: {err.strerror or err}") from None
    if len(magic) < 4:
        raise BadInput(path, f"file is {len(magic)} bytes long; not a torch.save file")
    raw: bytes | None = None
    source: Path | io.BytesIO = path
    mmap = magic == _ZIP_MAGIC
    try:
        if magic[:2] == _GZIP_MAGIC:
            raw = _read_gzip(path)
            source, mmap = io.BytesIO(raw), False
        elif mmap:
            _refuse_zip_bomb(path)
        if not allowed_globals:
            return torch.load(source, map_location="cpu", weights_only=True, mmap=mmap)
        # safe_globals swaps process-wide state; interleaved enters/exits from worker threads could
        # leave the list widened for good, so the widened loads take turns.
        with _WIDENED_LOAD, torch.serialization.safe_globals(list(allowed_globals)):
            return torch.load(source, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        allowed_names = {f"{cls.__module__}.{cls.__qualname__}" for cls in allowed_globals}
        raise _refusal(path, err, raw, allowed_names) from None
    except BadInput:
        raise
    except RecursionError:
        raise BadInput(path, "unreadable torch file: its pickle is nested too deeply") from None
    except (
        RuntimeError,
        EOFError,
        ValueError,
        OSError,
        KeyError,
        IndexError,
        TypeError,
        AttributeError,
        struct.error,
        zipfile.BadZipFile,
        gzip.BadGzipFile,
    ) as err:
        if not mmap and magic[:2] != _GZIP_MAGIC and magic[0] != 0x80:
            # Neither a zip (torch >= 1.6) nor a pickle with a protocol marker (the legacy format):
            # torch's own error is an opcode's KeyError, "101", which says nothing.
            raise BadInput(
                path, f"not a torch.save file: neither a zip archive nor a pickle (it starts {magic!r})"
            ) from None
        raise BadInput(path, f"unreadable torch file (truncated or corrupt?): {_first_line(err)}") from None


# --------------------------------------------------------------------------------------------
# Plain integer and bool tensors of a torch.save zip, read with numpy: a vocab mapping file
# ({"d2t", "t2d"} or a bare d2t) is read without importing torch (~1 s, most of a remap's
# start). The unpickler knows exactly the globals such a file names; for anything else it
# returns None and the caller goes through safe_torch_load, which refuses or reads it.

_PLAIN_STORAGES = {
    "LongStorage": "<i8",
    "IntStorage": "<i4",
    "ShortStorage": "<i2",
    "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "?",
}
_PLAIN_MAX_BYTES = 64 << 20  # a mapping over a 16M-token vocab; larger files take the torch path


class _NotPlain(Exception):
    """The file holds something beyond plain integer/bool tensors in dicts."""


def _rebuild_plain(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
    if not (
        isinstance(storage, np.ndarray)
        and isinstance(offset, int)
        and isinstance(size, tuple)
        and isinstance(stride, tuple)
        and len(size) == 1
        and len(stride) == 1
        and not hooks
        and not metadata
    ):
        raise _NotPlain
    (n,), (step,) = size, stride
    if (
        not (isinstance(n, int) and isinstance(step, int))
        or n < 0
        or offset < 0
        or (n and (step < 1 or offset + (n - 1) * step >= storage.size))
    ):
        raise _NotPlain
    return storage[offset : offset + n * step : step].copy() if n else storage[:0].copy()


class _PlainUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix = archive, prefix

    def find_class(self, module: str, name: str):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_plain
        if (module, name) == ("collections", "OrderedDict"):
            return dict
        if module == "torch" and name in _PLAIN_STORAGES:
            return _PLAIN_STORAGES[name]
        raise _NotPlain

    def persistent_load(self, pid):
        if not (
            isinstance(pid, tuple)
            and len(pid) == 5
            and pid[0] == "storage"
            and pid[1] in _PLAIN_STORAGES.values()
            and isinstance(pid[2], str)
            and pid[3] == "cpu"
            and isinstance(pid[4], int)
        ):
            raise _NotPlain
        dtype = np.dtype(pid[1])
        info = self.archive.getinfo(f"{self.prefix}data/{pid[2]}")
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != pid[4] * dtype.itemsize:
            raise _NotPlain
        return np.frombuffer(self.archive.read(info), dtype=dtype)


def load_plain_arrays(path: str | Path) -> object | None:
    """The object a torch.save zip of integer/bool tensors holds, tensors as numpy arrays; None
    when the file is anything else (read it with safe_torch_load then)."""
    path = Path(path)
    try:
        if path.stat().st_size > _PLAIN_MAX_BYTES:
            return None
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
            if len(pickles) != 1:
                return None
            prefix = pickles[0][: -len("data.pkl")]
            if f"{prefix}byteorder" in names and archive.read(f"{prefix}byteorder") != b"little":
                return None
            value = _PlainUnpickler(archive.read(pickles[0]), archive, prefix).load()
    except (
        _NotPlain,
        pickle.UnpicklingError,
        zipfile.BadZipFile,
        KeyError,
        ValueError,
        TypeError,
        EOFError,
        IndexError,
        AttributeError,
        OSError,
        RecursionError,
        struct.error,
    ):
        return None
    plain = isinstance(value, np.ndarray) or (
        isinstance(value, dict)
        and all(isinstance(k, str) and (isinstance(v, np.ndarray) or v is None) for k, v in value.items())
    )
    return value if plain else None


# --------------------------------------------------------------------------------------------
# safetensors: header parsed by hand (formats/safetensors_header.py) so that a hostile length or
# offset is caught before safetensors/mmap is involved. Format: u64 little-endian header length N, N bytes of JSON
# {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data
# (https://github.com/huggingface/safetensors, README "Format").

SAFETENSORS_DTYPES: dict[str, tuple[str, int]] = {
    "BOOL": ("bool", 1),
    "U8": ("uint8", 1),
    "I8": ("int8", 1),
    "I16": ("int16", 2),
    "U16": ("uint16", 2),
    "I32": ("int32", 4),
    "U32": ("uint32", 4),
    "I64": ("int64", 8),
    "U64": ("uint64", 8),
    "F16": ("float16", 2),
    "BF16": ("bfloat16", 2),
    "F32": ("float32", 4),
    "F64": ("float64", 8),
    "F8_E4M3": ("float8_e4m3fn", 1),
    "F8_E5M2": ("float8_e5m2", 1),
}


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """Name, shape and dtype of one stored tensor, the file that holds it, and where in that file.

    ``data`` is the absolute byte range [begin, end) of a safetensors tensor's bytes in ``file``
    (header included in the count), checked against the header's bounds, shape and dtype when it
    was read; None for a pickled tensor, whose bytes have no place of their own.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str  # torch dtype name without the "torch." prefix: "float32", "int64", "bool", ...
    file: Path
    data: tuple[int, int] | None = None


def tensor_info(name: str, tensor: torch.Tensor, file: Path) -> TensorInfo:
    return TensorInfo(name, tuple(int(d) for d in tensor.shape), str(tensor.dtype).removeprefix("torch."), file)


def load_safetensors_rows(path: str | Path, name: str, spans: list[tuple[int, int]]) -> list[torch.Tensor]:
    """Rows [start, stop) of a tensor, for each span, each a copy; nothing else of it is read.

    The file is mapped only for this call: mapped pages count in the process's RSS, so a
    163 840-row head read block by block never costs its whole size (benchmarks/bench_checks.py).
    """
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            view = f.get_slice(name)
            return [view[start:stop] for start, stop in spans]
    except (SafetensorError, OSError, RuntimeError, ValueError) as err:
        raise BadInput(path, f"cannot read tensor {name!r}: {_first_line(err)}") from None


def load_safetensors_tensor(path: str | Path, name: str) -> torch.Tensor:
    """One tensor from a safetensors file, memory-mapped (read its header with ``safetensors_header`` first)."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            return f.get_tensor(name)
    except (SafetensorError, OSError, RuntimeError, ValueError) as err:
        raise BadInput(path, f"cannot read tensor {name!r}: {_first_line(err)}") from None


def load_safetensors_array(path: str | Path, name: str) -> np.ndarray:
    """One tensor of a numpy dtype (integers, bool, floats but bf16/fp8) as a numpy array, without torch."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="numpy") as f:
            return f.get_tensor(name)
    except (SafetensorError, OSError, RuntimeError, ValueError, TypeError) as err:
        raise BadInput(path, f"cannot read tensor {name!r}: {_first_line(err)}") from None
