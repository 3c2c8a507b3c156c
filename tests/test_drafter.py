"""The EAGLE-3 drafter: config, key names, its TTT unroll, loss and accuracy against SpecForge's own modules."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from triage_tui.core.drafter import (
    STATE_DICT_KEYS,
    DrafterConfig,
    Eagle3Drafter,
    draft_accuracy,
    embed_ids,
    shift_left,
    soft_cross_entropy,
    target_distribution,
    ttt_forward,
    ttt_metrics,
)
from triage_tui.core.errors import BadInput

V, VD, H = 512, 96, 32


def small_config(**overrides) -> DrafterConfig:
    base: dict[str, Any] = dict(
        hidden_size=H,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=64,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        draft_vocab_size=VD,
        target_vocab_size=V,
        target_hidden_size=H,
        max_position_embeddings=256,
        aux_layer_ids=(1, 3, 4),
    )
    base.update(overrides)
    return DrafterConfig(**base)


def seeded_drafter(config: DrafterConfig, seed: int = 0) -> Eagle3Drafter:
    torch.manual_seed(seed)
    model = Eagle3Drafter(config)
    with torch.no_grad():  # norms away from 1 so a mix-up between them would show
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    return model.eval()


def test_state_dict_has_exactly_specforge_key_names():
    model = Eagle3Drafter(small_config())
    sd = model.state_dict()
    assert sorted(sd) == sorted(STATE_DICT_KEYS)
    assert sd["fc.weight"].shape == (H, 3 * H)
    assert sd["midlayer.self_attn.q_proj.weight"].shape == (4 * 8, 2 * H)
    assert sd["midlayer.self_attn.k_proj.weight"].shape == (2 * 8, 2 * H)
    assert sd["lm_head.weight"].shape == (VD, H)
    assert sd["d2t"].dtype == torch.int64 and sd["d2t"].shape == (VD,)
    assert sd["t2d"].dtype == torch.bool and sd["t2d"].shape == (V,) and int(sd["t2d"].sum()) == VD
    assert not any("embed" in k for k in sd)


def test_config_round_trip_and_defaults():
    config = small_config(target_hidden_size=48)
    again = DrafterConfig.from_config(config.to_config())
    assert again == config
    # SpecForge configs/llama3-8B-eagle3.json shape: no head_dim, no rope_theta, no target_hidden_size
    plain = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 1,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-05,
        "hidden_act": "silu",
        "vocab_size": 128256,
        "draft_vocab_size": 32000,
    }
    parsed = DrafterConfig.from_config(plain)
    assert (parsed.head_dim, parsed.rope_theta, parsed.target_hidden_size) == (128, 10000.0, 4096)
    assert parsed.aux_layer_ids is None
    assert DrafterConfig.from_config(
        {**plain, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 11, 21]}}
    ).aux_layer_ids == (1, 11, 21)


def test_speculators_config_is_read_from_the_nested_layer_config():
    config = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "draft_vocab_size": 32000,
        "target_hidden_size": 7168,
        "norm_before_residual": True,
        "eagle_aux_hidden_state_layer_ids": [2, 30, 58],
        "transformer_layer_config": {
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "num_attention_heads": 64,
            "num_key_value_heads": 64,
            "rms_norm_eps": 1e-6,
            "rope_theta": 50000.0,
            "vocab_size": 163840,
            "max_position_embeddings": 4096,
        },
    }
    parsed = DrafterConfig.from_config(config)
    assert (parsed.hidden_size, parsed.draft_vocab_size, parsed.target_vocab_size) == (7168, 32000, 163840)
    assert parsed.aux_layer_ids == (2, 30, 58) and parsed.norm_before_residual
    assert parsed.head_dim == 112 and parsed.rope_theta == 50000.0


@pytest.mark.parametrize(
    "bad, words",
    [
        ({"num_attention_heads": 4, "intermediate_size": 8, "vocab_size": 10}, "hidden_size"),
        (
            {
                "hidden_size": 8,
                "num_attention_heads": 4,
                "intermediate_size": 8,
                "vocab_size": 10,
                "num_hidden_layers": 2,
            },
            "num_hidden_layers=2",
        ),
        (
            {"hidden_size": 8, "num_attention_heads": 4, "intermediate_size": 8, "vocab_size": 10, "fc_norm": True},
            "fc_norm",
        ),
        ({"hidden_size": "big", "num_attention_heads": 4, "intermediate_size": 8, "vocab_size": 10}, "non-numeric"),
    ],
)
def test_unusable_config_is_bad_input(bad, words):
    with pytest.raises(BadInput, match=words):
        DrafterConfig.from_config(bad, path="ckpt/config.json")


def test_from_state_dict_accepts_speculators_names_and_reproduces_outputs():
    config = small_config()
    model = seeded_drafter(config)
    sd = model.state_dict()
    renamed = {
        k.replace("midlayer.", "layers.0."): v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in sd.items()
    }
    renamed["embed_tokens.weight"] = torch.zeros(V, H)  # speculators saves it; it must be ignored
    loaded = Eagle3Drafter.from_state_dict(config, renamed)
    for key in STATE_DICT_KEYS:
        expect = sd[key].to(torch.bfloat16).float() if sd[key].is_floating_point() else sd[key]
        assert torch.equal(loaded.state_dict()[key], expect), key
    torch.manual_seed(1)
    embeds, aux = torch.randn(2, 7, H), torch.randn(2, 7, 3 * H)
    exact = Eagle3Drafter.from_state_dict(config, sd)
    assert torch.equal(exact(embeds, aux)[0], model(embeds, aux)[0])


def test_missing_d2t_means_identity_and_bad_tensors_are_named():
    config = small_config()
    sd = {k: v for k, v in Eagle3Drafter(config).state_dict().items() if k not in ("d2t", "t2d")}
    model = Eagle3Drafter.from_state_dict(config, sd)
    assert torch.equal(model.d2t, torch.zeros(VD, dtype=torch.int64))
    assert torch.equal(model.t2d.nonzero().squeeze(1), torch.arange(VD))
    with pytest.raises(BadInput, match="midlayer.mlp.down_proj.weight"):
        Eagle3Drafter.from_state_dict(config, {k: v for k, v in sd.items() if "down_proj" not in k})
    with pytest.raises(BadInput, match=r"lm_head.weight has shape \(95, 32\)"):
        Eagle3Drafter.from_state_dict(config, {**sd, "lm_head.weight": torch.zeros(VD - 1, H)})
    with pytest.raises(BadInput, match="fc_norm.0.weight"):
        Eagle3Drafter.from_state_dict(config, {**sd, "fc_norm.0.weight": torch.zeros(H)})


def test_first_step_is_causal():
    model = seeded_drafter(small_config())
    torch.manual_seed(2)
    embeds, aux = torch.randn(1, 10, H), torch.randn(1, 10, 3 * H)
    logits, _ = model(embeds, aux)
    embeds2, aux2 = embeds.clone(), aux.clone()
    embeds2[:, 6:] += 1.0
    aux2[:, 6:] -= 1.0
    logits2, _ = model(embeds2, aux2)
    assert torch.allclose(logits[:, :6], logits2[:, :6], atol=1e-6)
    assert not torch.allclose(logits[:, 6:], logits2[:, 6:], atol=1e-3)


def specforge_drafter(model: Eagle3Drafter, embed: torch.Tensor) -> Any:
    """SpecForge's own ``LlamaForCausalLMEagle3`` (specforge/modeling/draft/llama3_eagle.py, SpecForge
    0.2.0, installed by the test extra's CI step) holding ``model``'s weights and the target embedding
    ``embed``: every key of our state dict loads strictly into SpecForge's module."""
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    from transformers import LlamaConfig

    c = model.config
    llama = LlamaConfig(
        hidden_size=c.hidden_size,
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads,
        head_dim=c.head_dim,
        intermediate_size=c.intermediate_size,
        rms_norm_eps=c.rms_norm_eps,
        rope_theta=c.rope_theta,
        max_position_embeddings=c.max_position_embeddings,
        vocab_size=c.target_vocab_size,
        hidden_act="silu",
        num_hidden_layers=1,
    )
    llama.draft_vocab_size = c.draft_vocab_size
    theirs = LlamaForCausalLMEagle3(llama).eval()
    theirs.load_state_dict({**model.state_dict(), "embed_tokens.weight": embed}, strict=True)
    return theirs


