"""core.read.console.view: a console log as the console pane shows it, bounded, followed, untrusted."""

from __future__ import annotations

import pytest

from triage_tui.core.read.console import tuning
from triage_tui.core.read.console.view import ERROR, TRACEBACK, ConsoleView, last_error_line, newest_console


def texts(view: ConsoleView) -> list[str]:
    return [line.text for line in view.lines]


def test_only_the_last_lines_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "VIEW_MAX_LINES", 5)
    log = tmp_path / "train.log"
    log.write_text("".join(f"line {n}\n" for n in range(20)))
    view = ConsoleView(log)
    assert view.poll()
    assert texts(view) == [f"line {n}" for n in range(15, 20)]
    assert view.appended == 20
    assert not view.poll()  # nothing new: nothing changed


@pytest.mark.parametrize(("start_bytes", "first"), [(21, "line 7"), (24, "line 7"), (28, "line 6")])
def test_a_long_log_is_read_from_near_its_end_never_from_the_middle_of_a_line(
    tmp_path, monkeypatch, start_bytes, first
):
    monkeypatch.setattr(tuning, "VIEW_START_BYTES", start_bytes)
    log = tmp_path / "train.log"
    log.write_text("".join(f"line {n}\n" for n in range(10)))  # 7 bytes a line
    view = ConsoleView(log)
    view.poll()
    assert texts(view)[0] == first
    assert texts(view)[-1] == "line 9"


def test_a_truncated_log_is_shown_from_its_new_start(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("old run\n" * 5)
    view = ConsoleView(log)
    view.poll()
    log.write_text("new\n")
    assert view.poll()
    assert texts(view) == ["new"]


def test_a_line_too_long_is_left_out_and_said(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "MAX_LINE_BYTES", 100)
    monkeypatch.setattr(tuning, "VIEW_MAX_LINE_CHARS", 10)
    log = tmp_path / "train.log"
    log.write_text("short\n" + "x" * 500 + "\n" + "y" * 50 + "\n")
    view = ConsoleView(log)
    view.poll()
    assert texts(view) == ["short", "y" * 9 + "…", "(1 line(s) over 100 bytes left out)"]


def test_hostile_bytes_are_stripped_or_shown_never_obeyed(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(
        b"\x1b]0;owned\x07\x1b[2J\x1b[31m[bold]red[/bold]\x1b[0m\n"  # title, clear screen, colour, markup
        b"\xc2\x9b31m C1 CSI and \xe2\x80\xae reversed\n"  # a C1 CSI, a bidi override
        b"tab\there \xff undecodable\n"
    )
    view = ConsoleView(log)
    view.poll()
    assert texts(view) == [
        "[bold]red[/bold]",
        "\\u009b31m C1 CSI and \\u202e reversed",
        "tab     here \ufffd undecodable",
    ]


def test_carriage_returns_leave_the_last_redraw_and_the_bar_being_drawn_is_live(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("a 10%\ra 20%\ra 30%\r\nwritten over a cleared bar\r          \rmessage\nb 1%\rb 2%")
    view = ConsoleView(log)
    view.poll()
    assert texts(view) == ["a 30%", "message"]
    assert view.live == "b 2%"


def test_tracebacks_and_crash_lines_are_marked(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "step 10 loss 2.0\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    raise ValueError('bad')\n"
        "ValueError: bad\n"
        "step 11 loss 1.9\n"
        "[default3]: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n"
        "Killed\n"
    )
    view = ConsoleView(log)
    view.poll()
    assert [line.kind for line in view.lines] == [None, TRACEBACK, TRACEBACK, TRACEBACK, ERROR, None, ERROR, ERROR]
    assert last_error_line(log) == "Killed"


def test_the_last_error_line_is_the_last_one_marked_without_its_rank(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("fine\n")
    assert last_error_line(log) is None
    log.write_text("[rank0]: Traceback (most recent call last):\n[rank0]: torch.OutOfMemoryError: CUDA out of memory")
    assert last_error_line(log) == "torch.OutOfMemoryError: CUDA out of memory"  # no newline at its end
    assert last_error_line(tmp_path / "gone.log") is None


def test_the_newest_console_comes_first(tmp_path):
    import os

    old, new = tmp_path / "slurm-1.out", tmp_path / "slurm-2.out"
    old.write_text("a\n")
    new.write_text("b\n")
    os.utime(old, (2_000_000_000, 2_000_000_000))
    assert newest_console([new, old, tmp_path / "gone.log"]) == [old, new, tmp_path / "gone.log"]
