"""`triage check`: input resolution, JSON shape and exit codes on run directories built by the real writers.

Each run holds a drafter checkpoint (safetensors + config.json, 32 000 draft / 163 840 target
vocab), a SpecForge vocab mapping (``torch.save({"d2t", "t2d"})``), SpecForge hidden-state dumps,
a target model and TensorBoard events from ``SummaryWriter``.
"""

import argparse
import json
from pathlib import Path

import pytest
import torch

from builders.check_run import build_run, write_drafter, write_events
from builders.mappings import story_mappings, write_specforge_mapping
from builders.samples import copy_samples
from triage_tui.core.diagnose.check_inputs import resolve_run
from triage_tui.core.diagnose.checks.registry import CHECK_NAMES
from triage_tui.core.diagnose.diagnosis import diagnose
from triage_tui.core.diagnose.evidence import Evidence
from triage_tui.core.errors import BadInput


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("check")
    return {"story": build_run(tmp, story=True), "healthy": build_run(tmp, story=False)}


def test_story_run_json_shape_and_exit_1(runs, triage):
    done = triage("check", str(runs["story"]), "--json", "--device", "cpu")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert set(report) >= {"run", "inputs", "checks", "hypotheses"}
    assert report["run"] == str(runs["story"])
    assert set(report["inputs"]) == {"checkpoint", "mapping", "data", "target"}
    assert report["inputs"]["checkpoint"].endswith("drafters/k2")
    assert set(report["checks"]) == set(CHECK_NAMES)
    for check in report["checks"].values():
        assert check["status"] in ("pass", "fail", "skipped", "error") and check["summary"]
    vocab = report["checks"]["vocab_mapping"]
    assert vocab["status"] == "fail"
    assert (vocab["positional_match"], vocab["draft_vocab_size"], vocab["target_vocab_size"]) == (252, 32000, 163840)
    assert (vocab["overlap"], vocab["only_in_checkpoint"], vocab["only_in_run"]) == (25750, 6250, 6250)
    assert vocab["training_tokens"]["run_coverage"] == 1.0
    assert report["checks"]["hidden_state"]["status"] == "pass"
    assert report["checks"]["verifier_mask"]["status"] == "pass"
    assert report["checks"]["verifier_mask"]["target_argmax_outside_draft_vocab"]["run"] == 0.0
    replay = report["checks"]["replay"]
    assert replay["status"] in ("pass", "fail"), replay["summary"]
    assert replay["tokens"] > 0 and replay["device"] == "cpu"
    assert 0.0 <= replay["accuracy_checkpoint_mapping"] <= 1.0 and 0.0 <= replay["accuracy_run_mapping"] <= 1.0
    hypotheses = report["hypotheses"]
    assert {"vocab_mapping_mismatch", "hidden_state_format", "verifier_mask_mismatch"} <= {h["id"] for h in hypotheses}
    assert [h["score"] for h in hypotheses] == sorted((h["score"] for h in hypotheses), reverse=True)
    top = hypotheses[0]
    assert top["id"] == "vocab_mapping_mismatch" and top["action"] == "remap" and top["score"] >= 0.9
    assert any("loss_above_chance" in line for line in top["evidence"])  # the scan pass's flag reached it
    assert all(h["score"] <= 0.3 for h in hypotheses[1:])


