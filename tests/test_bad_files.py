"""One bad file never stops triage and never ends in a traceback (issue 11 items 3, 4 and 11).

The watch: a run whose triage.toml is not UTF-8, nested too deeply, or names `~nosuchuser/...`
gets an `unreadable_file` warning naming the file; the other runs go on updating. The commands:
the same files, a path given as `~nosuchuser`, a symlink loop, a directory or a training_state.pt
that cannot be read (permission taken for real, the command run as `nobody`) are one line on
stderr naming the file and exit status 2, or a note when the file was optional.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from builders.tensorboard import write_scalars
from triage_tui.core.watch.watcher import Watcher

ROOT = Path(__file__).resolve().parents[1]
BAD_MANIFESTS = {
    "not-utf8": (b"[run]\nvocab_size = 32000  # \xff\xfe\n", "not valid TOML: not UTF-8 text"),
    "deep": (b"[run]\nloss_tags = " + b"[" * 50_000 + b"]" * 50_000 + b"\n", "not valid TOML: nested too deeply"),
    "tilde": (b'[run]\ncheckpoint = "~nosuchuser/drafter"\n', "~nosuchuser/drafter: no such user's home directory"),
}


def triage(*args: str | Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "triage_tui", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env=env,
    )


def triage_as_nobody(*args: str | Path) -> subprocess.CompletedProcess:
    """`triage ARGS` in a forked child that dropped root (the venv's python may not be nobody's to run)."""
    from triage_tui import cli

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the child's stdout until it exits
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 - the child's stderr until it exits
            code = cli.main([str(a) for a in args])
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException as err:  # noqa: BLE001 - a traceback is what the test looks for: print it
            import traceback

            traceback.print_exception(err, file=sys.stderr)
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    with open(out_r) as out, open(err_r) as errors:
        stdout, stderr = out.read(), errors.read()
    _, status = os.waitpid(pid, 0)
    return subprocess.CompletedProcess(args, os.waitstatus_to_exitcode(status), stdout, stderr)


def one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


def points(run: Path, steps) -> None:
    write_scalars(run, {"train/ploss_0": [(s, 3.0) for s in steps]}, wall_time=1_700_000_000.0)


def test_a_bad_manifest_is_that_runs_warning_and_the_watch_goes_on(tmp_path):
    points(tmp_path / "good", range(10))
    for name, (content, _) in BAD_MANIFESTS.items():
        points(tmp_path / name, range(10))
        (tmp_path / name / "triage.toml").write_bytes(content)
    (tmp_path / "deep-config").mkdir()
    points(tmp_path / "deep-config", range(10))
    (tmp_path / "deep-config" / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    watcher = Watcher([tmp_path], use_watchdog=False, rescan_interval=0.0)
    statuses = {s.info.name: s for s in watcher.poll_once()}
    assert set(statuses) == {"good", "deep-config", *BAD_MANIFESTS}
    for name, (_, reason) in BAD_MANIFESTS.items():
        (flag,) = [f for f in statuses[name].flags if f.kind == "unreadable_file"]
        assert flag.severity == "warning" and str(tmp_path / name / "triage.toml") in flag.message
        assert reason in flag.message and statuses[name].status == "warning"
    # A config.json nested too deeply only refines the chance line: the default is used, and said.
    assert statuses["deep-config"].vocab_size_source == "default"
    points(tmp_path / "good", range(10, 20))
    points(tmp_path / "tilde", range(10, 20))
    statuses = {s.info.name: s for s in watcher.poll_once()}
    assert statuses["good"].last_step == 19 and statuses["tilde"].last_step == 19


def test_a_reader_that_fails_on_one_run_leaves_the_others_watched(tmp_path, monkeypatch):
    """Whatever a reader raises on one run's files is that run's warning, not the end of the watch."""
    from triage_tui.core.read.sources import RunSources

    points(tmp_path / "a", range(10))
    points(tmp_path / "b", range(10))
    real_poll = RunSources.poll

    def poll(self, **kwargs):
        if any(Path(p).parent.name == "b" for p in self.events.files):
            raise MemoryError("simulated: the reader ran out of memory on b's file")
        return real_poll(self, **kwargs)

    monkeypatch.setattr(RunSources, "poll", poll)
    statuses = {s.info.name: s for s in Watcher([tmp_path], use_watchdog=False).poll_once()}
    assert statuses["a"].last_step == 9 and statuses["a"].status == "ok"
    (flag,) = [f for f in statuses["b"].flags if f.kind == "unreadable_file"]
    assert "MemoryError" in flag.message and str(tmp_path / "b") in flag.message
    # `scan` (strict) too: the failure is b's error, a's report is whole.
    statuses = {s.info.name: s for s in Watcher([tmp_path], use_watchdog=False, strict=True).poll_once()}
    assert statuses["a"].status == "ok" and statuses["b"].status == "error"
    (error,) = statuses["b"].errors
    assert error.source == "triage" and "MemoryError" in error.message


@pytest.mark.parametrize("name", sorted(BAD_MANIFESTS))
def test_scan_and_check_say_what_is_wrong_with_a_manifest_in_one_line(tmp_path, name):
    """`check RUN` is bad input (exit 2, one line); `scan` lists the run with the error (exit 1)."""
    content, reason = BAD_MANIFESTS[name]
    points(tmp_path / name, range(10))
    manifest = tmp_path / name / "triage.toml"
    manifest.write_bytes(content)
    line = one_line(triage("check", tmp_path / name))
    assert line.startswith(f"triage: {manifest}: ") and reason in line
    result = triage("scan", "--json", tmp_path / name)
    assert result.returncode == 1 and result.stderr == ""
    (run,) = json.loads(result.stdout)["runs"]
    (error,) = run["errors"]
    assert error["source"] == "manifest" and error["path"] == str(manifest) and reason in error["message"]


def test_paths_that_name_no_user_or_loop_are_one_line(tmp_path):
    line = one_line(triage("scan", "~nosuchuser/runs"))
    assert line == "triage: ~nosuchuser/runs: no such user's home directory (~user)\n"
    one_line(triage("check", "~nosuchuser/runs"))
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for command in ("scan", "check"):
        line = one_line(triage(command, tmp_path / "a"))
        assert "symlink loop" in line and "no such" not in line


def specforge_output(run: Path, args: argparse.Namespace) -> Path:
    """SpecForge's layout: runs/ of event files beside epoch_*_step_* dirs with weights and training_state.pt."""
    points(run / "runs", range(10))
    saved = run / "epoch_0_step_10"
    saved.mkdir(parents=True)
    save_file({"fc.weight": torch.zeros(2, 2)}, str(saved / "model.safetensors"))
    torch.save({"epoch": 0, "global_step": 10, "args": args}, saved / "training_state.pt")
    return saved / "training_state.pt"


