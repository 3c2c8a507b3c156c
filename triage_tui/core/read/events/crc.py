"""CRC-32C (Castagnoli), masked as LevelDB and TFRecord store it, and the tables the bulk paths use.

tensorflow/tensorboard tensorboard/data/server/masked_crc.rs: ``((crc >> 15) | (crc << 17)) +
0xA282EAD8``. The length CRC of any header is three table lookups (``length_crc``), and a
payload's CRC can be updated byte by byte from a template's (``byte_crc_table``): both let numpy
check thousands of records at once.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

_MASK_DELTA = 0xA282EAD8  # tensorflow/tensorboard tensorboard/data/server/masked_crc.rs


def _load_crc32c() -> Callable[..., int]:
    """The crc32c package's C function, loaded without running the package's __init__ where
    that can be done: the __init__ (crc32c 2.x) imports importlib.metadata and argparse for its
    version and its command line, ~25 ms on one core before any triage command's first read.
    Anything unexpected in its layout: the plain import."""
    name = "crc32c._crc32c"
    try:
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.find_spec("crc32c")  # finds the package without running it
            locations = list(spec.submodule_search_locations or []) if spec is not None else []
            found = [
                Path(location) / f"_crc32c{suffix}"
                for location in locations
                for suffix in importlib.machinery.EXTENSION_SUFFIXES
                if (Path(location) / f"_crc32c{suffix}").is_file()
            ]
            if not found:
                raise ImportError(name)
            loader = importlib.machinery.ExtensionFileLoader(name, str(found[0]))
            module_spec = importlib.util.spec_from_file_location(name, found[0], loader=loader)
            if module_spec is None:
                raise ImportError(name)
            module = importlib.util.module_from_spec(module_spec)
            loader.exec_module(module)
            sys.modules[name] = module  # the package's own `from ._crc32c import ...` finds it
        function = module.crc32c
        if function(b"123456789") != 0xE3069283:  # the CRC-32C check value (RFC 3720 B.4's catalogue)
            raise ImportError(name)
        return function
    except Exception:  # noqa: BLE001 - whatever it was, the package's own import
        import crc32c

        return crc32c.crc32c


crc32c = _load_crc32c()  # crc32c(data) -> int, the one CRC-32C of triage's readers


def masked_crc32c(data) -> int:
    """Masked CRC-32C of a bytes-like object, as TFRecord stores it."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _crc_tables() -> np.ndarray:
    """Slicing-by-8 tables for CRC-32C (reflected polynomial 0x82F63B78)."""
    t0 = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t0 = np.where(t0 & 1, (t0 >> np.uint32(1)) ^ np.uint32(0x82F63B78), t0 >> np.uint32(1))
    tables = [t0.astype(np.uint32)]
    for _ in range(7):
        prev = tables[-1]
        tables.append((prev >> np.uint32(8)) ^ t0[prev & 0xFF])
    return np.stack(tables)


def _length_crc_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tables giving the CRC of the 8 length bytes of any length < 2**32 in three lookups.

    With bytes 4..7 zero, slicing-by-8 reduces to T7[b0^ff] ^ T6[b1^ff] ^ T5[b2^ff] ^ T4[b3^ff]
    (T_k[0] == 0) and the final inversion, folded here into the 16-bit table.
    """
    t = _crc_tables()
    lo = np.arange(65536, dtype=np.uint32)
    table16 = t[7][(lo & 0xFF) ^ 0xFF] ^ t[6][(lo >> 8) ^ 0xFF] ^ np.uint32(0xFFFFFFFF)
    return table16, t[5][np.arange(256) ^ 0xFF], t[4][np.arange(256) ^ 0xFF]


_LEN_CRC16, _LEN_CRC_B2, _LEN_CRC_B3 = _length_crc_tables()


def mask(crc: np.ndarray) -> np.ndarray:
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(_MASK_DELTA)


def length_crc(length: np.ndarray) -> np.ndarray:
    """Masked CRC of each length's 8 little-endian bytes (lengths below 2**32), vectorised."""
    crc = _LEN_CRC16[length & 0xFFFF] ^ _LEN_CRC_B2[(length >> 16) & 0xFF] ^ _LEN_CRC_B3[(length >> 24) & 0xFF]
    return mask(crc)


def u64_at(buf, pos: int) -> int:
    return int.from_bytes(buf[pos : pos + 8], "little")


def data_crc_ok(buf, header: int, length: int) -> bool:
    """Whether the record at `header` has a payload matching its data CRC."""
    stored = int.from_bytes(buf[header + 12 + length : header + 16 + length], "little")
    return masked_crc32c(memoryview(buf)[header + 12 : header + 12 + length]) == stored


@functools.cache
def byte_crc_table(distance: int) -> np.ndarray:
    """What a byte b adds to a payload's CRC-32C when `distance` bytes follow it (256 entries).

    CRC-32C is affine over GF(2), so for payloads of one length crc(a ^ b) = crc(a) ^ crc(b) ^
    crc(zeros), and a byte's share depends only on how many bytes follow it.
    """
    zero = crc32c(bytes(distance + 1))
    bit_crcs = np.array([crc32c(bytes([1 << bit]) + bytes(distance)) ^ zero for bit in range(8)], np.uint32)
    bits = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(bool)  # (byte value, bit)
    return np.bitwise_xor.reduce(np.where(bits, bit_crcs, np.uint32(0)), axis=1)


@functools.lru_cache(maxsize=128)  # 256 KiB each; a layout uses ~7, a run's layouts a few dozen
def pair_crc_table(distance: int) -> np.ndarray:
    """What two adjacent bytes add to a payload's CRC-32C when `distance` bytes follow the first
    (65 536 entries, indexed by the two read as a little-endian u16): one lookup for two bytes."""
    first, second = byte_crc_table(distance), byte_crc_table(distance - 1)
    pair = np.arange(65536)
    return first[pair & 0xFF] ^ second[pair >> 8]
