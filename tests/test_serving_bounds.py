"""Bounds and trust for serving evidence (docs/contracts.md, Bounds and Trust), end to end.

Each test is one way a serving source could hang triage, make it allocate without bound, print a
number that cannot be, fetch what the user did not ask for, or stop the watch: through the
product's own entry points (``scan``, ``check``, the watcher, ``read_serving``), against real HTTP
servers on 127.0.0.1 and pages written by prometheus_client.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builders.check_run import write_events
from builders.metrics_server import MetricsServer, Route
from builders.serving import sglang_line, sglang_line_text, vllm_counters_page, vllm_line, vllm_line_raw, vllm_metrics
from builders.waiting import load_factor
from triage_tui import cli
from triage_tui.core.errors import BadInput
from triage_tui.core.watch.serving.read import ServingWatch, read_serving

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534  # the uid of "nobody": a triage.toml another user owns


def _run(root: Path, name: str, serving: str = "") -> Path:
    run = root / name
    write_events(run / "runs", [2.0, 1.5], [0.5, 0.6])
    (run / "triage.toml").write_text(f"[run]\nvocab_size = 32000\n{serving}")
    return run


def _scan(capsys, *paths: Path) -> tuple[int, dict]:
    code = cli.main(["scan", *map(str, paths), "--json", "--poll"])
    return code, json.loads(capsys.readouterr().out)


def _owned_by_nobody(path: Path) -> None:
    try:
        os.chown(path, NOBODY, -1)
    except PermissionError:
        pytest.skip("chown to another uid needs root (or CAP_CHOWN) here: the ownership rule cannot be exercised")
    assert path.stat().st_uid == NOBODY != os.geteuid()


# --------------------------------------------------------------------------- unbounded


@pytest.mark.slow
def test_a_trickling_metrics_url_ends_check_and_scan_at_the_default_deadline(tmp_path):
    """A server that sends a byte a second: `check --serving URL` and `scan` end at the 15 s deadline
    with one line naming the URL, instead of waiting on it a read at a time."""
    with MetricsServer() as server:
        url = server.route("/metrics", Route(vllm_metrics(100, [60, 20, 4]), behaviour="trickle_body"))
        run = _run(tmp_path, "run", f'[serving]\nmetrics = "{url}"\n')
        started = time.monotonic()
        check = subprocess.Popen(
            [sys.executable, "-m", "triage_tui", "check", str(run), "--serving", url, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        scan = subprocess.Popen(
            [sys.executable, "-m", "triage_tui", "scan", str(run), "--json", "--poll"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        try:
            limit = 120 * load_factor()  # the product's deadline is 15 s; this only turns a hang into a failure
            check_out, check_err = check.communicate(timeout=limit)
            scan_out, scan_err = scan.communicate(timeout=limit)
        finally:
            for process in (check, scan):
                if process.poll() is None:
                    process.kill()
                    process.wait()
        assert time.monotonic() - started >= 15.0  # the deadline, not an earlier failure
        assert server.sent["/metrics"] < 200  # a byte a second: the whole page never came
    assert check.returncode == 2 and check_out == ""
    assert check_err.count("\n") == 1 and url in check_err and "no complete answer within 15 s" in check_err
    assert "Traceback" not in check_err + scan_err
    (report,) = json.loads(scan_out)["runs"]
    (error,) = report["serving"]["errors"]
    assert error.startswith(url) and "no complete answer within 15 s" in error
    assert report["metrics"]["loss"]["last"] == 1.5


def test_a_position_index_above_64_is_an_error_not_an_allocation(tmp_path):
    """`..._per_pos_total{position="100000000"} 1` once made a 100-million-entry tuple (3.8 GB)."""
    page = tmp_path / "metrics.prom"
    for position in ("1000", "65", "100000000"):
        page.write_bytes(vllm_counters_page(100, 300, 84, {"0": 60, "1": 20, position: 4}))
        with pytest.raises(BadInput, match=rf"position {position} is above 64") as caught:
            read_serving(str(page))
        assert caught.value.path == str(page)
    page.write_bytes(vllm_counters_page(100, 300, 84, {"0": 60, "1": 20, "64": 4}))
    assert len(read_serving(str(page)).per_position) == 65  # 64 itself is a position


def test_redirects_leave_neither_scheme_host_nor_port(tmp_path):
    """A redirect is followed only on the same scheme, host and port: never to another server, never to ftp://."""
    with MetricsServer() as elsewhere, MetricsServer() as server:
        target = elsewhere.route("/metrics", vllm_metrics(100, [60, 20, 4]))
        server.route("/metrics", vllm_metrics(100, [60, 20, 4]))
        to_port = server.route("/to-port", Route(status=302, headers={"Location": target}))
        to_ftp = server.route("/to-ftp", Route(status=302, headers={"Location": f"ftp://127.0.0.1:{server.port}/m"}))
        to_same = server.route("/to-same", Route(status=307, headers={"Location": "/metrics"}))
        with pytest.raises(BadInput, match=rf"redirected to http://127.0.0.1:{elsewhere.port}: not followed") as caught:
            read_serving(to_port)
        assert caught.value.path == to_port
        with pytest.raises(BadInput, match=r"redirected to ftp://127.0.0.1:\d+: not followed") as caught:
            read_serving(to_ftp)
        assert caught.value.path == to_ftp
        assert elsewhere.hits["/metrics"] == 0
        assert read_serving(to_same).acceptance_length == pytest.approx(1.84)  # same origin: followed
        with pytest.raises(BadInput, match="ftp:// is not fetched"):
            read_serving(f"ftp://127.0.0.1:{server.port}/metrics")  # named directly: refused, not read as a path


