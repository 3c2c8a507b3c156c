"""`triage check` on a drafter whose weights hold NaN: no crash, no error status, strict JSON.

The readers' own test (test_formats_checkpoint.py::test_nan_weights_are_read) shows such a
checkpoint is read as it is; this one follows it through every check and the CLI: the story run
(tests/builders/tui.py) with its drafter re-saved by safetensors with NaN in fc.weight and in 100
lm_head rows, plus SpecForge dumps and a target, so the replay runs too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from builders.dumps import write_specforge
from builders.mappings import POSITIONAL_MATCH
from builders.target import layer_tensors, llama_config, target_tensors, write_sharded
from builders.tui import story_run


def no_nan_literals(text: str) -> dict:
    """json.loads that refuses NaN/Infinity, as jq and every strict parser do."""

    def refuse(constant: str):
        raise AssertionError(f"non-standard JSON constant {constant} in the output")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nan")
    run = story_run(root)
    write_sharded(root / "target", [{**target_tensors(), **layer_tensors()}], llama_config())
    write_specforge(run / "hidden_states", 4)
    (run / "triage.toml").write_text(
        (run / "triage.toml").read_text() + 'data = "hidden_states"\ntarget = "../target"\n'
    )
    weights = root / "drafters" / "aq-medai-k2" / "model.safetensors"
    state = load_file(str(weights))
    state["fc.weight"][0, 0] = float("nan")
    state["lm_head.weight"][:100] = float("nan")
    save_file(state, str(weights))
    return run


def test_check_on_nan_weights_runs_every_check_and_prints_strict_json(nan_run, triage):
    done = triage("check", nan_run, "--json", "--device", "cpu")
    assert done.returncode == 1, done.stderr  # the mapping hypothesis still scores
    report = no_nan_literals(done.stdout)
    statuses = {name: check["status"] for name, check in report["checks"].items()}
    assert "error" not in statuses.values(), report["checks"]
    assert report["checks"]["vocab_mapping"]["positional_match"] == POSITIONAL_MATCH
    assert report["checks"]["replay"]["status"] != "skipped" and report["checks"]["replay"]["tokens"] > 0
    assert report["hypotheses"][0]["id"] == "vocab_mapping_mismatch"
