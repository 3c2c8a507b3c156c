"""The user's processes on this node, as Linux ``/proc`` shows them at one scan: who each is, what it
runs in, which of the watched files it holds open for writing, which paths its arguments name, and
which of them are this program's own ancestors. One scan per poll (``ProcessScanner.scan``) serves
every run; core.watch.writers reads the writer of a run out of the table.

Only the user's own processes are looked at (root sees all). A process in a nested PID namespace (a
container on this node) is seen under this namespace's pid; the pid it has in its own namespace
(``/proc/PID/status`` ``NSpid``, the innermost last: proc(5)) is kept too, as that is the pid it
writes into the names of its files.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

# Filesystems another machine may write to: a writer of a run there may run on another node,
# out of this node's /proc. FUSE mounts are listed by subtype ("fuse.sshfs").
_NETWORK_NAMES = (
    "nfs nfs4 cifs smb3 smbfs lustre gpfs beegfs ceph glusterfs afs 9p virtiofs wekafs orangefs pvfs2 "
    "panfs gfs2 ocfs2 fuse.sshfs fuse.glusterfs fuse.ceph-fuse fuse.s3fs fuse.gcsfuse fuse.juicefs "
    "fuse.rclone fuse.goofys fuse.mountpoint-s3 fuse.blobfuse fuse.blobfuse2 fuse.alluxio-fuse"
)
NETWORK_FILESYSTEMS = frozenset(_NETWORK_NAMES.split())

# The modules a Jupyter kernel is started as: ipykernel's kernel spec runs ``python -m
# ipykernel_launcher -f {connection_file}`` (ipykernel 6, ipykernel/kernelspec.py
# ``make_ipkernel_cmd``), which VS Code's and JupyterLab's kernels use too; Colab's is its own.
_KERNEL_MODULES = frozenset({"ipykernel_launcher", "ipykernel", "colab_kernel_launcher"})


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
    ppid: int = 0
    # Its pid in its own PID namespace where that is not this program's (a container's process):
    # NSpid's last field. None in this namespace.
    inner_pid: int | None = None

    @property
    def stopped(self) -> bool:
        return self.state in ("T", "t")

    @cached_property
    def interactive(self) -> str | None:
        """What interactive interpreter this is ("a Jupyter kernel", "IPython", "an interactive
        Python"), None for a program that ends when its work does."""
        return interactive_interpreter(self.argv)

    @cached_property
    def names(self) -> frozenset[str]:
        """What it is called: its ``comm`` and the name it was started by (``argv[0]``; a script run
        by its shebang is ``comm`` "train.sh" and ``argv[0]`` "/bin/bash")."""
        return frozenset({self.comm, os.path.basename(self.argv[0])} if self.argv else {self.comm})


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
class ProcessTable:
    """Every process of the user's that /proc let us read at one scan, by pid."""

    processes: Mapping[int, Process]
    hostname: str
    readable: bool  # /proc exists and was listed (Linux); False: no writer can be seen at all
    mounts: tuple[tuple[str, str], ...] = ()  # (mount point, filesystem type), longest mount point first
    own_pid: int = field(default_factory=os.getpid)
    # This program's parent, its parent's parent, ... up to init: the processes that started it
    # (a shell, ``timeout``, a CI harness, a notebook), whoever owns them.
    ancestors: frozenset[int] = frozenset()
    # What readers of the table build from it once (core.watch.writers' index): the table is read-only.
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def filesystem(self, path: Path | str) -> str | None:
        """The type of the filesystem ``path`` lies on (the longest mount point above it)."""
        return _filesystem(os.path.abspath(path), self.mounts)

    @cached_property
    def by_inner_pid(self) -> Mapping[int, tuple[Process, ...]]:
        """The processes of nested PID namespaces, by the pid each has in its own namespace."""
        found: dict[int, list[Process]] = {}
        for process in self.processes.values():
            if process.inner_pid is not None:
                found.setdefault(process.inner_pid, []).append(process)
        return {pid: tuple(processes) for pid, processes in found.items()}


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
        # This program's ancestors, read again as often as a process's open files (a parent that
        # exits has its child adopted): (when read, the pids).
        self._ancestors_of: tuple[float, frozenset[int]] | None = None
        self._namespace = _readlink(f"{self.proc}/self/ns/pid")  # "pid:[4026531836]"; None: not to be seen

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
        if self._ancestors_of is None or now - self._ancestors_of[0] >= REFRESH_SECS:
            self._ancestors_of = (now, self._ancestors(own))
        ancestors = self._ancestors_of[1]
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
        return ProcessTable(processes, self.hostname, True, self._read_mounts(), own_pid=own, ancestors=ancestors)

    def _ancestors(self, pid: int) -> frozenset[int]:
        """The parent of ``pid``, its parent, ... (``ppid`` in /proc/PID/stat, readable whoever owns
        the process): a few reads a scan, as a parent may exit and its child be adopted."""
        found: list[int] = []
        while pid > 0 and len(found) < 4096:
            fields = _stat_fields(f"{self.proc}/{pid}")
            if fields is None:
                break
            pid = int(fields[1][1])
            if pid in found:
                break
            found.append(pid)
        return frozenset(found[:-1] if found and found[-1] == 0 else found)

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
        read = _stat_fields(f"{self.proc}/{pid}")
        if read is None:
            return None
        fields = read[1]
        if int(fields[19]) != entry.start_ticks or entry.process is None:
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
        except OSError:
            return None
        read = _stat_fields(base)
        if read is None:
            return None
        comm, fields = read
        state, start_ticks = fields[0], int(fields[19])
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
        paths = _argument_paths(argv, cwd, prefixes)
        process = Process(pid, comm, state, started, argv, cwd, writing, paths, int(fields[1]), self._inner_pid(base))
        return _Known(process, start_ticks, now, prefixes)

    def _inner_pid(self, base: str) -> int | None:
        """The pid the process has in its own PID namespace, where that namespace is not ours: the
        last of ``NSpid`` in /proc/PID/status (proc(5), Linux 4.1). One readlink for every process."""
        namespace = _readlink(f"{base}/ns/pid")
        if namespace is None or self._namespace is None or namespace == self._namespace:
            return None
        try:
            with open(f"{base}/status", "rb") as handle:
                status = handle.read()
        except OSError:
            return None
        match = re.search(rb"^NSpid:\s*([\d\s]+)$", status, re.MULTILINE)
        return int(match.group(1).split()[-1]) if match is not None and match.group(1).split() else None


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _stat_fields(base: str) -> tuple[str, list[str]] | None:
    """(comm, the fields after it) of /proc/PID/stat, None once the process is gone: "pid (comm)
    state ppid ... starttime(22nd) ...", where comm may hold spaces and parentheses."""
    try:
        with open(f"{base}/stat", "rb") as handle:
            stat = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    close = stat.rfind(")")
    fields = stat[close + 2 :].split()
    if close < 0 or len(fields) < 20:
        return None
    return stat[stat.find("(") + 1 : close], fields


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
    """The arguments that, as paths resolved against ``cwd``, lie under a watched root or above one and
    exist (``sleep 600`` in a run's directory names no file "600" there; a path a trainer has not yet
    made is met again at the next read)."""
    if cwd is None:
        return ()
    found = []
    for arg in argv[1:]:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if not value or value.startswith("-") or "\n" in value:
            continue
        path = os.path.normpath(os.path.join(cwd, value))
        slashed = path.rstrip("/") + "/"
        near = slashed.startswith(prefixes) or any(prefix.startswith(slashed) for prefix in prefixes)
        if near and os.path.lexists(path):
            found.append((path, value))
    return tuple(found)
