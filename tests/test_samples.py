"""sample_runs/ and its generator: the tiny EAGLE-3 world, SpecForge-style files, and diagnoses.

Fast tests check the pieces (mapping construction, target save/load, dump and checkpoint
formats as the program's own readers see them, determinism of the trainer). Slow tests
regenerate the reduced sample set (``triage samples --small``) in a temporary directory and
check files, curve shapes and `triage check`'s ranking on every run; and check the committed
``sample_runs/`` against the generator (spec digest, file manifest, curve shapes, diagnoses).
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from builders.cache import built_once_per_run
from builders.events import read_event_file
from builders.samples import COMMITTED, copy_samples, generated_paths, tracked_sample_files
from triage_tui import cli
from triage_tui.core.errors import BadInput
from triage_tui.core.watch.signals.chance import ChanceLine
from triage_tui.samples.generate import expected_files, generate, written_files
from triage_tui.samples.provenance import code_digest, generator_sources
from triage_tui.samples.readme import EXPECTED_CAUSE, readme_text
from triage_tui.samples.spec import RUN_NAMES, SampleSpec
from triage_tui.samples.trainer import (
    DrafterTrainer,
    RunData,
    TrainConfig,
    load_saved_drafter,
    new_drafter,
    save_drafter,
)
from triage_tui.samples.world import (
    WorldSpec,
    build_target,
    generate_corpus,
    load_target,
    modelopt_mapping,
    save_target,
    specforge_mapping,
    token_counts,
)

LN_V = math.log(32_000)


# ------------------------------------------------------------------------------- pieces (fast)


def test_specforge_mapping_counts_pads_and_sorts_like_specforge():
    counts = np.zeros(40, dtype=np.int64)
    counts[[30, 7, 12, 3]] = [50, 40, 40, 1]
    mapping = specforge_mapping(counts, 6)
    # most_common(6) sees only 4 tokens; padded with the lowest unused ids (0, 1), then sorted
    assert mapping.hot_ids.tolist() == [0, 1, 3, 7, 12, 30]
    assert mapping.is_ascending() and mapping.target_vocab_size == 40
    assert mapping.d2t().tolist() == [0, 0, 1, 4, 8, 25]
    assert int(mapping.t2d().sum()) == 6


def test_modelopt_mapping_keeps_frequency_order():
    counts = np.zeros(40, dtype=np.int64)
    counts[[30, 7, 12, 3]] = [50, 40, 45, 1]
    mapping = modelopt_mapping(counts, 3)
    assert mapping.hot_ids.tolist() == [30, 12, 7]
    assert not mapping.is_ascending()


def test_domains_shift_the_mapping_like_the_story():
    spec = WorldSpec()
    a = specforge_mapping(token_counts(generate_corpus(spec, "A", 20_000)), spec.draft_vocab_size)
    b = specforge_mapping(token_counts(generate_corpus(spec, "B", 20_000)), spec.draft_vocab_size)
    positional = int((a.hot_ids == b.hot_ids).sum())
    overlap = int(np.intersect1d(a.hot_ids, b.hot_ids).size)
    # few positions agree (the sorted lists drift apart after the shared head) while most tokens are shared
    assert positional < 1_000
    assert 24_000 < overlap < 31_000


def test_target_round_trips_through_its_directory_and_the_program_reader(tmp_path):
    from triage_tui.core.formats.target import read_target

    spec = WorldSpec()
    target = build_target(spec)
    save_target(target, tmp_path / "target")
    info = read_target(tmp_path / "target")
    assert (info.vocab_size, info.hidden_size, info.num_layers) == (40_000, 64, spec.num_layers)
    assert info.embed_tokens().dtype == torch.float16
    assert torch.equal(info.lm_head().float(), target.lm_head.detach())
    again = load_target(tmp_path / "target", spec)
    ids = torch.from_numpy(generate_corpus(spec, "B", 2).input_ids)
    aux, last = target.hidden_states(ids)
    aux2, last2 = again.hidden_states(ids)
    assert torch.equal(aux, aux2) and torch.equal(last, last2)
    # the residual stream grows with depth, so the low -> mid -> high aux chunks grow in RMS
    rms = [float(c.pow(2).mean().sqrt()) for c in aux.chunk(3, dim=-1)]
    assert rms[0] < 0.9 * rms[1] and rms[1] < 0.9 * rms[2]


def test_trainer_is_deterministic_and_writes_specforge_tags(tmp_path):
    spec = WorldSpec()
    target = build_target(spec)
    corpus = generate_corpus(spec, "B", 64)
    mapping = specforge_mapping(token_counts(generate_corpus(spec, "B", 4_000)), spec.draft_vocab_size)
    runs = []
    for attempt in range(2):
        torch.manual_seed(123)
        trainer = DrafterTrainer(
            tmp_path / f"run{attempt}",
            target,
            new_drafter(spec, mapping, seed=5, target=target),
            RunData(corpus, corpus, mapping),
            TrainConfig(total_steps=3, batch_size=2, ttt_length=2, eval_interval=3),
        )
        trainer.run()
        trainer.close()
        runs.append(trainer.history)
    assert [s.plosses for s in runs[0].steps] == [s.plosses for s in runs[1].steps]
    scalars = read_event_file(next((tmp_path / "run0" / "runs").glob("events.out.tfevents.*")))
    assert set(scalars.tags()) == {
        "train/lr",
        "train/ploss_0",
        "train/ploss_1",
        "train/acc_0",
        "train/acc_1",
        "eval/ploss_0",
        "eval/ploss_1",
        "eval/acc_0",
        "eval/acc_1",
    }
    assert scalars.get("train/ploss_0").steps.tolist() == [1, 2, 3]
    assert np.allclose(scalars.get("train/ploss_0").values, [s.plosses[0] for s in runs[0].steps])


def test_saved_drafter_is_a_specforge_checkpoint_the_reader_accepts(tmp_path):
    from safetensors import safe_open

    from triage_tui.core.formats.checkpoint import read_checkpoint

    spec = WorldSpec()
    mapping = specforge_mapping(token_counts(generate_corpus(spec, "A", 4_000)), spec.draft_vocab_size)
    save_drafter(new_drafter(spec, mapping, seed=1), tmp_path / "epoch_0_step_1")
    with safe_open(str(tmp_path / "epoch_0_step_1" / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.get_tensor("lm_head.weight").dtype == torch.float16
        assert f.get_tensor("d2t").dtype == torch.int64 and f.get_tensor("t2d").dtype == torch.bool
    assert not any("embed" in k for k in keys)
    assert {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d", "midlayer.hidden_norm.weight"} <= keys
    checkpoint = read_checkpoint(tmp_path / "epoch_0_step_1")
    assert (checkpoint.draft_vocab_size, checkpoint.target_vocab_size) == (32_000, 40_000)
    assert checkpoint.aux_layer_ids == spec.aux_layer_ids
    assert np.array_equal(checkpoint.mapping.hot_ids, mapping.hot_ids)


def test_a_saved_drafter_reads_back_exactly_as_written(tmp_path):
    """The fine-tunes of sample_runs/ start from drafters the generator saved and reads back through the
    program's checkpoint reader: what it reads is what was written (weights rounded to fp16 as saved),
    which is why the readers stay outside the generator's code digest."""
    spec = WorldSpec()
    mapping = specforge_mapping(token_counts(generate_corpus(spec, "A", 4_000)), spec.draft_vocab_size)
    drafter = new_drafter(spec, mapping, seed=3)
    save_drafter(drafter, tmp_path / "drafter")
    again = load_saved_drafter(tmp_path / "drafter")
    written, read = drafter.state_dict(), again.state_dict()
    assert set(read) == set(written)
    for name, tensor in written.items():
        expected = tensor.to(torch.float16).to(read[name].dtype) if tensor.is_floating_point() else tensor
        assert torch.equal(read[name], expected), name


