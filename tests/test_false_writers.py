"""The writer is the process that writes: real processes beside a run that are not its writer (triage's
own ancestors, wrappers, shells, editors, a process naming the runs/ directory above, one that only
stands in the run's directory, a container's pid) never make a finished run stalled, and real writers
are still found (a tensorboardX child holding its event file open, under a wrapper). The clock is the
test's where ``run_state`` is called; the end-to-end cases run ``triage scan --json`` itself."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from builders.children import IDLE, REPO, SUMMARY_WRITER_LOOP, ended, process_state, start, wait_until
from builders.events import find_event_files
from builders.tensorboard import write_scalars
from triage_tui.core.read.events.reader import RunEvents
from triage_tui.core.watch.process_table import ProcessScanner
from triage_tui.core.watch.run_state import RunState, run_state
from triage_tui.core.watch.signals.stall import Activity
from triage_tui.core.watch.writers import find_writer

FLUSH = 1.0
HOURS_AGO = 3 * 3600.0


def judge(run_dir: Path, *, after: float, roots: tuple[Path, ...] = ()) -> RunState:
    """The run's state ``after`` seconds past its last point, from one fresh /proc scan."""
    files = find_event_files(run_dir)
    events = RunEvents()
    events.set_files(files)
    events.poll()
    activity = Activity.of(events.scalars, "train/ploss_0")
    assert activity.last_wall_time is not None
    table = ProcessScanner().scan(roots or (run_dir,))
    now = activity.last_wall_time + after
    return run_state(run_dir, processes=table, activity=activity, now=now, event_files=files, flush_secs=FLUSH)


def finished_run(run_dir: Path) -> Path:
    """A run whose writer (a SummaryWriter child) exited after logging 20 points three hours ago,
    its event file created a minute before this test's processes start (its name says when:
    events.out.tfevents.<time>.<host>.<pid>.<n>)."""
    points = {"train/ploss_0": [(step, 3.0) for step in range(20)]}
    written = write_scalars(run_dir, points, wall_time=time.time() - HOURS_AGO)
    created = written.name.split(".")[3]
    return written.rename(written.with_name(written.name.replace(f".{created}.", f".{int(created) - 60:010d}.", 1)))


def points(run_dir: Path) -> int:
    files = find_event_files(run_dir)
    if not files:
        return 0
    events = RunEvents()
    events.set_files(files)
    events.poll()
    series = events.scalars.get("train/ploss_0")
    return len(series) if series is not None else 0


def background(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A process with nothing on its standard streams, in a session of its own (``ended_all`` ends
    it with everything it started)."""
    devnull = subprocess.DEVNULL
    return subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=devnull, stdout=devnull, stderr=devnull, start_new_session=True
    )


@contextmanager
def ended_all(child: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """``background``'s child, killed with every process of its session when the block ends: a
    wrapper killed alone leaves what it started running (``time tail -f`` for ever)."""
    with ended(child):
        try:
            yield child
        finally:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # the session's processes are gone already


def scan_json(argv: list[str], run_dir: Path, cwd: Path | None = None) -> tuple[int, dict]:
    """``triage scan --json RUN`` started through ``argv`` (wrappers first): its exit status and the run's object."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [*argv, sys.executable, "-m", "triage_tui", "scan", "--json", str(run_dir)],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env=env,
        timeout=300,
        cwd=cwd,
    )
    (run,) = json.loads(done.stdout)["runs"]
    return done.returncode, run


def test_triage_under_wrappers_is_not_its_runs_writer(tmp_path):
    """`timeout 600 time nice nohup env xargs triage scan --json out/run`: every wrapper names the run
    and waits for triage; none of them writes it. The run ended three hours ago; exit 0, no bell."""
    run_dir = tmp_path / "out" / "run"
    finished_run(run_dir)
    gnu_time = shutil.which("time")  # GNU time is a package of its own: used where installed
    wrappers = ["timeout", "600", *([gnu_time, "-o", os.devnull] if gnu_time else []), "nice", "nohup", "env", "xargs"]
    status, run = scan_json(wrappers, run_dir, cwd=run_dir)  # the wrappers work in the run, too
    assert run["state"] == "ended", run["state_reason"]
    assert run["writer"] is None and status == 0


# A notebook's kernel as ipykernel's kernel spec starts it (`python -m ipykernel_launcher -f
# {connection_file}`): a module of that name whose cell trains (a SummaryWriter, its points three
# hours ago by their wall times, close) and whose next cell runs `!triage scan --json` on the run.
KERNEL_CELLS = """
import os, subprocess, sys, time
from torch.utils.tensorboard import SummaryWriter
run = sys.argv[sys.argv.index("--run") + 1]
writer = SummaryWriter(log_dir=run)
for step in range(20):
    writer.add_scalar("train/ploss_0", 3.0, global_step=step, walltime=time.time() - 3 * 3600 + step)
writer.close()
done = subprocess.run([sys.executable, "-m", "triage_tui", "scan", "--json", run], capture_output=True)
print(done.returncode, flush=True)
sys.stdout.write(done.stdout.decode())
"""


