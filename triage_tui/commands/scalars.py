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
import errno
import fnmatch
import io
import itertools
import json
import math
import os
import signal
import sys
from pathlib import Path
from typing import NoReturn

from triage_tui.core import processes
from triage_tui.core.decimal_text import float_reprs, int_texts, join_rows
from triage_tui.core.errors import BadInput
from triage_tui.core.events.reader import find_event_files
from triage_tui.core.runs.discover import discover_runs
from triage_tui.core.runs.names import is_wandb_file_name
from triage_tui.core.runs.remote import Mirrors, shown_path
from triage_tui.core.series import ScalarSeries
from triage_tui.core.sources import RunSources
from triage_tui.core.text import printable
from triage_tui.core.wandb.history import find_wandb_files

# Once the export is written nothing is left to do: cli.main exits without the interpreter's teardown.
EXIT_WITHOUT_TEARDOWN = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        metavar="RUN_OR_FILE",
        help="an event file or W&B run file, or a run directory (all *tfevents* and run-*.wandb below it), "
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
        'json: {"tags": {tag: {steps, wall_times, values}}}, '
        'non-finite values as the strings "NaN", "Infinity", "-Infinity"',
    )


def run(args: argparse.Namespace) -> int:
    mirrors = Mirrors()
    path = mirrors.local(args.path)
    for error in mirrors.sync():  # a URL: the run's prefix mirrored here first (runs/remote.py)
        print(f"triage scalars: {printable(error.line())}", file=sys.stderr)
    if not path.exists():
        raise BadInput(shown_path(path), "no such file or directory")
    if path.is_file():
        try:
            with open(path, "rb"):
                pass
        except OSError as err:
            raise BadInput(shown_path(path), f"cannot read it: {err.strerror}") from None
    elif not path.is_dir():
        raise BadInput(shown_path(path), "not a regular file or a directory")
    if path.is_file():
        wandb_files = [path] if is_wandb_file_name(path.name) else []
        files = [] if wandb_files else [path]
    else:
        files = find_event_files(path)
        wandb_files = find_wandb_files(path)
    consoles: tuple[Path, ...] = ()
    trainer_state: Path | None = None
    if path.is_dir() and not files and not wandb_files:
        # A run whose only curves are its console (SpecForge's default) or its HF checkpoint's
        # trainer_state.json: those of the one run discovery finds there.
        runs = discover_runs([path], keep_bad_manifests=True)
        if len(runs) == 1:
            consoles, trainer_state = runs[0].console_files, runs[0].artifacts.trainer_state
    if not (files or wandb_files or consoles or trainer_state):
        raise BadInput(shown_path(path), "no event files (*tfevents*) or W&B run files (run-*.wandb) below it")
    events = RunSources()
    events.set_files(files, wandb_files, consoles, trainer_state)
    ticks = _cpu_ticks()  # what the machine's cores do while this process reads: see _processes
    stats = events.poll(split_files=True)  # nothing else to do meanwhile: a big file on two cores
    problems = events.problems
    if path.is_file() and problems:
        raise BadInput(shown_path(path), problems[path])
    # A reader that failed outright (the fault boundary keeps it on the run): said, never silent.
    failures = tuple(events.failures.values())
    if failures and not events.scalars.series:
        raise BadInput(failures[0].path or path, failures[0].message)
    for failure in failures:
        print(f"triage scalars: {printable(failure.line())}", file=sys.stderr)
    for problem_path, what in problems.items():
        print(f"triage scalars: {printable(problem_path)}: {printable(what)}", file=sys.stderr)
    if path.is_file() and stats.records == 0 and path.stat().st_size > 0 and files:
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
    if PLAIN_TEXT:
        (_write_json_plain if args.format == "json" else _write_csv_plain)(series, sys.stdout)
    elif args.format == "json":
        _write_json(series, sys.stdout, ticks)
    else:
        _write_csv(series, sys.stdout, ticks)
    return 0


# The plain path: csv.writer and repr, json.dumps, one process. The fast one below (numpy columns,
# core/decimal_text.py, and forked formatters) writes the same bytes (tests/test_scalars_command.py);
# benchmarks/ab.py sets this to measure what the fast one buys on the export of a big run.
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


def _write_json_plain(series: list[ScalarSeries], out) -> None:
    def strict(column) -> list:
        return [v if math.isfinite(v) else ("NaN" if v != v else "Infinity" if v > 0 else "-Infinity") for v in column]

    tags = {}
    for s in series:
        steps, walls, values = s.columns()
        tags[s.tag] = {"steps": steps.tolist(), "wall_times": strict(walls.tolist()), "values": strict(values.tolist())}
    out.write(json.dumps({"tags": tags}) + "\n")  # dumps, not dump: its C encoder
    out.flush()


