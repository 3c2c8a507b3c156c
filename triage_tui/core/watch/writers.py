"""Which live process of this node writes a run: the process that writes, never one that only looks
at the run, wraps the writer, or started this program.

Evidence, strongest first:

- **event file name**: tensorboard's ``EventFileWriter`` (torch's ``SummaryWriter``) names its file
  ``events.out.tfevents.<time>.<hostname>.<pid>.<n>`` (tensorboard 2.21.0,
  ``tensorboard/summary/writer/event_file_writer.py``). That pid, alive in this PID namespace and
  started before the file was created, is the writer; another hostname means another node wrote it.
  The pid is the writer's own namespace's (``os.getpid()``): a trainer in a container names its pid
  there (often 1), so a name is believed only where no process of a nested namespace here has that
  pid in its own and was running then, and never for this program's ancestors (init, the shell).
- **open file**: a process holding a file of the run open for writing (``/proc/PID/fd`` and the
  access mode in ``/proc/PID/fdinfo``): ``tee`` or a shell redirect writing the console log, W&B's
  ``wandb-core`` writing ``run-<id>.wandb``, tensorboardX (it keeps its event file open). An open
  event file alone is not enough: without TensorFlow, torch's writer goes through tensorboard's
  file stub, which opens and closes the file on every write (``GFile.write`` ->
  ``LocalFileSystem.append`` -> ``_write``: ``with io.open(filename, mode)``, tensorboard 2.21.0
  ``tensorboard/compat/tensorflow_stub/io/gfile.py``), so between writes nothing holds it. Where a
  shell and its child hold the same file (``bash train.sh > out/run/train.log``), the child is named.
- **command line**: an argument that names the run's directory or a path inside it, or, where the
  run's directory is a trainer's log directory (``out/runs``: SpecForge), the output directory that
  holds it (``--output-dir out``), resolved against the process's working directory. A directory
  above the run (``runs/`` holding many runs, the project) is not the run.
- **working directory**: the process runs in the run's directory, below it, or in that output directory.

The last two are weak: such a process may be the trainer (one that writes through a file it opens
and closes, before its first event file, or on a host whose event files name no pid), or anything
else started there. It makes a run ``live`` while points arrive, never ``stalled`` (core.watch.run_state).

Never writers, whatever their arguments or directory: this program and its ancestors (``timeout 600
triage scan out/run``, a CI harness, a notebook cell running ``!triage``); wrappers, which wait for
the program that works (``timeout``, ``time``, ``nice``, ``nohup``, ``env``, ``xargs``, ``watch``:
they fork or exec it, GNU coreutils, findutils and procps-ng); viewers, pagers and editors (``tail
-f train.log``, ``less``, ``vim``, ``tensorboard --logdir``, a Jupyter server); and, by their command
line or directory, shells (``bash wait.sh out/run``: a shell runs what writes, and its working
directory is where a person stands) and interactive interpreters (a notebook kernel sits in the
project for days).

Where the event files name their writer, the name wins over the weaker evidence: a process that was
already running when the newest of them was created, and is not the pid it names, did not write it,
so a finished run whose writer is gone is ``ended`` whoever works beside it. A process started since
may be the run's trainer resuming, before its first event file, and still counts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from triage_tui.core.read.runs.names import LOG_DIR_NAMES, WANDB_DIR_NAME
from triage_tui.core.text import printable
from triage_tui.core.watch.process_table import Process, ProcessTable

# tensorboard's EventFileWriter: "events.out.tfevents.%010d.%s.%s.%s" % (time, hostname, pid, uid)
# + suffix (event_file_writer.py above). The hostname may hold dots and digits ("10.0.0.5"): pid and
# uid are the last two all-digit parts before a suffix whose parts do not start with a digit (".v2").
_EVENT_NAME = re.compile(
    r"^events\.out\.tfevents\.(?P<time>\d+)\.(?P<host>.+)\.(?P<pid>\d+)\.(?P<uid>\d+)(?:\.[^.\d][^.]*)*$"
)
# A process that started this long after its event file's name says the file was created is not
# the file's writer (the pid was reused). The name's time is whole seconds; the boot time and the
# start ticks are rounded too.
PID_REUSE_SLACK_SECS = 2.0

# Never writers by any evidence (``comm`` or the name it was started by, ``Process.names``).
# Viewers and copiers of a run's files, pagers, editors:
_LOOKERS = (
    "triage tensorboard tail less more most bat cat head grep rg find ls du rsync scp cp tar "
    "vi vim nvim view emacs nano micro hx kak"
)
# Wrappers: they start the program that works and wait for it, or exec it (then they are that program).
_WRAPPER_NAMES = (
    "timeout time nice nohup env xargs watch ionice taskset chrt stdbuf setsid flock sudo doas strace unshare nsenter"
)
# Jupyter's servers (``comm``: the script's name, cut at 15 characters) host kernels and write no run.
_SERVER_NAMES = "jupyter jupyter-lab jupyter-noteboo jupyter-server jupyterhub-sing"
BYSTANDERS = frozenset(f"{_LOOKERS} {_WRAPPER_NAMES} {_SERVER_NAMES}".split())
# A shell runs what writes (its child holds the files); its working directory is where a person
# stands, and its command line (`bash wait.sh out/run`) names what the script is given, not what it
# writes. A shell holding a run's file open for writing (`exec >> train.log`) still writes it.
SHELLS = frozenset({"bash", "sh", "zsh", "fish", "dash", "ksh", "tcsh", "csh", "tmux", "screen"})

_LOG_DIRS = LOG_DIR_NAMES | {WANDB_DIR_NAME}
_WEAK = ("command line", "working directory")


@dataclass(frozen=True)
class Writer:
    """A live process that writes the run, and the evidence it was found by."""

    pid: int
    comm: str
    evidence: str  # "event file name" | "open file" | "command line" | "working directory"
    detail: str  # what the evidence was, in words
    stopped: bool  # SIGSTOP or ctrl-Z: alive but cannot write
    interactive: str | None = None  # Process.interactive: it outlives its writing (core.watch.run_state)

    @property
    def weak(self) -> bool:
        """Seen only by its command line or working directory: it may write the run, or only stand by it."""
        return self.evidence in _WEAK

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.comm, "evidence": self.evidence, "detail": self.detail}


@dataclass(frozen=True)
class _Evidence:
    process: Process
    what: str  # the held file, the argument, or the working directory


@dataclass(frozen=True)
class _Index:
    """Every directory a process's evidence lies in or names, built once per table: each run's
    question is then a few dictionary lookups, not a pass over every process (200 runs x the node's
    processes would cost more than the scan). The lowest pid wins a directory, a shell's child over it."""

    held: dict[str, _Evidence]  # dir -> a process writing a file at or below it
    named_within: dict[str, _Evidence]  # dir -> an argument naming it or a path below it
    named: dict[str, _Evidence]  # path -> an argument naming exactly it
    cwd_within: dict[str, _Evidence]  # dir -> a process working in it or below it
    cwd: dict[str, _Evidence]  # dir -> a process working in exactly it