# --------------------------------------------------------------------------- silent wrong numbers


def test_negative_counters_are_an_error_not_a_length(tmp_path):
    """Negative counters once gave an acceptance length of -0.5."""
    page = tmp_path / "metrics.prom"
    page.write_bytes(vllm_counters_page(10, 30, -15, {"0": -5}))
    with pytest.raises(BadInput, match="a count cannot be negative"):
        read_serving(str(page))
    evidence, (error,) = ServingWatch([str(page)]).poll()
    assert evidence is None and (error.source, error.path) == ("serving", str(page))
    log = tmp_path / "vllm.log"
    log.write_text(vllm_line(100, [60, 20, 4]) + "\n" + vllm_line_raw(-0.5, -15, 30, "-0.500, 0.000, 0.000") + "\n")
    with pytest.raises(BadInput, match="line 2: .*cannot be negative"):
        read_serving(str(log))


def test_more_accepted_than_drafted_is_an_error_not_a_length(tmp_path):
    """5 000 accepted of 30 drafted tokens once gave 501, with per-position rates of 900."""
    page = tmp_path / "metrics.prom"
    page.write_bytes(vllm_counters_page(10, 30, 5000, {"0": 9000, "1": 9000, "2": 9000}))
    with pytest.raises(BadInput, match="5000 tokens accepted of 30 drafted"):
        read_serving(str(page))
    page.write_bytes(vllm_counters_page(10, 30, 20, {"0": 15, "1": 5}))
    with pytest.raises(BadInput, match="15 accepted at position 0 of 10 drafts"):
        read_serving(str(page))
    log = tmp_path / "vllm.log"
    log.write_text(vllm_line_raw(501.0, 5000, 30, "900.000, 900.000, 900.000") + "\n")
    with pytest.raises(BadInput, match="line 1: 5000 tokens accepted of 30 drafted"):
        read_serving(str(log))
    log.write_text(vllm_line_raw(1.5, 15, 30, "900.000, 0.000, 0.000") + "\n")
    with pytest.raises(BadInput, match=r"per-position acceptance rate 0 is 900 \(a rate lies in \[0, 1\]\)"):
        read_serving(str(log))


# --------------------------------------------------------------------------- unasked requests