def test_samples_refuses_a_directory_it_did_not_build(tmp_path, capsys):
    (tmp_path / "healthy").mkdir()
    (tmp_path / "healthy" / "mine.txt").write_text("keep me")
    assert cli.main(["samples", "--out", str(tmp_path)]) == 2
    assert "was not built by `triage samples`" in capsys.readouterr().err
    assert (tmp_path / "healthy" / "mine.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput):
        generate(tmp_path / "file", SampleSpec.small())


PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def test_the_code_digest_covers_every_module_the_samples_are_built_with(tmp_path):
    """Editing the trainer, the world, the drafter's arithmetic or the mapping writer changes the digest
    the committed runs are checked against; rewording the README or editing a checkpoint reader (whose
    read-back the test below pins) does not."""
    sources = {p.relative_to(PACKAGE_ROOT).as_posix() for p in generator_sources()}
    assert {
        "triage_tui/samples/generate.py",
        "triage_tui/samples/spec.py",
        "triage_tui/samples/recipes.py",
        "triage_tui/samples/provenance.py",
        "triage_tui/samples/trainer.py",
        "triage_tui/samples/world.py",
        "triage_tui/core/drafter.py",  # imported by the trainer, and lazily by load_saved_drafter
        "triage_tui/core/vocab.py",
        "triage_tui/core/formats/mapping.py",
    } <= sources
    for outside in ("samples/readme.py", "samples/demo.py", "core/formats/checkpoint.py", "core/formats/json_file.py"):
        assert f"triage_tui/{outside}" not in sources

    copy = tmp_path / "checkout"
    shutil.copytree(PACKAGE_ROOT / "triage_tui", copy / "triage_tui", ignore=shutil.ignore_patterns("__pycache__"))
    assert code_digest(copy) == code_digest()

    def edited(rel: str, text: str) -> str:
        path = copy / rel
        before = path.read_text()
        path.write_text(before + text)
        try:
            return code_digest(copy)
        finally:
            path.write_text(before)

    for rel in sorted(sources):
        assert edited(rel, "\n# an edit\n") != code_digest(), rel
    assert edited("triage_tui/samples/readme.py", "\n# an edit\n") == code_digest()
    assert edited("triage_tui/core/formats/checkpoint.py", "\n# an edit\n") == code_digest()
    assert edited("triage_tui/core/watch/watcher.py", "\n# an edit\n") == code_digest()
    # a module the trainer starts to import (inside a function) joins the digest
    (copy / "triage_tui/core/lr_schedule.py").write_text("WARMUP = 10\n")
    trainer = copy / "triage_tui/samples/trainer.py"
    trainer.write_text(
        trainer.read_text() + "\n\ndef _warmup() -> int:\n    from triage_tui.core.lr_schedule import WARMUP\n"
    )
    assert copy / "triage_tui/core/lr_schedule.py" in generator_sources(copy)
    assert edited("triage_tui/core/lr_schedule.py", "WARMUP = 20\n") != code_digest(copy)


# ---------------------------------------------------------------- a regenerated small set (slow)


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory) -> tuple[Path, dict]:
    """`triage samples --small`, run once per test run whichever worker asks first (builders.cache)."""

    def build(out: Path) -> None:
        assert cli.main(["samples", "--small", "--out", str(out), "--jobs", "2"]) == 0

    key = f"{SampleSpec.small().digest()}-{code_digest()}"
    out = built_once_per_run(tmp_path_factory, "samples-small", key, build)
    return out, json.loads((out / "GENERATED.json").read_text())


