"""The loss-mask check on SpecForge dumps whose masks SpecForge's own parser built.

``specforge.data.parse.GeneralParser.parse`` (SpecForge 0.2.0) turns a preformatted Qwen-format
conversation into ``input_ids`` and ``loss_mask``; parsed with the Qwen template the mask covers
the answers, with the Llama-3 template (whose assistant header is not in the text: SpecForge
#392's ``--is-preformatted`` data) it is all zero. The files are written with ``torch.save`` in
``scripts/prepare_hidden_states.py``'s layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from builders.check_run import details_of
from builders.target_dumps import HIDDEN, char_tokenizer, conversations
from triage_tui.core.diagnose.checks.loss_mask import MAJORITY, NAME, LossMaskDetails, SampleMask, check_loss_mask
from triage_tui.core.formats.hidden_states import read_dumps


def _parse(template: str, count: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    from specforge.data.parse import GeneralParser
    from specforge.data.template import TEMPLATE_REGISTRY

    parser = GeneralParser(char_tokenizer(), TEMPLATE_REGISTRY.get(template))
    out = []
    for i, question in enumerate(conversations(count)):
        text = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\nanswer number {i} here<|im_end|>\n"
        out.append(parser.parse(text, max_length=512, preformatted=True))
    return out


def _write(root: Path, samples: list[tuple[torch.Tensor, torch.Tensor]]) -> Path:
    rows = root / "rows_0-5000"
    rows.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    for i, (ids, mask) in enumerate(samples):
        tokens = ids.shape[0]
        torch.save(
            {
                "input_ids": ids,
                "loss_mask": mask,
                "hidden_state": torch.randn(1, tokens, HIDDEN, generator=g).bfloat16(),
                "aux_hidden_state": torch.randn(1, tokens, 3 * HIDDEN, generator=g).bfloat16(),
            },
            rows / f"data_{i}.ckpt",
        )
    return root


def test_the_template_s_mask_passes_with_its_fractions(tmp_path):
    parsed = _parse("qwen")
    result = check_loss_mask(read_dumps(_write(tmp_path, parsed)))
    details = details_of(result, LossMaskDetails)
    assert result.name == NAME and result.status == "pass", result.summary
    assert isinstance(details, LossMaskDetails)
    expected = sum(int(m.sum()) for _, m in parsed) / sum(m.numel() for _, m in parsed)
    assert details.fraction == pytest.approx(expected) and 0.3 < expected < 0.6
    assert (details.empty, details.starved, details.covering_prompt) == (0, 0, 0)
    first = [int(np.flatnonzero(m.numpy())[0]) for _, m in parsed]
    assert [s.first_supervised for s in details.samples] == first and min(first) > 0
    assert details.to_json()["samples_empty"] == 0 and len(details.to_json()["per_sample"]) == 4
    assert any("positions supervised" in line for line in details.drilldown())


def test_a_template_that_does_not_match_the_text_gives_empty_masks(tmp_path):
    result = check_loss_mask(read_dumps(_write(tmp_path, _parse("llama3"))))
    details = details_of(result, LossMaskDetails)
    assert result.status == "fail"
    assert details.empty == 4 and details.fraction == 0.0
    assert "4 of 4 sampled dumps have an all-zero loss_mask" in result.summary


def test_a_mask_of_ones_covers_the_prompt(tmp_path):
    ones = [(ids, torch.ones_like(mask)) for ids, mask in _parse("qwen")]
    result = check_loss_mask(read_dumps(_write(tmp_path, ones)))
    details = details_of(result, LossMaskDetails)
    assert result.status == "fail" and details.covering_prompt == 4
    assert details.fraction == 1.0
    assert "supervise position 0" in result.summary and "100.0% of all positions" in result.summary


def test_isolated_supervised_tokens_starve_the_sample(tmp_path):
    # Only the end-of-turn marker of each answer supervised: what a pattern matching the marker
    # alone gives.
    starved = []
    for ids, mask in _parse("qwen"):
        last = int(np.flatnonzero(mask.numpy())[-1])
        only = torch.zeros_like(mask)
        only[last] = 1
        starved.append((ids, only))
    result = check_loss_mask(read_dumps(_write(tmp_path, starved)))
    details = details_of(result, LossMaskDetails)
    assert result.status == "fail" and details.starved == 4
    assert "no two adjacent tokens" in result.summary


def test_speculators_dumps_store_no_mask_and_the_check_says_so(tmp_path):
    from safetensors.torch import save_file

    save_file(
        {"token_ids": torch.arange(8), "hidden_states": torch.randn(8, 4, HIDDEN).bfloat16()},
        str(tmp_path / "hs_0.safetensors"),
    )
    result = check_loss_mask(read_dumps(tmp_path))
    assert result.status == "skipped" and "store no loss_mask" in result.summary
    assert check_loss_mask(None).status == "skipped"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["ok", "empty", "ones"]), min_size=1, max_size=8))
def test_a_finding_is_the_verdict_exactly_when_a_majority_shows_it(kinds):
    def sample(kind: str) -> SampleMask:
        supervised = {"ok": 10, "empty": 0, "ones": 40}[kind]
        first = {"ok": 12, "empty": None, "ones": 0}[kind]
        return SampleMask("f", 40, supervised, first, supervised > 1)

    details = LossMaskDetails(len(kinds), tuple(sample(k) for k in kinds), 0)
    findings = details.findings()
    empty, ones = kinds.count("empty") / len(kinds), kinds.count("ones") / len(kinds)
    assert any("all-zero" in f for f in findings) == (empty >= MAJORITY)
    assert any("position 0" in f for f in findings) == (ones >= MAJORITY)
