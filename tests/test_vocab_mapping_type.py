"""The shared VocabMapping type: offsets, masks and the story's mappings at full size."""

import numpy as np

from builders.mappings import DRAFT_VOCAB, OVERLAP, POSITIONAL_MATCH, TARGET_VOCAB, story_mappings
from triage_tui.core.vocab import VocabMapping


def test_story_mappings_have_the_story_counts():
    ckpt, run = story_mappings()
    assert ckpt.draft_vocab_size == run.draft_vocab_size == DRAFT_VOCAB
    assert ckpt.is_ascending() and run.is_ascending()
    assert int(np.sum(ckpt.hot_ids == run.hot_ids)) == POSITIONAL_MATCH
    assert len(np.intersect1d(ckpt.hot_ids, run.hot_ids)) == OVERLAP
    assert ckpt.t2d().sum() == DRAFT_VOCAB and ckpt.t2d().shape == (TARGET_VOCAB,)


def test_d2t_round_trip_and_identity():
    ckpt, _ = story_mappings()
    again = VocabMapping.from_d2t(ckpt.d2t(), TARGET_VOCAB)
    assert np.array_equal(again.hot_ids, ckpt.hot_ids)
    ident = VocabMapping.from_d2t(np.zeros(DRAFT_VOCAB, dtype=np.int64), TARGET_VOCAB)
    assert np.array_equal(ident.hot_ids, np.arange(DRAFT_VOCAB))
    assert ckpt.sha256() != ident.sha256()


def test_inverse_and_out_of_range():
    m = VocabMapping(np.array([5, 2, 9, 12]), 10)
    assert list(m.out_of_range()) == [3]
    inv = m.draft_position_of()
    assert inv[5] == 0 and inv[2] == 1 and inv[9] == 2 and inv[0] == -1
    assert not m.is_ascending()
