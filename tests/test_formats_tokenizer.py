"""read_token_strings on tokenizer files; the real `tokenizers` library writes them when installed."""

from __future__ import annotations

import base64
import json

import pytest
import tokenizers

from triage_tui.core.errors import BadInput
from triage_tui.core.formats.tokenizer import read_token_strings

CORPUS = [
    "The drafter's lm_head rows follow the checkpoint's vocab mapping, not the run's.",
    "Only 252 of 32 000 draft positions mapped to the same target token.",
    "héllo wörld — naïve café; 数据 映射 不一致",
    "def forward(self, x):\n    return x + 1\n",
] * 20


def test_byte_level_bpe_tokenizer_json_matches_the_library(tmp_path):
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    strings = read_token_strings(tmp_path)
    assert len(strings) == tok.get_vocab_size(with_added_tokens=True)
    compared = 0
    for token_id, text in strings.items():
        expected = tok.decode([token_id], skip_special_tokens=False)
        if "\ufffd" not in expected:  # partial UTF-8 bytes: both sides show a replacement char
            assert text == expected, token_id
            compared += 1
    assert compared > 200  # of ~400: the 128 lone high bytes decode to U+FFFD
    assert strings[tok.token_to_id("<|im_end|>")] == "<|im_end|>"
    assert " drafter" in strings.values() or " the" in strings.values()

    # GPT-2 style vocab.json, written by the same model
    vocab_dir = tmp_path / "vocab"
    vocab_dir.mkdir()
    tok.model.save(str(vocab_dir))
    from_vocab = read_token_strings(vocab_dir / "vocab.json")
    assert all(from_vocab[i] == strings[i] for i in from_vocab)


def test_unigram_metaspace_tokenizer_json(tmp_path):
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(
        CORPUS, trainers.UnigramTrainer(vocab_size=150, special_tokens=["<unk>"], unk_token="<unk>")
    )
    tok.save(str(tmp_path / "tokenizer.json"))
    strings = read_token_strings(tmp_path / "tokenizer.json")
    assert len(strings) == tok.get_vocab_size()
    word = next(i for i, t in strings.items() if t.startswith(" ") and len(t) > 2)
    assert tok.id_to_token(word) == "▁" + strings[word][1:]


def test_hand_written_tokenizer_json(tmp_path):
    # The documented shape, so this reader is tested even without the tokenizers library.
    data = {
        "version": "1.0",
        "added_tokens": [{"id": 3, "content": "<|im_end|>", "special": True}],
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}]},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": {"the": 0, "Ġthe": 1, "Ċ": 2}, "merges": []},
    }
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    assert read_token_strings(tmp_path) == {0: "the", 1: " the", 2: "\n", 3: "<|im_end|>"}


def test_tiktoken_model_with_added_tokens(tmp_path):
    # Kimi-K2: tiktoken.model ("<base64> <rank>") + tokenizer_config.json added_tokens_decoder
    pieces = [b"the", b" the", "数据".encode(), b"\xe6"]
    lines = [base64.b64encode(p).decode() + f" {i}" for i, p in enumerate(pieces)]
    (tmp_path / "tiktoken.model").write_text("\n".join(lines) + "\n")
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "added_tokens_decoder": {
                    "163584": {"content": "[BOS]", "special": True},
                    "163586": {"content": "<|im_end|>", "special": True},
                }
            }
        )
    )
    strings = read_token_strings(tmp_path)
    assert strings == {0: "the", 1: " the", 2: "数据", 3: "\ufffd", 163584: "[BOS]", 163586: "<|im_end|>"}


def test_absent_and_malformed(tmp_path):
    assert read_token_strings(tmp_path) is None
    assert read_token_strings(tmp_path / "missing") is None
    (tmp_path / "tokenizer.json").write_text("{oops")
    with pytest.raises(BadInput, match="tokenizer.json: not valid JSON"):
        read_token_strings(tmp_path)
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": "zero"}}}))
    with pytest.raises(BadInput, match="token 'a' has id 'zero', not a non-negative integer"):
        read_token_strings(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "tiktoken.model").write_text("not base64!! 0\n")
    with pytest.raises(BadInput, match="line 1 is not '<base64> <rank>'"):
        read_token_strings(tmp_path)
