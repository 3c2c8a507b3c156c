"""Flags on curves written by torch's SummaryWriter and read back by core.read.events.

The story's curve (docs/case.md): ploss 18-20, accuracy 2-7 %, V = 32 000.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from builders.curves import STEPS, T0, story_series
from builders.events import read_event_file
from builders.tensorboard import write_scalars
from triage_tui.core.read.runs.manifest import Manifest, load_manifest
from triage_tui.core.watch.derive import RunSettings, derive, flags_at
from triage_tui.core.watch.signals.chance import named_drafter_config, resolve_vocab_size
from triage_tui.core.watch.signals.tags import is_summed_loss, pick_metric_tags
from triage_tui.core.watch.watcher import Watcher

V = 32_000
LN_V = math.log(V)  # 10.37
CHANCE_KINDS = {"loss_at_chance", "loss_above_chance", "accuracy_at_chance"}


def curve_file(tmp_path: Path, series: dict[str, np.ndarray], steps: np.ndarray = STEPS) -> Path:
    return write_scalars(
        tmp_path,
        {tag: list(zip(steps.tolist(), values.tolist(), strict=True)) for tag, values in series.items()},
        wall_time=T0,
    )


def flags_for(tmp_path, series, *, steps=STEPS, vocab_size=V, now=None, manifest=None, seen_live=False):
    """The run's flags as the watcher derives them (core.watch.derive), ``now`` a second after the last point."""
    scalars = read_event_file(curve_file(tmp_path, series, steps))
    derived = derive(scalars, RunSettings(vocab_size=vocab_size, manifest=manifest))
    now = T0 + float(steps[-1]) + 1.0 if now is None else now
    return flags_at(derived, now=now, seen_live=seen_live)


def by_kind(flags):
    return {flag.kind: flag for flag in flags}


# ----------------------------------------------------------------- the three chance flags


def test_story_curve_is_above_chance_with_accuracy_at_chance(tmp_path):
    flags = flags_for(tmp_path, story_series())
    kinds = by_kind(flags)

    assert set(kinds) == {"loss_above_chance", "accuracy_at_chance"}
    above = kinds["loss_above_chance"]
    assert above.severity == "critical" and above.tag == "train/ploss_0"
    assert above.step == STEPS[5]  # first point past warm-up (5 points and 100 steps)
    assert 18.0 <= above.value <= 20.0
    assert "above ln 32000 = 10.37" in above.message and f"step {above.step}" in above.message
    accuracy = kinds["accuracy_at_chance"]
    assert accuracy.tag == "train/acc_0" and accuracy.severity == "critical"
    assert 2.0 <= float(accuracy.message.split(" = ")[1].split(" %")[0]) <= 7.0


def test_loss_sitting_at_ln_v_is_at_chance(tmp_path):
    rng = np.random.default_rng(1)
    series = {
        "train/ploss_0": LN_V + rng.normal(0, 0.05, len(STEPS)),
        "train/acc_0": rng.uniform(0.0, 0.01, len(STEPS)),
    }
    kinds = by_kind(flags_for(tmp_path, series))
    assert set(kinds) == {"loss_at_chance", "accuracy_at_chance"}
    assert kinds["loss_at_chance"].severity == "critical"
    assert "at chance ln 32000 = 10.37" in kinds["loss_at_chance"].message


def test_healthy_run_falling_well_below_ln_v_raises_none_of_them(tmp_path):
    rng = np.random.default_rng(2)
    loss = 3.0 + (LN_V - 3.0) * np.exp(-STEPS / 300.0) + rng.normal(0, 0.08, len(STEPS))
    accuracy = 0.7 * (1 - np.exp(-STEPS / 300.0)) + rng.normal(0, 0.01, len(STEPS))
    flags = flags_for(tmp_path, {"train/ploss_0": loss, "train/acc_0": accuracy})
    assert not CHANCE_KINDS & set(by_kind(flags))
    assert all(flag.severity != "critical" for flag in flags)


def test_from_scratch_run_still_descending_from_ln_v_is_not_at_chance(tmp_path):
    steps = np.arange(0, 420, 20)
    loss = LN_V + 0.1 - 1.0 * steps / steps[-1]  # 10.47 -> 9.47, inside the band, falling
    kinds = by_kind(flags_for(tmp_path, {"train/ploss_0": loss}, steps=steps))
    assert "loss_at_chance" not in kinds