def specforge_ttt_logits(theirs: Any, input_ids: torch.Tensor, aux: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """SpecForge's TTT unroll through its own modules: ``project_hidden_states``, its decoder mask,
    ``backbone`` with ``cache_hidden`` (the attention's cache branch), ``compute_logits`` and its
    ``padding`` shift of the ids, as ``OnlineEagle3Model.forward`` (specforge/algorithms/eagle3/model.py)
    drives them. One step of the loop is SpecForge classic's and not 0.2.0's: after step k the
    causal mask's k-th diagonal is closed (classic specforge/core/eagle3.py, ``attention_mask[:, :,
    ind0, ind1] = finfo.min``), the unroll the replay reproduces for the runs it checks."""
    from specforge.utils import padding

    b, t = input_ids.shape
    # SpecForge wraps its RMSNorm and RoPE in torch.compile; run them eagerly (no compiler on CPU).
    with torch.no_grad(), torch._dynamo.config.patch(disable=True):
        hidden = theirs.project_hidden_states(aux)
        mask = theirs.prepare_decoder_attention_mask(torch.ones(b, t, dtype=torch.bool), hidden, b, t, 0)
        positions = torch.arange(t).unsqueeze(0)
        cache: list[list[torch.Tensor]] = [[], []]
        ids = padding(input_ids, left=False)
        logits = []
        for k in range(steps):
            hidden = theirs.backbone(theirs.embed_input_ids(ids), hidden, cache, mask, positions)
            logits.append(theirs.compute_logits(hidden))
            ids = padding(ids, left=False)
            rows = torch.arange(t)
            mask[:, :, rows[k:], rows[: t - k]] = torch.finfo(mask.dtype).min
    return logits


def test_ttt_unroll_matches_specforges_own_modules():
    model = seeded_drafter(small_config())
    torch.manual_seed(3)
    embed = torch.randn(V, H)
    ids = torch.randint(0, V, (2, 12))
    aux = torch.randn(2, 12, 3 * H)
    ours = ttt_forward(model, embed, ids, aux, steps=4)
    theirs = specforge_ttt_logits(specforge_drafter(model, embed), ids, aux, steps=4)
    assert len(ours) == 4
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4, msg=f"step {step}")
    # step 0 of the unroll is the plain forward on the shifted ids
    first, _ = model(embed_ids(embed, shift_left(ids)), aux)
    torch.testing.assert_close(ours[0], first)


