"""torchtune's DiskLogger (``log_<unix time>.txt``, a new file per launch: core/read/trackers/torchtune_log.py)
as a kind of scalar source: the directory holding one is a run, its files read oldest first."""

from __future__ import annotations

from triage_tui.core.read.source_kinds.kind import ScalarSource, ScalarSourceKind, renewed_on_rename
from triage_tui.core.read.trackers import torchtune_log


def _make(prefix: str) -> ScalarSource:
    return torchtune_log.disk_logs(prefix)


KIND = ScalarSourceKind(
    name=torchtune_log.KIND,
    prefix="torchtune/",
    claims=lambda name: torchtune_log.FILE_NAME.match(name) is not None,
    reader=renewed_on_rename(_make),
)