def test_training_state_args_naming_no_user_are_a_note(tmp_path):
    from triage_tui.core.diagnose.check_inputs import resolve_run

    args = argparse.Namespace(ckpt_dir="~nosuchuser/k2", target_model_path="~nosuchuser/t", cache_dir="~nosuchuser/c")
    specforge_output(tmp_path / "out", args)
    inputs = resolve_run(tmp_path / "out").inputs
    assert inputs.run == tmp_path / "out" and inputs.target is None
    for key in ("ckpt_dir", "target_model_path", "cache_dir"):
        assert f"training_state.pt args.{key} = '~nosuchuser/" in " ".join(inputs.notes)
    assert "no such user's home directory; ignored" in " ".join(inputs.notes)


@pytest.fixture
def nobody_tree():
    """A tree `nobody` can read, in /tmp (pytest's own tmp dirs are root's, mode 0700)."""
    if os.geteuid() != 0:
        pytest.skip("dropping to nobody needs root")
    base = Path(tempfile.mkdtemp(prefix="triage-perm-", dir="/tmp"))
    base.chmod(0o755)
    yield base
    for path in [base, *base.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    shutil.rmtree(base)


def _readable_by_all(base: Path) -> None:
    for path in base.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def test_untraversable_root_and_unreadable_training_state_as_nobody(nobody_tree):
    """The kernel's own EACCES, the command run as `nobody`: one line, exit 2, or a note."""
    closed = nobody_tree / "closed"
    points(closed / "run", range(10))
    run = nobody_tree / "out"
    state = specforge_output(run, argparse.Namespace(target_model_path="/nowhere"))
    _readable_by_all(nobody_tree)
    closed.chmod(0o000)
    state.chmod(0o000)
    line = one_line(triage_as_nobody("scan", closed))
    assert line == f"triage: {closed}: cannot list it: Permission denied\n"
    result = triage_as_nobody("check", run, "--json")
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode == 2:
        assert result.stderr.count("\n") == 1
    else:
        assert f"training_state.pt not used: {state}: cannot read it: Permission denied" in result.stdout


def test_symlinks_are_followed_only_within_the_watched_paths(tmp_path):
    """A link to / or /proc walked the whole machine, listed runs outside the tree, and a malformed
    triage.toml in some process's working directory (/proc/<pid>/cwd) made `scan` exit 2."""
    from triage_tui.core.read.runs.discover import discover_runs

    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    points(root / "run", range(10))
    points(elsewhere / "other", range(10))
    (elsewhere / "other" / "triage.toml").write_bytes(BAD_MANIFESTS["not-utf8"][0])
    (root / "slash").symlink_to("/")
    (root / "proc").symlink_to("/proc")
    (root / "out").symlink_to(elsewhere)
    (root / "again").symlink_to(root / "run")  # within the tree: followed (and the run is listed once)
    result = triage("scan", root)
    assert result.returncode == 0, result.stderr
    assert [line.split()[1] for line in result.stdout.splitlines()] == ["run"]
    assert result.stderr == (
        f"triage scan: not following 3 symlink(s) to directories outside the given paths: "
        f"{root / 'out'} -> {elsewhere}, {root / 'proc'} -> /proc, {root / 'slash'} -> /\n"
    )
    document = json.loads(triage("scan", "--json", root).stdout)
    assert document["skipped_links"] == [
        {"link": str(root / name), "target": target}
        for name, target in (("out", str(elsewhere)), ("proc", "/proc"), ("slash", "/"))
    ]
    # Two watched paths: a link from one into the other is followed.
    names = {info.path for info in discover_runs([root], watched=[elsewhere], strict=False)}
    assert names == {root / "run", root / "out" / "other"} or names == {root / "run", elsewhere / "other"}


def _failing_reads(monkeypatch, bad: Path, error: BaseException) -> None:
    """The reader's one read seam (fileio.read_into) fails for one file, as a failing disk does."""
    from triage_tui.core import fileio

    real = fileio.read_into

    def read_into(handle, view):
        if os.path.samestat(os.fstat(handle.fileno()), os.stat(bad)):
            raise error
        return real(handle, view)

    monkeypatch.setattr(fileio, "read_into", read_into)


def test_an_io_error_in_an_event_file_names_the_file_and_the_other_runs_go_on(tmp_path, monkeypatch, capsys):
    """`OSError: [Errno 5] Input/output error` was said of the run (or of nothing); it is the file."""
    import errno

    from triage_tui.cli import main

    write_scalars(tmp_path / "good", {"train/ploss_0": [(s, 2.0) for s in range(10)]})
    bad_run = tmp_path / "bad"
    write_scalars(bad_run, {"train/ploss_0": [(s, 2.0) for s in range(10)]})
    (bad_file,) = bad_run.glob("*tfevents*")
    _failing_reads(monkeypatch, bad_file, OSError(errno.EIO, "Input/output error"))
    assert main(["scan", "--json", str(tmp_path)]) == 1  # the bad run's error
    runs = {run["name"]: run for run in json.loads(capsys.readouterr().out)["runs"]}
    assert runs["good"]["errors"] == []
    assert runs["bad"]["errors"] == [
        {"source": "tensorboard", "path": str(bad_file), "message": "cannot read it: Input/output error"}
    ]
    # Ten points each: both are inside the warm-up (its info flag), which is not the subject here.
    assert runs["good"]["last_step"] == 9 and [f["kind"] for f in runs["good"]["flags"]] == ["warming_up"]
    (flag,) = [f for f in runs["bad"]["flags"] if f["kind"] != "warming_up"]
    assert (flag["kind"], flag["message"]) == ("unreadable_file", f"{bad_file}: cannot read it: Input/output error")
    assert main(["scalars", str(bad_run)]) == 0
    assert f"triage scalars: {bad_file}: cannot read it: Input/output error" in capsys.readouterr().err


def test_an_unexpected_reader_error_in_scan_is_the_runs_error_naming_the_file(tmp_path, monkeypatch, capsys):
    from triage_tui.cli import main

    write_scalars(tmp_path / "run", {"train/ploss_0": [(s, 2.0) for s in range(10)]})
    (bad_file,) = (tmp_path / "run").glob("*tfevents*")
    _failing_reads(monkeypatch, bad_file, ValueError("a reader bug"))
    assert main(["scan", "--json", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.err == ""
    (run,) = json.loads(captured.out)["runs"]
    assert run["status"] == "error" and run["errors"] == [
        {"source": "tensorboard", "path": str(bad_file), "message": "cannot read it: ValueError: a reader bug"}
    ]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "not valid JSON: Expecting value: line 1 column 1 (char 0); the chance line does not use it"),
        (b"[" * 100_000, "not valid JSON: nested too deeply; the chance line does not use it"),
        (b'{"draft_vocab_size": "\xff"}', "not valid JSON: not UTF-8 text (byte 22); the chance line does not use it"),
        (b"[1, 2]", "a JSON list, not an object; the chance line does not use it"),
        (b'{"draft_vocab_size": "32000"}', "draft_vocab_size is '32000', not an integer >= 2; ignored"),
        (b'{"draft_vocab_size": 1e400}', "draft_vocab_size is inf, not an integer >= 2; ignored"),
    ],
    ids=["empty", "deep", "not-utf8", "array", "string-size", "inf-size"],
)
def test_a_config_json_the_chance_line_cannot_use_is_said(tmp_path, content, why):
    """A broken config.json fell back to ln 32000 in silence: a chance line nobody could question."""
    write_scalars(tmp_path / "run", {"train/ploss_0": [(s, 2.0) for s in range(10)]})
    (tmp_path / "run" / "config.json").write_bytes(content)
    result = triage("scan", "--json", tmp_path)
    assert result.returncode == 1, result.stderr  # an error of the run (the fault boundary)
    (run,) = json.loads(result.stdout)["runs"]
    assert run["vocab_size_source"] == "default"
    config = str(tmp_path / "run" / "config.json")
    assert run["errors"] == [{"source": "config", "path": config, "message": why}]
    # Ten points: the run is inside the warm-up too (its info flag); the config.json line is the subject.
    assert [(f["kind"], f["message"]) for f in run["flags"] if f["kind"] not in ("stalled", "warming_up")] == [
        ("unreadable_file", f"{tmp_path / 'run' / 'config.json'}: {why}")
    ]


