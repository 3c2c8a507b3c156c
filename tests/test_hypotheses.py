"""Ranked hypotheses: the story's evidence separates the mapping cause; a healthy run raises nothing.

Every expectation is what a user reads in the list: which cause comes first, which stay under one
half (the line under which a cause is not called likely), and which numbers the evidence names;
never a score recomputed from the weights the product ranks with."""

import json
from pathlib import Path

import numpy as np
import pytest

from builders.mappings import TARGET_VOCAB, story_mappings
from triage_tui.core.diagnose.checks.config_contract import ConfigContractDetails
from triage_tui.core.diagnose.checks.config_contract import Finding as ContractFinding
from triage_tui.core.diagnose.checks.hidden_state import HiddenIssue, HiddenStateDetails
from triage_tui.core.diagnose.checks.replay import ReplayDetails
from triage_tui.core.diagnose.checks.result import CheckResult, CheckStatus
from triage_tui.core.diagnose.checks.verifier_mask import check_verifier_mask
from triage_tui.core.diagnose.checks.vocab import check_vocab_mapping
from triage_tui.core.diagnose.hypotheses.rank import rank_hypotheses
from triage_tui.core.diagnose.hypotheses.scoring import Hypothesis
from triage_tui.core.vocab import VocabMapping
from triage_tui.core.watch.curve_shapes import RunStart, StartingCheckpoint
from triage_tui.core.watch.serving.compare import ServingComparison, ServingFinding
from triage_tui.core.watch.serving.evidence import ServingEvidence
from triage_tui.core.watch.signals.flags import Flag
from triage_tui.core.watch.signals.kinds import FlagKind, Severity
from triage_tui.core.watch.signals.metrics import MetricSummary, RunMetrics

ALWAYS = {
    "vocab_mapping_mismatch",
    "hidden_state_format",
    "verifier_mask_mismatch",
    "warm_start_broken",
    "ttt_position_collapse",
    "target_mismatch",
    "empty_loss_mask",
    "non_finite_dumps",
    "config_contract",
    "mapping_not_in_checkpoint",
    "identity_mapping",
    "mapping_drift",
    "dropped_tensors",
    "quantized_without_scales",
    "rope_scaling_dropped",
}


@pytest.fixture(scope="module")
def story():
    return story_mappings()


def _replay(own: float, run: float, orders: dict[str, float] | None = None) -> CheckResult:
    orders = orders or {"0,1,2": own}
    details = ReplayDetails(
        tokens=4096,
        samples=8,
        device="cpu",
        label_source="target",
        accuracy_checkpoint_mapping=own,
        accuracy_run_mapping=run,
        loss_checkpoint_mapping=None,
        loss_run_mapping=None,
        accuracy_by_chunk_order=orders,
        best_chunk_order=max(orders, key=lambda o: orders[o]),
        notes=(),
    )
    return CheckResult("replay", "fail" if own - run > 0.1 else "pass", "replay", details)


def _hidden(issues: list[HiddenIssue]) -> CheckResult:
    status: CheckStatus = "fail" if any(i.severity == "error" for i in issues) else "pass"
    details = HiddenStateDetails(
        target_hidden_size=64,
        target_hidden_size_source="target config",
        draft_hidden_size=64,
        fc_in_features=192,
        aux_chunks_present=3,
        shapes=(),
        rms_by_chunk=None,
        issues=tuple(issues),
        dumps_format="specforge",
        dump_samples=8,
    )
    return CheckResult("hidden_state", status, "hidden", details)


def _flag(kind: str, severity: str = "critical", value: float = 19.2) -> Flag:
    return Flag(FlagKind(kind), Severity(severity), "train/ploss_0", 600, value, f"{kind} at step 600")


def _by_id(hypotheses: list[Hypothesis]) -> dict[str, Hypothesis]:
    return {h.id: h for h in hypotheses}


LIKELY = 0.5  # the hypotheses pane and `check` call a cause likely from one half up (docs/hypotheses.md)


