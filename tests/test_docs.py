"""The repository stands alone: its docs are in it, and nothing cites files a clone does not have."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# What the project was built from lives outside the repository; a citation of it is a dead link in a clone.
OUTSIDE = re.compile(r"\.\./shared|reference/(eagle3|tensorboard-events|textual)\.md|case-252-in-32000\.txt|DESIGN\.md")


def tracked_text_files() -> list[Path]:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True)
    paths = [REPO / p for p in listed.stdout.decode().split("\0") if p]
    return [p for p in paths if p.suffix in (".py", ".md", ".toml", ".tcss", ".txt") and p.is_file()]


def test_nothing_cites_files_outside_the_repository():
    offenders = []
    for path in tracked_text_files():
        if path.name == "test_docs.py":
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            # test fixtures may name paths like "../shared/target" inside a run: only citations count
            if OUTSIDE.search(line) and "checkpoint = " not in line and "target = " not in line:
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert offenders == []


DOCS = [
    "case.md",
    "contracts.md",
    "formats.md",
    "hypotheses.md",
    "remap.md",
    "serving.md",
    "reliability.md",
    "speed.md",
]


@pytest.mark.parametrize("name", DOCS)
def test_the_docs_the_readme_links_are_there(name):
    readme = (REPO / "README.md").read_text()
    assert f"(docs/{name})" in readme
    assert len((REPO / "docs" / name).read_text()) > 1000


def test_every_doc_is_linked_from_the_readme():
    assert sorted(p.name for p in (REPO / "docs").glob("*.md")) == sorted(DOCS)


# What the docs say is the product as it is now: never the project's history (issue numbers, the
# sessions or rounds it was built in, commit narratives). A measurement's commit is its provenance:
# docs/speed.md names one per row (written by benchmarks/report.py), and a format fact cites the
# upstream commit it was read at.
HISTORY = re.compile(
    r"\bissues? \d+|\b(this|that|next|previous|earlier|later) sessions?\b|\bsessions? (of|at)\b"
    r"|\b(first|second|third|fourth|fifth|this) round\b|\bdevelopment (builds?|machine)\b"
    r"|\bthis project\b|\bwas (added|removed|changed) in\b",
    re.IGNORECASE,
)
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
# sgl-project/SpecForge, the "classic" layout and `specforge train`; NVIDIA/Model-Optimizer, the speculation profile
# (docs/formats.md)
UPSTREAM_COMMITS = {"886ab9cf", "edf879d3", "a6b6b023"}


def user_docs() -> list[Path]:
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]


def test_the_docs_speak_of_the_product_not_its_history():
    offenders = []
    for path in user_docs():
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            hashes = set(HASH.findall(line)) - UPSTREAM_COMMITS
            if path.name == "speed.md":
                hashes = set()  # each measurement's commit, its provenance
            if HISTORY.search(line) or hashes:
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:160]}")
    assert offenders == []


def help_text(command: str) -> str:
    """What `triage [COMMAND] --help` prints."""
    import contextlib
    import io

    from triage_tui import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main([command, "--help"] if command else ["--help"])
    return out.getvalue()


def help_flags(command: str) -> dict[str, str]:
    """Every option of the command's --help (not --help itself): flag -> its choices ("a|b"), or ""."""
    flags = {}
    for match in re.finditer(r"^  (?:-\w, )?(--[\w-]+)(?: \{([^}]*)\})?", help_text(command), re.M):
        flags[match.group(1)] = (match.group(2) or "").replace(",", "|")
    flags.pop("--help")
    return flags


def table_flags(markdown: str, heading: str) -> dict[str, dict[str, str]]:
    """The commands table under ``heading``: command ("" for the TUI) -> flag -> choices it shows."""
    from triage_tui import cli

    section = markdown.split(heading + "\n", 1)[1].split("\n#", 1)[0]
    commands: dict[str, dict[str, str]] = {}
    for row in re.findall(r"^\| `(triage[^`]*)`", section, re.M):
        words = row.split()
        command = words[1] if len(words) > 1 and words[1] in cli.SUBCOMMANDS else ""
        flags = commands.setdefault(command, {})
        for match in re.finditer(r"(--[\w-]+)(?: ((?:\w+\\\|)+\w+))?", row):
            flags[match.group(1)] = (match.group(2) or "").replace("\\|", "|")
    return commands


