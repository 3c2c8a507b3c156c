"""Training consoles read as scalars (core/read/console/): logs written by the trainers' and launchers' own
code (tests/builders/consoles.py), followed as they grow, rotate and are truncated."""

from __future__ import annotations

import ast
import contextlib
import io
import itertools
import logging
import logging.handlers
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

from builders.consoles import (
    DRAFT_VOCAB,
    console_runs,
    rank0_traceback_console,
    specforge_lines,
    torchrun_tee,
)
from triage_tui.core.formats.trainer_state import read_trainer_state
from triage_tui.core.read.console import tuning
from triage_tui.core.read.console.follow import ConsoleFile
from triage_tui.core.read.console.lines import plain, progress, split_rank
from triage_tui.core.read.console.literal import LiteralError, number, parse_literal
from triage_tui.core.read.console.reader import ConsoleLogs
from triage_tui.core.read.console.record import SPECFORGE
from triage_tui.core.read.console.steps import INFERRED, PROGRESS_BAR, TRAINER_STATE
from triage_tui.core.series import overlay


def read_all(*paths: Path, state=None) -> ConsoleLogs:
    logs = ConsoleLogs()
    logs.set_files(list(paths))
    if state is not None:
        logs.set_trainer_state(state)
    logs.poll()
    logs.poll()  # a quiet poll: records waiting on a next line are settled
    return logs


def series(logs: ConsoleLogs, tag: str) -> tuple[list[int], list[float]]:
    found = logs.scalars.get(tag)
    assert found is not None, f"{tag} not in {sorted(logs.scalars.series)}"
    return found.steps.tolist(), found.values.tolist()


def metrics(step: int, *, rank_perf: float = 0.5) -> dict:
    """What SpecForge's controller hands its console logger (keys of ``_reduce_eagle3_metrics``)."""
    ploss = [math.log(DRAFT_VOCAB) - step / 1000 - k / 100 for k in range(3)]
    found = {f"ploss_{k}": ploss[k] for k in range(3)}
    found.update({f"acc_{k}": step / 10_000 for k in range(3)})
    found.update({"loss": sum(0.8**k * p for k, p in enumerate(ploss)), "grad_norm": 1.5, "lr": 1e-4})
    found["perf/optimizer_step_time_s"] = rank_perf
    return found


# --------------------------------------------------------------------------- the parser of literals


def test_literals_trainers_print_are_read_and_nothing_is_evaluated():
    text = "{'loss': nan, 'a': -inf, 'b': [1, 2.5e-05], 'c': np.float64(1.5), 'd': 'x\\'y'}"
    value, end = parse_literal(text + " tail")
    assert math.isnan(value["loss"]) and value["a"] == -math.inf and value["b"] == [1, 2.5e-05]
    assert value["c"] == 1.5 and value["d"] == "x'y" and end == len(text)
    assert parse_literal("tensor(2.0, device='cuda:0', dtype=torch.float32)")[0] == 2.0
    assert parse_literal("{'t': True, 'n': None}")[0] == {"t": True, "n": None}
    for hostile in ("__import__('os').system('true')", "{'a': open('x')}", "{'a': 1 + 1}", "{1: 2}", "[1, 2"):
        with pytest.raises(LiteralError):
            parse_literal(hostile)


def test_impossible_numbers_and_deep_nesting_are_literal_errors():
    with pytest.raises(LiteralError, match="beyond a float"):
        parse_literal("{'loss': 1e999}")
    with pytest.raises(LiteralError, match="digits"):
        parse_literal("{'loss': " + "9" * 5000 + "}")
    with pytest.raises(LiteralError, match="nested deeper"):
        parse_literal("[" * (tuning.MAX_DEPTH + 2) + "]" * (tuning.MAX_DEPTH + 2))
    assert number("nan") is not None and math.isnan(number("nan"))
    assert number("-inf") == -math.inf and number("1.00e-04") == 1e-4 and number("abc") is None


