"""torchtune's DiskLogger: ``<log_dir>/log_<unix time>.txt``, a new file per launch.

torchtune/training/metric_logging.py (``DiskLogger``, 0.6): the file is
``log_{int(time.time())}.txt`` in ``log_dir``; ``log`` writes ``Step {step} | {name}:{data}`` and
``log_dict`` writes ``Step {step} | `` then ``{name}:{data} `` for each metric, then a newline.
``data`` is what the recipe passed: a float (``loss.item()``), an int, or a 0-d tensor printed as
``tensor(1.2345)``.
"""

from __future__ import annotations

import re

from triage_tui.core.trackers.line_log import DAMAGED, Damaged, LineLogs, Logged
from triage_tui.core.trackers.points import metric_name, step_of
from triage_tui.core.trackers.text_numbers import parse_number

KIND = "torchtune"
FILE_NAME = re.compile(r"^log_\d+\.txt$")
_LINE = re.compile(r"^Step (\d+) \| (.*)$")
_TENSOR = re.compile(r"^tensor\((.*?)(?:, [a-z_]+=.*)?\)$")


def parse_line(line: str) -> Logged | Damaged | None:
    match = _LINE.match(line.rstrip())
    if match is None:
        return None
    step = step_of(int(match[1]))
    values: list[tuple[str, float]] = []
    for item in match[2].split():
        name, sep, text = item.rpartition(":")
        tensor = _TENSOR.match(text)
        value = parse_number(tensor[1] if tensor else text)
        name_ok = metric_name(name)
        if not sep or value is None or name_ok is None:
            return DAMAGED
        values.append((name_ok, value))
    if step is None or not values:
        return DAMAGED
    return Logged(step, tuple(values))


def disk_logs(prefix: str = "") -> LineLogs:
    return LineLogs(KIND, lambda _path: parse_line, prefix)
