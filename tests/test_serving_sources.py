"""ModelOpt's speculation profile, vLLM's per-request metrics, and forced-acceptance settings.

The profiles are written by ``builders.serving.speculation_profile`` over ``acceptance_rate_out``:
ModelOpt's schema is an example of its repository in an open pull request (not on the package
index, so nvidia-modelopt 0.47.0 does not ship it). Before they were committed, the two builders
were compared with ModelOpt's own ``AcceptanceRate`` (NVIDIA/Model-Optimizer a2fbac7b,
``examples/specdec_bench/specdec_bench/metrics/acceptance_rate.py``) and ``build_profile`` /
``stub_profile`` (edf879d3, ``specdec_bench/speculation_profile.py``) on 200 random runs: equal
JSON. vLLM's ``metrics.speculative_decoding`` object is ``builders.serving.spec_decode_metrics``,
compared the same way with vllm 0.33.0's ``RequestSpecDecodeMetrics.to_dict`` (taken from the
wheel; vllm does not import on a CPU with --no-deps) on 500 random requests: equal dicts.
"""

from __future__ import annotations

import json
import shlex

import pytest

from builders.check_run import write_events
from builders.serving import (
    acceptance_rate_out,
    export_stub_profile,
    meta_info_line,
    sglang_line,
    spec_decode_metrics,
    speculation_profile,
    stub_profile,
    vllm_args_line,
    vllm_line,
    vllm_response,
    write_profile,
)
from triage_tui import cli
from triage_tui.commands.check import _serving_lines
from triage_tui.core.diagnose.checks.result import CheckResult
from triage_tui.core.diagnose.evidence import Overrides, gather_evidence
from triage_tui.core.diagnose.hypotheses.rank import rank_hypotheses
from triage_tui.core.errors import BadInput
from triage_tui.core.watch.serving.compare import compare_serving, training_estimate
from triage_tui.core.watch.serving.meta_info import MetaInfoFile
from triage_tui.core.watch.serving.per_request import VllmRequestMetrics
from triage_tui.core.watch.serving.profile import SpeculationProfile
from triage_tui.core.watch.serving.read import read_serving, read_serving_sources
from triage_tui.core.watch.serving.registry import source_class
from triage_tui.core.watch.serving.synthetic import forced_acceptance
from triage_tui.tui.view_data import ServingSeries
from triage_tui.tui.widgets.serving_chart import title_of

# Three requests' per-step acceptance lengths (the bonus token counted), drafting K = 3: length 3 never
# ends a step of the third, and length 3 is missing from none, so the histogram has a gap only below.
REQUESTS = [[3, 2, 4, 1, 2], [1, 1, 3], [4, 4, 2, 1]]


def _steps(requests):
    return [length for request in requests for length in request]


def _scan(tree):
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["scan", str(tree), "--json", "--poll"]) in (0, 1)
    return {run["name"]: run for run in json.loads(out.getvalue())["runs"]}


def _estimate(values):
    return training_estimate(values, lambda tag: (1000, values[tag]))


# --------------------------------------------------------------------------- ModelOpt's profile


def test_a_measured_profile_is_read_in_the_one_convention(tmp_path):
    profile = speculation_profile(acceptance_rate_out(REQUESTS), 3)
    path = tmp_path / "speculation_profile.json"
    write_profile(path, profile)
    assert source_class(str(path), path.read_bytes()[:4096]) is SpeculationProfile
    evidence = read_serving(str(path))
    steps = _steps(REQUESTS)
    assert (evidence.engine, evidence.drafts, evidence.accepted) == ("modelopt", 12, sum(n - 1 for n in steps))
    assert evidence.acceptance_length == pytest.approx(sum(steps) / len(steps))
    assert evidence.acceptance_length == pytest.approx(profile["mean_accept_length"], abs=1e-6)
    # Per-position i: steps of length >= i + 2, which is ModelOpt's marginal (unconditional) vector,
    # and its conditional vector chained.
    expected = [sum(n >= i + 2 for n in steps) / len(steps) for i in range(3)]
    assert evidence.per_position == pytest.approx(expected)
    assert evidence.per_position == pytest.approx(profile["marginal_accept_rates"], abs=1e-6)
    chained, running = [], 1.0
    for rate in profile["conditional_accept_rates"]:
        running *= rate
        chained.append(running)
    assert evidence.per_position == pytest.approx(chained, abs=1e-5)
    assert "acceptance_length_histogram over 12 steps" in evidence.convention
    assert "(length - 1)" in evidence.convention and "marginal" in evidence.convention
    assert evidence.scored and evidence.to_json()["measured"] is True and evidence.to_json()["synthetic"] is None
    per_request = sum(sum(r) / len(r) for r in REQUESTS) / len(REQUESTS)
    assert any(f"per-request mean {per_request:.2f}" in note for note in evidence.notes)