def test_lines_are_made_plain_and_prefixes_split_as_the_launchers_write_them():
    assert plain("\x1b[2;36m[15:05:07]\x1b[0m \x1b[34mINFO\x1b[0m x\x1b[A") == "[15:05:07] INFO x"
    assert split_rank("[default3]:step 1: {}") == (3, "step 1: {}")
    assert split_rank("[rank0]: Traceback (most recent call last):") == (0, "Traceback (most recent call last):")
    assert split_rank("[15:05:07] INFO") == (None, "[15:05:07] INFO")
    bar = progress(" 50%|█████     | 4/8 [00:03<00:03,  1.21it/s]")
    assert bar is not None and (bar.n, bar.total, bar.desc) == (4, 8, "")
    assert (
        progress("Writing model shards: 100%|██████████| 1/1 [00:00<00:00, 90.30it/s]").desc == "Writing model shards"
    )


# --------------------------------------------------------------------------- SpecForge, by its own trainer


@pytest.fixture(scope="module")
def runs():
    return console_runs()


@pytest.fixture(scope="module")
def specforge_run(runs):
    return runs.specforge


def printed_dicts(path: Path) -> list[tuple[int, dict]]:
    """The oracle: each ``step N: {...}`` line read by Python's own literal_eval (no NaN in this run)."""
    found = []
    for line in path.read_text().splitlines():
        match = re.match(r"step (\d+): (\{.*\})$", line)
        if match:
            found.append((int(match.group(1)), ast.literal_eval(match.group(2))))
    return found


def test_a_specforge_console_is_its_curves_at_the_printed_steps(specforge_run):
    logs = read_all(specforge_run.console)
    oracle = printed_dicts(specforge_run.console)
    train = [(step, d) for step, d in oracle if "ploss_0" in d]
    assert [step for step, _ in train] == list(range(3, 31, 3))
    assert series(logs, "ploss_0") == ([s for s, _ in train], [d["ploss_0"] for _, d in train])
    # Near ln 32 000 from the start: the chance line this run is flagged against.
    assert abs(series(logs, "ploss_0")[1][0] - math.log(DRAFT_VOCAB)) < 0.5
    evals = [(step, d) for step, d in oracle if "eval/simulated_acc_len" in d]
    assert [s for s, _ in evals] == [10, 20, 30]
    assert series(logs, "eval/simulated_acc_len") == ([10, 20, 30], [d["eval/simulated_acc_len"] for _, d in evals])
    # Lists become name/i, as SpecForge's trackers name them.
    assert series(logs, "eval/per_position_acc/2")[1] == [d["eval/per_position_acc"][2] for _, d in evals]
    assert logs.damaged == {} and logs.inferred() == {}
    (note,) = logs.notes()
    assert "SpecForge records (13 printed)" in note and "no known format" not in note


def test_specforge_lines_beside_a_tracker_keep_the_trackers_names():
    from specforge.tracker import NoOpTracker
    from specforge.training.assembly import _logger
    from specforge.training.tracking import TrackerLogger

    logger = TrackerLogger(NoOpTracker(None, "."), console_logger=_logger)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        logger({**metrics(5), "acces": [0.5, 0.25]}, 5)
        logger({"eval/per_position_acc": [0.5, 0.3], "eval/simulated_acc_len": 0.65}, 5)
    (record, evaluation) = [r for line in out.getvalue().splitlines() if (r := _one(line)) is not None]
    names = dict(record.values)
    assert names["train/ploss_0"] == metrics(5)["ploss_0"] and names["train/acces/1"] == 0.25
    assert dict(evaluation.values) == {
        "eval/per_position_acc/0": 0.5,
        "eval/per_position_acc/1": 0.3,
        "eval/simulated_acc_len": 0.65,
    }


def _one(line: str):
    from triage_tui.core.read.console import specforge

    return specforge.parse(line)


# --------------------------------------------------------------------------- HF Trainer, by its own Trainer


@pytest.fixture(scope="module")
def hf_unbuffered(runs):
    return runs.hf_unbuffered


@pytest.fixture(scope="module")
def hf_buffered(runs):
    return runs.hf_buffered


def newest_state(run):
    return read_trainer_state(run.newest_trainer_state)


def history(state, key: str) -> tuple[list[int], list[float]]:
    pairs = [(e.step, dict(e.values)[key]) for e in state.log_history if key in dict(e.values)]
    return [s for s, _ in pairs], [v for _, v in pairs]


