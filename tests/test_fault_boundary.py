"""The fault boundary (docs/contracts.md): a bad file or source affects only its own run.

That run stays listed with ``errors`` naming the file and what was wrong (status "error" when
nothing of it could be read); every other run's report is exactly what it is without the bad run;
``scan`` exits 2 only for a bad command line or a PATH that does not exist, else 1 for a critical
run or a run with errors, and always prints its JSON.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from builders.check_run import write_events
from triage_tui import cli
from triage_tui.core.read.events.reader import RunEvents
from triage_tui.core.watch.watcher import Watcher


def _scan(*paths: Path, json_out: bool = True) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["scan", *map(str, paths), "--poll", *(["--json"] if json_out else [])])
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue()


def _runs(document: str) -> dict[str, dict]:
    return {run["name"]: run for run in json.loads(document)["runs"]}


def _healthy(run: Path) -> Path:
    write_events(run, [2.0, 1.5, 1.2], [0.5, 0.6, 0.7])
    return run


def _alone(run: Path) -> dict:
    """The run's report from a scan of it alone: what a tree's scan must give it too."""
    code, document = _scan(run)
    (report,) = json.loads(document)["runs"]
    assert code == 0 and report["errors"] == []
    return report


def _non_utf8_manifest(run: Path) -> str:
    _healthy(run)
    (run / "triage.toml").write_bytes(b"[run]\nvocab_size = 32000\nname = '\xff\xfe'\n")
    return "manifest"


def _garbage_config(run: Path) -> str:
    _healthy(run)
    (run / "config.json").write_bytes(b'{"draft_vocab_size": \xff')
    return "config"


@pytest.mark.parametrize("breaks", [_non_utf8_manifest, _garbage_config])
def test_a_broken_run_leaves_every_other_run_exactly_as_it_is(tmp_path, breaks):
    good = _healthy(tmp_path / "tree" / "good")
    expected = _alone(good)
    source = breaks(tmp_path / "tree" / "bad")
    code, document = _scan(tmp_path / "tree")
    runs = _runs(document)
    assert code == 1 and set(runs) == {"bad", "good"}
    assert runs["good"] == expected
    bad = runs["bad"]
    assert [error["source"] for error in bad["errors"]] == [source]
    assert all(error["path"].startswith(str(tmp_path / "tree" / "bad")) and error["message"] for error in bad["errors"])
    assert bad["status"] == "warning" and bad["metrics"]["loss"]["count"] == 3  # its event file is still read


def test_the_text_report_names_the_error_on_its_run_line(tmp_path):
    _healthy(tmp_path / "good")
    _non_utf8_manifest(tmp_path / "bad")
    code, text = _scan(tmp_path, json_out=False)
    lines = {line.split()[1]: line for line in text.splitlines()}
    assert code == 1 and set(lines) == {"bad", "good"}
    assert f"error: {tmp_path / 'bad' / 'triage.toml'}: " in lines["bad"]
    assert "error" not in lines["good"]


def test_exit_status_is_0_for_healthy_runs_and_2_only_for_a_path_that_is_not_there(tmp_path):
    _healthy(tmp_path / "a")
    assert _scan(tmp_path)[0] == 0
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert cli.main(["scan", str(tmp_path / "missing"), "--json"]) == 2
    assert out.getvalue() == "" and err.getvalue().count("\n") == 1


def test_a_reader_that_fails_outright_is_an_error_of_its_run_in_scan_and_in_the_tuis_watcher(tmp_path, monkeypatch):
    """A reader bug (not a BadInput) on one run's files: that run is listed with the failure, the
    others are read as usual, and the watcher the TUI runs keeps going."""
    good = _healthy(tmp_path / "good")
    expected = _alone(good)
    _healthy(tmp_path / "bad")
    poll = RunEvents.poll

    def failing_poll(self, **kwargs):
        if any("bad" in path.parts for path in self._files):
            raise RecursionError("maximum recursion depth exceeded")
        return poll(self, **kwargs)

    monkeypatch.setattr(RunEvents, "poll", failing_poll)
    code, document = _scan(tmp_path)
    runs = _runs(document)
    assert code == 1 and runs["good"] == expected
    (error,) = runs["bad"]["errors"]
    assert error == {
        "source": "tensorboard",
        "path": str(tmp_path / "bad"),
        "message": "cannot read its scalars: RecursionError: maximum recursion depth exceeded",
    }
    assert runs["bad"]["status"] == "error"

    statuses = {s.info.name: s for s in Watcher([tmp_path], use_watchdog=False).poll_once()}
    assert statuses["bad"].status == "error" and statuses["good"].status == "ok"
    assert statuses["good"].to_json() == expected


def test_a_serving_source_that_fails_outright_is_an_error_of_that_source_as_a_scalar_readers_is(tmp_path, monkeypatch):
    """The one failure convention: a serving source's bug, like a scalar reader's, is caught where the
    run's sources are pooled and said once as an error of that source; the run's curves, its other
    serving source and every other run are read as usual. The exception's text is never echoed (it
    may be the file's)."""
    from builders.serving import vllm_line
    from triage_tui.core.watch.serving.logs import ServingLog

    good = _healthy(tmp_path / "good")
    expected = _alone(good)
    run = _healthy(tmp_path / "served")
    (run / "broken.log").write_text(vllm_line(100, [60, 20, 4]) + "\n")
    (run / "fine.log").write_text(vllm_line(100, [60, 20, 4]) + "\n")
    (run / "triage.toml").write_text('[serving]\nlogs = ["broken.log", "fine.log"]\n')
    poll = ServingLog.poll

    def failing_poll(self):
        if self.location.endswith("broken.log"):
            raise ValueError("text of the file")
        return poll(self)

    monkeypatch.setattr(ServingLog, "poll", failing_poll)
    code, document = _scan(tmp_path)
    runs = _runs(document)
    assert code == 1 and runs["good"] == expected
    served = runs["served"]
    assert served["errors"] == [
        {"source": "serving", "path": str(run / "broken.log"), "message": "cannot read it: ValueError"}
    ]
    assert served["serving"]["errors"] == [f"{run / 'broken.log'}: cannot read it: ValueError"]
    assert served["serving"]["acceptance_length"] == pytest.approx(1.84)  # fine.log's
    assert served["metrics"]["loss"]["last"] == pytest.approx(1.2) and "source_errors" not in served


def test_an_update_that_fails_outright_is_listed_as_an_error(tmp_path, monkeypatch):
    """Past the readers (a bug deriving the flags): the run is listed, status "error", the failure said."""
    good = _healthy(tmp_path / "good")
    expected = _alone(good)
    _healthy(tmp_path / "bad")
    from triage_tui.core.watch.watched_run import WatchedRun

    recompute = WatchedRun.recompute

    def failing_recompute(self, scalars, vocab_flag):
        if self.info.name == "bad":
            raise ZeroDivisionError("float division by zero")
        return recompute(self, scalars, vocab_flag)

    monkeypatch.setattr(WatchedRun, "recompute", failing_recompute)
    code, document = _scan(tmp_path)
    runs = _runs(document)
    assert code == 1 and runs["good"] == expected
    assert runs["bad"]["status"] == "error"
    assert runs["bad"]["errors"] == [
        {
            "source": "triage",
            "path": str(tmp_path / "bad"),
            "message": "cannot update this run: ZeroDivisionError: float division by zero",
        }
    ]
