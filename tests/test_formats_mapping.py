"""read_mapping / write_mapping_* on every on-disk form, built with each project's own algorithm."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from builders.drafter import drafter_config, drafter_state, write_drafter
from builders.mappings import DRAFT_VOCAB, TARGET_VOCAB, story_mappings
from triage_tui.core.errors import BadInput
from triage_tui.core.formats.mapping import read_mapping, write_mapping_npy, write_mapping_pt
from triage_tui.core.vocab import VocabMapping


def zipf_tokens(seed: int, count: int = 400_000) -> np.ndarray:
    """Loss-masked token ids with a long tail, so that some ids never appear."""
    rng = np.random.default_rng(seed)
    ranks = rng.zipf(1.15, count)
    ranks = ranks[ranks < TARGET_VOCAB]
    permutation = rng.permutation(TARGET_VOCAB)
    return permutation[ranks]


def specforge_mapping(tokens: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """specforge/data/preprocessing.py process_token_dict_to_mappings, verbatim in spirit."""
    token_dict = Counter(tokens.tolist())
    if len(token_dict) < DRAFT_VOCAB:
        for token in set(range(DRAFT_VOCAB)) - set(token_dict.keys()):
            token_dict[token] = 0
            if len(token_dict) >= DRAFT_VOCAB:
                break
    used_tokens = [key for key, _freq in token_dict.most_common(DRAFT_VOCAB)]
    used_tokens.sort()
    d2t = [used_tokens[i] - i for i in range(len(used_tokens))]
    used = set(used_tokens)
    t2d = [i in used for i in range(TARGET_VOCAB)]
    return torch.tensor(d2t), torch.tensor(t2d)


def speculators_mapping(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """speculators build_vocab_mappings_from_distribution: ties to lower id, sorted, offsets."""
    freq = Counter(tokens.tolist())
    ordered = sorted(freq, key=lambda tid: (-freq[tid], tid))
    selected = ordered[:DRAFT_VOCAB]
    if len(selected) < DRAFT_VOCAB:  # pad with ids 0.. that were not seen
        seen = set(selected)
        selected += [t for t in range(TARGET_VOCAB) if t not in seen][: DRAFT_VOCAB - len(selected)]
    selected.sort()
    d2t = torch.tensor(selected, dtype=torch.long) - torch.arange(DRAFT_VOCAB, dtype=torch.long)
    t2d = torch.zeros(TARGET_VOCAB, dtype=torch.bool)
    t2d[selected] = True
    return d2t.numpy(), t2d.numpy()


@pytest.fixture(scope="module")
def tokens():
    return zipf_tokens(7)


def test_specforge_vocab_mapping_pt(tmp_path, tokens):
    d2t, t2d = specforge_mapping(tokens)
    path = tmp_path / "cache" / "vocab_mapping" / "5f1c0e.pt"
    path.parent.mkdir(parents=True)
    torch.save({"d2t": d2t, "t2d": t2d}, path)
    mapping = read_mapping(path)
    assert mapping.draft_vocab_size == DRAFT_VOCAB and mapping.target_vocab_size == TARGET_VOCAB
    np.testing.assert_array_equal(mapping.hot_ids, np.flatnonzero(t2d.numpy()))
    assert mapping.is_ascending() and mapping.notes == ()
    assert mapping.source == str(path)


def test_eagle_cache_pt_in_a_directory(tmp_path, tokens):
    d2t, t2d = specforge_mapping(tokens)
    torch.save({"d2t": d2t, "t2d": t2d}, tmp_path / "cache.pt")
    mapping = read_mapping(tmp_path)
    np.testing.assert_array_equal(mapping.d2t(), d2t.numpy())


def test_speculators_npy_pair_every_way_of_naming_it(tmp_path, tokens):
    d2t, t2d = speculators_mapping(tokens)
    np.save(tmp_path / "d2t.npy", d2t)
    np.save(tmp_path / "t2d.npy", t2d)
    expected = np.flatnonzero(t2d)
    for path in (tmp_path, tmp_path / "d2t.npy", tmp_path / "t2d.npy"):
        mapping = read_mapping(path)
        np.testing.assert_array_equal(mapping.hot_ids, expected)
        assert mapping.notes == ()
    sized = tmp_path / "sized"
    sized.mkdir()
    np.save(sized / f"d2t-{DRAFT_VOCAB}.npy", d2t)  # speculators PR #1081 names
    np.save(sized / f"t2d-{DRAFT_VOCAB}.npy", t2d)
    for path in (sized, sized / f"t2d-{DRAFT_VOCAB}.npy"):
        np.testing.assert_array_equal(read_mapping(path).hot_ids, expected)
    np.save(sized / "d2t-16000.npy", d2t[:16000])
    with pytest.raises(BadInput, match="several d2t files"):
        read_mapping(sized)


def test_t2d_alone_is_not_a_mapping(tmp_path, tokens):
    np.save(tmp_path / "t2d.npy", speculators_mapping(tokens)[1])
    with pytest.raises(BadInput, match="no d2t.npy next to it"):
        read_mapping(tmp_path / "t2d.npy")


def test_modelopt_bare_d2t_needs_a_vocab_size(tmp_path, tokens):
    # calibrate_frequent_vocab: most_common order, mapping[i] = vocab[i][0] - i
    top = [tid for tid, _ in Counter(tokens.tolist()).most_common(DRAFT_VOCAB)]
    d2t = torch.tensor(top, dtype=torch.int64) - torch.arange(len(top))
    (tmp_path / "draft_vocab_cache").mkdir()
    torch.save(d2t, tmp_path / "draft_vocab_cache" / "d2t.pt")
    with pytest.raises(BadInput, match=r"cannot tell the target vocab size; pass --target or a t2d"):
        read_mapping(tmp_path / "draft_vocab_cache" / "d2t.pt")
    mapping = read_mapping(tmp_path / "draft_vocab_cache", target_vocab_size=TARGET_VOCAB)
    np.testing.assert_array_equal(mapping.hot_ids, top)
    assert not mapping.is_ascending()
    assert any("frequency order" in n for n in mapping.notes)


def test_checkpoint_dir_buffers(tmp_path):
    checkpoint_mapping, _ = story_mappings()
    write_drafter(tmp_path, drafter_state("specforge", checkpoint_mapping), drafter_config("specforge"))
    assert read_mapping(tmp_path).sha256() == checkpoint_mapping.sha256()
    assert read_mapping(tmp_path / "model.safetensors").sha256() == checkpoint_mapping.sha256()


def test_checkpoint_without_d2t(tmp_path):
    write_drafter(tmp_path, drafter_state("specforge", None), drafter_config("specforge"))
    with pytest.raises(BadInput, match="checkpoint has no d2t buffer"):
        read_mapping(tmp_path)


def test_writers_round_trip_story_mappings_in_the_exact_forms(tmp_path):
    checkpoint_mapping, run_mapping = story_mappings()
    for mapping in (checkpoint_mapping, run_mapping):
        pt = write_mapping_pt(mapping, tmp_path / f"{mapping.source[6:]}.pt")
        raw = torch.load(pt, weights_only=True)
        assert set(raw) == {"d2t", "t2d"}
        assert raw["d2t"].dtype == torch.int64 and raw["d2t"].shape == (DRAFT_VOCAB,)
        assert raw["t2d"].dtype == torch.bool and raw["t2d"].shape == (TARGET_VOCAB,)
        # what sglang computes from it: hot_token_id = d2t + arange(Vd)
        np.testing.assert_array_equal((raw["d2t"] + torch.arange(DRAFT_VOCAB)).numpy(), mapping.hot_ids)
        assert int(raw["t2d"].sum()) == DRAFT_VOCAB
        assert read_mapping(pt).sha256() == mapping.sha256()

        out = tmp_path / f"npy-{mapping.source[6:]}"
        written = write_mapping_npy(mapping, out, sized_names=True)
        assert [p.name for p in written] == [f"d2t-{DRAFT_VOCAB}.npy", f"t2d-{DRAFT_VOCAB}.npy"]
        assert np.load(written[0]).dtype == np.int64 and np.load(written[1]).dtype == np.bool_
        assert read_mapping(out).sha256() == mapping.sha256()
        assert read_mapping(out).notes == ()
    plain = write_mapping_npy(run_mapping, tmp_path / "plain")
    assert [p.name for p in plain] == ["d2t.npy", "t2d.npy"]
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == ["d2t.npy", "t2d.npy"]  # no temp files left


def test_absolute_ids_stored_as_d2t_are_reported(tmp_path):
    _, run_mapping = story_mappings()
    # A hand-rolled export that saved the hot ids themselves under "d2t".
    torch.save(
        {"d2t": torch.from_numpy(run_mapping.hot_ids.copy()), "t2d": torch.from_numpy(run_mapping.t2d())},
        tmp_path / "absolute.pt",
    )
    mapping = read_mapping(tmp_path / "absolute.pt")
    np.testing.assert_array_equal(mapping.hot_ids, run_mapping.hot_ids + np.arange(DRAFT_VOCAB))  # not fixed
    assert any(n.startswith("d2t holds absolute target ids, not offsets") for n in mapping.notes)
    assert any(n.startswith("t2d disagrees with d2t") for n in mapping.notes)

    # Same without a t2d: the doubled ids run past the vocab.
    torch.save({"d2t": torch.from_numpy(run_mapping.hot_ids.copy())}, tmp_path / "absolute_no_t2d.pt")
    mapping = read_mapping(tmp_path / "absolute_no_t2d.pt", target_vocab_size=TARGET_VOCAB)
    assert any("d2t holds absolute target ids" in n and "past the target vocab" in n for n in mapping.notes)
    assert mapping.out_of_range().size > 0


def test_t2d_that_disagrees_with_d2t(tmp_path):
    checkpoint_mapping, run_mapping = story_mappings()
    # d2t of one mapping, t2d of the other: the stale-cache mix-up of SpecForge PR #602 / #534
    torch.save(
        {"d2t": torch.from_numpy(checkpoint_mapping.d2t().copy()), "t2d": torch.from_numpy(run_mapping.t2d())},
        tmp_path / "mixed.pt",
    )
    mapping = read_mapping(tmp_path / "mixed.pt")
    assert mapping.sha256() == checkpoint_mapping.sha256()  # the mapping is what d2t says
    assert (
        "t2d disagrees with d2t: 6250 tokens marked in t2d are not mapped by d2t, "
        "6250 tokens mapped by d2t are not marked in t2d"
    ) in mapping.notes


def test_t2d_sum_differs_from_draft_vocab(tmp_path):
    # EAGLE #248: fewer distinct tokens than Vd, no padding
    hot = np.arange(0, 2 * 1746, 2)
    d2t = np.zeros(DRAFT_VOCAB, dtype=np.int64)
    d2t[:1746] = hot - np.arange(1746)
    t2d = np.zeros(TARGET_VOCAB, dtype=bool)
    t2d[hot] = True
    torch.save({"d2t": torch.from_numpy(d2t), "t2d": torch.from_numpy(t2d)}, tmp_path / "cache.pt")
    mapping = read_mapping(tmp_path / "cache.pt")
    assert "t2d marks 1746 tokens but the draft vocab has 32000 (t2d.sum() != Vd)" in mapping.notes


def test_duplicates_and_vocab_size_argument_conflict(tmp_path):
    hot = np.arange(DRAFT_VOCAB)
    hot[100] = 99
    mapping = VocabMapping(hot, TARGET_VOCAB)
    torch.save(
        {"d2t": torch.from_numpy(mapping.d2t().copy()), "t2d": torch.from_numpy(mapping.t2d())}, tmp_path / "dup.pt"
    )
    got = read_mapping(tmp_path / "dup.pt", target_vocab_size=151_936)
    assert got.target_vocab_size == TARGET_VOCAB  # t2d length wins
    assert "t2d has 163840 entries but the target vocab size given is 151936" in got.notes
    assert "1 draft positions repeat a target id another position has" in got.notes


def test_int_t2d_is_accepted_with_a_note(tmp_path):
    _, run_mapping = story_mappings()
    torch.save(
        {
            "d2t": torch.from_numpy(run_mapping.d2t().copy()),
            "t2d": torch.from_numpy(run_mapping.t2d().astype(np.int64)),
        },
        tmp_path / "m.pt",
    )
    got = read_mapping(tmp_path / "m.pt")
    assert got.sha256() == run_mapping.sha256() and got.notes == ("t2d is stored as int64 0/1, not bool",)


@pytest.mark.parametrize(
    "payload, message",
    [
        (
            {"d2t": torch.zeros(DRAFT_VOCAB), "t2d": torch.ones(TARGET_VOCAB, dtype=torch.bool)},
            "d2t has dtype float32; expected integer offsets",
        ),
        ({"d2t": torch.zeros(1, DRAFT_VOCAB, dtype=torch.int64)}, r"d2t has shape \[1, 32000\]"),
        (
            {"d2t": torch.zeros(DRAFT_VOCAB, dtype=torch.int64), "t2d": torch.rand(TARGET_VOCAB)},
            "t2d has dtype float32; expected a bool mask",
        ),
        ({"t2d": torch.ones(TARGET_VOCAB, dtype=torch.bool)}, r"no 'd2t' in this file \(keys: t2d\)"),
        ([1, 2, 3], "holds a list"),
    ],
)
def test_malformed_mapping_files(tmp_path, payload, message):
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(BadInput, match=message) as err:
        read_mapping(tmp_path / "bad.pt", target_vocab_size=TARGET_VOCAB)
    assert err.value.path == str(tmp_path / "bad.pt")


def test_float_d2t_npy(tmp_path):
    np.save(tmp_path / "d2t.npy", np.zeros(DRAFT_VOCAB, dtype=np.float64))
    with pytest.raises(BadInput, match="d2t has dtype float64"):
        read_mapping(tmp_path)


def test_nothing_to_read(tmp_path):
    with pytest.raises(BadInput, match="no vocab mapping here"):
        read_mapping(tmp_path)
    with pytest.raises(BadInput, match="no such file"):
        read_mapping(tmp_path / "nope.pt")


def test_npy_declaring_more_than_the_file_holds_is_refused_before_allocating(tmp_path):
    """A d2t.npy whose header declares 8 TiB was a MemoryError traceback; one line now, nothing allocated."""
    from numpy.lib import format as npy_format

    path = tmp_path / "d2t.npy"
    with open(path, "wb") as f:
        npy_format.write_array_header_1_0(f, {"descr": "<i8", "fortran_order": False, "shape": (1 << 40,)})
        f.write(b"\0" * 64)
    declared = r"declares shape \[1099511627776\] \(8796093022208 bytes\) but the file holds 64"
    with pytest.raises(BadInput, match=declared):
        read_mapping(path, target_vocab_size=163_840)


def test_an_empty_t2d_is_named_as_such(tmp_path):
    """An empty t2d.npy read as "a target vocab of 0 tokens": the d2t was blamed (every position
    outside [0, 0)) and remap called it another target model. It is the t2d file, and it is empty."""
    np.save(tmp_path / "d2t.npy", np.zeros(DRAFT_VOCAB, dtype=np.int64))
    np.save(tmp_path / "t2d.npy", np.zeros(0, dtype=bool))
    for given in ("d2t.npy", "t2d.npy"):
        with pytest.raises(BadInput) as err:
            read_mapping(tmp_path / given)
        assert err.value.path == str(tmp_path / "t2d.npy")
        assert err.value.what == "t2d is empty: a verifier mask has one entry per target token"
    torch.save(
        {"d2t": torch.zeros(DRAFT_VOCAB, dtype=torch.int64), "t2d": torch.zeros(0, dtype=torch.bool)}, tmp_path / "m.pt"
    )
    with pytest.raises(BadInput, match="t2d is empty"):
        read_mapping(tmp_path / "m.pt")
