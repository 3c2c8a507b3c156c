"""A ``metrics.csv`` makes a Lightning run only where Lightning's layout or header says it wrote it.

``metrics.csv`` is a common name: an evaluation's table, a notebook's export. The CSVLogger's own
files (tests/fixtures/trackers/lightning/, written by Lightning's CSVLogger) make runs wherever they
lie; a table of another kind, or a step column alone outside Lightning's ``version_<N>/``, makes
none.
"""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from triage_tui import cli

FIXTURE = Path(__file__).parent / "fixtures" / "trackers" / "lightning" / "tiny-lm-chance" / "version_0" / "metrics.csv"


def _scan(path: Path) -> tuple[int, list[dict], str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["scan", str(path), "--json"])
    assert "Traceback" not in err.getvalue()
    return code, json.loads(out.getvalue())["runs"], err.getvalue()


def test_lightnings_own_metrics_csv_is_a_run_wherever_it_lies(tmp_path):
    """The CSVLogger's file in a directory of any name (``CSVLogger(version="final")``): its header
    (``epoch``, ``step``) is Lightning's."""
    (tmp_path / "final").mkdir()
    shutil.copy2(FIXTURE, tmp_path / "final" / "metrics.csv")
    code, (run,), _err = _scan(tmp_path)
    assert run["name"] == "final" and run["sources"] == ["lightning"] and run["trainer"] == "lightning"
    assert run["metrics"]["loss"]["tag"] == "train/loss" and run["status"] != "ok" and code in (0, 1)


def test_a_metrics_csv_of_another_kind_makes_no_run(tmp_path):
    """An evaluation's table and a step column alone in a plain directory: nothing found, exit 2."""
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "metrics.csv").write_text("model,accuracy,f1\nllama,0.91,0.88\nqwen,0.93,0.90\n")
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "metrics.csv").write_text("step,loss\n1,10.37\n2,10.36\n")
    code, runs, err = _scan(tmp_path)
    assert runs == [] and code == 2 and "no run here" in err


def test_a_version_directory_is_lightnings_whatever_its_header(tmp_path):
    """``version_<N>/``: CSVLogger's layout, a run before ``epoch`` is logged or with its header damaged."""
    version = tmp_path / "tiny" / "version_3"
    version.mkdir(parents=True)
    (version / "metrics.csv").write_text("step,train_loss\n0,10.37\n1,10.37\n")
    _code, (run,), _err = _scan(tmp_path)
    assert run["name"] == "tiny/version_3" and run["sources"] == ["lightning"]
    assert run["metrics"]["loss"]["count"] == 2