def test_a_profile_with_lengths_never_seen_and_one_without_a_histogram(tmp_path):
    # Lengths 1 and 4 only (K = 3): positions 0 and 1 are reached exactly when position 2 is.
    profile = speculation_profile(acceptance_rate_out([[1, 4, 4], [1, 1]]), 3)
    assert profile["marginal_accept_rates"] == [0.4, 0.4, 0.4]
    path = tmp_path / "a" / "speculation_profile.json"
    path.parent.mkdir()
    write_profile(path, profile)
    evidence = read_serving(str(path))
    assert evidence.per_position == pytest.approx((0.4, 0.4, 0.4))
    assert evidence.acceptance_length == pytest.approx(1 + 6 / 5)
    # ar_validate-style profiles and hand-trimmed ones: the rates, no counts.
    profile.pop("acceptance_length_histogram")
    write_profile(path, profile)
    rates = read_serving(str(path))
    assert (rates.drafts, rates.accepted) == (None, None)
    assert rates.per_position == pytest.approx((0.4, 0.4, 0.4))
    assert rates.acceptance_length == pytest.approx(profile["mean_accept_length"])
    assert "mean_accept_length, no counts" in rates.convention
    for key in ("mean_accept_length", "marginal_accept_rates"):
        profile.pop(key)
    write_profile(path, profile)
    chained = read_serving(str(path))
    assert chained.per_position == pytest.approx((0.4, 0.4, 0.4), abs=1e-5)
    assert chained.acceptance_length == pytest.approx(2.2, abs=1e-5)
    assert "conditional_accept_rates chained" in chained.convention


@pytest.mark.parametrize("stub", [stub_profile(3), export_stub_profile()], ids=["stub_profile", "export_stub"])
def test_placeholders_are_shown_as_not_measured_and_never_scored(tmp_path, stub):
    path = tmp_path / "speculation_profile.json"
    write_profile(path, stub)
    evidence = read_serving(str(path))
    assert evidence.measured is False and not evidence.scored
    assert (evidence.acceptance_length, evidence.per_position, evidence.drafts) == (None, (), None)
    assert evidence.not_scored().startswith("not measured")
    # stub_profile's zero vectors are never an acceptance of 1.0: no collapse, no disagreement.
    comparison = compare_serving(evidence, _estimate({"train/acc_0": 0.8, "train/acc_1": 0.7}))
    assert comparison.findings == ()
    lines = _serving_lines(comparison)
    assert "  acceptance length -" in lines
    assert any(line.startswith("  not scored        not measured") for line in lines)


def test_a_profile_beside_the_drafter_a_run_names_is_discovered_and_scored(tmp_path):
    """scan finds it beside [run] checkpoint; a measured collapse is flagged, a placeholder is not."""
    tree = tmp_path / "tree"
    collapsed = speculation_profile(acceptance_rate_out([[1] * 40, [1] * 20 + [2]]), 3)
    for name, profile in (("collapsed", collapsed), ("placeholder", export_stub_profile())):
        run = tree / name
        write_events(run / "runs", [2.0, 1.5], [0.5, 0.6])
        (run / "drafter").mkdir()
        (run / "drafter" / "config.json").write_text("{}")
        write_profile(run / "drafter" / "speculation_profile.json", profile)
        (run / "triage.toml").write_text('[run]\nvocab_size = 32000\ncheckpoint = "drafter"\n')
    runs = _scan(tree)
    serving = runs["collapsed"]["serving"]
    assert (serving["engine"], serving["drafts"], serving["accepted"]) == ("modelopt", 61, 1)
    assert serving["source"].endswith("drafter/speculation_profile.json")
    assert "serving_acceptance_collapsed" in [f["kind"] for f in runs["collapsed"]["flags"]]
    placeholder = runs["placeholder"]["serving"]
    assert placeholder["measured"] is False and placeholder["acceptance_length"] is None
    assert not [f for f in runs["placeholder"]["flags"] if f["kind"].startswith("serving_")]
    # check reads the profile beside the drafter it checks when no --serving names another source.
    comparison = gather_evidence(tree / "collapsed").serving
    assert comparison.serving.engine == "modelopt" and comparison.finding("acceptance_collapsed") is not None
    # ... the drafter it checks: another one passed with --checkpoint has no profile beside it.
    other = tmp_path / "other-drafter"
    other.mkdir()
    (other / "config.json").write_text("{}")
    assert gather_evidence(tree / "collapsed", Overrides(checkpoint=other)).serving is None