def test_an_event_file_that_cannot_be_opened_is_named(tmp_path, monkeypatch, capsys):
    """Permission denied on an event file was only counted: the run showed nothing, or scalars
    said "1 event file(s) could not be read" without naming it."""
    from triage_tui.cli import main
    from triage_tui.core import fileio

    write_scalars(tmp_path / "run", {"train/ploss_0": [(s, 2.0) for s in range(10)]})
    (bad_file,) = (tmp_path / "run").glob("*tfevents*")
    real = fileio.open_polled

    def open_polled(path, buffering=-1):
        if Path(path) == bad_file:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, buffering)

    monkeypatch.setattr(fileio, "open_polled", open_polled)
    assert main(["scan", "--json", str(tmp_path)]) == 1
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert ("unreadable_file", f"{bad_file}: cannot open it: Permission denied") in [
        (f["kind"], f["message"]) for f in run["flags"]
    ]


def test_a_training_state_the_chance_line_cannot_use_is_said(tmp_path):
    """A run without config.json takes its vocab from training_state.pt; a broken one fell back
    to ln 32000 in silence."""
    write_scalars(tmp_path / "run", {"train/ploss_0": [(s, 2.0) for s in range(10)]})
    state = tmp_path / "run" / "k2-step100" / "training_state.pt"
    state.parent.mkdir()
    state.write_bytes(b"hello")
    (run,) = json.loads(triage("scan", "--json", tmp_path).stdout)["runs"]
    assert run["vocab_size_source"] == "default"
    assert (
        "unreadable_file",
        f"{state}: not a torch.save file: neither a zip archive nor a pickle (it starts b'hell'); "
        "the chance line does not use it",
    ) in [(f["kind"], f["message"]) for f in run["flags"]]