def test_warm_up_keeps_a_young_run_unflagged(tmp_path):
    steps = np.arange(0, 250, 50)  # 5 points, all inside warm-up
    kinds = by_kind(flags_for(tmp_path, {"train/ploss_0": np.full(5, 19.0)}, steps=steps))
    assert not CHANCE_KINDS & set(kinds)


def test_chance_line_follows_the_vocab_size(tmp_path):
    # 11.0 is inside the band for V = 32 000 (up to 11.41) but above ln 8 000 + 1 = 9.99.
    series = {"train/ploss_0": np.full(len(STEPS), 11.0)}
    assert "loss_at_chance" in by_kind(flags_for(tmp_path / "a", series, vocab_size=32_000))
    above = by_kind(flags_for(tmp_path / "b", series, vocab_size=8_000))["loss_above_chance"]
    assert "ln 8000 = 8.99" in above.message


def test_percent_accuracy_is_read_as_percent(tmp_path):
    rng = np.random.default_rng(3)
    series = {"train/ploss_0": np.full(len(STEPS), 3.0), "accuracy": rng.uniform(2.0, 7.0, len(STEPS))}
    accuracy = by_kind(flags_for(tmp_path, series))["accuracy_at_chance"]
    assert 2.0 <= accuracy.value <= 7.0


# ----------------------------------------------------------------- other flags


def test_nan_is_non_finite_at_the_step_it_appeared(tmp_path):
    loss = np.linspace(10.0, 3.0, len(STEPS))
    loss[20:] = np.nan
    loss[25] = np.inf
    later = np.linspace(0.1, 0.6, len(STEPS))
    later[30:] = np.nan
    healthy = np.linspace(0.1, 0.6, len(STEPS))
    series = {"train/ploss_0": loss, "train/ploss_1": loss.copy(), "train/acc_0": later, "train/acc_1": healthy}
    flags = flags_for(tmp_path, series)
    assert [f.kind for f in flags].count("non_finite") == 1  # one flag for the blow-up, not one per tag
    flag = by_kind(flags)["non_finite"]
    assert flag.severity == "critical" and flag.tag == "train/ploss_0"
    assert flag.step == STEPS[20] and math.isnan(flag.value)
    loss_before = float(np.float32(loss[19]))  # the writer stores float32
    assert flag.message == (
        f"train/ploss_0 = nan at step 1000, after 20 finite points (last {loss_before:.4g} at step 950) "
        "(21 of 41 points not finite; also in 2 other tags)"
    )
    assert not flag.from_start
    assert flag.to_json()["value"] is None  # JSON has no NaN


def test_nan_from_the_first_logged_step_is_told_apart(tmp_path):
    """speculators #238: loss_k = nan from the first step while the accuracies stay finite."""
    loss = np.full(len(STEPS), np.nan)
    accuracy = np.full(len(STEPS), 0.002)
    flags = flags_for(tmp_path, {"train/loss_0": loss, "train/loss_1": loss.copy(), "train/full_acc_0": accuracy})
    flag = by_kind(flags)["non_finite"]
    assert flag.from_start and flag.step == 0 and flag.tag == "train/loss_0"
    assert flag.message == (
        "train/loss_0 = nan from its first logged step 0 (never finite before) "
        "(41 of 41 points not finite; also in 1 other tag)"
    )


def test_inf_in_accuracy_alone_is_non_finite(tmp_path):
    accuracy = np.linspace(0.1, 0.6, len(STEPS))
    accuracy[7] = np.inf
    flags = flags_for(tmp_path, {"train/ploss_0": np.linspace(6.0, 3.0, len(STEPS)), "train/acc_0": accuracy})
    flag = by_kind(flags)["non_finite"]
    assert (flag.tag, flag.step, flag.value) == ("train/acc_0", STEPS[7], math.inf)


def test_divergence_after_learning(tmp_path):
    steps = np.arange(0, 3050, 50)
    loss = np.where(steps <= 1500, 10.0 - 8.0 * steps / 1500, 2.0 + 6.0 * (steps - 1500) / 1500)
    flags = flags_for(tmp_path, {"train/ploss_0": loss}, steps=steps)
    diverging = by_kind(flags)["diverging"]
    assert diverging.severity == "critical"
    assert 1500 < diverging.step < 2500
    assert "best was 2" in diverging.message


def test_one_spike_is_not_a_divergence(tmp_path):
    loss = np.linspace(6.0, 2.0, len(STEPS))
    loss[-1] = 12.0
    assert "diverging" not in by_kind(flags_for(tmp_path, {"train/ploss_0": loss}))


