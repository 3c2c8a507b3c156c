"""The one registry of scalar source kinds (core/read/source_kinds/registry.py): `scan --json`, `scalars`
and the TUI's series picker show the same sources and series of a run, with the same points; and a
kind registered here, in the test, reaches all three without another product file changing."""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from textual.widgets import OptionList
from torch.utils.tensorboard import SummaryWriter

from builders.consoles import console_runs
from builders.pilot import SIZE, loaded, make_app, on_screen, screen_as
from triage_tui import cli
from triage_tui.core.read.source_kinds import registry
from triage_tui.core.read.source_kinds.kind import ScalarSourceKind, renewed_on_rename
from triage_tui.core.series import ReadStats, RunScalars
from triage_tui.tui.screens.metric_picker import MetricPickerScreen

EVENT_STEPS = (50, 100, 150)
EVENT_LOSSES = (2.0, 1.5, 1.25)  # exact in float32, as SummaryWriter stores them


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(list(args))
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue(), err.getvalue()


def _scan(path: Path) -> dict:
    _, out, _ = _cli("scan", str(path), "--json", "--poll")
    (run,) = json.loads(out)["runs"]
    return run


def _scalars(path: Path) -> dict[str, dict[str, list]]:
    code, out, err = _cli("scalars", str(path), "--format", "json")
    assert code == 0, err
    return json.loads(out)["tags"]


async def _picker_names(root: Path) -> list[str]:
    """The series the TUI's picker (`t`) offers for the one run under ``root``."""
    app = make_app(root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("t")
        await on_screen(pilot, MetricPickerScreen, "the series picker")
        return list(screen_as(app, MetricPickerScreen).names)


@pytest.fixture(scope="module")
def three_sources(tmp_path_factory) -> Path:
    """A real HF Trainer's output (checkpoint-N/trainer_state.json, builders/consoles.py), its console
    redirected to train.log beside it, and torch's SummaryWriter's event files in runs/."""
    hf = console_runs().hf_unbuffered
    out = tmp_path_factory.mktemp("registry") / "out"
    shutil.copytree(hf.output, out)
    shutil.copy2(hf.log, out / "train.log")
    writer = SummaryWriter(log_dir=str(out / "runs"))
    for step, loss in zip(EVENT_STEPS, EVENT_LOSSES, strict=True):
        writer.add_scalar("train/loss", loss, global_step=step)
    writer.close()
    return out


def test_scalars_offers_every_source_and_series_scan_shows_with_their_points(three_sources):
    run = _scan(three_sources)
    assert run["sources"] == ["tensorboard", "console", "trainer_state"] and run["errors"] == []
    tags = _scalars(three_sources)
    # Each kind's series, under its prefix: the event files keep their tags.
    assert tags["train/loss"]["steps"] == list(EVENT_STEPS) and tags["train/loss"]["values"] == list(EVENT_LOSSES)
    newest = max(three_sources.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name[11:]))
    history = [
        (entry["step"], entry["loss"]) for entry in json.loads(newest.read_text())["log_history"] if "loss" in entry
    ]
    assert list(zip(tags["trainer_state/loss"]["steps"], tags["trainer_state/loss"]["values"], strict=True)) == history
    # The console printed the same dicts (four significant digits), placed at the steps the trainer state says.
    assert tags["console/loss"]["steps"] == [step for step, _ in history]
    assert np.allclose(tags["console/loss"]["values"], [loss for _, loss in history], rtol=1e-3)
    # scan's metrics read the same series scalars exports.
    loss = run["metrics"]["loss"]
    assert loss["tag"] == "train/loss" and loss["count"] == len(EVENT_STEPS) and loss["last"] == EVENT_LOSSES[-1]


def test_the_watcher_the_tui_draws_from_holds_the_same_points_scalars_exports(three_sources):
    from triage_tui.core.watch.watcher import Watcher

    (status,) = Watcher([three_sources], use_watchdog=False).poll_once()
    exported = _scalars(three_sources)
    assert sorted(status.scalars.series) == sorted(exported)
    for tag, series in status.scalars.series.items():
        steps, walls, values = series.columns()
        assert exported[tag] == {"steps": steps.tolist(), "wall_times": walls.tolist(), "values": values.tolist()}, tag