@pytest.mark.parametrize("name", ["vocab_mapping.pt", "d2t.npy", "dir"])
def test_a_fifo_given_as_the_mapping_is_refused_not_waited_on(tmp_path, name):
    """`--mapping` naming a FIFO (or a directory whose d2t.npy is one) hung check and remap
    forever: opening a FIFO waits for a writer. One line, exit 2, at once."""
    write_scalars(tmp_path / "run", {"train/ploss_0": [(s, 2.0) for s in range(10)]})
    fifo = tmp_path / "m" / ("d2t.npy" if name == "dir" else name)
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    given = fifo.parent if name == "dir" else fifo
    why = f"{fifo}: not a regular file (a FIFO, a device, ...): not read"
    checked = subprocess.run(
        [sys.executable, "-m", "triage_tui", "check", "--json", str(tmp_path / "run"), "--mapping", str(given)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert checked.returncode == 2
    assert json.loads(checked.stdout)["checks"]["verifier_mask"]["summary"] == why
    from builders.tensorboard import write_drafter_checkpoint

    write_drafter_checkpoint(tmp_path / "ck", draft_vocab=32)
    remap = triage("remap", tmp_path / "ck", "--mapping", given, "--out", tmp_path / "out")
    assert (remap.returncode, remap.stderr) == (2, f"triage: {why}\n")
    assert not (tmp_path / "out").exists()


def test_the_tui_with_stdout_not_a_terminal_refuses_in_one_line(tmp_path):
    # `triage out/ > report.txt`, `triage | less`, a CI step: Textual would draw into the pipe forever.
    (tmp_path / "out").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "triage_tui", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("triage: the TUI needs a terminal and stdout is not one") and "triage scan" in line
