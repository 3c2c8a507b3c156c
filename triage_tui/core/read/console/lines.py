"""One console line made plain: terminal escapes removed, a launcher's rank prefix split off, a
progress bar recognised, a crash's line (an exception, an out-of-memory or NCCL error) told.

- Escapes: colours and cursor moves (CSI, ``ESC [ ... letter``; tqdm moves up a line with
  ``ESC [A`` for nested bars, Rich colours its records when it thinks it writes to a terminal),
  OSC strings (``ESC ] ... BEL``: titles, hyperlinks) and two-byte escapes (ECMA-48).
- Rank prefixes: torchrun's ``--tee``/``--redirects`` copy of each worker's output is prefixed
  ``[{role_name}{local_rank}]:`` (``[default0]:``; pytorch/pytorch
  ``torch/distributed/elastic/multiprocessing/tail_log.py`` ``TailLog.start``), a
  ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`` such as ``[${rank}]:`` gives ``[0]:``, and torch
  itself prefixes a worker's traceback and its C++ warnings ``[rank{r}]:``
  (``torch/distributed/distributed_c10d.py`` ``_distributed_excepthook``, ``torch/_logging``).
  Slurm's ``srun --label`` prepends each line with the task's number, ``0: `` (srun(1), ``-l,
  --label``), right-aligned when there are ten tasks or more.
- Progress bars: tqdm's default format, ``{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}
  [{elapsed}<{remaining}, {rate_fmt}{postfix}]`` (tqdm/tqdm ``tqdm/std.py`` ``format_meter``). A
  redraw ends with no newline, so a line printed after it starts right behind its ``]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erase
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, ended by BEL or ST (or by the line)
    r"|\x1b[@-Z\\-_]"  # two-byte escapes
    r"|[\x00-\x08\x0b-\x1f\x7f]"  # other control characters (a tab stays)
)
_RANK = re.compile(r"\[([A-Za-z_]{0,32})(\d{1,6})\]:[ ]?|[ ]{0,5}(\d{1,6}): ")
_PROGRESS = re.compile(
    r"(?:(?P<desc>.*?): ?)?\s*(?P<pct>\d{1,3})%\|[^|]*\| *(?P<n>\d{1,18})/(?P<total>\d{1,18}) \[(?P<meter>[^\]]*\])?"
)


_SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]"  # _ESCAPES' sequences
)
_STRAY = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def plain(line: str) -> str:
    """The line without terminal escapes and control characters."""
    return _ESCAPES.sub("", line) if ("\x1b" in line or not line.isprintable()) else line


def stray_controls(line: str) -> bool:
    """Whether the line holds a control character that is no part of a terminal escape (a tab and the
    line's ends aside): no trainer prints one inside a record, so a record read from such a line
    is damage (a flipped bit turned a digit or a name's letter into one, which ``plain`` removes)."""
    if line.isprintable():
        return False
    return _STRAY.search(_SEQUENCES.sub("", line.rstrip("\r\n"))) is not None


def split_rank(line: str) -> tuple[int | None, str]:
    """(the launcher's rank prefix, the rest) of a plain line; (None, line) when it has none."""
    if not line[:1].isdigit() and not line.startswith(("[", " ")):
        return None, line
    match = _RANK.match(line)
    if match is None:
        return None, line
    return int(match.group(2) or match.group(3)), line[match.end() :]


@dataclass(frozen=True)
class Progress:
    """One redraw of a tqdm bar: ``n`` of ``total`` done, and the bar's description ("" when none)."""

    n: int
    total: int
    desc: str
    end: int  # where the bar's meter (``[elapsed<remaining, rate]``) ends: what follows was printed after it


def progress(segment: str) -> Progress | None:
    """The tqdm bar a plain segment draws, or None."""
    if "%|" not in segment:
        return None
    match = _PROGRESS.match(segment)
    if match is None:
        return None
    return Progress(int(match["n"]), int(match["total"]), (match["desc"] or "").strip(), match.end())


# --------------------------------------------------------------------------- crash lines

# The line that ends a Python traceback: the exception's type (dotted, as Python prints it), then
# its message. Colours, cursor moves and launchers' rank prefixes ("[rank0]:", "[default0]:") are
# no part of a line: ``plain`` and ``split_rank`` take them off first.
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)(?::.*)?$")
TRACEBACK = "Traceback (most recent call last):"
# Out of memory and collective-communication failures, as PyTorch and NCCL print them
# (torch/csrc/cuda/CUDACachingAllocator.cpp "CUDA out of memory", torch.OutOfMemoryError,
# ProcessGroupNCCL's watchdog "Watchdog caught collective operation timeout", NCCL's
# "NCCL error" and nccl*Error result names); a shell's "Killed" (the kernel's OOM killer).
_FATAL = re.compile(
    r"CUDA out of memory|OutOfMemoryError|out of memory|NCCL error|nccl(?:Internal|System|UnhandledCuda|Remote|Invalid"
    r"Usage|InvalidArgument)Error|Watchdog caught collective operation timeout|NCCL communicator was aborted|"
    r"DistBackendError|CUDA error:|Segmentation fault|core dumped|^Killed$",
)


def is_fatal(line: str) -> bool:
    """An out-of-memory, NCCL, CUDA or signal line of a plain line without its rank prefix."""
    return _FATAL.search(line.strip()) is not None


def is_exception(line: str) -> bool:
    """A Python exception's line (``torch.OutOfMemoryError: ...``), as a traceback ends in: not
    indented (a frame's source line may quote one)."""
    return not line[:1].isspace() and _EXCEPTION.match(line.rstrip()) is not None


# What a console's line is to a reader looking for its crash.
ERROR_KIND = "error"  # the crash's own line: an exception's, an out-of-memory, NCCL, CUDA or signal line
FRAME_KIND = "traceback"  # a traceback's header and the indented frames under it


class CrashMarks:
    """Marks a console's plain lines (rank prefixes off), read in order: ``ERROR_KIND``,
    ``FRAME_KIND`` or None. A frame's source line may quote the error it raises (``raise
    RuntimeError("CUDA out of memory ...")``): it is the traceback's line, never the crash's; the
    crash's is the exception line the traceback ends in."""

    def __init__(self) -> None:
        self._in_traceback = False

    def reset(self) -> None:
        self._in_traceback = False

    def mark(self, body: str) -> str | None:
        if body.strip() == TRACEBACK:
            self._in_traceback = True
            return FRAME_KIND
        if self._in_traceback and (body[:1].isspace() or not body.strip()):
            return FRAME_KIND
        self._in_traceback = False
        return ERROR_KIND if is_fatal(body) or is_exception(body) else None