def _curve(run: Path, tag: str) -> np.ndarray:
    files = sorted((run / "runs").glob("events.out.tfevents.*"))
    assert len(files) == 1, files
    return np.asarray(read_event_file(files[0]).get(tag).values)


def assert_curve_shapes(root: Path, spec: SampleSpec) -> None:
    healthy = _curve(root / "healthy", "train/ploss_0")
    assert len(healthy) == spec.healthy_steps
    assert np.isfinite(healthy).all()
    assert healthy[-10:].mean() < 0.5 * LN_V, "healthy loss should end far below ln V"
    assert _curve(root / "healthy", "train/acc_0")[-10:].mean() > 0.3

    mismatch = _curve(root / "vocab-mismatch", "train/ploss_0")
    assert len(mismatch) == spec.finetune_steps
    assert (mismatch > LN_V).all(), "the story's loss sits above ln V for the whole fine-tune"
    assert _curve(root / "vocab-mismatch", "train/acc_0").mean() < 0.1

    for name in ("hidden-state-format", "verifier-mask"):
        loss = _curve(root / name, "train/ploss_0")
        assert len(loss) == spec.finetune_steps
        assert loss.min() > healthy[-10:].mean() + 2.0, name
        assert _curve(root / name, "train/acc_0").mean() < 0.1, name
    assert (_curve(root / "verifier-mask", "train/ploss_0") > LN_V).all()

    diverged = _curve(root / "diverged", "train/ploss_0")
    bad = np.flatnonzero(~np.isfinite(diverged))
    assert bad.size, "diverged must end in NaN"
    assert np.isfinite(diverged[: bad[0]]).all() and not np.isfinite(diverged[bad[0] :]).any()
    assert diverged[: bad[0]].min() < diverged[0] - 2.0, "it learned something before it blew up"


