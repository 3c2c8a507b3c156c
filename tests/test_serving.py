"""Serving evidence (core/watch/serving/) on text in each engine's own format.

vLLM's log line is produced by the computation and format string of ``SpecDecodingLogging.log``
(vllm/v1/spec_decode/metrics.py) through a ``logging.Formatter`` with vLLM's format; its and
SGLang's Prometheus pages by ``prometheus_client`` itself, with the metric and label names the
engines register (vLLM ``SpecDecodingProm``; SGLang ``SchedulerMetricsCollector`` in
python/sglang/srt/metrics/collector.py); SGLang's ``Decode batch`` line by the f-strings of
``log_decode_stats`` (python/sglang/srt/managers/scheduler_metrics_mixin.py) through SGLang's
``[%(asctime)s TP0] %(message)s`` format; its meta_info as ``tokenizer_manager.py`` fills it.
"""

from __future__ import annotations

import http.server
import json
import logging
import logging.handlers
import socket
import threading

import pytest

from builders.mappings import story_mappings
from builders.serving import sglang_line, sglang_metrics, vllm_json_formatter, vllm_line, vllm_metrics
from triage_tui.core.diagnose.checks.result import CheckResult
from triage_tui.core.diagnose.checks.vocab import check_vocab_mapping
from triage_tui.core.diagnose.hypotheses.rank import rank_hypotheses
from triage_tui.core.errors import BadInput, SourceError
from triage_tui.core.log_tail import LogTail
from triage_tui.core.watch.serving.compare import compare_serving, training_estimate
from triage_tui.core.watch.serving.logs import ServingLog, parse_sglang_line, parse_vllm_line
from triage_tui.core.watch.serving.metrics import MetricsUrl
from triage_tui.core.watch.serving.read import read_serving
from triage_tui.core.watch.serving.source import Following

# --------------------------------------------------------------------------- writers


# --------------------------------------------------------------------------- vLLM


def test_vllm_log_line_parses_to_exact_counts():
    line = vllm_line(100, [60, 20, 4])
    assert line.startswith("INFO ") and "[metrics.py:96] SpecDecoding metrics: Mean acceptance length: 1.84," in line
    sample = parse_vllm_line(line)
    assert sample is not None
    assert (sample.drafts, sample.accepted) == (100, 84)
    assert sample.acceptance_length == pytest.approx(1.84)
    assert sample.per_position == (0.6, 0.2, 0.04)
    assert sample.time is not None and len(sample.time) == len("05-12 10:11:12")
    # vLLM >= 0.10 prefixes the process: "(APIServer pid=7) INFO ..."
    assert parse_vllm_line("(APIServer pid=7) " + line) == sample
    assert parse_vllm_line("INFO 05-12 10:11:12 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0") is None


