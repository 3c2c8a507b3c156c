"""Replay check on files written by the real writers, at the story's sizes (163 840 target, 32 000 draft).

The world: a synthetic target whose next-token argmax is a fixed successor of the current
token (its last hidden state points at the successor's lm_head row), token sequences that
follow the successor 90 % of the time, and aux states that are three different fixed
functions of the current token ("low/mid/high layers"). A drafter is trained on CPU with
SpecForge's own loss under the checkpoint's mapping (``core/drafter.py``; its head starts
from the target's rows and stays frozen, as speculators trains it), saved with
``safetensors.torch.save_file``, and read back with the real readers. Nothing below is
built to pass: the drafter has to learn, and the replay has to find what it learned.
"""

from __future__ import annotations

import json
import math
import threading

import numpy as np
import pytest
import torch

from builders.check_run import details_of
from builders.mappings import DRAFT_VOCAB, TARGET_VOCAB, story_mappings
from builders.replay import (
    World,
    drafter_config,
    train_drafter,
    write_specforge_checkpoint,
    write_specforge_dumps,
    write_speculators_checkpoint,
    write_speculators_dumps,
    write_target,
)
from triage_tui.core.diagnose.checks.replay import CHUNK_ORDERS, ReplayDetails, replay_accuracy, run_replay
from triage_tui.core.drafter import (
    Eagle3Drafter,
    load_drafter,
)
from triage_tui.core.formats.checkpoint import read_checkpoint
from triage_tui.core.formats.hidden_states import read_dumps
from triage_tui.core.formats.target import read_target
from triage_tui.core.vocab import VocabMapping

CHANCE = math.log(DRAFT_VOCAB)


@pytest.fixture(scope="module")
def world() -> World:
    return World()


