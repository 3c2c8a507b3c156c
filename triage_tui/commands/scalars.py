"""`triage scalars RUN_OR_FILE [--tag GLOB] [--format csv|json]`: every scalar point, exact.

RUN_OR_FILE is one event file or W&B run file (run-<id>.wandb), or a directory: the files of every
kind of scalar source of the run (or runs) discovery finds there, as `scan` lists them and the TUI
draws them (of a run that holds the directory, those below it), read together as one run
(core.read.sources: W&B series are named ``wandb/<key>`` when the run also has event files,
``console/...`` and ``trainer_state/...`` likewise). No sampling: every
point the run logged and TensorBoard would keep (restart preemption and SessionLog.START purges applied).

csv: ``tag,step,wall_time,value``, one row a point, tags sorted then steps ascending; floats
in Python's shortest round-trip form, non-finite ones as ``nan``, ``inf``, ``-inf``.
json: ``{"tags": {tag: {"steps": [...], "wall_times": [...], "values": [...]}}}``, and where a metric
two sources record is shown once (HF Trainer's ``loss`` from ``trainer_state.json``, exact, over the
console's printed ``console/loss``) ``"alternatives": {alternative tag: the tag shown}``; a non-finite
value is the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (JSON has no such numbers;
Python's ``float()`` reads those strings back), so the output is strict JSON.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import io
import itertools
import json
import math
import os
import sys
from pathlib import Path

from triage_tui.core.decimal_text import float_reprs, int_texts, join_rows
from triage_tui.core.errors import BadInput
from triage_tui.core.read.runs.discover import discover_runs, file_kind, store_run_at
from triage_tui.core.read.runs.info import RunInfo
from triage_tui.core.read.runs.remote import Mirrors, shown_path
from triage_tui.core.read.source_kinds import registry, tensorboard
from triage_tui.core.read.sources import RunSources
from triage_tui.core.series import ScalarSeries
from triage_tui.core.text import printable

# Once the export is written nothing is left to do: cli.main exits without the interpreter's teardown.
EXIT_WITHOUT_TEARDOWN = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        metavar="RUN_OR_FILE",
        help="an event file or W&B run file, or a run directory (every scalar source scan lists for it: "
        "event files, W&B run files, consoles, trainer_state.json), "
        "local or a bucket prefix (s3://bucket/run, gs://...)",
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
        'json: {"tags": {tag: {steps, wall_times, values}}} and, where a metric two sources record is '
        'shown once, "alternatives": {alternative tag: tag shown}; '
        'non-finite values as the strings "NaN", "Infinity", "-Infinity"',
    )


def run(args: argparse.Namespace) -> int:
    mirrors = Mirrors()
    path = mirrors.local(args.path)
    for error in mirrors.sync():  # a URL: the run's prefix mirrored here first (runs/remote.py)
        print(f"triage scalars: {printable(error.line())}", file=sys.stderr)
    stored = store_run_at(Path(os.path.abspath(path)))  # one of a tracker store's runs: <dir>/mlflow.db/<run id>
    if stored is None and not path.exists():
        raise BadInput(shown_path(path), "no such file or directory")
    if path.is_file():
        try:
            with open(path, "rb"):
                pass
        except OSError as err:
            raise BadInput(shown_path(path), f"cannot read it: {err.strerror}") from None
    elif stored is None and not path.is_dir():
        raise BadInput(shown_path(path), "not a regular file or a directory")
    if stored is not None:
        scalar_files: tuple[tuple[str, tuple[Path, ...]], ...] = stored.scalar_files
    elif path.is_file():
        # One file: a W&B run file, a file of a kind that makes runs, else read as an event file.
        kind = file_kind(path.name) or tensorboard.KIND.name
        scalar_files = ((kind, (path,)),)
    else:
        scalar_files = _run_files(discover_runs([path], keep_bad_manifests=True), path)
    if not scalar_files:
        raise BadInput(shown_path(path), "no event files (*tfevents*) or W&B run files (run-*.wandb) below it")
    events = RunSources()
    events.set_files(scalar_files, stored.store_run if stored is not None else None)
    stats = events.poll()
    problems = events.problems
    if path.is_file() and problems:
        raise BadInput(shown_path(path), problems[path])
    # A reader that failed outright (the fault boundary keeps it on the run), and each file that
    # could not be read: said, never silent.
    failures = tuple(events.failures.values())
    if failures and not events.scalars.series:
        raise BadInput(failures[0].path or path, failures[0].message)
    for error in events.errors:
        print(f"triage scalars: {printable(error.line())}", file=sys.stderr)
    if path.is_file() and stats.records == 0 and path.stat().st_size > 0 and events.events is not None:
        raise BadInput(shown_path(path), "not a TensorBoard event file: no valid record in it")
    if stats.unreadable_files > len(problems):
        print(
            f"triage scalars: {printable(shown_path(path))}: {stats.unreadable_files - len(problems)} event file(s) "
            "could not be read",
            file=sys.stderr,
        )
    if stats.corrupt_records:
        print(
            f"triage scalars: {printable(shown_path(path))}: skipped {stats.corrupt_records} damaged record(s), "
            f"{stats.skipped_bytes} byte(s)",
            file=sys.stderr,
        )
    series = [events.scalars.series[tag] for tag in events.scalars.tags() if _wanted(tag, args.tag)]
    if args.tag and not series:
        print(
            f"triage scalars: {printable(shown_path(path))}: no tag matches {printable(' or '.join(args.tag))}",
            file=sys.stderr,
        )
    listed = {s.tag for s in series}
    alternatives = {alt: shown for alt, shown in sorted(events.scalars.alternatives.items()) if alt in listed}
    if PLAIN_TEXT and args.format == "json":
        _write_json_plain(series, sys.stdout, alternatives)
    elif PLAIN_TEXT:
        _write_csv_plain(series, sys.stdout)
    elif args.format == "json":
        _write_json(series, sys.stdout, alternatives)
    else:
        _write_csv(series, sys.stdout)
    return 0


def _run_files(runs: list[RunInfo], directory: Path) -> tuple[tuple[str, tuple[Path, ...]], ...]:
    """The files of each kind of scalar source of the runs found (the one run a directory usually
    is), read together as one: what `scan` lists for them and the TUI draws. A run found above the
    directory (`out/runs/<date_host>` of the run `out`) gives only its files below it, as
    ``tensorboard --logdir`` of that directory reads them."""
    directory = Path(os.path.abspath(directory))  # discovery's paths are absolute
    files: dict[str, list[Path]] = {}
    for info in runs:
        whole = info.path.is_relative_to(directory)
        for name, paths in info.scalar_files:
            files.setdefault(name, []).extend(p for p in paths if whole or p.is_relative_to(directory))
    # A store of several runs is each of its runs' file: read once, every run of it.
    return tuple(
        (kind.name, tuple(dict.fromkeys(files[kind.name]))) for kind in registry.SCALAR_SOURCES if files.get(kind.name)
    )


# The plain path: csv.writer and repr, json.dumps. The fast one below (numpy columns,
# core/decimal_text.py) writes the same bytes (tests/test_scalars_command.py); benchmarks/ab.py
# sets this to measure what the fast one buys on the export of a big run.
PLAIN_TEXT = False


def _write_csv_plain(series: list[ScalarSeries], out) -> None:
    writer = csv.writer(out, lineterminator="\n")  # floats as repr writes them, tags quoted where needed
    writer.writerow(("tag", "step", "wall_time", "value"))
    on_terminal = getattr(out, "isatty", lambda: False)()
    for s in series:
        steps, walls, values = s.columns()
        tag = printable(s.tag) if on_terminal else s.tag
        writer.writerows(zip(itertools.repeat(tag), steps.tolist(), walls.tolist(), values.tolist()))
    out.flush()


def _write_json_plain(series: list[ScalarSeries], out, alternatives: dict[str, str]) -> None:
    def strict(column) -> list:
        return [v if math.isfinite(v) else ("NaN" if v != v else "Infinity" if v > 0 else "-Infinity") for v in column]

    tags = {}
    for s in series:
        steps, walls, values = s.columns()
        tags[s.tag] = {"steps": steps.tolist(), "wall_times": strict(walls.tolist()), "values": strict(values.tolist())}
    document: dict = {"tags": tags, "alternatives": alternatives} if alternatives else {"tags": tags}
    out.write(json.dumps(document) + "\n")  # dumps, not dump: its C encoder
    out.flush()


def _wanted(tag: str, globs: list[str] | None) -> bool:
    return not globs or any(fnmatch.fnmatchcase(tag, glob) for glob in globs)


# Rows formatted per piece, in one go by numpy (core/decimal_text.py): ~0.8 MB of CSV. Smaller
# pieces stay in the caches (1 << 14 took ~10 % less CPU than 1 << 16); much smaller ones pay
# numpy's per-call cost.
_PIECE_ROWS = 1 << 14


def _write_csv(series: list[ScalarSeries], out) -> None:
    write = _bytes_writer(out)
    encoding, errors = _encoding(out)
    write(b"tag,step,wall_time,value\n")
    # Piped, the CSV is data and stays exact (as JSON does); on a terminal a person reads it, and a
    # tag holding an escape sequence (an OSC 52 clipboard write) is shown as `cat -v` would.
    on_terminal = getattr(out, "isatty", lambda: False)()
    for s in series:
        steps, walls, values = s.columns()
        field = _csv_field(printable(s.tag) if on_terminal else s.tag).encode(encoding, errors) + b","
        for lo in range(0, len(steps), _PIECE_ROWS):
            hi = lo + _PIECE_ROWS
            write(_csv_rows(field, steps[lo:hi], walls[lo:hi], values[lo:hi]))
    out.flush()


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


def _write_json(series: list[ScalarSeries], out, alternatives: dict[str, str]) -> None:
    """What json.dump({"tags": ..., "alternatives": ...}) writes (default separators), non-finite
    values as strings."""
    write = _bytes_writer(out)
    encoding, errors = _encoding(out)
    write(b'{"tags": {')
    for i, s in enumerate(series):
        steps, walls, values = s.columns()
        write((b", " if i else b"") + json.dumps(s.tag).encode(encoding, errors) + b': {"steps": ')
        _json_list(write, int_texts, steps)
        write(b', "wall_times": ')
        _json_list(write, _json_floats, walls)
        write(b', "values": ')
        _json_list(write, _json_floats, values)
        write(b"}")
    write(b"}")
    if alternatives:
        write(b', "alternatives": ' + json.dumps(alternatives).encode(encoding, errors))
    write(b"}\n")
    out.flush()


def _json_floats(values):
    return float_reprs(values, non_finite=_JSON_NON_FINITE)


def _json_list(write, texts, column) -> None:
    if not len(column):
        write(b"[]")
        return
    write(b"[")
    for lo in range(0, len(column), _PIECE_ROWS):
        text = join_rows([texts(column[lo : lo + _PIECE_ROWS]), b", "])
        write(text[:-2] if lo + _PIECE_ROWS >= len(column) else text)
    write(b"]")


def _encoding(out) -> tuple[str, str]:
    return getattr(out, "encoding", None) or "utf-8", getattr(out, "errors", None) or "strict"


def _bytes_writer(out):
    """Writes bytes to ``out``: to the binary stream below it, else (a text stream in memory) decoded."""
    out.flush()  # what was written as text goes first
    binary = getattr(out, "buffer", None)
    if binary is not None:
        return binary.write
    encoding = _encoding(out)[0]
    return lambda data: out.write(data.decode(encoding))