def check_json(run: Path, triage) -> tuple[int, dict]:
    done = triage("check", run, "--json", "--device", "cpu")
    return done.returncode, json.loads(done.stdout)


def assert_diagnoses(root: Path, triage) -> None:
    for name in RUN_NAMES:
        status, report = check_json(root / name, triage)
        hypotheses = report["hypotheses"]
        expected = EXPECTED_CAUSE[name]
        if expected is None:
            assert status == 0, (name, hypotheses)
            assert all(h["score"] < 0.5 for h in hypotheses), (name, hypotheses)
        else:
            assert status == 1, (name, hypotheses)
            assert hypotheses[0]["id"] == expected, (name, [(h["id"], h["score"]) for h in hypotheses])
            assert hypotheses[0]["score"] >= 0.5
    # the story's contradiction in two numbers: the drafter predicts well under its own mapping
    _, report = check_json(root / "vocab-mismatch", triage)
    replay = report["checks"]["replay"]
    assert replay["accuracy_checkpoint_mapping"] > 0.3 > 0.1 > replay["accuracy_run_mapping"]


@pytest.mark.slow
def test_small_regeneration_writes_every_expected_file(small_runs):
    out, summary = small_runs
    assert written_files(out) == expected_files(SampleSpec.small())
    assert (summary["spec_digest"], summary["code_digest"]) == (SampleSpec.small().digest(), code_digest())
    manifest = (out / "vocab-mismatch" / "triage.toml").read_text()
    assert 'checkpoint = "../_drafters/drafter-a"' in manifest and 'target = "../_target"' in manifest


@pytest.mark.slow
def test_small_regeneration_curve_shapes(small_runs):
    out, _ = small_runs
    assert_curve_shapes(out, SampleSpec.small())


@pytest.mark.slow
def test_small_regeneration_check_names_each_cause_first(small_runs, triage):
    out, _ = small_runs
    assert_diagnoses(out, triage)


# ------------------------------------------------------------------ the committed sample_runs/


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """The generator's files of sample_runs/, copied: what a user added there is not seen (builders/samples.py)."""
    return copy_samples(tmp_path_factory.mktemp("sample_runs"))


def assert_from_the_current_generator(root: Path, tracked: list[str] | None) -> None:
    """Every file the generator writes is in ``root`` as it wrote it; files a user added are not our business."""
    recorded = json.loads((root / "GENERATED.json").read_text())
    # the generator's defaults and its code are what built the committed runs: change either, regenerate
    assert recorded["spec_digest"] == SampleSpec().digest(), "run `triage samples` and commit sample_runs/"
    assert recorded.get("code_digest") == code_digest(), (
        "the generator's code changed since sample_runs/ was built: run `triage samples` and commit sample_runs/"
    )
    generated_paths(root)  # each one present
    if tracked is not None:
        # What git holds is exactly what the generator writes: nothing stale committed, nothing missing.
        assert written_files_of(tracked) == expected_files(SampleSpec())
    for name in RUN_NAMES:
        loss = _curve(root / name, "train/ploss_0")
        record = recorded["runs"][name]
        assert len(loss) == record["steps"]
        assert loss[0] == pytest.approx(record["first_ploss_0"], rel=1e-6)
    assert (root / "README.md").read_text() == readme_text(recorded)


