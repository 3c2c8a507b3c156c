"""Vocab mapping files in every on-disk form, read into (and written from) ``VocabMapping``.

Forms (docs/formats.md section 2): SpecForge ``cache/vocab_mapping/<key>.pt`` and EAGLE
``cache.pt`` (``torch.save({"d2t", "t2d"})``), modelopt ``d2t.pt`` (a bare offsets tensor,
frequency order, no t2d), speculators ``d2t.npy``/``t2d.npy`` (PR #1081: ``d2t-{Vd}.npy``/
``t2d-{Vd}.npy``), and the ``d2t``/``t2d`` buffers of a drafter checkpoint. Anomalies are
reported in ``VocabMapping.notes`` and never fixed: the mapping always means what an
inference engine would make of the file (``hot_ids = arange(Vd) + d2t``).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.checkpoint import read_checkpoint
from triage_tui.core.formats.remote_safetensors import object_sha256
from triage_tui.core.formats.safe_torch import load_plain_arrays, safe_torch_load
from triage_tui.core.formats.training_state import TRAINING_STATE
from triage_tui.core.vocab import VocabMapping, mapping_from_arrays, mask_array, offsets_array

# torch is imported where a tensor is read or written, not at module import: it takes ~1 s, and
# safetensors headers and .npy mappings need none of it.


_NOT_REGULAR = "not a regular file (a FIFO, a device, ...): not read"


def mapping_sha256(mapping: VocabMapping) -> tuple[str, str]:
    """The one digest of a mapping that check and remap both show: (SHA-256, "file") of the bytes
    of the file it was read from, so ``sha256sum FILE`` gives the same; (SHA-256 of the hot ids
    and target vocab size, "mapping") only for a mapping that came from no file."""
    path = Path(mapping.source) if mapping.source else None
    if path is None or not path.is_file():
        return mapping.sha256(), "mapping"
    remote = object_sha256(path)  # a checkpoint in a bucket: the object's bytes, not its placeholder's zeros
    if remote is not None:
        return remote, "file"
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while block := handle.read(8 << 20):
                digest.update(block)
    except OSError as err:
        raise BadInput(path, f"cannot read it to hash: {err.strerror or err}") from None
    return digest.hexdigest(), "file"


def read_mapping(path: str | Path, *, target_vocab_size: int | None = None) -> VocabMapping:
    """Any mapping form: a .pt, a .npy (or a dir with the pair), a checkpoint dir or weights file."""
    path = Path(path)
    if not path.exists():
        raise BadInput(path, "no such file or directory")
    if path.is_dir():
        return _read_mapping_dir(path, target_vocab_size)
    if not path.is_file():
        raise BadInput(path, _NOT_REGULAR)  # opening a FIFO would wait for a writer forever
    name = path.name
    if name.endswith(".npy"):
        return _read_npy_pair(path, target_vocab_size)
    if name.endswith((".safetensors", ".index.json")) or name.startswith("pytorch_model") or name == TRAINING_STATE:
        return _checkpoint_mapping(path)  # SpecForge 0.2.0: the run's own d2t/t2d in draft_state_dict
    return _read_mapping_pt(path, target_vocab_size)


def _read_mapping_dir(path: Path, target_vocab_size: int | None) -> VocabMapping:
    d2t_files = sorted(path.glob("d2t*.npy"))
    if len(d2t_files) > 1:
        raise BadInput(path, "several d2t files (" + ", ".join(p.name for p in d2t_files) + "); pass one")
    if d2t_files:
        return _read_npy_pair(d2t_files[0], target_vocab_size)
    if (
        (path / "config.json").is_file()
        or any(path.glob("*.safetensors"))
        or (path / "pytorch_model.bin").is_file()
        or (path / TRAINING_STATE).is_file()
    ):
        return _checkpoint_mapping(path)
    for name in ("d2t.pt", "cache.pt"):  # modelopt draft_vocab_cache/<model>/d2t.pt, EAGLE cache.pt
        if (path / name).is_file():
            return _read_mapping_pt(path / name, target_vocab_size)
    raise BadInput(path, "no vocab mapping here (looked for d2t*.npy, a checkpoint, d2t.pt, cache.pt)")


def _checkpoint_mapping(path: Path) -> VocabMapping:
    checkpoint = read_checkpoint(path)
    if checkpoint.mapping is None:
        raise BadInput(path, "checkpoint has no d2t buffer, so no vocab mapping (vLLM would treat it as identity)")
    return checkpoint.mapping


def _load_npy(path: Path) -> np.ndarray:
    if not path.is_file():
        raise BadInput(path, _NOT_REGULAR)  # d2t*.npy found by name in a directory, or the t2d named
    try:
        with open(path, "rb") as f:
            # The header declares the shape; an array larger than the file (an ".npy" of 8 TiB in a
            # few bytes) is refused before numpy tries to allocate it.
            read_header = {
                (1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0,
            }.get(np.lib.format.read_magic(f))
            shape, _, dtype = read_header(f) if read_header else ((), False, np.dtype("u1"))
            declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
            holds = os.fstat(f.fileno()).st_size - f.tell()
            if read_header and declared > holds:
                raise BadInput(
                    path,
                    f".npy header declares shape {list(shape)} ({declared} bytes) but the file "
                    f"holds {holds} bytes of data",
                )
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise BadInput(path, f"not a readable .npy array: {' '.join(str(err).split())[:200]}") from None


def _read_npy_pair(path: Path, target_vocab_size: int | None) -> VocabMapping:
    """speculators ``d2t.npy`` + ``t2d.npy`` (or ``d2t-{Vd}.npy`` + ``t2d-{Vd}.npy``); either may be named."""
    name = path.name
    if name.startswith("t2d"):
        d2t_path, t2d_path = path.with_name("d2t" + name[3:]), path
        if not d2t_path.is_file():
            raise BadInput(path, f"no {d2t_path.name} next to it; a t2d alone does not give the draft order")
    elif name.startswith("d2t"):
        d2t_path, t2d_path = path, path.with_name("t2d" + name[3:])
    else:
        raise BadInput(path, "a .npy mapping file must be named d2t*.npy or t2d*.npy")
    d2t = offsets_array(d2t_path, "d2t", _load_npy(d2t_path))
    t2d, t2d_note = (None, None)
    if t2d_path.is_file():
        t2d, t2d_note = mask_array(t2d_path, "t2d", _load_npy(t2d_path))
    return mapping_from_arrays(
        d2t_path, d2t, t2d, target_vocab_size=target_vocab_size, notes=(t2d_note,) if t2d_note else ()
    )


def _read_mapping_pt(path: Path, target_vocab_size: int | None) -> VocabMapping:
    loaded = load_plain_arrays(path)  # without torch, when the file is plain integer/bool tensors
    if loaded is None:
        loaded = safe_torch_load(path)
    torch = sys.modules.get("torch")
    if isinstance(loaded, np.ndarray) or (torch is not None and isinstance(loaded, torch.Tensor)):
        # modelopt d2t.pt: offsets only, frequency order
        return mapping_from_arrays(path, offsets_array(path, "d2t", loaded), None, target_vocab_size=target_vocab_size)
    if not isinstance(loaded, dict):
        raise BadInput(path, f"holds a {type(loaded).__name__}, not a {{'d2t', 't2d'}} dict or a d2t tensor")
    if "d2t" not in loaded:
        keys = ", ".join(sorted(map(str, loaded))[:8])
        raise BadInput(path, f"no 'd2t' in this file (keys: {keys})")
    d2t = offsets_array(path, "d2t", loaded["d2t"])
    t2d, t2d_note = (None, None)
    if loaded.get("t2d") is not None:
        t2d, t2d_note = mask_array(path, "t2d", loaded["t2d"])
    return mapping_from_arrays(
        path, d2t, t2d, target_vocab_size=target_vocab_size, notes=(t2d_note,) if t2d_note else ()
    )


def _atomic_write(path: Path, write) -> None:
    """Write next to the destination, then rename: a crash never leaves a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_mapping_pt(mapping: VocabMapping, path: str | Path) -> Path:
    """SpecForge/EAGLE form: ``torch.save({"d2t": int64 offsets [Vd], "t2d": bool [V]})``."""
    import torch

    path = Path(path)
    payload = {"d2t": torch.from_numpy(mapping.d2t().copy()), "t2d": torch.from_numpy(mapping.t2d())}
    _atomic_write(path, lambda tmp: torch.save(payload, tmp))
    return path


def _save_npy(path: str, array: np.ndarray) -> None:
    # Through a file object: np.save would append ".npy" to the temporary name.
    with open(path, "wb") as f:
        np.save(f, array, allow_pickle=False)


def write_mapping_npy(mapping: VocabMapping, directory: str | Path, *, sized_names: bool = False) -> list[Path]:
    """speculators form: ``d2t.npy`` (int64 offsets) and ``t2d.npy`` (bool); ``-{Vd}`` names after PR #1081."""
    directory = Path(directory)
    suffix = f"-{mapping.draft_vocab_size}" if sized_names else ""
    written = []
    for stem, array in (("d2t", mapping.d2t()), ("t2d", mapping.t2d())):
        target = directory / f"{stem}{suffix}.npy"
        _atomic_write(target, lambda tmp, a=array: _save_npy(tmp, a))
        written.append(target)
    return written
