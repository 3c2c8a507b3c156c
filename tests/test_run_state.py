"""Run state from real processes: a SummaryWriter child alive (live), stopped with SIGSTOP past the
threshold (stalled), gone (ended), crashed with a traceback in its console log (crashed), and a W&B
run's exit record. The clock is the test's: ``now`` is passed in, nothing waits on time."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from builders.children import IDLE, REPO, SUMMARY_WRITER_LOOP, ended, process_state, start, wait_until
from builders.events import find_event_files
from builders.tensorboard import write_scalars
from triage_tui.core.read.events.reader import RunEvents
from triage_tui.core.watch.process_table import ProcessScanner, ProcessTable, interactive_interpreter
from triage_tui.core.watch.run_state import console_error, read_console_tail, run_state
from triage_tui.core.watch.signals.stall import Activity
from triage_tui.core.watch.writers import find_writer

FLUSH = 1.0  # the children flush every second: the stall threshold is small


def read(run_dir: Path) -> tuple[RunEvents, list[Path]]:
    files = find_event_files(run_dir)
    events = RunEvents()
    events.set_files(files)
    events.poll()
    return events, files


def points(run_dir: Path) -> int:
    if not find_event_files(run_dir):
        return 0
    series = read(run_dir)[0].scalars.get("train/ploss_0")
    return len(series) if series is not None else 0


def judge(run_dir: Path, *, after: float, **kwargs):
    """The run's state `after` seconds past its last point, from one fresh /proc scan."""
    events, files = read(run_dir)
    activity = Activity.of(events.scalars, "train/ploss_0")
    assert activity.last_wall_time is not None
    table = ProcessScanner().scan([run_dir])
    return (
        run_state(
            run_dir,
            processes=table,
            activity=activity,
            now=activity.last_wall_time + after,
            event_files=files,
            flush_secs=FLUSH,
            **kwargs,
        ),
        activity,
    )


@pytest.fixture
def writing(tmp_path):
    """A SummaryWriter child with 20 points flushed into tmp_path/run."""
    run_dir = tmp_path / "run"
    with ended(start(SUMMARY_WRITER_LOOP, str(run_dir))) as child:
        wait_until(lambda: points(run_dir) >= 20, "the child's first 20 points")
        yield run_dir, child


def test_a_summary_writer_child_is_live_then_stalled_when_stopped_then_ended(writing):
    run_dir, child = writing
    state, _ = judge(run_dir, after=0.5)
    assert state.state == "live", state
    assert state.writer is not None and state.writer.pid == child.pid
    # tensorboard's file stub opens and closes the event file on every write: the evidence is the
    # pid in the file's name, which holds whatever the moment of the scan.
    assert state.writer.evidence == "event file name"
    assert state.flag() is None

    child.send_signal(signal.SIGSTOP)
    wait_until(lambda: process_state(child.pid) == "T", "the kernel to stop the child")
    state, activity = judge(run_dir, after=0.5)
    assert state.state == "live"  # inside the threshold a stopped writer is not yet stalled
    limit = activity.stall_after(FLUSH)
    state, _ = judge(run_dir, after=limit + 1.0)
    assert state.state == "stalled", state
    assert state.writer is not None and state.writer.stopped
    assert "stopped (SIGSTOP" in state.reason and f"pid {child.pid}" in state.reason
    flag = state.flag()
    assert flag is not None and flag.kind == "stalled" and flag.severity == "critical"
    document = state.to_json()
    assert document["state"] == "stalled" and document["crash_line"] is None
    assert document["writer"] == {
        "pid": child.pid,
        "name": Path(f"/proc/{child.pid}/comm").read_text().strip(),
        "evidence": "event file name",
        "detail": state.writer.detail,
    }

    child.send_signal(signal.SIGCONT)
    child.kill()
    child.wait()
    state, _ = judge(run_dir, after=3 * 3600.0)
    assert state.state == "ended", state
    assert state.writer is None and state.flag() is None
    assert state.label(state.last_update + 3 * 3600.0) == "ended 3.0 h ago"


def test_the_pid_in_an_event_file_name_of_another_host_is_not_a_writer_here(tmp_path):
    run_dir = tmp_path / "run"
    with ended(start(SUMMARY_WRITER_LOOP, str(run_dir), "gpu-node-17.cluster")):
        wait_until(lambda: points(run_dir) >= 3, "the child's first points")
        (event_file,) = find_event_files(run_dir)
        assert ".gpu-node-17.cluster." in event_file.name
        # The name's pid is not looked up here: the child is found by its command line instead.
        table = ProcessScanner().scan([run_dir])
        writer, elsewhere = find_writer(run_dir, table, [event_file])
        assert elsewhere
        assert writer is not None and writer.evidence == "command line"
    state, _ = judge(run_dir, after=10.0)
    assert state.state == "unknown" and "another host" in state.reason


