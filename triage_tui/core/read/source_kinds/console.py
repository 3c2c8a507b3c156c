"""Training consoles (core/read/console/) as a kind of scalar source: ``console/<name>`` when the run has
event or W&B files too (the console prints what they hold), as printed otherwise. HF Trainer's
console dicts take their steps from the newest ``trainer_state.json``: its reader is handed that
kind's before each poll."""

from __future__ import annotations

from pathlib import Path

from triage_tui.core.read.runs.names import is_console_log_name
from triage_tui.core.read.source_kinds.kind import RunTree, ScalarSource, ScalarSourceKind, renewed_on_rename
from triage_tui.core.read.source_kinds.trainer_state import TrainerStateFile


def _make(prefix: str) -> ScalarSource:
    from triage_tui.core.read.console.reader import ConsoleLogs  # imported only for a run that has a console

    return ConsoleLogs(prefix)


def _files(run: RunTree) -> tuple[Path, ...]:
    return run.console_files


def _prepare(reader: ScalarSource, trainer_state: ScalarSource | None) -> None:
    from triage_tui.core.read.console.reader import ConsoleLogs

    if isinstance(reader, ConsoleLogs):
        state = trainer_state.state if isinstance(trainer_state, TrainerStateFile) else None
        reader.set_trainer_state(state)  # HF console dicts at their logged steps


KIND = ScalarSourceKind(
    name="console",
    prefix="console/",
    claims=is_console_log_name,
    reader=renewed_on_rename(_make),
    files=_files,
    makes_run=False,  # a console makes a run only beside a trainer's checkpoints (discovery's rule)
    wakes=False,  # written every step; the next poll reads it
    uses="trainer_state",
    prepare=_prepare,
    printed=True,  # values printed to 4 significant digits
)
