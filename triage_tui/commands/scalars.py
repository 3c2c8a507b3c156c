"""`triage scalars RUN_OR_FILE [--tag GLOB] [--format csv|json]`: every scalar point, exact.

RUN_OR_FILE is one event file or W&B run file (run-<id>.wandb), or a directory whose *tfevents*
and run-*.wandb files (hidden directories skipped) are read together as one run (core.sources: W&B
series are named ``wandb/<key>`` when the directory also has event files). No sampling: every point
the run logged and TensorBoard would keep (restart preemption and SessionLog.START purges applied).

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
import io
import json
import multiprocessing
import os
import sys
import threading
from collections import deque
from pathlib import Path

from triage_tui.core.decimal_text import float_reprs, int_texts, join_rows
from triage_tui.core.errors import BadInput
from triage_tui.core.events.reader import find_event_files
from triage_tui.core.runs.names import is_wandb_file_name
from triage_tui.core.series import ScalarSeries
from triage_tui.core.sources import RunSources
from triage_tui.core.text import printable
from triage_tui.core.wandb_history import find_wandb_files


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        metavar="RUN_OR_FILE",
        help="an event file or W&B run file, or a run directory (all *tfevents* and run-*.wandb below it)",
    )
    parser.add_argument(
        "--tag",
        action="append",
        metavar="GLOB",
        help="only tags matching this glob (fnmatch, case-sensitive); repeat for several",
    )
    parser.add_argument(
        "--format",
        choices=("csv", "json"),
        default="csv",
        help="csv: tag,step,wall_time,value (default); "
        'json: {"tags": {tag: {steps, wall_times, values}}}, '
        'non-finite values as the strings "NaN", "Infinity", "-Infinity"',
    )


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
    if path.is_file():
        wandb_files = [path] if is_wandb_file_name(path.name) else []
        files = [] if wandb_files else [path]
    else:
        files = find_event_files(path)
        wandb_files = find_wandb_files(path)
    if not files and not wandb_files:
        raise BadInput(path, "no event files (*tfevents*) or W&B run files (run-*.wandb) below it")
    events = RunSources()
    events.set_files(files, wandb_files)
    stats = events.poll()
    problems = events.problems
    if path.is_file() and problems:
        raise BadInput(path, problems[path])
    for problem_path, what in problems.items():
        print(f"triage scalars: {printable(problem_path)}: {printable(what)}", file=sys.stderr)
    if path.is_file() and stats.records == 0 and path.stat().st_size > 0 and files:
        raise BadInput(path, "not a TensorBoard event file: no valid record in it")
    if stats.unreadable_files > len(problems):
        print(
            f"triage scalars: {printable(path)}: {stats.unreadable_files - len(problems)} event file(s) "
            "could not be read",
            file=sys.stderr,
        )
    if stats.corrupt_records:
        print(
            f"triage scalars: {printable(path)}: skipped {stats.corrupt_records} damaged record(s), "
            f"{stats.skipped_bytes} byte(s)",
            file=sys.stderr,
        )
    series = [events.scalars.series[tag] for tag in events.scalars.tags() if _wanted(tag, args.tag)]
    if args.tag and not series:
        print(f"triage scalars: {printable(path)}: no tag matches {printable(' or '.join(args.tag))}", file=sys.stderr)
    if args.format == "json":
        _write_json(series, sys.stdout)
    else:
        _write_csv(series, sys.stdout)
    return 0


def _wanted(tag: str, globs: list[str] | None) -> bool:
    return not globs or any(fnmatch.fnmatchcase(tag, glob) for glob in globs)


# Rows formatted per piece: ~3 MB of text. Two forked processes format pieces while this one
# writes them in order (threads do not help: the GIL is taken between numpy's many short loops);
# benchmarks/bench_export.py measures it.
_PIECE_ROWS = 1 << 16
_IN_FLIGHT = 4
_FORMATTERS = 2
_MIN_ROWS_TO_FORK = 4 * _PIECE_ROWS


def _write_csv(series: list[ScalarSeries], out) -> None:
    pieces: list = [b"tag,step,wall_time,value\n"]
    encoding, errors = _encoding(out)
    # Piped, the CSV is data and stays exact (as JSON does); on a terminal a person reads it, and a
    # tag holding an escape sequence (an OSC 52 clipboard write) is shown as `cat -v` would.
    on_terminal = getattr(out, "isatty", lambda: False)()
    for s in series:
        steps, walls, values = s.columns()
        field = _csv_field(printable(s.tag) if on_terminal else s.tag).encode(encoding, errors) + b","
        for lo in range(0, len(steps), _PIECE_ROWS):
            hi = lo + _PIECE_ROWS
            pieces.append((_csv_rows, field, steps[lo:hi], walls[lo:hi], values[lo:hi]))
    _write_pieces(pieces, sum(len(s) for s in series), out)


def _csv_rows(field: bytes, steps, walls, values) -> bytes:
    # repr(float) for both float columns: the shortest text that reads back to the same float64.
    return join_rows([field, int_texts(steps), b",", float_reprs(walls), b",", float_reprs(values), b"\n"])


def _csv_field(tag: str) -> str:
    """The tag as csv.writer writes it (quoted when it holds a comma, quote or line break)."""
    if not tag:
        return tag
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerow([tag])
    return text.getvalue()[:-1]


_JSON_NON_FINITE = (b'"NaN"', b'"Infinity"', b'"-Infinity"')


def _write_json(series: list[ScalarSeries], out) -> None:
    """What json.dump({"tags": ...}) writes (default separators), non-finite values as strings."""
    encoding, errors = _encoding(out)
    pieces: list = [b'{"tags": {']
    for i, s in enumerate(series):
        steps, walls, values = s.columns()
        pieces.append((b", " if i else b"") + json.dumps(s.tag).encode(encoding, errors) + b': {"steps": ')
        pieces += _json_list(int_texts, steps)
        pieces.append(b', "wall_times": ')
        pieces += _json_list(_json_floats, walls)
        pieces.append(b', "values": ')
        pieces += _json_list(_json_floats, values)
        pieces.append(b"}")
    pieces.append(b"}}\n")
    _write_pieces(pieces, sum(len(s) for s in series), out)


def _json_floats(values):
    return float_reprs(values, non_finite=_JSON_NON_FINITE)


def _json_list(texts, column) -> list:
    if not len(column):
        return [b"[]"]
    pieces: list = [b"["]
    for lo in range(0, len(column), _PIECE_ROWS):
        last = lo + _PIECE_ROWS >= len(column)
        pieces.append((_json_items, texts, column[lo : lo + _PIECE_ROWS], last))
    pieces.append(b"]")
    return pieces


def _json_items(texts, column, last: bool) -> bytes:
    text = join_rows([texts(column), b", "])
    return text[:-2] if last else text


def _encoding(out) -> tuple[str, str]:
    return getattr(out, "encoding", None) or "utf-8", getattr(out, "errors", None) or "strict"


def _write_pieces(pieces: list, points: int, out) -> None:
    """Write constant pieces and formatted ones, in order."""
    out.flush()
    binary = getattr(out, "buffer", None)
    write = binary.write if binary is not None else (lambda data: out.write(data.decode(_encoding(out)[0])))
    global _JOBS
    _JOBS = [piece for piece in pieces if not isinstance(piece, bytes)]
    pool = _formatters() if points >= _MIN_ROWS_TO_FORK else None
    try:
        pending: deque = deque()
        job = 0
        for piece in pieces:
            if isinstance(piece, bytes):
                pending.append(piece)
            else:
                pending.append(pool.apply_async(_run, (job,)) if pool is not None else job)
                job += 1
            while pending and (len(pending) > _IN_FLIGHT or isinstance(pending[0], bytes) or pool is None):
                _write_first(pending, write)
        while pending:
            _write_first(pending, write)
    finally:
        _JOBS = []
        if pool is not None:
            pool.terminate()
    if binary is not None:
        binary.flush()


_JOBS: list[tuple] = []  # the formatting jobs of the current write; forked formatters inherit them


def _write_first(pending: deque, write) -> None:
    first = pending.popleft()
    write(first if isinstance(first, bytes) else _run(first) if isinstance(first, int) else first.get())


def _run(job: int) -> bytes:
    function, *args = _JOBS[job]
    return function(*args)


def _formatters():
    """A pool of forked formatter processes, or None where forking is unsafe or pointless."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if cores < 2 or threading.active_count() > 1 or "fork" not in multiprocessing.get_all_start_methods():
        return None  # forking a process with other threads can deadlock the child
    if _free_cores(cores) < 1.0:
        # The forked formatters cost ~30 % more CPU (the pieces are pickled back): they win only with
        # a core to themselves; on a busy machine one process is faster (benchmarks/RESULTS-export.md).
        return None
    return multiprocessing.get_context("fork").Pool(min(cores, _FORMATTERS))


def _free_cores(cores: int) -> float:
    """Cores the one-minute load average leaves idle."""
    try:
        return cores - os.getloadavg()[0]
    except OSError:  # no load average on this system
        return float(cores)