def test_a_process_holding_the_console_log_open_for_writing_is_the_writer(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    log = run_dir / "train.log"
    with open(log, "w") as handle, ended(start(IDLE, stdout=handle)) as child:
        table = ProcessScanner().scan([tmp_path])
        writer, _ = find_writer(run_dir, table)
        assert writer is not None and writer.pid == child.pid
        assert writer.evidence == "open file" and writer.detail == "holds train.log open for writing"


def test_a_reader_of_the_console_log_is_not_a_writer(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    log = run_dir / "train.log"
    log.write_text("step 1\n")
    # As `tail -f` or a notebook holds it: open for reading, the path not on its command line.
    reader = start("import sys; f = open(sys.stdin.readline().strip()); sys.stdin.read()")
    with ended(reader):
        assert reader.stdin is not None
        reader.stdin.write(f"{log}\n".encode())
        reader.stdin.flush()
        wait_until(lambda: log in _open_files(reader.pid), "the reader to open the log")
        writer, _ = find_writer(run_dir, ProcessScanner().scan([tmp_path]))
        assert writer is None


def _open_files(pid: int) -> list[Path]:
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found.append(Path(fd.readlink()))
        except OSError:
            continue
    return found


def test_command_line_and_working_directory_evidence(tmp_path):
    out = tmp_path / "out"
    run_dir = out / "runs"  # SpecForge: the event files in <output-dir>/runs
    run_dir.mkdir(parents=True)
    with ended(start(IDLE, "--output-dir", "out", cwd=tmp_path)) as child:
        writer, _ = find_writer(run_dir, ProcessScanner().scan([tmp_path]))
        assert writer is not None and writer.pid == child.pid
        assert writer.evidence == "command line" and writer.detail == "its command line names out"
    with ended(start(IDLE, cwd=out)) as child:
        writer, _ = find_writer(run_dir, ProcessScanner().scan([tmp_path]))
        assert writer is not None and writer.pid == child.pid and writer.evidence == "working directory"
    with ended(start(IDLE, cwd=tmp_path)):  # above the output directory: not the run's
        writer, _ = find_writer(run_dir, ProcessScanner().scan([tmp_path]))
        assert writer is None


# A Jupyter kernel as ipykernel's kernel spec starts it (`python -m ipykernel_launcher -f
# {connection_file}`): here a module of that name that runs a notebook's training cell (a
# SummaryWriter, its points, close) and then waits, as a kernel does, for the next cell (stdin).
KERNEL_CELL = """
import sys
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter(log_dir=sys.argv[sys.argv.index("--run") + 1])
for step in range(20):
    writer.add_scalar("train/ploss_0", 10.0 - step * 0.1, global_step=step)
writer.close()
sys.stdin.read()
"""


def start_kernel(tmp_path: Path, *args: str, cwd: Path | None = None) -> subprocess.Popen:
    modules = tmp_path / "kernel-modules"
    modules.mkdir(exist_ok=True)
    (modules / "ipykernel_launcher.py").write_text(textwrap.dedent(KERNEL_CELL))
    connection = tmp_path / "kernel-4f1c.json"
    return subprocess.Popen(
        [sys.executable, "-m", "ipykernel_launcher", "-f", str(connection), *args],
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(modules), str(REPO)])},
    )


def test_a_process_working_beside_a_finished_run_is_not_its_writer(tmp_path):
    """An editor's helper or a kernel that sits in the project for days is not the writer of the runs
    under it: the event file names its writer, which has exited. The run ended; nothing stalled."""
    project = tmp_path / "project"
    run_dir = project / "runs" / "exp1"  # HF Trainer: <output_dir>/runs/<date_host>
    project.mkdir()
    with ended(start(IDLE, cwd=project)) as beside:
        write_scalars(run_dir, {"train/ploss_0": [(step, 3.0) for step in range(20)]})
        with ended(start_kernel(tmp_path, "--run", str(tmp_path / "elsewhere"), cwd=project)) as kernel:
            wait_until(lambda: points(tmp_path / "elsewhere") >= 20, "the kernel's cell")
            state, _ = judge(run_dir, after=3 * 3600.0)
            assert state.state == "ended", state
            assert state.writer is None and state.flag() is None
            assert beside.poll() is None and kernel.poll() is None  # both alive all along


