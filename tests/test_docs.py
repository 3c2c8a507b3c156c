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


@pytest.mark.parametrize("name", ["case.md", "contracts.md", "formats.md"])
def test_the_docs_the_readme_links_are_there(name):
    readme = (REPO / "README.md").read_text()
    assert f"(docs/{name})" in readme
    assert len((REPO / "docs" / name).read_text()) > 1000


def test_every_json_field_the_code_writes_is_in_the_contract():
    """docs/contracts.md names the keys `scan --json` writes for a run (the code's to_json)."""
    from triage_tui.core import run_status

    source = Path(run_status.__file__).read_text()
    body = source[source.index("def to_json") : source.index("return document", source.index("def to_json"))]
    keys = set(re.findall(r'"(\w+)":', body)) | set(re.findall(r'document\["(\w+)"\]', body))
    contract = (REPO / "docs" / "contracts.md").read_text()
    assert keys and all(key in contract for key in keys), sorted(k for k in keys if k not in contract)
