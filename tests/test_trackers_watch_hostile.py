"""The trackers' records attacked where the watcher meets them: one damaged, foreign, locked or
huge file among the records of every framework in one watched tree.

The tree holds what MLflow (``mlflow.db``), trackio, NeMo Automodel, nanoGPT, Lightning's CSVLogger
and torchtune's DiskLogger wrote (tests/fixtures/trackers/, their own code), two runs each. One
file of one framework is attacked; the watcher polls the tree. The attacked file fails only its
own run (listed, its error or damage said); every other run is reported exactly as in the tree
without the attack; and no tracker's file has a byte or an mtime changed by the watch.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from triage_tui.core.read.trackers import tuning
from triage_tui.core.watch.watcher import Watcher

FIXTURES = Path(__file__).parent / "fixtures" / "trackers"
TREE = ("mlflow-sqlite", "trackio", "nemo-automodel", "nanogpt", "lightning", "torchtune")
# The file of each framework that is attacked (the chance run's), and the runs it belongs to.
TARGETS = {
    "mlflow": ("mlflow-sqlite/mlflow.db", "mlflow-sqlite"),
    "trackio": ("trackio/tiny-lm.db", "trackio"),
    "nemo-automodel": ("nemo-automodel/chance/checkpoints/training.jsonl", "nemo-automodel/chance"),
    "nanogpt": ("nanogpt/chance/train.log", "nanogpt/chance"),
    "lightning": ("lightning/tiny-lm-chance/version_0/metrics.csv", "lightning/tiny-lm-chance"),
    "torchtune": ("torchtune/chance/log_1760000000.txt", "torchtune/chance"),
}
NOW = 1_800_000_000.0  # one clock for every poll: states and flags compare across trees
SMALL_LINE = 1 << 16  # the line bound the huge-line attack runs under (the mechanism of 256 KiB's)


def _tree(root: Path) -> Path:
    for name in TREE:
        shutil.copytree(FIXTURES / name, root / name, copy_function=shutil.copy2)
    return root


def _files(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def _watch(root: Path, polls: int = 2) -> dict[str, dict]:
    """Every run's ``scan --json`` object after ``polls`` polls, by name, its path made relative."""
    watcher = Watcher([root], use_watchdog=False, rescan_interval=0.0)
    statuses = []
    for _ in range(polls):
        statuses = watcher.poll_once(now=NOW)
    out = {}
    for status in statuses:
        document = status.to_json()
        document["path"] = str(Path(document["path"]).relative_to(root))
        out[status.info.name] = document
    return out


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict[str, dict]:
    return _watch(_tree(tmp_path_factory.mktemp("clean")))


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 + 3])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for offset in range(0, len(data), max(1, len(data) // 16)):
        data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def _huge_line(path: Path) -> None:
    with open(path, "ab") as handle:
        handle.write(b"9" * (SMALL_LINE * 16) + b"\n")


def _foreign_schema(path: Path) -> None:
    """The store as another release might leave it: its metrics table without the step column."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("ALTER TABLE metrics RENAME COLUMN step TO logged_step")
    finally:
        conn.close()  # the writer's -wal checkpointed and gone before the watch


ATTACKS: dict[str, Callable[[Path], None]] = {"cut": _cut, "flip": _flip}
CASES = [(kind, attack) for kind in TARGETS for attack in ATTACKS]
CASES += [(kind, "huge_line") for kind in ("nemo-automodel", "nanogpt", "lightning", "torchtune")]
CASES += [(kind, "foreign_schema") for kind in ("mlflow", "trackio")]


def _others(runs: dict[str, dict], owner: str) -> dict[str, dict]:
    return {name: run for name, run in runs.items() if not (name == owner or name.startswith(owner + "/"))}


@pytest.mark.parametrize(("kind", "attack"), CASES)
def test_one_attacked_tracker_file_fails_only_its_own_run(tmp_path, monkeypatch, clean, kind, attack):
    monkeypatch.setattr(tuning, "MAX_LINE_BYTES", SMALL_LINE)
    root = _tree(tmp_path / "tree")
    target, owner = TARGETS[kind]
    {"huge_line": _huge_line, "foreign_schema": _foreign_schema, **ATTACKS}[attack](root / target)
    before = _files(root)
    runs = _watch(root)
    assert _files(root) == before  # nothing of any tracker's written, touched or left beside
    assert _others(runs, owner) == _others(clean, owner)  # every other run exactly as without the attack
    mine = {name: run for name, run in runs.items() if name not in _others(runs, owner)}
    assert mine, f"the attacked run {owner} vanished: {sorted(runs)}"
    clean_mine = {name: run for name, run in clean.items() if name not in _others(clean, owner)}
    if mine != clean_mine:  # a change the attack made is said: an error, or its damaged records
        said = [
            run for run in mine.values() if run["errors"] or any(f["kind"] == "damaged_records" for f in run["flags"])
        ]
        changed_points = any(run["metrics"] != clean_mine.get(name, {}).get("metrics") for name, run in mine.items())
        assert said or changed_points, mine


def test_a_store_locked_by_its_writer_waits_and_the_other_runs_are_read(tmp_path, clean):
    """MLflow's writer holds its store's lock (rollback journal, a write transaction open): the
    watcher's polls wait it out without a byte written, the other runs read; once it lets go, the
    store's runs are listed and read."""
    root = _tree(tmp_path / "tree")
    store = root / "mlflow-sqlite" / "mlflow.db"
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        before = _files(root)
        locked = _watch(root)
        assert _files(root) == before
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert _others(locked, "mlflow-sqlite") == _others(clean, "mlflow-sqlite")
    waiting = {name: run for name, run in locked.items() if name.startswith("mlflow-sqlite")}
    assert waiting and not any(run["errors"] or run["metrics"].get("loss") for run in waiting.values())
    after = _watch(root)
    assert {name: run for name, run in after.items() if name.startswith("mlflow-sqlite")} == {
        name: run for name, run in clean.items() if name.startswith("mlflow-sqlite")
    }