def test_scan_of_a_parent_fetches_nothing_another_users_toml_names(tmp_path, capsys):
    """`scan PARENT` once fetched whatever URL any child's triage.toml named."""
    with MetricsServer() as server:
        theirs = server.route("/theirs", vllm_metrics(100, [60, 20, 4]))
        mine = server.route("/mine", vllm_metrics(100, [60, 20, 4]))
        outside = tmp_path / "outside.log"
        outside.write_text(vllm_line(100, [1, 0, 0]) + "\n")
        other = _run(tmp_path, "other", f'[serving]\nmetrics = "{theirs}"\nlogs = ["../outside.log", "serve.log"]\n')
        (other / "serve.log").write_text(vllm_line(50, [10, 2, 0]) + "\n")
        _owned_by_nobody(other / "triage.toml")
        _run(tmp_path, "own", f'[serving]\nmetrics = "{mine}"\n')
        code, document = _scan(capsys, tmp_path)
        assert server.hits["/theirs"] == 0 and server.hits["/mine"] == 1
    runs = {run["name"]: run for run in document["runs"]}
    assert code in (0, 1) and set(runs) == {"other", "own"}
    serving = runs["other"]["serving"]
    # Only the log inside the run was read; what was left out is said, naming the file and the owner.
    assert (serving["drafts"], serving["accepted"], serving["source"]) == (50, 12, str(other / "serve.log"))
    notices = serving["errors"]
    assert len(notices) == 2 and all(n.startswith(str(other / "triage.toml")) for n in notices)
    assert any(f"metrics {theirs} not fetched" in n and f"uid {NOBODY}" in n for n in notices)
    assert any(f"logs {outside} not read: outside the run" in n for n in notices)
    assert runs["own"]["serving"]["errors"] == [] and runs["own"]["serving"]["drafts"] == 100


def test_an_untrusted_toml_names_no_path_outside_its_run(tmp_path):
    """The [run] paths of another user's triage.toml are used inside the run only (a symlink out counts as out)."""
    from triage_tui.core.diagnose.check_inputs import resolve_run
    from triage_tui.core.read.runs.manifest import load_manifest

    run = _run(tmp_path, "run")
    (run / "cache").mkdir()
    (run / "cache" / "map.pt").write_bytes(b"")
    (tmp_path / "elsewhere").mkdir()
    (run / "out-link").symlink_to(tmp_path / "elsewhere")
    (run / "triage.toml").write_text(
        '[run]\nvocab_size = 32000\ncheckpoint = "../elsewhere"\nmapping = "cache/map.pt"\n'
        'target = "out-link"\ndata = "~/dumps"\n[serving]\nmetrics = "saved/metrics.prom"\n'
    )
    assert load_manifest(run / "triage.toml").checkpoint == tmp_path / "elsewhere"  # mine: every path used
    _owned_by_nobody(run / "triage.toml")
    manifest = load_manifest(run / "triage.toml")
    assert manifest.mapping == run / "cache" / "map.pt" and manifest.serving_metrics == str(run / "saved/metrics.prom")
    assert manifest.checkpoint is None and manifest.target is None and manifest.data is None
    assert [line.split(" not used")[0] for line in manifest.untrusted] == [
        f"[run] checkpoint {tmp_path / 'elsewhere'}",
        f"[run] data {Path('~/dumps').expanduser()}",
        f"[run] target {run / 'out-link'}",
    ]
    (error,) = manifest.untrusted_errors()[:1]
    assert (error.source, error.path) == ("manifest", str(run / "triage.toml"))
    notes = resolve_run(run).inputs.notes
    assert all(line in notes for line in manifest.untrusted)


def test_a_serving_flag_is_the_users_own_request(tmp_path, capsys):
    """`check --serving URL` fetches the URL whoever owns the run's triage.toml; the file's own URL is not."""
    with MetricsServer() as server:
        flag = server.route("/flag", vllm_metrics(100, [60, 20, 4]))
        theirs = server.route("/theirs", vllm_metrics(100, [60, 20, 4]))
        run = _run(tmp_path, "run", f'[serving]\nmetrics = "{theirs}"\n')
        _owned_by_nobody(run / "triage.toml")
        cli.main(["check", str(run), "--serving", flag, "--json", "--device", "cpu"])
        document = json.loads(capsys.readouterr().out)
        assert server.hits["/flag"] == 1 and server.hits["/theirs"] == 0
    assert document["serving"]["source"] == flag
    assert any(f"metrics {theirs} not fetched" in note for note in document["input_notes"])


