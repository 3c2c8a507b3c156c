"""Every line of a console, on every surface: `scan`, `scalars` and the TUI's watcher read a console
log to its end in one pass, whatever its size, and agree on its last step.

The consoles are printed by SpecForge's own ``_logger`` (builders/consoles.py) and HF Trainer's
(the tiny run builders/consoles.py trains); the oracle is what a user can count with grep.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builders.commands import Triage
from builders.consoles import console_runs, specforge_lines
from builders.tensorboard import write_drafter_checkpoint
from triage_tui.core.read.console.reader import ConsoleLogs
from triage_tui.core.watch.watcher import Watcher

BIG_STEPS = 1_100_000
HOUR = 3600.0


def _last_steps(triage: Triage, root: Path, run: Path, tag: str) -> tuple[int, int, int]:
    """The run's last step as `scan --json`, `scalars` (the tag's last row) and the TUI's watcher say it."""
    scanned = triage("scan", root, "--json", "--poll")
    assert scanned.returncode in (0, 1), scanned.stderr
    (status,) = json.loads(scanned.stdout)["runs"]
    return (status["last_step"], *_exported_and_watched_last_steps(triage, root, run, tag))


def _exported_and_watched_last_steps(triage: Triage, root: Path, run: Path, tag: str) -> tuple[int, int]:
    exported = triage("scalars", run, "--tag", tag)
    assert exported.returncode == 0, exported.stderr
    last = None
    for row in csv.DictReader(io.StringIO(exported.stdout)):  # tags sorted, then steps ascending
        if row["tag"] == tag:
            last = int(row["step"])
    (watched,) = Watcher([root], use_watchdog=False).poll_once()
    return last, watched.last_step


def _peak_rss_of_scan(root: Path) -> tuple[int, int]:
    """`triage scan --json` in a child of its own: its last step and its peak resident memory (bytes:
    the kernel's VmHWM of the child's own address space; ru_maxrss would count the test process the
    child was forked from)."""
    script = (
        "import contextlib, io, json, re, sys\n"
        "from triage_tui import cli\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    cli.main(['scan', '--json', '--poll', sys.argv[1]])\n"
        "(run,) = json.loads(out.getvalue())['runs']\n"
        "peak = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read())\n"
        "print(run['last_step'], int(peak.group(1)) * 1024)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(root)], capture_output=True, text=True, timeout=900, check=True
    )
    step, peak = done.stdout.split()
    return int(step), int(peak)


@pytest.mark.slow
def test_a_40_mb_console_is_read_to_its_last_step_everywhere_in_bounded_memory(tmp_path, triage):
    run = tmp_path / "out"
    run.mkdir()
    log = run / "train.log"
    with open(log, "w") as handle:
        for first in range(1, BIG_STEPS + 1, 100_000):  # SpecForge's own lines, printed 100 000 at a time
            steps = range(first, min(first + 100_000, BIG_STEPS + 1))
            handle.write(specforge_lines([(step, {"loss": 10.0 - step / 1e6, "acc": 0.5}) for step in steps]))
    size = log.stat().st_size
    assert size >= 40 << 20
    os.utime(log, (time.time() - HOUR,) * 2)  # a finished run's log

    step, peak = _peak_rss_of_scan(tmp_path)
    assert step == BIG_STEPS
    # Memory follows what is shown (two series' columns), not the file: well under 10x its size.
    assert peak < 10 * size, (peak, size)
    assert _exported_and_watched_last_steps(triage, tmp_path, run, "loss") == (BIG_STEPS, BIG_STEPS)


def test_one_40_mb_line_does_not_hide_the_lines_after_it(tmp_path, triage):
    run = tmp_path / "out"
    write_drafter_checkpoint(run / "llama3-eagle3-step10")  # SpecForge's output dir, tracking off
    log = run / "train.log"
    with open(log, "w") as handle:
        handle.write(specforge_lines([(step, {"loss": 5.0, "acc": 0.5}) for step in range(1, 11)]))
        handle.write("x" * (40 << 20) + "\n")  # a runaway print: no trainer's line
        handle.write(specforge_lines([(step, {"loss": 4.0, "acc": 0.6}) for step in range(11, 21)]))
    os.utime(log, (time.time() - HOUR,) * 2)
    assert _last_steps(triage, tmp_path, run, "loss") == (20, 20, 20)
    scanned = json.loads(triage("scan", tmp_path, "--json", "--poll").stdout)["runs"][0]
    assert scanned["metrics"]["loss"]["count"] == 20  # the long line is damage, counted, not a point


def test_a_trailing_hf_dict_is_kept_by_one_pass(tmp_path, triage):
    # HF Trainer's console cut right after a training dict that tqdm.write printed after clearing
    # its bar (the trainer killed before it drew the bar again): the dict is the log's last line.
    source = console_runs().hf_unbuffered.log.read_bytes()
    cut = source.index(b"{'loss': '5.537', 'grad_norm': '0.7567'")
    cut = source.index(b"\n", cut) + 1
    assert source[:cut].count(b"\r") and source[:cut].endswith(b"'epoch': '3'}\n")
    run = tmp_path / "out"
    run.mkdir()
    log = run / "train.log"
    log.write_bytes(source[:cut])
    os.utime(log, (time.time() - HOUR,) * 2)
    printed = source[:cut].count(b"{'loss': ")  # what grep counts

    logs = ConsoleLogs()
    logs.set_files([log])
    logs.poll()  # one pass, as scan and scalars make
    assert len(logs.scalars.series["loss"]) == printed
    scanned = json.loads(triage("scan", tmp_path, "--json", "--poll").stdout)["runs"][0]
    assert scanned["metrics"]["loss"]["count"] == printed


def test_a_live_hf_dict_waits_for_the_bar_drawn_after_it(tmp_path):
    # The same dict in a file written a moment ago: the bar tqdm draws next says its step.
    source = console_runs().hf_unbuffered.log.read_bytes()
    cut = source.index(b"\n", source.index(b"{'loss': '5.537', 'grad_norm': '0.7567'")) + 1
    log = tmp_path / "train.log"
    log.write_bytes(source[:cut])
    logs = ConsoleLogs()
    logs.set_files([log])
    logs.poll()
    before = len(logs.scalars.series["loss"])
    with open(log, "ab") as handle:
        handle.write(source[cut:])
    logs.poll()
    logs.poll()
    whole = ConsoleLogs()
    whole.set_files([console_runs().hf_unbuffered.log])
    whole.poll()
    whole.poll()
    assert before == source[:cut].count(b"{'loss': ") - 1
    assert logs.scalars.series["loss"].steps.tolist() == whole.scalars.series["loss"].steps.tolist()