# --------------------------------------------------------------------------- vLLM per-request metrics

# Each request's verify steps as (drafted, accepted), k = 3.
STEPS = [
    [(3, 3), (3, 1), (3, 0), (3, 2)],
    [(3, 0), (3, 0), (2, 2)],
    [(3, 1), (3, 3), (3, 3), (1, 0), (3, 2)],
]


def test_vllm_responses_pool_their_counts_whatever_writer_saved_them(tmp_path):
    specs = [spec_decode_metrics(3, steps, detailed=i == 0) for i, steps in enumerate(STEPS)]
    lines = [
        vllm_response(specs[0]),  # the body as vLLM sends it (curl)
        vllm_response(specs[1], chat=True, client=True, text="x" * 20_000),  # the openai client's dump
        "data: " + vllm_response(None, chat=True),  # a streamed chunk without the metrics
        "data: " + vllm_response(specs[2], chat=True),  # the stream's last chunk carries them
        "data: [DONE]",
        vllm_response(None),  # an n > 1 request: metrics null
    ]
    path = tmp_path / "responses.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert source_class(str(path), path.read_bytes()[:4096]) is VllmRequestMetrics
    evidence = read_serving(str(path))
    accepted = [a for steps in STEPS for _, a in steps]
    assert (evidence.engine, evidence.drafts, evidence.accepted) == ("vllm", len(accepted), sum(accepted))
    assert evidence.acceptance_length == pytest.approx(1 + sum(accepted) / len(accepted))
    assert evidence.per_position == pytest.approx([sum(a > i for a in accepted) / len(accepted) for i in range(3)])
    assert "num_spec_steps" in evidence.convention and "acceptance_histogram" in evidence.convention
    drafted = sum(d for steps in STEPS for d, _ in steps)
    assert any(f"{drafted} draft tokens proposed, {sum(accepted) / drafted:.1%} accepted" in n for n in evidence.notes)
    assert any(n.startswith("2 response(s) without metrics.speculative_decoding") for n in evidence.notes)


def test_response_files_and_meta_info_go_to_their_own_readers(tmp_path):
    first_long = tmp_path / "long.jsonl"
    first_long.write_text(vllm_response(spec_decode_metrics(3, STEPS[0]), text="y" * 50_000) + "\n")
    meta = tmp_path / "meta.jsonl"
    meta.write_text(meta_info_line(10, 20, [2, 4, 4, 0], text='{"choices": [1]}') + "\n")
    assert source_class(str(first_long), first_long.read_bytes()[:4096]) is VllmRequestMetrics
    assert source_class(str(meta), meta.read_bytes()[:4096]) is MetaInfoFile
    bare = tmp_path / "no-metrics.jsonl"
    bare.write_text(vllm_response(None) + "\n")
    with pytest.raises(BadInput, match="start vLLM with --per-request-spec-decode-metrics"):
        read_serving(str(bare))


# --------------------------------------------------------------------------- forced acceptance

_SPEC_CONFIG = {"method": "eagle3", "model": "org/drafter", "num_speculative_tokens": 3}


