"""The check registry: every check listed once, under the name its module gives its results, run in order."""

import json
import threading

import pytest

from builders.mappings import story_mappings
from triage_tui import cli
from triage_tui.core.diagnose.checks.registry import CHECK_NAMES, CHECKS, COUNTING_CHECKS, CheckContext, run_checks
from triage_tui.core.diagnose.checks.result import CheckResult
from triage_tui.core.diagnose.checks.verifier_mask import check_verifier_mask
from triage_tui.core.diagnose.checks.vocab import check_vocab_mapping


def test_each_entry_runs_its_module_under_the_same_name():
    # With no input at all every check says what it lacks; the result's name is the module's NAME.
    results = run_checks(CheckContext())
    assert list(results) == list(CHECK_NAMES) == [check.name for check in CHECKS]
    assert len(set(CHECK_NAMES)) == len(CHECK_NAMES)
    for name, result in results.items():
        assert result.name == name and result.status == "skipped", result
        assert result.summary and "\n" not in result.summary
    assert set(COUNTING_CHECKS) == {"vocab_mapping", "replay"}  # docs/contracts.md: what makes "checked"


def test_a_set_cancel_skips_every_check_and_reports_no_progress():
    cancel = threading.Event()
    cancel.set()
    messages: list[str] = []
    results = run_checks(CheckContext(cancel=cancel, progress=lambda f, m: messages.append(m)))
    assert {r.summary for r in results.values()} == {"cancelled"} and messages == []


def test_progress_messages_name_their_check():
    messages: list[str] = []
    run_checks(CheckContext(progress=lambda f, m: messages.append(m)))
    assert [m.split(":")[0] for m in messages] == [n for n in CHECK_NAMES for _ in (0, 1)]


def test_an_input_that_fails_to_read_errors_each_check_that_needs_it_and_the_others_run(tmp_path):
    garbage = tmp_path / "drafter"
    garbage.mkdir()
    (garbage / "model.safetensors").write_bytes(b"not a safetensors file")
    results = run_checks(CheckContext(checkpoint=garbage))
    assert results["vocab_mapping"].status == "error" and str(garbage) in results["vocab_mapping"].summary
    assert results["hidden_state"].status == "error"
    assert results["verifier_mask"].status == "skipped"  # no mapping: it says so, the checkpoint is optional
    assert all("\n" not in r.summary for r in results.values())


def test_details_render_json_and_plain_drilldown_lines():
    checkpoint, run = story_mappings()
    for result in (check_vocab_mapping(checkpoint, run), check_verifier_mask(checkpoint, run)):
        assert isinstance(result, CheckResult) and result.details is not None
        document = result.to_json()
        assert list(document)[:2] == ["status", "summary"]
        assert json.loads(json.dumps(document, allow_nan=False)) == document
        lines = result.details.drilldown()
        assert lines and all(isinstance(line, str) and "\n" not in line for line in lines)
    # the vocab details' lines carry the story's numbers, as the TUI's Details tab shows them
    vocab_lines = check_vocab_mapping(checkpoint, run).details.drilldown()
    assert vocab_lines[0].startswith("252 / 32000 draft positions map to the same target token")
    assert any(line.split()[:3] == ["only", "in", "checkpoint"] and line.split()[-1] == "6250" for line in vocab_lines)


def test_a_non_finite_number_in_details_is_null_in_the_diagnosis_json(tmp_path):
    from triage_tui.core.diagnose.check_inputs import CheckInputs
    from triage_tui.core.diagnose.checks.replay import ReplayDetails
    from triage_tui.core.diagnose.diagnosis import Diagnosis

    nan = float("nan")
    details = ReplayDetails(
        tokens=10,
        samples=1,
        device="cpu",
        label_source="target",
        accuracy_checkpoint_mapping=0.5,
        accuracy_run_mapping=0.5,
        loss_checkpoint_mapping=nan,
        loss_run_mapping=float("inf"),
        accuracy_by_chunk_order={"0,1,2": 0.5},
        best_chunk_order="0,1,2",
        notes=(),
    )
    diagnosis = Diagnosis(CheckInputs(run=tmp_path), {"replay": CheckResult("replay", "pass", "ok", details)}, [])
    replay = json.loads(json.dumps(diagnosis.to_json(), allow_nan=False))["checks"]["replay"]
    assert replay["loss_checkpoint_mapping"] is None and replay["loss_run_mapping"] is None
    assert replay["accuracy_checkpoint_mapping"] == 0.5


def test_check_help_lists_every_registered_check_with_its_title(capsys):
    with pytest.raises(SystemExit):
        cli.main(["check", "--help"])
    listed = capsys.readouterr().out.split("checks, in the order they run:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed if line.strip()] == list(CHECK_NAMES)
    assert all(check.title in "\n".join(listed) for check in CHECKS)