def _wanted(tag: str, globs: list[str] | None) -> bool:
    return not globs or any(fnmatch.fnmatchcase(tag, glob) for glob in globs)


# Rows formatted per piece, in one go by numpy (core/decimal_text.py): ~0.8 MB of CSV. Smaller
# pieces stay in the caches (1 << 14 took ~10 % less CPU than 1 << 16); much smaller ones pay
# numpy's per-call cost.
_PIECE_ROWS = 1 << 14
# Forked formatters (see _write_pieces) take turns by chunks of pieces: a chunk is at most this many
# floats (~6 MB of CSV, what each process holds at a time), and a process is forked only for at
# least _MIN_FLOATS_PER_PROCESS floats (~30 ms of formatting).
_CHUNK_FLOATS = 1 << 18
_MIN_FLOATS_PER_PROCESS = 1 << 17


def _write_csv(series: list[ScalarSeries], out, ticks: tuple[float, int] | None = None) -> None:
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
            pieces.append((2 * len(steps[lo:hi]), _csv_rows, field, steps[lo:hi], walls[lo:hi], values[lo:hi]))
    _write_pieces(pieces, out, ticks)


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


def _write_json(series: list[ScalarSeries], out, ticks: tuple[float, int] | None = None) -> None:
    """What json.dump({"tags": ...}) writes (default separators), non-finite values as strings."""
    encoding, errors = _encoding(out)
    pieces: list = [b'{"tags": {']
    for i, s in enumerate(series):
        steps, walls, values = s.columns()
        pieces.append((b", " if i else b"") + json.dumps(s.tag).encode(encoding, errors) + b': {"steps": ')
        pieces += _json_list(int_texts, steps, floats=False)
        pieces.append(b', "wall_times": ')
        pieces += _json_list(_json_floats, walls, floats=True)
        pieces.append(b', "values": ')
        pieces += _json_list(_json_floats, values, floats=True)
        pieces.append(b"}")
    pieces.append(b"}}\n")
    _write_pieces(pieces, out, ticks)


def _json_floats(values):
    return float_reprs(values, non_finite=_JSON_NON_FINITE)


def _json_list(texts, column, *, floats: bool) -> list:
    if not len(column):
        return [b"[]"]
    pieces: list = [b"["]
    for lo in range(0, len(column), _PIECE_ROWS):
        last = lo + _PIECE_ROWS >= len(column)
        part = column[lo : lo + _PIECE_ROWS]
        # Integers cost a tenth of what floats do: a piece's weight counts its floats only.
        pieces.append((len(part) if floats else 0, _json_items, texts, part, last))
    pieces.append(b"]")
    return pieces


def _json_items(texts, column, last: bool) -> bytes:
    text = join_rows([texts(column), b", "])
    return text[:-2] if last else text


def _encoding(out) -> tuple[str, str]:
    return getattr(out, "encoding", None) or "utf-8", getattr(out, "errors", None) or "strict"


def _text(piece) -> bytes:
    """A piece's bytes: constant ones as they are, a (floats, function, *args) one formatted."""
    if isinstance(piece, bytes):
        return piece
    _, function, *args = piece
    return function(*args)


def _write_pieces(pieces: list, out, ticks: tuple[float, int] | None) -> None:
    """Write constant pieces and formatted ones, in order, formatting in one process a core.

    With N processes the pieces are cut into chunks; process i formats chunks i, i + N, ... and
    writes each straight to the output's file descriptor when its turn comes, passes the turn on
    through a pipe (a ring: 0 -> 1 -> ... -> N-1 -> 0), and formats its next chunk meanwhile.
    Nothing goes back between processes (a pool pickling each formatted piece back to the parent
    cost ~30 % more CPU), so the forks cost little CPU even where no core is idle.
    """
    out.flush()
    processes = _processes(sum(0 if isinstance(p, bytes) else p[0] for p in pieces), out, ticks)
    chunks = _chunks(pieces, processes) if processes > 1 else [pieces]
    processes = min(processes, len(chunks))
    if processes == 1:
        binary = getattr(out, "buffer", None)
        for piece in pieces:
            if binary is not None:
                binary.write(_text(piece))
            else:  # a text stream with no bytes below it
                out.write(_text(piece).decode(_encoding(out)[0]))
        out.flush()
        return
    fd = out.fileno()
    sys.stderr.flush()  # or a child's traceback would repeat what is still buffered
    turns = [os.pipe() for _ in range(processes)]  # turns[i]: from process i - 1 to process i
    ends = [end for pair in turns for end in pair]
    children: list[int] = []
    try:
        for i in range(1, processes):
            pid = os.fork()
            if pid == 0:
                _formatter(chunks, i, processes, fd, turns)
            children.append(pid)
        ends = _keep_ends(turns, 0)
        broken = not _take_turns(chunks, 0, processes, fd, *ends)
    except BaseException:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        raise
    finally:
        for end in ends:  # closed before waiting: a child waiting for its turn then sees EOF and exits
            os.close(end)
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    if 128 + signal.SIGPIPE in codes:
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))  # `| head`: quietly, as cli.py does
    if broken or any(codes):
        raise RuntimeError(f"a forked formatter failed (exit statuses {codes})")


