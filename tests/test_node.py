"""The node (core.watch.node, `n`): this machine has no NVIDIA driver, so NVML's absence is the real case
here (one line, nothing else breaks); CPU, memory and disks are this machine's own, through psutil.
The pane samples in a thread worker only while it is shown."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import psutil
import pytest

from builders.pilot import SIZE, loaded, make_app, on_screen, screen_as
from builders.tensorboard import write_scalars
from builders.tui import node_samples
from builders.waiting import wait_for
from triage_tui.core.watch.node import NO_DRIVER, NodeSampler, disks_of
from triage_tui.tui.screens.help import HelpScreen
from triage_tui.tui.screens.main import MainScreen
from triage_tui.tui.screens.node import NodeScreen, gpu_lines


def _nvml_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - any failure means no driver to test against here
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_nvml_present(), reason="this machine has an NVIDIA driver")
def test_without_a_driver_the_gpus_are_one_line_and_the_rest_is_sampled(tmp_path):
    sampler = NodeSampler(lambda: [tmp_path])
    first, second = sampler.sample(), sampler.sample()
    sampler.close()
    assert first.gpus == () and first.gpu_error is not None and first.gpu_error.startswith(NO_DRIVER)
    assert first.cpu_percent is None  # psutil's load since the previous call: none yet
    assert second.cpu_percent is not None and 0.0 <= second.cpu_percent <= 100.0
    assert 0 < second.memory_used <= second.memory_total == psutil.virtual_memory().total
    (disk,) = second.disks
    assert disk.runs == 1 and 0 < disk.free <= disk.total


def test_without_nvidia_ml_py_the_gpus_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the import fails as for a missing package
    sample = NodeSampler(lambda: [tmp_path]).sample()
    assert sample.gpus == () and sample.gpu_error == f"{NO_DRIVER} (nvidia-ml-py is not installed)"


def test_runs_on_one_filesystem_share_one_disk_line(tmp_path):
    runs = [tmp_path / "a", tmp_path / "b", tmp_path / "gone"]
    runs[0].mkdir()
    runs[1].mkdir()
    (disk,) = disks_of(runs)  # a directory gone since discovery is left out
    assert disk.runs == 2
    usage = psutil.disk_usage(disk.mount)
    assert disk.total == usage.total and Path(tmp_path).resolve().is_relative_to(disk.mount)


def test_a_gpu_line_shows_its_numbers_and_processes():
    _, two_gpus = node_samples()
    busy, idle = (gpu_lines(gpu).plain for gpu in two_gpus.gpus)
    assert busy.splitlines()[0].startswith("0 H200") and " 97%" in busy and "118.0/140.4 GiB" in busy
    assert "71°C" in busy and "612/700 W" in busy
    assert "48211 python" in busy and "116.0 GiB" in busy and "? GiB" in busy.splitlines()[2]
    assert "no processes" in idle


@pytest.fixture
def runs_root(tmp_path):
    write_scalars(tmp_path / "run-a", {"train/ploss_0": [(0, 10.0), (10, 9.0)]})
    return tmp_path


async def test_n_opens_the_node_and_esc_stops_its_sampling(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("n")
        await on_screen(pilot, NodeScreen, "the node screen")
        screen = app.screen
        assert isinstance(screen, NodeScreen)
        await wait_for(pilot, lambda: screen.samples_shown > 0, what="the first sample")
        assert screen.sample is not None and [d.runs for d in screen.sample.disks] == [1]
        if screen.sample.gpu_error is not None:
            assert NO_DRIVER in str(screen.query_one("#node-gpus").render())
        await pilot.press("escape")
        await on_screen(pilot, MainScreen, "the main screen again")
        await wait_for(
            pilot,
            lambda: all(w.is_finished for w in app.workers if w.group == "node"),
            what="the sampling worker to stop",
        )


async def test_the_pane_samples_off_the_ui_thread_only_while_shown(runs_root):
    _, two_gpus = node_samples()
    calls: list[threading.Thread] = []
    closed = threading.Event()

    def sample():
        calls.append(threading.current_thread())
        return two_gpus

    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        screen = NodeScreen(sample, close=closed.set, interval=0.01)
        await app.push_screen(screen)
        await wait_for(pilot, lambda: screen.samples_shown >= 3, what="three samples")
        app.pop_screen()
        await wait_for(pilot, closed.is_set, what="the sampler closed when the pane went")
        taken = len(calls)
        assert all(thread is not threading.main_thread() for thread in calls)
        await pilot.press("r")  # the app goes on: a key, a refresh
        await pilot.pause()
        assert len(calls) == taken


async def test_help_lists_the_node_key(runs_root):
    app = make_app(runs_root)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await on_screen(pilot, HelpScreen, "the help screen")
        rows = {(key, what) for _, key, what, _ in screen_as(app, HelpScreen).rows}
        assert ("n", "The node: GPUs, CPU, memory, the runs' disks") in rows
