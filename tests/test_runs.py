"""Run discovery, artifacts and the triage.toml manifest, on layouts the real trainers write."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from builders.tensorboard import age_tree, write_drafter_checkpoint, write_scalars, write_specforge_output
from triage_tui.core.errors import BadInput
from triage_tui.core.read.runs import listing as runs_listing
from triage_tui.core.read.runs.discover import discover_runs
from triage_tui.core.read.runs.listing import ListingCache
from triage_tui.core.read.runs.manifest import load_manifest
from triage_tui.core.read.source_kinds import registry

# ----------------------------------------------------------------- layouts


def test_specforge_output_dir_is_one_run_with_its_artifacts(tmp_path):
    out = tmp_path / "k2-finetune"
    event_file = write_specforge_output(out)

    (run,) = discover_runs([tmp_path])

    assert run.path == out
    assert run.name == "k2-finetune"
    assert run.event_files == (event_file,)
    assert run.manifest is None
    art = run.artifacts
    assert art.checkpoints == (out / "epoch_0_step_100", out / "epoch_0_step_1000")
    assert art.config_json == out / "epoch_0_step_1000" / "config.json"  # newest checkpoint's
    assert art.mappings == (out / "cache/vocab_mapping/8f14e45fceea167a5a36dedd4bea2543.pt",)
    assert art.dumps == out / "hidden_states"  # the root above rows_*/
    assert art.training_state == out / "epoch_0_step_1000" / "training_state.pt"
    assert art.target is None


def test_pointing_at_the_runs_dir_still_finds_the_output_dir(tmp_path):
    out = tmp_path / "out"
    write_specforge_output(out)
    (run,) = discover_runs([out / "runs"])
    assert run.path == out
    assert len(run.artifacts.checkpoints) == 2


def test_a_runs_dir_without_checkpoints_or_config_beside_it_is_its_own_run(tmp_path):
    write_scalars(tmp_path / "exp" / "runs", {"loss": [(0, 1.0)]})
    (run,) = discover_runs([tmp_path])
    assert run.path == tmp_path / "exp" / "runs"
    assert run.name == "exp/runs"


def test_speculators_logs_name_dirs_without_checkpoints_beside_are_separate_runs(tmp_path):
    first = write_scalars(tmp_path / "logs" / "k25-a", {"train/loss": [(0, 30.0)]})
    second = write_scalars(tmp_path / "logs" / "k25-b", {"train/loss": [(0, 29.0)]})
    write_drafter_checkpoint(tmp_path / "elsewhere" / "ckpts" / "k25" / "0")  # too deep to be beside logs/

    found = discover_runs([tmp_path])

    assert [r.name for r in found] == ["logs/k25-a", "logs/k25-b"]
    assert [r.event_files for r in found] == [(first,), (second,)]


def test_speculators_save_path_epochs_beside_logs_make_the_parent_one_run(tmp_path):
    events = write_scalars(tmp_path / "k25" / "logs" / "k25-a", {"train/loss": [(0, 30.0)]})
    write_drafter_checkpoint(tmp_path / "k25" / "checkpoints" / "0")  # <save_path>/<epoch>/
    write_drafter_checkpoint(tmp_path / "k25" / "checkpoints" / "1")

    for given in (tmp_path, tmp_path / "k25" / "logs", tmp_path / "k25" / "logs" / "k25-a"):
        (run,) = discover_runs([given])
        assert run.path == tmp_path / "k25" and run.event_files == (events,)
        assert run.artifacts.checkpoints == (tmp_path / "k25/checkpoints/0", tmp_path / "k25/checkpoints/1")
        assert run.artifacts.config_json == tmp_path / "k25/checkpoints/1/config.json"


def test_event_files_in_subdirectories_belong_to_the_run_above_unless_it_has_a_manifest(tmp_path):
    top = write_scalars(tmp_path / "run", {"loss": [(0, 1.0)]})
    nested = write_scalars(tmp_path / "run" / "eval", {"loss": [(0, 2.0)]})
    own = write_scalars(tmp_path / "run" / "ablation", {"loss": [(0, 3.0)]})
    (tmp_path / "run" / "ablation" / "triage.toml").write_text("[run]\nvocab_size = 128256\n")

    found = {r.name: r for r in discover_runs([tmp_path])}

    assert set(found) == {"run", "run/ablation"}
    assert set(found["run"].event_files) == {top, nested}
    assert found["run/ablation"].event_files == (own,)
    assert found["run/ablation"].manifest.vocab_size == 128256


def test_the_given_directory_itself_can_be_the_run(tmp_path):
    write_scalars(tmp_path, {"loss": [(0, 1.0)]})
    (run,) = discover_runs([tmp_path])
    assert run.path == tmp_path and run.name == tmp_path.name


def test_a_single_event_file_is_a_run(tmp_path):
    event_file = write_scalars(tmp_path / "r", {"loss": [(0, 1.0)]})
    (run,) = discover_runs([event_file])
    assert run.event_files == (event_file,)


def test_hidden_pycache_profile_empty_and_empty_files_are_skipped(tmp_path):
    write_scalars(tmp_path / ".hidden_run", {"loss": [(0, 1.0)]})
    write_scalars(tmp_path / "__pycache__", {"loss": [(0, 1.0)]})
    profile = tmp_path / "prof" / "plugins" / "events.out.tfevents.1700000000.host.profile-empty"
    profile.parent.mkdir(parents=True)
    profile.write_bytes(b"x" * 24)
    empty = tmp_path / "fresh" / "events.out.tfevents.1700000000.host.1.0"
    empty.parent.mkdir()
    empty.touch()

    cache = ListingCache()
    assert discover_runs([tmp_path], cache=cache) == []

    # The writer's first record lands: the same cache must notice without the dir changing.
    age_tree(tmp_path)
    empty.write_bytes(b"\0" * 24)
    (run,) = discover_runs([tmp_path], cache=cache)
    assert run.event_files == (empty,)


def test_symlink_loops_do_not_hang_or_duplicate(tmp_path):
    event_file = write_scalars(tmp_path / "run", {"loss": [(0, 1.0)]})
    (tmp_path / "run" / "loop").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "alias").symlink_to(tmp_path / "run", target_is_directory=True)
    found = discover_runs([tmp_path])
    assert [r.event_files for r in found] == [(event_file,)]


def test_unreadable_directory_is_skipped(tmp_path, monkeypatch):
    readable = write_scalars(tmp_path / "ok", {"loss": [(0, 1.0)]})
    write_scalars(tmp_path / "locked", {"loss": [(0, 1.0)]})
    real_scandir = os.scandir
    locked = str(tmp_path / "locked")

    def scandir(path="."):
        if str(path) == locked:  # what a chmod 000 directory answers (tests run as root here)
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(runs_listing.os, "scandir", scandir)
    found = discover_runs([tmp_path])
    assert [r.event_files for r in found] == [(readable,)]


def test_missing_path_is_bad_input(tmp_path):
    with pytest.raises(BadInput) as err:
        discover_runs([tmp_path / "nope"])
    assert "nope" in err.value.line()


def test_unchanged_tree_is_not_listed_again(tmp_path):
    for name in ("a", "b", "c"):
        write_specforge_output(tmp_path / name)
    age_tree(tmp_path)
    cache = ListingCache()
    assert len(discover_runs([tmp_path], cache=cache)) == 3
    listed = cache.scandirs
    assert listed > 10

    assert len(discover_runs([tmp_path], cache=cache)) == 3
    assert cache.scandirs == listed  # one stat per directory, no scandir

    write_scalars(tmp_path / "d", {"loss": [(0, 1.0)]})  # a new run appears
    assert [r.name for r in discover_runs([tmp_path], cache=cache)] == ["a", "b", "c", "d"]


def test_an_unchanged_directory_is_not_judged_again(tmp_path, monkeypatch):
    """A rescan asks the kinds of scalar source about a directory's names only when it was listed
    again; an unchanged run is the same RunInfo, a changed one is found anew with its new file."""
    for name in ("a", "b", "c"):
        write_specforge_output(tmp_path / name)
    age_tree(tmp_path)
    asked: list[str] = []

    def counted(kind):
        def claims(name):
            asked.append(name)
            return kind.claims(name)

        def files(tree):
            asked.append(str(tree.path))
            return kind.files(tree)

        return dataclasses.replace(kind, claims=claims, files=files if kind.files is not None else None)

    monkeypatch.setattr(registry, "SCALAR_SOURCES", [counted(kind) for kind in registry.SCALAR_SOURCES])
    cache = ListingCache()
    first = {info.name: info for info in discover_runs([tmp_path], cache=cache)}
    assert asked

    asked.clear()
    again = {info.name: info for info in discover_runs([tmp_path], cache=cache)}
    assert asked == []
    assert all(again[name] is first[name] for name in ("a", "b", "c"))

    console = tmp_path / "b" / "train.log"
    console.write_text("step 1 loss 10.4\n")
    after = {info.name: info for info in discover_runs([tmp_path], cache=cache)}
    under_b = {name for _, _, files in os.walk(tmp_path / "b") for name in files}
    assert asked and set(asked) <= under_b | {str(tmp_path / "b"), *(str(d) for d in (tmp_path / "b").rglob("*"))}
    assert after["a"] is first["a"] and after["c"] is first["c"]
    assert console in after["b"].console_files and console not in first["b"].console_files


def test_an_event_file_empty_when_listed_joins_its_run_once_written(tmp_path):
    """A writer creates its event file before its first record: the directory is listed once, the
    file's size is looked at on every walk, and the run's files follow it."""
    first = write_scalars(tmp_path / "run" / "runs", {"loss": [(0, 1.0)]})
    second = tmp_path / "run" / "runs" / "events.out.tfevents.1750000001.node.2.0"
    second.touch()
    age_tree(tmp_path)
    cache = ListingCache()
    (before,) = discover_runs([tmp_path / "run"], cache=cache)
    assert before.event_files == (first,)
    second.write_bytes(write_scalars(tmp_path / "donor", {"loss": [(1, 2.0)]}).read_bytes())
    (after,) = discover_runs([tmp_path / "run"], cache=cache)
    assert set(after.event_files) == {first, second}


# ----------------------------------------------------------------- manifest


def test_manifest_paths_are_absolute_and_override_discovery_inputs(tmp_path):
    run = tmp_path / "runs" / "k2"
    write_specforge_output(run)
    (run / "triage.toml").write_text(
        '[run]\nvocab_size = 32000\ncheckpoint = "../../drafters/k2"\nmapping = "cache/m.pt"\n'
        'data = "hidden_states/"\ntarget = "~/models/target"\n'
        'loss_tags = ["train/ploss_1"]\naccuracy_tags = ["train/acc_1"]\n'
    )
    (info,) = discover_runs([tmp_path])
    manifest = info.manifest
    assert manifest.path == run / "triage.toml"
    assert manifest.vocab_size == 32000
    assert manifest.checkpoint == tmp_path / "drafters" / "k2"
    assert manifest.mapping == run / "cache" / "m.pt"
    assert manifest.data == run / "hidden_states"
    assert manifest.target == Path.home() / "models" / "target"
    assert manifest.loss_tags == ("train/ploss_1",)
    assert manifest.accuracy_tags == ("train/acc_1",)


def test_an_empty_manifest_marks_a_run_without_event_files(tmp_path):
    (tmp_path / "planned").mkdir()
    (tmp_path / "planned" / "triage.toml").write_text("# filled in later\n")
    (info,) = discover_runs([tmp_path])
    assert info.event_files == () and info.manifest.vocab_size is None


@pytest.mark.parametrize(
    "text, complaint",
    [
        ("[run\nvocab_size = 1", "not valid TOML"),
        ('[run]\nvocab_size = "32000"\n', "vocab_size must be an integer"),
        ("[run]\nvocab_size = true\n", "vocab_size must be an integer"),
        ("[run]\ncheckpoint = 3\n", "checkpoint must be a non-empty path"),
        ('[run]\nloss_tags = "train/loss"\n', "loss_tags must be a list"),
        ("[run]\nvocab-size = 32000\n", "unknown key(s) in [run]: vocab-size"),
        ("run = 3\n", "[run] must be a table"),
    ],
)
def test_malformed_manifest_is_bad_input_naming_the_file(tmp_path, text, complaint):
    manifest = tmp_path / "triage.toml"
    manifest.write_text(text)
    with pytest.raises(BadInput) as err:
        load_manifest(manifest)
    assert err.value.path == str(manifest)
    assert complaint in err.value.what
    with pytest.raises(BadInput):
        discover_runs([tmp_path])
    (lenient,) = discover_runs([tmp_path], strict=False)
    assert lenient.manifest is None and complaint in lenient.manifest_error


def test_what_is_kept_of_deleted_runs_is_dropped_and_what_lives_is_kept(tmp_path):
    """A node's runs come and go for weeks under one watcher: once most of the listings kept are of
    directories gone, a discovery drops them (and the RunInfos and artifacts of their runs), while
    every directory still there stays cached: the next discovery lists nothing again."""
    event_file = write_scalars(tmp_path / "src", {"train/loss": [(0, 10.4), (1, 9.0)]})
    root = tmp_path / "sweep"
    for i in range(300):
        (root / f"run_{i:03d}" / "runs").mkdir(parents=True)
        shutil.copy(event_file, root / f"run_{i:03d}" / "runs" / event_file.name)
    age_tree(root)
    cache = ListingCache()
    assert len(discover_runs([root], cache=cache)) == 300
    assert len(cache.listings) > 600 and len(cache.run_infos) == 300
    for i in range(10, 300):
        shutil.rmtree(root / f"run_{i:03d}")
    age_tree(root)
    names = sorted(info.name for info in discover_runs([root], cache=cache))
    assert names == [f"run_{i:03d}/runs" for i in range(10)]
    assert len(cache.listings) <= 21 and len(cache.run_infos) == 10 and len(cache.artifacts) <= 10
    scandirs = cache.scandirs
    assert sorted(info.name for info in discover_runs([root], cache=cache)) == names
    assert cache.scandirs == scandirs