@pytest.mark.parametrize(
    ("doc", "heading"), [("README.md", "## Commands"), ("docs/contracts.md", "## Commands and exit status")]
)
def test_the_commands_table_names_every_flag_of_every_command(doc, heading):
    """Each subcommand's row names exactly the flags its --help lists, with the same choices."""
    from triage_tui import cli

    table = table_flags((REPO / doc).read_text(), heading)
    assert sorted(table) == sorted(["", *cli.SUBCOMMANDS])
    for command, flags in table.items():
        expected = help_flags(command)
        assert set(flags) == set(expected), (command or "the TUI", sorted(set(flags) ^ set(expected)))
        for flag, choices in expected.items():
            assert not choices or flags[flag] in ("", choices), (command, flag, flags[flag], choices)


def test_every_json_field_the_code_writes_is_in_the_contract():
    """docs/contracts.md names the keys `scan --json` writes for a run (the code's to_json)."""
    from triage_tui.core.watch import run_status

    source = Path(run_status.__file__).read_text()
    body = source[source.index("def to_json") : source.index("return document", source.index("def to_json"))]
    keys = set(re.findall(r'"(\w+)":', body)) | set(re.findall(r'document\["(\w+)"\]', body))
    contract = (REPO / "docs" / "contracts.md").read_text()
    assert keys and all(key in contract for key in keys), sorted(k for k in keys if k not in contract)


def test_the_speed_page_and_the_readme_summary_are_what_benchmarks_report_writes():
    """docs/speed.md and the README's summary are written from the RESULTS files, never by hand."""
    import sys

    done = subprocess.run(
        [sys.executable, "benchmarks/report.py", "--check"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_every_speed_figure_names_its_run():
    """Each record a benchmark appended says when, at what load, at which commit and by which command."""
    import importlib.util
    import math

    spec = importlib.util.spec_from_file_location("record", REPO / "benchmarks" / "record.py")
    assert spec and spec.loader
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    names = [p.stem.removeprefix("RESULTS-") for p in (REPO / "benchmarks").glob("RESULTS-*.md")]
    found = [rec for name in names for rec in record.records(name)]
    assert found
    for rec in found:
        assert rec["date"] and len(rec["load"]) == 2 and rec["commit"] and rec["command"].startswith(".venv/bin/python")
        for row in rec["rows"]:
            figures = [row.get("fast_s"), row.get("plain_s")] if "fast_s" in row else [row["triage"]["seconds"]]
            figures += [row["other"]["seconds"]] if row.get("other") else []
            assert all(math.isfinite(x) and x > 0 for x in figures), row


def test_the_readme_keys_table_names_every_key_the_tui_binds():
    """Every key bound by the app and its screens is in the README's keys table, and every key the
    table names is bound (or is Textual's own: the tables' arrows and enter, the command palette)."""
    from textual.binding import Binding

    from triage_tui.tui.app import TriageApp
    from triage_tui.tui.screens import console, drilldown, help, main, metric_picker, node, remap

    shown = {"question_mark": "?", "slash": "/", "escape": "esc", "up": "↑", "down": "↓"}
    bound: set[str] = set()
    owners = (
        TriageApp,
        main.MainScreen,
        drilldown.DrillDownScreen,
        help.HelpScreen,
        node.NodeScreen,
        console.ConsoleScreen,
        metric_picker.MetricPickerScreen,
    )
    for owner in owners:
        for binding in owner.BINDINGS:  # a Binding, or Textual's tuple shorthand (key, action[, description])
            keys = binding.key if isinstance(binding, Binding) else binding[0]
            bound |= {shown.get(key, key) for key in keys.split(",")}
    for name in dir(remap):
        owner = getattr(remap, name)
        if isinstance(owner, type) and owner.__module__ == remap.__name__ and hasattr(owner, "BINDINGS"):
            bound |= {shown.get(key, key) for binding in owner.BINDINGS for key in binding.key.split(",")}
    readme = (REPO / "README.md").read_text()
    table = readme.split("## Keys", 1)[1].split("\n## ", 1)[0]
    listed = {
        key
        for row in table.splitlines()
        if row.startswith("| `")
        for key in re.findall(r"`([^`]+)`", row.split("|")[1])
    }
    widgets_own = {"↑", "↓", "enter", "ctrl+p"}  # the tables' own keys; Textual's command palette
    assert bound - listed == set(), f"bound but not in the README: {sorted(bound - listed)}"
    assert listed - bound - widgets_own == set(), f"in the README but not bound: {sorted(listed - bound - widgets_own)}"