def test_a_trainer_resuming_before_its_first_event_file_is_its_writer(tmp_path):
    """A process started since the newest event file was created, its command line naming the
    output directory, may be the trainer resuming (loading weights, no event file yet): live."""
    out = tmp_path / "out"
    written = write_scalars(out / "runs", {"train/ploss_0": [(step, 3.0) for step in range(20)]})
    # The file was created a minute ago (tensorboard's name: events.out.tfevents.<time>.<host>.<pid>.<n>).
    created = written.name.split(".")[3]
    written.rename(written.with_name(written.name.replace(f".{created}.", f".{int(created) - 60:010d}.", 1)))
    with ended(start(IDLE, "--output-dir", "out", cwd=tmp_path)) as trainer:
        state, _ = judge(out / "runs", after=1.0)
        assert state.state == "live", state
        assert state.writer is not None and state.writer.pid == trainer.pid and state.writer.evidence == "command line"


def test_a_notebook_kernels_writer_is_silent_without_being_stalled(tmp_path):
    """A notebook's SummaryWriter: the kernel is the pid in the event file's name, and lives on after
    its training cell ended. Silent, the run is unknown (the silence rule: no critical flag, no
    bell); a stopped kernel is still stalled."""
    run_dir = tmp_path / "run"
    with ended(start_kernel(tmp_path, "--run", str(run_dir))) as kernel:
        wait_until(lambda: points(run_dir) >= 20, "the kernel's training cell")
        state, _ = judge(run_dir, after=0.5)
        assert state.state == "live" and state.writer is not None and state.writer.pid == kernel.pid
        assert state.writer.interactive == "a Jupyter kernel"
        state, activity = judge(run_dir, after=3600.0)
        assert state.state == "unknown", state
        assert f"writer pid {kernel.pid}" in state.reason and "is a Jupyter kernel" in state.reason
        assert state.flag() is None
        kernel.send_signal(signal.SIGSTOP)
        wait_until(lambda: process_state(kernel.pid) == "T", "the kernel to stop")
        state, _ = judge(run_dir, after=3600.0)
        assert state.state == "stalled" and "stopped (SIGSTOP" in state.reason


