"""The EAGLE-3 draft model in torch: one decoder layer, its TTT unroll, SpecForge's loss and accuracy.

Used by the replay check, the remap proof and the sample trainer, so that all three run
the same forward pass and log the same numbers SpecForge logs.

Layer forward (SpecForge classic `specforge/modeling/draft/llama3_eagle.py`; SpecForge
``specforge/modeling/draft/llama3_eagle.py`` ``LlamaDecoderLayer``/``LlamaAttention``;
sglang ``python/sglang/srt/models/llama_eagle3.py``): ``residual = h; h = hidden_norm(h);
e = input_layernorm(embed); x = cat([e, h], -1)`` (embedding first) -> attention with
q/k/v in-features ``2H`` -> ``+ residual`` -> ``post_attention_layernorm`` -> SwiGLU MLP ->
``+ residual``. Logits are ``lm_head(norm(out))``; the pre-norm ``out`` is the next TTT
step's hidden. The token embedding is the target's (frozen, never saved by SpecForge), so
the module holds none and takes ``input_embeds``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from triage_tui.core.errors import BadInput

if TYPE_CHECKING:  # the checkpoint reader is another module's; only its API is used here
    from triage_tui.core.formats.checkpoint import DrafterCheckpoint

# ---------------------------------------------------------------------------------------------
# config


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


@dataclass(frozen=True)
class DrafterConfig:
    """The shape of one EAGLE-3 drafter, as SpecForge's ``config.json`` describes it."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    draft_vocab_size: int
    target_vocab_size: int
    target_hidden_size: int
    max_position_embeddings: int
    aux_layer_ids: tuple[int, ...] | None = None
    # vLLM/speculators option: take the residual after hidden_norm (vLLM `vllm/model_executor/models/llama_eagle3.py`,
    # vLLM llama_eagle3.py ``norm_before_residual``). SpecForge/sglang/EAGLE: False.
    norm_before_residual: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, path: str | Path | None = None) -> DrafterConfig:
        """Read a SpecForge/EAGLE ``LlamaForCausalLMEagle3`` config or a speculators ``Eagle3Speculator`` one."""
        if not isinstance(config, Mapping):
            raise BadInput(path, "config.json is not a JSON object")
        # speculators (src/speculators/models/eagle3/config.py): the layer's HF config is nested
        # in transformer_layer_config; draft_vocab_size, target_hidden_size and the aux layer ids
        # sit at the top level.
        layer = config.get("transformer_layer_config")
        layer = layer if isinstance(layer, Mapping) else config

        def need(name: str, value: Any) -> Any:
            if value is None:
                raise BadInput(path, f"drafter config has no {name!r}")
            return value

        try:
            hidden = int(need("hidden_size", layer.get("hidden_size")))
            heads = int(need("num_attention_heads", layer.get("num_attention_heads")))
            kv_heads = int(layer.get("num_key_value_heads") or heads)
            head_dim = int(layer.get("head_dim") or hidden // heads)
            intermediate = int(need("intermediate_size", layer.get("intermediate_size")))
            eps = float(layer.get("rms_norm_eps") or 1e-6)
            theta = float(layer.get("rope_theta") or 10000.0)
            target_vocab = int(
                need("vocab_size", _first(config, "vocab_size", "target_vocab_size") or layer.get("vocab_size"))
            )
            # sglang: draft_vocab_size None -> the full target vocab (llama_eagle3.py)
            draft_vocab = int(_first(config, "draft_vocab_size") or layer.get("draft_vocab_size") or target_vocab)
            target_hidden = int(_first(config, "target_hidden_size") or layer.get("target_hidden_size") or hidden)
            max_pos = int(layer.get("max_position_embeddings") or 2048)
        except (TypeError, ValueError) as exc:
            raise BadInput(path, f"drafter config has a non-numeric size: {exc}") from None
        eagle = config.get("eagle_config")
        eagle = eagle if isinstance(eagle, Mapping) else {}
        aux = _first(config, "eagle_aux_hidden_state_layer_ids") or eagle.get("eagle_aux_hidden_state_layer_ids")
        layers = int(layer.get("num_hidden_layers") or 1)
        if layers != 1:
            raise BadInput(
                path, f"drafter has num_hidden_layers={layers}; only single-layer EAGLE-3 drafters are supported"
            )
        act = layer.get("hidden_act", "silu")
        if act != "silu":
            raise BadInput(path, f"drafter hidden_act {act!r} is not supported (only silu)")
        for flag in ("fc_norm", "norm_output", "norm_before_fc"):
            if config.get(flag):
                raise BadInput(path, f"drafter config sets {flag!r} (EAGLE-3.1 extras), which is not supported")
        if heads % kv_heads:
            raise BadInput(path, f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
        return cls(
            hidden_size=hidden,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=intermediate,
            rms_norm_eps=eps,
            rope_theta=theta,
            draft_vocab_size=draft_vocab,
            target_vocab_size=target_vocab,
            target_hidden_size=target_hidden,
            max_position_embeddings=max_pos,
            aux_layer_ids=tuple(int(i) for i in aux) if aux else None,
            norm_before_residual=bool(config.get("norm_before_residual", False)),
        )

    def to_config(self) -> dict[str, Any]:
        """SpecForge ``config.json`` keys (``configs/llama3-8B-eagle3.json`` shape)."""
        config: dict[str, Any] = {
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "num_hidden_layers": 1,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
            "vocab_size": self.target_vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
            "target_hidden_size": self.target_hidden_size,
        }
        if self.aux_layer_ids is not None:
            config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(self.aux_layer_ids)}
        if self.norm_before_residual:
            config["norm_before_residual"] = True
        return config


# ---------------------------------------------------------------------------------------------
# the module


class RMSNorm(nn.Module):
    """Llama RMSNorm: statistics in float32, weight applied in the input dtype."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.to(torch.float32)
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class TTTCache:
    """Keys/values of the earlier TTT steps (SpecForge's ``cache_hidden``), post-RoPE, kv heads repeated."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []


class Attention(nn.Module):
    def __init__(self, config: DrafterConfig) -> None:
        super().__init__()
        h, hd = config.hidden_size, config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = hd
        self.rope_theta = config.rope_theta
        self.q_proj = nn.Linear(2 * h, self.num_heads * hd, bias=False)
        self.k_proj = nn.Linear(2 * h, self.num_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(2 * h, self.num_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(self.num_heads * hd, h, bias=False)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # Llama "default" RoPE with base rope_theta (sglang builds it from the config's
        # rope_theta). Note: SpecForge classic's LlamaRotaryEmbedding ignores rope_theta and
        # uses base 10000; rope_scaling variants are not modelled (positions stay short here).
        hd = self.head_dim
        inv_freq = 1.0 / (self.rope_theta ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd))
        freqs = positions.to(torch.float32)[..., None] * inv_freq  # [B, T, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B, 1, T, hd]
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        return x * cos + _rotate_half(x) * sin

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: TTTCache | None) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        step = len(cache.keys) if cache is not None else 0
        # SpecForge: TTT step k rotates with position_ids + k (llama3_eagle.py, ``position_ids + lck``)
        q, k = self._rope(q, positions + step), self._rope(k, positions + step)
        groups = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        if cache is not None:
            cache.keys.append(k)
            cache.values.append(v)
        if step == 0:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif cache is None:
            raise ValueError("TTT steps after the first attend to the step-0 keys: pass the cache")
        else:
            out = self._ttt_attention(q, cache, step)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim))

    def _ttt_attention(self, q: torch.Tensor, cache: TTTCache, step: int) -> torch.Tensor:
        """SpecForge's TTT attention at step ``step`` >= 1 (llama3_eagle.py ``LlamaAttention``, cache branch).

        Query t sees step-0 keys j <= t - step (SpecForge masks the diagonals 0..step-1 of
        the causal mask after each step: ``attention_mask[:, :, ind[idx:], ind[:T-idx]] = min``)
        and, from every later step i, only its own position's key (the ``(q * k_i).sum(-1)`` terms).
        """
        scale = 1.0 / math.sqrt(self.head_dim)
        t = q.shape[2]
        k0, v0 = cache.keys[0], cache.values[0]
        scores0 = torch.matmul(q, k0.transpose(2, 3)) * scale
        rows = torch.arange(t, device=q.device)
        allowed = rows[None, :] <= rows[:, None] - step  # [T(query), T(key)]
        scores0 = scores0.masked_fill(~allowed, float("-inf"))
        diag = [(q * cache.keys[i]).sum(-1, keepdim=True) * scale for i in range(1, step + 1)]
        weights = torch.softmax(torch.cat([scores0, *diag], dim=-1), dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(weights[..., :t], v0)
        for i in range(1, step + 1):
            out = out + weights[..., t + i - 1 : t + i] * cache.values[i]
        return out


class MLP(nn.Module):
    def __init__(self, config: DrafterConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """The EAGLE-3 ``midlayer``."""

    def __init__(self, config: DrafterConfig) -> None:
        super().__init__()
        self.norm_before_residual = config.norm_before_residual
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.hidden_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, input_embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, cache: TTTCache | None
    ) -> torch.Tensor:
        residual = hidden
        hidden = self.hidden_norm(hidden)
        if self.norm_before_residual:
            residual = hidden
        x = torch.cat((self.input_layernorm(input_embeds), hidden), dim=-1)  # embeddings first
        hidden = residual + self.self_attn(x, positions, cache)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


STATE_DICT_KEYS = (
    "fc.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight",
    "midlayer.hidden_norm.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.post_attention_layernorm.weight",
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
)
# Names a checkpoint may hold that the drafter does not use: the frozen target embedding
# (speculators saves it; SpecForge filters it out) and speculators' verifier copies.
_IGNORED_KEYS = ("embed_tokens.weight", "verifier_lm_head.weight", "verifier_norm.weight")


def canonical_key(name: str) -> str:
    """Map a checkpoint tensor name to this module's: speculators/vLLM ``layers.0.`` -> ``midlayer.``."""
    if name.startswith("model."):  # sglang-style prefix some exports carry
        name = name[len("model.") :]
    if name.startswith("layers.0."):
        name = "midlayer." + name[len("layers.0.") :]
    return name


class Eagle3Drafter(nn.Module):
    """One EAGLE-3 decoder layer with its fc, final norm, draft-vocab head and d2t/t2d buffers."""

    d2t: torch.Tensor  # buffers (register_buffer below): declared so that reading them is typed
    t2d: torch.Tensor

    def __init__(self, config: DrafterConfig) -> None:
        super().__init__()
        self.config = config
        self.fc = nn.Linear(3 * config.target_hidden_size, config.hidden_size, bias=False)
        self.midlayer = DecoderLayer(config)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.draft_vocab_size, bias=False)
        # Persistent like SpecForge's, so they land in the weights file; identity by default.
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.int64))
        t2d = torch.zeros(config.target_vocab_size, dtype=torch.bool)
        t2d[: config.draft_vocab_size] = True
        self.register_buffer("t2d", t2d)

    def project(self, aux_hidden: torch.Tensor) -> torch.Tensor:
        """fc over the concatenated low/mid/high aux hidden states, ``[B, T, 3Ht] -> [B, T, H]``."""
        return self.fc(aux_hidden)

    def step(
        self,
        input_embeds: torch.Tensor,
        hidden: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        cache: TTTCache | None = None,
    ) -> torch.Tensor:
        """One pass of the midlayer; returns the pre-norm hidden (the next TTT step's input)."""
        if position_ids is None:
            b, t = hidden.shape[:2]
            position_ids = torch.arange(t, device=hidden.device).expand(b, t)
        return self.midlayer(input_embeds, hidden, position_ids, cache)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(hidden))

    def forward(
        self, input_embeds: torch.Tensor, aux_hidden: torch.Tensor, position_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """First draft step: ``(logits [B, T, Vd], pre-norm hidden [B, T, H])``."""
        out = self.step(input_embeds, self.project(aux_hidden), position_ids)
        return self.compute_logits(out), out

    @classmethod
    def from_state_dict(
        cls,
        config: DrafterConfig,
        state_dict: Mapping[str, torch.Tensor],
        *,
        path: str | Path | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> Eagle3Drafter:
        """Build from tensors named as SpecForge (``midlayer.*``) or speculators (``layers.0.*``) name them."""
        return _build(
            config,
            {canonical_key(k): k for k in state_dict},
            lambda k: state_dict[k],
            path=path,
            device=device,
            dtype=dtype,
        )


def _build(
    config: DrafterConfig,
    names: dict[str, str],
    fetch: Callable[[str], torch.Tensor],
    *,
    path: str | Path | None,
    device: torch.device | str,
    dtype: torch.dtype,
) -> Eagle3Drafter:
    """Allocate on the meta device, then fill every tensor from ``fetch`` (one at a time)."""
    unknown = sorted(names[k] for k in names if k not in STATE_DICT_KEYS and k not in _IGNORED_KEYS)
    if unknown:
        raise BadInput(path, f"drafter has tensors this EAGLE-3 layer does not use: {', '.join(unknown[:5])}")
    required = [k for k in STATE_DICT_KEYS if k not in ("d2t", "t2d")]
    missing = [k for k in required if k not in names]
    if missing:
        raise BadInput(path, f"drafter lacks {', '.join(missing[:5])}")
    with torch.device("meta"):
        model = Eagle3Drafter(config)
    model = model.to_empty(device=device)
    own = model.state_dict()
    with torch.no_grad():
        for key in STATE_DICT_KEYS:
            target = own[key]
            if key not in names:
                continue
            value = fetch(names[key])
            if tuple(value.shape) != tuple(target.shape):
                raise BadInput(
                    path, f"{names[key]} has shape {tuple(value.shape)}, the config implies {tuple(target.shape)}"
                )
            if key == "t2d":
                value = value.to(torch.bool)
            elif key == "d2t":
                value = value.to(torch.int64)
            target.copy_(value.to(device=target.device))
        # Absent buffers: d2t zeros is the identity, as vLLM treats a checkpoint without d2t
        # (vLLM `vllm/model_executor/models/llama_eagle3.py`); t2d then follows from d2t.
        if "d2t" not in names:
            own["d2t"].zero_()
        if "t2d" not in names:
            own["t2d"].zero_()
            hot = own["d2t"] + torch.arange(config.draft_vocab_size, device=own["d2t"].device)
            ok = (hot >= 0) & (hot < config.target_vocab_size)
            own["t2d"][hot[ok]] = True
    model = model.to(dtype=dtype)
    model.eval()
    return model


def load_drafter(
    checkpoint: DrafterCheckpoint, *, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> Eagle3Drafter:
    """Build the drafter a checkpoint directory holds, reading one tensor at a time."""
    raw = dict(checkpoint.config)
    # modelopt exports and hand-written configs may omit the vocab sizes; the reader derived
    # them from lm_head / t2d / embed_tokens shapes.
    layer = raw.get("transformer_layer_config")
    layer = layer if isinstance(layer, dict) else raw
    if not (raw.get("vocab_size") or layer.get("vocab_size")) and checkpoint.target_vocab_size:
        raw["vocab_size"] = checkpoint.target_vocab_size
    if not raw.get("draft_vocab_size") and checkpoint.draft_vocab_size:
        raw["draft_vocab_size"] = checkpoint.draft_vocab_size
    config = DrafterConfig.from_config(raw, path=checkpoint.path)
    names = {canonical_key(k): k for k in checkpoint.tensors}
    return _build(config, names, checkpoint.tensor, path=checkpoint.path, device=device, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# TTT unroll, target distribution, loss and accuracy (exactly SpecForge's arithmetic)


def shift_left(x: torch.Tensor, n: int = 1) -> torch.Tensor:
    """SpecForge ``padding(x, left=False)`` applied ``n`` times: drop ``n`` leading positions, zero-fill the end.

    (specforge/utils.py ``padding``: ``cat((x[:, 1:], zeros), dim=1)``; EAGLE cnets.py the same.)
    """
    if n <= 0:
        return x
    t = x.shape[1]
    n = min(n, t)
    return torch.cat((x[:, n:], torch.zeros_like(x[:, :n])), dim=1)


def embed_ids(embed: torch.Tensor | Callable[[torch.Tensor], torch.Tensor], input_ids: torch.Tensor) -> torch.Tensor:
    """The target's token embedding of ``input_ids`` (a weight ``[V, H]`` or a callable)."""
    return F.embedding(input_ids, embed) if isinstance(embed, torch.Tensor) else embed(input_ids)


def ttt_forward(
    drafter: Eagle3Drafter,
    embed: torch.Tensor | Callable[[torch.Tensor], torch.Tensor],
    input_ids: torch.Tensor,
    aux_hidden: torch.Tensor,
    steps: int,
    position_ids: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Unroll ``steps`` TTT steps; returns the drafter's float32 logits ``[B, T, Vd]`` per step.

    Alignment (SpecForge classic ``specforge/core/eagle3.py``
    ``OfflineEagle3Model.forward`` with the offline dataset's pre-shift,
    ``specforge/data/preprocessing.py``): ``input_ids`` here are the dump's *unshifted* ids.
    Before step 0 they are shifted left once, so at step ``k`` position ``t`` sees the aux
    hidden of ``t`` (through the recurrent hidden) and the embedding of token ``t+1+k``; its
    label is the target distribution at ``t+1+k`` (the target's prediction of token
    ``t+2+k``), i.e. ``shift_left(target_logits, k+1)`` with ``shift_left(loss_mask, k)`` —
    see :func:`ttt_metrics`. After each step the ids shift again and the drafter's own
    pre-norm output becomes the next step's hidden.
    """
    hidden = drafter.project(aux_hidden)
    cache = TTTCache() if steps > 1 else None
    ids = shift_left(input_ids, 1)
    logits: list[torch.Tensor] = []
    for k in range(steps):
        embeds = embed_ids(embed, ids).to(hidden.dtype)
        hidden = drafter.step(embeds, hidden, position_ids, cache)
        logits.append(drafter.compute_logits(hidden).float())
        if k < steps - 1:
            ids = shift_left(ids, 1)
    return logits


def target_distribution(
    target_logits: torch.Tensor, t2d: torch.Tensor, loss_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(target_p [.., Vd], position_mask [..])`` as SpecForge ``_compute_target_p`` computes them.

    ``target_p = softmax(target_logits[..., t2d])`` (renormalised over the draft vocab, in
    ascending target-id order); ``position_mask`` keeps positions whose full-vocab argmax is
    in the draft vocab, times ``loss_mask`` when given. ``t2d`` may also be an index tensor
    of target ids in draft order (modelopt's ``arange(Vd) + d2t`` gather).
    """
    t2d = t2d.to(target_logits.device)
    top = target_logits.argmax(-1)
    if t2d.dtype == torch.bool:
        in_draft = t2d[top]
    else:
        member = torch.zeros(target_logits.shape[-1], dtype=torch.bool, device=target_logits.device)
        member[t2d] = True
        in_draft = member[top]
    position_mask = in_draft.to(torch.float32)
    if loss_mask is not None:
        position_mask = position_mask * loss_mask.to(torch.float32)
    target_p = torch.softmax(target_logits[..., t2d].float(), dim=-1)
    return target_p, position_mask


def per_position_soft_cross_entropy(logits: torch.Tensor, target_p: torch.Tensor) -> torch.Tensor:
    """``-sum(target_p * log_softmax(logits), -1)`` per position (H(p, q); ~ln Vd for a uniform drafter)."""
    return -(target_p * torch.log_softmax(logits.float(), dim=-1)).sum(-1)


def soft_cross_entropy(logits: torch.Tensor, target_p: torch.Tensor, position_mask: torch.Tensor) -> torch.Tensor:
    """SpecForge's per-step ``ploss``: masked soft CE, mean over **all** B*T positions.

    (``loss = -torch.sum(position_mask * target_p * out_logp, 2).mean()``, specforge/core/eagle3.py.)
    """
    return (position_mask.to(torch.float32) * per_position_soft_cross_entropy(logits, target_p)).mean()


def draft_accuracy(
    logits: torch.Tensor, target_p: torch.Tensor, position_mask: torch.Tensor, loss_mask: torch.Tensor
) -> float:
    """SpecForge classic ``acc``: draft-index argmax hits over ``loss_mask.sum() + 1e-6``."""
    hits = ((logits.argmax(-1) == target_p.argmax(-1)).to(torch.float32) * position_mask.to(torch.float32)).sum()
    return float(hits.item() / (loss_mask.to(torch.float32).sum().item() + 1e-6))


@dataclass(frozen=True)
class StepMetrics:
    """One TTT step's logged numbers: ``train/ploss_{i}``, ``train/acc_{i}``."""

    ploss: torch.Tensor  # differentiable scalar
    acc: float


def ttt_metrics(
    logits_per_step: list[torch.Tensor], target_logits: torch.Tensor, loss_mask: torch.Tensor, t2d: torch.Tensor
) -> list[StepMetrics]:
    """Per-step SpecForge ``ploss``/``acc`` for the logits of :func:`ttt_forward`.

    ``target_logits`` are the target's full-vocab logits at the dump's positions
    (unshifted, ``[B, T, V]``), ``loss_mask`` the dump's mask (unshifted; set its last
    position to 0 as SpecForge's offline dataset does). Step ``k`` is supervised by
    ``shift_left(target_logits, k+1)`` under ``shift_left(loss_mask, k)``. The total loss
    SpecForge backpropagates is ``sum(0.8**k * ploss_k)``.
    """
    metrics = []
    for k, logits in enumerate(logits_per_step):
        mask = shift_left(loss_mask, k)
        target_p, position_mask = target_distribution(shift_left(target_logits, k + 1), t2d, mask)
        metrics.append(
            StepMetrics(
                soft_cross_entropy(logits, target_p, position_mask),
                draft_accuracy(logits, target_p, position_mask, mask),
            )
        )
    return metrics
