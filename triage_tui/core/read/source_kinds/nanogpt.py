"""nanoGPT- and nanochat-style consoles (core/read/trackers/nanogpt_log.py) as a kind of scalar source.

nanoGPT's ``out_dir`` holds ``ckpt.pt`` and no checkpoint directory; the console the user redirected
(``train.log``) sits beside it. A directory holding ``ckpt.pt`` is a run, and its ``*.log`` and
``*.out`` files are read for nanoGPT's and nanochat's lines (listed before the training consoles'
kind, so its series keep their printed names).
"""

from __future__ import annotations

from pathlib import Path

from triage_tui.core.read.runs.names import is_console_log_name
from triage_tui.core.read.source_kinds.kind import RunTree, ScalarSource, ScalarSourceKind, renewed_on_rename
from triage_tui.core.read.trackers import nanogpt_log


def _make(prefix: str) -> ScalarSource:
    return nanogpt_log.consoles(prefix)


def _files(run: RunTree) -> tuple[Path, ...]:
    directory, names = run.dirs[0] if run.dirs else (str(run.path), ())
    if nanogpt_log.CHECKPOINT_NAME not in names:
        return ()
    return tuple(Path(directory, name) for name in names if is_console_log_name(name))


KIND = ScalarSourceKind(
    name=nanogpt_log.KIND,
    prefix="nanogpt/",
    claims=lambda name: name == nanogpt_log.CHECKPOINT_NAME,
    reader=renewed_on_rename(_make),
    files=_files,
    wakes=False,  # written every step; the next poll reads it
    printed=True,  # values printed to 4 decimals
)