async def test_the_picker_offers_exactly_the_series_scalars_exports(three_sources):
    names = await _picker_names(three_sources)
    assert sorted(names) == sorted(_scalars(three_sources))
    assert {"train/loss", "console/loss", "trainer_state/loss"} <= set(names)


# ----------------------------------------------------------------- one metric, two records


def _history(out: Path, key: str) -> list[tuple[int, float]]:
    """(step, value) of ``key`` in the newest checkpoint's trainer_state.json, as a user reads it."""
    newest = max(out.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name[11:]))
    return [(entry["step"], entry[key]) for entry in json.loads(newest.read_text())["log_history"] if key in entry]


def _hf_console_run(root: Path, *, keep_checkpoints: int | None = None) -> Path:
    """HF Trainer's output with its console in train.log (no tracker: the console and trainer_state.json
    are the run's only records); ``keep_checkpoints``: only the first N checkpoints, as while it runs."""
    hf = console_runs().hf_unbuffered
    out = root / "out"
    shutil.copytree(hf.output, out)
    shutil.copy2(hf.log, out / "train.log")
    if keep_checkpoints is not None:
        ordered = sorted(out.glob("checkpoint-*"), key=lambda p: int(p.name[11:]))
        for later in ordered[keep_checkpoints:]:
            shutil.rmtree(later)
    return out


async def test_a_metric_the_console_and_trainer_state_both_log_is_shown_once_from_the_exact_one(tmp_path):
    out = _hf_console_run(tmp_path)
    history = _history(out, "loss")
    run = _scan(out)
    assert run["sources"] == ["console", "trainer_state"]
    assert run["metrics"]["loss"] == {
        "tag": "loss",
        "last": history[-1][1],
        "min": min(v for _, v in history),
        "count": len(history),
    }
    code, text, err = _cli("scalars", str(out), "--format", "json")
    assert code == 0, err
    document = json.loads(text)
    tags = document["tags"]
    assert list(zip(tags["loss"]["steps"], tags["loss"]["values"], strict=True)) == history  # exact, once
    assert "trainer_state/loss" not in tags
    # The console's printed loss (4 significant digits) is kept, as an alternative of the loss.
    assert document["alternatives"]["console/loss"] == "loss"
    assert tags["console/loss"]["steps"] == [step for step, _ in history]
    assert tags["console/loss"]["values"] != [value for _, value in history]
    assert np.allclose(tags["console/loss"]["values"], [value for _, value in history], rtol=1e-3)

    app = make_app(out)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("t")
        await on_screen(pilot, MetricPickerScreen, "the series picker")
        picker = screen_as(app, MetricPickerScreen)
        assert sorted(picker.names) == sorted(tags)
        await pilot.press(*"console/loss")
        await pilot.pause()
        shown = [str(option.prompt) for option in picker.query_one("#metric-options", OptionList).options]
        assert shown == ["  console/loss · alternative of loss"], shown


def test_the_console_goes_on_where_the_newest_checkpoint_stops(tmp_path):
    # While the trainer runs, trainer_state.json holds what was logged up to the last save; the console
    # has the steps logged since: the loss is the exact history, then the console's points after it.
    out = _hf_console_run(tmp_path, keep_checkpoints=1)
    saved = _history(out, "loss")
    document = json.loads(_cli("scalars", str(out), "--format", "json")[1])
    tags = document["tags"]
    printed = list(zip(tags["console/loss"]["steps"], tags["console/loss"]["values"], strict=True))
    after = [(step, value) for step, value in printed if step > saved[-1][0]]
    assert after, printed  # the console is ahead of the checkpoint
    assert list(zip(tags["loss"]["steps"], tags["loss"]["values"], strict=True)) == saved + after
    assert _scan(out)["metrics"]["loss"]["last"] == after[-1][1]


# ----------------------------------------------------------------- a kind registered by the test alone

TOY_SUFFIX = ".toyscalars"


class ToyScalars:
    """A toy format: lines ``tag step value``, read whole at each poll."""

    kind = "toy"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.files: tuple[Path, ...] = ()
        self.scalars = RunScalars()
        self.problems: dict[Path, str] = {}
        self.damaged: dict[Path, int] = {}

    def set_files(self, paths) -> None:
        self.files = tuple(paths)

    def poll(self) -> ReadStats:
        scalars = RunScalars()
        for path in self.files:
            wall = path.stat().st_mtime
            for line in path.read_text().splitlines():
                tag, step, value = line.split()
                scalars.series_for(self.prefix + tag, None).extend(
                    np.array([int(step)]), np.array([wall]), np.array([float(value)])
                )
        scalars.version = self.scalars.version + 1
        self.scalars = scalars
        return ReadStats(files=len(self.files), records=sum(len(s) for s in scalars.series.values()))


