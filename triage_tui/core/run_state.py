"""Is a run's writer alive on this node? ``live``, ``stalled``, ``ended``, ``crashed`` or ``unknown``.

The files alone cannot tell a run that finished from one that hangs: both stop growing. The
processes can, where they run here. One scan of Linux ``/proc`` per poll (``ProcessScanner.scan``)
serves every run; ``run_state`` then decides each run from that table and what its files say.

Which process writes a run, strongest evidence first:

- **event file name**: tensorboard's ``EventFileWriter`` (torch's ``SummaryWriter``) names its file
  ``events.out.tfevents.<time>.<hostname>.<pid>.<n>`` (tensorboard 2.21.0,
  ``tensorboard/summary/writer/event_file_writer.py``). That pid alive here, started before the
  file was created, is the writer; another hostname means another node wrote it.
- **open file**: a process holding a file of the run open for writing (``/proc/PID/fd`` and the
  access mode in ``/proc/PID/fdinfo``): ``tee`` or a shell redirect writing the console log, W&B's
  ``wandb-core`` writing ``run-<id>.wandb``, tensorboardX (it keeps its event file open). An open
  event file alone is not enough: without TensorFlow, torch's writer goes through tensorboard's
  file stub, which opens and closes the file on every write (``GFile.write`` ->
  ``LocalFileSystem.append`` -> ``_write``: ``with io.open(filename, mode)``, tensorboard 2.21.0
  ``tensorboard/compat/tensorflow_stub/io/gfile.py``), so between writes nothing holds it.
- **command line**: an argument that names the run's directory, a path inside it, or the trainer's
  output directory above a ``runs/``/``logs/``/``tensorboard/``/``wandb/`` log directory
  (``--output-dir out`` for a run in ``out/runs``), resolved against the process's working directory.
- **working directory**: the process runs in the run's directory (or that output directory).

Viewers and this program are never writers (``tensorboard --logdir``, ``tail -f train.log``,
``triage out``, a Jupyter server), and a shell sitting in a directory is a person, not a trainer.

Where the event files name their writer, the name wins over the weaker evidence: a process that was
already running when the newest of them was created, and is not the pid it names, did not write it
(a notebook kernel or an editor's helper that sits in the project directory for days), so a
finished run whose writer is gone is ``ended`` whoever works beside it. A process started since
may be the run's trainer resuming, before its first event file, and still counts.

An interactive interpreter (a Jupyter kernel, IPython, ``python -i``) outlives what it ran: it is
never a writer by its working directory, and where it is the writer (its pid in the event file's
name: a notebook's SummaryWriter), silence is no sign of a hang, since a notebook's training cell
ends, or its writer closes, and the kernel lives on. Its run is ``unknown`` once silent, and the
silence rule decides, as for a writer that cannot be seen; stopped (SIGSTOP) it is still ``stalled``.

Only the user's own processes are looked at (root sees all). Where no writer can be seen and the
run's directory is on a network filesystem (``/proc/mounts``: NFS, Lustre, ...), or its event file
was written on another host, the writer may be alive elsewhere: the state is ``unknown`` and the
silence rule of core.signals.stall stays in force.

Size: the process table, the evidence a writer leaves and the decision are one rule set, read
together when a state is questioned; each rule cites where its fact comes from.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from stat import S_ISREG
from typing import Any

from triage_tui.core.console.lines import TRACEBACK, is_exception, is_fatal, plain, split_rank
from triage_tui.core.runs.names import LOG_DIR_NAMES, WANDB_DIR_NAME
from triage_tui.core.signals.flags import Flag, fmt_duration
from triage_tui.core.signals.kinds import FlagKind, Severity, WriterState
from triage_tui.core.signals.stall import Activity
from triage_tui.core.text import printable

STATES = tuple(WriterState)

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

# Never writers by their command line or working directory: viewers and copiers of a run's files.
_READER_NAMES = (
    "triage tensorboard tail less more cat head watch grep rg find ls du rsync scp cp tar vi vim nvim emacs nano"
)
READERS = frozenset(_READER_NAMES.split())
# Jupyter's servers (``comm``: the script's name, cut at 15 characters) host kernels and write no run.
_SERVERS = frozenset({"jupyter", "jupyter-lab", "jupyter-noteboo", "jupyter-server", "jupyterhub-sing"})
# The modules a Jupyter kernel is started as: ipykernel's kernel spec runs ``python -m
# ipykernel_launcher -f {connection_file}`` (ipykernel 6, ipykernel/kernelspec.py
# ``make_ipkernel_cmd``), which VS Code's and JupyterLab's kernels use too; Colab's is its own.
_KERNEL_MODULES = frozenset({"ipykernel_launcher", "ipykernel", "colab_kernel_launcher"})
# A shell's working directory is where a person stands; its command line (`bash train.sh out/run`) still counts.
SHELLS = frozenset({"bash", "sh", "zsh", "fish", "dash", "ksh", "tcsh", "csh", "tmux", "screen"})

# Filesystems another machine may write to: a writer of a run there may run on another node,
# out of this node's /proc. FUSE mounts are listed by subtype ("fuse.sshfs").
_NETWORK_NAMES = (
    "nfs nfs4 cifs smb3 smbfs lustre gpfs beegfs ceph glusterfs afs 9p virtiofs wekafs orangefs pvfs2 "
    "panfs gfs2 ocfs2 fuse.sshfs fuse.glusterfs fuse.ceph-fuse fuse.s3fs fuse.gcsfuse fuse.juicefs "
    "fuse.rclone fuse.goofys fuse.mountpoint-s3 fuse.blobfuse fuse.blobfuse2 fuse.alluxio-fuse"
)
NETWORK_FILESYSTEMS = frozenset(_NETWORK_NAMES.split())


# --------------------------------------------------------------------------- the process table


@dataclass(frozen=True)
class Process:
    """One of the user's processes, as /proc shows it at one scan."""

    pid: int
    comm: str  # the executable's name (/proc/PID/stat), at most 15 characters
    state: str  # R running, S sleeping, D disk wait, T stopped (SIGSTOP, ctrl-Z), t traced
    started: float  # unix time
    argv: tuple[str, ...]
    cwd: str | None
    writing: tuple[str, ...]  # files under the watched roots it holds open for writing (resolved paths)
    # Its arguments (or ``--flag=value`` values) as paths resolved against its cwd, where they lie
    # under, or above, a watched root: (path, the argument as written).
    paths: tuple[tuple[str, str], ...] = ()

    @property
    def stopped(self) -> bool:
        return self.state in ("T", "t")

    @cached_property
    def interactive(self) -> str | None:
        """What interactive interpreter this is ("a Jupyter kernel", "IPython", "an interactive
        Python"), None for a program that ends when its work does."""
        return interactive_interpreter(self.argv)