def _ancestors(path: str) -> Iterator[str]:
    """``path`` and every directory above it, up to the root."""
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def _never_writes(process: Process, table: ProcessTable) -> bool:
    return process.pid == table.own_pid or process.pid in table.ancestors or bool(process.names & BYSTANDERS)


def _index(table: ProcessTable) -> _Index:
    index = table.memo.get("writers")
    if isinstance(index, _Index):
        return index
    index = _Index({}, {}, {}, {}, {})
    candidates = (process for process in table.processes.values() if not _never_writes(process, table))
    for process in sorted(candidates, key=lambda process: (bool(process.names & SHELLS), process.pid)):
        for path in process.writing:
            for directory in _ancestors(os.path.dirname(path)):
                index.held.setdefault(directory, _Evidence(process, os.path.basename(path)))
        if process.names & SHELLS:
            continue
        for path, arg in process.paths:
            index.named.setdefault(path, _Evidence(process, arg))
            for directory in _ancestors(path):
                index.named_within.setdefault(directory, _Evidence(process, arg))
        if process.cwd is not None and process.interactive is None:
            index.cwd.setdefault(process.cwd, _Evidence(process, process.cwd))
            for directory in _ancestors(process.cwd):
                index.cwd_within.setdefault(directory, _Evidence(process, process.cwd))
    table.memo["writers"] = index
    return index


