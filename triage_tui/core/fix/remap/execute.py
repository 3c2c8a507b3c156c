"""Write, verify and move into place the checkpoint a plan describes (``triage remap``).

Safety, because this runs on someone's only copy of a drafter: the source is only ever opened for
reading; the output is written into a sibling temporary directory (``staging``), flushed (fsync of
every file and of the directory), re-read and compared with the source (``verify``), and only then
renamed into place. A safetensors source is read once, in file order (``single_pass``), so the
BLAKE3 recorded is that of the bytes copied and the comparison afterwards fails if the source
changed since; a .bin source goes through torch (``torch_path``), hashed apart twice (the two
digests must agree).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triage_tui import __version__
from triage_tui.core import fileio
from triage_tui.core.device import resolve_device
from triage_tui.core.errors import BadInput
from triage_tui.core.fix.remap import tuning
from triage_tui.core.fix.remap.carry import Extra, copy_extra, extra_files
from triage_tui.core.fix.remap.digest import SourceRead, file_blake3
from triage_tui.core.fix.remap.job import Background, PhaseProgress, Progress
from triage_tui.core.fix.remap.plan import OUTPUT_WEIGHTS, RemapPlan, check_unchanged, plan_remap, source_changed
from triage_tui.core.fix.remap.rows import NUMPY_HEAD_DTYPES, InitRows, Rows, StagedRows
from triage_tui.core.fix.remap.single_pass import stream_source
from triage_tui.core.fix.remap.staging import (
    PROVENANCE_FILE,
    TempOutput,
    check_output_free,
    clean_stale_temporaries,
    prepare_output_parent,
    read_error,
    write_error,
)
from triage_tui.core.fix.remap.torch_path import write_tensors
from triage_tui.core.fix.remap.verify import verify, verify_metadata
from triage_tui.core.fix.remap.writer import Entry, SafetensorsWriter, open_writers, safetensors_metadata
from triage_tui.core.formats.checkpoint import read_checkpoint
from triage_tui.core.read.runs.remote import shown_path
from triage_tui.core.vocab import VocabMapping

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class RemapReport:
    """What a remap wrote and how it was checked."""

    source: Path
    output: Path
    mapping: Path
    draft_vocab_size: int
    rows_copied: int
    rows_initialized: int
    init: str
    verified: bool
    written_as: str | None
    accuracy_before: float | None
    accuracy_after: float | None
    accuracy_device: str | None = None
    mapping_sha256: str = ""
    source_blake3: dict[str, str] = field(default_factory=dict)  # of each weights file, as it was read and copied
    files: tuple[str, ...] = ()
    replaced: bool = False
    notes: tuple[str, ...] = ()
    output_outside_because: str | None = None  # RemapPlan's: why the output is not beside the source

    def to_json(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "output": str(self.output),
            "output_outside_because": self.output_outside_because,
            "mapping": str(self.mapping),
            "draft_vocab_size": self.draft_vocab_size,
            "rows_copied": self.rows_copied,
            "rows_initialized": self.rows_initialized,
            "init": self.init,
            "verified": self.verified,
            "written_as": self.written_as,
            "accuracy_before": self.accuracy_before,
            "accuracy_after": self.accuracy_after,
            "accuracy_device": self.accuracy_device,
            "mapping_sha256": self.mapping_sha256,
            "source_blake3": dict(self.source_blake3),
            "files": list(self.files),
            "replaced": self.replaced,
            "notes": list(self.notes),
        }


def output_entries(plan: RemapPlan) -> dict[str, list[Entry]]:
    """Output file name -> tensors it holds: the source's files and names, lm_head/d2t/t2d resized."""
    checkpoint = plan.checkpoint
    lm_head_name = plan.lm_head_name
    width = checkpoint.tensors[lm_head_name].shape[1]
    run = plan.run_mapping
    files: dict[str, list[Entry]] = {}

    def file_of(name: str) -> str:
        if checkpoint.file_kind == "bin":
            return OUTPUT_WEIGHTS
        return checkpoint.tensors[name].file.name

    for name, info in checkpoint.tensors.items():
        if name in ("d2t", "t2d"):
            continue
        shape = (run.draft_vocab_size, width) if name == lm_head_name else tuple(info.shape)
        files.setdefault(file_of(name), []).append(Entry(name, info.dtype, shape))
    for name, dtype, shape in (("d2t", "int64", (run.draft_vocab_size,)), ("t2d", "bool", (run.target_vocab_size,))):
        home = name if name in checkpoint.tensors else lm_head_name
        files.setdefault(file_of(home), []).append(Entry(name, dtype, shape))
    return files


