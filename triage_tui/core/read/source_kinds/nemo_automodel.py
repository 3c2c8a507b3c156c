"""NeMo Automodel's ``training.jsonl`` and ``validation[_<name>].jsonl`` (core/read/trackers/nemo_jsonl.py)
as a kind of scalar source: the checkpoint directory holding ``training.jsonl`` is a run, and the
validation files beside it are read with it. ``validation.jsonl`` alone makes no run: it is as
often a data set's split as NeMo's record."""

from __future__ import annotations

from pathlib import Path

from triage_tui.core.read.source_kinds.kind import RunTree, ScalarSource, ScalarSourceKind, renewed_on_rename
from triage_tui.core.read.trackers import nemo_jsonl


def _make(prefix: str) -> ScalarSource:
    return nemo_jsonl.metric_logs(prefix)


def _files(run: RunTree) -> tuple[Path, ...]:
    found: list[Path] = []
    for directory, names in run.dirs:
        if nemo_jsonl.TRAINING_NAME in names:
            found += (Path(directory, name) for name in sorted(names) if nemo_jsonl.is_metrics_file_name(name))
    return tuple(found)


KIND = ScalarSourceKind(
    name=nemo_jsonl.KIND,
    prefix="nemo/",
    claims=lambda name: name == nemo_jsonl.TRAINING_NAME,
    reader=renewed_on_rename(_make),
    files=_files,
)