@pytest.mark.parametrize(
    ("line", "engine", "shown"),
    [
        (
            vllm_args_line(
                {
                    "model": "org/target",
                    "speculative_config": {
                        **_SPEC_CONFIG,
                        "rejection_sample_method": "synthetic",
                        "synthetic_acceptance_length": 2.5,
                    },
                }
            ),
            "vllm",
            "synthetic_acceptance_length 2.5",
        ),
        (
            shlex.join(
                [
                    "vllm",
                    "serve",
                    "org/target",
                    "--speculative-config",
                    json.dumps(
                        {
                            **_SPEC_CONFIG,
                            "rejection_sample_method": "synthetic",
                            "synthetic_acceptance_rates": [0.9, 0.5],
                        }
                    ),
                ]
            ),
            "vllm",
            "synthetic_acceptance_rates",
        ),
        ("vllm serve org/target --speculative-config.rejection_sample_method synthetic", "vllm", "method synthetic"),
        (json.dumps({"args": json.dumps({"rejection_sample_method": "synthetic"})}), "vllm", "method synthetic"),
        (
            "SGLANG_SIMULATE_ACC_LEN=1.0 python3 -m sglang.launch_server --model-path org/target "
            "--speculative-algorithm EAGLE3 --speculative-draft-model-path org/drafter",
            "sglang",
            "SGLANG_SIMULATE_ACC_LEN 1",
        ),
        ("export SGLANG_SIMULATE_ACC_LEN=3", "sglang", "SGLANG_SIMULATE_ACC_LEN 3"),
        ("    env: {SGLANG_SIMULATE_ACC_LEN: '2.49'}", "sglang", "SGLANG_SIMULATE_ACC_LEN 2.49"),
    ],
    ids=["vllm_args_line", "vllm_cli_json", "vllm_cli_dotted", "escaped_json", "sglang_env", "export", "yaml"],
)
def test_forced_acceptance_settings_are_seen_where_they_are_written(line, engine, shown):
    forced = forced_acceptance(line, 7)
    assert forced is not None and forced.engine == engine
    assert shown in forced.reason and "(line 7)" in forced.reason and "nothing about the drafter" in forced.reason


@pytest.mark.parametrize(
    "line",
    [
        vllm_args_line({"speculative_config": {**_SPEC_CONFIG, "rejection_sample_method": "standard"}}),
        "SGLANG_SIMULATE_ACC_LEN=-1 python3 -m sglang.launch_server",  # SGLang's default: off
        "SGLANG_SIMULATE_ACC_LEN=0",
        "run_correctness.sh explicitly disables SGLANG_SIMULATE_ACC_LEN",
        "speculative_config=SpeculativeConfig(method='eagle3', model='org/drafter', num_spec_tokens=3)",
        "synthetic_acceptance_length=None, synthetic_acceptance_rates=None",
        "ValueError: synthetic_acceptance_rates / synthetic_acceptance_length are only valid with "
        "rejection_sample_method='synthetic'.",
    ],
    ids=["standard", "sglang_off", "sglang_zero", "prose", "engine_config", "none_values", "vllm_refusal"],
)
def test_settings_that_force_nothing_are_not_synthetic(line):
    assert forced_acceptance(line, 1) is None


def _vllm_log(path, *, synthetic: bool):
    config = {**_SPEC_CONFIG, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 1.0}
    lines = [vllm_args_line({"model": "org/target", "speculative_config": config})] if synthetic else []
    lines += [vllm_line(1000, [0, 0, 0]), vllm_line(500, [1, 0, 0])]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_collapse_at_one_under_a_synthetic_setting_raises_no_flag_and_no_hypothesis(tmp_path):
    checks = {"hidden_state": CheckResult("hidden_state", "pass", "ok")}
    training = _estimate({"train/acc_0": 0.8, "train/acc_1": 0.75, "train/acc_2": 0.7})
    control = compare_serving(read_serving(str(_vllm_log(tmp_path / "plain.log", synthetic=False))), training)
    assert [f.kind for f in control.findings] == ["acceptance_collapsed", "serving_below_training"]
    scores = {h.id: h.score for h in rank_hypotheses(checks, serving=control)}
    assert scores["config_contract"] == pytest.approx(0.3) and scores["target_mismatch"] > 0  # both raised by serving

    evidence = read_serving(str(_vllm_log(tmp_path / "synthetic.log", synthetic=True)))
    assert evidence.acceptance_length == pytest.approx(1 + 1 / 1500)  # shown as read
    assert evidence.synthetic is not None and "synthetic_acceptance_length 1 (line 1)" in evidence.synthetic
    comparison = compare_serving(evidence, training)
    assert comparison.findings == ()
    ranked = rank_hypotheses(checks, serving=comparison)
    assert {h.id: h.score for h in ranked} == {h.id: h.score for h in rank_hypotheses(checks)}
    assert all(h.score == 0 for h in ranked)
    assert not any(line.startswith("serving: ") for h in ranked for line in h.evidence)
    contract = next(h for h in ranked if h.id == "config_contract")
    assert any(line.startswith("serving evidence not scored: synthetic: vLLM") for line in contract.evidence)
    assert any(line.startswith("  not scored        synthetic: vLLM") for line in _serving_lines(comparison))
    assert evidence.to_json()["synthetic"] == evidence.synthetic


