"""The whole loop a user walks on the sample run the product exists for: the run is flagged, `check`
names the cause, `remap` repairs the drafter, `check` of the repair. After the fix no cause may rise
(a confident wrong answer right after the user did the right thing), and none may stay likely.
"""

from __future__ import annotations

import json

from builders.samples import copy_samples
from triage_tui import cli
from triage_tui.core.diagnose.hypotheses.scoring import LIKELY


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_no_cause_rises_after_the_remap_fixes_the_run(tmp_path, capsys):
    samples = copy_samples(tmp_path / "sample_runs", ("vocab-mismatch",))
    run = samples / "vocab-mismatch"

    # Flag: the watcher's scan raises the chance flags on the run.
    assert cli.main(["scan", str(run), "--json"]) == 1
    kinds = {flag["kind"] for flag in _json(capsys)["runs"][0]["flags"]}
    assert {"loss_above_chance", "accuracy_at_chance"} <= kinds

    # Check: the mapping is the cause, and the run's start is not blamed.
    assert cli.main(["check", str(run), "--device", "cpu", "--json"]) == 1
    before = _json(capsys)
    scores_before = {h["id"]: h["score"] for h in before["hypotheses"]}
    assert before["hypotheses"][0]["id"] == "vocab_mapping_mismatch"
    assert scores_before["warm_start_broken"] < LIKELY

    # Remap, as the fix line says (the TUI's `m`, `y` runs the same plan and write).
    inputs = before["inputs"]
    command = [
        "remap",
        inputs["checkpoint"],
        "--mapping",
        inputs["mapping"],
        "--target",
        inputs["target"],
        "--out",
        str(tmp_path / "drafter-a-remapped"),
        "--json",
    ]
    assert cli.main(command) == 0
    report = _json(capsys)
    assert report["verified"]

    # Check again, the repaired drafter: the run still started from drafter-a.
    assert cli.main(["check", str(run), "--checkpoint", report["output"], "--device", "cpu", "--json"]) == 0
    after = _json(capsys)
    assert after["checks"]["vocab_mapping"]["status"] == "pass"
    risen = {
        h["id"]: (scores_before.get(h["id"], 0.0), h["score"])
        for h in after["hypotheses"]
        if h["score"] > scores_before.get(h["id"], 0.0) + 1e-9
    }
    assert not risen, f"causes rose after the fix (before, after): {risen}"
    assert max(h["score"] for h in after["hypotheses"]) < LIKELY
    warm = next(h for h in after["hypotheses"] if h["id"] == "warm_start_broken")
    assert any("triage's remap of the run's start drafter-a" in line for line in warm["evidence"]), warm
    assert any("the run started from" in note and "drafter-a (triage.toml)" in note for note in after["input_notes"])