def test_story_evidence_puts_the_mapping_first_and_everything_else_low(story):
    checkpoint, run = story
    checks = {
        "vocab_mapping": check_vocab_mapping(checkpoint, run),
        "hidden_state": _hidden([]),
        "verifier_mask": check_verifier_mask(checkpoint, VocabMapping(run.hot_ids, TARGET_VOCAB, stored_t2d=run.t2d())),
        "replay": _replay(own=0.62, run=0.004),
    }
    ranked = rank_hypotheses(checks, [_flag("loss_above_chance"), _flag("accuracy_at_chance", value=0.04)])
    assert {h.id for h in ranked} >= ALWAYS
    assert ranked[0].id == "vocab_mapping_mismatch" and ranked[0].action == "remap"
    assert ranked[0].score >= 0.9
    assert all(h.score <= 0.3 for h in ranked[1:])
    assert [h.score for h in ranked] == sorted((h.score for h in ranked), reverse=True)
    evidence = " | ".join(ranked[0].evidence)
    assert "252 / 32000" in evidence and "62.0%" in evidence and "0.4%" in evidence
    json.dumps([h.to_json() for h in ranked])


def test_the_vocab_check_alone_already_passes_one_half(story):
    checkpoint, run = story
    ranked = _by_id(rank_hypotheses({"vocab_mapping": check_vocab_mapping(checkpoint, run)}, []))
    assert 0.5 <= ranked["vocab_mapping_mismatch"].score < 0.9


def test_loss_above_chance_alone_points_at_the_mapping_only_until_the_vocab_check_clears_it(story):
    checkpoint, _ = story
    above = [_flag("loss_above_chance")]
    unchecked = _by_id(rank_hypotheses({}, above))["vocab_mapping_mismatch"]
    assert 0 < unchecked.score < LIKELY  # a hint, listed, never called likely
    # The vocab check ran and the mappings agree: the rows mean their tokens, the symptom is only a note.
    same = VocabMapping(checkpoint.hot_ids.copy(), TARGET_VOCAB)
    cleared = _by_id(rank_hypotheses({"vocab_mapping": check_vocab_mapping(checkpoint, same)}, above))
    assert cleared["vocab_mapping_mismatch"].score == 0.0
    assert any("loss_above_chance" in line for line in cleared["vocab_mapping_mismatch"].evidence)
    # A vocab check that could not run clears nothing.
    errored = {"vocab_mapping": CheckResult.error("vocab_mapping", "x.pt: not a mapping")}
    assert _by_id(rank_hypotheses(errored, above))["vocab_mapping_mismatch"].score == unchecked.score


def test_a_healthy_run_scores_everything_below_one_half(story):
    checkpoint, _ = story
    same = VocabMapping(checkpoint.hot_ids.copy(), TARGET_VOCAB, stored_t2d=checkpoint.t2d())
    checks = {
        "vocab_mapping": check_vocab_mapping(checkpoint, same),
        "hidden_state": _hidden([]),
        "verifier_mask": check_verifier_mask(checkpoint, same),
        "replay": _replay(own=0.71, run=0.71, orders={"0,1,2": 0.71, "2,1,0": 0.05}),
    }
    assert checks["vocab_mapping"].status == checks["verifier_mask"].status == "pass"
    ranked = rank_hypotheses(checks, [])
    assert {h.id for h in ranked} >= ALWAYS
    assert all(h.score < 0.5 for h in ranked)
    assert all(h.score == 0.0 for h in ranked)


def test_symptoms_alone_do_not_name_a_cause():
    ranked = rank_hypotheses({}, [_flag("loss_at_chance", value=10.3), _flag("accuracy_at_chance", value=0.01)])
    assert {h.id for h in ranked} == ALWAYS
    assert all(h.score < 0.5 for h in ranked)


def test_hidden_state_issues_raise_the_format_hypothesis():
    only_last = HiddenIssue(
        "only_last_layer", "error", "dumps carry one hidden state per token (width 64 = Ht) instead of 3"
    )
    ranked = rank_hypotheses({"hidden_state": _hidden([only_last])}, [_flag("loss_at_chance", value=10.3)])
    assert ranked[0].id == "hidden_state_format" and ranked[0].score >= 0.9
    assert only_last.message in ranked[0].evidence
    # A replay where another chunk order wins is evidence of the same cause on its own.
    by_id = _by_id(rank_hypotheses({"replay": _replay(0.1, 0.1, {"0,1,2": 0.1, "2,1,0": 0.6})}, []))
    assert 0.5 <= by_id["hidden_state_format"].score < 0.9