def interactive_interpreter(argv: Sequence[str]) -> str | None:
    """ "a Jupyter kernel" for ``python -m ipykernel_launcher -f …`` (or its script's path), "IPython"
    for ``ipython``, "an interactive Python" for a bare ``python`` or ``python -i``; else None."""
    if not argv:
        return None
    names = [os.path.basename(arg) for arg in argv[:3]]
    for i, name in enumerate(names):
        module = argv[i + 1] if name == "-m" and i + 1 < len(argv) else name.removesuffix(".py")
        if module in _KERNEL_MODULES or module.startswith("ipykernel."):
            return "a Jupyter kernel"
    if any(name.startswith("ipython") for name in names[:2]):
        return "IPython"
    if names[0].startswith("python") and (len(argv) == 1 or argv[1] == "-i"):
        return "an interactive Python"
    return None


@dataclass(frozen=True)
class _Evidence:
    process: Process
    what: str  # the held file, the argument, or the working directory


def _ancestors(path: str) -> Iterator[str]:
    """``path`` and every directory above it, up to the root."""
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


@dataclass(frozen=True)
class ProcessTable:
    """Every process of the user's that /proc let us read at one scan, by pid."""

    processes: Mapping[int, Process]
    hostname: str
    readable: bool  # /proc exists and was listed (Linux); False: no writer can be seen at all
    mounts: tuple[tuple[str, str], ...] = ()  # (mount point, filesystem type), longest mount point first
    own_pid: int = field(default_factory=os.getpid)

    def filesystem(self, path: Path | str) -> str | None:
        """The type of the filesystem ``path`` lies on (the longest mount point above it)."""
        return _filesystem(_spellings(path)[0][0], self.mounts)

    @cached_property
    def _index(self) -> tuple[dict[str, _Evidence], ...]:
        """Every directory a process's evidence lies in or names, built once per table: each run's
        question is then a few dictionary lookups, not a pass over every process (200 runs x the
        node's processes would cost more than the scan). The lowest pid wins a directory."""
        held: dict[str, _Evidence] = {}  # dir -> a process writing a file at or below it
        named_within: dict[str, _Evidence] = {}  # dir -> an argument naming it or a path below it
        named: dict[str, _Evidence] = {}  # path -> an argument naming exactly it
        cwd_within: dict[str, _Evidence] = {}  # dir -> a process working in it or below it
        cwd: dict[str, _Evidence] = {}  # dir -> a process working in exactly it
        for pid in sorted(self.processes):
            process = self.processes[pid]
            if pid == self.own_pid or process.comm in READERS or process.comm in _SERVERS:
                continue
            for path in process.writing:
                for directory in _ancestors(os.path.dirname(path)):
                    held.setdefault(directory, _Evidence(process, os.path.basename(path)))
            for path, arg in process.paths:
                named.setdefault(path, _Evidence(process, arg))
                for directory in _ancestors(path):
                    named_within.setdefault(directory, _Evidence(process, arg))
            if process.cwd is not None and process.comm not in SHELLS and process.interactive is None:
                cwd.setdefault(process.cwd, _Evidence(process, process.cwd))
                for directory in _ancestors(process.cwd):
                    cwd_within.setdefault(directory, _Evidence(process, process.cwd))
        return held, named_within, named, cwd_within, cwd


