"""Files made to hurt the reader: pickles that run code, lying safetensors headers, bombs.

Each pickle below would create a marker file if anything unpickled it the way SpecForge's
``torch.load(..., weights_only=False)`` does (PyTorch `torch/serialization.py`, CVE-2025-32434); the tests
assert the marker never appears and that the refusal names the class the pickle wanted.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from builders.drafter import drafter_config, drafter_state, write_drafter
from builders.mappings import story_mappings
from triage_tui.core.errors import BadInput
from triage_tui.core.formats.checkpoint import read_checkpoint
from triage_tui.core.formats.mapping import read_mapping
from triage_tui.core.formats.safe_torch import safe_torch_load
from triage_tui.core.formats.safetensors_header import read_safetensors_header


class CreatesFile:
    """Unpickling calls ``open(marker, "w")``: the file appears iff code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


class RunsShell:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def save_evil(path: Path, payload: object, how: str) -> None:
    if how == "zip":
        torch.save(payload, path)
    elif how == "legacy":
        torch.save(payload, path, _use_new_zipfile_serialization=False)
    elif how == "pickle4":
        path.write_bytes(pickle.dumps(payload, protocol=4))
    elif how == "pickle2":
        path.write_bytes(pickle.dumps(payload, protocol=2))
    elif how == "gzip":
        with gzip.open(path, "wb") as f:
            torch.save(payload, f)  # type: ignore[arg-type]  # a GzipFile is a binary file; typeshed does not call it IO[bytes]
    else:
        raise ValueError(how)


HOW = ["zip", "legacy", "pickle4", "pickle2"]


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("gadget, wanted", [(CreatesFile, "io.open"), (RunsShell, "posix.system")])
def test_safe_torch_load_refuses_code(tmp_path, how, gadget, wanted):
    marker = tmp_path / "PWNED"
    path = tmp_path / "evil.pt"
    save_evil(path, {"d2t": torch.zeros(4, dtype=torch.int64), "x": gadget(marker)}, how)
    with pytest.raises(BadInput) as err:
        safe_torch_load(path)
    what = err.value.what
    assert what.startswith("refused to unpickle: ") and what.endswith("; triage never runs code from a file")
    # A plain pickle of a tensor also names torch.storage._load_from_bytes, itself a full unpickle.
    assert wanted in what.split(": ", 1)[1].split(";")[0].split(", ")
    assert not marker.exists()


@pytest.mark.parametrize("how", HOW)
def test_malicious_pytorch_model_bin(tmp_path, how):
    marker = tmp_path / "PWNED"
    state = drafter_state("specforge", None, draft_vocab=256, target_vocab=1024)
    state["d2t"] = torch.zeros(256, dtype=torch.int64)
    write_drafter(
        tmp_path / "ckpt", {}, drafter_config("specforge", draft_vocab=256, target_vocab=1024), file_kind="bin"
    )
    save_evil(tmp_path / "ckpt" / "pytorch_model.bin", {**state, "lm_head.weight": CreatesFile(marker)}, how)
    with pytest.raises(BadInput, match=r"pytorch_model.bin: refused to unpickle: .*io\.open"):
        read_checkpoint(tmp_path / "ckpt")
    assert not marker.exists()


@pytest.mark.parametrize("how", HOW)
def test_malicious_vocab_mapping_pt(tmp_path, how):
    marker = tmp_path / "PWNED"
    save_evil(tmp_path / "mapping.pt", {"d2t": CreatesFile(marker), "t2d": torch.ones(8, dtype=torch.bool)}, how)
    with pytest.raises(BadInput, match=r"refused to unpickle: .*io\.open"):
        read_mapping(tmp_path / "mapping.pt")
    (tmp_path / "mapping.pt").rename(tmp_path / "cache.pt")  # EAGLE's name, found from the directory
    with pytest.raises(BadInput, match="cache.pt: refused to unpickle"):
        read_mapping(tmp_path, target_vocab_size=8)
    assert not marker.exists()


def test_malicious_gzip_is_refused(tmp_path):
    marker = tmp_path / "PWNED"
    save_evil(tmp_path / "data_0.ckpt.gz", {"input_ids": RunsShell(marker)}, "gzip")
    with pytest.raises(BadInput, match="refused to unpickle: posix.system"):
        safe_torch_load(tmp_path / "data_0.ckpt.gz")
    assert not marker.exists()


