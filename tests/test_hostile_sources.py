"""One hostile battery for every scalar source (docs/contracts.md, the fault boundary).

Each source is a file kind a run's scalars come from, written here by its real writer: torch's
SummaryWriter (TensorBoard event files), the wandb package, offline (W&B run files), SpecForge's
console logger (training consoles), transformers' TrainerState (trainer_state.json), and Lightning's
CSVLogger and torchtune's DiskLogger as they write (tests/builders/trackers.py, held byte for byte
to the files they wrote themselves; a flipped digit there is another number, as in a JSON file). A new
source is added to ``SOURCES`` and is attacked the day it lands. Every variant of a file (cut at
each byte of its first records, one bit flipped at each, values that cannot be numbers, markup
and escapes in every name) is a run beside a healthy run B, fifty such runs a poll; then:

- nothing raises: each is listed, with its errors or damaged records said, never a traceback;
- every report is strict JSON (no NaN or infinity leaks as a number);
- B's report is exactly what a scan of B alone gives.

The serving sources have their own battery (tests/test_serving_hostile.py).
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from builders.tensorboard import write_scalars
from builders.trackers import write_lightning_run, write_torchtune_run
from triage_tui.core.watch.watcher import Watcher

# Every byte of this many leading bytes is cut at and flipped: the file's header and first records,
# the first scalar records included (a test says so for each source).
ATTACKED_BYTES = 1200

# The names a hostile file can carry: markup, a terminal escape, a control character, a long one
# (within every source's bound on a name: longer ones make their record damage, tested per source).
HOSTILE_TAGS = ["[bold red]loss[/]", "\x1b[31mtrain/acc_0", "loss\rhidden", "l" * 250]


def _tensorboard(run: Path, series: dict[str, list[tuple[int, float]]]) -> Path:
    return write_scalars(run, series, wall_time=1_700_000_000.0)


def _wandb(run: Path, series: dict[str, list[tuple[int, float]]]) -> Path:
    from builders.wandb_runs import write_run

    steps = sorted({step for points in series.values() for step, _ in points})
    rows = [{tag: value for tag, points in series.items() for s, value in points if s == step} for step in steps]
    return write_run(run, rows, steps=steps)


def _console(run: Path, series: dict[str, list[tuple[int, float]]]) -> Path:
    """SpecForge's console logger's lines (its own ``_logger``), beside a checkpoint so the
    directory is a run (docs/formats.md, Training consoles)."""
    from builders.consoles import specforge_lines
    from builders.tensorboard import write_drafter_checkpoint

    write_drafter_checkpoint(run / "run-step100", draft_vocab=8, hidden=4)
    steps = sorted({step for points in series.values() for step, _ in points})
    records = [
        (step, {tag: value for tag, points in series.items() for s, value in points if s == step}) for step in steps
    ]
    log = run / "train.log"
    log.write_text(specforge_lines(records))
    return log


def _trainer_state(run: Path, series: dict[str, list[tuple[int, float]]]) -> Path:
    """transformers' own TrainerState written by its save_to_json, in the checkpoint HF Trainer saves."""
    from transformers import TrainerState

    steps = sorted({step for points in series.values() for step, _ in points})
    history = [
        {**{tag: value for tag, points in series.items() for s, value in points if s == step}, "step": step}
        for step in steps
    ]
    path = run / f"checkpoint-{steps[-1]}" / "trainer_state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    TrainerState(global_step=steps[-1], max_steps=steps[-1], log_history=history).save_to_json(str(path))
    return path


# Sources where a flipped bit can go unseen: trainer_state.json is plain JSON with no checksum, so
# a flipped digit is another number no reader can tell from the written one (913 of its first
# 1 200 flips are caught: broken JSON, a key renamed). There the battery holds the boundary (run B
# unchanged) and that some flips are said; everywhere else every flip is caught but on a console,
# where exactly the flips that leave a number a number pass (``NUMBER_FLIPS_PASS``).
FLIPS_CAN_PASS = frozenset({"trainer_state", "lightning", "torchtune"})
# A console is printed text with no checksum either. Of the 525 flips of its 525 bytes, 492 are
# said: a broken line (damage), a metric's name or a step line no longer read (a loss or accuracy
# point missing: a flipped letter in ``train/acc_0`` is another name), and a letter or digit
# turned into a control character (``plain`` would remove it and read "1.0" for "10.0": damage, as
# no trainer prints one in a record). The other 33 leave a printed number a number: 29 a digit
# turned into another digit (23 in a value, 6 in a step: another number, another step, which no
# reader can tell from the printed one) and 4 a space or a leading zero that reads as the same
# number (" .15", "06.0"). The test asserts each missed flip is one of these.
NUMBER_FLIPS_PASS = frozenset({"console"})