@lru_cache(maxsize=4096)
def _filesystem(path: str, mounts: tuple[tuple[str, str], ...]) -> str | None:
    for point, kind in mounts:
        if path == point or path.startswith(point.rstrip("/") + "/"):
            return kind
    return None


def _boot_time(proc: Path) -> float:
    try:
        for line in (proc / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0.0


def _parse_mounts(text: str) -> tuple[tuple[str, str], ...]:
    """/proc/self/mounts as (mount point, type), longest point first. Spaces and the like are octal
    escapes there (``\\040``), as in fstab."""
    found = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[1])
            found.append((point, parts[2]))
    # The last mount of a point hides the earlier ones: keep the last, then longest first.
    latest = dict(found)
    return tuple(sorted(latest.items(), key=lambda item: -len(item[0])))


# What a process holds open and its working directory are read again at most this often, and at
# once for a process not seen before: each open file is a readlink and a fdinfo read, and a node
# runs hundreds of processes (measured: benchmarks/run_state_cost.py). Whether it is alive is read
# every scan (the listing of /proc); whether it is stopped, every scan for a process named in an
# event file or with evidence under a watched root (one read of its stat). A pid reused within
# this interval would be missed for as long:
# Linux hands out pids in order up to pid_max (4 194 304 on 64-bit kernels since systemd 243).
REFRESH_SECS = 10.0