def test_plateau_is_info(tmp_path):
    steps = np.arange(0, 5000, 50)
    loss = np.where(steps < 2000, 6.0 - 3.0 * steps / 2000, 3.0)
    flag = by_kind(flags_for(tmp_path, {"train/ploss_0": loss}, steps=steps))["plateau"]
    assert flag.severity == "info" and "flat at 3" in flag.message


@pytest.mark.parametrize(
    "silence, seen_live, expected",
    [
        (100.0, False, None),  # within the writer's 120 s flush interval
        (170.0, False, None),  # within flush + margin
        (600.0, False, "warning"),  # 10 minutes: stopped recently
        (3 * 86400.0, False, "info"),  # a post-mortem on a run that ended days ago
        (3 * 86400.0, True, "warning"),  # it stopped while we were watching
    ],
)
def test_stall_is_measured_against_now(tmp_path, silence, seen_live, expected):
    series = {"train/ploss_0": np.linspace(10.0, 3.0, len(STEPS))}
    last_wall = T0 + float(STEPS[-1])
    flags = flags_for(tmp_path, series, now=last_wall + silence, seen_live=seen_live)
    stalled = by_kind(flags).get("stalled")
    assert (stalled.severity if stalled else None) == expected
    if stalled and expected == "warning":
        assert "no new data for 10 min" in stalled.message or seen_live


def test_stall_threshold_grows_with_the_runs_own_gaps(tmp_path):
    steps = np.arange(0, 41) * 600  # one point every 10 minutes
    series = {"train/ploss_0": np.linspace(10.0, 3.0, len(steps))}
    quiet = flags_for(tmp_path, series, steps=steps, now=T0 + steps[-1] + 1200.0)  # 2 gaps late
    assert "stalled" not in by_kind(quiet)


# ----------------------------------------------------------------- tags and vocab size


def test_summed_ttt_loss_is_never_the_primary_or_compared_with_chance(tmp_path):
    rng = np.random.default_rng(4)
    n = len(STEPS)
    plosses = [np.linspace(6.0, 2.0, n) + i * 0.2 for i in range(7)]
    series = {f"train/ploss_{i}": p for i, p in enumerate(plosses)}
    # 0.8-weighted sum over 7 steps: ~14 -> ~9 falls *through* the band; per step it is healthy.
    series["train/loss"] = sum(0.8**i * p for i, p in enumerate(plosses)) + rng.normal(0, 0.01, n)
    scalars = read_event_file(curve_file(tmp_path, series))
    loss_tags, _ = pick_metric_tags(scalars.tags())
    assert loss_tags[0] == "train/ploss_0" and loss_tags[-1] == "train/loss"
    assert is_summed_loss("train/loss", scalars.tags())
    # Only a triage.toml can make it the primary (and is then trusted): discovered, it is never compared.
    derived = derive(scalars, RunSettings(vocab_size=V))
    assert derived.loss_tag == "train/ploss_0"
    assert not CHANCE_KINDS & set(by_kind(flags_at(derived, now=T0 + 2001)))  # no chance flag from it


def test_plain_train_loss_without_step_siblings_is_compared_with_chance(tmp_path):
    series = {"train/loss": np.full(len(STEPS), LN_V), "train/loss_scale": np.full(len(STEPS), 65536.0)}
    flags = flags_for(tmp_path, series)
    assert by_kind(flags)["loss_at_chance"].tag == "train/loss"


def test_tag_choice_for_each_trainer():
    specforge = [
        "train/lr",
        "train/ploss_1",
        "train/ploss_0",
        "train/acc_1",
        "train/acc_0",
        "eval/ploss_0",
        "train/acceptance_rate_0",
        "train/loss",
        "train/acc",
        "train/grad_norm",
    ]
    loss, accuracy = pick_metric_tags(specforge)
    assert loss[:3] == ["train/ploss_0", "eval/ploss_0", "train/ploss_1"] and loss[-1] == "train/loss"
    assert accuracy[0] == "train/acc_0" and "train/acceptance_rate_0" not in accuracy

    speculators = [
        "train/loss",
        "train/loss_0",
        "train/loss_1",
        "train/full_acc_0",
        "train/cond_acc_1",
        "val/loss_epoch",
        "val/full_acc_0_epoch",
        "lr",
        "epoch",
    ]
    loss, accuracy = pick_metric_tags(speculators)
    assert loss[0] == "train/loss_0" and loss[-1] == "train/loss"
    assert accuracy[0] == "train/full_acc_0"

    generic = ["loss", "accuracy", "lr", "loss_scale"]
    assert pick_metric_tags(generic) == (["loss"], ["accuracy"])