def test_vllm_log_pools_intervals_by_counts(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("INFO starting\n" + vllm_line(100, [60, 20, 4]) + "\n" + vllm_line(50, [10, 2, 0]) + "\n")
    evidence = read_serving(str(log))
    assert evidence.engine == "vllm"
    assert (evidence.drafts, evidence.accepted) == (150, 96)
    assert evidence.acceptance_length == pytest.approx(1 + 96 / 150)
    assert evidence.per_position == pytest.approx((70 / 150, 22 / 150, 4 / 150))
    assert [s.acceptance_length for s in evidence.samples] == pytest.approx([1.84, 1.24])
    assert "pooled counts" in evidence.convention


@pytest.mark.parametrize(
    "fmt",
    [None, "%(asctime)s %(levelname)s %(name)s %(message)s"],
    ids=["docs_example_message_only", "with_asctime"],
)
def test_a_vllm_log_written_by_its_json_logging_format_is_read_as_vllms(tmp_path, fmt):
    # vLLM's stats lines through the JSON formatter of the logging config its docs give for
    # VLLM_LOGGING_CONFIG_PATH (builders/serving.py), uvicorn's plain access lines between them.
    json_format = vllm_json_formatter(fmt)
    log = tmp_path / "vllm.log"
    records = [
        json_format.format(
            logging.LogRecord("vllm.entrypoints", logging.INFO, "api_server.py", 1, "starting", None, None)
        ),
        vllm_line(100, [60, 20, 4], formatter=json_format),
        'INFO:     127.0.0.1:50312 - "POST /v1/completions HTTP/1.1" 200 OK',
        vllm_line(50, [10, 2, 0], formatter=json_format),
    ]
    assert all(json.loads(line)["message"] for line in records[:2])
    log.write_text("\n".join(records) + "\n")
    evidence = read_serving(str(log))
    assert evidence.engine == "vllm"
    assert (evidence.drafts, evidence.accepted) == (150, 96)
    assert evidence.acceptance_length == pytest.approx(1 + 96 / 150)
    assert [s.acceptance_length for s in evidence.samples] == pytest.approx([1.84, 1.24])
    # Each interval keeps the time its own record was stamped with (the two may be a millisecond apart).
    times = [s.time for s in evidence.samples]
    assert times == ([None, None] if fmt is None else [json.loads(records[i])["asctime"] for i in (1, 3)])


def test_vllm_rates_that_do_not_add_up_to_the_counts_are_said(tmp_path):
    """The counts are checked: per-position rates that imply other drafts than accepted / drafts (and the
    logged mean) give a note, where a consistent log gives none."""
    good = vllm_line(100, [60, 20, 4])
    edited = good.replace("0.600, 0.200, 0.040", "0.300, 0.100, 0.020")
    assert edited != good
    log = tmp_path / "vllm.log"
    log.write_text(good + "\n" + vllm_line(50, [10, 2, 0]) + "\n")
    assert read_serving(str(log)).notes == ()
    log.write_text(good + "\n" + edited + "\n")
    (note,) = read_serving(str(log)).notes
    assert note.startswith("1 of 2 interval(s) with per-position rates that do not add up to accepted / drafts")
    assert "interval 2: the rates sum to 0.420, the counts give 84 / 100 = 0.840" in note


def test_vllm_prometheus_counters_sum_over_engines(tmp_path):
    page = tmp_path / "metrics.txt"
    page.write_bytes(vllm_metrics(400, [300, 150, 30], engines=2))
    assert b"vllm:spec_decode_num_drafts_total{" in page.read_bytes()
    evidence = read_serving(str(page))
    assert (evidence.engine, evidence.drafts, evidence.accepted) == ("vllm", 800, 960)
    assert evidence.acceptance_length == pytest.approx(1 + 960 / 800)
    assert evidence.per_position == pytest.approx((0.75, 0.375, 0.075))
    assert any("2 engine label sets" in note for note in evidence.notes)


# --------------------------------------------------------------------------- SGLang


def test_sglang_log_line_and_mean_over_intervals(tmp_path):
    line = sglang_line(412, 200)
    assert line.startswith("[") and "TP0] Decode batch, #running-req: 8," in line
    sample = parse_sglang_line(line)
    assert sample is not None and sample.acceptance_length == 2.06 and sample.drafts is None
    # Older releases: "Decode batch. #running-req: ..., accept len: 1.02, ..." with no accept rate.
    old = (
        "[2025-03-01 10:00:00 TP0] Decode batch. #running-req: 1, #token: 90, token usage: 0.00, "
        "accept len: 1.02, gen throughput (token/s): 50.10, #queue-req: 0"
    )
    assert parse_sglang_line(old).acceptance_length == 1.02
    log = tmp_path / "sglang.log"
    log.write_text("\n".join([sglang_line(412, 200), old, sglang_line(300, 100)]) + "\n")
    evidence = read_serving(str(log))
    assert evidence.engine == "sglang" and evidence.drafts is None
    assert evidence.acceptance_length == pytest.approx((2.06 + 1.02 + 3.00) / 3)
    assert "no counts" in evidence.convention


def test_sglang_gauges(tmp_path):
    page = tmp_path / "metrics.prom"
    page.write_bytes(sglang_metrics([2.5, 2.7]))
    evidence = read_serving(str(page))
    assert evidence.engine == "sglang"
    assert evidence.acceptance_length == pytest.approx(2.6)
    assert any("spec_accept_rate 0.250" in note for note in evidence.notes)


def test_sglang_meta_info_jsonl_pools_requests_and_histogram(tmp_path):
    # Two requests; histogram[k] = verify steps that accepted k drafts (3 drafts per step).
    requests = [
        {
            "text": "a",
            "meta_info": {
                "completion_tokens": 20,
                "spec_verify_ct": 10,
                "spec_accept_length": 2.0,
                "spec_accept_histogram": [2, 4, 4, 0],
            },
        },
        {
            "text": "b",
            "meta_info": {
                "completion_tokens": 9,
                "spec_verify_ct": 6,
                "spec_accept_length": 1.5,
                "spec_accept_histogram": [3, 3, 0, 0],
            },
        },
    ]
    path = tmp_path / "responses.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    evidence = read_serving(str(path))
    assert (evidence.engine, evidence.drafts, evidence.accepted) == ("sglang", 16, 13)
    assert evidence.acceptance_length == pytest.approx(29 / 16)
    # position 0 accepted in steps with >= 1 accepted: 8 + 3 = 11; position 1: 4; position 2: 0
    assert evidence.per_position == pytest.approx((11 / 16, 4 / 16, 0.0))


def test_a_file_without_evidence_is_bad_input(tmp_path):
    path = tmp_path / "app.log"
    path.write_text("INFO nothing about speculation here\n")
    with pytest.raises(BadInput, match="holds no vLLM"):
        read_serving(str(path))
    with pytest.raises(BadInput, match="no such file"):
        read_serving(str(tmp_path / "missing.log"))


# --------------------------------------------------------------------------- following a log


def test_log_tail_follows_growth_partial_lines_rotation_and_truncation(tmp_path):
    path = tmp_path / "serve.log"
    # logging's own RotatingFileHandler renames serve.log -> serve.log.1 and opens a new serve.log.
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=600, backupCount=2)
    handler.setFormatter(logging.Formatter("%(message)s"))
    follower = ServingLog(path)
    assert follower.poll().evidence is None  # nothing yet

    def emit(message: str) -> None:
        handler.emit(logging.LogRecord("vllm", logging.INFO, "metrics.py", 96, message, None, None))

    emit(vllm_line(100, [60, 20, 4]).split("] ", 1)[1])
    assert follower.poll().evidence.drafts == 100
    # A half-written line waits for its newline.
    with open(path, "a") as handle:
        handle.write(vllm_line(50, [10, 2, 0])[:80])
    assert follower.poll().evidence.drafts == 100
    with open(path, "a") as handle:
        handle.write(vllm_line(50, [10, 2, 0])[80:] + "\n")
    assert follower.poll().evidence.drafts == 150
    # Rotation: a record written to the old file, then one that rolls it over (~270-byte lines,
    # maxBytes 600): the old file's last line (now serve.log.1) and the new file's are both read, once.
    first_inode = path.stat().st_ino
    with open(path, "a") as handle:
        handle.write(vllm_line(10, [5, 1, 0])[:40])  # half a line, finished below before the rename
    with open(path, "a") as handle:
        handle.write(vllm_line(10, [5, 1, 0])[40:] + "\n")
    emit(vllm_line(10, [5, 1, 0]).split("] ", 1)[1])
    handler.close()
    assert path.stat().st_ino != first_inode and (tmp_path / "serve.log.1").stat().st_ino == first_inode
    evidence = follower.poll().evidence
    assert evidence.drafts == 170 and len(evidence.samples) == 4
    assert follower.poll().evidence.drafts == 170
    # Truncation in place (copytruncate): read again from the start.
    path.write_text(vllm_line(20, [4, 0, 0]) + "\n")
    assert follower.poll().evidence.drafts == 190


