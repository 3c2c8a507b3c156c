"""`n`: the node the runs train on: each GPU, the CPU, the memory, the disks the runs write to.

The screen samples only while it is shown: its own thread worker calls ``sample`` every
``interval`` seconds and posts each ``NodeSample``; popping the screen cancels the worker (Textual
cancels a node's workers when it is removed), so a hidden pane costs nothing. Every name shown
(GPU, process, mount point) is plain Text, never markup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static
from textual.worker import get_current_worker

from triage_tui.core.watch.node import SAMPLE_INTERVAL_SECS, GpuSample, NodeSample
from triage_tui.tui.widgets.keys_footer import KeysFooter

BAR_CELLS = 10
GIB = 1 << 30


def _bar(fraction: float | None, cells: int = BAR_CELLS) -> Text:
    """A usage bar: green, yellow over 70 %, red over 90 %; dim dots when unknown."""
    if fraction is None:
        return Text("·" * cells, style="dim")
    fraction = max(0.0, min(1.0, fraction))
    filled = round(fraction * cells)
    style = "bold red" if fraction >= 0.9 else "yellow" if fraction >= 0.7 else "green"
    bar = Text()
    bar.append("█" * filled, style=style)
    bar.append("░" * (cells - filled), style="dim")
    return bar


def _gib(value: int | None) -> str:
    return f"{value / GIB:.1f}" if value is not None else "?"


def _size(value: int) -> str:
    """Bytes for a disk: GiB under a TiB, TiB above."""
    return f"{value / GIB:.0f} GiB" if value < 1024 * GIB else f"{value / (1024 * GIB):.1f} TiB"


def gpu_lines(gpu: GpuSample) -> Text:
    """A GPU's line (utilisation, memory, temperature, power), then one line per process on it."""
    text = Text()
    text.append(f"{gpu.index} ", style="bold")
    text.append(f"{gpu.name.removeprefix('NVIDIA ')[:14]:<14} ")  # every name here is NVIDIA's
    text.append_text(_bar(gpu.utilization / 100 if gpu.utilization is not None else None))
    text.append(f" {gpu.utilization if gpu.utilization is not None else '?':>3}%  ")
    used, total = gpu.memory_used, gpu.memory_total
    text.append_text(_bar(used / total if used is not None and total else None, 6))
    text.append(f" {_gib(used)}/{_gib(total)} GiB")
    if gpu.temperature is not None:
        hot = gpu.temperature >= 85  # NVIDIA datacenter parts throttle in the upper 80s deg C
        text.append(f"  {gpu.temperature}°C", style="bold red" if hot else "")
    if gpu.power is not None:
        limit = f"/{gpu.power_limit:.0f}" if gpu.power_limit is not None else ""
        text.append(f"  {gpu.power:.0f}{limit} W")
    for process in gpu.processes:
        memory = f"{_gib(process.memory)} GiB" if process.memory is not None else "? GiB"
        text.append(f"\n    {process.pid:>7} {process.name[:24]:<24} {memory:>10}", style="dim")
    if not gpu.processes:
        text.append("\n    no processes", style="dim")
    return text


def gpus_text(sample: NodeSample) -> Text:
    if sample.gpu_error is not None:
        return Text(sample.gpu_error, style="dim")
    if not sample.gpus:
        return Text("no GPUs", style="dim")
    return Text("\n").join(gpu_lines(gpu) for gpu in sample.gpus)


def host_text(sample: NodeSample) -> Text:
    text = Text()
    cpu = sample.cpu_percent
    text.append("CPU    ")
    text.append_text(_bar(cpu / 100 if cpu is not None else None))
    text.append(f" {f'{cpu:.0f}' if cpu is not None else '?':>3}% of {sample.cpu_count} cores\n")
    text.append("memory ")
    text.append_text(_bar(sample.memory_used / sample.memory_total if sample.memory_total else None))
    text.append(f" {_gib(sample.memory_used)}/{_gib(sample.memory_total)} GiB")
    return text


def disks_text(sample: NodeSample) -> Text:
    if not sample.disks:
        return Text("no run directory to look at", style="dim")
    lines = []
    for disk in sample.disks:
        line = Text()
        used = 1 - disk.free / disk.total if disk.total else None
        line.append_text(_bar(used))
        line.append(f" {_size(disk.free)} free of {_size(disk.total)}  ")
        line.append(f"{disk.runs} run{'s' if disk.runs != 1 else ''}  ", style="dim")
        line.append(disk.mount)
        lines.append(line)
    return Text("\n").join(lines)


class NodeScreen(Screen):
    """GPUs, host and disks, sampled off the UI thread while shown. Esc or n goes back."""

    HELP_TITLE = "node"
    BINDING_GROUP_TITLE = "Node"
    BINDINGS = [Binding("escape,n,backspace", "app.pop_screen", "Back", key_display="esc", id="back")]

    @dataclass
    class Sampled(Message):
        sample: NodeSample

    def __init__(
        self,
        sample: Callable[[], NodeSample],
        *,
        close: Callable[[], None] | None = None,
        interval: float = SAMPLE_INTERVAL_SECS,
    ) -> None:
        """``sample``: takes one look at the node (core.watch.node.NodeSampler.sample, or a fixed value in
        tests); ``close``: called in the worker when sampling stops (NVML's shutdown)."""
        super().__init__()
        self.sample_node = sample
        self.close_sampler = close
        self.interval = interval
        self.sample: NodeSample | None = None
        self.samples_shown = 0

    def compose(self) -> ComposeResult:
        yield Static(Text(" node ", style="bold reverse"), id="node-title")
        with VerticalScroll(id="node-body"):
            yield Static(Text("sampling …", style="dim"), id="node-gpus", classes="pane")
            yield Static("", id="node-host", classes="pane")
            yield Static("", id="node-disks", classes="pane")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#node-gpus").border_title = "GPUs"
        self.query_one("#node-host").border_title = "host"
        self.query_one("#node-disks").border_title = "disks the runs write to"
        self._sample_loop()

    @work(thread=True, exclusive=True, group="node", exit_on_error=False, description="sample the node")
    def _sample_loop(self) -> None:
        stop = get_current_worker().cancelled_event
        try:
            while not stop.is_set():
                self.post_message(self.Sampled(self.sample_node()))
                stop.wait(self.interval)
        finally:
            if self.close_sampler is not None:
                self.close_sampler()

    def on_node_screen_sampled(self, message: Sampled) -> None:
        sample = self.sample = message.sample
        title = Text(" node ", style="bold reverse")
        title.append(f"  {sample.hostname}")
        if sample.driver is not None:
            title.append(f"  · driver {sample.driver}", style="dim")
        title.append(f"  · every {self.interval:g} s", style="dim")
        self.query_one("#node-title", Static).update(title)
        self.query_one("#node-gpus", Static).update(gpus_text(sample))
        self.query_one("#node-host", Static).update(host_text(sample))
        self.query_one("#node-disks", Static).update(disks_text(sample))
        self.query_one("#node-gpus").border_title = f"GPUs · {len(sample.gpus)}" if sample.gpus else "GPUs"
        self.samples_shown += 1