@lru_cache(maxsize=4096)
def _spellings(run_dir: Path | str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the run's directory as given and resolved, the output directory holding it where it is a
    trainer's log directory: ``out`` for ``out/runs``): once per run directory, which seldom moves
    under a symlink. Nothing further up: a ``runs/`` directory above the run holds other runs too."""
    spellings = tuple(dict.fromkeys((os.path.abspath(run_dir), os.path.realpath(run_dir))))
    outputs = tuple(
        os.path.dirname(spelling) for spelling in spellings if os.path.basename(spelling).lower() in _LOG_DIRS
    )
    return spellings, outputs


@lru_cache(maxsize=65536)
def event_file_writer(name: str) -> tuple[float, str, int] | None:
    """(creation time, hostname, pid) an event file's name says (tensorboard's EventFileWriter
    naming); None for another writer's names (tensorboardX leaves out the pid)."""
    match = _EVENT_NAME.match(name)
    if match is None:
        return None
    return float(match.group("time")), match.group("host"), int(match.group("pid"))


def event_file_pids(event_files: Iterable[Path], hostname: str) -> set[int]:
    """The pids this host's event files name: ``ProcessScanner.scan``'s ``pids``."""
    return {found[2] for path in event_files if (found := event_file_writer(path.name)) and found[1] == hostname}


def _named_here(pid: int, created: float, table: ProcessTable) -> Process | None:
    """The process of this PID namespace the pid of a file created at ``created`` names, where it
    can have written it (module doc); None where the name says nothing about this namespace's pid."""
    process = table.processes.get(pid)
    if process is None or process.started > created + PID_REUSE_SLACK_SECS or process.inner_pid is not None:
        return None  # gone, the pid reused since, or itself in a container (it would name its inner pid)
    if pid == table.own_pid or pid in table.ancestors:
        return None  # init and this program's parents write no run
    return process


def _nested_may_have_named(pid: int, created: float, table: ProcessTable) -> bool:
    """A process of a nested PID namespace here has ``pid`` in its own and was running at ``created``."""
    return any(other.started <= created + PID_REUSE_SLACK_SECS for other in table.by_inner_pid.get(pid, ()))


def _event_file_writer(event_files: Sequence[Path], table: ProcessTable) -> tuple[Writer | None, bool, float | None]:
    """(the live writer named in an event file's name, whether any name says another host wrote it,
    when the newest file of this host naming its writer was created: None without one)."""
    elsewhere = False
    named_at: float | None = None
    for path in reversed(event_files):  # the newest file (natural order) first
        found = event_file_writer(path.name)
        if found is None:
            continue
        created, host, pid = found
        if host != table.hostname:
            elsewhere = True
            continue
        if _nested_may_have_named(pid, created, table):
            continue  # which namespace's pid the name is cannot be told: the weaker evidence decides
        named_at = created if named_at is None else named_at
        process = _named_here(pid, created, table)
        if process is None:
            continue
        detail = f"pid {process.pid} named in {path.name}"
        writer = Writer(process.pid, process.comm, "event file name", printable(detail), process.stopped)
        return replace(writer, interactive=process.interactive), elsewhere, named_at
    return None, elsewhere, named_at


def find_writer(run_dir: Path, table: ProcessTable, event_files: Sequence[Path] = ()) -> tuple[Writer | None, bool]:
    """The run's live writer on this node, by the strongest evidence (module doc); and whether an
    event file was written on another host."""
    writer, elsewhere, named_at = _event_file_writer(event_files, table)
    if writer is not None:
        return writer, elsewhere
    # /proc shows resolved paths (a cwd, an fd's target); a run watched through a symlink is matched
    # under both spellings.
    spellings, outputs = _spellings(run_dir)
    index = _index(table)
    found = next((index.held[d] for d in spellings if d in index.held), None)
    if found is not None:
        return _writer(found, "open file", f"holds {found.what} open for writing"), elsewhere

    def since_named(evidence: _Evidence | None) -> _Evidence | None:
        """The weaker evidence, unless the event files name another writer that this process was
        already running beside when the newest of them was created (module doc)."""
        if evidence is None or named_at is None or evidence.process.started > named_at + PID_REUSE_SLACK_SECS:
            return evidence
        return None

    found = since_named(
        next((index.named_within[d] for d in spellings if d in index.named_within), None)
        or next((index.named[d] for d in outputs if d in index.named), None)
    )
    if found is not None:
        return _writer(found, "command line", f"its command line names {found.what}"), elsewhere
    found = since_named(
        next((index.cwd_within[d] for d in spellings if d in index.cwd_within), None)
        or next((index.cwd[d] for d in outputs if d in index.cwd), None)
    )
    if found is not None:
        return _writer(found, "working directory", f"runs in {found.what}"), elsewhere
    return None, elsewhere


def _writer(evidence: _Evidence, kind: str, detail: str) -> Writer:
    process = evidence.process
    return Writer(process.pid, process.comm, kind, printable(detail), process.stopped, process.interactive)