def test_pickled_numpy_object_array_is_refused(tmp_path):
    marker = tmp_path / "PWNED"
    array = np.empty(1, dtype=object)
    array[0] = CreatesFile(marker)
    np.save(tmp_path / "d2t.npy", array, allow_pickle=True)
    with pytest.raises(BadInput, match=r"d2t.npy: not a readable .npy array"):
        read_mapping(tmp_path, target_vocab_size=8)
    assert not marker.exists()


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "file is 0 bytes long"),
        (b"\x00" * 64, "not a torch.save file"),
        # Seeded, not os.urandom: xdist workers must collect the same parameters.
        (np.random.default_rng(7).bytes(4096), "not a torch.save file|unreadable torch file"),
        (b"PK\x03\x04" + b"\x00" * 200, "unreadable torch file"),
        (b"\x1f\x8b\x08\x00garbage", "unreadable torch file"),
        # torch's own error was a pickle opcode's KeyError: "unreadable torch file ...: 101".
        (b"hello", r": not a torch.save file: neither a zip archive nor a pickle \(it starts b'hell'\)$"),
    ],
    ids=["empty", "zeros", "random", "zip-header-only", "gzip-garbage", "text"],
)
def test_garbage_torch_files(tmp_path, content, message):
    (tmp_path / "junk.pt").write_bytes(content)
    with pytest.raises(BadInput, match=message):
        safe_torch_load(tmp_path / "junk.pt")


def test_truncated_torch_zip(tmp_path):
    torch.save({"d2t": torch.arange(10_000)}, tmp_path / "m.pt")
    raw = (tmp_path / "m.pt").read_bytes()
    (tmp_path / "m.pt").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(BadInput, match=r"unreadable torch file \(truncated or corrupt\?\)"):
        read_mapping(tmp_path / "m.pt", target_vocab_size=20_000)


def test_gzip_bomb_is_capped(tmp_path, monkeypatch):
    from triage_tui.core.formats import safe_torch

    monkeypatch.setattr(safe_torch, "MAX_GZIP_BYTES", 1 << 20)
    with gzip.open(tmp_path / "data_0.ckpt.gz", "wb") as f:
        f.write(b"\x00" * (4 << 20))
    with pytest.raises(BadInput, match="decompresses to more than"):
        safe_torch_load(tmp_path / "data_0.ckpt.gz")


# ---- safetensors -------------------------------------------------------------------------


def small_safetensors(path: Path) -> bytes:
    save_file({"lm_head.weight": torch.randn(256, 64), "norm.weight": torch.ones(64)}, str(path))
    return path.read_bytes()


def with_header(path: Path, header: dict, data: bytes) -> None:
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


def test_truncated_safetensors(tmp_path):
    raw = small_safetensors(tmp_path / "model.safetensors")
    (tmp_path / "model.safetensors").write_bytes(raw[: len(raw) - 1000])
    with pytest.raises(BadInput, match=r"tensor '.*' claims bytes \d+..\d+ but the file holds only \d+ data bytes"):
        read_checkpoint(tmp_path)


def test_huge_header_length(tmp_path):
    raw = small_safetensors(tmp_path / "model.safetensors")
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 2**62) + raw[8:])
    with pytest.raises(BadInput, match=r"safetensors header claims 4611686018427387904 bytes \(limit"):
        read_checkpoint(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 50_000_000) + raw[8:])
    with pytest.raises(BadInput, match=r"header claims 50000000 bytes but the file has \d+"):
        read_checkpoint(tmp_path)