def written_files_of(relative: list[str]) -> list[str]:
    """``written_files``' form (event file names folded to the pattern) of a list of relative paths."""
    folded = []
    for rel in relative:
        head, _, tail = rel.rpartition("/runs/")
        folded.append(f"{head}/runs/events.out.tfevents.*" if tail.startswith("events.out.tfevents.") else rel)
    return sorted(folded)


def test_committed_sample_runs_come_from_the_current_generator():
    assert_from_the_current_generator(COMMITTED, tracked_sample_files())


@pytest.mark.slow
def test_a_user_playing_in_sample_runs_breaks_no_test(tmp_path, capsys):
    """The README's walkthrough writes into sample_runs/: the remap (`m`, `y`) and the opposite fix.

    Done here in a copy standing for the user's sample_runs/: the tests' view of it must not change.
    """
    played = copy_samples(tmp_path / "sample_runs")
    before = written_files(played)
    run = played / "vocab-mismatch"
    drafter, mapping = played / "_drafters" / "drafter-a", next((run / "cache" / "vocab_mapping").glob("*.pt"))
    assert cli.main(["remap", str(drafter), "--mapping", str(mapping), "--target", str(played / "_target")]) == 0
    assert cli.main(["remap", str(drafter), "--mapping", str(mapping), "--keep-checkpoint-mapping"]) == 0
    (played / "notes.txt").write_text("what I tried\n")
    capsys.readouterr()
    assert written_files(played) != before  # the user's files are there
    assert_from_the_current_generator(played, None)
    copy = copy_samples(tmp_path / "copy", source=played)
    assert written_files(copy) == before
    assert_curve_shapes(copy, SampleSpec())


def test_committed_sample_runs_curve_shapes(pristine):
    assert_curve_shapes(pristine, SampleSpec())


def test_committed_sample_runs_size_budget(pristine):
    total = sum(p.stat().st_size for p in pristine.rglob("*") if p.is_file())
    assert total < 30 * 1024 * 1024


