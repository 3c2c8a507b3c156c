"""torchtune's DiskLogger: ``<log_dir>/log_<unix time>.txt``, a new file per launch.

torchtune/training/metric_logging.py (``DiskLogger``, 0.6): the file is
``log_{int(time.time())}.txt`` in ``log_dir``; ``log`` writes ``Step {step} | {name}:{data}`` and
``log_dict`` writes ``Step {step} | `` then ``{name}:{data} `` for each metric, then a newline.
``data`` is what the recipe passed: a float (``loss.item()``), an int, or a 0-d tensor printed as
``tensor(1.2345)``.
"""

from __future__ import annotations

import re

from triage_tui.core.read.trackers.line_log import DAMAGED, Damaged, LineLogs, Logged
from triage_tui.core.read.trackers.points import metric_name, step_of
from triage_tui.core.read.trackers.text_numbers import parse_number

KIND = "torchtune"
FILE_NAME = re.compile(r"^log_\d+\.txt$")
_LINE = re.compile(r"^Step (\d+) \| (.*)$")
_PAIR = re.compile(r"(?P<name>[^:]+?):(?P<value>\S+)(?: |$)")
_TENSOR = re.compile(r"^tensor\((.*?)(?:, [a-z_]+=.*)?\)$")


def parse_line(line: str) -> Logged | Damaged | None:
    match = _LINE.match(line.rstrip("\n"))
    if match is None:
        return None
    step = step_of(int(match[1]))
    values: list[tuple[str, float]] = []
    rest = match[2]
    # ``{name}:{data} `` each: a name may hold spaces (the recipe's keys are its own), a value none.
    for pair in _PAIR.finditer(rest):
        tensor = _TENSOR.match(pair["value"])
        value = parse_number(tensor[1] if tensor else pair["value"])
        name = metric_name(pair["name"])
        if value is None or name is None:
            return DAMAGED
        values.append((name, value))
    if step is None or not values or _PAIR.sub("", rest).strip():
        return DAMAGED  # no pair, or text no pair accounts for
    return Logged(step, tuple(values))


def disk_logs(prefix: str = "") -> LineLogs:
    return LineLogs(KIND, lambda _path: parse_line, prefix)
