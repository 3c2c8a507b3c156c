"""SpecForge's console step lines: ``step N: {'loss': 2.31, 'acc_0': 0.12, ...}``.

``specforge train --config`` prints every ``training.log_interval`` optimizer steps, and after each
evaluation, through ``_logger`` (sgl-project/SpecForge ``specforge/training/assembly.py`` at
a6b6b0230009d15ec2a97a57384e6f53f0f96946)::

    print(f"step {step}: {printable}", flush=True)

where ``printable`` maps each metric to ``float(value)`` or, for a sequence, ``[float(item), ...]``
(non-numeric metrics are dropped). With ``tracking.report_to = "none"`` (the default,
``specforge/config/schema.py``) the names are the trainer's plain ones (``loss``, ``acc``,
``acc_0``, ``ploss_0``, ``grad_norm``, ``lr``, ``perf/...``; evaluation's ``eval/...``); with a
tracker the same line carries the tracker's names (``train/loss``, lists expanded to
``name/i``: ``specforge/training/tracking.py`` ``TrackerLogger``). Non-finite values print as
``nan``/``inf``, which is why the dict is read by ``literal`` and not ``ast.literal_eval``.
"""

from __future__ import annotations

import re

from triage_tui.core.read.console.literal import LiteralError, parse_literal
from triage_tui.core.read.console.record import SPECFORGE, ConsoleRecord, Damaged, checked_step, numeric_items

_STEP_LINE = re.compile(r"step (\d{1,20}): (?=\{)")


def parse(line: str) -> ConsoleRecord | Damaged | None:
    """The record a plain line holds, Damaged when it is a step line that cannot be read, else None."""
    match = _STEP_LINE.match(line)
    if match is None:
        return None
    try:
        step = checked_step(int(match.group(1)))
        value, end = parse_literal(line, match.end())
        if not isinstance(value, dict):
            raise LiteralError("not a dict")
        if line[end:].strip():
            raise LiteralError("text after the dict")
        values = tuple(numeric_items(value, strings=False))
    except LiteralError as err:
        return Damaged(SPECFORGE, str(err))
    return ConsoleRecord(SPECFORGE, values, step)
