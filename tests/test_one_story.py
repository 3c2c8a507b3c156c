"""One story on every surface: `triage check --json` and the TUI's `c` rank the same causes, in the same
order, with the same scores and evidence, on runs where each cause with an evidence path ranks first.

The runs are the committed sample runs (one per failure the generator trains), one served with the
wrong speculative algorithm: the healthy run's drafter, an EAGLE-3 drafter, behind an SGLang log whose
start-up line says ``--speculative-algorithm EAGLE`` and whose decode lines accept nothing, named by
its triage.toml's [serving] (the TUI has no --serving flag: both read what the run names), and a
fine-tune of that drafter whose accuracy starts near zero (its warm start is broken), and a run trained
past the peak of its held-out acceptance.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from builders.pilot import loaded, make_app
from builders.samples import copy_samples
from builders.serving import sglang_line, sglang_server_args_line
from builders.tensorboard import write_drafter_checkpoint
from builders.trainers import specforge_log
from builders.waiting import wait_for
from triage_tui.core.diagnose.hypotheses.scoring import LIKELY
from triage_tui.tui.widgets.hypotheses_list import HypothesesList
from triage_tui.tui.widgets.runs_table import RunsTable

# run -> the cause `triage check` ranks first there (sample_runs/README.md; the served run below)
FIRST = {
    "vocab-mismatch": "vocab_mapping_mismatch",
    "hidden-state-format": "hidden_state_format",
    "verifier-mask": "verifier_mask_mismatch",
    "diverged": "non_finite",
    "eagle-flag": "algorithm_flag",
    "ft-cold": "warm_start_broken",
    "past-peak": "past_acceptance_peak",
}


def served_with_the_eagle_flag(root: Path) -> Path:
    """The healthy sample run, its drafter served by SGLang with ``EAGLE`` instead of ``EAGLE3``: the
    start-up line names the algorithm and the drafter, three decode lines accept 1.00 token a step."""
    run = root / "eagle-flag"
    shutil.copytree(root / "healthy", run)  # its triage.toml names ../_target: a sibling still
    drafter = run / "epoch_0_step_200"
    started = sglang_server_args_line(speculative_algorithm="EAGLE", speculative_draft_model_path=str(drafter))
    (run / "serve.log").write_text("\n".join([started, *(sglang_line(400, 400) for _ in range(3))]) + "\n")
    with (run / "triage.toml").open("a") as toml:
        toml.write('[serving]\nlogs = ["serve.log"]\n')
    return run


def fine_tuned_from_cold(root: Path) -> Path:
    """A fine-tune naming the healthy run's drafter (replay ~66 %) as its start, on that run's dumps
    and mapping, whose accuracy starts at 0.3 %: SpecForge 0.2.0's own TensorboardTracker logs it."""
    run = root / "ft-cold"
    run.mkdir()
    (run / "triage.toml").write_text(
        "[run]\n"
        'checkpoint = "../healthy/epoch_0_step_200"\n'
        'mapping = "../healthy/cache/vocab_mapping/76a493ec79f30af08f5a76e2385ee8f4.pt"\n'
        'data = "../healthy/hidden_states"\n'
        'target = "../_target"\n'
    )
    rows = []
    for step in range(0, 400, 10):
        accuracy = 0.003 + (0.66 - 0.003) * step / 4000
        rows.append((step, {"train/acc_0": accuracy, "train/ploss_0": math.log(32_000) * (1 - accuracy)}))
    specforge_log(run, rows)
    return run


def trained_past_its_peak(root: Path) -> Path:
    """SpecForge's held-out acceptance of DeepSpec #84 (3.28, 3.34, 3.34, 3.24, 3.18) while the loss
    falls, with checkpoints saved before, at and after the peak."""
    run = root / "past-peak"
    evaluations = zip((2080, 5980, 11960, 19760, 26000), (3.28, 3.34, 3.34, 3.24, 3.18), strict=True)
    rows = [(step, {"train/loss": 1.5 + 1.2 * math.exp(-step / 8000)}) for step in range(0, 26001, 260)]
    rows += [(step, {"eval/simulated_acc_len": value}) for step, value in evaluations]
    specforge_log(run, sorted(rows, key=lambda row: row[0]))
    for step in (5000, 12000, 20000):
        write_drafter_checkpoint(run / f"epoch_{step // 2600}_step_{step}", draft_vocab=64)
    return run


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = copy_samples(tmp_path_factory.mktemp("one-story") / "sample_runs")
    served_with_the_eagle_flag(root)
    fine_tuned_from_cold(root)
    trained_past_its_peak(root)
    return root


