"""The tiny EAGLE-3 world the sample runs are trained in: a corpus generator and a target model.

Everything here is deterministic from a seed and small enough to train drafters on two CPU
cores in minutes, while keeping the one size that matters to the story: a draft vocab of
32 000 (the chance line is ln 32 000 = 10.37, as in docs/case.md) inside a
target vocab of 40 000 (large enough for two 32 000-token draft vocabs to differ by a fifth).

The corpus. Each sequence is a 2-token "prompt" (loss_mask 0) and a 62-token "response"
(loss_mask 1). Fresh tokens follow a Zipf profile in which low ids are the frequent ones (as
in BPE vocabularies). 2048 "rule tokens" among the 6000 lowest ids carry two deterministic
rules: with probability ``p_skip`` (0.75) the next token is ``skip_successor[previous]``,
where "previous" is the token *before* the current one (so a drafter can only know it from
the target's hidden states), with ``p_next`` (0.15) it is ``successor[current]``; otherwise,
or when the token a rule needs is not a rule token, it is a fresh draw. Two domains share the
rules and differ in their unigram profile ("A": what the public drafter was trained on; "B":
the fine-tune's data, where a fifth of the ids above the 256 shared byte-like ones get a new
rank), so the vocab mappings counted from them share most tokens but few positions.

The target. ``TinyTarget`` is a small causal LM written for this world and NOT trained: every
weight is set by construction. Embeddings are random codes plus one constant coordinate;
each layer rotates the codes and grows them by 10 % (the residual stream grows with depth,
so the low/mid/high aux states differ in basis and in RMS); layer 2 adds the rotated code of
the previous position (a "token shift"); each layer's SwiGLU MLP writes 8 scratch
coordinates that lm_head ignores. ``lm_head`` reads, from the final post-norm state, the
skip successor of the previous token, the successor of the current one and a log-unigram
prior (from the constant coordinate), with hand-set scales. It is deliberately confident
(mean entropy about 1 nat) and follows the skip rule almost always, so it is a sharper teacher
than its corpus (its NLL on the corpus is poor): its job is to give drafters a structured,
learnable next-token distribution that depends on the hidden states. Weights are rounded to
fp16 (as shipped) before anything is computed with them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from triage_tui.core.vocab import VocabMapping

TARGET_VOCAB_SIZE = 40_000
DRAFT_VOCAB_SIZE = 32_000


@dataclass(frozen=True)
class WorldSpec:
    """Sizes, rule strengths and the seed of the world (every default is what sample_runs/ was built with)."""

    target_vocab_size: int = TARGET_VOCAB_SIZE
    draft_vocab_size: int = DRAFT_VOCAB_SIZE
    hidden_size: int = 64
    num_layers: int = 10
    intermediate_size: int = 128
    prompt_len: int = 2
    seq_len: int = 64
    p_next: float = 0.15
    p_skip: float = 0.75
    zipf_exponent: float = 1.0
    zipf_offset: float = 20.0
    # ids below this keep their rank in both domains (byte-like tokens every corpus uses)
    shared_head: int = 256
    # share of the other ids whose rank domain B redraws at random (its "new topics")
    domain_shift: float = 0.2
    # how many tokens take part in the rules (shared by both domains), drawn from ids
    # [0, rule_id_limit): the frequent end of the vocab
    rule_vocab: int = 2048
    rule_id_limit: int = 6000
    # target: how strongly the copying layer adds the previous token's code to the stream
    prev_token_weight: float = 1.5
    # the layer that copies the previous token in: after the "low" capture layer, so the low
    # aux state holds the current token alone and the mid/high ones hold both
    prev_token_layer: int = 2
    # coordinates (at the end) only the MLPs write to; lm_head does not read them
    scratch_dims: int = 8
    # each layer scales the token codes by this much: the residual stream grows with depth
    # (as in real LMs), so low -> mid -> high aux states have growing RMS
    stream_growth: float = 1.1
    # lm_head = a * (successor readout) + b * (skip-successor readout) + c * (log prior readout)
    lm_head_scales: tuple[float, float, float] = (0.25, 0.45, 3.0)
    seed: int = 1234

    @property
    def aux_layer_ids(self) -> tuple[int, int, int]:
        """SpecForge's default capture layers ``[1, N//2 - 1, N - 4]``, output-of-layer convention."""
        n = self.num_layers
        return (1, n // 2 - 1, n - 4)


# ---------------------------------------------------------------------------------------------
# corpus


def _rng(spec: WorldSpec, *salt: int) -> np.random.Generator:
    return np.random.default_rng([spec.seed, *salt])


def domain_unigram(spec: WorldSpec, domain: str) -> np.ndarray:
    """Unigram probabilities of fresh draws over the target vocab, for domain "A" or "B"."""
    v, head = spec.target_vocab_size, spec.shared_head
    # Domain A: rank ~ id, with local shuffles above the shared head (frequency is only
    # roughly ordered by id in a real BPE vocab).
    key = np.arange(v, dtype=np.float64)
    key[head:] += _rng(spec, 1).uniform(-32.0, 32.0, v - head)
    if domain == "B":
        # Domain B: a random share of the ids above the head get a rank drawn anew.
        rng = _rng(spec, 2)
        moved = head + np.flatnonzero(rng.random(v - head) < spec.domain_shift)
        key[moved] = rng.uniform(head, v, moved.size)
    elif domain != "A":
        raise ValueError(f"unknown domain {domain!r}")
    rank = np.empty(v, dtype=np.int64)
    rank[np.argsort(key, kind="stable")] = np.arange(v)
    weights = 1.0 / (rank + spec.zipf_offset) ** spec.zipf_exponent
    return weights / weights.sum()


@dataclass(frozen=True)
class Rules:
    """The corpus rules: ``successor[x]`` / ``skip_successor[x]`` for rule tokens, -1 for the others."""

    successor: np.ndarray
    skip_successor: np.ndarray

    @property
    def rule_tokens(self) -> np.ndarray:
        return np.flatnonzero(self.successor >= 0)


def corpus_rules(spec: WorldSpec) -> Rules:
    """Rule tokens: ``rule_vocab`` ids among the ``rule_id_limit`` lowest; two permutations of them."""
    rng = _rng(spec, 3)
    tokens = np.sort(rng.choice(spec.rule_id_limit, spec.rule_vocab, replace=False))
    nxt = np.full(spec.target_vocab_size, -1, dtype=np.int64)
    skip = np.full(spec.target_vocab_size, -1, dtype=np.int64)
    nxt[tokens] = tokens[rng.permutation(tokens.size)]
    skip[tokens] = tokens[rng.permutation(tokens.size)]
    return Rules(nxt, skip)


@dataclass(frozen=True)
class Corpus:
    """Token ids ``[n, T]`` and SpecForge-style loss mask ``[n, T]`` (1 on response tokens)."""

    input_ids: np.ndarray
    loss_mask: np.ndarray
    domain: str
    target_vocab_size: int


def generate_corpus(spec: WorldSpec, domain: str, num_sequences: int, *, salt: int = 0) -> Corpus:
    """Sample ``num_sequences`` sequences of the domain, vectorised over sequences."""
    rng = _rng(spec, 10, ord(domain), salt)
    cdf = np.cumsum(domain_unigram(spec, domain))
    cdf[-1] = 1.0
    rules = corpus_rules(spec)
    n, t_len, v = num_sequences, spec.seq_len, spec.target_vocab_size

    def fresh(shape) -> np.ndarray:
        return np.minimum(np.searchsorted(cdf, rng.random(shape), side="right"), v - 1)

    ids = np.empty((n, t_len), dtype=np.int64)
    ids[:, : spec.prompt_len] = fresh((n, spec.prompt_len))
    for t in range(spec.prompt_len, t_len):
        u = rng.random(n)
        draw = fresh(n)
        by_next = rules.successor[ids[:, t - 1]]
        by_skip = rules.skip_successor[ids[:, t - 2]]
        pick = np.where(u < spec.p_next, by_next, np.where(u < spec.p_next + spec.p_skip, by_skip, -1))
        ids[:, t] = np.where(pick >= 0, pick, draw)
    mask = np.zeros((n, t_len), dtype=np.int64)
    mask[:, spec.prompt_len :] = 1
    return Corpus(ids, mask, domain, v)


# ---------------------------------------------------------------------------------------------
# target model


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


class TinyTarget(nn.Module):
    """A causal LM: per layer a linear map of the stream, a token shift and a SwiGLU MLP (no attention).

    Layer ``l``: ``h_t <- mix_l h_t + shift_l h_{t-1} + down_l(silu(gate_l x) * up_l x)``,
    ``x = rmsnorm(h_t)``. The final state is ``rmsnorm(h)``, logits ``lm_head @ state``.
    """

    def __init__(self, spec: WorldSpec) -> None:
        super().__init__()
        self.spec = spec
        v, h, i, n = spec.target_vocab_size, spec.hidden_size, spec.intermediate_size, spec.num_layers
        self.eps = 1e-6
        self.embed_tokens = nn.Parameter(torch.zeros(v, h))
        self.mix = nn.Parameter(torch.zeros(n, h, h))
        self.shift = nn.Parameter(torch.zeros(n, h, h))
        self.mlp_norm = nn.Parameter(torch.ones(n, h))
        self.gate_proj = nn.Parameter(torch.zeros(n, i, h))
        self.up_proj = nn.Parameter(torch.zeros(n, i, h))
        self.down_proj = nn.Parameter(torch.zeros(n, h, i))
        self.norm = nn.Parameter(torch.ones(h))
        self.lm_head = nn.Parameter(torch.zeros(v, h))

    def layer_states(self, input_ids: torch.Tensor) -> list[torch.Tensor]:
        """Residual stream after each layer, ``[B, T, H]`` each (index l = output of layer l)."""
        h = F.embedding(input_ids, self.embed_tokens)
        states = []
        for layer in range(self.spec.num_layers):
            prev = torch.cat((torch.zeros_like(h[:, :1]), h[:, :-1]), dim=1)
            x = _rms_norm(h, self.mlp_norm[layer], self.eps)
            mlp = (F.silu(x @ self.gate_proj[layer].T) * (x @ self.up_proj[layer].T)) @ self.down_proj[layer].T
            h = h @ self.mix[layer].T + prev @ self.shift[layer].T + mlp
            states.append(h)
        return states

    @torch.no_grad()
    def hidden_states(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(aux [B, T, 3H] low|mid|high, last [B, T, H] post-final-norm)`` as SpecForge dumps them."""
        states = self.layer_states(input_ids)
        aux = torch.cat([states[i] for i in self.spec.aux_layer_ids], dim=-1)
        return aux, _rms_norm(states[-1], self.norm, self.eps)

    def logits_from_last(self, last: torch.Tensor) -> torch.Tensor:
        """SpecForge's offline ``TargetHead``: the lm_head over the stored post-norm hidden."""
        return last @ self.lm_head.T

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """HF-style tensor names (``model.embed_tokens.weight``, ``lm_head.weight``, ...), fp16 as shipped."""
        out: dict[str, torch.Tensor] = {
            "model.embed_tokens.weight": self.embed_tokens,
            "model.norm.weight": self.norm,
            "lm_head.weight": self.lm_head,
        }
        for layer in range(self.spec.num_layers):
            for name, value in self._layer_tensors(layer).items():
                out[f"model.layers.{layer}.{name}"] = value
        return {k: v.detach().to(torch.float16).contiguous() for k, v in out.items()}

    def _layer_tensors(self, layer: int) -> dict[str, torch.Tensor]:
        return {
            "mix.weight": self.mix[layer],
            "token_shift.weight": self.shift[layer],
            "post_attention_layernorm.weight": self.mlp_norm[layer],
            "mlp.gate_proj.weight": self.gate_proj[layer],
            "mlp.up_proj.weight": self.up_proj[layer],
            "mlp.down_proj.weight": self.down_proj[layer],
        }

    def load_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            self.embed_tokens.copy_(tensors["model.embed_tokens.weight"].float())
            self.norm.copy_(tensors["model.norm.weight"].float())
            self.lm_head.copy_(tensors["lm_head.weight"].float())
            for layer in range(self.spec.num_layers):
                for name, param in self._layer_tensors(layer).items():
                    param.copy_(tensors[f"model.layers.{layer}.{name}"].float())

    def config(self) -> dict:
        s = self.spec
        return {
            "architectures": ["TriageTinyCausalLM"],
            "model_type": "triage_tiny",
            "description": "hand-built target of triage's sample world (triage_tui/samples/world.py): "
            "per layer a linear map, a token shift and a SwiGLU MLP; no attention",
            "vocab_size": s.target_vocab_size,
            "hidden_size": s.hidden_size,
            "num_hidden_layers": s.num_layers,
            "intermediate_size": s.intermediate_size,
            "rms_norm_eps": self.eps,
            "tie_word_embeddings": False,
            "torch_dtype": "float16",
        }


def _orthogonal(gen: torch.Generator, n: int) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).float()


def build_target(spec: WorldSpec) -> TinyTarget:
    """The target of the world, every weight set by construction.

    Coordinates: 0 is a constant (1 in every embedding; no layer writes it), so lm_head can
    read a prior from it; 1..C hold token codes; the last ``scratch_dims`` are written only
    by the MLPs (they make the stream grow with depth, as real residual streams do, and
    make every layer's state different) and are not read by lm_head.
    """
    gen = torch.Generator().manual_seed(spec.seed + 7)
    model = TinyTarget(spec)
    v, h, i, n = spec.target_vocab_size, spec.hidden_size, spec.intermediate_size, spec.num_layers
    code = slice(1, h - spec.scratch_dims)
    c = h - spec.scratch_dims - 1
    scratch = slice(h - spec.scratch_dims, h)
    rules = corpus_rules(spec)

    def on_code(m: torch.Tensor) -> torch.Tensor:
        full = torch.eye(h)
        full[code, code] = m
        return full

    with torch.no_grad():
        emb = torch.zeros(v, h)
        emb[:, 0] = 1.0
        emb[:, code] = torch.randn(v, c, generator=gen)
        model.embed_tokens.copy_(emb)
        # every layer rotates the token-code subspace (so low, mid and high states are in
        # different bases); one layer also adds the rotated code of the previous token
        rotations = [_orthogonal(gen, c) for _ in range(n)]
        copy_prev = _orthogonal(gen, c)
        for layer in range(n):
            model.mix[layer].copy_(on_code(spec.stream_growth * rotations[layer]))
        model.shift[spec.prev_token_layer][code, code] = spec.prev_token_weight * copy_prev
        model.gate_proj.copy_(torch.randn(n, i, h, generator=gen) / math.sqrt(h))
        model.up_proj.copy_(torch.randn(n, i, h, generator=gen) / math.sqrt(h))
        model.down_proj[:, scratch] = torch.randn(n, spec.scratch_dims, i, generator=gen) * (1.5 / math.sqrt(i))
    # What the final state holds in the code subspace: the current token's code through every
    # rotation, and the previous token's code as described below.
    after_all = torch.eye(c)
    for rot in rotations:
        after_all = rot @ after_all
    # the previous token's code as the copying layer reads it (rotated by the layers before),
    # then copied, then rotated by the layers after
    before_copy = torch.eye(c)
    for rot in rotations[: spec.prev_token_layer]:
        before_copy = rot @ before_copy
    after_copy = torch.eye(c)
    for rot in rotations[spec.prev_token_layer + 1 :]:
        after_copy = rot @ after_copy
    # (the growth factor only rescales; lm_head reads the post-norm state, so it is left out)
    emb_code = model.embed_tokens.detach()[:, code]
    tokens = torch.from_numpy(rules.rule_tokens)
    read_next = torch.zeros(v, h)
    read_skip = torch.zeros(v, h)
    read_next[torch.from_numpy(rules.successor[rules.rule_tokens]), code] = emb_code[tokens] @ after_all.T
    read_skip[torch.from_numpy(rules.skip_successor[rules.rule_tokens]), code] = (
        emb_code[tokens] @ (after_copy @ copy_prev @ before_copy).T
    )
    prior = 0.5 * (domain_unigram(spec, "A") + domain_unigram(spec, "B"))
    log_prior = torch.from_numpy(np.log(prior)).float()
    read_prior = torch.zeros(v, h)
    read_prior[:, 0] = log_prior - log_prior.mean()
    scales = spec.lm_head_scales
    with torch.no_grad():
        model.lm_head.copy_(scales[0] * read_next + scales[1] * read_skip + scales[2] * read_prior)
        for p in model.parameters():  # shipped in fp16: compute with exactly those values
            p.copy_(p.to(torch.float16).to(torch.float32))
    return model


# ---------------------------------------------------------------------------------------------
# saving / loading the target


def save_target(model: TinyTarget, out_dir: Path) -> None:
    """``config.json`` + ``model.safetensors`` (HF names, fp16), as a target model directory."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(model.config(), indent=2) + "\n")
    save_file(model.state_tensors(), str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def load_target(path: Path, spec: WorldSpec) -> TinyTarget:
    """Rebuild the target from its directory (the demo trainer runs it from there)."""
    from safetensors.torch import load_file

    model = TinyTarget(spec)
    model.load_tensors(load_file(str(path / "model.safetensors")))
    return model


# ---------------------------------------------------------------------------------------------
# vocab mappings, counted from a corpus the way the trainers count them


def token_counts(corpus: Corpus, *, loss_masked_only: bool = True) -> np.ndarray:
    """Occurrences of every target id (SpecForge counts loss-masked tokens; modelopt counts all)."""
    ids = corpus.input_ids[corpus.loss_mask.astype(bool)] if loss_masked_only else corpus.input_ids.ravel()
    return np.bincount(ids, minlength=corpus.target_vocab_size)


def _most_common(counts: np.ndarray, k: int) -> np.ndarray:
    # Counter.most_common order: by count, ties broken here by the lower id (Counter keeps
    # first-seen order, which for a corpus this size is a coin toss among equal counts)
    return np.lexsort((np.arange(counts.size), -counts))[:k]


def specforge_mapping(counts: np.ndarray, draft_vocab_size: int, *, source: str = "") -> VocabMapping:
    """SpecForge ``generate_vocab_mapping_file``: most_common(Vd), pad with the lowest unused ids, sort ascending."""
    seen = _most_common(counts, draft_vocab_size)
    seen = seen[counts[seen] > 0]
    if seen.size < draft_vocab_size:
        unused = np.setdiff1d(np.arange(counts.size), seen)[: draft_vocab_size - seen.size]
        seen = np.concatenate((seen, unused))
    return VocabMapping(np.sort(seen), int(counts.size), source=source)


def modelopt_mapping(counts: np.ndarray, draft_vocab_size: int, *, source: str = "") -> VocabMapping:
    """modelopt ``calibrate_frequent_vocab``: most_common(Vd) in frequency order, not sorted."""
    return VocabMapping(_most_common(counts, draft_vocab_size), int(counts.size), source=source)