@dataclass
class _Known:
    """What a scan keeps of a process for the next, by pid."""

    process: Process | None  # None: not the user's, a kernel thread, or a zombie
    start_ticks: int
    read_at: float
    prefixes: tuple[str, ...]

    @property
    def relevant(self) -> bool:
        """Its evidence lies under a watched root: read afresh every scan."""
        process = self.process
        return process is not None and bool(
            process.writing or process.paths or (process.cwd and (process.cwd + "/").startswith(self.prefixes))
        )


class ProcessScanner:
    """One /proc scan per poll for all runs (``scan``), keeping what it read of each process for the
    next (``REFRESH_SECS``; ``clock``: monotonic seconds, the tests' to set)."""

    def __init__(self, proc: Path | str = "/proc", *, clock: Callable[[], float] = time.monotonic) -> None:
        self.proc = Path(proc)
        self.clock = clock
        self.uid = os.getuid() if hasattr(os, "getuid") else -1  # no /proc where there is no getuid
        self.hostname = socket.gethostname()
        self._ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._boot = _boot_time(self.proc)
        self._known: dict[int, _Known] = {}
        self._mounts_text = ""
        self._mounts: tuple[tuple[str, str], ...] = ()

    def scan(self, roots: Iterable[Path | str], pids: Iterable[int] = ()) -> ProcessTable:
        """The user's processes, and the files under ``roots`` (the watched paths) each holds open
        for writing. ``pids``: processes to read afresh (those named in the runs' event files,
        ``event_file_pids``). A process that ends during the scan is left out."""
        prefixes = tuple(sorted({os.path.realpath(r).rstrip("/") + "/" for r in roots}))
        own = os.getpid()
        try:
            names = os.listdir(self.proc)
        except OSError:
            return ProcessTable({}, self.hostname, False, own_pid=own)
        now = self.clock()
        watched = set(pids)
        known: dict[int, _Known] = {}
        for name in names:
            if not name.isdigit() or int(name) == own:
                continue
            pid = int(name)
            entry = self._known.get(pid)
            if entry is None or now - entry.read_at >= REFRESH_SECS or entry.prefixes != prefixes:
                entry = self._read(pid, prefixes, now, entry)
            elif pid in watched or entry.relevant:
                entry = self._read_state(pid, entry)
            if entry is not None:
                known[pid] = entry
        self._known = known
        processes = {pid: entry.process for pid, entry in known.items() if entry.process is not None}
        return ProcessTable(processes, self.hostname, True, self._read_mounts(), own_pid=own)

    def _read_mounts(self) -> tuple[tuple[str, str], ...]:
        try:
            text = (self.proc / "self" / "mounts").read_text()
        except OSError:
            return ()
        if text != self._mounts_text:
            self._mounts_text, self._mounts = text, _parse_mounts(text)
        return self._mounts

    def _read_state(self, pid: int, entry: _Known) -> _Known | None:
        """Only whether the process is stopped (its open files kept): one read."""
        try:
            with open(f"{self.proc}/{pid}/stat", "rb") as handle:
                stat = handle.read().decode("utf-8", "replace")
        except OSError:
            return None
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 20 or int(fields[19]) != entry.start_ticks or entry.process is None:
            return self._read(pid, entry.prefixes, self.clock(), None)  # another process under a reused pid
        if fields[0] in ("Z", "X"):
            return _Known(None, entry.start_ticks, entry.read_at, entry.prefixes)
        if fields[0] != entry.process.state:
            entry = replace(entry, process=replace(entry.process, state=fields[0]))
        return entry

    def _read(self, pid: int, prefixes: tuple[str, ...], now: float, entry: _Known | None) -> _Known | None:
        """The process read from /proc (None once it is gone); its command line kept from ``entry``."""
        base = f"{self.proc}/{pid}"
        try:
            mine = self.uid == 0 or os.stat(base).st_uid == self.uid
            with open(f"{base}/stat", "rb") as handle:
                stat = handle.read().decode("utf-8", "replace")
        except OSError:
            return None
        # "pid (comm) state ppid ... starttime(22nd) ...": comm may hold spaces and parentheses.
        close = stat.rfind(")")
        fields = stat[close + 2 :].split()
        if close < 0 or len(fields) < 20:
            return None
        comm, state, start_ticks = stat[stat.find("(") + 1 : close], fields[0], int(fields[19])
        if not mine or state in ("Z", "X"):  # a zombie holds nothing and writes nothing: it is dead
            return _Known(None, start_ticks, now, prefixes)
        same = entry is not None and entry.start_ticks == start_ticks and entry.process is not None
        argv = entry.process.argv if same and entry is not None and entry.process is not None else _argv(base)
        if not argv:
            return _Known(None, start_ticks, now, prefixes)  # a kernel thread
        try:
            cwd: str | None = os.readlink(f"{base}/cwd")
        except OSError:
            cwd = None
        writing = _writing(base, prefixes) if prefixes else ()
        started = self._boot + start_ticks / self._ticks
        process = Process(pid, comm, state, started, argv, cwd, writing, _argument_paths(argv, cwd, prefixes))
        return _Known(process, start_ticks, now, prefixes)