def test_a_notebook_running_triage_on_the_run_it_trained_is_not_its_live_writer(tmp_path):
    """The kernel's pid is in the event file's name and the kernel is alive, but it is triage's
    ancestor, running the cell that started triage: its training cell ended, and so did the run."""
    modules = tmp_path / "kernel-modules"
    modules.mkdir()
    (modules / "ipykernel_launcher.py").write_text(textwrap.dedent(KERNEL_CELLS))
    run_dir = tmp_path / "run"
    kernel = subprocess.Popen(
        [sys.executable, "-m", "ipykernel_launcher", "-f", str(tmp_path / "kernel-1.json"), "--run", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(modules), str(REPO)])},
    )
    out, err = kernel.communicate(timeout=300)
    assert kernel.returncode == 0, err.decode()[-2000:]
    status, document = out.decode().split("\n", 1)
    (run,) = json.loads(document)["runs"]
    (event_file,) = find_event_files(run_dir)
    assert event_file.name.split(".")[-2] == str(kernel.pid)  # the kernel wrote it
    assert run["state"] == "ended" and run["writer"] is None, run["state_reason"]
    assert status == "0"


WAIT_SCRIPT = """\
#!/bin/sh
# waits for a run to finish (as a CI gate's helper does), writing nothing
sleep 600
true
"""


def test_wrappers_shells_editors_and_a_parent_directory_are_not_writers(tmp_path):
    """Real processes that name a run, or the runs/ directory above it, and write nothing of it."""
    runs = tmp_path / "runs"
    run_a, run_b, run_c = runs / "a", runs / "b", runs / "c"
    for run_dir in (run_a, run_b, run_c):
        run_dir.mkdir(parents=True)
        (run_dir / "train.log").write_text("step 1\n")
    script = tmp_path / "wait.sh"
    script.write_text(WAIT_SCRIPT)
    script.chmod(0o755)
    # GNU time, procps' watch and vim are packages of their own: each is started where installed.
    optional = [
        ["time", "tail", "-f", str(run_a / "train.log")],
        ["watch", "-n", "600", "ls", str(run_a)],
        ["vim", "-u", "NONE", "-n", "-es", "-c", "sleep 600", str(run_a / "notes.txt")],
    ]
    wrappers = [
        background(["timeout", "600", "tail", "-f", str(run_a / "train.log")]),
        *(background([found, *argv[1:]]) for argv in optional if (found := shutil.which(argv[0]))),
        background(["bash", str(script), str(run_a)]),
        background([str(script), str(run_a)]),  # by its shebang: comm "wait.sh"
        background(["sleep", "600"], cwd=tmp_path),  # beside the runs, above them
    ]
    idle_above = start(IDLE, "--logdir", str(runs))  # names runs/, the directory above every run
    bystanders = [*wrappers, idle_above]
    writer_of_c = start(IDLE, "--output-dir", str(run_c))  # a trainer's command line: the run itself
    try:
        wait_until(
            lambda: all(process_state(child.pid) not in (None, "R") for child in bystanders), "the bystanders to settle"
        )
        table = ProcessScanner().scan([tmp_path])
        for run_dir in (run_a, run_b):
            writer, _ = find_writer(run_dir, table)
            assert writer is None, (run_dir.name, writer)
        writer, _ = find_writer(run_c, table)
        assert writer is not None and writer.pid == writer_of_c.pid and writer.evidence == "command line"
    finally:
        for child in wrappers:
            with ended_all(child):
                pass
        for child in [idle_above, writer_of_c]:
            with ended(child):
                pass


def test_a_process_seen_only_by_its_command_line_or_directory_never_stalls_a_run(tmp_path):
    """`sleep 600` started in a finished run's directory, a program whose command line names it: the
    run is live while points arrive and, silent past its limit, unknown (the silence rule): never
    stalled, no bell. The same run with its writer holding a file open is stalled."""
    run_dir = tmp_path / "run"
    finished_run(run_dir)
    with ended_all(background(["sleep", "600"], cwd=run_dir)) as sleeper:
        state = judge(run_dir, after=0.5)
        assert state.state == "live" and state.writer is not None and state.writer.pid == sleeper.pid
        assert state.writer.evidence == "working directory"
        state = judge(run_dir, after=HOURS_AGO)
        assert state.state == "unknown" and state.flag() is None, state
        assert f"pid {sleeper.pid} (sleep)" in state.reason and "the silence alone decides" in state.reason
    (run_dir / "resume.yaml").write_text("resume: true\n")
    with ended(start(IDLE, str(run_dir / "resume.yaml"))) as named:
        state = judge(run_dir, after=HOURS_AGO)
        assert state.state == "unknown" and state.writer is not None and state.writer.pid == named.pid
        assert state.writer.evidence == "command line" and state.flag() is None
    with open(run_dir / "train.log", "a") as log, ended(start(IDLE, stdout=log)) as holder:
        state = judge(run_dir, after=HOURS_AGO, roots=(tmp_path,))
        assert state.state == "stalled" and state.writer is not None and state.writer.pid == holder.pid
        assert state.writer.evidence == "open file"