def test_uniform_drafter_scores_ln_vd_and_specforge_means_over_all_positions():
    torch.manual_seed(4)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[torch.randperm(V)[:VD]] = True
    target_logits = torch.randn(3, 20, V) * 3
    target_logits[..., t2d] += 4.0  # make most argmaxes land in the draft vocab
    loss_mask = torch.ones(3, 20)
    loss_mask[:, 15:] = 0
    target_p, position_mask = target_distribution(target_logits, t2d, loss_mask)
    assert torch.allclose(target_p.sum(-1), torch.ones(3, 20))
    in_draft = t2d[target_logits.argmax(-1)].float()
    assert torch.equal(position_mask, in_draft * loss_mask)
    uniform = torch.zeros(3, 20, VD)
    ploss = soft_cross_entropy(uniform, target_p, position_mask)
    valid = position_mask.sum()
    # mean over all 60 positions, as SpecForge divides by B*T, not by the valid count
    assert ploss.item() == pytest.approx(math.log(VD) * valid.item() / 60, rel=1e-5)
    # accuracy: a drafter that copies the target distribution hits every in-draft position
    perfect = torch.log(target_p)
    acc = draft_accuracy(perfect, target_p, position_mask, loss_mask)
    assert acc == pytest.approx(valid.item() / loss_mask.sum().item(), rel=1e-5)
    assert draft_accuracy(uniform + torch.arange(VD).float(), target_p, position_mask, loss_mask) < acc


def test_ttt_metrics_supervise_step_k_with_the_target_k_plus_one_ahead():
    """A drafter whose head copies the target's answer at t+1+k scores 1.0 at step k only."""
    model = seeded_drafter(small_config())
    torch.manual_seed(5)
    embed = torch.randn(V, H)
    ids = torch.randint(0, V, (1, 16))
    aux = torch.randn(1, 16, 3 * H)
    t2d = model.t2d
    target_logits = torch.randn(1, 16, V)
    target_logits[..., :VD] += 10.0  # every argmax inside the draft vocab (identity mapping)
    loss_mask = torch.ones(1, 16)
    loss_mask[:, -1] = 0
    logits = ttt_forward(model, embed, ids, aux, steps=3)
    # replace the drafter's logits by the target's, shifted by k+1: exactly SpecForge's label
    copied = [shift_left(target_logits, k + 1)[..., t2d] for k in range(3)]
    metrics = ttt_metrics(copied, target_logits, loss_mask, t2d)
    for k, m in enumerate(metrics):
        valid = shift_left(loss_mask, k).sum().item()
        assert m.acc == pytest.approx(valid / (valid + 1e-6))
    off_by_one = ttt_metrics([shift_left(target_logits, 2)[..., t2d]], target_logits, loss_mask, t2d)
    assert off_by_one[0].acc < 0.3
    real = ttt_metrics(logits, target_logits, loss_mask, t2d)
    assert all(m.ploss.requires_grad for m in real)