def test_log_tail_reads_a_huge_line_without_keeping_it(tmp_path):
    path = tmp_path / "x.log"
    path.write_bytes(b"A" * (1 << 17) + b"\n" + vllm_line(10, [5, 1, 0]).encode() + b"\n")
    from triage_tui.core.watch.serving import tuning

    tail = LogTail(path, max_line_bytes=tuning.MAX_LINE_BYTES)
    lines = tail.poll(tuning.MAX_READ_BYTES)
    assert len(lines) == 1 and "SpecDecoding metrics" in lines[0] and tail.dropped == 1


# --------------------------------------------------------------------------- live /metrics


class _Page:
    def __init__(self, body: bytes) -> None:
        self.body = body


def _serve(page: _Page):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(page.body)

        def log_message(self, *args):  # keep pytest output clean
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return server, thread


def test_live_scrape_gives_interval_samples_from_counter_deltas():
    page = _Page(vllm_metrics(100, [60, 20, 4]))
    server, thread = _serve(page)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        assert read_serving(url).acceptance_length == pytest.approx(1.84)
        now = [0.0]
        watch = MetricsUrl(url, Following(clock=lambda: now[0]), interval=10.0)
        first = watch.poll().evidence
        assert first.drafts == 100 and first.samples == ()
        page.body = vllm_metrics(150, [62, 21, 4])  # 50 more drafts, 3 more accepted
        assert watch.poll().evidence is first  # too soon: no scrape
        now[0] = 10.0
        second = watch.poll().evidence
        assert (second.drafts, second.accepted) == (150, 87)
        (sample,) = second.samples
        assert (sample.drafts, sample.accepted) == (50, 3)
        assert sample.acceptance_length == pytest.approx(1.06)
        assert sample.per_position == pytest.approx((0.04, 0.02, 0.0))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