def test_hf_trainer_dicts_take_their_steps_from_the_progress_bar_when_it_is_in_order(hf_unbuffered):
    logs = read_all(hf_unbuffered.log)
    state = newest_state(hf_unbuffered)  # the oracle: the trainer's own log_history
    steps, values = history(state, "loss")
    assert steps == list(range(2, 13, 2))
    assert series(logs, "loss") == (steps, [float(f"{v:.4g}") for v in values])  # printed with {:.4g}
    assert series(logs, "eval_loss")[0] == [6, 12]
    assert series(logs, "train_loss")[0] == [12]  # the summary, logged after the last save
    assert logs.inferred() == {}
    (note,) = logs.notes()
    assert f"HF Trainer records (9 {PROGRESS_BAR})" in note and "no known format" not in note


def test_buffered_hf_dicts_are_inferred_until_a_checkpoint_says_their_steps(hf_buffered):
    logs = read_all(hf_buffered.log)
    # stdout block-buffered: the dicts landed away from the bar; no step can be taken from it.
    assert logs.inferred()["loss"] == 6
    assert series(logs, "loss")[0] == [1, 2, 3, 4, 5, 6]  # the dict's ordinal: logging_steps unknown
    state = read_trainer_state(hf_buffered.output / "checkpoint-10" / "trainer_state.json")
    logs.set_trainer_state(state)
    # Up to the checkpoint, the logged steps; after it, logging_steps (2, from the state) on from there.
    assert series(logs, "loss")[0] == [2, 4, 6, 8, 10, 12]
    assert series(logs, "eval_loss")[0] == [6, 12]
    assert logs.inferred() == {"loss": 1, "grad_norm": 1, "learning_rate": 1, "epoch": 3, "eval_loss": 1,
                               "eval_runtime": 1, "eval_samples_per_second": 1, "eval_steps_per_second": 1,
                               "train_runtime": 1, "train_samples_per_second": 1, "train_steps_per_second": 1,
                               "train_loss": 1}  # fmt: skip
    (note,) = logs.notes()
    assert f"6 {TRAINER_STATE}" in note and f"3 {INFERRED}" in note


def test_a_checkpoint_history_under_the_console_adds_no_point_twice(hf_buffered):
    state = read_trainer_state(hf_buffered.output / "checkpoint-10" / "trainer_state.json")
    logs = read_all(hf_buffered.log, state=state)
    merged = overlay(state.scalars().series["loss"], logs.scalars.series["loss"])
    assert merged.steps.tolist() == [2, 4, 6, 8, 10, 12]
    # The live (console) series wins over its range: its printed values.
    assert merged.values.tolist() == series(logs, "loss")[1]


# --------------------------------------------------------------------------- speculators, by its own loggers


@pytest.fixture(scope="module")
def speculators_log(runs):
    return runs.speculators


def test_speculators_rich_records_are_joined_across_their_wrapped_lines(speculators_log):
    text = speculators_log.read_text()
    assert text.count("INFO") == 9 and max(len(line) for line in text.splitlines()) <= 80  # wrapped at 80
    logs = read_all(speculators_log)
    steps, values = series(logs, "train/loss_0")
    assert steps == [0, 1, 2, 3, 4, 5]
    expected = [float(f"{math.log(DRAFT_VOCAB) - s / 10:.3f}") for s in steps]
    assert np.array_equal(
        values, [math.nan if s == 3 else e for s, e in zip(steps, expected, strict=True)], equal_nan=True
    )
    assert series(logs, "lr")[1] == [3e-4] * 6 and series(logs, "global_step")[1] == [0, 1, 2, 3, 4, 5]
    assert series(logs, "train/full_acc_1")[1][2] == float(f"{2 / 1000 / 2:.2e}")  # below 0.001: {:.2e}
    # The validation record prints no step: the last training record's, said as inferred.
    assert series(logs, "val/loss_epoch") == ([5], [29.5])
    assert logs.inferred() == {"val/loss_epoch": 1, "val/full_acc_0_epoch": 1, "epoch": 1}
    (note,) = logs.notes()
    assert "speculators records (1 inferred, 6 printed)" in note and "2 line(s) of no known format" in note