def _updated_config(plan: RemapPlan, notes: list[str]) -> dict | None:
    config = plan.checkpoint.config
    if not (plan.source / "config.json").is_file():
        notes.append("The source has no config.json; none is written.")
        return None
    config = json.loads(json.dumps(config))  # a deep copy that keeps key order
    run = plan.run_mapping
    config["draft_vocab_size"] = run.draft_vocab_size
    layer = config.get("transformer_layer_config")
    for holder in (config, layer if isinstance(layer, dict) else {}):
        if "vocab_size" in holder and holder["vocab_size"] != run.target_vocab_size:
            notes.append(
                f"config.json vocab_size {holder['vocab_size']} -> {run.target_vocab_size} (the run's target vocab)."
            )
            holder["vocab_size"] = run.target_vocab_size
    if "vocab_size" not in config and not isinstance(layer, dict) and plan.checkpoint.target_vocab_size is None:
        config["vocab_size"] = run.target_vocab_size
        notes.append(f"config.json gains vocab_size {run.target_vocab_size} from the run's mapping.")
    return config


def _fsync_all(writers: dict[str, SafetensorsWriter]) -> None:
    for writer in writers.values():
        os.fsync(writer.fd)


def _provenance(plan: RemapPlan, digests: dict[str, str], notes: list[str]) -> dict[str, Any]:
    return {
        "tool": "triage",
        "version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "source": shown_path(plan.source),  # a bucket's checkpoint by its URL, not the mirror's path
        "source_file_kind": plan.checkpoint.file_kind,
        "source_layout": plan.checkpoint.layout,
        "source_blake3": dict(digests),
        "mapping": shown_path(plan.mapping_path),
        "mapping_sha256": plan.mapping_sha256,
        "mapping_sha256_of": plan.mapping_sha256_of,
        "draft_vocab_size": plan.draft_vocab_size,
        "target_vocab_size": plan.run_mapping.target_vocab_size,
        "rows_copied": plan.rows_copied,
        "rows_initialized": plan.rows_initialized,
        "init": plan.init,
        "init_from": plan.init_from,
        "written_as": plan.written_as,
        "notes": list(notes),
    }


def _utf8(path: object) -> str:
    """A path as metadata text: a safetensors header must be UTF-8 JSON, and a name with bytes that
    are not (os.fsdecode's lone surrogates) made the output unreadable, so verification refused
    every remap of such a checkpoint. Those bytes are written as ``\xff``."""
    return os.fsencode(str(path)).decode("utf-8", "backslashreplace")


def _metadata(plan: RemapPlan, source_metadata: dict[str, str], digests: dict[str, str]) -> dict[str, str]:
    """safetensors metadata: the source's own keys plus the provenance, as strings."""
    metadata = dict(source_metadata)
    metadata.setdefault("format", "pt")
    metadata.update(
        {
            "triage.version": __version__,
            "triage.source": _utf8(shown_path(plan.source)),
            "triage.source_blake3": json.dumps(digests, sort_keys=True),
            "triage.mapping": _utf8(shown_path(plan.mapping_path)),
            "triage.mapping_sha256": plan.mapping_sha256,
            "triage.rows_copied": str(plan.rows_copied),
            "triage.rows_initialized": str(plan.rows_initialized),
            "triage.init": plan.init,
        }
    )
    return metadata


def _source_metadata(plan: RemapPlan) -> dict[str, str]:
    if plan.checkpoint.file_kind != "safetensors":
        return {}
    found = safetensors_metadata(plan.checkpoint.files[0])
    return {k: v for k, v in found.items() if isinstance(v, str) and not k.startswith("triage.")}