def _contract(*findings: ContractFinding) -> CheckResult:
    details = ConfigContractDetails(
        layout="specforge",
        draft_hidden_size=4096,
        target_hidden_size=4096,
        target_hidden_size_source="target config",
        fc_in_features=3 * 4096,
        aux_layer_ids=(1, 31, 58),
        aux_layer_ids_at="eagle_config",
        trained_layers=(1, 31, 58),
        trained_convention="output_of",
        target_layers=61,
        engines=(),
        rows=(),
        findings=findings,
    )
    status: CheckStatus = "fail" if any(f.severity == "error" for f in findings) else "pass"
    return CheckResult("config_contract", status, "contract", details)


def test_off_by_one_and_missing_head_are_added_only_with_evidence():
    issues = [HiddenIssue("aux_layer_off_by_one", "error", "dumps hold outputs of [2, 16, 29]")]
    no_head = ContractFinding("missing_lm_head", "error", "checkpoint has no lm_head.weight")
    ranked = _by_id(rank_hypotheses({"hidden_state": _hidden(issues), "config_contract": _contract(no_head)}, []))
    assert LIKELY <= ranked["aux_layer_off_by_one"].score < ranked["missing_lm_head"].score
    assert ranked["missing_lm_head"].score >= 0.9
    assert "dumps hold outputs of [2, 16, 29]" in ranked["aux_layer_off_by_one"].evidence
    assert ranked["config_contract"].score == 0.0  # the head has its own hypothesis
    plain = _by_id(rank_hypotheses({"hidden_state": _hidden([]), "config_contract": _contract()}, []))
    assert "aux_layer_off_by_one" not in plain and "missing_lm_head" not in plain


def test_one_engine_reading_the_layers_otherwise_convicts_only_when_it_serves(story):
    vllm = ContractFinding("aux_layers_engine_mismatch", "error", "vllm feeds [2, 31, 58]", engine="vllm")
    sglang = ContractFinding("aux_layers_engine_mismatch", "error", "sglang feeds [0, 30, 57]", engine="sglang")
    # Which engine serves it is unknown: one engine's reading alone stays below one half, both pass it.
    one = _by_id(rank_hypotheses({"config_contract": _contract(vllm)}, []))["config_contract"]
    both = _by_id(rank_hypotheses({"config_contract": _contract(vllm, sglang)}, []))["config_contract"]
    assert one.score < LIKELY <= both.score
    assert one.score > 0 and any("vllm feeds [2, 31, 58]" in line for line in one.evidence)
    # Missing ids alone are context (every trainer's default is the engines' default) ...
    missing = ContractFinding(
        "aux_layer_ids_missing", "warning", "no ids", "https://github.com/vllm-project/vllm/pull/50170"
    )
    alone = _by_id(rank_hypotheses({"config_contract": _contract(missing)}, [_flag("loss_at_chance")]))
    assert alone["config_contract"].score == 0.0 and "no ids" in alone["config_contract"].evidence[0]
    assert "https://github.com/vllm-project/vllm/pull/50170" in alone["config_contract"].links
    # ... and beside a collapsed serving acceptance they are vLLM PR #50170's case, likely.
    served = ServingEvidence("vllm", "vllm.log", 1.036, (0.036, 0.0006, 0.0), 28281, 1018, "unconditional")
    collapsed = ServingComparison(served, None, (ServingFinding("acceptance_collapsed", 1.036, "accepts nothing"),))
    order = rank_hypotheses({"config_contract": _contract(missing)}, [], serving=collapsed)
    assert order[0].id == "config_contract" and order[0].score >= LIKELY, [(h.id, h.score) for h in order[:3]]
    assert any("no ids" in line for line in order[0].evidence)