def test_colours_do_not_change_what_is_read(runs, speculators_log):
    coloured = runs.speculators_coloured
    assert "\x1b[" in coloured.read_text()  # rich, told to colour, wrote its escapes into the file
    plain_logs, coloured_logs = read_all(speculators_log), read_all(coloured)
    assert sorted(coloured_logs.scalars.series) == sorted(plain_logs.scalars.series)
    for tag in plain_logs.scalars.series:
        a, b = plain_logs.scalars.series[tag], coloured_logs.scalars.series[tag]
        assert a.steps.tolist() == b.steps.tolist() and np.array_equal(a.values, b.values, equal_nan=True)


# --------------------------------------------------------------------------- launchers and ranks


def test_torchrun_tee_reads_rank_zero_and_counts_the_others(tmp_path):
    ranks = []
    for rank in (0, 1):
        path = tmp_path / f"{rank}_stdout.log"
        path.write_text(specforge_lines([(s, metrics(s, rank_perf=0.5 + rank)) for s in (5, 10, 15)]))
        ranks.append((rank, path))
    logs = read_all(torchrun_tee(tmp_path / "tee.log", ranks))
    assert (tmp_path / "tee.log").read_text().startswith("[default0]:step 5: {")
    assert series(logs, "ploss_0") == ([5, 10, 15], [metrics(s)["ploss_0"] for s in (5, 10, 15)])
    assert series(logs, "perf/optimizer_step_time_s")[1] == [0.5, 0.5, 0.5]  # rank 0's own
    (note,) = logs.notes()
    assert "rank 0's lines" in note and "3 line(s) of other ranks skipped" in note
    # A log of one worker that is not rank 0: that rank is read.
    only = read_all(torchrun_tee(tmp_path / "one.log", ranks[1:]))
    assert series(only, "perf/optimizer_step_time_s")[1] == [1.5, 1.5, 1.5]
    assert "rank 1's lines" in only.notes()[0]


def test_every_rank_printing_to_one_file_counts_once(tmp_path):
    """Without a launcher's prefixes every rank's copy lands in the file; SpecForge's are equal but
    for the perf/ timings."""
    lines = specforge_lines([(s, metrics(s, rank_perf=0.5 + r)) for s in (5, 10) for r in range(4)])
    path = tmp_path / "nohup.out"
    path.write_text(lines)
    logs = read_all(path)
    assert series(logs, "ploss_0")[0] == [5, 10]
    assert "6 line(s) of other ranks skipped" in logs.notes()[0]


def test_a_worker_that_died_keeps_its_points_and_its_traceback_is_no_metric(tmp_path):
    log = rank0_traceback_console(tmp_path, specforge_lines([(5, metrics(5)), (10, metrics(10))]))
    text = log.read_text()
    assert "[rank0]: Traceback (most recent call last):" in text
    logs = read_all(log)
    assert series(logs, "ploss_0")[0] == [5, 10] and logs.damaged == {}
    note = logs.notes()[0]
    assert "rank 0's lines" in note and "line(s) of no known format ignored" in note


# --------------------------------------------------------------------------- following a live file


def test_a_partial_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "train.log"
    line = specforge_lines([(5, metrics(5))])
    path.write_text(line[:40])
    follower = ConsoleFile(path)
    assert list(itertools.chain(*follower.poll())) == []
    with open(path, "a") as handle:
        handle.write(line[40:])
    (record,) = itertools.chain(*follower.poll())
    assert record.trainer == SPECFORGE and record.step == 5 and dict(record.values)["ploss_0"] == metrics(5)["ploss_0"]
    assert list(itertools.chain(*follower.poll())) == []  # only what was appended is read


def test_rotation_by_a_rotating_handler_loses_no_line(tmp_path):
    path = tmp_path / "train.log"
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=1500, backupCount=3)
    handler.setFormatter(logging.Formatter("%(message)s"))
    writer = logging.getLogger(f"rotating-{tmp_path.name}")
    writer.propagate = False
    writer.addHandler(handler)
    logs = ConsoleLogs()
    logs.set_files([path])
    try:
        for step in range(1, 21):
            writer.warning(specforge_lines([(step, metrics(step))]).rstrip("\n"))
            logs.poll()  # at most one rotation between two polls
    finally:
        handler.close()
    logs.poll()
    assert len(list(tmp_path.glob("train.log.*"))) >= 2  # it rotated
    assert series(logs, "ploss_0")[0] == list(range(1, 21))


