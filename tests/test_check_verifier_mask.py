"""The verifier-mask check: t2d invariants, frequency-ordered d2t, and the verifier's argmax coverage."""

import json
from collections import Counter

import numpy as np
import pytest
import torch

from builders.check_run import details_of
from builders.mappings import DRAFT_VOCAB, TARGET_VOCAB, story_mappings
from triage_tui.core.diagnose.checks.verifier_mask import VerifierMaskDetails, check_verifier_mask
from triage_tui.core.vocab import VocabMapping


@pytest.fixture(scope="module")
def story():
    return story_mappings()


def _frequency_ordered(seed: int = 0) -> VocabMapping:
    """modelopt's calibrate_frequent_vocab: draft order = frequency order, offsets may be negative."""
    rng = np.random.default_rng(seed)
    tokens = rng.zipf(1.2, size=400_000) % TARGET_VOCAB
    top = [token for token, _ in Counter(tokens.tolist()).most_common(DRAFT_VOCAB)]
    assert len(top) == DRAFT_VOCAB
    hot = np.asarray(top, dtype=np.int64)
    d2t = hot - np.arange(DRAFT_VOCAB)
    return VocabMapping.from_d2t(d2t, TARGET_VOCAB, source="modelopt d2t.pt")


def _by_name(result, name):
    return next(i for i in details_of(result, VerifierMaskDetails).invariants if i.name == name)


def test_story_masks_hold_their_invariants_and_differ_from_each_other(story):
    checkpoint, run = story
    sorted_run = VocabMapping(run.hot_ids, TARGET_VOCAB, stored_t2d=run.t2d())
    result = check_verifier_mask(checkpoint, sorted_run)
    details = details_of(result, VerifierMaskDetails)
    assert result.status == "pass"
    differ = _by_name(result, "checkpoint t2d == run t2d")
    # 6 250 tokens only in each vocab: 12 500 target ids change membership.
    assert not differ.ok and not differ.required
    assert details.t2d_differing_target_ids == 12_500
    assert _by_name(result, "run: t2d.sum() == draft_vocab_size").ok
    assert _by_name(result, "run: hot ids strictly ascending").ok
    json.dumps(result.to_json())
    # A pass with an invariant unmet says why it passes, and no line reads as "equal: they differ".
    assert result.summary.startswith("9 / 10 mask invariants hold, all 8 required ones among them;")
    said = "checkpoint t2d == run t2d does not hold: 12500 target ids differ in membership"
    assert said in result.summary and list(result.evidence) == [said + " (the vocab_mapping check explains why)"]


def test_frequency_ordered_d2t_with_a_t2d_mask_fails_and_really_misaligns(story):
    checkpoint, _ = story
    frequency = _frequency_ordered()
    masked = VocabMapping(frequency.hot_ids, TARGET_VOCAB, stored_t2d=frequency.t2d(), source="d2t + t2d")
    result = check_verifier_mask(checkpoint, masked)
    assert result.status == "fail"
    ascending = _by_name(result, "run: hot ids strictly ascending")
    assert not ascending.ok and ascending.required
    assert "ascending" in result.summary
    # What the invariant protects: SpecForge's target_p columns are target_logits[..., t2d];
    # draft row j stands for hot_ids[j]. They agree only where the order happens to coincide.
    logits = torch.randn(TARGET_VOCAB)
    columns = logits[torch.from_numpy(masked.stored_t2d.copy())]
    rows = logits[torch.from_numpy(masked.hot_ids.copy())]
    aligned = float((columns == rows).float().mean())
    assert aligned < 0.01
    # The mask itself is consistent with d2t: only the order is wrong.
    assert _by_name(result, "run: stored t2d == mask built from d2t").ok
    assert _by_name(result, "run: t2d.sum() == draft_vocab_size").ok


def test_frequency_ordered_d2t_without_a_mask_is_fine_for_d2t_gathering(story):
    checkpoint, _ = story
    result = check_verifier_mask(checkpoint, _frequency_ordered())
    ascending = _by_name(result, "run: hot ids strictly ascending")
    assert not ascending.ok and not ascending.required
    assert result.status == "pass"


