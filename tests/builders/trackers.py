"""Trackers' files for the hostile battery, byte for byte as the trackers' own code writes them.

The trackers are not installed with the test extra (scripts/make_tracker_fixtures.py runs them, its
output committed under tests/fixtures/trackers/). What the battery needs is many files of chosen
values, so these write them the way the trackers' code does, and tests/test_trackers.py holds them
to it: given the values the fixture script logged, each reproduces the committed file written by the
tracker itself, byte for byte.

- Lightning's CSVLogger (lightning/fabric/loggers/csv_logs.py ``_ExperimentWriter``, 2.6.6): a
  ``csv.DictWriter`` over every key logged so far, sorted (``metrics_keys.sort()``), ``step`` among
  them; one row a ``log_metrics`` call. The file after its last save (rewrites included) is the header
  of every key and every row, which is what ``lightning_csv`` writes.
- torchtune's DiskLogger (torchtune/training/metric_logging.py, 0.6.1): ``log_dict`` writes
  ``Step {step} | `` then ``{name}:{data} `` a metric, then a newline.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

Logged = tuple[int, dict[str, float]]  # one logging call: its step and what it logged


def lightning_csv(rows: Sequence[Logged]) -> bytes:
    keys = sorted({"step", *(name for _, row in rows for name in row)})
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=keys)
    writer.writeheader()
    writer.writerows({**row, "step": step} for step, row in rows)
    return out.getvalue().encode()


def disk_logger(rows: Sequence[Logged]) -> bytes:
    return "".join(
        f"Step {step} | " + "".join(f"{k}:{v} " for k, v in row.items()) + "\n" for step, row in rows
    ).encode()


def by_step(series: dict[str, list[tuple[int, float]]]) -> list[Logged]:
    """The battery's series as one logging call a step, the names in the order given."""
    steps = sorted({step for points in series.values() for step, _ in points})
    return [(step, {tag: v for tag, points in series.items() for s, v in points if s == step}) for step in steps]


def write_lightning_run(run: Path, series: dict[str, list[tuple[int, float]]]) -> Path:
    """``<run>/version_0/metrics.csv`` holding ``series``, the version directory Lightning makes."""
    path = run / "version_0" / "metrics.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(lightning_csv(by_step(series)))
    return path


def write_torchtune_run(run: Path, series: dict[str, list[tuple[int, float]]]) -> Path:
    path = run / "log_1760000000.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(disk_logger(by_step(series)))
    return path