TOY = ScalarSourceKind(
    name="toy",
    prefix="toy/",
    claims=lambda name: name.endswith(TOY_SUFFIX),
    reader=renewed_on_rename(ToyScalars),
)
TOY_LOSSES = ((10, 9.5), (20, 8.25), (30, 7.0))


@pytest.fixture
def toy_registered(monkeypatch):
    monkeypatch.setattr(registry, "SCALAR_SOURCES", (*registry.SCALAR_SOURCES, TOY))


def _toy_run(root: Path) -> Path:
    run = root / "toy-run"
    run.mkdir(parents=True)
    (run / f"metrics{TOY_SUFFIX}").write_text("".join(f"train/loss {step} {loss}\n" for step, loss in TOY_LOSSES))
    return run


def test_a_kind_registered_alone_shows_in_scan_and_scalars(toy_registered, tmp_path):
    run_dir = _toy_run(tmp_path)
    run = _scan(tmp_path)
    assert run["path"] == str(run_dir) and run["sources"] == ["toy"] and run["errors"] == []
    assert run["metrics"]["loss"]["tag"] == "train/loss" and run["metrics"]["loss"]["last"] == TOY_LOSSES[-1][1]
    assert run["last_step"] == TOY_LOSSES[-1][0]
    tags = _scalars(run_dir)
    assert list(tags) == ["train/loss"]
    assert list(zip(tags["train/loss"]["steps"], tags["train/loss"]["values"], strict=True)) == list(TOY_LOSSES)

    # Beside event files it comes after them: its series go under its prefix.
    writer = SummaryWriter(log_dir=str(run_dir / "runs"))
    writer.add_scalar("train/loss", 3.0, global_step=5)
    writer.close()
    assert _scan(tmp_path)["sources"] == ["tensorboard", "toy"]
    assert sorted(_scalars(run_dir)) == ["toy/train/loss", "train/loss"]


async def test_a_kind_registered_alone_shows_in_the_tui(toy_registered, tmp_path):
    _toy_run(tmp_path)
    assert await _picker_names(tmp_path) == ["train/loss"]


def test_without_the_registration_the_toy_run_is_not_a_run(tmp_path):
    """The control: the files alone make nothing (the registration above is what shows them)."""
    _toy_run(tmp_path)
    _, out, _ = _cli("scan", str(tmp_path), "--json", "--poll")
    assert json.loads(out)["runs"] == []


def test_a_metric_a_printed_record_and_any_exact_one_both_log_is_shown_once_from_the_exact_one(tmp_path):
    """Not only HF Trainer's pair: nanoGPT's train.log prints its loss to 4 decimals, and an event
    file beside it (torch's SummaryWriter) records the same loss as logged. ``loss`` is the event
    file's; nanoGPT's printed series is kept as its alternative."""
    fixture = Path(__file__).parent / "fixtures" / "trackers"
    logged = json.loads((fixture / "expected.json").read_text())["chance"]["train/loss"]
    out = tmp_path / "out"
    shutil.copytree(fixture / "nanogpt" / "chance", out)
    writer = SummaryWriter(log_dir=str(out))
    for step, value in logged:
        writer.add_scalar("loss", value, global_step=step)
    writer.close()
    code, text, err = _cli("scalars", str(out), "--format", "json")
    assert code == 0, err
    document = json.loads(text)
    tags = document["tags"]
    assert document["alternatives"] == {"nanogpt/loss": "loss"}
    assert tags["loss"]["steps"] == [step for step, _ in logged]
    assert tags["loss"]["values"] == [float(np.float32(value)) for _, value in logged]  # as SummaryWriter stores it
    assert tags["nanogpt/loss"]["values"] == [round(value, 4) for _, value in logged]  # as nanoGPT printed it
    run = _scan(out)
    assert run["metrics"]["loss"]["tag"] == "loss" and run["metrics"]["loss"]["count"] == len(logged)
