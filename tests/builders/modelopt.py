"""EAGLE-3 drafters exported by nvidia-modelopt's own code (0.47.0, installed with --no-deps), beside
the transformers target they were built on.

The steps are ModelOpt's speculative-decoding example's, on a tiny Llama: ``mtsp.convert`` with
``EAGLE3_DEFAULT_CFG`` (aux ids from ``default_eagle_aux_layer_ids``: [0, 1] for a target of four
layers or fewer, [1, 3, 4] for eight), the draft vocab by ``calibrate_frequent_vocab`` over a chat
(``d2t`` in frequency order) loaded with ``HFEagleModel.load_draft_vocab_cache``, and
``model.get_exporter().export(dir)`` (``EagleExporter``: ``model.safetensors`` with ``layers.0.*``,
``d2t`` and no ``t2d``; ``config.json`` from the export template).

Importing modelopt takes ~20 s and patches transformers, so the exports run in one child process
(``python -m builders.modelopt``), once per test run whichever xdist worker asks first
(builders.cache); the tests only read what it wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from builders.cache import builders_key, built_once_per_run

TARGET_VOCAB = 8192  # builders.target_dumps.VOCAB: the char tokenizer's size
HIDDEN = 64


TARGET_LAYERS = (2, 8)  # ModelOpt's two aux-layer defaults: [0, 1] up to four layers, [1, 3, 4] above


def modelopt_exports_into(out: Path, *, draft_vocab: int = 1000, timeout: int = 900) -> dict[int, Path]:
    """``out/<layers>/target`` (transformers save_pretrained) and ``out/<layers>/drafter`` (ModelOpt's
    export) for each of TARGET_LAYERS, all in one child process; returns the roots by target depth."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent), *sys.path]))
    done = subprocess.run(
        [sys.executable, "-m", "builders.modelopt", str(out), str(draft_vocab), *map(str, TARGET_LAYERS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"modelopt export failed:\n{done.stderr[-4000:]}")
    return {layers: out / str(layers) for layers in TARGET_LAYERS}


@pytest.fixture(scope="session")
def modelopt_exports(tmp_path_factory) -> dict[int, Path]:
    """ModelOpt's own exports on a 2-layer and an 8-layer target, by target depth (registered by
    tests/conftest.py; nvidia-modelopt comes with --no-deps from .ci/run, and without it the export
    fails). Shared by the run's workers: read them, write beside them in tmp_path."""
    import modelopt  # noqa: F401 - the exporter runs in a child: a broken install fails here, by name

    out = built_once_per_run(tmp_path_factory, "modelopt", builders_key(), modelopt_exports_into)
    return {layers: out / str(layers) for layers in TARGET_LAYERS}


def _chat(seed: int, distinct: int) -> list[dict]:
    """One user turn of CJK characters drawn with Zipf-like weights over a shuffled order, so that
    frequency order and token-id order differ (what makes ModelOpt's d2t frequency-ordered)."""
    import random

    from builders.target_dumps import _FIRST_CJK

    rng = random.Random(seed)
    chars = [chr(_FIRST_CJK + i) for i in range(distinct)]
    rng.shuffle(chars)
    weights = [1.0 / (rank + 1) for rank in range(distinct)]
    text = "".join(chars) + "".join(rng.choices(chars, weights=weights, k=40 * distinct))
    return [{"role": "user", "content": text}]


def _export(root: Path, target_layers: int, draft_vocab: int) -> None:
    from copy import deepcopy

    import modelopt.torch.speculative as mtsp
    import torch
    from modelopt.torch.speculative.config import EAGLE3_DEFAULT_CFG
    from modelopt.torch.speculative.plugins.hf_eagle import HFEagleModel
    from modelopt.torch.speculative.utils import calibrate_frequent_vocab
    from transformers import LlamaConfig, LlamaForCausalLM

    from builders.target_dumps import char_tokenizer

    root.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=target_layers,
        vocab_size=TARGET_VOCAB,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(root / "target"))

    eagle = deepcopy(EAGLE3_DEFAULT_CFG["config"])
    eagle["eagle_architecture_config"].update(
        draft_vocab_size=draft_vocab,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    eagle["eagle_use_torch_compile"] = False  # CPU, one export: nothing to compile
    mtsp.convert(model, [("eagle", eagle)])

    tokenizer = char_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"
    cache = root / "d2t.pt"
    calibrate_frequent_vocab(tokenizer, _chat(0, draft_vocab + 200), draft_vocab, str(cache))
    HFEagleModel.load_draft_vocab_cache(model, str(cache))
    model.get_exporter().export(str(root / "drafter"))  # convert made it an HFEagleModel
    (root / "built.json").write_text(json.dumps({"target_layers": target_layers, "draft_vocab": draft_vocab}))


if __name__ == "__main__":
    _out, _draft_vocab, *_layers = sys.argv[1:]
    for _target_layers in map(int, _layers):
        _export(Path(_out) / str(_target_layers), _target_layers, int(_draft_vocab))
