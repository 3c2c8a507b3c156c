"""Names from files and paths are text: never markup in the TUI, never raw terminal escapes in text
output, exact in JSON (issue 11 items 1 and 2).

Run directories and tags are written for real (torch's SummaryWriter writes the tags), with names
that are well-formed markup (``[reverse blink]``, ``[@click=app.quit]``), broken markup (``[/]``),
and terminal control sequences (an OSC 52 clipboard write, ``ESC[2J``, a bell).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text
from textual.coordinate import Coordinate
from textual.widget import Widget
from torch.utils.tensorboard import SummaryWriter

from triage_tui import cli
from triage_tui.commands.check import render_text
from triage_tui.core.diagnose.check_inputs import CheckInputs
from triage_tui.core.diagnose.checks.hidden_state import HiddenIssue, HiddenStateDetails, ShapeRow
from triage_tui.core.diagnose.checks.result import CheckResult
from triage_tui.core.diagnose.diagnosis import Diagnosis
from triage_tui.core.diagnose.hypotheses.scoring import Hypothesis
from triage_tui.core.text import printable

# What no text output may hold: C0 controls but the line feeds of our own lines, DEL, C1 controls.
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
HOSTILE = [
    "sweep[lr=3e-4]",
    "[reverse blink]blink",
    "[@click=app.quit]quit",
    "[bold red]x[/bold red]",
    "\x1b]52;c;ZXZpbA==\x07clip",
    "\x1b[2Jclear",
    "bell\x07\x08\x7f",
    "c1\x9b31m",
    "rtl\u202eexe.txt",
]
# One name made of two directories: its relative path holds "[/]", a closing tag with nothing open.
SPLIT = ("a[", "]b")


def _names() -> st.SearchStrategy[str]:
    """Directory names: anything a filesystem takes (no "/" or NUL), biased to markup and escapes."""
    pieces = st.sampled_from(
        [
            "[",
            "]",
            "[/]",
            "[@click=app.quit]",
            "[b]",
            "\x1b",
            "\x1b[2J",
            "\x07",
            "\x9b",
            "\r",
            "\n",
            "\t",
            "\u202e",
            "\\",
            "ü",
            "界",
        ]
    )
    # (a Literal category: mypy reads the tuple through hypothesis' decorators as tuple[str])
    chars = st.characters(exclude_characters="/\x00", exclude_categories=("Cs",))  # type: ignore[arg-type]
    name = st.lists(st.one_of(pieces, st.text(chars, min_size=1, max_size=4)), min_size=1, max_size=6).map("".join)
    return name.filter(lambda n: n not in (".", "..") and len(n.encode()) < 200 and not n.startswith("."))


def write_run(root: Path, name: str | tuple[str, ...], tag: str) -> Path:
    run = root.joinpath(*(name if isinstance(name, tuple) else (name,)))
    run.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(log_dir=str(run))
    for step in range(0, 200, 10):
        writer.add_scalar(tag, 11.0, step, walltime=1_700_000_000.0 + step)  # above ln 32000: flagged
    writer.close()
    # The manifest names the tag as the loss, so scan shows it whatever it is called.
    toml_string = json.dumps(tag, ensure_ascii=False).replace("\x7f", "\\u007f")  # TOML wants DEL escaped too
    (run / "triage.toml").write_text(f"[run]\nloss_tags = [{toml_string}]\n", encoding="utf-8")
    return run


# --------------------------------------------------------------------------- the escaper


@given(st.text())
def test_printable_leaves_no_control_character_and_keeps_safe_text(text):
    shown = printable(text)
    assert not _CONTROL.search(shown) and "\n" not in shown
    assert not re.search("[\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]", shown)
    if not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]", text):
        assert shown == text
    shown.encode("utf-8")  # never a lone surrogate that would crash a UTF-8 stdout


def test_printable_is_cat_v_notation():
    assert printable("\x1b]52;c;ZXZpbA==\x07") == "^[]52;c;ZXZpbA==^G"
    assert printable("\x1b[2J\x7f") == "^[[2J^?"
    assert printable("a\nb\rc") == "a^Jb^Mc"
    assert printable("a\nb", newlines=True) == "a\nb"
    assert printable("run\udcff") == "run\\xff"  # an undecodable byte of a file name
    assert printable("\x9b") == "\\u009b"


# --------------------------------------------------------------------------- text outputs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_names(), tag=st.text(min_size=1, max_size=30))
def test_scan_shows_any_name_and_tag_escaped_and_json_exact(tmp_path_factory, capsys, name, tag):
    root = tmp_path_factory.mktemp("scan")
    write_run(root, name, tag)
    assert cli.main(["scan", str(root), "--vocab-size", "32000"]) == 1
    out, err = capsys.readouterr()
    assert not _CONTROL.search(out + err)
    assert printable(name) in out and printable(tag) in out
    assert cli.main(["scan", str(root), "--json"]) == 1
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["name"] == name and run["metrics"]["loss"]["tag"] == tag  # JSON stays exact


@settings(max_examples=25, deadline=None)
@given(text=st.lists(st.one_of(_names(), st.text()), min_size=6, max_size=6))
@example(text=["0/", "a", "b", "c", "d", "e"])  # a path pathlib writes without its trailing "/"
def test_check_text_escapes_every_field(text):
    path, note, title, evidence, summary, flag = text
    diagnosis = Diagnosis(
        inputs=CheckInputs(
            run=Path("/runs") / path, checkpoint=Path(path), sources={"checkpoint": "flag"}, notes=(note,)
        ),
        checks={"vocab_mapping": CheckResult("vocab_mapping", "fail", summary)},
        hypotheses=[Hypothesis("vocab_mapping_mismatch", title, 0.9, (evidence,), "remap")],
    )

    class _Flag:
        severity, message = "critical", flag

    rendered = render_text(diagnosis, [_Flag()])
    assert not _CONTROL.search(rendered)
    # A path is shown as pathlib writes it ("0/" is the path "0"), every other field as given.
    for field in (str(Path(path)), note, title, evidence, summary, flag):
        assert printable(field) in rendered


def test_bad_input_line_names_the_path_escaped(tmp_path, capsys):
    missing = tmp_path / "\x1b]52;c;ZXZpbA==\x07[/]"
    assert cli.main(["scan", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not _CONTROL.search(err) and "^[]52;c;ZXZpbA==^G[/]" in err


# --------------------------------------------------------------------------- the TUI


def _rendered(renderable) -> str:
    """What a terminal would receive for a renderable, with styles: markup applied shows as styles."""
    received = io.StringIO()
    console = Console(file=received, width=400, color_system="truecolor", force_terminal=True)
    console.print(renderable)
    return received.getvalue()


@settings(max_examples=50, deadline=None)
@given(name=st.text(), tag=st.text())
def test_tui_cells_and_lines_are_text_not_markup(name, tag):
    from triage_tui.tui.screens.drilldown import check_section
    from triage_tui.tui.view_data import RunRow
    from triage_tui.tui.widgets.hypotheses_list import hypothesis_prompt
    from triage_tui.tui.widgets.runs_table import row_cells

    row = RunRow(
        path=Path("/x"),
        name=name,
        status="critical",
        last_step=1,
        loss_last=11.0,
        loss_smoothed=11.0,
        chance_loss=10.37,
        vocab_size=32000,
        accuracy_last=None,
        last_update=None,
        critical_kinds=frozenset(),
        loss_flagged=True,
        version=1,
        shown_status="critical",
    )
    cells = row_cells(row, now=0.0)
    assert all(isinstance(cell, Text) for cell in cells)
    assert _elides(cells[1].plain, printable(name))
    prompt = hypothesis_prompt(Hypothesis("x", tag, 0.9, (name,)))
    # A file's strings reach the drill-down through a check's details (here the dumps' format name
    # and an issue message); its lines must stay text.
    details = HiddenStateDetails(
        target_hidden_size=64,
        target_hidden_size_source=tag,
        draft_hidden_size=None,
        fc_in_features=None,
        aux_chunks_present=None,
        shapes=(ShapeRow(tag, name, None, False),),
        rms_by_chunk=None,
        issues=(HiddenIssue("aux_width", "error", name),),
        dumps_format=name,
        dump_samples=1,
    )
    section = check_section(CheckResult("hidden_state", "fail", name, details))
    for renderable in (*cells, prompt, section):
        out = _rendered(renderable)
        # Only the escape sequences rich writes for styles; no other control character.
        assert not _CONTROL.search(re.sub(r"\x1b\[[0-9;]*m", "", out))


async def test_tui_shows_hostile_run_and_tag_names_as_text(tmp_path):
    from builders.pilot import loaded, make_app
    from builders.waiting import wait_for
    from triage_tui.tui.widgets.flags_view import FlagsView
    from triage_tui.tui.widgets.runs_table import RunsTable

    for index, name in enumerate(HOSTILE):
        write_run(tmp_path, name, HOSTILE[-1 - index])
    write_run(tmp_path, SPLIT, "loss[/]")
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: len(app.rows) == len(HOSTILE) + 1, what="every run")
        table = app.main.query_one(RunsTable)
        shown = {table.get_cell_at(Coordinate(row, 1)).plain for row in range(table.row_count)}
        expected = {printable(n) for n in [*HOSTILE, "/".join(SPLIT)]}
        # Each cell is one name, shown escaped, whole or elided in the middle to fit the pane.
        assert len(shown) == len(expected) and all(any(_elides(cell, name) for name in expected) for cell in shown)
        for row in range(table.row_count):
            table.move_cursor(row=row)
            await pilot.pause()
            path = table.selected_path
            status = app.statuses[path]
            pane = app.main.query_one("#chart-pane")
            title_name = printable(status.info.name)

            def titled(pane: Widget = pane, title_name: str = title_name) -> bool:
                return title_name in _unmarkup(pane.border_title or "")

            await wait_for(pilot, titled, what="the chart title")
            title = pane.border_title
            assert f"loss · {printable(status.loss_tag)} · {printable(status.info.name)}" in _unmarkup(title)
            flags = app.main.query_one(FlagsView).render()
            assert not _CONTROL.search(str(flags))
        app.notify("watching stopped: [/] \x1b[2J [@click=app.quit]q")
        await pilot.pause()
        assert app.is_running


def _elides(cell: str, name: str) -> bool:
    if "…" not in cell or cell == name:
        return cell == name
    # The elision mark is one of the cell's "…": the name may hold some of its own.
    return len(cell) < len(name) and any(
        name.startswith(cell[:at]) and name.endswith(cell[at + 1 :]) for at, char in enumerate(cell) if char == "…"
    )


def _unmarkup(markup: str) -> str:
    """The plain text of the console markup Textual returns for a border title."""
    return Text.from_markup(markup).plain


@pytest.mark.parametrize("argv", [["--interval", "nan"], ["--interval", "inf"], ["--interval", "-1"]])
def test_tui_refuses_an_interval_that_is_not_a_positive_number(tmp_path, capsys, argv):
    assert cli.main([str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("triage: --interval must be a positive number of seconds") and err.count("\n") == 1


def test_scalars_csv_escapes_tags_on_a_terminal_and_stays_exact_in_a_pipe(tmp_path):
    import os
    import pty
    import subprocess
    import sys

    tag = "loss\x1b]52;c;ZXZpbA==\x07[/]"
    run = tmp_path / "run"
    run.mkdir()
    writer = SummaryWriter(log_dir=str(run))
    writer.add_scalar(tag, 1.5, 7, walltime=1_700_000_000.0)
    writer.close()
    command = [sys.executable, "-m", "triage_tui", "scalars", str(run)]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    piped = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert piped.returncode == 0 and f"{tag},7,1700000000.0,1.5" in piped.stdout  # data stays exact
    leader, follower = pty.openpty()
    with subprocess.Popen(command, stdout=follower, stderr=subprocess.PIPE, env=env) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=120) == 0
    os.close(leader)
    shown = b"".join(chunks).decode()
    assert "loss^[]52;c;ZXZpbA==^G[/],7," in shown and "\x1b" not in shown and "\x07" not in shown


async def test_tui_says_which_symlinks_it_did_not_follow(tmp_path):
    """`scan` named the symlinks out of the watched paths on stderr; the TUI said nothing, so a run
    behind such a link was simply missing. It says so once, in the same words, names escaped."""
    from builders.pilot import loaded, make_app
    from builders.waiting import wait_for

    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    write_run(root, "run", "train/ploss_0")
    write_run(elsewhere, "other", "train/ploss_0")
    link = root / "[@click=app.quit]\x1b[2Jout"
    link.symlink_to(elsewhere, target_is_directory=True)
    app = make_app(root)
    async with app.run_test(size=(120, 30)) as pilot:
        await loaded(pilot)
        expected = (
            f"not following 1 symlink(s) to directories outside the given paths: {printable(str(link))} -> {elsewhere}"
        )

        def said(message: str) -> bool:
            # The toast is at most two lines: a longer notice keeps its head and its tail (the link's
            # escaped name and where it points), "…" where its middle was (TriageApp.notify).
            head, cut, tail = message.partition("…")
            return message == expected or (
                bool(cut) and expected.startswith(head) and expected.endswith(tail) and printable(link.name) in tail
            )

        await wait_for(pilot, lambda: any(said(n.message) for n in app._notifications), what="the notice")
        assert [row.path for row in app.rows] == [root / "run"]
        assert sum(said(n.message) for n in app._notifications) == 1


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["check", ".", "--device", "tpu:9"],
            "triage check: argument --device: invalid choice: 'tpu:9' (choose from 'auto', 'cpu', 'cuda') "
            "(see triage check --help)",
        ),
        (
            ["scan", ".", "--vocab-size", "1"],
            "triage scan: argument --vocab-size: must be >= 2 (see triage scan --help)",
        ),
        (["remap"], "triage remap: the following arguments are required: checkpoint (see triage remap --help)"),
        (["scan", "--tag\x1b[2J"], "triage: unrecognized arguments: --tag^[[2J (see triage --help)"),
    ],
)
def test_a_usage_mistake_is_one_line_exit_2(capsys, argv, line):
    """argparse printed the whole usage (five to eight lines, the TUI's included) before the line
    that said what was wrong; an argument is shown as `cat -v` would."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == line + "\n"
