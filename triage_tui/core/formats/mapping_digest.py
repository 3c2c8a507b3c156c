"""The digest a vocab mapping is known by in `check` and `remap`: the SHA-256 of its file's bytes (what
``sha256sum`` says of it), for a mapping mirrored from a bucket too, whose local file is a placeholder:
the object's bytes are hashed by range (formats/remote_safetensors.py), never the placeholder's zeros."""

from __future__ import annotations

from pathlib import Path

from triage_tui.core.formats.mapping import mapping_sha256
from triage_tui.core.formats.remote_safetensors import object_sha256
from triage_tui.core.vocab import VocabMapping


def mapping_digest(mapping: VocabMapping) -> tuple[str, str]:
    """(digest, "file" | "mapping"), as ``mapping_sha256``, with a bucket's object read as its bytes."""
    path = Path(mapping.source) if mapping.source else None
    if path is not None and path.is_file():
        remote = object_sha256(path)
        if remote is not None:
            return remote, "file"
    return mapping_sha256(mapping)
