"""Read-only guarantee: `scan`, `check`, `scalars` and a scripted TUI session change nothing they read.

The watched tree is written by the real writers: SummaryWriter event files, a drafter saved with
safetensors (d2t/t2d buffers, 32 000 of 163 840), the run's mapping as SpecForge's .pt, SpecForge
hidden-state dumps, a sharded target model and a training_state.pt. Every file is hashed and every
entry's type, size, mtime and ctime recorded (ctime moves on any chmod/chown/utime too); each
command runs with the watched tree as its working directory (where a stray cache or log would land)
and the tree must come out identical, with nothing added: no __pycache__, no cache, no lock file.
Caches, where a command keeps any, belong under $XDG_CACHE_HOME, which the test points elsewhere.
The commands also run under a Python audit hook (PEP 578) that fails them if they open a socket,
start a process or open a file for writing inside the watched tree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from builders.dumps import write_specforge
from builders.mappings import DRAFT_VOCAB, POSITIONAL_MATCH
from builders.target import layer_tensors, llama_config, target_tensors, write_sharded
from builders.tui import ACC_TAG, LOSS_TAG, healthy_run, story_run

REPO = Path(__file__).resolve().parent.parent
# TRIAGE_SAMPLE_RUNS points the test at another generated tree (`triage samples --out DIR`).
SAMPLE_RUNS = Path(os.environ.get("TRIAGE_SAMPLE_RUNS", REPO / "sample_runs"))


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root (root included): kind, size, mtime, ctime, and a sha256 of each file."""
    entries: dict[str, tuple] = {}
    for directory, dirs, files in os.walk(root, followlinks=False):
        for name in [".", *dirs, *files]:
            path = Path(directory) / name if name != "." else Path(directory)
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                entries[rel] = ("link", os.readlink(path), st.st_mtime_ns, st.st_ctime_ns)
            elif stat.S_ISDIR(st.st_mode):
                entries[rel] = ("dir", st.st_mode, st.st_mtime_ns, st.st_ctime_ns)
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                entries[rel] = ("file", st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, digest)
    return entries


def assert_unchanged(root: Path, before: dict[str, tuple], what: str) -> None:
    after = snapshot(root)
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    assert not (added or removed or changed), (
        f"{what} touched the watched tree: added {added[:10]}, removed {removed[:10]}, changed {changed[:10]}"
    )


@pytest.fixture(scope="module")
def watched(tmp_path_factory) -> Path:
    """A story run (mapping mismatch) with dumps, target and training state, and a healthy run."""
    root = tmp_path_factory.mktemp("watched")
    run = story_run(root)
    healthy_run(root)
    tensors = {**target_tensors(), **layer_tensors()}
    names = sorted(tensors)
    write_sharded(
        root / "models" / "target",
        [{k: tensors[k] for k in names[:2]}, {k: tensors[k] for k in names[2:]}],
        llama_config(),
    )
    write_specforge(run / "hidden_states", 4)
    torch.save(
        {
            "epoch": 1,
            "args": argparse.Namespace(target_model_path=str(root / "models" / "target"), draft_vocab_size=DRAFT_VOCAB),
        },
        run / "training_state.pt",
    )
    (run / "triage.toml").write_text(
        (run / "triage.toml").read_text() + 'data = "hidden_states"\ntarget = "../models/target"\n'
    )
    # A tree nobody touched for a while: a command that rewrites an mtime stands out.
    past = time.time() - 3600
    for path in sorted(root.rglob("*"), reverse=True) + [root]:
        os.utime(path, (past, past), follow_symlinks=False)
    return root


# Python's audit hooks (PEP 578) see every socket, every process started and every file Python opens
# for writing (native code writing on its own is what the snapshot tests above catch); the child
# reports them and exits 3 if there were any.
AUDITED = r"""
import os, sys
watched = os.path.realpath(sys.argv[1])
seen = []
def hook(event, args):
    if event in ("socket.__new__", "socket.bind", "socket.connect", "subprocess.Popen", "os.system",
                 "os.exec", "os.posix_spawn", "os.fork", "os.spawn"):
        seen.append(f"{event} {args!r:.120}")
    elif event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if mode else bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        if writes and os.path.realpath(os.fsdecode(path)).startswith(watched):
            seen.append(f"open {path!r} {mode!r} {flags!r}")
sys.addaudithook(hook)
from triage_tui.cli import main
commands, command = [], []
for arg in sys.argv[2:] + ["::"]:  # "::" between the commands of one process
    if arg == "::":
        commands.append(command)
        command = []
    else:
        command.append(arg)
codes = [main(command) for command in commands]
print("exit statuses:", *codes, file=sys.stderr)
if seen:
    print("\n".join(seen), file=sys.stderr)
    sys.exit(3)
sys.exit(max(codes))
"""