def test_header_claiming_more_bytes_than_the_file_has(tmp_path):
    data = torch.ones(64).numpy().tobytes()
    header = {
        "norm.weight": {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]},
        "lm_head.weight": {"dtype": "F32", "shape": [32000, 64], "data_offsets": [256, 256 + 32000 * 64 * 4]},
    }
    with_header(tmp_path / "model.safetensors", header, data)
    with pytest.raises(
        BadInput, match=r"tensor 'lm_head.weight' claims bytes 256..8192256 but the file holds only 256"
    ):
        read_checkpoint(tmp_path)


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"dtype": "F32", "shape": [8], "data_offsets": [0, 16]}, r"shape \[8\] F32 needs 32 bytes, header gives 16"),
        ({"dtype": "F99", "shape": [8], "data_offsets": [0, 32]}, "unknown dtype 'F99'"),
        ({"dtype": "F32", "shape": [-8], "data_offsets": [0, 32]}, "bad shape"),
        ({"dtype": "F32", "shape": [8], "data_offsets": [32, 0]}, "bad data_offsets"),
        ({"dtype": "F32", "shape": [8]}, "bad data_offsets"),
        ("nonsense", "header entry is not an object"),
    ],
)
def test_lying_header_entries(tmp_path, entry, message):
    with_header(tmp_path / "x.safetensors", {"t": entry}, b"\x00" * 64)
    with pytest.raises(BadInput, match=message):
        read_safetensors_header(tmp_path / "x.safetensors")


def test_header_that_is_not_json(tmp_path):
    (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", 6) + b"\xff\xfe{{{{")
    with pytest.raises(BadInput, match="header is not valid JSON"):
        read_safetensors_header(tmp_path / "x.safetensors")
    (tmp_path / "y.safetensors").write_bytes(struct.pack("<Q", 2) + b"[]")
    with pytest.raises(BadInput, match="not a JSON object"):
        read_safetensors_header(tmp_path / "y.safetensors")
    (tmp_path / "z.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(BadInput, match="file is 2 bytes long"):
        read_safetensors_header(tmp_path / "z.safetensors")


def test_index_pointing_outside_the_directory(tmp_path):
    outside = tmp_path / "outside.safetensors"
    small_safetensors(outside)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"lm_head.weight": "../outside.safetensors"}})
    )
    with pytest.raises(BadInput, match=r"names '../outside.safetensors', not a file in this directory"):
        read_checkpoint(ckpt)
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": []}))
    with pytest.raises(BadInput, match="no 'weight_map' object"):
        read_checkpoint(ckpt)


def test_bin_that_is_not_a_state_dict(tmp_path):
    write_drafter(tmp_path, {}, None, file_kind="bin")
    torch.save({"state_dict": {"fc.weight": torch.zeros(2, 2)}, "epoch": 3}, tmp_path / "pytorch_model.bin")
    with pytest.raises(BadInput, match="not a flat state dict: non-tensor entries state_dict, epoch"):
        read_checkpoint(tmp_path)


def test_reading_never_writes_into_the_checkpoint(tmp_path):
    checkpoint_mapping, _ = story_mappings()
    write_drafter(tmp_path, drafter_state("specforge", checkpoint_mapping), drafter_config("specforge"))
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in tmp_path.iterdir()}
    ckpt = read_checkpoint(tmp_path)
    ckpt.tensor("lm_head.weight").sum()
    read_mapping(tmp_path)
    assert {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("how", HOW + ["gzip"])
def test_malicious_hidden_state_dump(tmp_path, how):
    from triage_tui.core.formats.hidden_states import read_dumps

    marker = tmp_path / "PWNED"
    folder = tmp_path / "hidden_states" / "rows_0-5000"
    folder.mkdir(parents=True)
    name = "data_0.ckpt.gz" if how == "gzip" else "data_0.ckpt"
    save_evil(folder / name, {"input_ids": torch.arange(4), "aux_hidden_state": CreatesFile(marker)}, how)
    with pytest.raises(BadInput, match=r"data_0.ckpt(.gz)?: refused to unpickle: .*io\.open"):
        read_dumps(tmp_path / "hidden_states")
    assert not marker.exists()


@pytest.mark.parametrize("how", HOW)
def test_malicious_training_state(tmp_path, how):
    import argparse

    from triage_tui.core.formats.training_state import read_training_state

    marker = tmp_path / "PWNED"
    payload = {"epoch": 1, "global_step": 10, "args": argparse.Namespace(ckpt_dir="x", evil=RunsShell(marker))}
    save_evil(tmp_path / "training_state.pt", payload, how)
    with pytest.raises(BadInput, match=r"training_state.pt: refused to unpickle: .*posix\.system"):
        read_training_state(tmp_path)
    assert not marker.exists()


def test_overlapping_and_gapped_offsets(tmp_path):
    overlap = {
        "a": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},
        "b": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},
    }
    with_header(tmp_path / "x.safetensors", overlap, b"\x00" * 64)
    with pytest.raises(BadInput, match=r"tensor 'b' starts at byte 0 of the data, expected 32"):
        read_safetensors_header(tmp_path / "x.safetensors")
    trailing = {"a": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}}
    with_header(tmp_path / "y.safetensors", trailing, b"\x00" * 40)
    with pytest.raises(BadInput, match="tensors cover 32 data bytes but the file has 40"):
        read_safetensors_header(tmp_path / "y.safetensors")


