"""A log growing faster than triage parses it: `scan` returns in bounded time with a prefix of it.

A child process appends SGLang's own ``Decode batch`` lines (builders/serving.py, through SGLang's
logging format) to a run's serving log at tens of MB/s while `triage scan` runs in a subprocess of
its own. The oracle is what a user can compute from the file: the mean of the ``accept len`` values
printed in the bytes scan says it read, and of all of them once the writer has stopped.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from builders.commands import Triage
from builders.consoles import specforge_lines
from builders.serving import sglang_line

# The issue measured 50 MB/s; this is faster than triage parses these lines (about 20 MB/s on a
# 2-core machine), so a read that follows the log to its end never catches up.
WRITE_MB_PER_SEC = 80
SCAN_BOUND_SECS = 30.0  # scan returns within this (it took under 5 s here), the log still growing
WRITER_SECS = SCAN_BOUND_SECS + 5  # the writer stops by itself after this, whatever happens to the test

_ACCEPT_LEN = re.compile(rb"accept len: ([0-9.]+),")
_READ_UP_TO = re.compile(r"read up to byte ([0-9,]+) of ([0-9,]+)")


def _writer(log: Path, template: str) -> subprocess.Popen:
    """A child appending blocks of SGLang lines, each block's accept len one step up from the last
    (cycling through 1.00 .. 4.99), paced to WRITE_MB_PER_SEC; prints "started" after its first block."""
    head, tail = template.split("accept len: 3.00, ")
    source = textwrap.dedent(
        f"""
        import sys, time
        head, tail = {head!r}, {tail!r}
        start, written, block = time.monotonic(), 0, 0
        with open({str(log)!r}, "ab", buffering=0) as out:
            while time.monotonic() - start < {WRITER_SECS}:
                value = 1.0 + (block % 400) / 100
                data = "".join(f"{{head}}accept len: {{value:.2f}}, {{tail}}\\n" for _ in range(5000)).encode()
                written += out.write(data)
                if block == 0:
                    print("started", flush=True)
                block += 1
                time.sleep(max(0.0, written / ({WRITE_MB_PER_SEC} * 1e6) - (time.monotonic() - start)))
        """
    )
    return subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, text=True)


def _mean_accept_len(data: bytes) -> tuple[float, int]:
    """The mean of the accept len printed in the complete lines of ``data``, and how many lines."""
    complete = data[: data.rfind(b"\n") + 1]
    values = [float(v) for v in _ACCEPT_LEN.findall(complete)]
    return sum(values) / len(values), len(values)


@pytest.mark.slow
def test_scan_returns_with_a_prefix_of_a_serving_log_growing_faster_than_it_is_read(tmp_path, triage: Triage):
    run = tmp_path / "out"
    (run / "logs").mkdir(parents=True)
    (run / "triage.toml").write_text('[run]\nvocab_size = 32000\n[serving]\nlogs = ["logs/serve.log"]\n')
    (run / "train.log").write_text(specforge_lines([(s, {"loss": 10.0 - s / 100, "acc": 0.5}) for s in range(1, 11)]))
    log = run / "logs" / "serve.log"
    writer = _writer(log, sglang_line(300, 100))
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "started"
        began = time.monotonic()
        try:
            scanned = subprocess.run(
                [sys.executable, "-m", "triage_tui", "scan", "--json", str(tmp_path)],
                capture_output=True,
                text=True,
                timeout=SCAN_BOUND_SECS,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"scan had not returned after {SCAN_BOUND_SECS:g} s, the log {log.stat().st_size:,} bytes")
        took = time.monotonic() - began
        still_writing = writer.poll() is None
        size_at_return = log.stat().st_size
    finally:
        writer.terminate()
        writer.wait()
    assert scanned.returncode in (0, 1), scanned.stderr
    assert took < SCAN_BOUND_SECS, f"scan took {took:.1f} s"
    assert still_writing, "the writer stopped before scan returned: the log was not growing throughout"
    (status,) = json.loads(scanned.stdout)["runs"]
    serving = status["serving"]
    (cut,) = [note for note in serving["notes"] if _READ_UP_TO.search(note)]
    read_to = int(_READ_UP_TO.search(cut).group(1).replace(",", ""))
    assert 0 < read_to < size_at_return
    data = log.read_bytes()
    shown_mean, lines_read = _mean_accept_len(data[:read_to])
    full_mean, lines_written = _mean_accept_len(data)
    assert lines_read < lines_written
    assert serving["acceptance_length"] == pytest.approx(shown_mean, rel=1e-9)

    # The writer has stopped: the finished log is read whole, no note of a cut.
    again = triage("scan", "--json", tmp_path)
    assert again.returncode in (0, 1), again.stderr
    (status,) = json.loads(again.stdout)["runs"]
    assert not [note for note in status["serving"]["notes"] if _READ_UP_TO.search(note)]
    assert status["serving"]["acceptance_length"] == pytest.approx(full_mean, rel=1e-9)


CONSOLE_MB_PER_SEC = 10  # several times what the console parser reads a second here
CONSOLE_BOUND_SECS = 10.0  # one poll returns within this (about 2 s here)


def _console_writer(log: Path, rest: str) -> subprocess.Popen:
    """A child appending SpecForge's step lines (steps 1, 2, ...: ``rest`` is what follows "step N: ")
    paced to CONSOLE_MB_PER_SEC; prints "started" after its first block."""
    source = textwrap.dedent(
        f"""
        import time
        rest, step, written = {rest!r}, 1, 0
        start = time.monotonic()
        with open({str(log)!r}, "ab", buffering=0) as out:
            while time.monotonic() - start < {CONSOLE_BOUND_SECS + 20}:
                written += out.write("".join(f"step {{s}}: {{rest}}" for s in range(step, step + 10000)).encode())
                if step == 1:
                    print("started", flush=True)
                step += 10000
                time.sleep(max(0.0, written / ({CONSOLE_MB_PER_SEC} * 1e6) - (time.monotonic() - start)))
        """
    )
    return subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_console_growing_faster_than_it_is_read_gives_a_prefix_then_every_step(tmp_path):
    from triage_tui.core.read.console.reader import ConsoleLogs

    log = tmp_path / "train.log"
    rest = specforge_lines([(1, {"loss": 5.25, "acc": 0.5})]).removeprefix("step 1: ")
    writer = _console_writer(log, rest)
    logs = ConsoleLogs()
    logs.set_files([log])
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "started"
        began = time.monotonic()
        logs.poll()
        took = time.monotonic() - began
        still_writing = writer.poll() is None
    finally:
        writer.terminate()
        writer.wait()
    assert took < CONSOLE_BOUND_SECS, f"a poll took {took:.1f} s"
    assert still_writing, "the writer stopped before the poll returned: the log was not growing throughout"
    steps = logs.scalars.series["loss"].steps.tolist()
    assert steps == list(range(1, len(steps) + 1))  # a prefix: every step up to the last one read
    written = [int(m) for m in re.findall(rb"^step (\d+): ", log.read_bytes(), re.M)]
    assert written == list(range(1, len(written) + 1)) and len(steps) < len(written)
    (note,) = logs.notes()
    assert _READ_UP_TO.search(note), note

    # The writer has stopped: the next poll reads the rest, every step written.
    logs.poll()
    assert logs.scalars.series["loss"].steps.tolist() == written
    assert not any(_READ_UP_TO.search(note) for note in logs.notes())