def test_a_frequency_ordered_mask_raises_the_verifier_hypothesis(story):
    checkpoint, run = story
    rng = np.random.default_rng(1)
    shuffled = rng.permutation(run.hot_ids)
    bad = VocabMapping(shuffled, TARGET_VOCAB, stored_t2d=run.t2d())
    ranked = rank_hypotheses({"verifier_mask": check_verifier_mask(None, bad)}, [])
    assert ranked[0].id == "verifier_mask_mismatch" and ranked[0].score >= 0.9


def test_an_unmet_mask_invariant_reads_as_not_holding_in_the_hypothesis_evidence(story):
    """The hypotheses pane showed "checkpoint t2d == run t2d: 8444 target ids differ": the invariant's
    name, an equality, read as met beside a detail that says it is not. The verifier-mask hypothesis
    words its own evidence lines (beside the check's), so they are held to it too."""
    checkpoint, run = story
    mask = check_verifier_mask(checkpoint, VocabMapping(run.hot_ids, TARGET_VOCAB, stored_t2d=run.t2d()))
    hypothesis = _by_id(rank_hypotheses({"verifier_mask": mask}, []))["verifier_mask_mismatch"]
    (line,) = [line for line in hypothesis.evidence if "checkpoint t2d == run t2d" in line]
    assert line.startswith("checkpoint t2d == run t2d does not hold: 12500 target ids differ in membership"), line
    assert not any(": 12500 target ids differ" in line and "does not hold" not in line for line in hypothesis.evidence)


def test_exact_zero_loss_and_accuracy_point_at_an_empty_loss_mask():
    accuracy = MetricSummary("train/acc_0", 0.0, 0.0, 40)
    metrics = RunMetrics(MetricSummary("train/ploss_0", 0.0, 0.0, 40), accuracy)
    ranked = rank_hypotheses({}, [], metrics=metrics)
    assert ranked[0].id == "empty_loss_mask" and ranked[0].score >= 0.9
    assert "#392" in ranked[0].evidence[0]
    low = RunMetrics(MetricSummary("train/ploss_0", 0.4, 0.4, 40), accuracy)
    assert _by_id(rank_hypotheses({}, [], metrics=low))["empty_loss_mask"].score == 0.0


def _curve_flags(tmp_path: Path, losses: list[float]) -> list[Flag]:
    """The watcher's value flags of a loss written by torch's SummaryWriter, one point every 10 steps."""
    from builders.events import read_event_file
    from builders.tensorboard import write_scalars
    from triage_tui.core.watch.signals.values import value_flags

    points = [(10 * i, value) for i, value in enumerate(losses)]
    scalars = read_event_file(write_scalars(tmp_path, {"train/ploss_0": points}))
    return value_flags(scalars, vocab_size=32_000, loss_tags=["train/ploss_0"], accuracy_tags=[])


def _score(flags: list[Flag], hypothesis: str) -> float:
    return _by_id(rank_hypotheses({}, flags))[hypothesis].score


def test_non_finite_grows_with_the_points_that_are_not_finite(tmp_path):
    """One inf a GradScaler survives is no failure; a loss that never comes back is."""
    learning = [8.0 - 0.02 * i for i in range(100)]
    one_spike = learning[:50] + [float("inf")] + learning[51:]
    three = learning[:50] + [float("nan")] * 3 + learning[53:]
    broken = learning[:90] + [float("nan")] * 10
    scores = [
        _score(_curve_flags(tmp_path / name, curve), "non_finite")
        for name, curve in (("one", one_spike), ("three", three), ("broken", broken))
    ]
    assert scores[0] < LIKELY <= scores[1] < scores[2] < 1  # below 1: a check that finds the NaN's source ranks above
    ranked = rank_hypotheses({}, _curve_flags(tmp_path / "again", broken))
    assert ranked[0].id == "non_finite"
    evidence = ranked[0].evidence
    assert any("100% of the points from step 900 on are not finite: it never came back" in line for line in evidence)