# ---- bounded costs (issue 11 item 6) and errors that name their file (items 4, 11) --------------


def test_gzip_bomb_is_refused_by_its_ratio_not_at_8_gib(tmp_path):
    """A 3 MB .ckpt.gz used 3.4 GB (the cap was 8 GiB, held in RAM): now it may grow 64x (at least
    to 64 MiB), what a real dump of hidden states (~1.1-2x) never needs; a real one still loads."""
    with gzip.open(tmp_path / "data_0.ckpt.gz", "wb") as f:
        f.write(b"\x00" * (80 << 20))
    assert (tmp_path / "data_0.ckpt.gz").stat().st_size < 1 << 20
    with pytest.raises(BadInput, match=r"decompresses to more than 64 MiB from \d+ bytes .* gzip bomb"):
        safe_torch_load(tmp_path / "data_0.ckpt.gz")
    buffer = tmp_path / "real.pt"
    torch.save({"hidden_states": torch.randn(64, 1024, dtype=torch.bfloat16)}, buffer)
    with gzip.open(tmp_path / "data_1.ckpt.gz", "wb") as f:
        f.write(buffer.read_bytes())
    loaded = safe_torch_load(tmp_path / "data_1.ckpt.gz")
    assert isinstance(loaded, dict) and loaded["hidden_states"].shape == (64, 1024)


def test_zip_bomb_pt_is_refused_before_anything_is_inflated(tmp_path):
    """A torch zip whose data.pkl inflates 100s of MB from a few hundred KB: refused from the zip's
    directory (torch.save stores entries uncompressed), without inflating or disassembling it."""
    import zipfile

    torch.save({"d2t": torch.arange(10)}, tmp_path / "m.pt")
    with zipfile.ZipFile(tmp_path / "m.pt") as source:
        entries = [(info.filename, source.read(info)) for info in source.infolist()]
    with zipfile.ZipFile(tmp_path / "bomb.pt", "w") as bomb:
        for name, data in entries:
            if name.endswith("data.pkl"):
                data = data + b"\x00" * (200 << 20)  # STOP comes first: the rest is never unpickled
                bomb.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
            else:
                bomb.writestr(name, data)
    assert (tmp_path / "bomb.pt").stat().st_size < 1 << 20
    with pytest.raises(BadInput, match=r"data.pkl' would inflate \d+ bytes to \d+ .* zip bomb"):
        safe_torch_load(tmp_path / "bomb.pt")


@pytest.mark.parametrize("kind", ["config.json", "index.json", "safetensors header", "tokenizer.json"])
def test_deeply_nested_json_is_one_line_naming_the_file(tmp_path, kind):
    from triage_tui.core.formats import weights
    from triage_tui.core.formats.tokenizer import read_token_strings

    deep = "[" * 100_000 + "]" * 100_000
    call: Callable[[], object]
    if kind == "config.json":
        (tmp_path / "config.json").write_text(deep)
        call, path = (lambda: weights.read_config(tmp_path)), tmp_path / "config.json"
    elif kind == "index.json":
        path = tmp_path / "model.safetensors.index.json"
        path.write_text(deep)
        call = lambda: weights._from_index(path)  # noqa: E731
    elif kind == "tokenizer.json":
        path = tmp_path / "tokenizer.json"
        path.write_text(deep)
        call = lambda: read_token_strings(tmp_path)  # noqa: E731
    else:
        path = tmp_path / "model.safetensors"
        with_header(path, {}, b"")
        blob = deep.encode()
        path.write_bytes(struct.pack("<Q", len(blob)) + blob)
        call = lambda: read_safetensors_header(path)  # noqa: E731
    with pytest.raises(BadInput, match="nested too deeply") as caught:
        call()
    assert caught.value.path == str(path)