def _argv(base: str) -> tuple[str, ...]:
    try:
        with open(f"{base}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return ()
    return tuple(part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0") if part)


def _writing(base: str, prefixes: tuple[str, ...]) -> tuple[str, ...]:
    """The files under ``prefixes`` the process holds open for writing: an fd's target, and the
    access mode in its fdinfo ``flags`` (octal open(2) flags)."""
    try:
        fds = os.listdir(f"{base}/fd")
    except OSError:
        return ()
    found = []
    for fd in fds:
        try:
            target = os.readlink(f"{base}/fd/{fd}")
        except OSError:
            continue
        if not target.startswith(prefixes):
            continue
        try:
            with open(f"{base}/fdinfo/{fd}", "rb") as handle:
                info = handle.read()
        except OSError:
            continue
        match = re.search(rb"^flags:\s*([0-7]+)", info, re.MULTILINE)
        if match is not None and int(match.group(1), 8) & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
            found.append(target)
    return tuple(found)


def _argument_paths(argv: tuple[str, ...], cwd: str | None, prefixes: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The arguments that, as paths resolved against ``cwd``, lie under a watched root or above one."""
    if cwd is None:
        return ()
    found = []
    for arg in argv[1:]:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if not value or value.startswith("-") or "\n" in value:
            continue
        path = os.path.normpath(os.path.join(cwd, value))
        slashed = path.rstrip("/") + "/"
        if slashed.startswith(prefixes) or any(prefix.startswith(slashed) for prefix in prefixes):
            found.append((path, value))
    return tuple(found)


# --------------------------------------------------------------------------- the console log


# Wrappers that repeat a failure told above them (torchrun's summary of a failed child).
_WRAPPERS = ("ChildFailedError",)
# "Ends in": the error is among the log's last lines (torchrun's failure summary after a child's
# traceback is about 15 lines; a handful more for other ranks' echoes).
CONSOLE_TAIL_LINES = 40
CONSOLE_TAIL_BYTES = 64 << 10


def console_error(text: str) -> str | None:
    """The line a console log ends in when it ends in a crash: a Python traceback's exception line,
    or an out-of-memory or NCCL error line, among its last ``CONSOLE_TAIL_LINES`` lines; None when
    it does not. An out-of-memory or NCCL line wins (the cause; the tracebacks after it are its
    echoes), then the last exception line that is not a wrapper of an earlier one."""
    lines = [split_rank(plain(line))[1].rstrip() for line in re.split(r"[\r\n]+", text)]
    lines = [line for line in lines if line.strip()][-CONSOLE_TAIL_LINES:]
    fatal = next((line for line in lines if is_fatal(line)), None)
    if fatal is not None:
        return printable(fatal.strip())
    if not any(line.strip() == TRACEBACK for line in lines):
        return None
    after = lines[[line.strip() for line in lines].index(TRACEBACK) :]
    exceptions = [line for line in after if is_exception(line)]
    if not exceptions:
        return None
    own = [line for line in exceptions if not line.split(":", 1)[0].endswith(_WRAPPERS)]
    return printable((own or exceptions)[-1].strip())


def read_console_tail(path: Path, limit: int = CONSOLE_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of a console log, as text (undecodable bytes replaced); nothing of a
    path that is not a regular file (a FIFO named like a log must not hang the poll)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not S_ISREG(st.st_mode):
            return ""
        return os.pread(fd, limit, max(0, st.st_size - limit)).decode("utf-8", "replace")
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- the writer


@dataclass(frozen=True)
class Writer:
    """A live process that writes the run, and the evidence it was found by."""

    pid: int
    comm: str
    evidence: str  # "event file name" | "open file" | "command line" | "working directory"
    detail: str  # what the evidence was, in words
    stopped: bool  # SIGSTOP or ctrl-Z: alive but cannot write
    interactive: str | None = None  # Process.interactive: it outlives its writing (module doc)

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.comm, "evidence": self.evidence, "detail": self.detail}


_LOG_DIRS = LOG_DIR_NAMES | {WANDB_DIR_NAME}


@lru_cache(maxsize=4096)
def _named_dirs(run_dir: str) -> tuple[str, ...]:
    """The run's directory and the trainer's output directory above its log directory: ``out`` for
    ``out/runs`` (SpecForge), ``out`` for ``out/runs/<date_host>`` (HF Trainer), ``exp`` for
    ``exp/wandb/run-<id>`` (W&B's ``dir``)."""
    found = [run_dir]
    here = run_dir
    while True:
        parent = os.path.dirname(here)
        if parent == here:
            break
        name, parent_name = os.path.basename(here), os.path.basename(parent)
        if name.lower() not in _LOG_DIRS and parent_name.lower() not in _LOG_DIRS:
            break
        found.append(parent)
        here = parent
    return tuple(found)


@lru_cache(maxsize=4096)
def _spellings(run_dir: Path | str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the run's directory as given and resolved, the output directories above it): once per run
    directory, which seldom moves under a symlink."""
    spellings = tuple(dict.fromkeys((os.path.abspath(run_dir), os.path.realpath(run_dir))))
    return spellings, tuple(name for spelling in spellings for name in _named_dirs(spelling)[1:])


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


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
        named_at = created if named_at is None else named_at
        process = table.processes.get(pid)
        if process is None or process.started > created + PID_REUSE_SLACK_SECS:
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
    spellings, above = _spellings(run_dir)
    held, named_within, named, cwd_within, cwd = table._index
    found = next((held[d] for d in spellings if d in held), None)
    if found is not None:
        return _writer(found, "open file", f"holds {found.what} open for writing"), elsewhere

    def since_named(evidence: _Evidence | None) -> _Evidence | None:
        """The weaker evidence, unless the event files name another writer that this process was
        already running beside when the newest of them was created (module doc)."""
        if evidence is None or named_at is None or evidence.process.started > named_at + PID_REUSE_SLACK_SECS:
            return evidence
        return None

    found = since_named(
        next((named_within[d] for d in spellings if d in named_within), None)
        or next((named[d] for d in above if d in named), None)
    )
    if found is not None:
        return _writer(found, "command line", f"its command line names {found.what}"), elsewhere
    found = since_named(
        next((cwd_within[d] for d in spellings if d in cwd_within), None)
        or next((cwd[d] for d in above if d in cwd), None)
    )
    if found is not None:
        return _writer(found, "working directory", f"runs in {found.what}"), elsewhere
    return None, elsewhere


def _writer(evidence: _Evidence, kind: str, detail: str) -> Writer:
    process = evidence.process
    return Writer(process.pid, process.comm, kind, printable(detail), process.stopped, process.interactive)


# --------------------------------------------------------------------------- the state


@dataclass(frozen=True)
class RunState:
    """Whether the run's writer is alive here, and why the state was chosen."""

    state: WriterState
    reason: str  # one line: the evidence
    writer: Writer | None = None
    last_update: float | None = None  # unix time of the run's newest point ("ended 3 h ago")
    # Seconds since then, at the moment judged. Not compared: two polls that judge a run alike are
    # the same state (the watcher then hands on the same report, and the TUI redraws nothing).
    silence: float | None = field(default=None, compare=False)
    line: str | None = None  # crashed: the console's error line or the W&B exit code

    def label(self, now: float) -> str:
        """A few words at ``now``: "live", "stalled 12 min", "ended 3.0 h ago", "crashed" (the TUI's runs
        table writes the state and the age in its own short form: "ended 3h")."""
        if self.state == WriterState.ENDED and self.last_update is not None:
            return f"ended {fmt_duration(now - self.last_update)} ago"
        if self.state == WriterState.STALLED and self.last_update is not None:
            return f"stalled {fmt_duration(now - self.last_update)}"
        return self.state

    def flag(self, step: int | None = None) -> Flag | None:
        """A critical flag for a stalled or crashed run (both ring the bell) at ``step``, the run's
        last; none otherwise: an ended run is no warning, and an unknown one keeps
        core.signals.stall's rule. No value: the silence grows every poll, and the reason says it."""
        if self.state in (WriterState.STALLED, WriterState.CRASHED):
            return Flag(FlagKind(self.state), Severity.CRITICAL, None, step, None, self.reason)
        return None

    def to_json(self) -> dict[str, Any]:
        """The keys a run's ``scan --json`` object gains: ``state``, why, the writer (null when none is
        seen here) and, for a crash, the line it ended in."""
        return {
            "state": self.state,
            "state_reason": self.reason,
            "writer": self.writer.to_json() if self.writer is not None else None,
            "crash_line": self.line if self.state == WriterState.CRASHED else None,
        }


def run_state(
    run_dir: Path,
    *,
    processes: ProcessTable,
    activity: Activity,
    now: float,
    event_files: Sequence[Path] = (),
    wandb_exit_code: int | None = None,
    console_error_line: str | None = None,
    console_error_of: Callable[[], str | None] | None = None,
    final_save: bool = False,
    recorded_end: tuple[str, str] | None = None,
    flush_secs: float = 120.0,
) -> RunState:
    """The run's state at ``now`` (the caller's clock).

    ``wandb_exit_code``: the code of the W&B ``exit`` record (core.wandb.history), None without one.
    ``console_error_line``: ``console_error`` of the tail of the run's console log, None when it
    does not end in a crash; or, without it, ``console_error_of``: a function that reads it, called
    at most once and only where the line can matter (no live writer here, a stalled one, a W&B exit
    code), so a live run's console is never read for it. ``final_save``: the trainer saved its last
    checkpoint (its own marker). ``recorded_end``: what a tracker's store recorded of the run's end,
    as (state, reason) (MLflow's FINISHED an end, FAILED or KILLED a crash: core/trackers/stores.py),
    taken where no writer is visible.
    ``activity``: the run's points' rhythm (core.signals.stall); a live writer silent past
    ``activity.stall_after(flush_secs)`` (the flush interval, 3 median gaps, 1.5 x the longest gap) is stalled.
    """
    last = activity.last_wall_time
    silence = now - last if last is not None else None

    def console() -> str | None:
        nonlocal console_error_line, console_error_of
        if console_error_line is None and console_error_of is not None:
            console_error_line, console_error_of = console_error_of(), None
        return console_error_line

    if wandb_exit_code is not None and wandb_exit_code != 0:
        line = f"W&B recorded exit code {wandb_exit_code}"
        error = console()
        reason = line + (f"; the console ends in: {error}" if error else "")
        return RunState(WriterState.CRASHED, reason, None, last, silence, error or line)
    writer, elsewhere = find_writer(run_dir, processes, event_files)
    finished = wandb_exit_code == 0 or final_save
    how_finished = "W&B recorded exit code 0" if wandb_exit_code == 0 else "the trainer saved its final checkpoint"
    if writer is not None:
        if finished:
            return RunState(
                WriterState.ENDED, f"{how_finished} (pid {writer.pid} still exiting)", writer, last, silence
            )
        limit = activity.stall_after(flush_secs)
        if silence is not None and silence > limit and writer.interactive is not None and not writer.stopped:
            reason = (
                f"writer pid {writer.pid} ({printable(writer.comm)}) is {writer.interactive}, alive, and nothing was "
                f"written for {fmt_duration(silence)}: an interpreter outlives the cell that trained, so the "
                "silence alone decides"
            )
            return RunState(WriterState.UNKNOWN, reason, writer, last, silence)
        if silence is not None and silence > limit:
            stopped = " and is stopped (SIGSTOP or ctrl-Z)" if writer.stopped else ""
            error = console()
            cause = f"; the console ends in: {error}" if error else ""
            reason = (
                f"writer pid {writer.pid} ({printable(writer.comm)}) is alive{stopped} but nothing was written for "
                f"{fmt_duration(silence)} (expected within {fmt_duration(limit)}: writers flush every "
                f"{flush_secs:.0f} s, longest gap so far {fmt_duration(activity.longest_gap)}){cause}"
            )
            return RunState(WriterState.STALLED, reason, writer, last, silence, error)
        return RunState(
            WriterState.LIVE,
            f"writer pid {writer.pid} ({printable(writer.comm)}): {writer.detail}",
            writer,
            last,
            silence,
        )
    if finished:  # the trainer's own word beats reading its console
        return RunState(WriterState.ENDED, how_finished, None, last, silence)
    if recorded_end is not None:
        state = WriterState(recorded_end[0])
        return RunState(state, recorded_end[1], None, last, silence, recorded_end[1] if state == "crashed" else None)
    error = console()
    if error is not None:
        reason = f"no writer alive; the console ends in: {error}"
        return RunState(WriterState.CRASHED, reason, None, last, silence, error)
    if elsewhere:
        return RunState(WriterState.UNKNOWN, "its event file was written on another host", None, last, silence)
    if not processes.readable:
        return RunState(WriterState.UNKNOWN, "no /proc to see processes in", None, last, silence)
    kind = processes.filesystem(run_dir)
    if kind in NETWORK_FILESYSTEMS:
        return RunState(
            WriterState.UNKNOWN, f"on a {kind} filesystem: its writer may run on another node", None, last, silence
        )
    return RunState(WriterState.ENDED, "no process of this node writes it", None, last, silence)


def hf_final_save(checkpoints: Sequence[Path]) -> bool:
    """HF Trainer (and ModelOpt on it): the last checkpoint's ``trainer_state.json`` has
    ``global_step`` at ``max_steps`` (transformers ``TrainerState``, trainer_callback.py)."""
    for checkpoint in reversed(checkpoints):
        try:
            state = json.loads((checkpoint / "trainer_state.json").read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(state, dict):
            return False
        return final_step(state.get("global_step"), state.get("max_steps"))
    return False


def final_step(global_step: object, max_steps: object) -> bool:
    """A trainer state at its last step: ``global_step`` at ``max_steps`` (both integers, a positive
    total). The watcher asks it of the newest ``trainer_state.json`` it already read (core.sources)."""
    return (
        isinstance(global_step, int)
        and isinstance(max_steps, int)
        and not isinstance(global_step, bool)
        and not isinstance(max_steps, bool)
        and max_steps > 0
        and global_step >= max_steps
    )