def test_a_response_body_is_never_echoed(tmp_path, capsys):
    """What a server answers is not output: a page that is not Prometheus text, an error status with
    a forged reason phrase, give one short line naming the URL and none of the server's text."""
    body = b"<html><body>SECRET-TOKEN \x1b[2J [bold]x[/bold] [link=https://e.example]y[/link]</body></html>\n"
    with MetricsServer() as server:
        page = server.route("/page", body)
        status = server.route("/status", Route(body, status=500))
        for url in (page, status):
            with pytest.raises(BadInput) as caught:
                read_serving(url)
            line = caught.value.line()
            assert line.startswith(url) and len(line) < len(url) + 80
            assert not any(fragment in line for fragment in ("SECRET", "\x1b", "[bold]", "[link", "<html>"))
        run = _run(tmp_path, "run", f'[serving]\nmetrics = "{page}"\n')
        _, document = _scan(capsys, run)
    (error,) = document["runs"][0]["serving"]["errors"]
    assert error == f"{page}: not Prometheus text (line 1 does not parse)"


# --------------------------------------------------------------------------- one bad source


def test_a_malformed_float_in_a_serving_log_is_a_counted_line(tmp_path):
    """`accept len: 1.2.3` once raised out of the watcher's poll (the TUI: "watching stopped")."""
    from triage_tui.core.watch.watcher import Watcher

    run = _run(tmp_path, "run", '[serving]\nlogs = ["serve.log"]\n')
    lines = [sglang_line(412, 200), sglang_line_text("1.2.3"), sglang_line(300, 100), sglang_line_text("2.5e")]
    (run / "serve.log").write_text("\n".join(lines) + "\n")
    for strict in (False, True):  # the TUI's watcher, then scan's
        watcher = Watcher([tmp_path], use_watchdog=False, strict=strict, clock=lambda: 1000.0)
        (status,) = watcher.poll_once()
        assert status.serving.acceptance_length == pytest.approx((2.06 + 3.00) / 2)
        assert status.serving.notes == ("2 stats line(s) that do not parse (a format this version does not read)",)
        assert status.serving_errors == () and status.metrics.loss.last == 1.5


def test_a_nan_or_infinite_counter_is_its_runs_error_and_scan_prints_every_run(tmp_path, capsys):
    """A NaN or +Inf counter on a metrics page once raised out of `scan TREE` (exit 1, no JSON at all)."""
    with MetricsServer() as server:
        nan = server.route("/nan", vllm_counters_page(float("nan"), 300, 84, {"0": 60}))
        inf = server.route("/inf", vllm_counters_page(100, float("inf"), 84, {"0": 60}))
        _run(tmp_path, "a-nan", f'[serving]\nmetrics = "{nan}"\n')
        _run(tmp_path, "b-inf", f'[serving]\nmetrics = "{inf}"\n')
        good = _run(tmp_path, "c-good", '[serving]\nlogs = ["serve.log"]\n')
        (good / "serve.log").write_text(vllm_line(100, [60, 20, 4]) + "\n")
        code, tree = _scan(capsys, tmp_path)
        with pytest.raises(BadInput, match="vllm:spec_decode_num_drafts_total is nan"):
            read_serving(nan)
    assert code in (0, 1)
    runs = {run["name"]: run for run in tree["runs"]}
    assert runs["a-nan"]["serving"]["errors"] == [
        f"{nan}: vllm:spec_decode_num_drafts_total is nan (not a finite count)"
    ]
    assert runs["b-inf"]["serving"]["errors"] == [
        f"{inf}: vllm:spec_decode_num_draft_tokens_total is inf (not a finite count)"
    ]
    assert "acceptance_length" not in runs["a-nan"]["serving"]
    _, alone = _scan(capsys, good)
    assert json.dumps(runs["c-good"], sort_keys=True) == json.dumps(alone["runs"][0], sort_keys=True)
