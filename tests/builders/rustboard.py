"""What TensorBoard itself shows for a log directory: its Rust data server (``tensorboard_data_server``,
installed with tensorboard; ``server_binary()``) loads the directory once, keeping every scalar
(``--samples-per-plugin scalars=all``), and is asked over its gRPC API (tensorboard's own
``data_provider.proto``) for every run's scalars, as TensorBoard's web frontend asks it.
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import grpc
import tensorboard_data_server
from tensorboard.data.proto import data_provider_pb2 as data
from tensorboard.data.proto import data_provider_pb2_grpc as data_grpc

Points = dict[str, list[tuple[int, float, float]]]


def rustboard_points(logdir: Path, timeout: float = 120.0) -> dict[str, Points]:
    """Per run (its path under ``logdir``, "." for ``logdir`` itself) and tag: (step, wall time, value)
    of every point TensorBoard's data server holds after one load of ``logdir``."""
    with tempfile.TemporaryDirectory() as scratch:
        port_file = Path(scratch) / "port"
        server = subprocess.Popen(
            [
                tensorboard_data_server.server_binary(),
                "--logdir",
                str(logdir),
                "--reload",
                "once",
                "--port",
                "0",
                "--port-file",
                str(port_file),
                "--samples-per-plugin",
                "scalars=all",
                "--die-after-stdin",
                "-v",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        loaded = threading.Event()
        said: list[str] = []

        def follow() -> None:
            assert server.stderr is not None
            for line in server.stderr:
                said.append(line)
                if "Finished load cycle" in line:
                    loaded.set()
            loaded.set()

        threading.Thread(target=follow, daemon=True).start()
        try:
            assert loaded.wait(timeout) and server.poll() is None, "".join(said[-20:])
            with grpc.insecure_channel(f"localhost:{int(port_file.read_text())}") as channel:
                stub = data_grpc.TensorBoardDataProviderStub(channel)
                scalars = data.PluginFilter(plugin_name="scalars")
                read = stub.ReadScalars(
                    data.ReadScalarsRequest(plugin_filter=scalars, downsample=data.Downsample(num_points=1 << 62)),
                    timeout=timeout,
                )
        finally:
            assert server.stdin is not None
            server.stdin.close()  # --die-after-stdin
            server.wait(timeout=30)
    return {
        run.run_name: {
            tag.tag_name: list(zip(tag.data.step, tag.data.wall_time, tag.data.value, strict=True)) for tag in run.tags
        }
        for run in read.runs
    }


def tensorboard_shows(items: Sequence[Path | bytes]) -> Points:
    """The points TensorBoard's data server shows for one run made of ``items`` (event files, or
    their bytes), read in the order given: the oracle of the event reader on what real writers wrote."""
    with tempfile.TemporaryDirectory() as logdir:
        for i, item in enumerate(items):
            data = item if isinstance(item, (bytes, bytearray)) else Path(item).read_bytes()
            (Path(logdir) / f"events.out.tfevents.{i:010d}.oracle").write_bytes(data)
        return rustboard_points(Path(logdir)).get(".", {})
