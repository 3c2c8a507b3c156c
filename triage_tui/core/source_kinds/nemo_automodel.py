"""NeMo Automodel's ``training.jsonl`` and ``validation[_<name>].jsonl`` (core/trackers/nemo_jsonl.py)
as a kind of scalar source: the checkpoint directory holding them is a run."""

from __future__ import annotations

from triage_tui.core.source_kinds.kind import ScalarSource, ScalarSourceKind, renewed_on_rename
from triage_tui.core.trackers import nemo_jsonl


def _make(prefix: str) -> ScalarSource:
    return nemo_jsonl.metric_logs(prefix)


KIND = ScalarSourceKind(
    name=nemo_jsonl.KIND,
    prefix="nemo/",
    claims=nemo_jsonl.is_metrics_file_name,
    reader=renewed_on_rename(_make),
)