def test_a_short_mask_and_a_stale_mask_fail(story):
    _, run = story
    # SafeAILab/EAGLE #248: only 1746 tokens selected for a 32 000-row head.
    short = np.zeros(TARGET_VOCAB, dtype=bool)
    short[run.hot_ids[:1746]] = True
    result = check_verifier_mask(None, VocabMapping(run.hot_ids, TARGET_VOCAB, stored_t2d=short))
    assert result.status == "fail"
    total = _by_name(result, "run: t2d.sum() == draft_vocab_size")
    assert not total.ok and "1746" in total.detail
    stale = _by_name(result, "run: stored t2d == mask built from d2t")
    assert not stale.ok and f"{DRAFT_VOCAB - 1746} target ids differ" in stale.detail


def test_duplicate_and_out_of_range_hot_ids_fail(story):
    _, run = story
    broken = run.hot_ids.copy()
    broken[5] = broken[4]
    broken[-1] = TARGET_VOCAB + 7
    # Without a run mapping the trainer keeps the checkpoint's buffers: those are checked.
    result = check_verifier_mask(VocabMapping(broken, TARGET_VOCAB), None)
    details = details_of(result, VerifierMaskDetails)
    assert result.status == "fail"
    names = {i.name for i in details.invariants if not i.ok}
    prefix = "checkpoint (no run mapping): "
    assert {
        prefix + "hot ids unique",
        prefix + "hot ids within the target vocab",
        prefix + "t2d.sum() == draft_vocab_size",
    } <= names


def test_no_mapping_is_skipped():
    assert check_verifier_mask(None, None).status == "skipped"


def test_share_of_verifier_argmaxes_outside_the_draft_vocab(story, tmp_path):
    """Real SpecForge dumps and a full-vocab target head whose argmax at each position is known."""
    from safetensors.torch import save_file

    from triage_tui.core.formats.hidden_states import read_dumps
    from triage_tui.core.formats.target import read_target

    checkpoint, run = story
    hidden, tokens = 64, 300
    generator = torch.Generator().manual_seed(7)
    head = torch.nn.functional.normalize(torch.randn(TARGET_VOCAB, hidden, generator=generator), dim=-1)
    target_dir = tmp_path / "target"
    target_dir.mkdir()
    save_file(
        {"model.embed_tokens.weight": head.clone(), "lm_head.weight": head, "model.norm.weight": torch.ones(hidden)},
        str(target_dir / "model.safetensors"),
    )
    (target_dir / "config.json").write_text(
        json.dumps(
            {"vocab_size": TARGET_VOCAB, "hidden_size": hidden, "num_hidden_layers": 8, "tie_word_embeddings": False}
        )
    )
    # Labels: 2 in 3 from the run's draft vocab, the rest from outside it.
    rng = np.random.default_rng(3)
    outside_run = np.flatnonzero(~run.t2d())
    labels = np.where(np.arange(tokens) % 3 == 2, rng.choice(outside_run, tokens), rng.choice(run.hot_ids, tokens))
    states = 10.0 * head[torch.from_numpy(labels)]  # post-norm last hidden pointing at its label's row
    loss_mask = np.ones(tokens, dtype=np.int64)
    loss_mask[:40] = 0  # the prompt: not trained, not counted
    dumps_dir = tmp_path / "dumps" / "rows_0-1"
    dumps_dir.mkdir(parents=True)
    torch.save(
        {
            "input_ids": torch.from_numpy(labels),
            "loss_mask": torch.from_numpy(loss_mask),
            "hidden_state": states[None],
            "aux_hidden_state": torch.randn(1, tokens, 3 * hidden),
        },
        dumps_dir / "data_0.ckpt",
    )
    target, dumps = read_target(target_dir), read_dumps(tmp_path / "dumps")
    seen = []
    result = check_verifier_mask(checkpoint, run, dumps=dumps, target=target, progress=lambda f, m: seen.append((f, m)))
    details = details_of(result, VerifierMaskDetails)
    outside = details.target_argmax_outside_draft_vocab
    trained = labels[40:]
    assert (head @ states[40:].T).argmax(0).numpy().tolist() == trained.tolist()  # the construction holds
    assert outside.tokens == tokens - 40
    assert outside.run == pytest.approx(float(np.mean(~run.t2d()[trained])))
    assert outside.checkpoint == pytest.approx(float(np.mean(~checkpoint.t2d()[trained])))
    assert 0.3 < outside.run < 0.37
    assert seen and all(m.startswith("verifier_mask:") for _, m in seen) and seen[-1][0] == 1.0
    assert "outside the run's draft vocab" in result.summary