def test_committed_sample_runs_scan_flags(pristine, capsys):
    capsys.readouterr()
    cli.main(["scan", str(pristine), "--json"])
    runs = {Path(r["path"]).name: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert set(runs) == set(RUN_NAMES)
    kinds = {name: {f["kind"] for f in run["flags"]} for name, run in runs.items()}
    # a finished run opened later may be "stalled" (info); nothing about its curves is flagged
    assert kinds["healthy"] <= {"stalled", "plateau"}, kinds["healthy"]
    assert {"loss_above_chance", "accuracy_at_chance"} <= kinds["vocab-mismatch"]
    assert {"loss_above_chance", "accuracy_at_chance"} <= kinds["verifier-mask"]
    assert "accuracy_at_chance" in kinds["hidden-state-format"]
    assert "non_finite" in kinds["diverged"]


def readme_rows(readme: str) -> dict[str, tuple[int, str, str, str]]:
    """The README table: run -> (steps, first ploss, last ploss, last accuracy) as written."""
    rows = {}
    for match in re.finditer(r"^\| `([\w-]+)/` \| [^|]+ \| (\d+) \| ([\d.]+) -> ([\w.]+) \| ([\d.]+) \|", readme, re.M):
        rows[match.group(1)] = (int(match.group(2)), match.group(3), match.group(4), match.group(5))
    return rows


def test_committed_readme_numbers_are_what_scan_reads(pristine, capsys):
    """Every number sample_runs/README.md states is what `triage scan --json` reads from the runs,
    the chance line first: the one the TUI and scan draw, not ln V."""
    readme = (pristine / "README.md").read_text()
    capsys.readouterr()
    cli.main(["scan", str(pristine), "--json"])
    runs = {Path(r["path"]).name: r for r in json.loads(capsys.readouterr().out)["runs"]}
    rows = readme_rows(readme)
    assert set(rows) == set(runs) == set(RUN_NAMES)
    lines = {ChanceLine(run["vocab_size"], run["valid_fraction"]).label() for run in runs.values()}
    assert len(lines) == 1, lines  # one world, one chance line
    (line,) = lines
    assert f"The chance line `triage` draws for every run here is {line}:" in " ".join(readme.split()), readme
    for name, run in runs.items():
        steps, first, last, accuracy = rows[name]
        loss, acc = run["metrics"]["loss"], run["metrics"]["accuracy"]
        assert steps == run["last_step"] == loss["count"], name
        assert last == ("NaN" if loss["last"] is None else f"{loss['last']:.2f}"), name
        assert accuracy == f"{acc['last']:.3f}", name
        assert float(first) == pytest.approx(float(_curve(pristine / name, "train/ploss_0")[0]), abs=0.005), name


@pytest.mark.slow
def test_committed_sample_runs_check_names_each_cause_first(pristine, triage):
    assert_diagnoses(pristine, triage)


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``, from /proc (field 4 of /proc/PID/stat)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended while listed
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _sigint_blocked_or_ignored(pid: int) -> bool:
    """Whether SIGINT (signal 2: bit 1) is in /proc/PID/status's SigBlk or SigIgn mask."""
    masks = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
    return any(int(masks[name], 16) & (1 << (2 - 1)) for name in ("SigBlk", "SigIgn"))


def test_one_ctrl_c_stops_samples_quietly_and_keeps_the_old_runs(tmp_path):
    """An interrupted `triage samples --out DIR` leaves DIR as it was: no worker tracebacks, exit 130.

    Ctrl-C goes to the terminal's whole process group, so the signal is sent to the group here too,
    once the new tree is being built (its hidden sibling exists) and the workers are training.
    """
    import os
    import signal
    import subprocess
    import sys

    out = tmp_path / "sample_runs"
    (out / "healthy").mkdir(parents=True)
    (out / "GENERATED.json").write_text("{}\n")
    (out / "healthy" / "old-run.txt").write_text("the runs a user had\n")
    before = written_files(out)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    # A terminal's foreground job takes Ctrl-C. Started as a shell's background job (`pytest ... &`),
    # the tests inherit SIGINT ignored, and exec keeps an ignored signal ignored: a handler here
    # (exec resets a handled signal to the default) gives the child what a terminal gives it.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "triage_tui.cli", "samples", "--small", "--out", str(out), "--jobs", "2"],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
    finally:
        signal.signal(signal.SIGINT, inherited)
    stderr_lines = []
    for line in process.stderr:  # progress lines; interrupt once the workers train
        stderr_lines.append(line)
        if "processes" in line:
            break
    assert list(tmp_path.glob(".triage-samples-sample_runs-*")), "the new tree is built beside, hidden"
    assert written_files(out) == before, "nothing replaced while building"
    # The workers are still starting (importing torch) when the line is printed: a Ctrl-C now must
    # not reach them, whose interpreters have no handler yet. The kernel says what each one holds.
    workers = _children(process.pid)
    assert workers, "the workers are started before the line"
    assert all(_sigint_blocked_or_ignored(pid) for pid in workers), workers
    os.killpg(process.pid, signal.SIGINT)
    rest = process.stderr.read()
    assert process.wait(timeout=60) == 130
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest, rest
    assert "interrupted" in rest
    assert written_files(out) == before and (out / "healthy" / "old-run.txt").read_text() == "the runs a user had\n"
    assert not list(tmp_path.glob(".triage-samples-*")), "the half-built tree is removed"


def test_loss_above_chance_does_not_raise_the_mapping_when_the_mappings_agree(pristine, triage):
    """verifier-mask: its loss sits above chance, but the vocab check finds 32000 / 32000 positions
    agreeing: the symptom then carries no weight for the mapping hypothesis (it is a note)."""
    status, report = check_json(pristine / "verifier-mask", triage)
    vocab = report["checks"]["vocab_mapping"]
    assert vocab["status"] == "pass" and vocab["positional_match"] == vocab["draft_vocab_size"] == 32000
    mapping = next(h for h in report["hypotheses"] if h["id"] == "vocab_mapping_mismatch")
    assert mapping["score"] == 0.0, mapping
    assert any(line.startswith("run flag loss_above_chance") and "agreement" in line for line in mapping["evidence"])
    assert status == 1 and report["hypotheses"][0]["id"] == "verifier_mask_mismatch"