def test_diverged_grows_with_how_far_and_how_long(tmp_path):
    """Just over the flag's bar (1.5x the best for 3 points) is a spike; 4x for 30 points is a diverged run."""
    descent = [6.0 - 0.04 * i for i in range(60)]  # best 3.64
    spike = descent + [8.0] * 5
    far_long = descent + [15.0] * 30
    flags = [_curve_flags(tmp_path / name, curve) for name, curve in (("spike", spike), ("far", far_long))]
    assert all(any(f.kind == "diverging" for f in found) for found in flags)
    low, high = (_score(found, "diverged") for found in flags)
    assert low < LIKELY < high
    assert rank_hypotheses({}, flags[1])[0].id == "diverged"


def test_errored_and_skipped_checks_carry_no_weight(story):
    checks = {
        "vocab_mapping": CheckResult.error("vocab_mapping", "x.pt: not a mapping"),
        "replay": CheckResult.skipped("replay", "needs --target"),
    }
    assert all(h.score == 0.0 for h in rank_hypotheses(checks, []))


def test_the_docs_list_every_hypothesis_with_where_it_is_known_from():
    """docs/hypotheses.md's "Hypotheses" table has a row for each id a function of HYPOTHESES can return."""
    import inspect
    import re
    from pathlib import Path

    from triage_tui.core.diagnose.hypotheses import rank as hypotheses

    ids = set()
    for function in hypotheses.HYPOTHESES:
        ids |= set(re.findall(r'Hypothesis\(\s*"(\w+)"', inspect.getsource(function)))
    # One id per function, read from its `Hypothesis("<id>", ...)`: write the id as a literal there.
    assert len(ids) == len(hypotheses.HYPOTHESES), sorted(ids)
    doc = (Path(__file__).resolve().parent.parent / "docs" / "hypotheses.md").read_text()
    section = doc.split("\n## Hypotheses\n", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1) for m in re.finditer(r"^\| `(\w+)` \|", section, re.M)}
    assert rows == ids, f"table rows without a hypothesis: {rows - ids}; hypotheses without a row: {ids - rows}"


# ----------------------------------------------------------------- curve shapes (core.watch.curve_shapes)

COLD = RunStart("train/acc_0", 0, 200, 5, 0.004, None, None)
WARM = RunStart("train/acc_0", 0, 200, 5, 0.55, None, None)


def _start(source: str, path: str = "/runs/drafters/k2", run: str = "/runs/ft") -> StartingCheckpoint:
    return StartingCheckpoint(Path(path), source, Path(run))


@pytest.mark.parametrize(
    ("start", "checkpoint", "replay", "verdict"),
    [
        (COLD, _start("triage.toml"), None, "hint"),  # named, no replay: listed, not likely
        (COLD, _start("discovery"), None, "none"),  # discovery picks the run's own save: not a start
        (COLD, _start("triage.toml", "/runs/ft/epoch_0_step_200"), None, "none"),  # its own later save
        (COLD, _start("triage.toml", "/runs/ft/cache/model/epoch_0"), None, "hint"),  # SpecForge #300
        (WARM, _start("triage.toml"), None, "none"),
        (COLD, _start("flag"), (0.62, 0.62), "first"),  # the replay: a good drafter started cold
        (COLD, _start("flag"), (0.02, 0.02), "none"),  # the checkpoint is no good drafter either
    ],
)
def test_warm_start_broken_scores(start, checkpoint, replay, verdict):
    checks = {"replay": _replay(*replay)} if replay is not None else {}
    order = rank_hypotheses(checks, [], start=start, starting_checkpoint=checkpoint)
    warm = _by_id(order)["warm_start_broken"]
    if verdict == "none":
        assert warm.score == 0.0
    elif verdict == "hint":
        assert 0 < warm.score < LIKELY
    else:
        assert order[0] is warm and warm.score >= LIKELY
        assert "starts at 0.4 %" in warm.evidence[0] and "at 62.0% top-1" in warm.evidence[0]
    assert warm.links == ("https://github.com/sgl-project/SpecForge/issues/300",)


