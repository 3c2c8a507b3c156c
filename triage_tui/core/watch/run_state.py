"""Is a run's writer alive on this node? ``live``, ``stalled``, ``ended``, ``crashed`` or ``unknown``.

The files alone cannot tell a run that finished from one that hangs: both stop growing. The
processes can, where they run here: one scan of Linux ``/proc`` per poll (core.watch.process_table) serves
every run, core.watch.writers finds each run's writer in it, and ``run_state`` decides the run from that
writer and what its files say.

A writer seen only by its command line or working directory (``Writer.weak``) may be the trainer or
only something started beside the run: it makes a run ``live`` while points arrive, and once the run
is silent past its limit the state is ``unknown`` (the silence rule of core.watch.signals.stall), never
``stalled``. Only a writer the run's files name, or one holding them open, can stall a run.

An interactive interpreter (a Jupyter kernel, IPython, ``python -i``) outlives what it ran: where it
is the writer (its pid in the event file's name: a notebook's SummaryWriter), silence is no sign of a
hang, since a notebook's training cell ends, or its writer closes, and the kernel lives on. Its run is
``unknown`` once silent, and the silence rule decides, as for a writer that cannot be seen; stopped
(SIGSTOP) it is still ``stalled``.

Where no writer can be seen and the run's directory is on a network filesystem (``/proc/mounts``:
NFS, Lustre, ...), or its event file was written on another host, the writer may be alive elsewhere:
the state is ``unknown`` and the silence rule of core.watch.signals.stall stays in force.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import Any

from triage_tui.core.read.console.lines import (
    ERROR_KIND,
    TRACEBACK,
    CrashMarks,
    is_exception,
    is_fatal,
    plain,
    split_rank,
)
from triage_tui.core.text import printable
from triage_tui.core.watch.process_table import NETWORK_FILESYSTEMS, ProcessTable
from triage_tui.core.watch.signals.flags import Flag, fmt_duration
from triage_tui.core.watch.signals.kinds import FlagKind, Severity, WriterState
from triage_tui.core.watch.signals.stall import Activity
from triage_tui.core.watch.writers import Writer, find_writer

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
    echoes), then the last exception line that is not a wrapper of an earlier one. A traceback's
    frames are no crash line of their own, even one quoting the error it raises."""
    lines = [split_rank(plain(line))[1].rstrip() for line in re.split(r"[\r\n]+", text)]
    lines = [line for line in lines if line.strip()][-CONSOLE_TAIL_LINES:]
    marks = CrashMarks()
    errors = [line for line in lines if marks.mark(line) == ERROR_KIND]  # never a frame's source line
    fatal = next((line for line in errors if is_fatal(line)), None)
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
        core.watch.signals.stall's rule. No value: the silence grows every poll, and the reason says it."""
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
    recorded_end_first: bool = False,
    recorded_running: tuple[str, str] | None = None,
    flush_secs: float = 120.0,
) -> RunState:
    """The run's state at ``now`` (the caller's clock).

    ``wandb_exit_code``: the code of the W&B ``exit`` record (core.read.wandb.history), None without one.
    ``console_error_line``: ``console_error`` of the tail of the run's console log, None when it
    does not end in a crash; or, without it, ``console_error_of``: a function that reads it, called
    at most once and only where the line can matter (no live writer here, a stalled one, a W&B exit
    code), so a live run's console is never read for it. ``final_save``: the trainer saved its last
    checkpoint (its own marker). ``recorded_end``: what a tracker's store recorded of the run's end,
    as (state, reason) (MLflow's FINISHED or KILLED an end, FAILED a crash: core/read/trackers/stores.py),
    taken where no writer is visible, or before the writer with ``recorded_end_first`` (one of a store's
    several runs: the process holding the store open may be writing another of them).
    ``recorded_running``: a tracker's store records the run RUNNING, no end, as (state, reason), taken
    where no process of this node writes it on a local filesystem (core/read/trackers/stores.py: a
    database its writer holds open says crashed, MLflow's file store unknown).
    ``activity``: the run's points' rhythm (core.watch.signals.stall); a live writer silent past
    ``activity.stall_after(flush_secs)`` (the flush interval, 3 median gaps, 1.5 x the longest gap) is stalled.
    """
    last = activity.last_wall_time
    silence = now - last if last is not None else None

    def console() -> str | None:
        nonlocal console_error_line, console_error_of
        if console_error_line is None and console_error_of is not None:
            console_error_line, console_error_of = console_error_of(), None
        return console_error_line

    if recorded_end is not None and recorded_end_first:
        state = WriterState(recorded_end[0])
        return RunState(state, recorded_end[1], None, last, silence, recorded_end[1] if state == "crashed" else None)
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
        if silence is not None and silence > limit and writer.weak:
            reason = (
                f"pid {writer.pid} ({printable(writer.comm)}) is alive and {writer.detail}, but holds none of the "
                f"run's files open and nothing was written for {fmt_duration(silence)}: it may only stand by the "
                "run, so the silence alone decides"
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
    if recorded_running is not None:
        state, reason = WriterState(recorded_running[0]), recorded_running[1]
        return RunState(state, reason, None, last, silence, reason if state == "crashed" else None)
    return RunState(WriterState.ENDED, "no process of this node writes it", None, last, silence)


def final_step(global_step: object, max_steps: object) -> bool:
    """A trainer state at its last step: ``global_step`` at ``max_steps`` (both integers, a positive
    total). The watcher asks it of the newest ``trainer_state.json`` it already read (core.read.sources)."""
    return (
        isinstance(global_step, int)
        and isinstance(max_steps, int)
        and not isinstance(global_step, bool)
        and not isinstance(max_steps, bool)
        and max_steps > 0
        and global_step >= max_steps
    )
