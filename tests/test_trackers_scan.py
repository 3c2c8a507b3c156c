"""The trackers' records found and watched where the frameworks put them: ``scan --json`` over
directories holding what MLflow, trackio, Lightning, torchtune, NeMo Automodel and nanoGPT wrote
(tests/fixtures/trackers/, written by their own code), the chance line flagged, the tracker's files
never changed."""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from triage_tui import cli

FIXTURES = Path(__file__).parent / "fixtures" / "trackers"
# A loss at ln 32 000 from the first step on (core/watch/signals): what a run at chance raises.
CHANCE_FLAGS = {"chance_from_start", "loss_at_chance", "loss_above_chance"}


def _scan(*paths: Path) -> tuple[int, list[dict]]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["scan", *map(str, paths), "--json"])
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return code, json.loads(out.getvalue())["runs"]


def _tree(tmp_path: Path, directory: str) -> dict[str, tuple[bytes, int]]:
    shutil.copytree(FIXTURES / directory, tmp_path / directory, copy_function=shutil.copy2)
    return {
        str(p.relative_to(tmp_path)): (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize(
    ("directory", "run_dir", "kind", "trainer", "loss"),
    [
        ("lightning", "lightning/tiny-lm-chance/version_0", "lightning", "lightning", "train/loss"),
        ("torchtune", "torchtune/chance", "torchtune", "torchtune", "loss"),
        ("nemo-automodel", "nemo-automodel/chance/checkpoints", "nemo-automodel", "nemo-automodel", "loss"),
        ("nanogpt", "nanogpt/chance", "nanogpt", "nanogpt", "loss"),
    ],
)
def test_a_run_at_chance_is_found_where_its_framework_writes_and_flagged(
    tmp_path, directory, run_dir, kind, trainer, loss
):
    before = _tree(tmp_path, directory)
    code, runs = _scan(tmp_path / directory)
    by_path = {Path(run["path"]).relative_to(tmp_path).as_posix(): run for run in runs}
    run = by_path[run_dir]
    assert kind in run["sources"] and run["trainer"] == trainer and run["errors"] == []
    assert run["metrics"]["loss"]["tag"] == loss
    assert {flag["kind"] for flag in run["flags"]} & CHANCE_FLAGS and run["status"] != "ok"
    healthy = by_path[run_dir.replace("chance", "healthy")]
    assert not {flag["kind"] for flag in healthy["flags"]} & CHANCE_FLAGS and healthy["status"] == "ok"
    assert healthy["metrics"]["loss"]["min"] < 5 and run["metrics"]["loss"]["min"] > 10.3
    assert code in (0, 1)
    assert _tree_now(tmp_path) == before


def _tree_now(tmp_path: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(tmp_path)): (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.is_file()
    }


def test_an_mlflow_store_is_watched_without_a_byte_of_it_changed_and_its_failed_run_said(tmp_path):
    """The store holds both runs, each a run of its own under its MLflow name; the chance run ended
    FAILED (MLflow's record), and no process writes it here: that run crashed, and scan exits 1."""
    before = _tree(tmp_path, "mlflow-sqlite")
    code, runs = _scan(tmp_path / "mlflow-sqlite")
    run = next(run for run in runs if run["name"] == "tiny-lm/chance")
    assert run["sources"] == ["mlflow"] and run["trainer"] == "mlflow" and run["errors"] == []
    assert run["metrics"]["loss"]["tag"] == "train/loss" and run["state"] == "crashed"
    assert {"crashed", "chance_from_start"} <= {flag["kind"] for flag in run["flags"]} and code == 1
    assert _tree_now(tmp_path) == before


def test_a_data_sets_splits_named_like_nemos_records_make_no_run(tmp_path):
    """``validation.jsonl`` alone is a data set's split as often as NeMo's record; a dict without a
    step is no metrics line (OpenAI's fine-tuning format: ``{"messages": [...]}``)."""
    data = tmp_path / "data"
    data.mkdir()
    example = json.dumps({"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]})
    (data / "validation.jsonl").write_text(example + "\n")
    code, runs = _scan(tmp_path)
    assert runs == [] and code == 2  # nothing found: said, exit 2
    (data / "training.jsonl").write_text(example + "\n")
    code, (run,) = _scan(tmp_path)
    assert run["errors"] == [] and run["metrics"].get("loss") is None and not run.get("damaged_records")
