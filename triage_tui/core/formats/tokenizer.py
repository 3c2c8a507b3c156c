"""Token id -> readable string, from the tokenizer files a model directory ships; pure JSON/base64.

Sources, first found wins: ``tokenizer.json`` (Hugging Face fast tokenizer: ``model.vocab`` as a
dict, or a list of ``[piece, score]`` for Unigram, plus ``added_tokens``), ``tiktoken.model``
(``<base64 bytes> <rank>`` per line; Kimi-K2's tokenizer), ``vocab.json`` (GPT-2 style). Special
tokens from ``tokenizer_config.json`` ``added_tokens_decoder`` are added to any of them. Byte-level
BPE pieces (``Ġthe``) and SentencePiece pieces (``▁the``) are shown as the text they stand for.
"""

from __future__ import annotations

import base64
import binascii
from functools import lru_cache
from pathlib import Path

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.json_file import read_json

_FILES = ("tokenizer.json", "tiktoken.model", "vocab.json")


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode`` (openai/gpt-2 src/encoder.py)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _from_byte_level(piece: str) -> str:
    decoder = _byte_decoder()
    if not all(ch in decoder for ch in piece):
        return piece
    return bytes(decoder[ch] for ch in piece).decode("utf-8", errors="replace")


def _token_id(path: Path, piece: object, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise BadInput(path, f"token {piece!r} has id {value!r}, not a non-negative integer")


def _decoder_types(node: object) -> set[str]:
    """Every ``type`` in a tokenizer.json decoder/pre_tokenizer tree (Sequence nests them)."""
    if isinstance(node, dict):
        found = {node["type"]} if isinstance(node.get("type"), str) else set()
        for child in node.values():
            found |= _decoder_types(child)
        return found
    if isinstance(node, list):
        return set().union(*(_decoder_types(child) for child in node)) if node else set()
    return set()


def _read_tokenizer_json(path: Path) -> dict[int, str]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise BadInput(path, "not a tokenizer.json object")
    model = data.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    types = _decoder_types([data.get("decoder"), data.get("pre_tokenizer")])
    if "ByteLevel" in types:
        show = _from_byte_level
    elif "Metaspace" in types or "Replace" in types:

        def show(piece: str) -> str:
            return piece.replace("▁", " ")
    else:

        def show(piece: str) -> str:
            return piece

    strings: dict[int, str] = {}
    if isinstance(vocab, dict):
        for piece, value in vocab.items():
            strings[_token_id(path, piece, value)] = show(piece)
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], the index is the id
        for index, entry in enumerate(vocab):
            if not (isinstance(entry, list) and entry and isinstance(entry[0], str)):
                raise BadInput(path, f"model.vocab[{index}] is {entry!r}, not [piece, score]")
            strings[index] = show(entry[0])
    else:
        raise BadInput(path, "no model.vocab in this tokenizer.json")
    for entry in data.get("added_tokens") or []:
        if isinstance(entry, dict) and isinstance(entry.get("content"), str):
            strings[_token_id(path, entry["content"], entry.get("id"))] = entry["content"]
    return strings


def _read_tiktoken(path: Path) -> dict[int, str]:
    strings: dict[int, str] = {}
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            encoded, rank = line.split()
            strings[int(rank)] = base64.b64decode(encoded, validate=True).decode("utf-8", errors="replace")
        except (ValueError, binascii.Error):
            raise BadInput(path, f"line {number} is not '<base64> <rank>'") from None
    return strings


def _read_vocab_json(path: Path) -> dict[int, str]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise BadInput(path, "not a {token: id} object")
    return {_token_id(path, piece, value): _from_byte_level(piece) for piece, value in data.items()}


def read_token_strings(path: str | Path) -> dict[int, str] | None:
    """``{token id: text}`` from a model directory or a tokenizer file; None when there is none."""
    path = Path(path)
    if path.is_dir():
        file = next((path / name for name in _FILES if (path / name).is_file()), None)
        if file is None:
            return None
    elif path.is_file() and path.name in _FILES:
        file = path
    else:
        return None
    reader = {"tokenizer.json": _read_tokenizer_json, "tiktoken.model": _read_tiktoken, "vocab.json": _read_vocab_json}[
        file.name
    ]
    strings = reader(file)
    config_path = file.parent / "tokenizer_config.json"
    if config_path.is_file():
        config = read_json(config_path)
        added = config.get("added_tokens_decoder") if isinstance(config, dict) else None
        for key, entry in (added or {}).items():
            if isinstance(entry, dict) and isinstance(entry.get("content"), str) and str(key).isdigit():
                strings.setdefault(int(key), entry["content"])
    return strings