def _write_index(plan: RemapPlan, temp: Path, files: dict[str, list[Entry]]) -> None:
    """A sharded source keeps its shards; its index is rewritten with the new total size."""
    index = plan.source / "model.safetensors.index.json"
    if plan.checkpoint.file_kind != "safetensors" or not index.is_file():
        return
    original = json.loads(index.read_text(encoding="utf-8"))
    metadata = dict(original.get("metadata") or {})
    metadata["total_size"] = sum(e.nbytes for entries in files.values() for e in entries)
    weight_map = {e.name: file_name for file_name, entries in files.items() for e in entries}
    fileio.write_small(
        temp / index.name, json.dumps({**original, "metadata": metadata, "weight_map": weight_map}, indent=2).encode()
    )


def _replay_accuracy(
    checkpoint, dumps, target, mapping: VocabMapping, device: str, max_tokens: int, notes: list[str]
) -> float | None:
    """Top-1 accuracy of the drafter's first step on the dumps, read through ``mapping`` (checks/replay).

    The proof is a measurement beside the fix: when the dumps do not fit the drafter, the note
    says why and the remap goes on.
    """
    from triage_tui.core.diagnose.checks.replay import replay_accuracy
    from triage_tui.core.drafter import load_drafter

    try:
        drafter = load_drafter(checkpoint.dequantized(), device="cpu")
        return replay_accuracy(drafter, dumps, target, mapping, device=device, max_tokens=max_tokens)
    except BadInput as err:
        notes.append(f"Accuracy not measured: {err.line()}")
        return None


def _streams(plan: RemapPlan) -> bool:
    """The single pass (no torch) applies: a safetensors source whose lm_head numpy can sum."""
    checkpoint = plan.checkpoint
    return (
        tuning.SINGLE_PASS
        and checkpoint.file_kind == "safetensors"
        and checkpoint.tensors[plan.lm_head_name].dtype in NUMPY_HEAD_DTYPES
    )


def _gather_device(device: str, lm_head_bytes: int) -> torch.device | None:
    """The device to stage the old lm_head on: a CUDA device, and only for a head worth the copy."""
    if tuning.STAGE_ON is not None:
        return resolve_device(tuning.STAGE_ON)
    resolved = resolve_device(device)
    return resolved if resolved.type == "cuda" and lm_head_bytes >= tuning.GPU_MIN_BYTES else None


def _digests(plan: RemapPlan) -> dict[str, str]:
    return {file.name: file_blake3(file) for file in plan.checkpoint.files}


@dataclass
class _Accuracy:
    """The replay's top-1 accuracy on the dumps before and after the remap (None: not measured)."""

    before: float | None = None
    after: float | None = None
    device: str | None = None


