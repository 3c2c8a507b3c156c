"""The vocab-mapping check on the story's full-size mappings and on the edges of its threshold."""

import json

import numpy as np
import pytest

from builders.check_run import details_of
from builders.mappings import DRAFT_VOCAB, ONLY_IN_CHECKPOINT, OVERLAP, POSITIONAL_MATCH, TARGET_VOCAB, story_mappings
from triage_tui.core.diagnose.checks.vocab import (
    MIN_POSITIONAL_MATCH_FRACTION,
    Mismatch,
    VocabDetails,
    check_vocab_mapping,
)
from triage_tui.core.vocab import VocabMapping


@pytest.fixture(scope="module")
def story():
    return story_mappings()


def test_story_mappings_report_the_story_numbers(story):
    checkpoint, run = story
    result = check_vocab_mapping(checkpoint, run)
    d = details_of(result, VocabDetails)
    assert result.status == "fail"
    assert (d.positional_match, d.draft_vocab_size) == (POSITIONAL_MATCH, DRAFT_VOCAB)
    assert d.target_vocab_size == TARGET_VOCAB
    assert d.overlap == OVERLAP
    assert d.only_in_checkpoint == ONLY_IN_CHECKPOINT
    assert d.only_in_run == DRAFT_VOCAB - OVERLAP
    assert d.positional_match_fraction == pytest.approx(252 / 32000)
    assert "252 / 32000" in result.summary
    # Every checkpoint row is either in place, moved, or has no place in the run's vocab.
    moves = d.checkpoint_positions_in_run
    assert moves.same == POSITIONAL_MATCH
    assert moves.dropped == ONLY_IN_CHECKPOINT
    assert moves.same + moves.moved + moves.dropped == DRAFT_VOCAB
    # The story's layout moves every shared token 6 250 places later.
    assert moves.median_shift == ONLY_IN_CHECKPOINT
    for pair in moves.sample:
        old, new = pair
        assert run.hot_ids[new] == checkpoint.hot_ids[old]
    # The first mismatches are the first positions where the hot ids differ, with both ids.
    first = d.first_mismatches
    assert len(first) == 50
    expected_positions = np.flatnonzero(checkpoint.hot_ids != run.hot_ids)[:50]
    assert [m.draft_id for m in first] == expected_positions.tolist()
    assert first[0].checkpoint_target_id == int(checkpoint.hot_ids[expected_positions[0]])
    assert first[0].run_target_id == int(run.hot_ids[expected_positions[0]])
    json.dumps(result.to_json())  # the check --json contract: plain JSON values only


def test_identical_mappings_pass(story):
    checkpoint, _ = story
    same = VocabMapping(checkpoint.hot_ids.copy(), TARGET_VOCAB, source="copy")
    result = check_vocab_mapping(checkpoint, same)
    details = details_of(result, VocabDetails)
    assert result.status == "pass"
    assert details.positional_match == DRAFT_VOCAB
    assert details.only_in_checkpoint == details.only_in_run == 0
    assert details.first_mismatches == ()


def test_threshold_separates_a_few_differing_rows_from_a_different_mapping():
    base = np.arange(0, 2 * DRAFT_VOCAB, 2, dtype=np.int64)  # ascending, like SpecForge's
    allowed = int(DRAFT_VOCAB * (1 - MIN_POSITIONAL_MATCH_FRACTION))
    few = base.copy()
    few[-allowed:] += 1  # the rarest tokens swapped for their neighbours: still ascending
    result = check_vocab_mapping(VocabMapping(base, TARGET_VOCAB), VocabMapping(few, TARGET_VOCAB))
    details = details_of(result, VocabDetails)
    assert result.status == "pass"
    assert details.positional_match == DRAFT_VOCAB - allowed
    assert f"{allowed} differ" in result.summary
    many = base.copy()
    many[-(allowed + 1) :] += 1
    result = check_vocab_mapping(VocabMapping(base, TARGET_VOCAB), VocabMapping(many, TARGET_VOCAB))
    assert result.status == "fail"


def test_missing_mappings_are_skipped_with_the_reason(story):
    checkpoint, run = story
    no_d2t = check_vocab_mapping(None, run)
    assert no_d2t.status == "skipped"
    assert "d2t" in no_d2t.summary and "identity" in no_d2t.summary and "#2447" in no_d2t.summary
    no_run = check_vocab_mapping(checkpoint, None)
    assert no_run.status == "skipped" and "--mapping" in no_run.summary


def test_token_strings_label_the_mismatches(story):
    checkpoint, run = story
    strings = {int(t): f"tok{int(t)}" for t in np.concatenate([checkpoint.hot_ids, run.hot_ids])}
    first = details_of(check_vocab_mapping(checkpoint, run, token_strings=strings), VocabDetails).first_mismatches[0]
    assert first.checkpoint_token == f"tok{first.checkpoint_target_id}"
    assert first.run_token == f"tok{first.run_target_id}"


def test_different_draft_vocab_sizes_fail_and_name_both(story):
    checkpoint, _ = story
    smaller = VocabMapping(checkpoint.hot_ids[:16000], TARGET_VOCAB)
    result = check_vocab_mapping(checkpoint, smaller)
    details = details_of(result, VocabDetails)
    assert result.status == "fail"
    assert "checkpoint 32000, run 16000" in result.summary
    # Rows past the shorter vocab disagree too: there is no row there on the run's side.
    assert details.positional_match == 16000
    assert details.first_mismatches[0] == Mismatch(
        draft_id=16000,
        checkpoint_target_id=int(checkpoint.hot_ids[16000]),
        run_target_id=None,
        checkpoint_token=None,
        run_token=None,
    )
