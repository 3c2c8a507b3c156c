"""`triage scalars RUN_OR_FILE [--tag GLOB] [--format csv|json]`: every scalar point, exact.

RUN_OR_FILE is one event file, or a directory whose *tfevents* files (hidden directories
skipped) are read together as one run. No sampling: every point the run logged and TensorBoard
would keep (restart preemption and SessionLog.START purges applied).

csv: ``tag,step,wall_time,value``, one row a point, tags sorted then steps ascending; floats
in Python's shortest round-trip form, non-finite ones as ``nan``, ``inf``, ``-inf``.
json: ``{"tags": {tag: {"steps": [...], "wall_times": [...], "values": [...]}}}``; a non-finite
value is the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (JSON has no such numbers;
Python's ``float()`` reads those strings back), so the output is strict JSON.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import math
import sys
from pathlib import Path

from triage_tui.core.errors import BadInput
from triage_tui.core.events import RunEvents, find_event_files
from triage_tui.core.series import ScalarSeries

_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="RUN_OR_FILE", help="an event file, or a run directory (all *tfevents* below it)")
    parser.add_argument("--tag", action="append", metavar="GLOB",
                        help="only tags matching this glob (fnmatch, case-sensitive); repeat for several")
    parser.add_argument("--format", choices=("csv", "json"), default="csv",
                        help="csv: tag,step,wall_time,value (default); json: {\"tags\": {tag: {steps, wall_times, values}}}, "
                             "non-finite values as the strings \"NaN\", \"Infinity\", \"-Infinity\"")


def run(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if not path.exists():
        raise BadInput(path, "no such file or directory")
    if path.is_file():
        try:
            with open(path, "rb"):
                pass
        except OSError as err:
            raise BadInput(path, f"cannot read it: {err.strerror}") from None
    elif not path.is_dir():
        raise BadInput(path, "not a regular file or a directory")
    files = find_event_files(path)
    if not files:
        raise BadInput(path, "no event files (*tfevents*) below it")
    events = RunEvents()
    events.set_files(files)
    stats = events.poll()
    if path.is_file() and stats.records == 0 and path.stat().st_size > 0:
        raise BadInput(path, "not a TensorBoard event file: no valid record in it")
    if stats.unreadable_files:
        print(f"triage scalars: {path}: {stats.unreadable_files} event file(s) could not be read", file=sys.stderr)
    if stats.corrupt_records:
        print(f"triage scalars: {path}: skipped {stats.corrupt_records} damaged record(s), "
              f"{stats.skipped_bytes} byte(s)", file=sys.stderr)
    series = [events.scalars.series[tag] for tag in events.scalars.tags() if _wanted(tag, args.tag)]
    if args.tag and not series:
        print(f"triage scalars: {path}: no tag matches {' or '.join(args.tag)}", file=sys.stderr)
    if args.format == "json":
        _write_json(series, sys.stdout)
    else:
        _write_csv(series, sys.stdout)
    return 0


def _wanted(tag: str, globs: list[str] | None) -> bool:
    return not globs or any(fnmatch.fnmatchcase(tag, glob) for glob in globs)


def _write_csv(series: list[ScalarSeries], out) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("tag", "step", "wall_time", "value"))
    for s in series:
        steps, walls, values = s.columns()
        # repr(float) is the shortest string that reads back to the same float64.
        writer.writerows(zip([s.tag] * len(steps), steps.tolist(), map(repr, walls.tolist()), map(repr, values.tolist())))


def _json_values(values: list[float]) -> list[float | str]:
    return [v if math.isfinite(v) else _NON_FINITE[repr(v)] for v in values]


def _write_json(series: list[ScalarSeries], out) -> None:
    tags = {}
    for s in series:
        steps, walls, values = s.columns()
        tags[s.tag] = {
            "steps": steps.tolist(),
            "wall_times": _json_values(walls.tolist()),
            "values": _json_values(values.tolist()),
        }
    json.dump({"tags": tags}, out, allow_nan=False)
    out.write("\n")
