"""A saved /metrics page named in triage.toml ([serving] metrics = "saved.txt"), through every entry point.

`check RUN` read it; `scan` and the TUI's watcher must show the same evidence, and a page that is not
one (or holds counters that cannot be) must be that run's error only, never the end of the scan.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders.check_run import write_events
from builders.serving import sglang_metrics, vllm_counters_page, vllm_metrics
from triage_tui import cli
from triage_tui.core.watch.watcher import Watcher

# The keys `check --json` and `scan --json` both give for a run's serving evidence.
EVIDENCE_KEYS = ("engine", "source", "acceptance_length", "per_position", "drafts", "accepted", "convention", "notes")


def _run(root: Path, name: str, page: bytes, *, named: str = "saved.txt") -> Path:
    run = root / name
    write_events(run / "runs", [2.0, 1.5, 1.2], [0.5, 0.6, 0.65])
    (run / "saved.txt").write_bytes(page)
    (run / "triage.toml").write_text(f'[run]\nvocab_size = 32000\n[serving]\nmetrics = "{named}"\n')
    return run


def _cli(capsys, *argv: str) -> tuple[int, dict]:
    code = cli.main(list(argv))
    return code, json.loads(capsys.readouterr().out)


def _evidence(document: dict) -> dict:
    return {key: document[key] for key in EVIDENCE_KEYS}


@pytest.mark.parametrize(
    ("page", "length", "drafts", "accepted"),
    [
        (vllm_metrics(400, [300, 180, 90]), 1 + 570 / 400, 400, 570),
        (sglang_metrics([2.5, 2.7]), 2.6, None, None),
    ],
    ids=["vllm", "sglang"],
)
def test_scan_and_the_watcher_show_a_saved_page_as_check_does(tmp_path, capsys, page, length, drafts, accepted):
    run = _run(tmp_path, "run", page)
    saved = str(run / "saved.txt")
    _, checked = _cli(capsys, "check", str(run), "--json", "--device", "cpu")
    expected = _evidence(checked["serving"])
    assert expected["source"] == saved
    assert expected["acceptance_length"] == pytest.approx(length)
    assert (expected["drafts"], expected["accepted"]) == (drafts, accepted)

    _, scanned = _cli(capsys, "scan", str(tmp_path), "--json", "--poll")
    (status,) = scanned["runs"]
    assert status["serving"]["errors"] == []
    assert _evidence(status["serving"]) == expected

    watcher = Watcher([tmp_path], use_watchdog=False, strict=False, clock=lambda: 1000.0)
    (watched,) = watcher.poll_once()
    assert watched.serving_errors == () and watched.serving is not None
    assert _evidence(watched.serving.to_json(with_samples=False)) == expected


@pytest.mark.parametrize(
    ("page", "says"),
    [
        # What a proxy answers in the page's place, or an error body saved by curl: first bytes
        # that would make the file a log or a JSON-lines source were it not named as a page.
        (b"<html><body>502 Bad Gateway</body></html>\n", "not Prometheus text (line 1 does not parse)"),
        (b'{"object": "error", "message": "Not Found"}\n', "not Prometheus text (line 1 does not parse)"),
        (vllm_counters_page(float("nan"), 300, 84, {"0": 60}), "vllm:spec_decode_num_drafts_total is nan"),
        (vllm_counters_page(100, 300, -4, {"0": 60}), "vllm:spec_decode_num_accepted_tokens_total is -4"),
        (vllm_counters_page(100, 300, 400, {"0": 60}), "accepted"),
    ],
    ids=["html", "json", "nan", "negative", "accepted-over-drafted"],
)
def test_a_bad_saved_page_is_its_runs_error_and_scan_goes_on(tmp_path, capsys, page, says):
    bad_run = _run(tmp_path, "a-bad", page)
    good = _run(tmp_path, "b-good", vllm_metrics(400, [300, 180, 90]))
    code, scanned = _cli(capsys, "scan", str(tmp_path), "--json", "--poll")
    assert code in (0, 1)
    runs = {run["name"]: run for run in scanned["runs"]}
    bad = runs["a-bad"]["serving"]
    assert "acceptance_length" not in bad
    (error,) = bad["errors"]
    assert error.startswith(str(tmp_path / "a-bad" / "saved.txt") + ": ") and says in error
    assert runs["b-good"]["serving"]["errors"] == []
    assert runs["b-good"]["serving"]["acceptance_length"] == pytest.approx(1 + 570 / 400)
    _, alone = _cli(capsys, "scan", str(good), "--json", "--poll")
    assert json.dumps(runs["b-good"], sort_keys=True) == json.dumps(alone["runs"][0], sort_keys=True)

    watcher = Watcher([tmp_path], use_watchdog=False, strict=False, clock=lambda: 1000.0)
    statuses = {s.info.name: s for s in watcher.poll_once()}
    assert statuses["a-bad"].serving is None
    assert len(statuses["a-bad"].serving_errors) == 1 and says in statuses["a-bad"].serving_errors[0]
    assert statuses["b-good"].serving is not None and statuses["b-good"].serving_errors == ()

    # check reads it once: bad input, one line, exit 2, saying what scan and the watcher say.
    assert cli.main(["check", str(bad_run), "--json", "--device", "cpu"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"triage: {error}\n"
