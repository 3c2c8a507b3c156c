"""The dump-values check on SpecForge-layout dumps written with torch.save: NaN/inf and the stored dtype."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from builders.check_run import details_of
from triage_tui.core.diagnose.checks.dump_values import NAME, DumpValuesDetails, check_dump_values, target_dtype
from triage_tui.core.formats.hidden_states import read_dumps

HIDDEN = 16
TOKENS = 32


def _write(root: Path, *, files: int = 4, dtype=torch.bfloat16, scale: float = 1.0, poison=None) -> Path:
    rows = root / "rows_0-5000"
    rows.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    for i in range(files):
        aux = scale * torch.randn(1, TOKENS, 3 * HIDDEN, generator=g)
        if poison is not None and poison[0] == i:
            aux[0, poison[1], poison[2]] = poison[3]
        torch.save(
            {
                "input_ids": torch.randint(0, 100, (TOKENS,), generator=g),
                "loss_mask": torch.ones(TOKENS, dtype=torch.long),
                "hidden_state": torch.randn(1, TOKENS, HIDDEN, generator=g).to(dtype),
                "aux_hidden_state": aux.to(dtype),
            },
            rows / f"data_{i}.ckpt",
        )
    return root


def _target(root: Path, extra: dict):
    """A target model directory (config.json + safetensors) read by formats/target.read_target."""
    from safetensors.torch import save_file

    from triage_tui.core.formats.target import read_target

    root.mkdir()
    save_file({"model.embed_tokens.weight": torch.zeros(128, HIDDEN)}, str(root / "model.safetensors"))
    config = {"vocab_size": 128, "hidden_size": HIDDEN, "num_hidden_layers": 2, **extra}
    (root / "config.json").write_text(json.dumps(config))
    return read_target(root)


def test_finite_bf16_dumps_of_a_bf16_target_pass(tmp_path):
    result = check_dump_values(read_dumps(_write(tmp_path)), _target(tmp_path / "target", {"torch_dtype": "bfloat16"}))
    assert result.name == NAME and result.status == "pass", result.summary
    details = details_of(result, DumpValuesDetails)
    assert isinstance(details, DumpValuesDetails)
    assert details.values == 4 * TOKENS * 4 * HIDDEN and details.files_with_non_finite == 0
    assert details.stored_dtypes == ("bfloat16",) and details.expected_dtype == "bfloat16"
    assert details.dtype_findings == ()
    json.dumps(details.to_json(), allow_nan=False)


@pytest.mark.parametrize(("value", "nan", "inf"), [(float("nan"), 1, 0), (float("inf"), 0, 1), (-float("inf"), 0, 1)])
def test_one_non_finite_value_names_its_file_chunk_and_token(tmp_path, value, nan, inf):
    dumps = read_dumps(_write(tmp_path, poison=(2, 7, HIDDEN + 3, value)))  # chunk 1, token 7
    result = check_dump_values(dumps)
    details = details_of(result, DumpValuesDetails)
    assert result.status == "fail"
    (hit,) = details.non_finite
    assert (hit.file, hit.role, hit.nan, hit.inf, hit.first_position) == ("data_2.ckpt", "aux chunk 1", nan, inf, 7)
    assert "1 of 4 sampled dumps hold NaN/inf" in result.summary and "data_2.ckpt" in result.summary
    report = details.to_json()
    assert (report["nan"], report["inf"], report["files_with_non_finite"]) == (nan, inf, 1)
    json.dumps(report, allow_nan=False)


def test_float16_dumps_of_a_bf16_target_overflow_to_inf(tmp_path):
    # Activations of 1e5 are ordinary in bfloat16 and past float16's 65 504: the cast makes them inf.
    dumps = read_dumps(_write(tmp_path, dtype=torch.float16, scale=3e4))
    result = check_dump_values(dumps, _target(tmp_path / "target", {"dtype": "bfloat16"}))
    details = details_of(result, DumpValuesDetails)
    assert result.status == "fail" and details.stored_dtypes == ("float16",)
    assert sum(n.inf for n in details.non_finite) > 0
    (finding,) = details.dtype_findings
    assert "values above 65504 become inf" in finding and "the cast overflowed" in finding


def test_float16_near_its_limit_is_a_warning_not_a_failure(tmp_path):
    dumps = read_dumps(_write(tmp_path, dtype=torch.float16, scale=9e3))
    result = check_dump_values(dumps, _target(tmp_path / "target", {"torch_dtype": "bfloat16"}))
    details = details_of(result, DumpValuesDetails)
    assert result.status == "pass" and details.max_abs > 0.5 * 65504
    assert "within 2x of it" in details.dtype_findings[0]


def test_float8_dumps_lose_precision(tmp_path):
    result = check_dump_values(
        read_dumps(_write(tmp_path, dtype=torch.float8_e4m3fn)), _target(tmp_path / "target", {})
    )
    details = details_of(result, DumpValuesDetails)
    assert result.status == "pass" and details.expected_dtype is None
    assert "float8_e4m3fn" in details.dtype_findings[0] and "448" in details.dtype_findings[0]


def test_target_dtype_reads_both_transformers_spellings(tmp_path):
    assert target_dtype(_target(tmp_path / "a", {"torch_dtype": "float16"})) == ("float16", "config.json torch_dtype")
    assert target_dtype(_target(tmp_path / "b", {"dtype": "torch.bfloat16"})) == ("bfloat16", "config.json dtype")
    assert target_dtype(None) == (None, None)
