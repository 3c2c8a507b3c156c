"""The hidden-state check on checkpoints, dumps and targets written by the real writers.

Dumps are SpecForge ``data_{i}.ckpt`` files (``torch.save`` of the dict prepare_hidden_states.py
writes) whose aux chunks have the depth profile of a real residual stream: distinct states
whose per-token RMS grows from the low to the high layer.
"""

import dataclasses
import json

import pytest
import torch
from safetensors.torch import save_file

from builders.check_run import details_of
from builders.target import save_target
from triage_tui.core.diagnose.checks.config_contract import ConfigContractDetails, check_config_contract
from triage_tui.core.diagnose.checks.hidden_state import HiddenStateDetails, check_hidden_state
from triage_tui.core.drafter import DrafterConfig, Eagle3Drafter
from triage_tui.core.formats.checkpoint import read_checkpoint
from triage_tui.core.formats.hidden_states import read_dumps
from triage_tui.core.formats.target import read_target

HT = 64  # target hidden size
LAYERS = 12  # target decoder layers: default aux outputs of [1, 5, 8]
V, VD = 4096, 1024  # vocab sizes do not matter to this check; kept small
TOKENS = 96
LAYER_SCALE = (1.0, 2.5, 6.0)  # low -> mid -> high RMS, the way a residual stream grows


def write_checkpoint(root, *, hidden=HT, target_hidden=HT, declare_target_hidden=True, lm_head=True, aux_ids=(1, 5, 8)):
    config = DrafterConfig(
        hidden_size=hidden,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        draft_vocab_size=VD,
        target_vocab_size=V,
        target_hidden_size=target_hidden,
        max_position_embeddings=512,
        aux_layer_ids=aux_ids,
    )
    torch.manual_seed(0)
    state = {k: v.contiguous() for k, v in Eagle3Drafter(config).state_dict().items()}
    if not lm_head:
        del state["lm_head.weight"]
    root.mkdir(parents=True)
    save_file(state, str(root / "model.safetensors"))
    document = config.to_config()
    if not declare_target_hidden:
        del document["target_hidden_size"]
    (root / "config.json").write_text(json.dumps(document))
    return read_checkpoint(root)


def write_target(root, *, hidden=HT):
    torch.manual_seed(1)
    tensors = {
        "model.embed_tokens.weight": torch.randn(V, hidden),
        "lm_head.weight": torch.randn(V, hidden),
        "model.norm.weight": torch.ones(hidden),
    }
    return read_target(save_target(root, tensors, num_hidden_layers=LAYERS, rms_norm_eps=1e-5))


def layer_states(seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(TOKENS, HT, generator=generator) for scale in LAYER_SCALE]


def write_dumps(root, *, order=(0, 1, 2), only_last=False, files=3):
    """SpecForge prepare_hidden_states.py layout: rows_0-N/data_i.ckpt, aux [1, T, 3Ht] in bf16."""
    group = root / f"rows_0-{files}"
    group.mkdir(parents=True)
    for i in range(files):
        layers = layer_states(100 + i)
        last = 9.0 * torch.randn(TOKENS, HT, generator=torch.Generator().manual_seed(200 + i))
        aux = last if only_last else torch.cat([layers[k] for k in order], dim=-1)
        torch.save(
            {
                "input_ids": torch.randint(0, V, (TOKENS,), generator=torch.Generator().manual_seed(i)),
                "loss_mask": torch.ones(TOKENS, dtype=torch.int64),
                "hidden_state": last[None].to(torch.bfloat16),
                "aux_hidden_state": aux[None].to(torch.bfloat16),
            },
            group / f"data_{i}.ckpt",
        )
    return read_dumps(root)


@pytest.fixture()
def world(tmp_path):
    return (write_checkpoint(tmp_path / "drafter"), write_dumps(tmp_path / "dumps"), write_target(tmp_path / "target"))


def _kinds(result):
    return {issue.kind for issue in details_of(result, HiddenStateDetails).issues}


def test_healthy_dumps_pass_with_a_growing_profile(world):
    checkpoint, dumps, target = world
    result = check_hidden_state(checkpoint, dumps, target)
    details = details_of(result, HiddenStateDetails)
    assert result.status == "pass", details.issues
    assert all(row.ok for row in details.shapes)
    rms = details.rms_by_chunk
    assert len(rms) == 3 and rms[0] < rms[1] < rms[2]
    assert rms[2] / rms[0] == pytest.approx(LAYER_SCALE[2] / LAYER_SCALE[0], rel=0.1)
    assert details.fc_in_features == 3 * HT
    json.dumps(result.to_json())
    # The checkpoint against its own config and the target is the config contract's, which agrees.
    contract = check_config_contract(checkpoint, target)
    contract_details = details_of(contract, ConfigContractDetails)
    fc_row = next(r for r in contract_details.rows if r.what == "fc.weight in-features")
    assert contract.status == "pass" and (fc_row.expected, fc_row.actual) == (3 * HT, 3 * HT)


def test_dumps_with_only_the_last_hidden_state_fail(world, tmp_path):
    checkpoint, _, target = world
    result = check_hidden_state(checkpoint, write_dumps(tmp_path / "last", only_last=True), target)
    details = details_of(result, HiddenStateDetails)
    assert result.status == "fail"
    assert {"aux_width", "only_last_layer"} <= _kinds(result)
    width = next(r for r in details.shapes if r.what == "dumps aux_hidden width")
    assert (width.expected, width.actual) == (3 * HT, HT)
    assert details.aux_chunks_present == 1


