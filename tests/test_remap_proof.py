"""The proof: a drafter trained under the story's checkpoint mapping, replayed under the run's mapping
before and after `triage remap`.

The world, the trained drafter, the target and the SpecForge-layout dumps are test_replay's (a
drafter that has to learn its task with SpecForge's own loss; nothing is built to pass). Its text
uses tokens that both mappings hold at different positions, so under the run's mapping the
source drafter is at chance, and after the remap it is as good as it ever was.
"""

from __future__ import annotations

import json

import pytest

from builders.check_run import details_of
from builders.remap import run_cli, tree_digest
from builders.replay import World, train_drafter, write_specforge_checkpoint, write_specforge_dumps, write_target
from triage_tui.core.diagnose.checks.replay import ReplayDetails, replay_accuracy, run_replay
from triage_tui.core.drafter import load_drafter
from triage_tui.core.formats.checkpoint import read_checkpoint
from triage_tui.core.formats.hidden_states import read_dumps
from triage_tui.core.formats.mapping import write_mapping_pt
from triage_tui.core.formats.target import read_target

TOKENS = 200


@pytest.fixture(scope="module")
def story_run(tmp_path_factory):
    world = World()
    drafter, _ = train_drafter(world)
    root = tmp_path_factory.mktemp("proof")
    return {
        "root": root,
        "world": world,
        "checkpoint": write_specforge_checkpoint(drafter, root / "drafter"),
        "target": write_target(world, root / "target"),
        "dumps": write_specforge_dumps(world, root / "hidden_states", samples=4),
        "mapping": write_mapping_pt(world.run_mapping, root / "run_vocab_mapping.pt"),
    }


def test_accuracy_restored_by_the_remap(story_run, capsys):
    s = story_run
    before = {name: tree_digest(s[name]) for name in ("checkpoint", "target", "dumps")}
    code, out, err = run_cli(
        [
            str(s["checkpoint"]),
            "--mapping",
            str(s["mapping"]),
            "--target",
            str(s["target"]),
            "--data",
            str(s["dumps"]),
            "--device",
            "cpu",
            "--max-tokens",
            str(TOKENS),
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["verified"] and report["init"] == "target" and report["accuracy_device"] == "cpu"
    # at chance (1 / 32 000) before: the rows answer for other tokens; restored after
    assert report["accuracy_before"] <= 0.02
    assert report["accuracy_after"] >= 0.8
    assert {name: tree_digest(s[name]) for name in before} == before

    # The same numbers from the replay check itself, on the files as written.
    dumps, target = read_dumps(s["dumps"]), read_target(s["target"])
    source = read_checkpoint(s["checkpoint"])
    check = details_of(
        run_replay(source, dumps, target, source.mapping, s["world"].run_mapping, device="cpu", max_tokens=TOKENS),
        ReplayDetails,
    )
    assert check.accuracy_run_mapping == pytest.approx(report["accuracy_before"], abs=1e-9)
    remapped = load_drafter(read_checkpoint(report["output"]))
    after = replay_accuracy(remapped, dumps, target, s["world"].run_mapping, device="cpu", max_tokens=TOKENS)
    assert after == pytest.approx(report["accuracy_after"], abs=1e-9)

    provenance = json.loads((s["root"] / report["output"] / "triage-remap.json").read_text())
    assert (provenance["accuracy_before"], provenance["accuracy_after"]) == (
        report["accuracy_before"],
        report["accuracy_after"],
    )


def test_human_report_shows_before_and_after(story_run, capsys):
    s = story_run
    code, out, err = run_cli(
        [
            str(s["checkpoint"]),
            "--mapping",
            str(s["mapping"]),
            "--target",
            str(s["target"]),
            "--data",
            str(s["dumps"]),
            "--device",
            "cpu",
            "--max-tokens",
            str(TOKENS),
            "--init-missing",
            "zeros",
            "--out",
            str(s["root"] / "zeros"),
        ],
        capsys,
    )
    assert code == 0, err
    line = next(line for line in out.splitlines() if "replay accuracy" in line)
    before, after = (float(part.split("%")[0]) for part in line.split(": ")[1].split(" -> "))
    assert before <= 2.0 and after >= 80.0


def test_data_without_target_writes_and_says_accuracy_was_not_measured(story_run, capsys):
    s = story_run
    code, out, err = run_cli(
        [
            str(s["checkpoint"]),
            "--mapping",
            str(s["mapping"]),
            "--data",
            str(s["dumps"]),
            "--out",
            str(s["root"] / "no_target"),
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["accuracy_before"] is None and report["accuracy_after"] is None
    assert any("needs --target" in note for note in report["notes"])


def test_dumps_that_do_not_fit_the_drafter_are_noted_and_the_remap_goes_on(story_run, capsys):
    s = story_run
    two_layers = write_specforge_dumps(s["world"], s["root"] / "two_aux_layers", samples=1, aux_chunks=2)
    code, out, err = run_cli(
        [
            str(s["checkpoint"]),
            "--mapping",
            str(s["mapping"]),
            "--target",
            str(s["target"]),
            "--data",
            str(two_layers),
            "--out",
            str(s["root"] / "misfit"),
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["verified"] and report["accuracy_before"] is None and report["accuracy_after"] is None
    assert any(note.startswith("Accuracy not measured:") for note in report["notes"]), report["notes"]


def test_unreadable_data_is_bad_input_before_anything_is_written(story_run, capsys):
    s = story_run
    bad = s["root"] / "not_dumps"
    bad.mkdir()
    (bad / "data_0.ckpt").write_bytes(b"garbage")
    code, _, err = run_cli(
        [
            str(s["checkpoint"]),
            "--mapping",
            str(s["mapping"]),
            "--target",
            str(s["target"]),
            "--data",
            str(bad),
            "--out",
            str(s["root"] / "never"),
        ],
        capsys,
    )
    assert code == 2 and err.count("\n") == 1
    assert not (s["root"] / "never").exists()
