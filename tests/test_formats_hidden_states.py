"""read_dumps on hidden-state dumps written as SpecForge, speculators and modelopt write them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from builders.dumps import HT, states, write_specforge
from triage_tui.core.errors import BadInput
from triage_tui.core.formats.hidden_states import evenly_spaced, read_dumps


def test_specforge_dumps_sampled_evenly(tmp_path):
    written = write_specforge(tmp_path, 23)
    dumps = read_dumps(tmp_path, max_files=5)
    assert dumps.format == "specforge" and dumps.files_total == 23 and dumps.root == tmp_path
    # natural order data_0..data_22; evenly spaced 0, 6, 11, 16, 22 (linspace(0, 22, 5) rounded)
    assert [s.path.name for s in dumps.samples] == [
        "data_0.ckpt",
        "data_6.ckpt",
        "data_11.ckpt",
        "data_16.ckpt",
        "data_22.ckpt",
    ]
    assert dumps.target_hidden_is_post_norm is True and dumps.aux_layer_ids is None
    sample = dumps.samples[1]
    ids, loss_mask, last, aux = written[6]
    assert sample.input_ids.dtype == np.int64
    np.testing.assert_array_equal(sample.input_ids, ids.numpy())
    np.testing.assert_array_equal(sample.loss_mask, loss_mask.numpy())
    assert sample.aux_hidden.dtype == torch.float32 and sample.aux_hidden.shape == (26, 3 * HT)
    assert torch.equal(sample.aux_hidden, torch.cat(aux, -1).float())
    assert torch.equal(sample.target_hidden, last.float())
    assert sample.num_aux_chunks == 3
    assert read_dumps(tmp_path, max_files=5).samples[3].path == dumps.samples[3].path  # deterministic


def test_specforge_gzip_and_single_file(tmp_path):
    write_specforge(tmp_path, 3, gz=True)
    dumps = read_dumps(tmp_path)
    assert dumps.files_total == 3 and len(dumps.samples) == 3
    assert dumps.samples[0].path.name == "data_0.ckpt.gz"
    single = read_dumps(tmp_path / "rows_0-4" / "data_2.ckpt.gz")
    assert single.files_total == 1 and single.samples[0].aux_hidden.shape == (22, 3 * HT)


def test_speculators_dumps(tmp_path):
    originals = {}
    for i in range(4):
        ids, last, aux = states(i, 30, layers=3)
        hidden = torch.stack([*aux, last], dim=1)  # [T, 4, H]: three aux layers, then the last layer
        save_file({"token_ids": ids, "hidden_states": hidden}, str(tmp_path / f"hs_{i}.safetensors"))
        originals[i] = (ids, last, aux)
    dumps = read_dumps(tmp_path, max_files=2)
    assert dumps.format == "speculators" and dumps.files_total == 4
    assert [s.path.name for s in dumps.samples] == ["hs_0.safetensors", "hs_3.safetensors"]
    assert dumps.target_hidden_is_post_norm is False  # verifier's last layer, before the final norm
    sample = dumps.samples[1]
    ids, last, aux = originals[3]
    assert sample.loss_mask is None and sample.num_aux_chunks == 3
    np.testing.assert_array_equal(sample.input_ids, ids.numpy())
    assert torch.equal(sample.aux_hidden, torch.cat(aux, -1).float())  # hidden_states[:, :-1].flatten(1)
    assert torch.equal(sample.target_hidden, last.float())


def test_modelopt_dumps(tmp_path):
    for conversation in ("conv-a", "conv-b"):
        ids, last, aux = states(len(conversation), 17)
        torch.save(
            {
                "input_ids": ids,
                "hidden_states": last,
                "aux_hidden_states": torch.cat(aux, -1),
                "conversation_id": conversation,
            },
            tmp_path / f"{conversation}.pt",
        )
    dumps = read_dumps(tmp_path)
    assert dumps.format == "modelopt" and dumps.files_total == 2
    assert dumps.target_hidden_is_post_norm is True
    assert dumps.samples[0].aux_hidden.shape == (17, 3 * HT) and dumps.samples[0].num_aux_chunks == 3
    assert dumps.samples[0].target_hidden.shape == (17, HT)


def test_target_hidden_size_differs_from_aux_chunks(tmp_path):
    ids, last, aux = states(0, 10)
    # fc expecting 4 aux layers: 4 * 64 wide, last hidden 64 wide
    torch.save(
        {
            "input_ids": ids,
            "loss_mask": torch.ones(10),
            "hidden_state": last[None],
            "aux_hidden_state": torch.cat([*aux, aux[0]], -1)[None],
        },
        tmp_path / "data_0.ckpt",
    )
    assert read_dumps(tmp_path).samples[0].num_aux_chunks == 4


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(aux_hidden_state=d["aux_hidden_state"][0, :, :]), None),  # [T, 3H] is accepted
        (lambda d: d.update(aux_hidden_state=torch.zeros(2, 10, 192)), r"'aux_hidden_state' has shape \[2, 10, 192\]"),
        (
            lambda d: d.update(aux_hidden_state=torch.zeros(1, 9, 192)),
            "'aux_hidden_state' covers 9 positions but the dump has 10",
        ),
        (
            lambda d: d.pop("aux_hidden_state"),
            r"no 'aux_hidden_state' in this dump \(keys: hidden_state, input_ids, loss_mask\)",
        ),
        (lambda d: d.update(input_ids=d["input_ids"].float()), "'input_ids' has dtype float32; expected token ids"),
        (lambda d: d.update(loss_mask=[1] * 10), "'loss_mask' is a list, not a tensor"),
    ],
)
def test_wrong_specforge_shapes_name_the_file(tmp_path, mutate, message):
    ids, last, aux = states(0, 10)
    data = {
        "input_ids": ids,
        "loss_mask": torch.ones(10),
        "hidden_state": last[None],
        "aux_hidden_state": torch.cat(aux, -1)[None],
    }
    mutate(data)
    torch.save(data, tmp_path / "data_0.ckpt")
    if message is None:
        assert read_dumps(tmp_path).samples[0].aux_hidden.shape == (10, 192)
        return
    with pytest.raises(BadInput, match=message) as err:
        read_dumps(tmp_path)
    assert err.value.path == str(tmp_path / "data_0.ckpt")


def test_wrong_speculators_shapes(tmp_path):
    save_file({"token_ids": torch.arange(8), "hidden_states": torch.zeros(8, 64)}, str(tmp_path / "hs_0.safetensors"))
    with pytest.raises(BadInput, match=r"'hidden_states' has shape \[8, 64\]; expected \[T, k, H\]"):
        read_dumps(tmp_path)
    save_file(
        {"token_ids": torch.arange(7), "hidden_states": torch.zeros(8, 4, 64)}, str(tmp_path / "hs_0.safetensors")
    )
    with pytest.raises(BadInput, match="'hidden_states' covers 8 positions but the dump has 7 tokens"):
        read_dumps(tmp_path)
    save_file({"hidden_states": torch.zeros(8, 4, 64)}, str(tmp_path / "hs_0.safetensors"))
    with pytest.raises(BadInput, match="no 'token_ids' in this dump"):
        read_dumps(tmp_path)


def test_no_dumps(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(BadInput, match="no hidden-state dumps here"):
        read_dumps(tmp_path)
    with pytest.raises(BadInput, match="no such file"):
        read_dumps(tmp_path / "missing")


def test_evenly_spaced():
    assert evenly_spaced(10, 3) == [0, 4, 9]  # 4.5 rounds half to even
    assert evenly_spaced(3, 8) == [0, 1, 2]
    assert evenly_spaced(1_000_000, 8)[-1] == 999_999 and len(set(evenly_spaced(9, 8))) == 8
    assert evenly_spaced(0, 8) == []


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16])
def test_a_loss_mask_numpy_cannot_hold_is_read(tmp_path, dtype):
    """A float8 loss mask was "Got unsupported ScalarType Float8_e4m3fn", naming no file."""
    write_specforge(tmp_path, 1)
    (dump,) = tmp_path.rglob("data_*.ckpt")
    data = torch.load(dump, weights_only=True)
    data["loss_mask"] = data["loss_mask"].to(dtype)
    torch.save(data, dump)
    (sample,) = read_dumps(tmp_path).samples
    assert sample.loss_mask.dtype == np.float32 and set(np.unique(sample.loss_mask)) <= {0.0, 1.0}
