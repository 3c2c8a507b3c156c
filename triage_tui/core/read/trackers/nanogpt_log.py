"""nanoGPT- and nanochat-style training consoles (``train.log``: the script's stdout) as scalars.

nanoGPT (karpathy/nanoGPT train.py) prints, every ``log_interval`` iterations,
``iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%`` and,
every ``eval_interval``, ``step {iter_num}: train loss {losses['train']:.4f}, val loss
{losses['val']:.4f}``; the evaluation's two losses are named as its W&B logging names them
(``train/loss``, ``val/loss``). nanochat (karpathy/nanochat scripts/base_train.py) prints
``step {step:05d}/{num_iterations:05d} ({pct_done:.2f}%) | loss: {loss:.6f} | lrm: … | dt:
{dt_ms}ms | tok/sec: {tok_per_sec:,} | mfu: … | total time: {minutes}m`` and, at evaluations,
``Step {step:05d} | Validation bpb: {val_bpb:.4f}``. The values are as exact as printed.
tqdm meters and ANSI colours may share a line: ``\\r`` ends a line here as a newline does.
"""

from __future__ import annotations

import re

from triage_tui.core.read.trackers.line_log import DAMAGED, Damaged, LineLogs, Logged
from triage_tui.core.read.trackers.points import step_of
from triage_tui.core.read.trackers.text_numbers import parse_number

KIND = "nanogpt"
CHECKPOINT_NAME = "ckpt.pt"  # nanoGPT's out_dir holds it beside the console the user redirected
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NUM = r"(\S+?)"
_ITER = re.compile(rf"iter (\d+): loss {_NUM}, time {_NUM}ms, mfu {_NUM}%\s*$")
_EVAL = re.compile(rf"step (\d+): train loss {_NUM}, val loss {_NUM}\s*$")
_NANOCHAT = re.compile(r"step (\d+)/(\d+) \([^)]*\) \| (.*)$")
_NANOCHAT_EVAL = re.compile(r"Step (\d+) \| Validation bpb: (\S+)\s*$")
# nanochat's field names into series names, and the units its values end in.
_UNITS = ("ms", "m", "%", "s")


def _values(step_text: str, pairs: list[tuple[str, str]]) -> Logged | Damaged:
    step = step_of(int(step_text))
    values = []
    for name, text in pairs:
        value = parse_number(text)
        if value is None:
            return DAMAGED
        values.append((name, value))
    return DAMAGED if step is None else Logged(step, tuple(values))


def _nanochat_fields(step_text: str, rest: str) -> Logged | Damaged:
    pairs = []
    for field in rest.split(" | "):
        name, sep, text = field.partition(": ")
        if not sep:
            return DAMAGED
        text = text.strip().replace(",", "")
        unit = next((u for u in _UNITS if text.endswith(u) and parse_number(text[: -len(u)]) is not None), "")
        key = name.strip().lower().replace(" ", "_").replace("/", "_per_")
        pairs.append((f"{key}_{'pct' if unit == '%' else unit}" if unit else key, text[: len(text) - len(unit)]))
    return _values(step_text, pairs)


def parse_line(line: str) -> Logged | Damaged | None:
    line = _ANSI.sub("", line)
    if (match := _ITER.search(line)) is not None:
        return _values(match[1], [("loss", match[2]), ("time_ms", match[3]), ("mfu", match[4])])
    if (match := _EVAL.search(line)) is not None:
        return _values(match[1], [("train/loss", match[2]), ("val/loss", match[3])])
    if (match := _NANOCHAT.search(line)) is not None:
        return _nanochat_fields(match[1], match[3])
    if (match := _NANOCHAT_EVAL.search(line)) is not None:
        return _values(match[1], [("val/bpb", match[2])])
    return None


def consoles(prefix: str = "") -> LineLogs:
    return LineLogs(KIND, lambda _path: parse_line, prefix, split_cr=True)
