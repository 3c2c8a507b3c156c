"""The serving chart: a run whose triage.toml names [serving] shows its acceptance under the loss."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from builders.pilot import SIZE, loaded, make_app, polled
from builders.serving import sglang_line, sglang_line_text, vllm_line
from builders.tui import healthy_run, story_run
from builders.waiting import wait_for
from triage_tui.tui.widgets.serving_chart import ServingChart

REPO = Path(__file__).resolve().parents[1]

WIDE = (160, 45)


def _serving_run(root):
    run = story_run(root)
    healthy_run(root)
    (run / "serve.log").write_text(vllm_line(400, [2, 0, 0]) + "\n")
    with open(run / "triage.toml", "a") as handle:
        handle.write('[serving]\nlogs = ["serve.log"]\n')
    return run


async def test_serving_chart_follows_the_log_beside_the_loss_and_feeds_the_checks(tmp_path):
    run = _serving_run(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=WIDE) as pilot:
        await loaded(pilot)
        chart = app.main.query_one(ServingChart)
        await wait_for(pilot, lambda: chart.series is not None, what="the serving chart")
        pane = app.main.query_one("#chart-pane")
        assert pane.has_class("-serving") and chart.display
        await wait_for(pilot, lambda: chart.size.height >= 5, what="the serving chart laid out")
        assert str(pane.border_title).endswith("· served 1.00")
        # In an 80x24 pane the loss keeps the chart; the title still carries the served figure.
        await pilot.resize_terminal(*SIZE)
        await wait_for(pilot, lambda: app.main.has_class("compact"), what="the compact layout")
        assert not chart.display and str(pane.border_title).endswith("· served 1.00")
        await pilot.resize_terminal(*WIDE)
        series = chart.series
        assert series.engine == "vllm" and series.lengths.tolist() == [1.005]
        assert series.per_position == (0.005, 0.0, 0.0)
        # The story run logs train/acc_0 only (2-7 %): the estimate sits near 1 as well.
        assert 1.0 < series.training_estimate < 1.1
        # The log grows: the chart follows on the next poll (the watcher thread reads it).
        with open(run / "serve.log", "a") as handle:
            handle.write(vllm_line(600, [3, 0, 0]) + "\n")
        await polled(pilot)
        await wait_for(pilot, lambda: len(chart.series.lengths) == 2, what="the second interval")
        assert chart.series.acceptance_length == 1.005
        # The checks take the serving evidence: the mapping first, with the collapse as evidence.
        await pilot.press("c")
        await wait_for(pilot, lambda: app.checks.running_for is None and app.checks.diagnoses, what="checks")
        diagnosis = app.checks.diagnoses[run]
        assert diagnosis.serving is not None and diagnosis.serving.finding("acceptance_collapsed")
        top = diagnosis.hypotheses[0]
        assert top.id == "vocab_mapping_mismatch"
        assert any(line.startswith("serving: vllm accepts almost nothing") for line in top.evidence)
        # A run without [serving] shows no serving chart.
        await pilot.press("down")
        await wait_for(
            pilot, lambda: not app.main.query_one("#chart-pane").has_class("-serving"), what="the healthy run's chart"
        )


async def test_a_malformed_serving_line_is_counted_and_the_watch_goes_on(tmp_path):
    """`accept len: 1.2.3` in a followed log: the run is listed, its chart shows the other lines."""
    run = healthy_run(tmp_path)
    lines = [sglang_line(412, 200), sglang_line_text("1.2.3"), sglang_line(300, 100)]
    (run / "serve.log").write_text("\n".join(lines) + "\n")
    with open(run / "triage.toml", "a") as handle:
        handle.write('[serving]\nlogs = ["serve.log"]\n')
    app = make_app(tmp_path)
    async with app.run_test(size=WIDE) as pilot:
        await loaded(pilot)
        chart = app.main.query_one(ServingChart)
        await wait_for(pilot, lambda: chart.series is not None, what="the serving chart")
        assert chart.series.engine == "sglang" and chart.series.lengths.tolist() == [2.06, 3.0]
        assert not any("watching stopped" in n.message for n in app._notifications)
        assert app.watcher is not None and app.watcher.polls > 0


def test_scan_json_carries_the_serving_evidence(tmp_path):
    run = _serving_run(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "triage_tui", "scan", str(run), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    (report,) = json.loads(done.stdout)["runs"]
    serving = report["serving"]
    assert (serving["engine"], serving["drafts"], serving["accepted"], serving["errors"]) == ("vllm", 400, 2, [])
    assert serving["acceptance_length"] == 1.005 and "samples" not in serving
    # The collapse is a critical flag of the run, with its numbers.
    collapsed = [f for f in report["flags"] if f["kind"] == "serving_acceptance_collapsed"]
    assert len(collapsed) == 1 and collapsed[0]["severity"] == "critical" and collapsed[0]["value"] == 1.005
    assert "2 accepted of 400 drafts" in collapsed[0]["message"]