def _processes(floats: int, out, ticks: tuple[float, int] | None) -> int:
    """How many processes format: one a core that was idle or ran this process (or the child its
    read forked) while it read (since ``ticks``), each with at least _MIN_FLOATS_PER_PROCESS floats.

    Only such cores: the kernel shares the CPU between sessions (autogroup), not processes, so on a
    busy machine a fork gets no more CPU, only its cost (at load 7: up to 8 % more CPU, 4-16 % more
    wall time). The one-minute load average is no guide: it lags, and stays above 1 for a minute
    after any earlier command (a quiet machine then formatted in one process). One process also
    where the output has no file descriptor or forking is unsafe (another thread may hold a lock
    the child would wait on forever)."""
    if not processes.can_fork():
        return 1
    try:
        out.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation: a stream in memory
        return 1
    now = _cpu_ticks()
    if ticks is None or now is None or now[1] <= ticks[1]:
        free = float(_CORES)  # no /proc/stat, or no time passed: take the cores as free
    else:
        # Cores idle or used by this process (and the child its read forked: core/events/split_read).
        free = (os.cpu_count() or _CORES) * (now[0] - ticks[0]) / (now[1] - ticks[1])  # /proc/stat: every core
    return max(1, min(_CORES, round(free), floats // _MIN_FLOATS_PER_PROCESS))


_CORES = processes.cores()


def _cpu_ticks() -> tuple[float, int] | None:
    """CPU ticks since boot (Linux's /proc/stat): (the machine's cores idle or running this process
    and its waited-for children, every core's), or None."""
    try:
        with open("/proc/stat", "rb") as stat:
            ticks = [int(field) for field in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    own = os.times()
    mine = (own.user + own.system + own.children_user + own.children_system) * os.sysconf("SC_CLK_TCK")
    return ticks[3] + ticks[4] + mine, sum(ticks)  # idle + iowait + this process's, out of user .. steal


def _chunks(pieces: list, processes: int) -> list[list]:
    """The pieces in consecutive runs of about equal floats, at most _CHUNK_FLOATS each: one run per
    process, or more when the output is large."""
    total = sum(0 if isinstance(p, bytes) else p[0] for p in pieces)
    target = min(_CHUNK_FLOATS, -(-total // processes))
    chunks: list[list] = [[]]
    floats = 0
    for piece in pieces:
        if floats >= target:
            chunks.append([])
            floats = 0
        chunks[-1].append(piece)
        floats += 0 if isinstance(piece, bytes) else piece[0]
    return chunks


def _keep_ends(turns: list[tuple[int, int]], i: int) -> list[int]:
    """Close every pipe end process i does not use; return the two it does: [its turn, the next's]."""
    keep = [turns[i][0], turns[(i + 1) % len(turns)][1]]
    for end in (end for pair in turns for end in pair):
        if end not in keep:
            os.close(end)
    return keep


def _take_turns(chunks: list[list], first: int, processes: int, fd: int, mine: int, pass_on: int) -> bool:
    """Format and write chunks first, first + processes, ..., each in its turn; False if the ring broke
    (the process before or after this one stopped: its exit status says why)."""
    for c in range(first, len(chunks), processes):
        if c == 0:  # the first turn is the parent's from the start: write as each piece is formatted
            for piece in chunks[0]:
                _write_all(fd, _text(piece))
        else:
            texts = [_text(piece) for piece in chunks[c]]
            if not os.read(mine, 1):
                return False
            for text in texts:
                _write_all(fd, text)
        if c + 1 < len(chunks):
            try:
                os.write(pass_on, b"t")
            except BrokenPipeError:
                return False
    return True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _formatter(chunks: list[list], i: int, processes: int, fd: int, turns: list[tuple[int, int]]) -> NoReturn:
    """A forked formatter: takes its turns, then exits without running anything of the parent's."""
    code = 1
    try:
        _take_turns(chunks, i, processes, fd, *_keep_ends(turns, i))
        code = 0  # or the ring broke: the process that broke it reports why
    except BrokenPipeError:  # the output's reader is gone (`| head`)
        code = 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - any other failure: its traceback, then a status the parent sees
        import traceback  # only here: not imported on every export

        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)