def test_dead_url_is_one_line_and_exit_2(tmp_path, triage):
    url = _dead_url()
    with pytest.raises(BadInput, match="does not answer"):
        read_serving(url)
    polled = MetricsUrl(url, Following(clock=lambda: 0.0)).poll()
    assert polled.evidence is None
    (error,) = polled.errors
    assert (error.source, error.path) == ("serving", url) and "does not answer" in error.message
    run = tmp_path / "run"
    run.mkdir()
    (run / "triage.toml").write_text(f'[run]\nvocab_size = 32000\n[serving]\nmetrics = "{url}"\n')
    done = triage("check", run, "--json")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and url in done.stderr and "does not answer" in done.stderr
    assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------- training estimate and findings


def _last(values: dict[str, float]):
    return lambda tag: (500, values[tag]) if tag in values else None


def _estimate(values: dict[str, float]):
    return training_estimate(values, _last(values))


def test_training_estimate_conventions():
    # SpecForge acc_i: chained as SpecForge's _simulated_acc_len does, plus the bonus token.
    specforge = {"train/acc_0": 0.8, "train/acc_1": 0.5, "train/acc_2": 0.5, "train/ploss_0": 1.0}
    estimate = training_estimate(specforge, _last(specforge))
    assert estimate.per_position == pytest.approx((0.8, 0.4, 0.2))
    assert estimate.acceptance_length == pytest.approx(2.4) and estimate.step == 500
    # speculators full_acc_k is already unconditional; held-out (val/..._epoch) before train.
    speculators = {
        "train/full_acc_0": 0.9,
        "train/full_acc_1": 0.6,
        "val/full_acc_0_epoch": 0.7,
        "val/full_acc_1_epoch": 0.3,
        "train/cond_acc_1": 0.66,
        "train/loss_0": 1.0,
    }
    estimate = training_estimate(speculators, _last(speculators))
    assert estimate.tags == ("val/full_acc_0_epoch", "val/full_acc_1_epoch")
    assert estimate.acceptance_length == pytest.approx(2.0)
    assert estimate.truncated(1).acceptance_length == pytest.approx(1.7)
    train_only = {k: v for k, v in speculators.items() if k.startswith("train/")}
    assert _estimate(train_only).acceptance_length == pytest.approx(2.5)
    assert training_estimate(["train/loss"], _last({})) is None
    # SpecForge's evaluator list as its tracker logs it.
    listed = {"eval/per_position_acc/0": 0.5, "eval/per_position_acc/1": 0.5}
    assert _estimate(listed).acceptance_length == pytest.approx(1.75)


def _evidence(tmp_path, drafts, per_pos):
    log = tmp_path / f"v{drafts}.log"
    log.write_text(vllm_line(drafts, per_pos) + "\n")
    return read_serving(str(log))


def test_collapsed_and_disagreement_findings(tmp_path):
    collapsed = _evidence(tmp_path, 1000, [4, 0, 0])
    healthy_training = _estimate({"train/acc_0": 0.8, "train/acc_1": 0.75, "train/acc_2": 0.7})
    comparison = compare_serving(collapsed, healthy_training)
    kinds = [f.kind for f in comparison.findings]
    assert kinds == ["acceptance_collapsed", "serving_below_training"]
    assert "1.00" in comparison.findings[0].message and "4 accepted of 1000 drafts" in comparison.findings[0].message
    # 1 + 0.8 + 0.6 + 0.42 = 2.82 against 1.004
    assert comparison.findings[1].value == pytest.approx(2.82 - 1.004)
    good = _evidence(tmp_path, 100, [80, 60, 40])
    chance_training = _estimate({"train/acc_0": 0.05})
    above = compare_serving(good, chance_training)
    assert [f.kind for f in above.findings] == ["serving_above_training"]
    # same numbers, no finding
    assert (
        compare_serving(good, _estimate({"train/acc_0": 0.8, "train/acc_1": 0.75, "train/acc_2": 0.667})).findings == ()
    )