@pytest.mark.parametrize("remapped", [True, False])
def test_the_replay_of_another_checkpoint_than_the_start_weighs_nothing(remapped):
    """After a remap (or with a candidate drafter) the checks score another checkpoint than the run
    started from: its good replay says what a restart from it gives, not that the start failed to load."""
    start = Path("/runs/drafters/k2")
    checked = Path("/runs/drafters/k2-remapped-e622e153" if remapped else "/runs/drafters/other")
    checkpoint = StartingCheckpoint(start, "triage.toml", Path("/runs/ft"), checked, start if remapped else None)
    ranked = _by_id(rank_hypotheses({"replay": _replay(0.64, 0.64)}, [], start=COLD, starting_checkpoint=checkpoint))
    warm = ranked["warm_start_broken"]
    assert warm.score == 0.0
    said = "triage's remap of the run's start k2 (triage.toml)" if remapped else "other, not the run's start k2"
    assert said in warm.evidence[0] and "not how the run started" in warm.evidence[0]


def test_a_failed_check_explains_a_cold_start_instead():
    only_last = HiddenIssue("only_last_layer", "error", "one hidden state per token")
    ranked = _by_id(
        rank_hypotheses({"hidden_state": _hidden([only_last])}, [], start=COLD, starting_checkpoint=_start("flag"))
    )
    assert ranked["warm_start_broken"].score == 0.0
    assert "the failed hidden_state check explains a cold start" in ranked["warm_start_broken"].evidence[0]


def test_ttt_position_collapse_follows_its_flag():
    order = rank_hypotheses({}, [_flag("ttt_position_collapse")])
    ranked = _by_id(order)
    assert order[0].id == "ttt_position_collapse" and order[0].score >= LIKELY
    assert "https://github.com/vllm-project/speculators/pull/818" in ranked["ttt_position_collapse"].links
    assert _by_id(rank_hypotheses({}, []))["ttt_position_collapse"].score == 0.0


def test_nan_from_the_first_step_has_its_own_title_and_links():
    broke = Flag(
        FlagKind.NON_FINITE, Severity.CRITICAL, "train/loss_0", 600, float("nan"), "at step 600", points=10, extent=1.0
    )
    first = Flag(
        FlagKind.NON_FINITE,
        Severity.CRITICAL,
        "train/loss_0",
        0,
        float("nan"),
        "from its first logged step 0",
        True,
        10,
        1.0,
    )
    later = _by_id(rank_hypotheses({}, [broke]))["non_finite"]
    at_start = _by_id(rank_hypotheses({}, [first]))["non_finite"]
    assert later.score == at_start.score >= 0.9
    assert later.links == () and "first step" not in later.title
    assert "first step" in at_start.title and "https://github.com/vllm-project/speculators/issues/238" in at_start.links


# ----------------------------------------------- serving collapsed: structural causes before the target


def _collapsed_vllm(tmp_path, training: dict[str, float]):
    """vLLM's stats line at acceptance 1.02 (18 + 2 of 1000 drafts at positions 0, 1) beside a run
    whose accuracies predict far more."""
    from builders.serving import vllm_line
    from triage_tui.core.watch.serving.compare import compare_serving, training_estimate
    from triage_tui.core.watch.serving.read import read_serving

    log = tmp_path / "vllm.log"
    log.write_text(vllm_line(1000, [18, 2, 0]) + "\n")
    estimate = training_estimate(training, lambda tag: (500, training[tag]) if tag in training else None)
    return compare_serving(read_serving(str(log)), estimate)