def test_manifest_tags_override_discovery():
    manifest = Manifest(Path("/r/triage.toml"), loss_tags=("custom/xent",), accuracy_tags=("custom/top1",))
    assert pick_metric_tags(["train/ploss_0", "train/acc_0"], manifest) == (["custom/xent"], ["custom/top1"])


def test_vocab_size_flag_beats_manifest_beats_config_beats_default():
    manifest = Manifest(Path("/r/triage.toml"), vocab_size=64_000)
    config = {"vocab_size": 163_840, "draft_vocab_size": 32_000}
    assert resolve_vocab_size(16_000, manifest, config) == (16_000, "flag")
    assert resolve_vocab_size(None, manifest, config) == (64_000, "manifest")
    assert resolve_vocab_size(None, None, config) == (32_000, "config.json")
    assert resolve_vocab_size(None, None, {"vocab_size": 128_256}) == (128_256, "config.json")
    assert resolve_vocab_size(None, Manifest(Path("/r/triage.toml")), None) == (32_000, "default")
    assert resolve_vocab_size(None, None, {"draft_vocab_size": "32000"}) == (32_000, "default")


def test_the_named_drafter_says_v_only_when_nothing_closer_does():
    drafter = {"vocab_size": 163_840, "draft_vocab_size": 1_000}
    assert resolve_vocab_size(None, None, None, drafter_config=drafter) == (1_000, "drafter config.json")
    assert resolve_vocab_size(None, None, None, wandb_vocab=8_000, drafter_config=drafter) == (8_000, "wandb config")
    assert resolve_vocab_size(None, None, None, 4_000, drafter_config=drafter) == (4_000, "training_state.pt")
    assert resolve_vocab_size(None, None, {"draft_vocab_size": 2_000}, drafter_config=drafter) == (2_000, "config.json")
    assert resolve_vocab_size(
        None, Manifest(Path("/r/triage.toml"), vocab_size=3_000), None, drafter_config=drafter
    ) == (
        3_000,
        "manifest",
    )
    assert resolve_vocab_size(None, None, None, drafter_config={"draft_vocab_size": True}) == (32_000, "default")


def test_a_run_that_names_a_modelopt_drafter_of_1000_tokens_is_at_chance_at_ln_1000(tmp_path, modelopt_exports):
    """triage.toml names ModelOpt's export (draft_vocab_size 1 000); the run's HF Trainer loss sits at
    ln 1 000 = 6.91. With ln 32 000 it is only a plateau; from the drafter's config it is at chance."""
    drafter = modelopt_exports[2] / "drafter"
    run = tmp_path / "run"
    run.mkdir()
    (run / "triage.toml").write_text(f'[run]\ncheckpoint = "{drafter}"\n')
    manifest = load_manifest(run / "triage.toml")
    problems: list[str] = []
    vocab, source = resolve_vocab_size(None, manifest, None, drafter_config=named_drafter_config(manifest, problems))
    assert (vocab, source, problems) == (1_000, "drafter config.json", [])
    noise = np.random.default_rng(0).normal(0, 0.01, len(STEPS))
    series = {"train/loss": math.log(1_000) + noise}
    assert "plateau" in by_kind(flags_for(tmp_path / "default", series))
    assert "loss_at_chance" not in by_kind(flags_for(tmp_path / "default", series))
    assert "loss_at_chance" in by_kind(flags_for(tmp_path / "drafter", series, vocab_size=vocab))
    # What `scan` and the TUI's watcher say of that run (the product's path, not only the rule's).
    write_scalars(
        run,
        {"train/loss": [(int(step), float(value)) for step, value in zip(STEPS, series["train/loss"], strict=True)]},
    )
    (report,) = [status.to_json() for status in Watcher([run], use_watchdog=False, strict=True).poll_once()]
    assert (report["vocab_size"], report["vocab_size_source"]) == (1_000, "drafter config.json")
    assert "loss_at_chance" in {flag["kind"] for flag in report["flags"]} and report["errors"] == []
    # A weights file names its directory's config.json; a directory without one says nothing.
    (run / "triage.toml").write_text(f'[run]\ncheckpoint = "{drafter / "model.safetensors"}"\n')
    assert named_drafter_config(load_manifest(run / "triage.toml"))["draft_vocab_size"] == 1_000
    (run / "triage.toml").write_text('[run]\ncheckpoint = "elsewhere"\n')
    assert named_drafter_config(load_manifest(run / "triage.toml")) is None