# kind -> the real writer of a file of that source, into a run directory
SOURCES: dict[str, Callable[[Path, dict[str, list[tuple[int, float]]]], Path]] = {
    "tensorboard": _tensorboard,
    "wandb": _wandb,
    "console": _console,
    "trainer_state": _trainer_state,
    "lightning": write_lightning_run,
    "torchtune": write_torchtune_run,
}

HEALTHY = {
    "train/ploss_0": [(s, 10.0 - s / 10) for s in range(0, 100, 10)],
    "train/acc_0": [(s, s / 200) for s in range(0, 100, 10)],
}


def _report(watched: Path, tree: Path) -> dict[str, dict]:
    """Each run's report from a scan of ``watched``, keyed by the run's directory under ``tree`` (A or B;
    a W&B run is the directory wandb writes below the one it was given)."""
    statuses = Watcher([watched], use_watchdog=False, strict=True).poll_once()
    reports = {status.info.path.relative_to(tree).parts[0]: status.to_json() for status in statuses}
    json.dumps(reports, allow_nan=False)  # strict JSON, whatever a file held
    return reports


@pytest.fixture(scope="module", params=sorted(SOURCES))
def written(request, tmp_path_factory) -> tuple[str, Path, bytes, dict]:
    """(kind, a tree with healthy run B, one healthy file of the source, B's report alone)."""
    kind = request.param
    root = tmp_path_factory.mktemp(kind)
    healthy = SOURCES[kind](root / "source", HEALTHY)
    tree = root / "tree"
    shutil.copytree(root / "source", tree / "B")
    expected = _report(tree / "B", tree)["B"]
    assert expected["errors"] == [] and expected["metrics"]["loss"]["count"] == 10
    return kind, tree, healthy.read_bytes(), expected


def _same_run(report: dict, alone: dict) -> bool:
    """Equal but for the name (relative to what was watched: "B/..." in the tree, the leaf alone)."""
    return {**report, "name": None} == {**alone, "name": None}


# Variants placed as runs side by side, read in one poll: a poll's own work (the tree's listing, the
# scan of /proc for writers) is shared, and B is read beside this many hostile runs at once.
VARIANTS_A_POLL = 50


def _place(tree: Path, name: str, written_file: Path, source_root: Path, data: bytes) -> None:
    """Run ``name``: the source's file at the place its writer put it, holding ``data``."""
    target = tree / name / written_file.relative_to(source_root)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _attack(tree: Path, kind: str, data: bytes, expected: dict, variants) -> tuple[int, list[int]]:
    """Each variant of ``data`` as a run A<n> beside B, VARIANTS_A_POLL of them a poll; B's report
    checked after each poll. Returns how many variants ran, and the numbers of those whose A<n>'s
    report said nothing was wrong (no error, no damaged records, no loss or accuracy point missing)."""
    source_root = tree.parent / "source"
    (written_file,) = [p for p in source_root.rglob("*") if p.is_file() and p.read_bytes() == data]
    count = 0
    missed: list[int] = []
    batch: list[str] = []

    def poll() -> None:
        reports = _report(tree, tree)
        assert _same_run(reports["B"], expected), f"{kind}: one of the runs {batch[0]}..{batch[-1]} changed B's report"
        for name in batch:
            a = reports.get(name)
            metrics = (a or {}).get("metrics", {})
            counts = [(metrics.get(metric) or {"count": 0})["count"] for metric in ("loss", "accuracy")]
            said = a is None or bool(a["errors"]) or min(counts) < 10 or "damaged_records" in str(a["flags"])
            if not said:
                missed.append(int(name[1:]))
            shutil.rmtree(tree / name)
        batch.clear()

    for variant in variants:
        batch.append(f"A{count:04d}")
        _place(tree, batch[-1], written_file, source_root, variant)
        count += 1
        if len(batch) == VARIANTS_A_POLL:
            poll()
    if batch:
        poll()
    return count, missed