def triage(cwd: Path, cache_home: Path, *args: str | Path, watched: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m triage_tui ARGS` run from `cwd` under the audit hook (exit 3 and a list on stderr if it
    opened a socket, started a process or opened a file for writing under `watched`)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a stray import from the tree must show up as __pycache__
    # -P: like the `triage` console script, nothing is imported from the working directory (the run).
    return subprocess.run(
        [sys.executable, "-P", "-c", AUDITED, str(watched or cwd), *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_scan_and_check_leave_the_tree_as_it_was(watched, tmp_path):
    before = snapshot(watched)
    run = watched / "k2-finetune"

    scan = triage(watched, tmp_path / "cache", "scan", watched, "--json")
    assert scan.returncode == 1, scan.stderr  # the story run is critical (3: the audit hook saw something)
    statuses = {r["name"]: r["status"] for r in json.loads(scan.stdout)["runs"]}
    assert statuses == {"k2-finetune": "critical", "scratch-drafter": "ok"}
    assert_unchanged(watched, before, "triage scan")

    check = triage(run, tmp_path / "cache", "check", run, "--json", "--device", "cpu", watched=watched)
    assert check.returncode == 1, check.stderr
    report = json.loads(check.stdout)
    # The check really read the files: the drafter's d2t against the run's .pt, dumps and target.
    assert report["checks"]["vocab_mapping"]["positional_match"] == POSITIONAL_MATCH
    assert report["hypotheses"][0]["id"] == "vocab_mapping_mismatch"
    assert report["checks"]["hidden_state"]["status"] != "skipped"
    assert report["inputs"]["target"] and report["inputs"]["data"]
    assert_unchanged(watched, before, "triage check")


def test_scalars_leaves_the_tree_as_it_was(watched, tmp_path):
    before = snapshot(watched)
    run = watched / "k2-finetune"
    scalars = triage(run, tmp_path / "cache", "scalars", run, "--format", "csv", watched=watched)
    assert scalars.returncode == 0, scalars.stderr
    assert LOSS_TAG in scalars.stdout and ACC_TAG in scalars.stdout
    assert_unchanged(watched, before, "triage scalars")


async def test_a_scripted_tui_session_leaves_the_tree_as_it_was(watched, tmp_path, monkeypatch):
    from builders.pilot import checked, loaded, make_app
    from builders.waiting import wait_for
    from triage_tui.tui.screens.drilldown import DrillDownScreen
    from triage_tui.tui.screens.remap import ConfirmRemapScreen

    monkeypatch.chdir(watched)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    before = snapshot(watched)
    app = make_app(watched, use_watchdog=True)  # the inotify observer too: it must only watch
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        assert app.rows[0].name == "k2-finetune"
        await checked(pilot)
        assert app.checks.diagnoses[app.rows[0].path].hypotheses[0].id == "vocab_mapping_mismatch"
        await pilot.press("h", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DrillDownScreen), what="drill-down")
        await pilot.press("2", "3")
        # Asking for the remap and answering no must write nothing either.
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmRemapScreen), what="remap dialog")
        await pilot.press("n")
        await wait_for(pilot, lambda: not app.remap.running, what="remap declined")
        await pilot.press("escape")
        watcher = app.watcher
        assert watcher is not None
        polls = watcher.polls
        await wait_for(pilot, lambda: watcher.polls >= polls + 3, what="a few more of the watcher's polls")
        await pilot.press("q")
    assert_unchanged(watched, before, "the TUI session")


async def test_sample_runs_copy_is_left_as_it_was(tmp_path, monkeypatch):
    from builders.pilot import checked, loaded, make_app
    from builders.samples import copy_samples

    # The generator's files only: what a user added to sample_runs/ is theirs, not the test's.
    copy = copy_samples(tmp_path / "sample_runs", source=SAMPLE_RUNS)
    before = snapshot(copy)
    scan = triage(copy, tmp_path / "cache", "scan", copy, "--json")
    assert scan.returncode in (0, 1), scan.stderr
    runs = [Path(r["path"]) for r in json.loads(scan.stdout)["runs"]]
    assert runs
    # Every run's check in one process (torch imported once), from inside the first run.
    each = [arg for run in runs for arg in ("::", "check", run, "--json", "--device", "cpu")][1:]
    checks = triage(runs[0], tmp_path / "cache", *each, watched=copy)
    statuses = checks.stderr.splitlines()[-1].split()[2:]
    assert checks.returncode != 3 and "refused" not in checks.stderr, checks.stderr
    assert len(statuses) == len(runs) and set(statuses) <= {"0", "1", "2"}, checks.stderr  # 2: nothing to check
    assert_unchanged(copy, before, "scan and check of sample_runs")

    monkeypatch.chdir(copy)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    app = make_app(copy, use_watchdog=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await checked(pilot)  # on the worst run, first in the table
        await pilot.press("down", "down", "q")
    assert_unchanged(copy, before, "a TUI session on sample_runs")
