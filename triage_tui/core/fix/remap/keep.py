"""The opposite fix: keep the weights, hand the trainer the checkpoint's own mapping.

SpecForge PR #534, SpecForge main ``vocab_mapping_path``, speculators ``--d2t-path/--t2d-path``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from triage_tui import __version__
from triage_tui.core import fileio
from triage_tui.core.errors import BadInput
from triage_tui.core.fix.remap.digest import file_blake3
from triage_tui.core.fix.remap.staging import (
    KEPT_MAPPING_PROVENANCE_FILE,
    OutputPlace,
    TempOutput,
    check_output_free,
    check_output_location,
    clean_stale_temporaries,
    default_output,
    prepare_output_parent,
    umask,
    write_error,
)
from triage_tui.core.formats.checkpoint import read_checkpoint
from triage_tui.core.formats.mapping import read_mapping, write_mapping_npy, write_mapping_pt


@dataclass(frozen=True)
class KeptMapping:
    """The checkpoint's own mapping, written for a trainer to load."""

    source: Path
    output: Path
    files: tuple[Path, ...]
    draft_vocab_size: int
    target_vocab_size: int
    mapping_sha256: str  # VocabMapping.sha256(): what the mapping means
    notes: tuple[str, ...] = ()
    output_outside_because: str | None = None  # staging.default_output: why not beside the checkpoint

    def to_json(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "output": str(self.output),
            "output_outside_because": self.output_outside_because,
            "files": [str(f) for f in self.files],
            "draft_vocab_size": self.draft_vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "mapping_sha256": self.mapping_sha256,
            "notes": list(self.notes),
        }


def keep_checkpoint_mapping(
    checkpoint_path: str | Path, out_dir: str | Path | None = None, *, force: bool = False
) -> KeptMapping:
    """Write the checkpoint's d2t/t2d as ``vocab_mapping.pt`` (SpecForge ``vocab_mapping_path``) and
    ``d2t.npy``/``t2d.npy`` (speculators ``--d2t-path``/``--t2d-path``); the weights are not touched."""
    checkpoint = read_checkpoint(checkpoint_path)
    source = checkpoint.path.resolve()
    mapping = checkpoint.mapping
    if mapping is None:
        raise BadInput(
            source, "checkpoint has no d2t buffer, so no mapping of its own to keep (engines read it as identity)"
        )
    notes = []
    if not mapping.is_ascending():
        # SpecForge classic `specforge/core/eagle3.py`, `_compute_target_p`: SpecForge/EAGLE build targets with
        # logits[..., t2d] (ascending id order).
        notes.append(
            "The checkpoint's draft order is not ascending by target id (frequency order, as modelopt "
            "writes): a trainer that builds targets with logits[..., t2d] (SpecForge, EAGLE, "
            "speculators) would misalign its rows; remap instead."
        )
    place = (
        OutputPlace(Path(out_dir).resolve())
        if out_dir is not None
        else default_output(source, f"{source.name}-vocab-mapping")
    )
    output = place.path
    check_output_location(output, source, [source])
    prepare_output_parent(place.outside_because is not None, output)
    replace = check_output_free(output, force)
    clean_stale_temporaries(output)
    temp = TempOutput(output)
    try:
        try:
            written = [
                write_mapping_pt(mapping, temp.path / "vocab_mapping.pt"),
                *write_mapping_npy(mapping, temp.path),
            ]
            for path in written:
                os.chmod(path, 0o666 & ~umask())  # written through mkstemp, which makes them 0600
                fileio.fsync_path(path)
            for path in written:
                back = read_mapping(path, target_vocab_size=mapping.target_vocab_size)
                if (
                    not np.array_equal(back.hot_ids, mapping.hot_ids)
                    or back.target_vocab_size != mapping.target_vocab_size
                ):
                    raise BadInput(
                        output,
                        f"verification failed: {path.name} does not read back as the "
                        "checkpoint's mapping; nothing was written",
                    )
            provenance = {
                "tool": "triage",
                "version": __version__,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "source": str(source),
                "source_blake3": {f.name: file_blake3(f) for f in checkpoint.files},
                "mapping_sha256": mapping.sha256(),
                "draft_vocab_size": mapping.draft_vocab_size,
                "target_vocab_size": mapping.target_vocab_size,
                "notes": notes,
                "files": sorted([p.name for p in written] + [KEPT_MAPPING_PROVENANCE_FILE]),
            }
            fileio.write_small(
                temp.path / KEPT_MAPPING_PROVENANCE_FILE, (json.dumps(provenance, indent=2) + "\n").encode()
            )
            temp.commit(replace)
        except OSError as err:
            raise write_error(err, output) from None
        except RuntimeError as err:  # torch.save reports a failed write as RuntimeError
            raise BadInput(output.parent, f"cannot write {output.name}: {err}; nothing was written") from None
    finally:
        temp.close()
    files = tuple(output / p.name for p in written)
    return KeptMapping(
        source=source,
        output=output,
        files=files,
        draft_vocab_size=mapping.draft_vocab_size,
        target_vocab_size=mapping.target_vocab_size,
        mapping_sha256=mapping.sha256(),
        notes=tuple(notes),
        output_outside_because=place.outside_because,
    )