def checked_json(triage, run: Path, monkeypatch) -> dict:
    """`triage check RUN --json`, which must discover the run once and parse its triage.toml once."""
    from triage_tui.core.read.runs import discover, listing, manifest
    from triage_tui.core.watch import watcher as watch

    calls: list[str] = []
    with monkeypatch.context() as scoped:
        # discovery wherever it is called from, and triage.toml read by the listing cache or directly
        for module, name in (
            (discover, "discover_runs"),
            (watch, "discover_runs"),
            (listing, "load_manifest"),
            (manifest, "load_manifest"),
        ):
            scoped.setattr(module, name, _counted(getattr(module, name), calls))
        done = triage("check", run, "--device", "cpu", "--json")
    assert done.returncode == 1, (run.name, done.stderr)  # each of these runs has a likely cause
    read_once = ["discover_runs", *(["load_manifest"] if (run / "triage.toml").is_file() else [])]
    assert sorted(calls) == read_once, (run.name, calls)
    return json.loads(done.stdout)


def _counted(real, calls: list[str]):
    def call(*args, **kwargs):
        calls.append(real.__name__)
        return real(*args, **kwargs)

    return call


async def test_check_json_and_the_tuis_c_tell_the_same_story(root, triage, monkeypatch):
    expected = {name: checked_json(triage, root / name, monkeypatch) for name in FIRST}
    for name, cause in FIRST.items():
        top = expected[name]["hypotheses"][0]
        assert top["id"] == cause and top["score"] >= LIKELY, (name, expected[name]["hypotheses"][:3])

    app = make_app(root)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        wanted = {root / name for name in FIRST}
        await wait_for(pilot, lambda: wanted <= {row.path for row in app.rows}, what="every run listed")
        table, checks = app.main.query_one(RunsTable), app.checks
        for name in FIRST:
            path = root / name
            table.move_cursor(row=[row.path for row in app.rows].index(path))

            def selected(p: Path = path) -> bool:
                return app.selected == p

            def answered(p: Path = path) -> bool:
                return checks.running_for is None and (p in checks.diagnoses or p in checks.outcomes)

            await wait_for(pilot, selected, what=f"{name} selected")
            await pilot.press("c")

            await wait_for(pilot, answered, timeout=240, what=f"checks of {name}")
            assert path not in app.checks.outcomes, (name, app.checks.outcomes.get(path))
            shown = app.checks.diagnoses[path].to_json()
            cli = expected[name]
            # Same ids, same order, same scores, same evidence lines (and titles, actions, links).
            assert shown["hypotheses"] == cli["hypotheses"], name
            # ... from the same inputs and the same serving comparison.
            for key in ("inputs", "input_sources", "input_notes", "serving", "not_run"):
                assert shown.get(key) == cli.get(key), (name, key)
            await pilot.pause()
            listed = app.main.query_one(HypothesesList)
            ids = [listed.get_option_at_index(i).id for i in range(listed.option_count)]
            assert ids == [h["id"] for h in cli["hypotheses"]], name


def test_a_collapse_beside_a_passing_vocab_check_is_not_the_mapping(root, triage, monkeypatch):
    """Serving collapsed while the vocab check found all 32000 positions in agreement: the collapse no
    longer lends vocab_mapping_mismatch its weight (it scored 0.30 on it alone); the launch flag does."""
    report = checked_json(triage, root / "eagle-flag", monkeypatch)
    ranked = {h["id"]: h for h in report["hypotheses"]}
    vocab = report["checks"]["vocab_mapping"]
    assert vocab["status"] == "pass" and "all 32000 draft positions" in vocab["summary"]
    mismatch = ranked["vocab_mapping_mismatch"]
    assert mismatch["score"] == 0.0 < LIKELY
    assert mismatch["evidence"][0].startswith("32000 / 32000 draft positions map to the same target token")
    assert any(
        line.startswith("serving: sglang accepts almost nothing") and line.endswith("does not point here")
        for line in mismatch["evidence"]
    )
    top = report["hypotheses"][0]
    assert top["id"] == "algorithm_flag" and top["score"] >= 0.8
    assert any("--speculative-algorithm EAGLE" in line and "fc.weight reads" in line for line in top["evidence"])
