"""HF Trainer's printed log dicts: ``{'loss': '5.555', 'grad_norm': '0.763', 'epoch': '0.25'}``.

``Trainer.log`` adds ``epoch`` to every log dict and hands it to the callbacks
(huggingface/transformers 5.24.0 ``src/transformers/trainer.py``); with the progress bar on,
``ProgressCallback.on_log`` prints it through ``tqdm.write(str(logs))`` with each float formatted
``f"{v:.4g}"`` (a string) and ``total_flos`` left out; with the bar off, ``PrinterCallback.on_log``
prints the same (``trainer_callback.py``). transformers 4.x printed the floats themselves. The
dicts carry no step (only ``state.log_history`` does, with ``"step"``): ``steps`` finds it.

A dict is HF Trainer's when it has the ``epoch`` key; a training log has ``loss``, an evaluation
``eval_*`` keys, the last one ``train_runtime`` and ``train_loss``.
"""

from __future__ import annotations

from triage_tui.core.read.console.literal import LiteralError, parse_literal
from triage_tui.core.read.console.record import HF_TRAINER, ConsoleRecord, Damaged, numeric_items

EPOCH_KEY = "epoch"
TRAIN_LOSS_KEY = "loss"


def dict_start(line: str) -> int:
    """Where a printed dict starts in the line (after a progress bar it was written behind when
    stdout is block-buffered), or -1."""
    found = line.find("{'")
    return found if found >= 0 else line.find('{"')


def parse(line: str, start: int) -> ConsoleRecord | Damaged | None:
    """The record of the dict at ``start``; Damaged when it names ``epoch`` but cannot be read; None
    when it is no HF Trainer log dict."""
    try:
        value, end = parse_literal(line, start)
        if line[end:].strip():
            raise LiteralError("text after the dict")
    except LiteralError as err:
        if f"'{EPOCH_KEY}':" in line[start:]:
            return Damaged(HF_TRAINER, str(err))
        return None
    if not isinstance(value, dict) or EPOCH_KEY not in value:
        return None
    try:
        values = tuple(numeric_items(value, strings=True))
    except LiteralError as err:
        return Damaged(HF_TRAINER, str(err))
    return ConsoleRecord(HF_TRAINER, values, None, None, TRAIN_LOSS_KEY in value)