def test_scan_shows_synthetic_evidence_without_its_flags(tmp_path):
    tree = tmp_path / "tree"
    for name, synthetic in (("forced", True), ("real", False)):
        run = tree / name
        write_events(run / "runs", [2.0, 1.5], [0.5, 0.6])
        _vllm_log(run / "serve.log", synthetic=synthetic)
        (run / "triage.toml").write_text('[run]\nvocab_size = 32000\n[serving]\nlogs = ["serve.log"]\n')
    runs = _scan(tree)
    assert "serving_acceptance_collapsed" in [f["kind"] for f in runs["real"]["flags"]]
    forced = runs["forced"]
    assert forced["serving"]["synthetic"].startswith("vLLM speculative_config rejection_sample_method synthetic")
    assert forced["serving"]["acceptance_length"] == pytest.approx(1 + 1 / 1500)
    assert not [f for f in forced["flags"] if f["kind"].startswith("serving_")]


def test_a_launch_script_marks_the_same_engines_figures_synthetic(tmp_path):
    launch = tmp_path / "launch.sh"
    log = tmp_path / "sglang.log"
    log.write_text("\n".join(sglang_line(100, 100) for _ in range(3)) + "\n")  # accept len 1.00
    for value, synthetic in (("1.0", True), ("-1", False)):
        launch.write_text(
            f"#!/bin/bash\nexport SGLANG_SIMULATE_ACC_LEN={value}\n"
            "python3 -m sglang.launch_server --model-path org/target --speculative-algorithm EAGLE3\n"
        )
        if synthetic:  # the script alone: the setting, no figures
            alone = read_serving(str(launch))
            assert (alone.engine, alone.acceptance_length) == ("sglang", None)
            assert alone.synthetic is not None and "SGLANG_SIMULATE_ACC_LEN 1 (line 2)" in alone.synthetic
        else:
            with pytest.raises(BadInput, match="holds no vLLM"):
                read_serving(str(launch))  # a script that forces nothing is no evidence at all
        pooled = read_serving_sources([str(launch), str(log)] if synthetic else [str(log)])
        assert pooled is not None and pooled.engine == "sglang" and pooled.acceptance_length == pytest.approx(1.0)
        assert (pooled.synthetic is not None) is synthetic
        assert (compare_serving(pooled, None).finding("acceptance_collapsed") is None) is synthetic
    # Followed (the TUI's chart): the pooled evidence keeps the log's intervals, not the script's none.
    from triage_tui.core.watch.serving.read import ServingWatch

    launch.write_text("export SGLANG_SIMULATE_ACC_LEN=1.0\n")
    followed, errors = ServingWatch([str(launch), str(log)]).poll()
    assert followed is not None and followed.synthetic is not None
    assert errors == () and followed is not None and len(followed.samples) == 3
    # A vLLM setting says nothing about an SGLang server's figures: not pooled, not synthetic.
    vllm_cmd = tmp_path / "vllm-cmd.txt"
    vllm_cmd.write_text("vllm serve org/target --speculative-config.rejection_sample_method synthetic\n")
    mixed = read_serving_sources([str(log), str(vllm_cmd)])
    assert mixed is not None and mixed.engine == "sglang" and mixed.synthetic is None
    assert any("not pooled, it is vllm" in note for note in mixed.notes)


def test_the_serving_chart_title_says_what_is_not_scored():
    import numpy as np

    series = ServingSeries(
        "vllm", np.array([0]), np.array([1.0]), 1.0, (0.0,), None, False, "synthetic (forced acceptance)"
    )
    assert "synthetic (forced acceptance), not scored" in title_of(series)
    assert "not scored" not in title_of(ServingSeries("vllm", np.array([0]), np.array([2.0]), 2.0, (0.5,), None, False))
