"""One console file followed: ``ConsoleFile`` turns its appended bytes into ``ConsoleRecord``s.

The bytes come through ``core/log_tail.LogTail`` with carriage returns ending lines too
(``split_cr``), so each redraw of a tqdm bar is a line: bars are recognised and counted, never taken
for unknown text, and a dict ``tqdm.write`` printed between two redraws is a line of its own.
Each line is made plain (``lines.plain``: colours and cursor moves gone), its launcher's rank
prefix split off and read as follows: lines of rank 0 are read; before a rank-0 line is seen, those
of the first rank seen (a log of one worker that is not rank 0); once rank 0 is seen, no other
rank's. Lines without a prefix are always read. A bar's redraw in front of a step line is counted
and taken off (a redraw ends with no newline: what is printed next starts behind it on the same
line). Then, by its shape:

- ``step N: {...}``: SpecForge (``specforge``);
- a dict with ``epoch``: HF Trainer (``hf_trainer``); when it follows a bar's clear (what
  ``tqdm.write`` writes first), the bar drawn next is its step (``steps``), so the record waits for
  that next line, or for the bar in the unterminated rest of the file;
- a Rich log record of ``key=value`` pairs: speculators (``speculators``), its wrapped lines joined
  until the next line that is not a continuation;
- a tqdm bar; anything else is an unknown line, counted.

One unknown line is noted on the way: where W&B keeps the run (``wandb: Run data is saved locally in
<dir>``, wandb/wandb 0.31.0 ``wandb/sdk/wandb_run.py`` ``_header_sync_info`` through
``wandb/errors/term.py`` ``termlog``). SpecForge puts that directory in its own checkout, not in
the output directory, unless ``tracking.wandb_dir`` says otherwise (sgl-project/SpecForge
``specforge/tracker.py`` ``WandbTracker._default_wandb_dir``): the console is where a run says it.

A line of a trainer's format that cannot be read (a number beyond a float, nesting past the
bound, a cut dict), one holding a control character no trainer prints (``lines.stray_controls``)
and a line longer than ``tuning.MAX_LINE_BYTES`` are counted as damage. A
SpecForge line repeating the step and the values of the one before it is another rank's copy
(every rank prints it, the metrics are all-reduced; only the ``perf/`` timings are a rank's own,
``specforge/training/controller.py``): skipped and counted with the other ranks' lines.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from triage_tui.core.log_tail import LogPass, LogTail
from triage_tui.core.read.console import hf_trainer, specforge, speculators, tuning
from triage_tui.core.read.console.lines import plain, progress, split_rank, stray_controls
from triage_tui.core.read.console.record import SPECFORGE, ConsoleRecord, Damaged

_RANK_LOCAL_PREFIX = "perf/"  # SpecForge's per-rank timings
_WANDB_DIR = "wandb: Run data is saved locally in "
MAX_WANDB_DIRS = 16  # a resumed run says it once per start


class ConsoleFile:
    """A training console log followed as it grows; ``poll()`` gives the records appended since."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.tail = LogTail(self.path, max_line_bytes=tuning.MAX_LINE_BYTES, split_cr=True)
        self.unknown_lines = 0
        self.progress_lines = 0
        self.other_rank_lines = 0
        self.rank: int | None = None  # the rank whose lines are read (None: no rank prefixes seen)
        self.wandb_dirs: list[str] = []  # where W&B said it keeps the run, as printed (untrusted)
        self.cut_short: str | None = None  # the last poll stopped before the file's end: why
        self._damaged = 0
        self._saw_rank0 = False
        self._after_clear = False  # the last non-empty line was a bar's clear (spaces only)
        self._waiting_hf: ConsoleRecord | None = None  # an HF dict waiting for the bar drawn after it
        self._rich: list[str] | None = None  # the message lines of a Rich record being joined
        self._last_printed: ConsoleRecord | None = None  # the last SpecForge record read

    @property
    def damaged(self) -> int:
        """Lines of a trainer's format that could not be read, and lines too long to be one."""
        return self._damaged + self.tail.dropped

    @property
    def problem(self) -> str | None:
        """Why the file could not be read at the last poll (missing, unreadable), or None."""
        return self.tail.problem

    def poll(self) -> Iterator[list[ConsoleRecord]]:
        """The records appended since the last poll, a chunk of at most ``tuning.MAX_READ_BYTES`` at a
        time (the caller places each before the next is read: memory follows the chunk, not the
        file), up to the file's size when the poll began and at most ``log_tail.PASS_GROWTH_BYTES``
        of what was written since (``log_tail.LogPass``): a file that grows faster than it is read
        cannot keep a poll from returning (``cut_short`` says so), and one poll reads all that was there.

        A record that waits on what comes after it (an HF dict on the bar drawn after it, a Rich
        record on its wrapped lines) is settled at the end of a poll that found nothing new, or
        whose file has not been written for ``tuning.SETTLED_SECS``: the end of a finished log is
        read by one poll, a live one's waits for its next line."""
        tail = self.tail
        read = LogPass(tail)
        while True:
            out: list[ConsoleRecord] = []
            for line in read.poll(tuning.MAX_READ_BYTES):
                self._line(line, out)
            if not read.more:
                self.cut_short = read.cut_short()
                self._settle(out, quiet=not read.bytes_read or self._written_long_ago())
            if out:
                yield out
            if not read.more:
                return

    def _written_long_ago(self) -> bool:
        return self.tail.mtime is not None and time.time() - self.tail.mtime > tuning.SETTLED_SECS

    def _settle(self, out: list[ConsoleRecord], *, quiet: bool) -> None:
        if self._waiting_hf is not None:
            bar = progress(plain(self.tail.pending()).strip())
            if bar is not None and not bar.desc:
                self._commit_hf(out, bar.n)  # the redraw after tqdm.write, not yet ended by a \r
            elif quiet:
                self._commit_hf(out, None)  # nothing more came: the writer stopped after the dict
        if self._rich is not None and quiet:
            self._commit_rich(out)

    # --- one line -------------------------------------------------------------------------------

    def _line(self, raw: str, out: list[ConsoleRecord]) -> None:
        stray = stray_controls(raw)  # a record read from this line is damage
        rank, line = split_rank(plain(raw))
        if rank is not None and not self._take(rank):
            self.other_rank_lines += 1
            return
        text = line.strip()
        if not text:
            if line:
                self._after_clear = True  # tqdm's clear: spaces over the bar, between two \r
            return
        if self._rich is not None:
            if line[:2] == "  " and speculators.record_message(line) is None:
                self._rich.append(text)
                if len(self._rich) > tuning.MAX_RECORD_LINES:
                    self._rich = None
                    self._damaged += 1
                return
            self._commit_rich(out)
        start = hf_trainer.dict_start(text)
        if self._waiting_hf is not None:
            bar = progress(text) if start != 0 else None
            self._commit_hf(out, bar.n if bar is not None and not bar.desc else None)
        after_clear, self._after_clear = self._after_clear, False
        if not text.startswith(("step ", "{")):
            text = self._behind_bar(text)
        if text.startswith("step "):
            found = specforge.parse(text)
            if found is not None:
                self._take_record(_damaged_if(stray, found), out)
                return
        if start >= 0:
            found = _damaged_if(stray, hf_trainer.parse(text, start))
            if isinstance(found, ConsoleRecord) and start == 0 and after_clear:
                self._waiting_hf = found
                return
            if found is not None:
                if start > 0 and progress(text) is not None:
                    self.progress_lines += 1  # the bar the dict was written behind
                self._take_record(found, out)
                return
        message = speculators.record_message(line)
        if message is not None and "=" in message:
            self._rich = [message]
            return
        if progress(text) is not None:
            self.progress_lines += 1
            return
        if text.startswith(_WANDB_DIR) and len(self.wandb_dirs) < MAX_WANDB_DIRS:
            directory = text[len(_WANDB_DIR) :].strip()
            if directory and directory not in self.wandb_dirs:
                self.wandb_dirs.append(directory)
        self.unknown_lines += 1

    def _behind_bar(self, text: str) -> str:
        """What was printed right behind a tqdm redraw (a redraw ends with no newline: SpecForge's
        ``print`` after its bar's ``update``), the bar counted; else the text as it is."""
        bar = progress(text)
        if bar is None or not text.startswith("step ", bar.end):
            return text
        self.progress_lines += 1
        return text[bar.end :]

    def _take(self, rank: int) -> bool:
        if rank == 0:
            self._saw_rank0 = True
            self.rank = 0
            return True
        if self._saw_rank0:
            return False
        if self.rank is None:
            self.rank = rank
        return rank == self.rank

    def _take_record(self, found: ConsoleRecord | Damaged, out: list[ConsoleRecord]) -> None:
        if isinstance(found, Damaged):
            self._damaged += 1
            return
        if found.trainer == SPECFORGE:
            if self._is_copy(found):
                self.other_rank_lines += 1
                return
            self._last_printed = found
        out.append(found)

    def _is_copy(self, found: ConsoleRecord) -> bool:
        last = self._last_printed
        if last is None or last.step != found.step:
            return False
        return [kv for kv in last.values if not kv[0].startswith(_RANK_LOCAL_PREFIX)] == [
            kv for kv in found.values if not kv[0].startswith(_RANK_LOCAL_PREFIX)
        ]

    def _commit_hf(self, out: list[ConsoleRecord], bar_step: int | None) -> None:
        found, self._waiting_hf = self._waiting_hf, None
        if found is None:
            return
        if bar_step is not None:
            found = ConsoleRecord(found.trainer, found.values, None, bar_step, found.is_train)
        out.append(found)

    def _commit_rich(self, out: list[ConsoleRecord]) -> None:
        parts, self._rich = self._rich, None
        if not parts:
            return
        # Rich wraps at a space (after a pair's comma) and folds a word longer than the column.
        message = parts[0]
        for part in parts[1:]:
            message += (" " if message.endswith(",") else "") + part
        found = speculators.parse(message)
        if found is not None:
            self._take_record(found, out)
        else:
            self.unknown_lines += 1


_Found = TypeVar("_Found", ConsoleRecord | Damaged, ConsoleRecord | Damaged | None)


def _damaged_if(stray: bool, found: _Found) -> _Found:
    """A record read from a line holding a stray control character is damage (``lines.stray_controls``)."""
    if stray and isinstance(found, ConsoleRecord):
        return Damaged(found.trainer, "a control character in the line")
    return found