def test_a_collapse_ranks_the_structural_causes_before_target_mismatch(tmp_path):
    """A run with no checkpoint (every check skipped) served at 1.02 while its accuracies predict
    2.8: the gap names no verifier when nothing is accepted at all."""
    serving = _collapsed_vllm(tmp_path, {"train/acc_0": 0.8, "train/acc_1": 0.75, "train/acc_2": 0.7})
    assert [f.kind for f in serving.findings] == ["acceptance_collapsed", "serving_below_training"]
    assert serving.serving.acceptance_length == pytest.approx(1.02)
    checks = {
        name: CheckResult.skipped(name, "no drafter checkpoint found for this run (pass --checkpoint)")
        for name in ("vocab_mapping", "config_contract", "mapping_health")
    }
    ranked = rank_hypotheses(checks, serving=serving)
    scores = {h.id: h.score for h in ranked}
    structural = ("vocab_mapping_mismatch", "config_contract", "mapping_not_in_checkpoint")
    # Each structural cause is raised alike (no check could tell them apart), none called likely on serving alone.
    assert len({scores[cause] for cause in structural}) == 1 and 0 < scores["vocab_mapping_mismatch"] < LIKELY
    assert 0 < scores["target_mismatch"] < scores["vocab_mapping_mismatch"]
    order = [h.id for h in ranked]
    assert max(order.index(cause) for cause in structural) < order.index("target_mismatch")
    # Without the collapse the same gap keeps its weight: serving at 1.9 against 2.8.
    from builders.serving import vllm_line
    from triage_tui.core.watch.serving.compare import compare_serving
    from triage_tui.core.watch.serving.read import read_serving

    log = tmp_path / "partial.log"
    log.write_text(vllm_line(1000, [600, 250, 50]) + "\n")
    partial = compare_serving(read_serving(str(log)), serving.training)
    assert [f.kind for f in partial.findings] == ["serving_below_training"]
    again = rank_hypotheses(checks, serving=partial)
    assert again[0].id == "target_mismatch" and again[0].score > scores["target_mismatch"]


# ------------------------------------------------------------------ past the acceptance peak


def _history(points, loss=None, checkpoints=()):
    from triage_tui.core.watch.best_checkpoint import AcceptanceHistory

    return AcceptanceHistory(
        "eval/simulated_acc_len",
        tuple(points),
        tuple(checkpoints),
        "train/loss" if loss is not None else None,
        tuple(loss or ()),
    )


# deepseek-ai/DeepSpec#84's table, epochs x 1000 as steps: accept length and training loss.
DEEPSPEC_84 = [(800, 3.28), (2300, 3.34), (4600, 3.34), (7600, 3.24), (10000, 3.18)]
DEEPSPEC_84_LOSS = [(800, 2.69), (2300, 1.97), (4600, 1.73), (7600, 1.59), (10000, 1.50)]


def test_deepspec_84_is_past_its_peak_and_names_the_checkpoint_nearest_it():
    checkpoints = [(step, Path(f"/out/run-step{step}")) for step in (2000, 4200, 5000, 8000, 10000)]
    ranked = _by_id(rank_hypotheses({}, acceptance=_history(DEEPSPEC_84, DEEPSPEC_84_LOSS, checkpoints)))
    peak = ranked["past_acceptance_peak"]
    assert peak.score >= LIKELY and max(ranked.values(), key=lambda h: h.score) is peak
    evidence = " | ".join(peak.evidence)
    assert "peaked at 3.34 (step 4600) and is 3.18 at step 10000 (-4.8%)" in evidence
    assert "train/loss kept falling (1.73 -> 1.5)" in evidence
    # 4600 is 400 from 4200 and from 5000: the earlier one, which has not trained past the peak.
    assert "/out/run-step4200 (step 4200)" in evidence and "run-step4200" in peak.title
    assert peak.links == ("https://github.com/deepseek-ai/DeepSpec/issues/84",)


