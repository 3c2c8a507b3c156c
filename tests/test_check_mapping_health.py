"""Mapping health at real sizes (32 000 draft ids of a 163 840-token target) on checkpoints written by
SpecForge's own ``LlamaForCausalLMEagle3.save_pretrained`` (tests/builders/contracts.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from builders.contracts import DRAFT_VOCAB, TARGET_VOCAB, hot_ids, specforge_drafter, strip_mapping, vocab_mapping_file
from triage_tui.core.diagnose.checks.mapping_health import MappingHealthDetails, SavedMapping, check_mapping_health
from triage_tui.core.formats.checkpoint import read_checkpoint
from triage_tui.core.formats.hidden_states import read_dumps
from triage_tui.core.formats.mapping import read_mapping


@pytest.fixture(scope="module")
def mappings(tmp_path_factory):
    root = tmp_path_factory.mktemp("mappings")
    return vocab_mapping_file(root / "a.pt", seed=1), vocab_mapping_file(root / "b.pt", seed=2)


def _saved(path, role="run checkpoint"):
    return SavedMapping.of(read_checkpoint(path), role)


def _details(result) -> MappingHealthDetails:
    assert isinstance(result.details, MappingHealthDetails)
    return result.details


def test_a_run_whose_checkpoints_keep_one_mapping_is_healthy(tmp_path, mappings):
    a, _ = mappings
    saved = [_saved(specforge_drafter(tmp_path / f"epoch_0_step_{s}", mapping=a)) for s in (100, 200)]
    result = check_mapping_health(saved, read_mapping(a), target_vocab_size=TARGET_VOCAB)
    details = _details(result)
    assert result.status == "pass" and details.findings == ()
    assert [step.changed_positions for step in details.drift] == [0]
    assert details.run_mapping_identity is False
    json.dumps(details.to_json())


def test_a_resume_that_regenerated_the_mapping_is_named_with_its_size(tmp_path, mappings):
    a, b = mappings
    paths = [
        specforge_drafter(tmp_path / "epoch_0_step_100", mapping=a),
        specforge_drafter(tmp_path / "epoch_0_step_200", mapping=a),
        specforge_drafter(tmp_path / "epoch_1_step_300", mapping=b),  # resumed, mapping rebuilt from new data
        specforge_drafter(tmp_path / "epoch_1_step_400", mapping=b),
    ]
    expected = int(np.count_nonzero(hot_ids(a) != hot_ids(b)))
    assert 0.9 * DRAFT_VOCAB < expected < DRAFT_VOCAB  # sorted vocabs from other data differ almost everywhere
    result = check_mapping_health([_saved(p) for p in paths], read_mapping(b), target_vocab_size=TARGET_VOCAB)
    details = _details(result)
    (drift,) = details.found("mapping_drift")
    assert result.status == "fail"
    assert details.first_drift is not None and details.first_drift.later == str(paths[2])
    assert (drift.positions, drift.of_positions) == (expected, DRAFT_VOCAB)
    assert f"{expected} of {DRAFT_VOCAB}" in drift.message and "epoch_1_step_300" in drift.message
    assert [s.changed_positions for s in details.drift] == [0, expected, 0]
    assert details.to_json()["first_drift"] == str(paths[2])


def test_a_checkpoint_exported_without_its_mapping(tmp_path, mappings):
    a, _ = mappings
    root = specforge_drafter(tmp_path / "export", mapping=a)
    strip_mapping(root)  # NeMo Automodel PR #2447: the mapping only in a side file
    torch.save(torch.load(a, weights_only=True), root / "vocab_mapping.pt")
    run_mapping = read_mapping(root / "vocab_mapping.pt")
    result = check_mapping_health([_saved(root)], run_mapping, target_vocab_size=TARGET_VOCAB)
    (finding,) = _details(result).found("mapping_not_in_checkpoint")
    moved = int(np.count_nonzero(hot_ids(a) != np.arange(DRAFT_VOCAB)))
    assert result.status == "fail" and (finding.positions, finding.of_positions) == (moved, DRAFT_VOCAB)
    assert f"the first {DRAFT_VOCAB} ids" in finding.message and f"target's {TARGET_VOCAB}" in finding.message
    assert finding.link == "https://github.com/NVIDIA-NeMo/Automodel/pull/2447"


def test_a_full_vocab_drafter_needs_no_mapping(tmp_path):
    vocab = 4096
    root = specforge_drafter(tmp_path / "full", mapping=None, vocab=vocab, draft=vocab)
    strip_mapping(root)
    without = check_mapping_health([_saved(root)], target_vocab_size=vocab)
    assert without.status == "pass" and _details(without).findings == ()
    # SpecForge's default buffers on a full-vocab drafter: all-zero d2t is right (SafeAILab/EAGLE #222).
    identity = check_mapping_health(
        [_saved(specforge_drafter(tmp_path / "zeros", mapping=None, vocab=vocab, draft=vocab))],
        target_vocab_size=vocab,
    )
    assert identity.status == "pass" and _details(identity).findings == ()


def test_specforge_default_buffers_are_the_identity_mapping(tmp_path):
    root = specforge_drafter(tmp_path / "never_loaded", mapping=None)  # load_vocab_mapping never called
    checkpoint = read_checkpoint(root)
    assert not checkpoint.mapping.d2t().any()  # all-zero offsets ...
    assert np.array_equal(checkpoint.mapping.hot_ids, np.arange(DRAFT_VOCAB))  # ... are the identity
    dumps_root = tmp_path / "hidden_states" / "rows_0-2"
    dumps_root.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    for i in range(2):
        ids = torch.randint(0, TARGET_VOCAB, (64,), generator=g)
        torch.save(
            {
                "input_ids": ids,
                "loss_mask": torch.ones(64, dtype=torch.long),
                "hidden_state": torch.randn(1, 64, 16, generator=g).bfloat16(),
                "aux_hidden_state": torch.randn(1, 64, 48, generator=g).bfloat16(),
            },
            dumps_root / f"data_{i}.ckpt",
        )
    dumps = read_dumps(tmp_path / "hidden_states")
    outside = sum(int((s.input_ids >= DRAFT_VOCAB).sum()) for s in dumps.samples)
    result = check_mapping_health([SavedMapping.of(checkpoint, "run checkpoint")], dumps=dumps)
    (finding,) = _details(result).found("identity_mapping")
    assert result.status == "fail"
    assert "target ids 0..31999, the first 32000 of 163840" in finding.message
    assert "t2d marks all 163840 tokens" in finding.message and finding.default_buffers  # t2d = ones(V)
    assert (finding.positions, finding.of_positions) == (outside, 128)
    assert finding.link == "https://github.com/verl-project/verl-SpeCo/pull/66"


def test_the_runs_own_identity_mapping_is_reported_once(tmp_path):
    root = specforge_drafter(tmp_path / "never_loaded", mapping=None)
    run_mapping = read_mapping(root)  # the run labelled with the same buffers
    result = check_mapping_health([_saved(root)], run_mapping, target_vocab_size=TARGET_VOCAB)
    assert len(_details(result).found("identity_mapping")) == 1
    assert _details(result).run_mapping_identity is True


def test_an_unreadable_checkpoint_is_an_error_not_a_crash(tmp_path):
    saved = SavedMapping.unreadable(tmp_path / "x", "run checkpoint", "no weights here")
    assert check_mapping_health([saved]).status == "error"
    assert check_mapping_health([]).status == "skipped"