@pytest.fixture(scope="module")
def files(world: World, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("replay")
    drafter, accs = train_drafter(world)
    return {
        "drafter": drafter,
        "train_acc": accs,
        "checkpoint": write_specforge_checkpoint(drafter, root / "drafter"),
        "speculators_checkpoint": write_speculators_checkpoint(drafter, world, root / "drafter_speculators"),
        "target": write_target(world, root / "target"),
        "dumps": write_specforge_dumps(world, root / "hidden_states", samples=6),
        "speculators_dumps": write_speculators_dumps(world, root / "speculators_hs", samples=4),
    }


@pytest.fixture(scope="module")
def story(files) -> tuple:
    checkpoint = read_checkpoint(files["checkpoint"])
    _, run_mapping = story_mappings()
    inputs = (checkpoint, read_dumps(files["dumps"]), read_target(files["target"]), checkpoint.mapping, run_mapping)
    return inputs, run_replay(*inputs, device="cpu", max_tokens=400)


def test_drafter_learned_its_task(files):
    accs = files["train_acc"]
    assert np.mean(accs[:5]) < 0.2 < 0.8 < np.mean(accs[-10:])


def test_story_case_high_under_own_mapping_zero_under_the_runs(story):
    _, result = story
    d = details_of(result, ReplayDetails)
    assert result.name == "replay" and result.status == "fail", result.summary
    assert d.tokens == 400 and d.device == "cpu" and d.label_source == "target"
    assert d.accuracy_checkpoint_mapping >= 0.8
    assert d.accuracy_run_mapping <= 0.02
    # the loss the run would log: far above chance (ln 32000), because the drafter is sure of
    # the wrong rows; under its own mapping it is low
    assert d.loss_run_mapping > CHANCE and d.loss_checkpoint_mapping < CHANCE / 2
    assert "under the run's" in result.summary
    json.dumps(result.to_json())  # JSON-ready


def test_identity_chunk_order_is_best(story):
    inputs, stored_result = story
    stored_only = details_of(stored_result, ReplayDetails)
    # By default only the order the dumps store is replayed (one drafter pass, not six).
    assert stored_only.accuracy_by_chunk_order == {"0,1,2": stored_only.accuracy_checkpoint_mapping}
    result = run_replay(*inputs, device="cpu", max_tokens=400, all_chunk_orders=True)
    details = details_of(result, ReplayDetails)
    assert details.accuracy_checkpoint_mapping == stored_only.accuracy_checkpoint_mapping
    assert details.loss_run_mapping == stored_only.loss_run_mapping
    by_order = details.accuracy_by_chunk_order
    assert set(by_order) == {",".join(map(str, o)) for o in CHUNK_ORDERS}
    assert by_order["0,1,2"] == details.accuracy_checkpoint_mapping
    assert all(by_order["0,1,2"] > acc for order, acc in by_order.items() if order != "0,1,2")
    assert min(by_order.values()) < by_order["0,1,2"] - 0.1
    assert details.best_chunk_order == "0,1,2"


def test_same_numbers_on_a_repeated_run(story):
    inputs, first = story
    again = run_replay(*inputs, device="cpu", max_tokens=400)
    assert again.to_json() == first.to_json()


def test_same_mapping_both_sides_passes_with_equal_accuracy(story):
    (checkpoint, dumps, target, ckpt_mapping, _), first = story
    result = run_replay(checkpoint, dumps, target, ckpt_mapping, ckpt_mapping, device="cpu", max_tokens=200)
    d = details_of(result, ReplayDetails)
    assert result.status == "pass"
    assert d.accuracy_run_mapping == d.accuracy_checkpoint_mapping >= 0.8
    assert d.loss_run_mapping == d.loss_checkpoint_mapping


def test_untrained_drafter_sits_at_chance_under_both_mappings(files, world, tmp_path):
    torch.manual_seed(1)
    fresh = Eagle3Drafter(drafter_config())
    with torch.no_grad():
        fresh.d2t.copy_(torch.as_tensor(world.checkpoint_mapping.d2t()))
        fresh.t2d.copy_(torch.as_tensor(world.checkpoint_mapping.t2d()))
    checkpoint = read_checkpoint(write_specforge_checkpoint(fresh, tmp_path / "fresh"))
    result = run_replay(
        checkpoint,
        read_dumps(files["dumps"]),
        read_target(files["target"]),
        checkpoint.mapping,
        world.run_mapping,
        device="cpu",
        max_tokens=200,
    )
    d = details_of(result, ReplayDetails)
    assert result.status == "pass" and "poorly" in result.summary
    assert d.accuracy_checkpoint_mapping < 0.02 and d.accuracy_run_mapping < 0.02
    assert abs(d.loss_checkpoint_mapping - CHANCE) < 1.0 and abs(d.loss_run_mapping - CHANCE) < 1.0


def test_remapped_rows_recover_accuracy_under_the_runs_mapping(files, world):
    """What the remap proof measures: lm_head rows moved into the run's order score under the run's mapping."""
    drafter = load_drafter(read_checkpoint(files["checkpoint"]))
    dumps, target = read_dumps(files["dumps"]), read_target(files["target"])
    before = replay_accuracy(drafter, dumps, target, world.run_mapping, device="cpu", max_tokens=200)
    own = replay_accuracy(drafter, dumps, target, world.checkpoint_mapping, device="cpu", max_tokens=200)
    old_position = world.checkpoint_mapping.draft_position_of()[world.run_mapping.hot_ids]
    state = {k: v.clone() for k, v in drafter.state_dict().items()}
    moved = old_position >= 0
    state["lm_head.weight"][torch.as_tensor(np.flatnonzero(moved))] = drafter.lm_head.weight[
        torch.as_tensor(old_position[moved])
    ]
    state["lm_head.weight"][torch.as_tensor(np.flatnonzero(~moved))] = 0.0
    remapped = Eagle3Drafter.from_state_dict(drafter.config, state)
    after = replay_accuracy(remapped, dumps, target, world.run_mapping, device="cpu", max_tokens=200)
    assert before <= 0.02 and own >= 0.8
    # every label token is in both vocabs, so the moved rows make the same predictions; only
    # the checkpoint-only rows (zeroed) can no longer be predicted, wrongly or not
    assert after >= own - 0.01


def test_speculators_checkpoint_without_target_labels_with_next_tokens(files, world):
    checkpoint = read_checkpoint(files["speculators_checkpoint"])
    assert any(name.startswith("layers.0.") for name in checkpoint.tensors)
    result = run_replay(
        checkpoint,
        read_dumps(files["dumps"]),
        None,
        checkpoint.mapping,
        world.run_mapping,
        device="cpu",
        max_tokens=200,
    )
    d = details_of(result, ReplayDetails)
    assert d.label_source == "input_ids" and d.loss_checkpoint_mapping is None
    # the drafter predicts the target's successor; the text follows it 90 % of the time
    assert d.accuracy_checkpoint_mapping >= 0.6 and d.accuracy_run_mapping <= 0.02
    assert result.status == "fail"
    assert any("next tokens" in line for line in result.evidence)


def test_prenorm_speculators_dumps_get_the_targets_final_norm(files, world, story):
    checkpoint = read_checkpoint(files["checkpoint"])
    dumps = read_dumps(files["speculators_dumps"])
    assert dumps.target_hidden_is_post_norm is False
    result = run_replay(
        checkpoint,
        dumps,
        read_target(files["target"]),
        checkpoint.mapping,
        world.run_mapping,
        device="cpu",
        max_tokens=200,
    )
    details = details_of(result, ReplayDetails)
    assert details.label_source == "target"
    assert details.accuracy_checkpoint_mapping >= 0.8, result.summary


def test_skipped_and_error_cases(files, world, tmp_path):
    checkpoint = read_checkpoint(files["checkpoint"])
    dumps, target = read_dumps(files["dumps"]), read_target(files["target"])
    assert run_replay(None, dumps, target, None, world.run_mapping).status == "skipped"
    assert run_replay(checkpoint, None, target, None, world.run_mapping).status == "skipped"
    two_chunks = read_dumps(write_specforge_dumps(world, tmp_path / "two_chunks", samples=1, aux_chunks=2))
    bad = run_replay(checkpoint, two_chunks, target, checkpoint.mapping, world.run_mapping, device="cpu")
    assert bad.status == "error" and "data_0.ckpt" in bad.summary and "128" in bad.summary
    small = VocabMapping.identity(1000, TARGET_VOCAB, source="small.pt")
    wrong = run_replay(checkpoint, dumps, target, checkpoint.mapping, small, device="cpu")
    assert wrong.status == "error" and "1000" in wrong.summary


def test_progress_and_cancel(files, world):
    checkpoint = read_checkpoint(files["checkpoint"])
    dumps, target = read_dumps(files["dumps"]), read_target(files["target"])
    seen: list[tuple[float, str]] = []
    run_replay(
        checkpoint,
        dumps,
        target,
        checkpoint.mapping,
        world.run_mapping,
        device="cpu",
        max_tokens=150,
        progress=lambda f, m: seen.append((f, m)),
    )
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(seen) >= 2
    assert all(m.startswith("replay: ") for _, m in seen)
    stop = threading.Event()
    stop.set()
    cancelled = run_replay(checkpoint, dumps, target, checkpoint.mapping, world.run_mapping, device="cpu", cancel=stop)
    assert cancelled.status == "skipped" and "cancelled" in cancelled.summary


def test_dump_token_ids_outside_the_target_vocab_are_an_error_naming_the_file(files, world, tmp_path):
    """An embedding lookup past the vocab was an IndexError traceback; it is the check's error,
    naming the dump, and the other checks go on."""
    checkpoint = read_checkpoint(files["checkpoint"])
    root = write_specforge_dumps(world, tmp_path / "foreign", samples=1)
    dump = next(root.rglob("data_0.ckpt"))
    data = torch.load(dump, weights_only=True)
    data["input_ids"][5] = TARGET_VOCAB + 7
    torch.save(data, dump)
    result = run_replay(
        checkpoint, read_dumps(root), read_target(files["target"]), checkpoint.mapping, world.run_mapping, device="cpu"
    )
    assert result.status == "error" and str(dump) in result.summary
    assert f"..{TARGET_VOCAB + 7} fall outside the target embedding's" in result.summary
