"""The record triage leaves in a checkpoint it wrote by remapping another (``triage-remap.json``,
core/fix/remap/execute.py): which checkpoint its weights came from and onto which mapping.

A checked checkpoint that holds one is a repair, not necessarily the drafter a run started from:
core/diagnose/check_inputs.py reads it to keep the two apart.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.json_file import read_json

REMAP_RECORD = "triage-remap.json"
# triage writes a few kilobytes; anything far larger is not its record, and is not read.
MAX_RECORD_BYTES = 1 << 20


@dataclass(frozen=True)
class RemapRecord:
    """What a remap's output says of itself."""

    path: Path  # the record file
    source: Path  # the checkpoint whose rows were remapped
    mapping: Path | None  # the mapping its d2t/t2d were set to (the run's)


def read_remap_record(checkpoint: Path) -> RemapRecord | None:
    """The record in ``checkpoint`` (a directory, or a weights file beside the record), or None
    when there is none that triage wrote: a missing, oversized, unreadable or foreign file claims
    nothing, so the checkpoint is taken for what its name says."""
    directory = checkpoint if checkpoint.is_dir() else checkpoint.parent
    path = directory / REMAP_RECORD
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RECORD_BYTES:
        return None
    try:
        document = read_json(path)
    except BadInput:
        return None
    if not isinstance(document, dict) or document.get("tool") != "triage":
        return None
    source, mapping = document.get("source"), document.get("mapping")
    if not isinstance(source, str) or not source:
        return None
    return RemapRecord(path, Path(source), Path(mapping) if isinstance(mapping, str) and mapping else None)
