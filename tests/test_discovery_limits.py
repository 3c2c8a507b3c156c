"""Discovery never invents, absorbs or drops a run, and never dies on a tree: a directory nested
deeper than any trainer writes, a sweep root's own log beside its config, a directory of no run.

Event files are written by torch's SummaryWriter (builders/tensorboard.py), consoles by SpecForge's
own ``_logger`` (builders/consoles.py).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from builders.commands import Triage
from builders.consoles import specforge_lines
from builders.tensorboard import write_drafter_checkpoint, write_scalars
from triage_tui.core.read.runs import walk
from triage_tui.core.read.runs.discover import discover_runs

POINTS = 200


def _deep(root: Path, levels: int) -> Path:
    """``root/d/d/.../d``, ``levels`` deep, made one level at a time (as an attacker's loop would)."""
    root.mkdir(parents=True)
    path = root
    for _ in range(levels):
        path = path / "d"
        path.mkdir()  # os.makedirs recurses once per level: it would fail here before triage
    return path


def _remove_deep(deepest: Path, root: Path) -> None:
    """Remove a tree _deep made, deepest first (shutil.rmtree, and so pytest's cleanup, recurse)."""
    path = deepest
    while path != root:
        path.rmdir()
        path = path.parent


def _healthy(log_dir: Path) -> Path:
    return write_scalars(log_dir, {"train/loss": [(step, 2.0 - step / 1000) for step in range(POINTS)]})


def _scalar_rows(triage: Triage, run: Path) -> list[dict]:
    ran = triage("scalars", run)
    assert ran.returncode == 0, ran.stderr
    return list(csv.DictReader(io.StringIO(ran.stdout)))


def test_a_directory_1100_levels_deep_beside_a_run_is_reported_not_a_crash(tmp_path, triage):
    _healthy(tmp_path / "real" / "runs")
    deepest = _deep(tmp_path / "junk", 1100)
    try:
        _scan_beside_a_deep_tree(tmp_path, triage)
    finally:
        _remove_deep(deepest, tmp_path / "junk")


def _scan_beside_a_deep_tree(tmp_path: Path, triage: Triage) -> None:
    ran = triage("scan", tmp_path, "--json", "--poll")
    assert ran.returncode == 0, ran.stderr
    (run,) = json.loads(ran.stdout)["runs"]
    assert run["path"] == str(tmp_path / "real" / "runs") and run["metrics"]["loss"]["count"] == POINTS
    (limit,) = json.loads(ran.stdout)["walk_limits"]
    assert limit["path"].startswith(str(tmp_path / "junk" / "d"))
    assert len(Path(limit["path"]).relative_to(tmp_path).parts) == walk.MAX_WALK_DEPTH  # levels below PATH
    assert "deeper than" in limit["reason"]
    assert ran.stderr.startswith("triage scan: not every directory was walked: ")
    assert len(ran.stderr.splitlines()) == 1

    text = triage("scan", tmp_path, "--poll")
    assert text.returncode == 0 and "real/runs  step 199" in text.stdout
    assert "not every directory was walked" in text.stderr


def test_the_directory_budget_stops_the_walk_and_says_where(tmp_path, monkeypatch):
    for name in ("a", "b", "c", "d"):
        _deep(tmp_path / name, 3)
    monkeypatch.setattr(walk, "MAX_WALK_DIRECTORIES", 6)
    from triage_tui.core.read.runs.listing import ListingCache

    cache = ListingCache()
    assert discover_runs([tmp_path], cache=cache) == []
    (why,) = cache.walk_limits.values()
    assert why == "6 directories listed: the rest of this tree was not walked"


def test_a_sweep_roots_own_log_and_config_do_not_absorb_the_runs_below(tmp_path, triage):
    sweep = tmp_path / "sweep"
    _healthy(sweep / "lr-1e-4")
    _healthy(sweep / "lr-3e-4")
    (sweep / "config.json").write_text(json.dumps({"learning_rates": [1e-4, 3e-4]}))
    (sweep / "nohup.out").write_text("launching lr-1e-4\nlaunching lr-3e-4\n")
    (sweep / "launch.log").write_text(specforge_lines([(1, {"loss": 9.0})]))  # even one holding a trainer's line

    ran = triage("scan", tmp_path, "--json", "--poll")
    runs = json.loads(ran.stdout)["runs"]
    assert [run["path"] for run in runs] == [str(sweep / "lr-1e-4"), str(sweep / "lr-3e-4")], ran.stderr
    assert [run["metrics"]["loss"]["count"] for run in runs] == [POINTS, POINTS]
    for run in runs:
        assert len(_scalar_rows(triage, Path(run["path"]))) == POINTS


def test_a_sweep_root_beside_a_checkpoint_dir_keeps_its_runs_apart(tmp_path, triage):
    sweep = tmp_path / "sweep"
    _healthy(sweep / "a")
    _healthy(sweep / "b")
    write_drafter_checkpoint(sweep / "init")  # the checkpoint every run of the sweep starts from
    (sweep / "sweep.log").write_text("starting 2 runs\n")
    runs = json.loads(triage("scan", tmp_path, "--json", "--poll").stdout)["runs"]
    found = [(run["name"], run["metrics"]["loss"]["count"]) for run in runs]
    assert found == [("sweep/a", POINTS), ("sweep/b", POINTS)]


def test_scan_and_check_of_a_directory_with_no_run_say_what_they_looked_for_and_exit_2(tmp_path, triage):
    mistyped = tmp_path / "outputs"  # the run is in output/; outputs/ holds only a note
    mistyped.mkdir()
    (mistyped / "README.md").write_text("results\n")
    for command in ("scan", "check"):
        ran = triage(command, mistyped)
        assert ran.returncode == 2, (command, ran.stdout, ran.stderr)
        (line,) = ran.stderr.splitlines()
        assert str(mistyped) in line
        for looked_for in ("*tfevents*", "run-*.wandb", "*.log", "trainer_state.json", "triage.toml"):
            assert looked_for in line, (command, line)
    ran = triage("scan", mistyped, "--json")
    assert ran.returncode == 2 and json.loads(ran.stdout) == {"runs": []}


def test_scan_of_two_paths_exits_2_when_one_holds_no_run(tmp_path, triage):
    _healthy(tmp_path / "good" / "runs")
    (tmp_path / "empty").mkdir()
    ran = triage("scan", tmp_path / "good", tmp_path / "empty", "--poll")
    assert ran.returncode == 2
    assert ran.stdout.count("\n") == 1  # the run found is still listed
    (line,) = ran.stderr.splitlines()
    assert line.startswith(f"triage scan: {tmp_path / 'empty'}: no run here or below")
