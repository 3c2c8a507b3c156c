"""A remap's world: a SpecForge drafter with the story's checkpoint mapping beside the run's mapping
file, and the witnesses the remap tests hold it to (a tree's digests, the CLI in-process).

The fixtures here (``story``, ``expected_rows``, ``world``) are registered for every test module by
tests/conftest.py (``pytest_plugins``), so no test module imports them from another.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from builders.drafter import drafter_config, drafter_state, write_drafter
from builders.mappings import story_mappings
from triage_tui.core.formats.mapping import write_mapping_pt
from triage_tui.core.vocab import VocabMapping


def tree_digest(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` (the "nothing changed" witness)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def listing(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def expected_source_rows(checkpoint: VocabMapping, run: VocabMapping) -> np.ndarray:
    """Independent of the code under test: a dict from target id to old row."""
    where = {int(t): i for i, t in enumerate(checkpoint.hot_ids)}
    return np.array([where.get(int(t), -1) for t in run.hot_ids], dtype=np.int64)


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """`triage remap ARGV` in-process, with the CLI's own BadInput -> exit 2 rule."""
    from triage_tui.cli import main

    code = main(["remap", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def story():
    return story_mappings()


@pytest.fixture(scope="module")
def expected_rows(story):
    return expected_source_rows(*story)


@pytest.fixture
def world(tmp_path, story):
    """A SpecForge safetensors drafter with the story's checkpoint mapping, and the run's mapping file."""
    ckpt_mapping, run_mapping = story
    state = drafter_state("specforge", ckpt_mapping)
    source = write_drafter(tmp_path / "drafter", state, drafter_config("specforge"))
    (source / "generation_config.json").write_text('{"max_length": 2048}')
    (source / "training_state.pt").write_bytes(b"not carried over")
    mapping = write_mapping_pt(run_mapping, tmp_path / "run_mapping.pt")
    return {"source": source, "state": state, "mapping": mapping, "root": tmp_path}