class _Run:
    """One remap in progress: its temporary output, open writers and helper threads (``close`` ends them)."""

    def __init__(
        self,
        plan: RemapPlan,
        files: dict[str, list[Entry]],
        total: int,
        progress: Progress | None,
        cancel: threading.Event | None,
    ) -> None:
        self.plan = plan
        self.files = files
        self.callback = progress
        self.progress = PhaseProgress(progress, total)
        self.cancel = cancel
        self.notes = list(plan.notes)
        self.streamed = _streams(plan)
        self.writers: dict[str, SafetensorsWriter] = {}
        self.init_rows: InitRows | None = None
        self.syncing: Background | None = None
        self.hashing: Background | None = None
        self.source_metadata: dict[str, str] = {}
        for file in plan.checkpoint.files:  # a cold source is read ahead while the first steps run
            fileio.read_ahead(file)
        try:
            self.temp = TempOutput(plan.output)
        except OSError as err:
            raise write_error(err, plan.output) from None
        if not self.streamed:
            # A source read through torch is hashed apart from the copy, once while it is written and
            # once after the verification: the two digests must agree.
            self.hashing = Background("triage-remap-blake3", lambda: _digests(plan))

    def report(self, fraction: float, phase: str) -> None:
        if self.callback:
            self.callback(fraction, phase)

    def replay(self, checkpoint, dumps, device: str, max_tokens: int) -> float | None:
        plan = self.plan
        return _replay_accuracy(checkpoint, dumps, plan.target_model, plan.run_mapping, device, max_tokens, self.notes)

    def prepare(self) -> Rows | None:
        """The old lm_head (None for the single pass, which reads the source itself) and the initialised rows."""
        plan = self.plan
        old_head = None if self.streamed else Rows(plan.checkpoint, plan.lm_head_name)
        self.init_rows = InitRows(plan, old_head)
        self.source_metadata = _source_metadata(plan)
        return old_head

    def write_weights(self, old_head: Rows | None, device: str) -> dict[str, SourceRead] | None:
        """Every weights file, header first with digest placeholders; what the single pass read, when streamed."""
        plan, init_rows = self.plan, self.init_rows
        assert init_rows is not None  # prepare() first
        placeholder = {file.name: "0" * 64 for file in plan.checkpoint.files}
        metadata = _metadata(plan, self.source_metadata, placeholder)
        self.writers = open_writers(self.temp.path, self.files, metadata, plan.run_mapping)
        source_read = None
        if old_head is None:  # streamed: the single pass reads the source itself
            source_read = stream_source(plan, self.writers, init_rows, self.progress, self.cancel)
        else:
            gpu = _gather_device(device, old_head.row_bytes * old_head.shape[0])
            gather = StagedRows(old_head, gpu, self.cancel).gather if gpu is not None else old_head.gather
            write_tensors(plan, self.writers, gather, init_rows, self.progress, self.cancel)
        # The data goes to disk while it is re-read for verification; nothing is renamed before both end.
        writers = self.writers
        self.syncing = Background("triage-remap-fsync", lambda: _fsync_all(writers))
        return source_read

    def write_beside(self, extras: list[Extra], skipped: list[str], outside: list[str]) -> None:
        """config.json, a sharded source's index, and the files carried over from beside the weights."""
        plan, temp = self.plan, self.temp.path
        config = _updated_config(plan, self.notes)
        if config is not None:
            fileio.write_small(temp / "config.json", (json.dumps(config, indent=2) + "\n").encode())
        _write_index(plan, temp, self.files)
        for extra in extras:
            copy_extra(extra, temp / extra.path.name, self.cancel)
        if skipped:
            self.notes.append(
                "Not carried over: " + ", ".join(skipped) + " (weights in another form, or pickled "
                "training state, which holds lm_head moments in the old row order)."
            )
        if outside:
            self.notes.append(
                "Not carried over: " + ", ".join(outside) + " (symlinks to outside the checkpoint, never followed)."
            )

    def verify_and_seal(self, source_read: dict[str, SourceRead] | None) -> tuple[dict[str, str], int]:
        """Compare the output with the source, then fill the source's digests into the headers, last."""
        plan = self.plan
        assert self.init_rows is not None and self.syncing is not None  # written first
        self.progress.reset()
        compared, digests = verify(
            plan, self.temp.path, self.files, self.init_rows, self.progress, self.cancel, source_read
        )
        if self.hashing is not None:  # not streamed: the source was hashed apart from the copy
            digests = self.hashing.result()
            if _digests(plan) != digests:
                raise source_changed(plan)
        assert digests is not None  # streamed: the verification hashed the source as it compared it
        check_unchanged(plan)
        metadata = _metadata(plan, self.source_metadata, digests)
        self.syncing.result()
        for writer in self.writers.values():
            writer.write_header(metadata)
            os.fsync(writer.fd)
        verify_metadata(plan, self.temp.path, self.files, metadata)
        return digests, compared

    def commit(self, replace: bool, provenance: dict[str, Any]) -> list[str]:
        """Write the provenance file and rename the output into place; returns the files it holds."""
        files = sorted([p.name for p in self.temp.path.iterdir()] + [PROVENANCE_FILE])
        provenance["files"] = files
        try:
            fileio.write_small(self.temp.path / PROVENANCE_FILE, (json.dumps(provenance, indent=2) + "\n").encode())
            self.temp.commit(replace)
        except OSError as err:
            raise write_error(err, self.plan.output) from None
        return files

    def close(self) -> None:
        if self.hashing is not None:
            self.hashing.join()
        if self.init_rows is not None:
            self.init_rows.close()
        if self.syncing is not None:
            self.syncing.join()  # before the files it syncs are closed
        for writer in self.writers.values():
            writer.close()
        self.temp.close()


