"""read_checkpoint on drafters written the way SpecForge, EAGLE, speculators and modelopt write them.

The writers at the top build real key names and shapes (docs/formats.md section 1) with
safetensors.torch.save_file / torch.save; other format tests import them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from builders.drafter import HIDDEN, SPECFORGE_AUX, SPECULATORS_AUX, drafter_config, drafter_state, write_drafter
from builders.mappings import DRAFT_VOCAB, TARGET_VOCAB, story_mappings
from triage_tui.core.errors import BadInput
from triage_tui.core.formats import weights as weights_module
from triage_tui.core.formats.checkpoint import read_checkpoint
from triage_tui.core.vocab import VocabMapping


@pytest.fixture(scope="module")
def story():
    return story_mappings()


@pytest.fixture(scope="module")
def specforge_dir(tmp_path_factory, story):
    state = drafter_state("specforge", story[0])
    return write_drafter(tmp_path_factory.mktemp("specforge"), state, drafter_config("specforge")), state


def test_specforge_layout_sizes_and_mapping(specforge_dir, story):
    path, state = specforge_dir
    ckpt = read_checkpoint(path)
    assert ckpt.layout == "specforge" and ckpt.file_kind == "safetensors"
    assert ckpt.files == (path / "model.safetensors",)
    assert (ckpt.hidden_size, ckpt.draft_vocab_size, ckpt.target_vocab_size) == (HIDDEN, DRAFT_VOCAB, TARGET_VOCAB)
    assert ckpt.target_hidden_size == HIDDEN
    assert ckpt.aux_layer_ids == tuple(SPECFORGE_AUX)
    assert ckpt.lm_head_name == "lm_head.weight"
    assert ckpt.tensors["lm_head.weight"].shape == (DRAFT_VOCAB, HIDDEN)
    assert ckpt.tensors["t2d"].dtype == "bool" and ckpt.tensors["d2t"].dtype == "int64"
    assert ckpt.notes == ()
    assert ckpt.mapping is not None and ckpt.mapping.notes == ()
    np.testing.assert_array_equal(ckpt.mapping.hot_ids, story[0].hot_ids)
    assert ckpt.mapping.sha256() == story[0].sha256()
    np.testing.assert_array_equal(ckpt.mapping.stored_t2d, story[0].t2d())
    assert torch.equal(ckpt.tensor("lm_head.weight"), state["lm_head.weight"])


def test_metadata_read_loads_only_the_mapping_buffers(specforge_dir, monkeypatch):
    """The weights stay on disk: only d2t and t2d are read to build the mapping."""
    loaded = []
    for loader in ("load_safetensors_tensor", "load_safetensors_array"):  # the mapping is read with numpy
        real = getattr(weights_module, loader)
        monkeypatch.setattr(
            weights_module, loader, lambda path, name, real=real: loaded.append(name) or real(path, name)
        )
    ckpt = read_checkpoint(specforge_dir[0])
    assert sorted(loaded) == ["d2t", "t2d"]
    ckpt.tensor("norm.weight")
    assert loaded[-1] == "norm.weight" and len(loaded) == 3


def test_weights_file_path_is_accepted(specforge_dir, story):
    path, _ = specforge_dir
    ckpt = read_checkpoint(path / "model.safetensors")
    assert ckpt.path == path and ckpt.config["draft_vocab_size"] == DRAFT_VOCAB
    assert ckpt.mapping.sha256() == story[0].sha256()


def test_speculators_layout(tmp_path, story):
    state = drafter_state("speculators", story[1])
    write_drafter(tmp_path, state, drafter_config("speculators"))
    ckpt = read_checkpoint(tmp_path)
    assert ckpt.layout == "speculators"
    assert ckpt.hidden_size == HIDDEN  # config keeps it in transformer_layer_config
    assert ckpt.aux_layer_ids == tuple(SPECULATORS_AUX)  # top-level key
    assert ckpt.target_vocab_size == TARGET_VOCAB and ckpt.target_hidden_size == HIDDEN
    assert ckpt.tensors["embed_tokens.weight"].dtype == "bfloat16"
    assert ckpt.mapping.sha256() == story[1].sha256() and ckpt.notes == ()


def test_modelopt_layout_frequency_ordered_d2t(tmp_path):
    rng = np.random.default_rng(3)
    # modelopt calibrate_frequent_vocab: most_common order, d2t = id - i, no t2d
    frequency_order = rng.choice(TARGET_VOCAB, DRAFT_VOCAB, replace=False)
    mapping = VocabMapping(frequency_order, TARGET_VOCAB)
    write_drafter(tmp_path, drafter_state("modelopt", mapping), drafter_config("modelopt"))
    ckpt = read_checkpoint(tmp_path)
    assert ckpt.layout == "modelopt" and "t2d" not in ckpt.tensors
    assert ckpt.target_vocab_size == TARGET_VOCAB  # from config vocab_size
    np.testing.assert_array_equal(ckpt.mapping.hot_ids, frequency_order)
    assert ckpt.mapping.stored_t2d is None
    assert any("frequency order" in n for n in ckpt.mapping.notes)
    assert (ckpt.mapping.d2t() < 0).any()  # negative offsets are legal in this order


def test_eagle_pytorch_model_bin(tmp_path, story):
    state = drafter_state("specforge", story[0])
    config = drafter_config("specforge")
    config["architectures"] = ["LlamaForCausalLM"]  # EAGLE's config; sglang renames it
    write_drafter(tmp_path, state, config, file_kind="bin")
    for path in (tmp_path, tmp_path / "pytorch_model.bin"):
        ckpt = read_checkpoint(path)
        assert ckpt.file_kind == "bin" and ckpt.layout == "specforge"
        assert ckpt.tensors["fc.weight"].shape == (HIDDEN, 3 * HIDDEN)
        assert ckpt.mapping.sha256() == story[0].sha256()
        assert torch.equal(ckpt.tensor("fc.weight"), state["fc.weight"])


def test_sharded_safetensors_with_index(tmp_path, story):
    state = drafter_state("specforge", story[0])
    write_drafter(tmp_path, state, drafter_config("specforge"), file_kind="sharded")
    for path in (tmp_path, tmp_path / "model.safetensors.index.json"):
        ckpt = read_checkpoint(path)
        assert len(ckpt.files) == 2 and set(ckpt.tensors) == set(state)
        assert ckpt.mapping.sha256() == story[0].sha256()
        for name in ("lm_head.weight", "fc.weight"):
            assert torch.equal(ckpt.tensor(name), state[name])


def test_all_zero_d2t_is_identity(tmp_path):
    # EAGLE's default buffers: d2t zeros, t2d ones over the first Vd (EAGLE #222: Vicuna has Vd == V)
    vocab = 32000
    state = drafter_state("specforge", None, draft_vocab=vocab, target_vocab=vocab)
    state["d2t"] = torch.zeros(vocab, dtype=torch.int64)
    state["t2d"] = torch.ones(vocab, dtype=torch.bool)
    write_drafter(tmp_path, state, drafter_config("specforge", draft_vocab=vocab, target_vocab=vocab))
    mapping = read_checkpoint(tmp_path).mapping
    np.testing.assert_array_equal(mapping.hot_ids, np.arange(vocab))
    assert any("identity" in n for n in mapping.notes)


def test_no_d2t_means_no_mapping(tmp_path):
    state = drafter_state("specforge", None)
    write_drafter(tmp_path, state, drafter_config("specforge"))
    ckpt = read_checkpoint(tmp_path)
    assert ckpt.mapping is None and ckpt.draft_vocab_size == DRAFT_VOCAB
    assert ckpt.target_vocab_size == TARGET_VOCAB  # from config only


def test_target_hidden_size_from_fc(tmp_path, story):
    state = drafter_state("specforge", story[0], target_hidden=96)
    config = drafter_config("specforge")
    write_drafter(tmp_path, state, config)
    ckpt = read_checkpoint(tmp_path)
    assert ckpt.target_hidden_size == 96 and ckpt.hidden_size == HIDDEN


def test_config_disagreements_are_noted_not_fixed(tmp_path, story):
    state = drafter_state("specforge", story[0])
    config = drafter_config("specforge", draft_vocab=16000, target_hidden=128)
    config["eagle_aux_hidden_state_layer_ids"] = [2, 30, 58]
    write_drafter(tmp_path, state, config)
    ckpt = read_checkpoint(tmp_path)
    assert ckpt.draft_vocab_size == DRAFT_VOCAB and ckpt.target_hidden_size == HIDDEN
    assert ckpt.aux_layer_ids == (2, 30, 58)
    joined = "\n".join(ckpt.notes)
    assert "draft_vocab_size is 16000" in joined
    assert "target_hidden_size is 128" in joined
    assert "[2, 30, 58] at the top level" in joined and "[1, 29, 57] in eagle_config" in joined


def test_missing_lm_head_is_noted(tmp_path, story):
    state = drafter_state("specforge", story[0])
    del state["lm_head.weight"]
    write_drafter(tmp_path, state, drafter_config("specforge"))
    ckpt = read_checkpoint(tmp_path)
    assert ckpt.lm_head_name is None and ckpt.draft_vocab_size == DRAFT_VOCAB
    assert any("no lm_head.weight" in n for n in ckpt.notes)
    with pytest.raises(BadInput, match="no tensor 'lm_head.weight'"):
        ckpt.tensor("lm_head.weight")


def test_no_config_uses_tensor_shapes(tmp_path, story):
    write_drafter(tmp_path, drafter_state("specforge", story[0]), None)
    ckpt = read_checkpoint(tmp_path)
    assert ckpt.config == {} and ckpt.aux_layer_ids is None
    assert (ckpt.hidden_size, ckpt.draft_vocab_size, ckpt.target_vocab_size) == (HIDDEN, DRAFT_VOCAB, TARGET_VOCAB)
    assert any("no config.json" in n for n in ckpt.notes)


def test_nan_weights_are_read(tmp_path, story):
    state = drafter_state("specforge", story[0])
    state["fc.weight"][0, 0] = float("nan")
    write_drafter(tmp_path, state, drafter_config("specforge"))
    assert torch.isnan(read_checkpoint(tmp_path).tensor("fc.weight")).sum() == 1


def test_d2t_outside_target_vocab_is_reported(tmp_path, story):
    mapping = story[0]
    d2t = mapping.d2t().copy()
    d2t[-5:] += TARGET_VOCAB  # last five positions point past the vocab
    state = drafter_state("specforge", mapping)
    state["d2t"] = torch.from_numpy(d2t)
    write_drafter(tmp_path, state, drafter_config("specforge"))
    got = read_checkpoint(tmp_path).mapping
    assert list(got.out_of_range()) == list(range(DRAFT_VOCAB - 5, DRAFT_VOCAB))
    assert any(n.startswith("5 of 32000 draft positions map outside the target vocab [0, 163840)") for n in got.notes)


@pytest.mark.parametrize("file_kind", ["safetensors", "bin"])
def test_float_d2t_is_bad_input(tmp_path, story, file_kind):
    state = drafter_state("specforge", story[0])
    state["d2t"] = state["d2t"].float()
    write_drafter(tmp_path, state, drafter_config("specforge"), file_kind=file_kind)
    with pytest.raises(BadInput, match=r"tensor 'd2t' has dtype float32; expected integer offsets") as err:
        read_checkpoint(tmp_path)
    assert err.value.path.endswith(("model.safetensors", "pytorch_model.bin"))


def test_bad_shapes_name_the_tensor(tmp_path, story):
    state = drafter_state("specforge", story[0])
    state["lm_head.weight"] = state["lm_head.weight"].reshape(DRAFT_VOCAB, HIDDEN, 1)
    write_drafter(tmp_path / "a", state, drafter_config("specforge"))
    with pytest.raises(BadInput, match=r"'lm_head.weight' has shape \[32000, 64, 1\]"):
        read_checkpoint(tmp_path / "a")

    state = drafter_state("specforge", story[0])
    state["lm_head.weight"] = state["lm_head.weight"][:16000]
    write_drafter(tmp_path / "b", state, drafter_config("specforge"))
    with pytest.raises(BadInput, match=r"'d2t' has 32000 entries but lm_head.weight has 16000 rows"):
        read_checkpoint(tmp_path / "b")

    state = drafter_state("specforge", story[0])
    state["norm.weight"] = torch.ones(32)
    write_drafter(tmp_path / "c", state, drafter_config("specforge"))
    with pytest.raises(BadInput, match=r"'lm_head.weight' has shape \[32000, 64\].*hidden size 32"):
        read_checkpoint(tmp_path / "c")


def test_missing_shard_is_named(tmp_path, story):
    write_drafter(tmp_path, drafter_state("specforge", story[0]), drafter_config("specforge"), file_kind="sharded")
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(BadInput, match=r"shard model-00002-of-00002.safetensors .* is missing"):
        read_checkpoint(tmp_path)


def test_index_promising_a_tensor_its_shard_lacks(tmp_path, story):
    write_drafter(tmp_path, drafter_state("specforge", story[0]), drafter_config("specforge"), file_kind="sharded")
    index_path = tmp_path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["ghost.weight"] = "model-00001-of-00002.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(BadInput, match=r"index says 'ghost.weight' is in this shard"):
        read_checkpoint(tmp_path)


def test_directory_without_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(BadInput, match="no weights here"):
        read_checkpoint(tmp_path)
    with pytest.raises(BadInput, match="no such file"):
        read_checkpoint(tmp_path / "missing")


def test_malformed_config_json(tmp_path, story):
    write_drafter(tmp_path, drafter_state("specforge", story[0]), None)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(BadInput, match="config.json: not valid JSON"):
        read_checkpoint(tmp_path)