@pytest.mark.parametrize(
    "argv, what",
    [
        (("/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "/run/kernel-1.json"), "a Jupyter kernel"),
        (("python", "/opt/lib/python3.11/site-packages/ipykernel_launcher.py", "--f=/k.json"), "a Jupyter kernel"),
        (("/usr/bin/python3", "-m", "colab_kernel_launcher", "-f", "/k.json"), "a Jupyter kernel"),
        (("/usr/bin/python3", "/usr/local/bin/ipython"), "IPython"),
        (("ipython3",), "IPython"),
        (("python3",), "an interactive Python"),
        (("python3", "-i", "train.py"), "an interactive Python"),
        (("python3", "train.py", "--output-dir", "out"), None),
        (("torchrun", "--nproc-per-node", "8", "-m", "specforge.train"), None),
        (("python", "-c", "import sys; sys.stdin.read()"), None),
        ((), None),
    ],
)
def test_interactive_interpreters(argv, what):
    assert interactive_interpreter(argv) == what


def test_a_child_that_crashes_with_a_traceback_in_its_console_log(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    log = run_dir / "train.log"
    code = """
import sys
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter(log_dir=sys.argv[1])
for step in range(5):
    writer.add_scalar("train/ploss_0", 10.0 - step, global_step=step)
    print(f"step {step} loss {10.0 - step}", flush=True)
writer.flush()
def optimizer_step():
    raise RuntimeError("CUDA error: an illegal memory access was encountered")
optimizer_step()
"""
    with open(log, "w") as handle:
        child = start(code, str(run_dir), stdout=handle, stderr=subprocess.STDOUT)
        assert child.wait() == 1
    line = console_error(read_console_tail(log))
    assert line == "RuntimeError: CUDA error: an illegal memory access was encountered"
    state, _ = judge(run_dir, after=5.0, console_error_line=line)
    assert state.state == "crashed" and state.line == line and state.to_json()["crash_line"] == line
    flag = state.flag()
    assert flag is not None and flag.severity == "critical" and line in flag.message
    # The same log with the trainer's own word that it finished: ended.
    state, _ = judge(run_dir, after=5.0, console_error_line=line, wandb_exit_code=0)
    assert state.state == "ended"


def test_torchrun_failure_summary_names_the_childs_exception(tmp_path):
    """torchrun's own output around a failed rank: the root cause line, not ChildFailedError."""
    script = tmp_path / "train.py"
    script.write_text("raise ValueError('draft vocab 32000 does not match the mapping (31999)')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1", "--master_port=0", str(script)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "ChildFailedError" in text
    assert console_error(text) == "ValueError: draft vocab 32000 does not match the mapping (31999)"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("step 10 loss 2.1\nstep 20 loss 2.0\n", None),
        # A traceback the trainer caught and went on after is far above the end: not a crash.
        ("Traceback (most recent call last):\n  File 'x'\nOSError: retry\n" + "step\n" * 60, None),
        (
            "step 10\n[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        (
            "[E ProcessGroupNCCL.cpp:474] [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.\n",
            "[E ProcessGroupNCCL.cpp:474] [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
        ),
        ("50%|#####     | 5/10\r 60%|######    | 6/10\rKilled\n", "Killed"),
        ("Traceback (most recent call last):\n  File 'x'\nKeyboardInterrupt\n", "KeyboardInterrupt"),
        ("\x1b[31mTraceback (most recent call last):\n  File 'x'\nValueError: [bold]x[/]\n", "ValueError: [bold]x[/]"),
    ],
)
def test_console_error_lines(text, line):
    assert console_error(text) == line


def test_without_a_writer_on_a_network_filesystem_the_state_is_unknown(tmp_path):
    """/proc/mounts as the kernel writes it for an NFS mount; the run under it has no writer here."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    shared = tmp_path / "shared dir"
    (proc / "self" / "mounts").write_text(
        "/dev/sda1 / ext4 rw,relatime 0 0\n"
        f"fs1:/export {str(shared).replace(' ', chr(92) + '040')} nfs4 rw,vers=4.2,proto=tcp 0 0\n"
    )
    table = ProcessScanner(proc).scan([tmp_path])
    assert table.filesystem(shared / "run") == "nfs4" and table.filesystem(tmp_path / "local") == "ext4"
    activity = Activity(1000.0, 10.0, 10.0)
    state = run_state(shared / "run", processes=table, activity=activity, now=1000.0 + 600)
    assert state.state == "unknown" and "nfs4" in state.reason and state.flag() is None
    state = run_state(tmp_path / "local", processes=table, activity=activity, now=1000.0 + 600)
    assert state.state == "ended"
    # No /proc at all (not Linux): nothing can be seen.
    blind = ProcessTable({}, "here", False)
    assert run_state(tmp_path / "local", processes=blind, activity=activity, now=1600.0).state == "unknown"


def test_the_wandb_exit_record_says_ended_or_crashed(tmp_path):
    from builders.wandb_runs import run_file, run_script, start_script
    from triage_tui.core.read.wandb.history import WandbHistory

    for name, code in (("ok", 0), ("failed", 3)):
        run_script(
            """
            run = init(sys.argv[1])
            for step in range(3):
                run.log({"train/ploss_0": 10.0 - step})
            run.finish(exit_code=int(sys.argv[2]))
            """,
            str(tmp_path / name),
            str(code),
        )
    # An uncaught exception: wandb's exit hook records code 1 before the process dies.
    raised = start_script(
        """
        run = init(sys.argv[1])
        run.log({"train/ploss_0": 10.0})
        raise RuntimeError("NCCL error: unhandled system error")
        """,
        str(tmp_path / "raised"),
        stderr=subprocess.DEVNULL,
    )
    assert raised.wait(timeout=120) == 1
    table = ProcessScanner().scan([tmp_path])
    found = {}
    for name in ("ok", "failed", "raised"):
        history = WandbHistory()
        history.set_files([run_file(tmp_path / name)])
        history.poll()
        activity = Activity.of(history.scalars, "train/ploss_0")
        found[name] = (
            history.exit_code,
            run_state(
                tmp_path / name,
                processes=table,
                activity=activity,
                now=(activity.last_wall_time or 0.0) + 1.0,
                wandb_exit_code=history.exit_code,
            ),
        )
    assert found["ok"][0] == 0 and found["ok"][1].state == "ended"
    assert found["failed"][0] == 3 and found["failed"][1].state == "crashed"
    assert found["failed"][1].line == "W&B recorded exit code 3"
    assert found["raised"][0] == 1 and found["raised"][1].state == "crashed"


def test_hf_trainers_final_save_ends_the_run_by_its_own_word(tmp_path):
    """transformers.Trainer itself: max_steps=4, a save every 2 steps; checkpoint-4's trainer_state.json
    is the final save, which the watcher reads as the run's end; without it, only the absent writer."""
    from builders.trainers import hf_trainer_run
    from triage_tui.core.watch.watcher import Watcher

    output = hf_trainer_run(tmp_path, steps=4, save_steps=2)
    (status,) = Watcher([tmp_path], use_watchdog=False, strict=True).poll_once()
    assert status.state is not None and status.info.path == output
    assert (status.state.state, status.state.reason) == ("ended", "the trainer saved its final checkpoint")

    shutil.rmtree(output / "checkpoint-4")
    (status,) = Watcher([tmp_path], use_watchdog=False, strict=True).poll_once()
    assert status.state is not None
    assert (status.state.state, status.state.reason) == ("ended", "no process of this node writes it")


def test_open_files_are_read_again_after_the_refresh_interval_and_liveness_every_scan(tmp_path):
    """What a known process holds open is read every REFRESH_SECS (the scanner's clock); that it died
    is seen at the next scan."""
    from triage_tui.core.watch.process_table import REFRESH_SECS

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    log = run_dir / "train.log"
    clock = [0.0]
    scanner = ProcessScanner(clock=lambda: clock[0])
    child = start("import sys; f = open(sys.stdin.readline().strip(), 'a'); print('ok', flush=True); sys.stdin.read()")
    with ended(child):
        assert child.stdin is not None
        assert find_writer(run_dir, scanner.scan([tmp_path]))[0] is None
        child.stdin.write(f"{log}\n".encode())
        child.stdin.flush()
        wait_until(lambda: log in _open_files(child.pid), "the child to open the log")
        clock[0] = REFRESH_SECS / 2
        assert find_writer(run_dir, scanner.scan([tmp_path]))[0] is None  # not read again yet
        clock[0] = REFRESH_SECS
        writer = find_writer(run_dir, scanner.scan([tmp_path]))[0]
        assert writer is not None and writer.pid == child.pid and writer.evidence == "open file"
        child.kill()
        child.wait()
        clock[0] = REFRESH_SECS + 1
        assert find_writer(run_dir, scanner.scan([tmp_path]))[0] is None


@pytest.mark.parametrize(
    ("name", "found"),
    [
        ("events.out.tfevents.1700000000.node.12345.0", (1700000000.0, "node", 12345)),
        ("events.out.tfevents.1700000000.gpu-7.cluster.local.99.3.v2", (1700000000.0, "gpu-7.cluster.local", 99)),
        ("events.out.tfevents.1700000000.10.0.0.5.4242.1", (1700000000.0, "10.0.0.5", 4242)),
        ("events.out.tfevents.1700000000.node", None),  # tensorboardX: no pid in the name
    ],
)
def test_event_file_names(name, found):
    from triage_tui.core.watch.writers import event_file_writer

    assert event_file_writer(name) == found


def test_a_live_wandb_run_is_found_by_its_open_files_then_ends_by_its_exit_record(tmp_path):
    """The trainer holds its wandb/<run>/logs/debug.log open, wandb-core its run-<id>.wandb: either
    shows the run is written here; once the run finishes, the exit record says it ended."""
    from builders.wandb_runs import run_file, start_script
    from triage_tui.core.read.wandb.history import WandbHistory

    child = start_script(
        """
        run = init(sys.argv[1])
        run.log({"train/ploss_0": 10.0})
        sys.stdin.read()
        run.finish()
        """,
        str(tmp_path),
        stdin=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    with ended(child):
        wait_until(lambda: list(tmp_path.glob("wandb/*run-*/run-*.wandb")), "the run's .wandb file")
        run_dir = run_file(tmp_path).parent
        wait_until(lambda: find_writer(run_dir, ProcessScanner().scan([tmp_path]))[0] is not None, "a writer")
        writer, _ = find_writer(run_dir, ProcessScanner().scan([tmp_path]))
        assert writer is not None and writer.evidence == "open file"
        assert writer.pid == child.pid or writer.comm == "wandb-core"
        assert child.stdin is not None
        child.stdin.close()
        assert child.wait(timeout=120) == 0
    history = WandbHistory()
    history.set_files([run_file(tmp_path)])
    history.poll()
    activity = Activity.of(history.scalars, "train/ploss_0")
    state = run_state(
        run_dir,
        processes=ProcessScanner().scan([tmp_path]),
        activity=activity,
        now=(activity.last_wall_time or 0.0) + 5.0,
        wandb_exit_code=history.exit_code,
    )
    # wandb-core may still be exiting (it holds the .wandb file a moment longer): ended all the same.
    assert history.exit_code == 0 and state.state == "ended" and state.reason.startswith("W&B recorded exit code 0")