def _read_dumps(data: str | Path | None):
    if data is None:
        return None
    from triage_tui.core.formats.hidden_states import read_dumps

    return read_dumps(data)


def _check_room(output: Path, total: int) -> None:
    """Stale temporaries beside ``output`` removed, and room for ``total`` bytes (and 1 MiB) on its disk."""
    try:
        clean_stale_temporaries(output)
        free = fileio.free_bytes(output.parent)
    except OSError as err:
        raise write_error(err, output) from None
    if free < total + (1 << 20):
        raise BadInput(
            output.parent,
            f"needs {total / 1e9:.2f} GB for {output.name} but only {free / 1e9:.2f} GB is free; nothing was written",
        )


def execute_remap(
    plan: RemapPlan,
    *,
    data: str | Path | None = None,
    force: bool = False,
    device: str = "auto",
    max_tokens: int = 4096,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> RemapReport:
    """Write, verify and move into place the checkpoint ``plan`` describes."""
    prepare_output_parent(plan.output_outside_because is not None, plan.output)
    replace = check_output_free(plan.output, force)
    check_unchanged(plan)
    dumps = _read_dumps(data)
    files = output_entries(plan)
    try:
        extras, skipped, outside = extra_files(plan)
    except OSError as err:
        raise read_error(err, plan.source) from None
    total = sum(e.nbytes for entries in files.values() for e in entries) + sum(e.allocated for e in extras)
    _check_room(plan.output, total)
    run = _Run(plan, files, total, progress, cancel)
    accuracy = _Accuracy()
    replay = dumps is not None and plan.target_model is not None
    try:
        if replay:
            run.report(0.0, "replay on the source checkpoint")
            accuracy.before = run.replay(plan.checkpoint, dumps, device, max_tokens)
            replay = accuracy.before is not None
        elif dumps is not None:
            run.notes.append("Accuracy not measured: the replay needs --target as well as --data.")
        old_head = run.prepare()
        try:
            source_read = run.write_weights(old_head, device)
            run.write_beside(extras, skipped, outside)
            digests, compared = run.verify_and_seal(source_read)
        except OSError as err:
            raise write_error(err, plan.output) from None
        if replay:
            run.report(0.9, "replay on the remapped checkpoint")
            accuracy.after = run.replay(read_checkpoint(run.temp.path), dumps, device, max_tokens)
            accuracy.device = str(resolve_device(device))
        provenance = _provenance(plan, digests, run.notes)
        provenance.update(bytes_verified=compared, accuracy_before=accuracy.before, accuracy_after=accuracy.after)
        written = run.commit(replace, provenance)
    finally:
        run.close()
    run.report(1.0, "done")
    return _report(plan, replace, digests, written, accuracy, run.notes)


def _report(
    plan: RemapPlan,
    replaced: bool,
    digests: dict[str, str],
    files: list[str],
    accuracy: _Accuracy,
    notes: list[str],
) -> RemapReport:
    return RemapReport(
        source=plan.source,
        output=plan.output,
        mapping=plan.mapping_path,
        draft_vocab_size=plan.draft_vocab_size,
        rows_copied=plan.rows_copied,
        rows_initialized=plan.rows_initialized,
        init=plan.init,
        verified=True,
        written_as=plan.written_as,
        accuracy_before=accuracy.before,
        accuracy_after=accuracy.after,
        accuracy_device=accuracy.device,
        mapping_sha256=plan.mapping_sha256,
        source_blake3=dict(digests),
        files=tuple(files),
        replaced=replaced,
        notes=tuple(notes),
        output_outside_because=plan.output_outside_because,
    )


def remap_checkpoint(
    checkpoint_path: str | Path,
    mapping_path: str | Path,
    *,
    out: str | Path | None = None,
    init: str | None = None,
    target: str | Path | None = None,
    data: str | Path | None = None,
    force: bool = False,
    device: str = "auto",
    max_tokens: int = 4096,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> RemapReport:
    """Plan and write a remapped checkpoint (``triage remap``)."""
    plan = plan_remap(checkpoint_path, mapping_path, out=out, init=init, target=target)
    return execute_remap(
        plan, data=data, force=force, device=device, max_tokens=max_tokens, progress=progress, cancel=cancel
    )