def test_not_past_the_peak():
    rising = [(1000, 2.0), (2000, 2.5), (3000, 2.9), (4000, 3.1)]
    assert _by_id(rank_hypotheses({}, acceptance=_history(rising)))["past_acceptance_peak"].score == 0.0
    # One evaluation after the peak, or a dip within 3 %, is not enough; a loss rising too is divergence.
    assert _by_id(rank_hypotheses({}, acceptance=_history(DEEPSPEC_84[:4])))["past_acceptance_peak"].score == 0.0
    small = [(1000, 3.0), (2000, 3.34), (3000, 3.30), (4000, 3.27)]
    assert _by_id(rank_hypotheses({}, acceptance=_history(small)))["past_acceptance_peak"].score == 0.0
    rising_loss = [(s, 1.0 + s / 10_000) for s, _ in DEEPSPEC_84]
    hypothesis = _by_id(rank_hypotheses({}, acceptance=_history(DEEPSPEC_84, rising_loss)))["past_acceptance_peak"]
    assert hypothesis.score == 0.0 and "rose too" in hypothesis.evidence[0]
    no_loss = _by_id(rank_hypotheses({}, acceptance=_history(DEEPSPEC_84)))["past_acceptance_peak"]
    with_loss = _by_id(rank_hypotheses({}, acceptance=_history(DEEPSPEC_84, DEEPSPEC_84_LOSS)))
    assert 0 < no_loss.score < LIKELY <= with_loss["past_acceptance_peak"].score  # without a loss, only a hint
    # Non-finite evaluations are left out; too few points says nothing.
    assert "past_acceptance_peak" not in _by_id(rank_hypotheses({}, acceptance=_history([(1, 3.0), (2, float("nan"))])))


# ---------------------------------------------------------------- the EAGLE flag on an EAGLE-3 drafter


def test_an_eagle3_drafter_launched_with_sglangs_eagle_flag_ranks_first(tmp_path, triage):
    """`triage check --serving` on an SGLang log whose start-up line says speculative_algorithm EAGLE and
    whose decode lines say accept len 1.00, with the SpecForge drafter it served (it has fc)."""

    from builders.contracts import specforge_drafter
    from builders.serving import sglang_line, sglang_server_args_line

    drafter = specforge_drafter(
        tmp_path / "drafter",
        mapping=None,
        vocab=4096,
        draft=1024,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 4]},
    )
    log = tmp_path / "sglang.log"
    lines = [sglang_server_args_line(speculative_algorithm="EAGLE", speculative_draft_model_path=str(drafter))]
    log.write_text("\n".join([*lines, *(sglang_line(400, 400) for _ in range(3))]) + "\n")
    run = tmp_path / "run"
    run.mkdir()
    done = triage("check", run, "--checkpoint", drafter, "--serving", log, "--device", "cpu", "--json")
    report = json.loads(done.stdout)
    top = report["hypotheses"][0]
    assert top["id"] == "algorithm_flag", [(h["id"], h["score"]) for h in report["hypotheses"][:4]]
    assert top["score"] >= 0.8 and top["links"] == ["https://github.com/sgl-project/sglang/pull/21272"]
    assert any(
        "--speculative-algorithm EAGLE" in line and "fc.weight reads 48 features" in line for line in top["evidence"]
    )
    assert any(line.startswith("serving: sglang accepts almost nothing") for line in top["evidence"])
    assert done.returncode == 1, done.stderr


def test_the_eagle3_flag_or_an_eagle2_drafter_is_no_evidence(tmp_path):
    from builders.serving import sglang_server_args_line
    from triage_tui.core.formats.engine_launch import read_engine_launches

    log = tmp_path / "sglang.log"
    log.write_text(sglang_server_args_line(speculative_algorithm="EAGLE3", speculative_draft_model_path="/d") + "\n")
    flag = _by_id(rank_hypotheses({}, launches=read_engine_launches(log)))["algorithm_flag"]
    assert flag.score == 0.0 and "the flag an EAGLE-3 drafter needs" in flag.evidence[0]
    # EAGLE with nothing saying the drafter is EAGLE-3: right for EAGLE-1/2.
    log.write_text(sglang_server_args_line(speculative_algorithm="EAGLE", speculative_draft_model_path="/d") + "\n")
    assert _by_id(rank_hypotheses({}, launches=read_engine_launches(log)))["algorithm_flag"].score == 0.0
    # ... its path saying eagle3, as vLLM's own method detection reads a name.
    log.write_text(
        sglang_server_args_line(speculative_algorithm="EAGLE", speculative_draft_model_path="/m/k2-eagle3") + "\n"
    )
    named = _by_id(rank_hypotheses({}, launches=read_engine_launches(log)))["algorithm_flag"]
    assert 0 < named.score < LIKELY
    # No launch line: the cause is not listed.
    assert "algorithm_flag" not in _by_id(rank_hypotheses({}))
