"""The three tensors of a target model that the checks need: embedding, lm_head, final norm.

Looked up by name through ``model.safetensors.index.json`` (or the single weights file) so that
only the shards holding them are opened (SpecForge ``load_embedding`` and ``TargetHead`` read the
same names: ``model.embed_tokens.weight``, ``lm_head.weight``; SpecForge classic
`specforge/modeling/draft/llama3_eagle.py`).
Multimodal wrappers (``language_model.model.embed_tokens.weight``, ``text_config``) are accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.weights import WeightFiles, find_weights, read_config

# Suffixes of the wanted names; the shortest match outside decoder layers wins, so that an MTP
# layer's copy (DeepSeek-V3/Kimi ``model.layers.61.embed_tokens.weight``) is never taken.
_EMBED, _LM_HEAD, _NORM = "embed_tokens.weight", "lm_head.weight", "model.norm.weight"


@dataclass(frozen=True, eq=False)
class TargetModel:
    path: Path
    config: dict  # the text model's config (``text_config`` when nested)
    vocab_size: int
    hidden_size: int
    num_layers: int
    tied: bool  # lm_head is the embedding (tie_word_embeddings)
    _weights: WeightFiles = field(repr=False)
    tensor_names: dict[str, str | None] = field(default_factory=dict)  # role -> stored name
    # config.json's ``architectures`` (the top level's for a multimodal model): which model file an
    # engine builds, and with it how it reads a drafter's aux layer ids (core/diagnose/checks/config_contract.py).
    architectures: tuple[str, ...] = ()
    # config.json's own tie_word_embeddings (None when it says nothing; ``tied`` then follows
    # transformers' default): what a trainer reading the config sees.
    tie_word_embeddings: bool | None = None

    def _name(self, role: str) -> str:
        name = self.tensor_names.get(role)
        if name is None:  # read_target names embed_tokens always, lm_head unless tied; final_norm asks first
            raise KeyError(f"the target has no {role} tensor")
        return name

    def _load(self, role: str) -> torch.Tensor:
        return self._weights.load(self._name(role))

    def embed_tokens(self) -> torch.Tensor:
        """``[vocab_size, hidden_size]`` as stored (dtype unchanged)."""
        return self._load("embed_tokens")

    def lm_head(self) -> torch.Tensor:
        """``[vocab_size, hidden_size]``; the embedding when tied."""
        return self._load("embed_tokens" if self.tied else "lm_head")

    def lm_head_rows(self, start: int, stop: int) -> torch.Tensor:
        """Rows [start, stop) of ``lm_head`` as stored, the rest unread (a K2 head is 2.2 GiB in bf16)."""
        name = self._name("embed_tokens" if self.tied else "lm_head")
        return self._weights.load_rows(name, [(start, stop)])[0]

    def embed_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """``embed_tokens[ids]`` (any shape of ids -> ``[*ids.shape, hidden]``), reading only those rows."""
        unique, inverse = torch.unique(ids.reshape(-1), return_inverse=True)
        values = unique.tolist()
        if values and (values[0] < 0 or values[-1] >= self.vocab_size):
            bad = values[0] if values[0] < 0 else values[-1]
            raise ValueError(f"token id {bad} is outside the target's vocab of {self.vocab_size}")
        spans, start = [], 0
        for i in range(1, len(values) + 1):  # consecutive ids are read as one span
            if i == len(values) or values[i] != values[i - 1] + 1:
                spans.append((values[start], values[i - 1] + 1))
                start = i
        rows = torch.cat(self._weights.load_rows(self._name("embed_tokens"), spans)) if spans else None
        if rows is None:
            return torch.empty((*ids.shape, self.hidden_size))
        return rows[inverse].reshape(*ids.shape, rows.shape[-1])

    def embed_dtype(self) -> str:
        """The stored dtype of ``embed_tokens`` ("bfloat16", ...), from its header."""
        info = self._weights.info(self._name("embed_tokens"))
        return info.dtype if info is not None else "unknown"

    def final_norm(self) -> torch.Tensor | None:
        """The final RMSNorm weight ``[hidden_size]``, None when the weights hold none."""
        return self._load("norm") if self.tensor_names.get("norm") else None


def _find_name(names: list[str], suffix: str) -> str | None:
    matches = [
        n
        for n in names
        if (n == suffix or n.endswith("." + suffix)) and ".layers." not in n and not n.startswith("layers.")
    ]
    if not matches:
        return None
    shortest = min(len(n) for n in matches)
    best = [n for n in matches if len(n) == shortest]
    return best[0] if len(best) == 1 else None


def _text_config(config: dict) -> dict:
    if "vocab_size" not in config and isinstance(config.get("text_config"), dict):
        return config["text_config"]
    return config


def _config_size(path: Path, config: dict, key: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise BadInput(path / "config.json", f"no usable {key} (found {value!r})")
    return value


def read_target(path: str | Path) -> TargetModel:
    """A target model directory (config.json + weights); reads only metadata until asked."""
    weights = find_weights(path)
    root = weights.root
    full_config = read_config(root)
    if full_config is None:
        raise BadInput(root, "no config.json; a target model directory has one")
    config = _text_config(full_config)
    vocab = _config_size(root, config, "vocab_size")
    hidden = _config_size(root, config, "hidden_size")
    layers = _config_size(root, config, "num_hidden_layers")

    names = weights.names()
    found = {
        "embed_tokens": _find_name(names, _EMBED),
        "lm_head": _find_name(names, _LM_HEAD),
        "norm": _find_name(names, _NORM),
    }
    if found["embed_tokens"] is None:
        raise BadInput(root, "no model.embed_tokens.weight in the weights")
    tie = full_config.get("tie_word_embeddings", config.get("tie_word_embeddings"))
    if found["lm_head"] is None and tie is False:
        raise BadInput(root, "no lm_head.weight and config.json says tie_word_embeddings is false")
    # transformers' default is tie_word_embeddings=True, so a missing head with no flag is tied.
    tied = bool(tie) or found["lm_head"] is None

    for role, expected in (("embed_tokens", (vocab, hidden)), ("lm_head", (vocab, hidden)), ("norm", (hidden,))):
        name = found[role]
        if name is None or (role == "lm_head" and tied):
            continue
        info = weights.info(name)
        assert info is not None  # the name came from this same listing of the weights
        if info.shape != expected:
            raise BadInput(
                info.file, f"tensor {info.name!r} has shape {list(info.shape)}; config.json implies {list(expected)}"
            )
    return TargetModel(
        path=root,
        config=config,
        vocab_size=vocab,
        hidden_size=hidden,
        num_layers=layers,
        tied=tied,
        tensor_names=found,
        _weights=weights,
        architectures=_architectures(full_config, config),
        tie_word_embeddings=tie if isinstance(tie, bool) else None,
    )


def _architectures(full_config: dict, text_config: dict) -> tuple[str, ...]:
    names = full_config.get("architectures") or text_config.get("architectures")
    return tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()