def test_truncation_reads_the_file_again_from_its_start(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(specforge_lines([(s, metrics(s)) for s in (5, 10, 15)]))
    logs = read_all(path)
    # Rewritten in place by a new run from its start (`> train.log` again): shorter than the offset.
    path.write_text(specforge_lines([(5, metrics(6))]))
    logs.poll()
    steps, values = series(logs, "ploss_0")
    assert steps == [5] and values == [metrics(6)["ploss_0"]]  # the new run's point replaces the old ones
    assert logs.scalars.series["ploss_0"].restarts == (5,)


def test_damage_is_counted_and_the_lines_after_it_are_read(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "MAX_LINE_BYTES", 4096)
    good = specforge_lines([(s, metrics(s)) for s in (5, 10)]).splitlines()
    path = tmp_path / "train.log"
    path.write_text(
        "\n".join(
            [
                good[0],
                "step 6: {'loss': 1e999}",  # a number beyond a float
                "step 99999999999999999999: {'loss': 1.0}",  # a step beyond int64
                "step 7: {'loss': " + "[" * 20 + "]" * 20 + "}",  # nested past the bound
                "step 8: {'loss': nan, 'acc_0': inf}",  # non-finite values are points
                "x" * 10_000,  # a line too long to be any trainer's
                "{'loss': '1.5', 'epoch': '0.5'",  # an HF dict cut short
                "a line of no known format",
                good[1],
                "",
            ]
        )
    )
    logs = read_all(path)
    assert series(logs, "ploss_0")[0] == [5, 10]
    steps, values = series(logs, "loss")
    assert steps == [5, 8, 10] and math.isnan(values[1])
    assert series(logs, "acc_0")[1][1] == math.inf
    assert logs.damaged == {path: 5}
    assert "1 line(s) of no known format" in logs.notes()[0]


def test_a_missing_or_odd_console_file_is_a_problem_not_an_exception(tmp_path):
    logs = ConsoleLogs()
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    (tmp_path / "dir.log").mkdir()
    logs.set_files([tmp_path / "later.log", fifo, tmp_path / "dir.log"])
    logs.poll()  # a FIFO must not hang the poll
    assert logs.problems == {
        tmp_path / "later.log": "no such file (yet)",
        fifo: "not a regular file",
        tmp_path / "dir.log": "not a regular file",
    }
    (tmp_path / "later.log").write_text(specforge_lines([(5, metrics(5))]))
    logs.poll()
    assert tmp_path / "later.log" not in logs.problems and series(logs, "ploss_0")[0] == [5]


def test_several_consoles_of_one_run_merge_without_counting_a_step_twice(tmp_path):
    first = tmp_path / "slurm-101.out"
    first.write_text(specforge_lines([(s, metrics(s)) for s in (3, 6, 9, 12)]))
    resumed = tmp_path / "slurm-102.out"  # a later job resumed from step 6's checkpoint
    resumed.write_text(specforge_lines([(s, metrics(s + 100)) for s in (9, 12, 15)]))
    os.utime(first, (1_000, 1_000))
    os.utime(resumed, (2_000, 2_000))
    logs = read_all(first, resumed)
    steps, values = series(logs, "ploss_0")
    assert steps == [3, 6, 9, 12, 15]
    assert values[2:] == [metrics(s + 100)["ploss_0"] for s in (9, 12, 15)]  # the later job's
    assert logs.scalars.series["ploss_0"].restarts == (9,)
    # The same log twice (train.log beside the SLURM copy): nothing added, no restart.
    copy = tmp_path / "train.log"
    copy.write_bytes(first.read_bytes())
    logs = read_all(first, copy)
    assert series(logs, "ploss_0")[0] == [3, 6, 9, 12] and logs.scalars.series["ploss_0"].restarts == ()


# --------------------------------------------------------------------------- the trainer a console names


def test_each_console_is_recognised_as_its_trainer_and_its_loss_is_the_per_position_one(runs):
    from triage_tui.core.metric_names import match_trainer
    from triage_tui.core.watch.signals.tags import comparable_to_chance, pick_metric_tags

    cases = (
        (runs.specforge.console, "specforge", "ploss_0", "acc_0"),
        (runs.hf_unbuffered.log, "hf-trainer", "loss", None),
        (runs.speculators, "speculators", "train/loss_0", "train/full_acc_0"),
    )
    for path, trainer, loss, accuracy in cases:
        tags = read_all(path).scalars.tags()
        assert match_trainer(tags).trainer == trainer, path
        losses, accuracies = pick_metric_tags(tags)
        assert losses[0] == loss and (accuracies[0] if accuracies else None) == accuracy, path
    # SpecForge's bare "loss" sums its positions (0.8**i weights): never compared with ln V.
    tags = read_all(runs.specforge.console).scalars.tags()
    assert not comparable_to_chance("loss", tags) and comparable_to_chance("ploss_0", tags)


def test_the_console_says_where_wandb_keeps_a_run_outside_the_output_directory(tmp_path):
    """SpecForge's W&B directory defaults to its checkout; W&B prints where it is."""
    import wandb
    from wandb.sdk.lib.printer import new_printer

    checkout = "/opt/SpecForge/wandb/offline-run-20261202_153000-k2abc"
    out = io.StringIO()
    with contextlib.redirect_stderr(out):  # wandb.init prints it to stderr, prefixed "wandb: "
        wandb.termlog(f"Run data is saved locally in {new_printer().files(checkout)}")
    path = tmp_path / "train.log"
    path.write_text(out.getvalue() + specforge_lines([(5, metrics(5))]))
    logs = read_all(path)
    assert logs.wandb_dirs() == (checkout,) and series(logs, "ploss_0")[0] == [5]


@pytest.mark.parametrize("name", ["specforge", "hf_unbuffered", "hf_buffered", "speculators"])
def test_reading_as_it_grows_gives_what_reading_it_whole_gives(runs, tmp_path, name):
    import random

    source = {
        "specforge": runs.specforge.console,
        "hf_unbuffered": runs.hf_unbuffered.log,
        "hf_buffered": runs.hf_buffered.log,
        "speculators": runs.speculators,
    }[name]
    data = source.read_bytes()
    whole = read_all(source)
    rng = random.Random(name)
    path = tmp_path / "train.log"
    path.write_bytes(b"")
    growing = ConsoleLogs()
    growing.set_files([path])
    position = 0
    while position < len(data):  # appended in pieces that cut lines, bars and records anywhere
        size = rng.randint(1, 300)
        with open(path, "ab") as handle:
            handle.write(data[position : position + size])
        position += size
        growing.poll()
    growing.poll()
    assert sorted(growing.scalars.series) == sorted(whole.scalars.series)
    for tag, expected in whole.scalars.series.items():
        got = growing.scalars.series[tag]
        assert got.steps.tolist() == expected.steps.tolist(), tag
        assert np.array_equal(got.values, expected.values, equal_nan=True), tag


def test_flipped_bits_and_cut_files_never_raise(runs, tmp_path):
    import random

    rng = random.Random(7)
    for source in (runs.specforge.console, runs.hf_unbuffered.log, runs.speculators_coloured):
        data = source.read_bytes()
        for trial in range(20):
            damaged = bytearray(data[: rng.randrange(len(data))] if trial % 4 == 0 else data)
            for _ in range(rng.randint(1, 40)):
                damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
            path = tmp_path / f"{source.parent.name}-{trial}.log"
            path.write_bytes(bytes(damaged))
            logs = read_all(path)
            for found in logs.scalars.series.values():
                assert (found.steps >= 0).all() and not any(c in found.tag for c in "\x1b\r\n")


def test_a_poll_says_what_it_read(tmp_path):
    from triage_tui.core.series import ReadStats

    path = tmp_path / "train.log"
    text = specforge_lines([(5, metrics(5)), (10, metrics(10))])
    path.write_text(text)
    logs = ConsoleLogs()
    logs.set_files([path, tmp_path / "missing.log"])
    points = 2 * len(metrics(5))
    assert logs.poll() == ReadStats(
        files=2, bytes_read=len(text.encode()), records=2, scalars=points, unreadable_files=1
    )
    assert logs.poll() == ReadStats(files=2, unreadable_files=1)
    path.write_text(specforge_lines([(5, metrics(5))]))  # rewritten: shorter than what was read
    stats = logs.poll()
    assert (stats.records, stats.resets) == (1, 1)