def test_swapped_aux_chunks_are_caught_by_the_profile(world, tmp_path):
    checkpoint, _, target = world
    result = check_hidden_state(checkpoint, write_dumps(tmp_path / "swapped", order=(2, 1, 0)), target)
    details = details_of(result, HiddenStateDetails)
    assert result.status == "fail"
    assert _kinds(result) == {"aux_chunk_order"}
    rms = details.rms_by_chunk
    assert rms[0] > rms[1] > rms[2]
    # Shapes are all fine: only the profile can see this.
    assert all(row.ok for row in details.shapes)


def test_a_repeated_chunk_is_caught(world, tmp_path):
    checkpoint, _, target = world
    result = check_hidden_state(checkpoint, write_dumps(tmp_path / "repeated", order=(0, 0, 2)), target)
    assert result.status == "fail"
    assert "repeated_aux_chunk" in _kinds(result)
    assert "chunks 0 and 1" in result.summary


def test_aux_layer_ids_off_by_one_between_conventions(world):
    checkpoint, dumps, target = world
    # Dumps captured HF hidden_states[[2, 6, 9]] (capture-before, modelopt's offline dump) are the
    # outputs of layers [1, 5, 8]: exactly the config's ids in output-of convention. Same states.
    same = dataclasses.replace(dumps, format="modelopt", aux_layer_ids=(2, 6, 9))
    result = check_hidden_state(checkpoint, same, target)
    assert "aux_layer_off_by_one" not in _kinds(result)
    assert "aux_layer_convention" in _kinds(result)
    # The same ids written by a tool with output-of hooks (SpecForge) name layers one deeper.
    shifted = dataclasses.replace(dumps, format="specforge", aux_layer_ids=(2, 6, 9))
    result = check_hidden_state(checkpoint, shifted, target)
    assert result.status == "fail" and "aux_layer_off_by_one" in _kinds(result)
    row = next(r for r in details_of(result, HiddenStateDetails).shapes if r.what.startswith("aux layers"))
    assert (row.expected, row.actual) == ([1, 5, 8], [2, 6, 9])
    unrelated = dataclasses.replace(dumps, format="specforge", aux_layer_ids=(3, 6, 10))
    assert "aux_layer_mismatch" in _kinds(check_hidden_state(checkpoint, unrelated, target))


# The checkpoint against its config and the target has one home, the config contract
# (core/diagnose/checks/config_contract.py): the hidden-state check no longer reports these, on the same files.


def _contract_kinds(checkpoint, target):
    return {f.kind for f in details_of(check_config_contract(checkpoint, target), ConfigContractDetails).findings}


def test_missing_config_ids_fall_back_to_the_engines_defaults(tmp_path, world):
    _, dumps, target = world
    checkpoint = write_checkpoint(tmp_path / "no_ids", aux_ids=None)
    result = check_hidden_state(checkpoint, dumps, target)
    assert result.status == "pass" and "aux_layer_ids_missing" not in _kinds(result)
    contract = check_config_contract(checkpoint, target)
    contract_details = details_of(contract, ConfigContractDetails)
    warning = next(f for f in contract_details.findings if f.kind == "aux_layer_ids_missing")
    assert warning.severity == "warning" and "[1, 5, 8]" in warning.message


def test_without_a_checkpoint_no_config_is_blamed(world):
    """sample_runs/diverged names no checkpoint (`checkpoint -`): there is no config to lack the layer ids."""
    _, dumps, target = world
    result = check_hidden_state(None, dumps, target)
    assert "config" not in result.summary
    assert check_config_contract(None, target).status == "skipped"


def test_draft_hidden_size_differs_from_the_target_without_declaring_it(tmp_path, world):
    _, dumps, target = world
    checkpoint = write_checkpoint(tmp_path / "narrow", hidden=32, target_hidden=HT, declare_target_hidden=False)
    assert "draft_hidden_mismatch" not in _kinds(check_hidden_state(checkpoint, dumps, target))
    contract = check_config_contract(checkpoint, target)
    assert contract.status == "fail" and "draft_hidden_mismatch" in _contract_kinds(checkpoint, target)
    assert "#18906" in contract.summary
    declared = write_checkpoint(tmp_path / "declared", hidden=32, target_hidden=HT)
    assert "draft_hidden_mismatch" not in _contract_kinds(declared, target)


def test_fc_built_for_another_target_and_a_missing_lm_head(tmp_path, world):
    _, dumps, target = world
    wide = write_checkpoint(tmp_path / "wide", hidden=HT, target_hidden=2 * HT)
    result = check_hidden_state(wide, dumps, target)
    assert result.status == "fail" and "aux_width" in _kinds(result) and "fc_width" not in _kinds(result)
    assert "fc_width" in _contract_kinds(wide, target)  # fc against the target
    headless = write_checkpoint(tmp_path / "headless", lm_head=False)
    assert "missing_lm_head" not in _kinds(check_hidden_state(headless, dumps, target))
    assert "missing_lm_head" in _contract_kinds(headless, target)


def test_without_dumps_there_is_nothing_to_check(world):
    checkpoint, _, target = world
    result = check_hidden_state(checkpoint, None, target)
    assert result.status == "skipped" and "--data" in result.summary
    assert check_hidden_state(None, None, None).status == "skipped"


def test_aux_layer_ids_beyond_the_targets_depth(tmp_path, world):
    _, dumps, target = world
    deep = write_checkpoint(tmp_path / "deep", aux_ids=(1, 29, 57))  # a 61-layer sibling's ids
    assert "aux_layer_out_of_range" not in _kinds(check_hidden_state(deep, dumps, target))
    contract = check_config_contract(deep, target)
    contract_details = details_of(contract, ConfigContractDetails)
    issue = next(f for f in contract_details.findings if f.kind == "aux_layer_out_of_range")
    assert contract.status == "fail" and "[29, 57]" in issue.message and f"{LAYERS} layers" in issue.message
