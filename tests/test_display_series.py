"""The TUI holds a bounded display series however fast and long a run logs, while `triage scalars`
reads every point from the files: an event file flooded by torch's SummaryWriter in a child process
is watched by the core Watcher as the TUI builds it (``max_points``), and the memory its series hold
stays under a constant that does not grow with the points written.

The oracle is what the writer says it wrote (its count of ``add_scalar`` calls) and what a user can
check on a chart: the lowest and highest values, a NaN, the last step."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
import time

import numpy as np
import pytest

from builders.commands import Triage
from builders.peak_memory import REPO
from builders.tensorboard import write_scalars
from triage_tui.core.series import DISPLAY_POINTS, ScalarSeries
from triage_tui.core.watch.watcher import Watcher

_FLOOD = """\
import sys, time
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter(log_dir=sys.argv[1], flush_secs=1)
steps = int(sys.argv[2])
for step in range(1, steps + 1):
    writer.add_scalar("train/loss", 10.0 - step * 1e-6, step)
    writer.add_scalar("train/lr", 1e-4, step)
    if step % 500 == 0:
        time.sleep(0.01)  # a trainer's rhythm: the watcher polls while it writes
writer.close()
print(step)
"""
MAX_POINTS = 2_000
TAGS = 2
# A count of steps, not a time: a loaded machine writes fewer steps a second, never fewer steps.
FLOOD_STEPS = 25 * MAX_POINTS


def test_a_flooded_run_is_watched_in_bounded_memory_and_exported_whole(tmp_path, triage: Triage):
    run = tmp_path / "out"
    flood = subprocess.Popen(
        [sys.executable, "-c", _FLOOD, str(run / "runs"), str(FLOOD_STEPS)], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    watcher = Watcher([tmp_path], use_watchdog=False, max_points=MAX_POINTS)
    held: list[int] = []
    try:
        while flood.poll() is None:
            for status in watcher.poll_once():
                held.append(status.scalars.nbytes)
            time.sleep(0.2)
    finally:
        written = int(flood.communicate(timeout=60)[0])
    (status,) = watcher.poll_once()
    held.append(status.scalars.nbytes)

    # Far more points than a series keeps: the bound is the display's, not the run's.
    assert written == FLOOD_STEPS
    # 24 bytes a point, slack of the 1.25x growth, per tag: whatever was written.
    assert max(held) <= TAGS * MAX_POINTS * 24 * 1.25 + 4096, (max(held), written)
    loss = status.scalars.series["train/loss"]
    assert len(loss) <= MAX_POINTS
    assert status.last_step == written and loss.last()[0] == written  # the newest point is exact
    assert loss.steps[0] == 1 and np.all(np.diff(loss.steps) > 0)  # the whole range, in order

    exported = triage("scalars", run, "--tag", "train/loss")
    assert exported.returncode == 0, exported.stderr
    steps = [int(row["step"]) for row in csv.DictReader(io.StringIO(exported.stdout))]
    assert steps == list(range(1, written + 1))  # every point, from the file


def test_a_thinned_series_keeps_each_buckets_extremes_and_a_nan():
    rng = np.random.default_rng(0)
    n = 50_000
    steps = np.arange(1, n + 1)
    values = rng.normal(5.0, 0.1, n)
    values[1234] = 50.0  # a spike
    values[2345] = -3.0  # a dip
    values[3456] = math.nan  # a NaN loss
    series = ScalarSeries.of("loss", steps, np.zeros(n), values)
    assert series.thin(4_000)
    assert len(series) <= 2_000
    kept = dict(zip(series.steps.tolist(), series.values.tolist(), strict=True))
    assert kept[1235] == 50.0 and kept[2346] == -3.0 and math.isnan(kept[3457])
    assert series.last() == (n, 0.0, values[-1])
    assert series.steps[-1_000:].tolist() == list(range(n - 999, n + 1))  # the newest quarter exact
    assert not series.thin(4_000)  # under the bound: left alone


@pytest.mark.slow
def test_the_tui_holds_a_display_series_where_scan_counts_every_point(tmp_path, triage: Triage):
    from triage_tui.commands.tui import start_reading  # what `triage` starts before the app

    n = DISPLAY_POINTS + 20_000
    write_scalars(tmp_path / "out" / "runs", {"train/loss": [(s, 10.0 - s / n) for s in range(1, n + 1)]})
    watcher = start_reading([tmp_path], use_watchdog=False)
    (status,) = watcher.poll_once()
    loss = status.scalars.series["train/loss"]
    assert len(loss) <= DISPLAY_POINTS and loss.last()[0] == n
    # The range drawn is the run's: its first and last values (add_scalar stores a float32).
    assert loss.values.min() == np.float32(10.0 - n / n) and loss.values.max() == np.float32(10.0 - 1 / n)
    scanned = triage("scan", tmp_path, "--json", "--poll")
    assert json.loads(scanned.stdout)["runs"][0]["metrics"]["loss"]["count"] == n  # the loss metric: train/loss


def test_a_run_inventing_tag_names_keeps_a_bounded_number_of_series_and_says_so(tmp_path, triage, monkeypatch):
    from torch.utils.tensorboard import SummaryWriter

    from triage_tui.core import bounds

    monkeypatch.setattr(bounds, "MAX_DISPLAY_SERIES", 50)
    run = tmp_path / "out"
    writer = SummaryWriter(log_dir=str(run / "runs"))
    for step in range(1, 6):
        writer.add_scalar("train/loss", 10.0 - step, step)
    for i in range(120):  # a writer putting a sample id in the tag
        writer.add_scalar(f"sample/{i:04d}/loss", float(i), i)
    writer.flush()
    watcher = Watcher([tmp_path], use_watchdog=False, max_points=MAX_POINTS)
    (status,) = watcher.poll_once()
    assert len(status.scalars.series) == 50 and "train/loss" in status.scalars.series
    said = "more than 50 series in one source: the TUI keeps the first 50 it read"
    assert [note for note in status.source_notes if note.startswith("more than")] == [
        f"{said} (triage scan and triage scalars read every one)"
    ]

    for i in range(120, 400):
        writer.add_scalar(f"sample/{i:04d}/loss", float(i), i)
    writer.add_scalar("train/loss", 1.0, 400)
    writer.close()
    (status,) = watcher.poll_once()
    assert len(status.scalars.series) == 50 and status.scalars.series["train/loss"].last()[0] == 400
    assert sum(note.startswith("more than") for note in status.source_notes) == 1  # said once

    exported = json.loads(triage("scalars", run, "--format", "json").stdout)["tags"]
    assert len(exported) == 401 and exported["sample/0399/loss"]["steps"] == [399]  # every series, from the files
    scanned = json.loads(triage("scan", run, "--json").stdout)["runs"][0]
    assert not any(note.startswith("more than") for note in scanned["source_notes"])
    assert scanned["last_step"] == status.last_step == 400  # the loss's: kept, the tag logged first
