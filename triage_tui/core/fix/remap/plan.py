"""The plan: everything a remap decides and validates before a byte is written."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from triage_tui.core.errors import BadInput
from triage_tui.core.fix.remap.job import count
from triage_tui.core.fix.remap.staging import (
    OutputPlace,
    check_output_location,
    check_output_name,
    default_output,
    read_error,
)
from triage_tui.core.fix.remap.writer import TORCH_DTYPE_TO_SAFETENSORS
from triage_tui.core.formats.checkpoint import read_checkpoint
from triage_tui.core.formats.mapping import read_mapping
from triage_tui.core.formats.mapping_digest import mapping_digest
from triage_tui.core.vocab import VocabMapping

if TYPE_CHECKING:
    from triage_tui.core.formats.checkpoint import DrafterCheckpoint

INIT_STRATEGIES = ("target", "mean", "zeros")
OUTPUT_WEIGHTS = "model.safetensors"


@dataclass(frozen=True, eq=False)
class RemapPlan:
    """What a remap will write, worked out from the inputs; nothing has been written yet."""

    source: Path  # the source checkpoint directory
    output: Path
    mapping_path: Path
    draft_vocab_size: int  # rows of the new lm_head (the run's draft vocab)
    rows_copied: int
    rows_initialized: int
    init: str  # "target" | "mean" | "zeros": what initialised rows are set from
    notes: tuple[str, ...]
    init_from: str  # the same in words, for the confirm dialog
    written_as: str | None  # "model.safetensors" when a pytorch_model.bin source is rewritten
    mapping_sha256: str
    mapping_sha256_of: str  # "file" (bytes of the mapping's file) | "mapping" (hot ids: read from no file)
    target_path: Path | None
    lm_head_name: str  # the checkpoint's lm_head tensor (checked present when planning)
    checkpoint: DrafterCheckpoint = field(repr=False)
    run_mapping: VocabMapping = field(repr=False)
    source_rows: np.ndarray = field(repr=False)  # per new row: the old row it copies, -1 if initialised
    target_model: Any = field(default=None, repr=False)
    source_identities: tuple = field(default=(), repr=False)  # (dev, inode, size, mtime) of each weights file
    # What keeps the default output from beside the source (staging.OutputPlace); None when it is, or --out chose.
    output_outside_of: tuple[str, Path] | None = None

    @property
    def output_outside_because(self) -> str | None:
        return OutputPlace(self.output, self.output_outside_of).outside_because

    def describe(self) -> str:
        """The plan in one paragraph (the TUI's confirm dialog lays out the same fields a line each)."""
        text = (
            f"Write {self.output} from {self.source}: {count(self.rows_copied)} lm_head rows move to the "
            f"run's order, {count(self.rows_initialized)} rows initialised from {self.init_from}; "
            f"d2t/t2d replaced by {self.mapping_path}; source untouched."
        )
        where = [f"Not beside the source: {self.output_outside_because}."] if self.output_outside_because else []
        return "\n".join([text, *where, *self.notes])


def _identity(path: Path) -> tuple[int, ...]:
    """What changes when a file is rewritten or replaced: device, inode, size, modification time."""
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def check_unchanged(plan: RemapPlan) -> None:
    """The source's files are those the plan read (a rewrite or replacement since is refused)."""
    if tuple(_identity(file) for file in plan.checkpoint.files) != plan.source_identities:
        raise source_changed(plan)


def source_changed(plan: RemapPlan) -> BadInput:
    """The error for a source whose weights changed while they were remapped (seen any of three ways)."""
    return BadInput(
        plan.source,
        "the checkpoint's weights changed while it was being remapped; "
        "nothing was written (run again once nothing writes to it)",
    )


def _read_target(path: Path):
    from triage_tui.core.formats.target import read_target

    return read_target(path)


def plan_remap(
    checkpoint_path: str | Path,
    mapping_path: str | Path,
    *,
    out: str | Path | None = None,
    init: str | None = None,
    target: str | Path | None = None,
) -> RemapPlan:
    """Read and check the inputs and decide every row; BadInput for anything that does not fit."""
    if init is not None and init not in INIT_STRATEGIES:
        raise BadInput(None, f"--init-missing must be one of {', '.join(INIT_STRATEGIES)}, not {init!r}")
    if init == "target" and target is None:
        raise BadInput(None, "--init-missing target needs --target (the target model's directory)")
    try:
        return _plan(checkpoint_path, mapping_path, out, init, target)
    except OSError as err:  # PermissionError, a name too long, ...: the file named, exit 2
        raise read_error(err, checkpoint_path) from None


def _plan(
    checkpoint_path: str | Path,
    mapping_path: str | Path,
    out: str | Path | None,
    init: str | None,
    target: str | Path | None,
) -> RemapPlan:
    checkpoint = read_checkpoint(checkpoint_path)
    identities = tuple(_identity(file) for file in checkpoint.files)
    source = checkpoint.path.resolve()
    notes: list[str] = []

    lm_head_name = checkpoint.lm_head_name
    lm_head = checkpoint.tensors.get(lm_head_name) if lm_head_name is not None else None
    if lm_head_name is None or lm_head is None:
        raise BadInput(source, "checkpoint has no lm_head.weight: there are no rows to remap")
    old_rows, width = lm_head.shape
    if old_rows == 0 or width == 0:
        raise BadInput(lm_head.file, f"lm_head.weight has shape [{old_rows}, {width}]: there are no rows to remap")
    for info in checkpoint.tensors.values():
        if info.dtype not in TORCH_DTYPE_TO_SAFETENSORS:
            raise BadInput(info.file, f"tensor {info.name!r} has dtype {info.dtype}, which safetensors cannot store")

    target_path = Path(target).resolve() if target is not None else None
    target_model = _read_target(target_path) if target_path is not None else None

    checkpoint_mapping = checkpoint.mapping
    if checkpoint_mapping is None:
        vocab = checkpoint.target_vocab_size or (target_model.vocab_size if target_model else old_rows)
        # vLLM keeps draft_id_to_target_id at zeros when a checkpoint has no d2t (reference
        # section 1.2): the rows then stand for target ids 0..Vd-1, and that is what they learnt.
        checkpoint_mapping = VocabMapping.identity(old_rows, vocab, source=f"{source} (no d2t: identity)")
        notes.append(
            f"The checkpoint has no d2t: its rows are taken as target ids 0..{old_rows - 1}, "
            "as vLLM reads such a checkpoint."
        )
    elif checkpoint_mapping.draft_vocab_size != old_rows:
        raise BadInput(
            source, f"d2t has {checkpoint_mapping.draft_vocab_size} entries but lm_head.weight has {old_rows} rows"
        )

    mapping_path = Path(mapping_path).resolve()
    run_mapping = read_mapping(
        mapping_path,
        target_vocab_size=checkpoint.target_vocab_size or (target_model.vocab_size if target_model else None),
    )
    _check_run_mapping(run_mapping, mapping_path, checkpoint, checkpoint_mapping, source)
    notes.extend(f"The checkpoint's mapping: {note}" for note in checkpoint_mapping.notes)
    notes.extend(f"The run's mapping: {note}" for note in run_mapping.notes)

    duplicated = checkpoint_mapping.draft_vocab_size - np.unique(checkpoint_mapping.hot_ids).size
    if duplicated:
        notes.append(
            f"The checkpoint's d2t repeats a target id at {duplicated} positions; "
            "a repeated token's row is taken from its last position."
        )
    source_rows = checkpoint_mapping.draft_position_of()[run_mapping.hot_ids]
    rows_copied = int(np.count_nonzero(source_rows >= 0))
    rows_initialized = run_mapping.draft_vocab_size - rows_copied
    if rows_copied == 0:
        # Every row would be initialised: a checkpoint that keeps nothing of its training is not a fix.
        outside = checkpoint_mapping.out_of_range().size
        why = (
            f"its d2t maps {outside} of its {old_rows} positions outside the target vocab "
            f"[0, {run_mapping.target_vocab_size})"
            if outside
            else "the two mappings share no token"
        )
        raise BadInput(
            source,
            f"none of the {run_mapping.draft_vocab_size} tokens of the run's mapping "
            f"{mapping_path} has a row in this checkpoint ({why}): the output would keep "
            "no trained lm_head row; nothing was written",
        )

    if target_model is not None and target_model.vocab_size != run_mapping.target_vocab_size:
        raise BadInput(
            target_path,
            f"the target's vocab has {target_model.vocab_size} tokens but the run's "
            f"mapping {mapping_path} is over {run_mapping.target_vocab_size}",
        )
    init = init or ("target" if target_model is not None else "mean")
    if init == "target" and target_model is not None and target_model.hidden_size != width:
        notes.append(
            f"The target's lm_head rows are {target_model.hidden_size} wide but the drafter's are "
            f"{width}: new rows are initialised from the mean of the old rows instead."
        )
        init = "mean"
    init_from = {
        "target": f"the target's lm_head ({target_path})",
        "mean": "the mean of the old rows",
        "zeros": "zeros",
    }[init]

    written_as = None
    if checkpoint.file_kind == "bin":
        written_as = OUTPUT_WEIGHTS
        notes.append(
            f"{', '.join(f.name for f in checkpoint.files)} is written as {OUTPUT_WEIGHTS} "
            "(same tensor names, same layout)."
        )

    mapping_sha, mapping_sha_of = mapping_digest(run_mapping)  # the digest check shows as run_sha256
    place = (
        OutputPlace(Path(out).resolve())
        if out is not None
        else default_output(source, remapped_name(source, mapping_sha))
    )
    output = place.path
    check_output_name(output)
    check_output_location(output, source, [source, mapping_path] + ([target_path] if target_path else []))
    return RemapPlan(
        source=source,
        output=output,
        mapping_path=mapping_path,
        draft_vocab_size=run_mapping.draft_vocab_size,
        rows_copied=rows_copied,
        rows_initialized=rows_initialized,
        init=init,
        notes=tuple(notes),
        init_from=init_from,
        written_as=written_as,
        mapping_sha256=mapping_sha,
        mapping_sha256_of=mapping_sha_of,
        target_path=target_path,
        lm_head_name=lm_head_name,
        checkpoint=checkpoint,
        run_mapping=run_mapping,
        source_rows=source_rows,
        target_model=target_model,
        source_identities=identities,
        output_outside_of=place.outside_of,
    )


def remapped_name(source: Path, mapping_sha: str) -> str:
    """The default output's name: the source's, and the run mapping's digest it was remapped to."""
    return f"{source.name}-remapped-{mapping_sha[:8]}"


def _check_run_mapping(
    run: VocabMapping, path: Path, checkpoint, checkpoint_mapping: VocabMapping, source: Path
) -> None:
    """The run's mapping must name each token once, inside the same target vocab as the checkpoint's."""
    if run.draft_vocab_size == 0:
        raise BadInput(path, "the mapping has 0 draft positions: a drafter with no lm_head rows; nothing was written")
    vocab = checkpoint.target_vocab_size
    if vocab is not None and run.target_vocab_size != vocab:
        raise BadInput(
            path,
            f"mapping is over a target vocab of {run.target_vocab_size} tokens but the "
            f"checkpoint's is {vocab} ({source}): not the same target model",
        )
    outside = run.out_of_range()
    if outside.size:
        first = int(outside[0])
        raise BadInput(
            path,
            f"{outside.size} draft positions map outside the target vocab "
            f"[0, {run.target_vocab_size}) (first: position {first} -> id {int(run.hot_ids[first])})",
        )
    repeated = run.draft_vocab_size - np.unique(run.hot_ids).size
    if repeated:
        raise BadInput(
            path,
            f"{repeated} draft positions repeat a target id another position has; "
            "a remapped lm_head needs one row per token",
        )
    if vocab is None and int(checkpoint_mapping.hot_ids.max(initial=-1)) >= run.target_vocab_size:
        raise BadInput(
            path,
            f"the checkpoint maps target ids up to {int(checkpoint_mapping.hot_ids.max())}, "
            f"beyond this mapping's target vocab of {run.target_vocab_size}",
        )
