"""The node a run trains on: each GPU (NVML), the CPU, the memory, and the free space where the runs write.

``NodeSampler.sample`` takes one ``NodeSample``: a frozen value the TUI's node pane shows (its
worker calls it off the UI thread, only while the pane is shown). Nothing here raises for a node
without a GPU: no NVIDIA driver (or no NVML library) is one line, ``gpu_error``.

GPUs through NVML with NVIDIA's own Python binding, ``nvidia-ml-py`` (module ``pynvml``, the
library nvitop uses), API as of nvidia-ml-py 13.615 (``pynvml.py``): ``nvmlInit`` loads
``libnvidia-ml.so.1`` (``NVMLError_LibraryNotFound`` without it, ``NVMLError_DriverNotLoaded``
without a driver); per device ``nvmlDeviceGetUtilizationRates(h).gpu`` (percent over the last sample
period), ``nvmlDeviceGetMemoryInfo(h).used/.total`` (bytes), ``nvmlDeviceGetTemperature(h,
NVML_TEMPERATURE_GPU)`` (deg C), ``nvmlDeviceGetPowerUsage`` and ``nvmlDeviceGetEnforcedPowerLimit``
(milliwatts), ``nvmlDeviceGetComputeRunningProcesses(h)`` (``pid``, ``usedGpuMemory`` in bytes or
None where the driver cannot say, e.g. under MIG or in a container). A field a device does not
support (``NVMLError_NotSupported``) is None, never a failure of the sample.

CPU, memory and disks through ``psutil``: ``cpu_percent(interval=None)`` (the load since the previous
call: the first sample has none), ``virtual_memory()``, ``disk_usage(path)`` (``free``: what an
unprivileged writer may still use, statvfs ``f_bavail``).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from triage_tui.core.text import printable

NO_DRIVER = "no NVIDIA driver"
# The pane's sampling period while it is shown: nvitop's default interval (2 s); NVML's utilisation
# is itself an average over the driver's sample period (1/6 s to 1 s depending on the product).
SAMPLE_INTERVAL_SECS = 2.0


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str  # the executable's name (psutil), "?" when this node cannot see it (another container)
    memory: int | None  # bytes of GPU memory; None where the driver cannot say


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    utilization: int | None  # percent
    memory_used: int | None  # bytes
    memory_total: int | None
    temperature: int | None  # deg C
    power: float | None  # watts
    power_limit: float | None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class DiskSample:
    """The filesystem a group of watched runs writes to."""

    mount: str  # its mount point
    free: int  # bytes an unprivileged writer may still use
    total: int
    runs: int  # how many of the watched runs write there


@dataclass(frozen=True)
class NodeSample:
    """One look at the node: what the node pane shows."""

    hostname: str
    cpu_percent: float | None  # of all cores; None on the first sample
    cpu_count: int
    memory_used: int  # bytes
    memory_total: int
    gpus: tuple[GpuSample, ...] = ()
    gpu_error: str | None = None  # NO_DRIVER and why; None when NVML answered
    driver: str | None = None  # the NVIDIA driver's version
    disks: tuple[DiskSample, ...] = ()
    taken_at: float = field(default=0.0, compare=False)


def _text(value: Any) -> str:
    """NVML strings come as bytes from older bindings and str from newer ones."""
    return printable(value.decode("utf-8", "replace") if isinstance(value, bytes) else value)


def _mount_point(path: str) -> str:
    """The mount point above ``path``: the highest directory on the same device."""
    path = os.path.realpath(path)
    device = os.stat(path).st_dev
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return path
        try:
            if os.stat(parent).st_dev != device:
                return path
        except OSError:
            return path
        path = parent


def disks_of(run_dirs: Iterable[Path]) -> tuple[DiskSample, ...]:
    """One ``DiskSample`` per filesystem the runs write to, least free space first."""
    by_device: dict[int, tuple[str, int]] = {}
    for run_dir in run_dirs:
        try:
            device = os.stat(run_dir).st_dev
        except OSError:
            continue  # gone since discovery
        mount, count = by_device.get(device) or (_mount_point(str(run_dir)), 0)
        by_device[device] = (mount, count + 1)
    disks = []
    for mount, count in by_device.values():
        try:
            usage = psutil.disk_usage(mount)
        except OSError:
            continue
        disks.append(DiskSample(printable(mount), int(usage.free), int(usage.total), count))
    return tuple(sorted(disks, key=lambda disk: (disk.free, disk.mount)))


class NodeSampler:
    """Samples the node; NVML is initialised on the first sample and shut down by ``close``."""

    def __init__(self, run_dirs: Callable[[], Iterable[Path]] = tuple) -> None:
        """``run_dirs``: the watched runs' directories now (their filesystems' free space is shown)."""
        self.run_dirs = run_dirs
        self._nvml: Any = None
        self._nvml_error: str | None = None
        self._cpu_primed = False

    def _init_nvml(self) -> None:
        if self._nvml is not None or self._nvml_error is not None:
            return
        try:
            import pynvml
        except ImportError:
            self._nvml_error = f"{NO_DRIVER} (nvidia-ml-py is not installed)"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            self._nvml_error = f"{NO_DRIVER} ({_text(err)})"
            return
        self._nvml = pynvml

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._nvml = None

    def sample(self) -> NodeSample:
        cpu = psutil.cpu_percent(interval=None)
        cpu_percent = cpu if self._cpu_primed else None
        self._cpu_primed = True
        memory = psutil.virtual_memory()
        self._init_nvml()
        gpus: tuple[GpuSample, ...] = ()
        driver = None
        error = self._nvml_error
        if self._nvml is not None:
            try:
                driver = _text(self._nvml.nvmlSystemGetDriverVersion())
                gpus = tuple(self._gpu(i) for i in range(self._nvml.nvmlDeviceGetCount()))
            except self._nvml.NVMLError as err:  # the driver went away (a GPU fell off the bus)
                error = f"NVML failed: {_text(err)}"
        return NodeSample(
            hostname=printable(socket.gethostname()),
            cpu_percent=cpu_percent,
            cpu_count=psutil.cpu_count() or 1,
            memory_used=int(memory.total - memory.available),
            memory_total=int(memory.total),
            gpus=gpus,
            gpu_error=error,
            driver=driver,
            disks=disks_of(self.run_dirs()),
            taken_at=time.time(),
        )

    def _gpu(self, index: int) -> GpuSample:
        nvml = self._nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)

        def field_of(read: Callable[[], Any]) -> Any:
            try:
                return read()
            except nvml.NVMLError:  # NotSupported, NoPermission: this device does not say
                return None

        utilization = field_of(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        memory = field_of(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        power = field_of(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        limit = field_of(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        running = field_of(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []
        return GpuSample(
            index=index,
            name=_text(field_of(lambda: nvml.nvmlDeviceGetName(handle)) or "GPU"),
            utilization=int(utilization.gpu) if utilization is not None else None,
            memory_used=int(memory.used) if memory is not None else None,
            memory_total=int(memory.total) if memory is not None else None,
            temperature=field_of(lambda: int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))),
            power=power / 1000.0 if power is not None else None,
            power_limit=limit / 1000.0 if limit is not None else None,
            processes=tuple(GpuProcess(int(p.pid), _process_name(int(p.pid)), p.usedGpuMemory) for p in running),
        )


def _process_name(pid: int) -> str:
    try:
        return printable(psutil.Process(pid).name())
    except (psutil.Error, OSError):
        return "?"  # another container's pid namespace, or gone since NVML listed it