def test_healthy_run_exits_0_and_text_output_lists_hypotheses_then_checks(runs, triage):
    done = triage("check", str(runs["healthy"]), "--device", "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout
    assert text.index("hypotheses") < text.index("vocab_mapping_mismatch") < text.index("\nchecks")
    assert "vocab_mapping  pass" in text.replace("   ", "  ")
    # Exit 0 is the contract for "no hypothesis scored >= 0.5"; the text marks none with "!".
    assert not any(line.startswith("!") for line in text.splitlines())


def test_the_target_head_is_read_once_for_every_check_and_each_reports_what_its_own_pass_does(runs, monkeypatch):
    """verifier_mask, replay and dump_target each apply the 163 840-row head; a diagnosis reads each
    block of it once for all three, and every number is the one a check's own pass gives."""
    from triage_tui.core.diagnose.checks import target_head
    from triage_tui.core.diagnose.checks.dump_target import check_dump_target
    from triage_tui.core.diagnose.checks.replay import run_replay
    from triage_tui.core.diagnose.checks.verifier_mask import check_verifier_mask
    from triage_tui.core.formats.checkpoint import read_checkpoint
    from triage_tui.core.formats.hidden_states import read_dumps
    from triage_tui.core.formats.mapping import read_mapping
    from triage_tui.core.formats.target import TargetModel, read_target

    inputs = resolve_run(runs["story"]).inputs
    read_blocks: list[tuple[int, int]] = []
    rows = TargetModel.lm_head_rows

    def counted(self, start, stop):
        read_blocks.append((start, stop))
        return rows(self, start, stop)

    monkeypatch.setattr(TargetModel, "lm_head_rows", counted)
    shared = diagnose(Evidence(inputs, device="cpu"))
    blocks = -(-163840 // target_head.ROW_BLOCK)
    assert sorted(read_blocks) == sorted(set(read_blocks)) and len(read_blocks) == blocks

    read_blocks.clear()
    checkpoint, dumps, target = read_checkpoint(inputs.checkpoint), read_dumps(inputs.data), read_target(inputs.target)
    run_mapping = read_mapping(inputs.mapping, target_vocab_size=163840)
    alone = {
        "verifier_mask": check_verifier_mask(checkpoint.mapping, run_mapping, dumps=dumps, target=target),
        "replay": run_replay(checkpoint, dumps, target, checkpoint.mapping, run_mapping, device="cpu"),
        "dump_target": check_dump_target(dumps, target),
    }
    assert len(read_blocks) == 3 * blocks  # a pass each
    for name, result in alone.items():
        assert shared.checks[name].status in ("pass", "fail") and result.status == shared.checks[name].status
        assert result.to_json() == shared.checks[name].to_json(), name


def test_missing_run_is_bad_input_exit_2(tmp_path, triage):
    done = triage("check", str(tmp_path / "nowhere"), "--json")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "nowhere" in done.stderr and "Traceback" not in done.stderr


def test_flag_overrides_the_manifest_and_a_bad_mapping_errors_only_its_checks(runs, tmp_path):
    story = runs["story"]
    own = tmp_path / "own.pt"
    write_specforge_mapping(own, story_mappings()[0].hot_ids)
    inputs = resolve_run(story, mapping=own).inputs
    assert inputs.mapping == own and inputs.sources["mapping"] == "flag"
    assert inputs.sources["checkpoint"] == "triage.toml"
    diagnosis = diagnose(Evidence(inputs, device="cpu"))
    assert diagnosis.checks["vocab_mapping"].status == "pass"

    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a pickle at all")
    messages = []
    garbage_inputs = Evidence(resolve_run(story, mapping=garbage).inputs, device="cpu")
    diagnosis = diagnose(garbage_inputs, progress=lambda f, m: messages.append(m))
    assert diagnosis.checks["vocab_mapping"].status == "error"
    assert "garbage.pt" in diagnosis.checks["vocab_mapping"].summary
    assert "\n" not in diagnosis.checks["vocab_mapping"].summary
    assert diagnosis.checks["verifier_mask"].status == "error"
    assert diagnosis.checks["hidden_state"].status == "pass"  # it needs no mapping
    assert {m.split(":")[0] for m in messages} == set(CHECK_NAMES)
    json.dumps(diagnosis.to_json())

    with pytest.raises(BadInput, match="--target"):
        resolve_run(story, target=tmp_path / "absent")


def test_training_state_args_then_discovery(tmp_path, runs):
    """No manifest: SpecForge's training_state.pt args name the start checkpoint, target and cache dir."""
    _, run_mapping = story_mappings()
    shared = runs["story"].parent / "shared"
    run = tmp_path / "out"
    write_specforge_mapping(run / "cache" / "vocab_mapping" / "key.pt", run_mapping.hot_ids)
    for step in (200, 100):
        saved = write_drafter(run / f"epoch_0_step_{step}", run_mapping.hot_ids)
        args = argparse.Namespace(
            ckpt_dir=str(shared / "drafters" / "k2"),
            target_model_path=str(shared / "target"),
            cache_dir=str(run / "cache"),
            output_dir=str(run),
        )
        torch.save({"epoch": 0, "global_step": step, "args": args}, saved / "training_state.pt")
    write_events(run / "runs", [19.0] * 6, [0.04] * 6)
    inputs = resolve_run(run).inputs
    assert inputs.checkpoint == shared / "drafters" / "k2" and inputs.sources["checkpoint"] == "training_state.pt"
    assert inputs.target == shared / "target" and inputs.sources["target"] == "training_state.pt"
    assert inputs.mapping == run / "cache" / "vocab_mapping" / "key.pt"
    assert inputs.sources["mapping"] == "training_state.pt"

    # A ckpt_dir from another machine is said to be ignored; the run's own checkpoints are the fallback.
    for step in (100, 200):
        args = argparse.Namespace(
            ckpt_dir="/data/elsewhere/k2", target_model_path=str(shared / "target"), cache_dir=str(run / "cache")
        )
        torch.save({"epoch": 0, "global_step": step, "args": args}, run / f"epoch_0_step_{step}" / "training_state.pt")
    inputs = resolve_run(run).inputs
    assert inputs.sources["checkpoint"] == "discovery" and inputs.sources["target"] == "training_state.pt"
    assert any("/data/elsewhere/k2" in note and "does not exist" in note for note in inputs.notes)
    # Paths the manifest gives win, and the training args behind them add no notes.
    (run / "triage.toml").write_text(
        f'[run]\ncheckpoint = "{shared / "drafters" / "k2"}"\ntarget = "{shared / "target"}"\n'
    )
    inputs = resolve_run(run).inputs
    assert inputs.sources["checkpoint"] == "triage.toml" and inputs.sources["mapping"] == "training_state.pt"
    assert not any("elsewhere" in note for note in inputs.notes)
    (run / "triage.toml").unlink()

    # Without training_state.pt only the run's own checkpoints are left: the earliest one, said so.
    for step in (100, 200):
        (run / f"epoch_0_step_{step}" / "training_state.pt").unlink()
    inputs = resolve_run(run).inputs
    assert inputs.checkpoint == run / "epoch_0_step_100" and inputs.sources["checkpoint"] == "discovery"
    assert any("earliest saved checkpoint" in note for note in inputs.notes)
    assert inputs.mapping == run / "cache" / "vocab_mapping" / "key.pt" and inputs.sources["mapping"] == "discovery"
    assert inputs.target is None and "target" not in inputs.sources


def test_a_directory_of_several_runs_is_bad_input(runs):
    parent = runs["story"].parent
    with pytest.raises(BadInput, match="holds 2 runs"):
        resolve_run(parent)
    # `triage check out/runs` means the run `out` (the log dir's parent): resolved, and said so.
    inputs = resolve_run(runs["story"] / "runs").inputs
    assert inputs.run == runs["story"]


def test_an_unreadable_checkpoint_errors_its_checks_and_the_mask_check_still_runs(runs, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    (broken / "model.safetensors").write_bytes(b"\xff" * 64)
    diagnosis = diagnose(Evidence(resolve_run(runs["story"], checkpoint=broken).inputs, device="cpu"))
    for name in ("vocab_mapping", "hidden_state", "replay"):
        assert diagnosis.checks[name].status == "error", name
        assert "model.safetensors" in diagnosis.checks[name].summary
    assert diagnosis.checks["verifier_mask"].status == "pass"
    assert all(h.score < 0.5 for h in diagnosis.hypotheses)


def test_a_run_without_any_checkpoint_says_so_not_that_a_d2t_is_missing(tmp_path, triage):
    run = tmp_path / "scratch"
    write_events(run / "runs", [10.0] * 10, [0.01] * 10)
    done = triage("check", str(run), "--json", "--device", "cpu")
    vocab = json.loads(done.stdout)["checks"]["vocab_mapping"]
    assert vocab["status"] == "skipped"
    assert vocab["summary"] == "no drafter checkpoint found for this run (pass --checkpoint)"


def test_the_fix_line_is_the_command_the_tui_shows(tmp_path, capsys):
    """`check`'s `fix:` line carries --target/--data as the TUI's Action tab does (rows initialised alike)."""
    from triage_tui.cli import main as cli_main

    copy = copy_samples(tmp_path / "sample_runs", ("vocab-mismatch",))
    run = copy / "vocab-mismatch"
    assert cli_main(["check", str(run), "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    command = resolve_run(run).inputs.fix_commands()[0]
    assert " --target " in command and " --data " in command
    assert [line.strip() for line in out.splitlines() if "fix:" in line] == [f"fix: {command}"]


def test_the_fix_line_follows_the_vocab_check_as_the_tuis_remap_key_does(tmp_path):
    """One rule for "a remap is called for" (Diagnosis.remap_blocker): the vocab check failed and
    both mapping files are known. A high mapping score with mappings that agree offers no remap."""
    from triage_tui.commands.check import render_text
    from triage_tui.core.diagnose.check_inputs import CheckInputs
    from triage_tui.core.diagnose.checks.vocab import check_vocab_mapping
    from triage_tui.core.diagnose.diagnosis import Diagnosis
    from triage_tui.core.diagnose.hypotheses.scoring import Hypothesis

    checkpoint, run = story_mappings()
    inputs = CheckInputs(run=tmp_path, checkpoint=tmp_path / "drafter", mapping=tmp_path / "run.pt")
    mapping = Hypothesis("vocab_mapping_mismatch", "rows ordered for another mapping", 0.9, (), "remap")
    differ = Diagnosis(inputs, {"vocab_mapping": check_vocab_mapping(checkpoint, run)}, [mapping])
    agree = Diagnosis(inputs, {"vocab_mapping": check_vocab_mapping(checkpoint, checkpoint)}, [mapping])
    assert differ.remap_blocker() is None and differ.fix_commands() == inputs.fix_commands()
    assert f"fix: {inputs.fix_commands()[0]}" in render_text(differ, [])
    assert "nothing to remap" in agree.remap_blocker() and agree.fix_commands() == ()
    assert "fix:" not in render_text(agree, [])


# ----------------------------------------------------------------- truthful exit status (docs/contracts.md)


class _CreatesFile:
    """Unpickling calls ``open(marker, "w")``: refused by the weights-only loader."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_nothing_to_check_is_exit_2_never_healthy(tmp_path, triage):
    run = tmp_path / "scratch"
    write_events(run / "runs", [10.0] * 10, [0.01] * 10)  # a loss curve, no checkpoint, no mapping
    done = triage("check", str(run), "--json", "--device", "cpu")
    assert done.returncode == 2
    line = _one_line(done.stderr)
    assert line.startswith(f"triage check: {run / 'runs'}: nothing was checked") and "no drafter checkpoint" in line
    document = json.loads(done.stdout)  # the partial result is still there
    assert set(document["not_run"]) == set(CHECK_NAMES)


def test_every_check_errored_on_a_refused_pickle_is_exit_2(tmp_path, triage):
    run = tmp_path / "run"
    write_events(run / "runs", [10.0] * 10, [0.01] * 10)
    evil = tmp_path / "evil"
    evil.mkdir()
    torch.save(
        {"lm_head.weight": torch.zeros(4, 2), "hook": _CreatesFile(tmp_path / "PWNED")}, evil / "pytorch_model.bin"
    )
    done = triage("check", str(run), "--checkpoint", str(evil), "--device", "cpu")
    assert done.returncode == 2
    assert "refused to unpickle" in _one_line(done.stderr)
    assert not (tmp_path / "PWNED").exists()


def test_a_path_that_is_not_a_run_is_exit_2(tmp_path, triage):
    (tmp_path / "notes.txt").write_text("not a run")
    done = triage("check", str(tmp_path))
    assert done.returncode == 2 and done.stdout == ""
    assert "not a run" in _one_line(done.stderr)


def test_check_names_of_any_length_stay_apart_from_their_text(tmp_path):
    """config_contract (15 characters) ran into its summary ("config_contract5 / 5 config clauses") in
    the TUI's check list and the drill-down; every check name is followed by a space, in the TUI and
    in `check`'s text, however long the longest name."""
    from triage_tui.commands.check import render_text
    from triage_tui.core.diagnose.check_inputs import CheckInputs
    from triage_tui.core.diagnose.checks.registry import CHECK_NAMES
    from triage_tui.core.diagnose.checks.result import CheckResult
    from triage_tui.core.diagnose.diagnosis import Diagnosis
    from triage_tui.tui.widgets.checks_progress import check_lines

    assert max(map(len, CHECK_NAMES)) >= 15
    checks = {name: CheckResult(name, "pass", "5 / 5 config clauses agree") for name in CHECK_NAMES}
    tui = check_lines({name: (r.status, r.summary) for name, r in checks.items()}).plain.splitlines()
    text = render_text(Diagnosis(CheckInputs(run=tmp_path), checks, []), []).split("checks\n", 1)[1].splitlines()
    for lines in (tui, text):
        assert len(lines) == len(CHECK_NAMES)
        for name, line in zip(CHECK_NAMES, lines, strict=True):
            assert f"{name} " in line and f"{name}5" not in line, line
        # The summaries start in one column.
        assert len({line.index("5 / 5") for line in lines}) == 1