def test_collapsed_serving_and_mismatched_mapping_rank_the_mapping_first(tmp_path):
    vocab = check_vocab_mapping(*story_mappings())  # 252 / 32000 positions agree
    checks = {"vocab_mapping": vocab, "hidden_state": CheckResult("hidden_state", "pass", "ok")}
    serving = compare_serving(_evidence(tmp_path, 1000, [4, 0, 0]), None)
    ranked = rank_hypotheses(checks, serving=serving)
    ids = [h.id for h in ranked]
    assert ids[0] == "vocab_mapping_mismatch"
    assert {"config_contract", "target_mismatch"} <= set(ids)
    top = ranked[0]
    assert any("252 / 32000" in line for line in top.evidence)
    assert any(line.startswith("serving: vllm accepts almost nothing") for line in top.evidence)
    without = rank_hypotheses(checks)[0]
    assert top.score > without.score
    assert {h.id: h.score for h in ranked}["config_contract"] == pytest.approx(0.3)
    assert all(h.links for h in ranked if h.id in ("config_contract", "target_mismatch"))


def test_check_with_serving_on_the_story_run_ranks_the_mapping_first_with_both_pieces(tmp_path, triage):
    from builders.check_run import build_run

    run = build_run(tmp_path, story=True)
    log = tmp_path / "vllm-serve.log"
    log.write_text("\n".join(vllm_line(drafts, [n, 0, 0]) for drafts, n in ((400, 2), (600, 3))) + "\n")
    done = triage("check", run, "--serving", log, "--json", "--device", "cpu")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    serving = report["serving"]
    assert (serving["engine"], serving["source"], serving["drafts"], serving["accepted"]) == ("vllm", str(log), 1000, 5)
    assert serving["acceptance_length"] == pytest.approx(1.005)
    assert serving["per_position"] == pytest.approx([0.005, 0.0, 0.0])
    assert serving["convention"].startswith("1 + accepted / drafts")
    assert [f["kind"] for f in serving["findings"]] == ["acceptance_collapsed"]
    # The run logs train/acc_0 only (4.5 % at the end): an estimate near 1, no disagreement.
    assert serving["training_estimate"]["tags"] == ["train/acc_0"]
    top = report["hypotheses"][0]
    assert top["id"] == "vocab_mapping_mismatch"
    assert any("252 / 32000" in line for line in top["evidence"])
    assert any(line.startswith("serving: vllm accepts almost nothing") for line in top["evidence"])
    ids = {h["id"] for h in report["hypotheses"]}
    assert {"config_contract", "target_mismatch"} <= ids
    text = triage("check", run, "--serving", log, "--device", "cpu").stdout
    assert "serving (vllm, " in text and "acceptance length 1.00  (5 accepted / 1000 drafts)" in text


def test_manifest_serving_table(tmp_path):
    from triage_tui.core.read.runs.manifest import load_manifest

    path = tmp_path / "triage.toml"
    path.write_text(
        '[run]\nvocab_size = 32000\n[serving]\nlogs = ["logs/serve.log", "/abs/other.log"]\n'
        'metrics = "http://127.0.0.1:8000/metrics"\n'
    )
    manifest = load_manifest(path)
    assert manifest.serving_sources == [
        str(tmp_path / "logs" / "serve.log"),
        "/abs/other.log",
        "http://127.0.0.1:8000/metrics",
    ]
    path.write_text('[serving]\nmetrics = "saved/metrics.txt"\n')
    assert load_manifest(path).serving_sources == [str(tmp_path / "saved" / "metrics.txt")]
    for bad in ("[serving]\nlogs = [1]\n", '[serving]\nurl = "x"\n', "serving = 3\n"):
        path.write_text(bad)
        with pytest.raises(BadInput, match=r"\[serving\]|serving"):
            load_manifest(path)


def test_disagreement_is_judged_over_the_positions_both_sides_have(tmp_path):
    # The server drafts 3 tokens, the run trained 2 TTT steps at chance: 1 + 0.6 + 0.3 over the
    # first two positions (not the 3-position 2.0) against 1 + 0.04 + 0.0016.
    served = _evidence(tmp_path, 100, [60, 30, 10])
    comparison = compare_serving(served, _estimate({"eval/acc_0": 0.04, "eval/acc_1": 0.04}))
    (finding,) = comparison.findings
    assert finding.kind == "serving_above_training"
    assert finding.value == pytest.approx(1.9 - 1.0416)
    assert "1.90 over the first 2 positions" in finding.message