# tensorboardX's SummaryWriter keeps its event file open for writing and leaves the pid out of the
# file's name: the open file is the evidence. The log directory comes on stdin, not the command line.
TENSORBOARDX_LOOP = """
import sys, time
from tensorboardX import SummaryWriter
writer = SummaryWriter(logdir=sys.stdin.readline().strip(), flush_secs=1)
step = 0
while True:
    writer.add_scalar("train/ploss_0", 10.0 - step * 0.01, global_step=step)
    writer.flush()
    step += 1
    time.sleep(0.02)
"""


def test_a_wrapped_writer_holding_its_event_file_open_is_the_writer(tmp_path):
    """`timeout 600 python train.py > run/train.log`: timeout and its child hold the console log, the
    child the event file too. The child is the writer: live, stalled once stopped past the limit
    (it holds the run's files: strong evidence), ended once killed."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(run_dir / "train.log", "w") as log:
        wrapper = subprocess.Popen(
            ["timeout", "600", sys.executable, "-c", textwrap.dedent(TENSORBOARDX_LOOP)],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.DEVNULL,
            cwd=tmp_path,
        )
    with ended(wrapper):
        assert wrapper.stdin is not None
        wrapper.stdin.write(f"{run_dir}\n".encode())
        wrapper.stdin.flush()
        wait_until(lambda: points(run_dir) >= 5, "tensorboardX's first points")
        (child,) = (int(pid) for pid in Path(f"/proc/{wrapper.pid}/task/{wrapper.pid}/children").read_text().split())
        state = judge(run_dir, after=0.5)
        assert state.state == "live" and state.writer is not None and state.writer.pid == child, state
        assert state.writer.evidence == "open file"
        os.kill(child, signal.SIGSTOP)
        wait_until(lambda: process_state(child) == "T", "the kernel to stop the writer")
        state = judge(run_dir, after=HOURS_AGO)
        assert state.state == "stalled" and state.writer is not None and state.writer.pid == child, state
        os.kill(child, signal.SIGKILL)
        wait_until(lambda: process_state(child) in (None, "Z"), "the writer to die")
        wrapper.wait(timeout=60)
        state = judge(run_dir, after=HOURS_AGO)
        assert state.state == "ended" and state.writer is None, state


def _unshare_refused() -> str | None:
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"unshare --pid refused here: {probe.stderr.decode(errors='replace').strip()[:200]}"
    return None


def test_an_event_file_written_in_another_pid_namespace_names_no_writer_here(tmp_path):
    """A trainer in a container (its own PID namespace, this host's name) is pid 1 there, and names
    pid 1 in its event file; this node's init is not its writer. A pid of the container that is
    also a live process here (a bystander started before it) is not taken for the writer either."""
    refused = _unshare_refused()
    if refused is not None:
        pytest.skip(refused)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    loop = textwrap.dedent(SUMMARY_WRITER_LOOP)
    first = tmp_path / "first"
    container = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
    with ended_all(background([*container, sys.executable, "-c", loop, str(first)], env=env)) as trainer:
        wait_until(lambda: points(first) >= 5, "the contained trainer's first points")
        (inside,) = (int(pid) for pid in Path(f"/proc/{trainer.pid}/task/{trainer.pid}/children").read_text().split())
        (event_file,) = find_event_files(first)
        assert event_file.name.split(".")[-2] == "1"  # pid 1: the first process of its namespace
        state = judge(first, after=0.5)
        assert state.state == "live" and state.writer is not None and state.writer.pid != 1, state
        assert state.writer.pid == inside and state.writer.evidence == "command line"  # it names its log directory
    wait_until(lambda: process_state(inside) is None, "the container's trainer to end with it")
    state = judge(first, after=HOURS_AGO)
    assert state.state == "ended" and state.writer is None, state

    second = tmp_path / "second"
    with ended(start(IDLE)) as bystander:
        # The container's next pid made the bystander's: its trainer names a pid alive here.
        shell = f'echo {bystander.pid - 1} > /proc/sys/kernel/ns_last_pid; "$0" -c "$1" "$2" & wait'
        argv = [*container, "sh", "-c", shell, sys.executable, loop, str(second)]
        contained = background(argv, env=env)
        with ended_all(contained):
            wait_until(lambda: points(second) >= 5, "the second contained trainer's first points")
            (event_file,) = find_event_files(second)
            assert event_file.name.split(".")[-2] == str(bystander.pid)
            state = judge(second, after=HOURS_AGO)
            assert state.writer is not None and state.writer.pid != bystander.pid, state
            assert state.state == "unknown" and state.flag() is None, state
