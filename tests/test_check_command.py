"""`triage check`: input resolution, JSON shape and exit codes on run directories built by the real writers.

Each run holds a drafter checkpoint (safetensors + config.json, 32 000 draft / 163 840 target
vocab), a SpecForge vocab mapping (``torch.save({"d2t", "t2d"})``), SpecForge hidden-state dumps,
a target model and TensorBoard events from ``SummaryWriter``.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch.utils.tensorboard import SummaryWriter

from builders.mappings import DRAFT_VOCAB, TARGET_VOCAB, story_mappings
from builders.samples import copy_samples
from triage_tui.core.check_inputs import resolve_inputs
from triage_tui.core.checks.registry import CHECK_NAMES
from triage_tui.core.diagnose import diagnose
from triage_tui.core.drafter import DrafterConfig, Eagle3Drafter
from triage_tui.core.errors import BadInput

HIDDEN = 64
LAYERS = 8
TOKENS = 48
REPO = Path(__file__).resolve().parents[1]


def write_drafter(root: Path, hot_ids: np.ndarray) -> Path:
    config = DrafterConfig(
        hidden_size=HIDDEN,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        draft_vocab_size=DRAFT_VOCAB,
        target_vocab_size=TARGET_VOCAB,
        target_hidden_size=HIDDEN,
        max_position_embeddings=512,
        aux_layer_ids=(1, 3, 4),
    )
    torch.manual_seed(0)
    state = {k: v.contiguous() for k, v in Eagle3Drafter(config).state_dict().items()}
    state["d2t"] = torch.from_numpy(hot_ids - np.arange(DRAFT_VOCAB))
    t2d = torch.zeros(TARGET_VOCAB, dtype=torch.bool)
    t2d[torch.from_numpy(hot_ids.copy())] = True
    state["t2d"] = t2d
    root.mkdir(parents=True)
    save_file(state, str(root / "model.safetensors"))
    (root / "config.json").write_text(json.dumps(config.to_config()))
    return root


def write_target(root: Path) -> Path:
    root.mkdir(parents=True)
    generator = torch.Generator().manual_seed(1)
    save_file(
        {
            "model.embed_tokens.weight": torch.randn(TARGET_VOCAB, HIDDEN, generator=generator).bfloat16(),
            "lm_head.weight": torch.randn(TARGET_VOCAB, HIDDEN, generator=generator).bfloat16(),
            "model.norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        },
        str(root / "model.safetensors"),
    )
    (root / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "vocab_size": TARGET_VOCAB,
                "hidden_size": HIDDEN,
                "num_hidden_layers": LAYERS,
                "tie_word_embeddings": False,
                "rms_norm_eps": 1e-5,
            }
        )
    )
    return root


def write_mapping(path: Path, hot_ids: np.ndarray) -> Path:
    """SpecForge cache/vocab_mapping/<key>.pt (specforge/data/preprocessing.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    t2d = torch.zeros(TARGET_VOCAB, dtype=torch.bool)
    t2d[torch.from_numpy(hot_ids.copy())] = True
    torch.save({"d2t": torch.from_numpy(hot_ids - np.arange(DRAFT_VOCAB)), "t2d": t2d}, path)
    return path


def write_dumps(root: Path, run_hot_ids: np.ndarray, target: Path, files: int = 2) -> Path:
    """SpecForge prepare_hidden_states.py files; the last hidden points at a next token in the run's vocab,
    as a target whose argmax the run's mapping was built from would."""
    from safetensors import safe_open

    with safe_open(str(target / "model.safetensors"), "pt") as weights:
        head = weights.get_tensor("lm_head.weight").float()
    group = root / f"rows_0-{files}"
    group.mkdir(parents=True)
    generator = torch.Generator().manual_seed(5)
    for i in range(files):
        ids = torch.from_numpy(np.random.default_rng(i).choice(run_hot_ids, TOKENS))
        aux = torch.cat([s * torch.randn(TOKENS, HIDDEN, generator=generator) for s in (1.0, 2.0, 4.0)], -1)
        last = head[torch.roll(ids, -1)]
        torch.save(
            {
                "input_ids": ids,
                "loss_mask": torch.ones(TOKENS, dtype=torch.int64),
                "hidden_state": last[None].bfloat16(),
                "aux_hidden_state": aux[None].bfloat16(),
            },
            group / f"data_{i}.ckpt",
        )
    return root


def write_events(log_dir: Path, losses, accuracies) -> None:
    writer = SummaryWriter(log_dir=str(log_dir))
    for i, (loss, acc) in enumerate(zip(losses, accuracies, strict=True)):
        writer.add_scalar("train/ploss_0", loss, global_step=50 * (i + 1))
        writer.add_scalar("train/acc_0", acc, global_step=50 * (i + 1))
    writer.close()


def build_run(tmp: Path, *, story: bool) -> Path:
    """A fine-tune directory: the story's (mappings disagree, loss 19) or a healthy one (same mapping)."""
    checkpoint_mapping, run_mapping = story_mappings()
    run_hot = run_mapping.hot_ids if story else checkpoint_mapping.hot_ids
    shared = tmp / "shared"
    if not shared.exists():
        write_drafter(shared / "drafters" / "k2", checkpoint_mapping.hot_ids)
        write_target(shared / "target")
    run = tmp / ("story" if story else "healthy")
    write_mapping(run / "cache" / "vocab_mapping" / "3f9a.pt", run_hot)
    write_dumps(run / "hidden_states", run_hot, shared / "target")
    (run / "triage.toml").write_text(
        '[run]\nvocab_size = 32000\ncheckpoint = "../shared/drafters/k2"\n'
        'mapping = "cache/vocab_mapping/3f9a.pt"\ndata = "hidden_states"\ntarget = "../shared/target"\n'
    )
    points = 30
    if story:  # docs/case.md: loss 18-20, accuracy 2-7 %
        losses = 19.0 + 0.8 * np.sin(np.arange(points))
        accuracies = 0.045 + 0.02 * np.cos(np.arange(points))
    else:
        losses = 2.0 + 4.0 * np.exp(-np.arange(points) / 8)
        accuracies = 0.7 - 0.4 * np.exp(-np.arange(points) / 8)
    write_events(run / "runs", losses, accuracies)
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("check")
    return {"story": build_run(tmp, story=True), "healthy": build_run(tmp, story=False)}


def triage(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "triage_tui", *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )


def test_story_run_json_shape_and_exit_1(runs):
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


def test_healthy_run_exits_0_and_text_output_lists_hypotheses_then_checks(runs):
    done = triage("check", str(runs["healthy"]), "--device", "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout
    assert text.index("hypotheses") < text.index("vocab_mapping_mismatch") < text.index("\nchecks")
    assert "vocab_mapping  pass" in text.replace("   ", "  ")
    # Exit 0 is the contract for "no hypothesis scored >= 0.5"; the text marks none with "!".
    assert not any(line.startswith("!") for line in text.splitlines())


def test_missing_run_is_bad_input_exit_2(tmp_path):
    done = triage("check", str(tmp_path / "nowhere"), "--json")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "nowhere" in done.stderr and "Traceback" not in done.stderr


def test_flag_overrides_the_manifest_and_a_bad_mapping_errors_only_its_checks(runs, tmp_path):
    story = runs["story"]
    own = tmp_path / "own.pt"
    write_mapping(own, story_mappings()[0].hot_ids)
    inputs = resolve_inputs(story, mapping=own)
    assert inputs.mapping == own and inputs.sources["mapping"] == "flag"
    assert inputs.sources["checkpoint"] == "triage.toml"
    diagnosis = diagnose(inputs, device="cpu")
    assert diagnosis.checks["vocab_mapping"].status == "pass"

    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a pickle at all")
    messages = []
    diagnosis = diagnose(resolve_inputs(story, mapping=garbage), device="cpu", progress=lambda f, m: messages.append(m))
    assert diagnosis.checks["vocab_mapping"].status == "error"
    assert "garbage.pt" in diagnosis.checks["vocab_mapping"].summary
    assert "\n" not in diagnosis.checks["vocab_mapping"].summary
    assert diagnosis.checks["verifier_mask"].status == "error"
    assert diagnosis.checks["hidden_state"].status == "pass"  # it needs no mapping
    assert {m.split(":")[0] for m in messages} == set(CHECK_NAMES)
    json.dumps(diagnosis.to_json())

    with pytest.raises(BadInput, match="--target"):
        resolve_inputs(story, target=tmp_path / "absent")


def test_training_state_args_then_discovery(tmp_path, runs):
    """No manifest: SpecForge's training_state.pt args name the start checkpoint, target and cache dir."""
    _, run_mapping = story_mappings()
    shared = runs["story"].parent / "shared"
    run = tmp_path / "out"
    write_mapping(run / "cache" / "vocab_mapping" / "key.pt", run_mapping.hot_ids)
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
    inputs = resolve_inputs(run)
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
    inputs = resolve_inputs(run)
    assert inputs.sources["checkpoint"] == "discovery" and inputs.sources["target"] == "training_state.pt"
    assert any("/data/elsewhere/k2" in note and "does not exist" in note for note in inputs.notes)
    # Paths the manifest gives win, and the training args behind them add no notes.
    (run / "triage.toml").write_text(
        f'[run]\ncheckpoint = "{shared / "drafters" / "k2"}"\ntarget = "{shared / "target"}"\n'
    )
    inputs = resolve_inputs(run)
    assert inputs.sources["checkpoint"] == "triage.toml" and inputs.sources["mapping"] == "training_state.pt"
    assert not any("elsewhere" in note for note in inputs.notes)
    (run / "triage.toml").unlink()

    # Without training_state.pt only the run's own checkpoints are left: the earliest one, said so.
    for step in (100, 200):
        (run / f"epoch_0_step_{step}" / "training_state.pt").unlink()
    inputs = resolve_inputs(run)
    assert inputs.checkpoint == run / "epoch_0_step_100" and inputs.sources["checkpoint"] == "discovery"
    assert any("earliest saved checkpoint" in note for note in inputs.notes)
    assert inputs.mapping == run / "cache" / "vocab_mapping" / "key.pt" and inputs.sources["mapping"] == "discovery"
    assert inputs.target is None and "target" not in inputs.sources


def test_a_directory_of_several_runs_is_bad_input(runs):
    parent = runs["story"].parent
    with pytest.raises(BadInput, match="holds 2 runs"):
        resolve_inputs(parent)
    # `triage check out/runs` means the run `out` (the log dir's parent): resolved, and said so.
    inputs = resolve_inputs(runs["story"] / "runs")
    assert inputs.run == runs["story"]


def test_an_unreadable_checkpoint_errors_its_checks_and_the_mask_check_still_runs(runs, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    (broken / "model.safetensors").write_bytes(b"\xff" * 64)
    diagnosis = diagnose(resolve_inputs(runs["story"], checkpoint=broken), device="cpu")
    for name in ("vocab_mapping", "hidden_state", "replay"):
        assert diagnosis.checks[name].status == "error", name
        assert "model.safetensors" in diagnosis.checks[name].summary
    assert diagnosis.checks["verifier_mask"].status == "pass"
    assert all(h.score < 0.5 for h in diagnosis.hypotheses)


def test_a_run_without_any_checkpoint_says_so_not_that_a_d2t_is_missing(tmp_path):
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
    command = resolve_inputs(run).fix_commands()[0]
    assert " --target " in command and " --data " in command
    assert [line.strip() for line in out.splitlines() if "fix:" in line] == [f"fix: {command}"]


def test_the_fix_line_follows_the_vocab_check_as_the_tuis_remap_key_does(tmp_path):
    """One rule for "a remap is called for" (Diagnosis.remap_blocker): the vocab check failed and
    both mapping files are known. A high mapping score with mappings that agree offers no remap."""
    from triage_tui.commands.check import render_text
    from triage_tui.core.check_inputs import CheckInputs
    from triage_tui.core.checks.vocab import check_vocab_mapping
    from triage_tui.core.diagnose import Diagnosis
    from triage_tui.core.hypotheses import Hypothesis

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


def test_nothing_to_check_is_exit_2_never_healthy(tmp_path):
    run = tmp_path / "scratch"
    write_events(run / "runs", [10.0] * 10, [0.01] * 10)  # a loss curve, no checkpoint, no mapping
    done = triage("check", str(run), "--json", "--device", "cpu")
    assert done.returncode == 2
    line = _one_line(done.stderr)
    assert line.startswith(f"triage check: {run / 'runs'}: nothing was checked") and "no drafter checkpoint" in line
    document = json.loads(done.stdout)  # the partial result is still there
    assert set(document["not_run"]) == set(CHECK_NAMES)


def test_every_check_errored_on_a_refused_pickle_is_exit_2(tmp_path):
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


def test_a_path_that_is_not_a_run_is_exit_2(tmp_path):
    (tmp_path / "notes.txt").write_text("not a run")
    done = triage("check", str(tmp_path))
    assert done.returncode == 2 and done.stdout == ""
    assert "not a run" in _one_line(done.stderr)