def test_the_watcher_scrapes_on_its_own_thread_and_a_dead_url_is_a_line_not_a_stop(tmp_path):
    from builders.check_run import write_events
    from triage_tui.core.watch.watcher import Watcher

    page = _Page(vllm_metrics(100, [60, 20, 4]))
    server, thread = _serve(page)
    try:
        live, dead = tmp_path / "live", tmp_path / "dead"
        for run, url in ((live, f"http://127.0.0.1:{server.server_address[1]}/metrics"), (dead, _dead_url())):
            write_events(run / "runs", [2.0, 1.5], [0.5, 0.6])
            (run / "triage.toml").write_text(f'[run]\nvocab_size = 32000\n[serving]\nmetrics = "{url}"\n')
        now = [1000.0]
        watcher = Watcher([tmp_path], use_watchdog=False, clock=lambda: now[0])
        watcher.poll_once()
        for tracked in watcher._runs.values():
            follower = tracked.serving.slots[0].source
            assert isinstance(follower, MetricsUrl)
            scrape = follower.pending
            assert scrape is not None and scrape is not threading.current_thread()  # on its own thread
            scrape.join(timeout=30)
        statuses = {s.info.name: s for s in watcher.poll_once()}
        assert statuses["live"].serving.acceptance_length == pytest.approx(1.84)
        assert statuses["live"].serving_errors == ()
        assert statuses["dead"].serving is None
        (error,) = statuses["dead"].serving_errors
        assert "does not answer" in error and "\n" not in error
        assert statuses["dead"].to_json()["serving"] == {"errors": [error]}
        assert statuses["dead"].metrics.loss.last == 1.5  # the run itself is still watched
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_a_long_chunk_without_newline_does_not_end_the_read(tmp_path, monkeypatch):
    from triage_tui.core.watch.serving import tuning

    monkeypatch.setattr(tuning, "MAX_READ_BYTES", 4096)  # one poll's read, made small
    path = tmp_path / "mixed.log"
    # 10 KB of a runaway line (dropped), then the last line without its newline.
    path.write_bytes(b"x" * 10_000 + b"\n" + vllm_line(100, [60, 20, 4]).encode())
    evidence = read_serving(str(path))
    assert (evidence.drafts, evidence.accepted) == (100, 84)


def test_a_missing_log_is_an_error_line_until_it_appears(tmp_path):
    from triage_tui.core.watch.serving.read import ServingWatch

    watch = ServingWatch([str(tmp_path / "later.log")])
    assert watch.poll() == (None, (SourceError("serving", str(tmp_path / "later.log"), "no such file (yet)"),))
    (tmp_path / "later.log").write_text(vllm_line(10, [5, 1, 0]) + "\n")
    evidence, errors = watch.poll()
    assert evidence.drafts == 10 and errors == ()
    assert watch.poll()[0] is evidence  # nothing new: the same object, so the TUI skips a redraw


def test_one_shot_follow_reads_a_long_log_to_the_end(tmp_path, monkeypatch):
    from triage_tui.core.watch.serving import tuning
    from triage_tui.core.watch.serving.read import ServingWatch

    monkeypatch.setattr(tuning, "MAX_READ_BYTES", 1024)  # one poll's read, made small
    path = tmp_path / "long.log"
    path.write_text("".join(vllm_line(10, [5, 1, 0]) + "\n" for _ in range(20)))
    assert ServingWatch([str(path)]).poll()[0].drafts == 200  # scan: to the end
    tui = ServingWatch([str(path)], background=True)
    first = tui.poll()[0].drafts
    assert first < 200  # the TUI catches up over polls
    polls = 1
    while tui.poll()[0].drafts < 200 and polls < 100:
        polls += 1
    assert tui.poll()[0].drafts == 200 and polls > 1


def test_several_sources_pool_counts_and_never_mix_engines(tmp_path):
    from triage_tui.core.watch.serving.read import read_serving_sources

    a, b, c = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "c.log"
    a.write_text(vllm_line(100, [60, 20, 4]) + "\n")
    b.write_text(vllm_line(50, [10, 2, 0]) + "\n")
    c.write_text(sglang_line(412, 200) + "\n")
    evidence = read_serving_sources([str(a), str(b), str(c)])
    assert (evidence.engine, evidence.drafts, evidence.accepted) == ("vllm", 150, 96)
    assert evidence.per_position == pytest.approx((70 / 150, 22 / 150, 4 / 150))
    assert [p.source for p in evidence.sources] == [str(a), str(b)]
    assert any(note.startswith(f"{c}: not pooled, it is sglang") for note in evidence.notes)
