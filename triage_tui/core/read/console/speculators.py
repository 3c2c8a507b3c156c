"""speculators' metric records as Rich prints them: ``[15:05:07] INFO     train/loss=2.500, global_step=10``.

speculators 0.9.0 (vllm-project/speculators ``src/speculators/train/trainer.py``) logs its metrics
through the stdlib logger ``speculators.metrics``: ``{"train": metrics, "profile": ..., "epoch",
"lr", "global_step"}`` every ``log_freq`` steps and ``{"val": {..._epoch}, "epoch"}`` after each
validation, with the step only in ``extra`` (for TensorBoard/W&B). On the console
(``src/speculators/train/logger.py`` ``setup_root_logger``) they reach rich's ``RichHandler`` (no
loguru here: loguru serves the checkpoint converters) through ``FormatDictFilter``, which flattens
the dict with ``/`` and prints ``key=value`` pairs joined by ``", "``, floats as ``{:.3f}`` (or
``{:.2e}`` below 0.001 and above 999), ints as ``{:d}``, anything else as ``repr``; only rank 0
prints (``IsRank0Filter``). So a training record carries its step (``global_step``); a validation
record does not (it is logged at the step after the last training step, which the console does
not say when ``log_freq`` > 1: ``steps`` takes the last training record's, and says so).

Rich lays a record out as a table row (Textualize/rich 15.0.0 ``rich/_log_render.py``): the time
(``[%X]``, blank when it repeats), the level in 8 columns, the message in the remaining width
(wrapped at spaces, a word longer than the column folded), the ``file.py:line`` path on the
first line only. Written to a file, the width is 80 columns (rich's default off a terminal, or
``COLUMNS``), so a record of many metrics spans several lines: ``follow`` joins them.
"""

from __future__ import annotations

import re

from triage_tui.core.read.console.literal import LiteralError, number
from triage_tui.core.read.console.record import SPECULATORS, ConsoleRecord, Damaged, checked_step

STEP_KEY = "global_step"
_RECORD = re.compile(r"(?:\[[^\]]{1,40}\][ ]|[ ]*)(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)[ ]+(?P<message>.*)")
_PATH = re.compile(r"\s+\S{1,200}:\d{1,9}\s*$")  # "trainer.py:587" ("<string>:8" under python -c)
_KEY = re.compile(r"(?:^|, )([A-Za-z0-9_][\w./\-]{0,255})=")


def record_message(line: str) -> str | None:
    """The message part of a plain line that starts a Rich log record (its path column cut off), or None."""
    match = _RECORD.match(line)
    if match is None:
        return None
    message = match["message"]
    return _PATH.sub("", message).rstrip()


def parse(message: str) -> ConsoleRecord | Damaged | None:
    """The record of a whole (joined) message of ``key=value`` pairs; None for any other message."""
    keys = list(_KEY.finditer(message))
    if not keys or keys[0].start() != 0:
        return None
    values: list[tuple[str, float]] = []
    step = None
    try:
        for index, match in enumerate(keys):
            end = keys[index + 1].start() if index + 1 < len(keys) else len(message)
            text = message[match.end() : end]
            value = number(text)
            if value is None:
                continue  # None, a string, a list: not a metric
            if match.group(1) == STEP_KEY:
                step = checked_step(value)
            values.append((match.group(1), value))
    except LiteralError as err:
        return Damaged(SPECULATORS, str(err))
    if not values:
        return None
    return ConsoleRecord(SPECULATORS, tuple(values), step, None, step is not None)