_FIELD_ENDS = re.compile(r"[{}:,']")


def _number_fields(data: bytes, flipped: bytes, at: int) -> tuple[float, float] | None:
    """The numbers the printed field holding byte ``at`` reads as before and after the flip (Python's
    ``float``; a step line's ``step N`` is its N), fields split where the healthy line has ``{}:,'``;
    None when either is no number."""
    start = data.rfind(b"\n", 0, at) + 1
    end = data.find(b"\n", at)
    line = data[start : end if end >= 0 else len(data)].decode("latin-1")
    j = at - start
    left = max((m.end() for m in _FIELD_ENDS.finditer(line, 0, j)), default=0)
    right = next((m.start() for m in _FIELD_ENDS.finditer(line, j + 1)), len(line))
    if _FIELD_ENDS.fullmatch(line[j]):
        return None  # the flipped byte was a delimiter
    before = line[left:right]
    after = flipped[start + left : start + right].decode("latin-1")
    try:
        return float(before.removeprefix("step ")), float(after.removeprefix("step "))
    except ValueError:
        return None


def test_the_attacked_bytes_reach_the_first_scalar_records(written):
    kind, _, data, _ = written
    assert 0 < data.find(b"train/ploss_0") < ATTACKED_BYTES - 100, kind


def test_a_file_cut_at_every_byte_of_its_first_records_fails_alone(written):
    kind, tree, data, expected = written
    cuts = range(min(ATTACKED_BYTES, len(data)))
    count, missed = _attack(tree, kind, data, expected, (data[:cut] for cut in cuts))
    assert count == len(cuts) and missed == []  # every cut loses points


def test_one_bit_flipped_at_every_byte_of_the_first_records_fails_alone(written):
    kind, tree, data, expected = written

    def flip(i: int) -> bytes:
        return data[:i] + bytes([data[i] ^ (1 << (i % 8))]) + data[i + 1 :]

    count, missed = _attack(tree, kind, data, expected, (flip(i) for i in range(min(ATTACKED_BYTES, len(data)))))
    assert count == min(ATTACKED_BYTES, len(data)), kind  # run B identical after every one
    if kind in FLIPS_CAN_PASS:
        assert len(missed) < count, kind
    elif kind in NUMBER_FLIPS_PASS:
        numbers = {i: _number_fields(data, flip(i), i) for i in missed}
        others = [i for i, found in numbers.items() if found is None]
        assert others == [], (kind, [(i, flip(i)[i - 8 : i + 8]) for i in others])  # only numbers left numbers
        same = sum(1 for found in numbers.values() if found is not None and found[0] == found[1])
        assert same < len(missed) < count // 10, (kind, count, len(missed), same)
    else:
        assert missed == [], (kind, missed)  # every flip is caught


def test_values_that_are_no_numbers_and_names_that_are_markup_fail_alone(written, tmp_path):
    """Huge, infinite and NaN values under hostile names: read as written, reported as strict JSON
    (NaN and infinity never become numbers), and the names stay text."""
    kind, tree, _, expected = written
    # A carriage return in a console line is the terminal's own overwrite (progress bars redraw
    # that way): the console reads what a terminal shows, so it is given the other names.
    tags = [tag for tag in HOSTILE_TAGS if not (kind == "console" and "\r" in tag)]
    series = {tag: [(0, 1e308), (10, math.inf), (20, -math.inf), (30, math.nan), (40, 5.0)] for tag in tags}
    series["train/ploss_0"] = [(0, math.nan), (10, 1e300), (20, 10.5)]
    hostile = SOURCES[kind](tmp_path / "hostile", series)
    run_a = tree / "A"
    shutil.rmtree(run_a, ignore_errors=True)
    shutil.copytree(tmp_path / "hostile", run_a)
    reports = _report(tree, tree)
    assert _same_run(reports["B"], expected)
    a = reports["A"]
    assert a["metrics"]["loss"]["last"] == 10.5 and a["metrics"]["loss"]["count"] == 3
    flags = {flag["kind"] for flag in a["flags"]}
    assert "non_finite" in flags, (kind, flags, hostile)
