"""W&B runs written by the wandb package itself, offline, in subprocesses (no network, no account).

Every run is written by a child Python process: wandb.init patches stdout/stderr and starts its
wandb-core service, neither of which belongs in the pytest process. ``leet_history`` reads a run file
back with W&B's own reader (``wandb leet inspect --json``, wandb-core's LiveReader) for comparison.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

wandb = pytest.importorskip("wandb", reason="the optional extra triage-tui[wandb] is not installed")

REPO = Path(__file__).resolve().parents[2]
WANDB_CLI = Path(sys.executable).parent / "wandb"


def offline_env() -> dict[str, str]:
    """Offline, silent, nothing sent anywhere (no error reporting either)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_ERROR_REPORTING="false",
        WANDB_DISABLE_GIT="true",
        WANDB_DISABLE_CODE="true",
        WANDB_CONSOLE="off",
        PYTHONPATH=str(REPO),
    )
    return env


PREAMBLE = """
import math, sys, wandb
def init(directory, flush=None, **kwargs):
    # flush: x_transaction_log_flush_interval, how often wandb-core writes the .wandb file (default 15 s)
    extra = {} if flush is None else {"x_transaction_log_flush_interval": flush}
    settings = wandb.Settings(console="off", x_disable_stats=True, x_disable_meta=True, **extra)
    return wandb.init(mode="offline", dir=directory, project="triage-test", settings=settings, **kwargs)
"""


def run_script(body: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Run `body` (after PREAMBLE) in a child Python with the offline environment."""
    code = PREAMBLE + textwrap.dedent(body)
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"W&B writer failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def start_script(body: str, *args: str, **kwargs) -> subprocess.Popen:
    """`body` in a child Python, in its own session (so a SIGKILL to its group takes wandb-core too)."""
    code = PREAMBLE + textwrap.dedent(body)
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], env=offline_env(), text=True, start_new_session=True, **kwargs
    )


def run_file(directory: Path) -> Path:
    """The one run-<id>.wandb under `directory`."""
    (found,) = sorted(Path(directory).glob("wandb/*run-*/run-*.wandb"))
    return found


def write_run(
    directory: Path,
    rows: list[dict],
    *,
    config: dict | None = None,
    steps: list[int] | None = None,
    define: list[tuple] = (),
) -> Path:
    """An offline run logging `rows` (at `steps` if given); its .wandb file.

    define = [(name, step_metric, step_sync)]."""
    payload = json.dumps({"rows": rows, "config": config or {}, "steps": steps, "define": list(define)}, allow_nan=True)
    run_script(
        """
        import json
        spec = json.loads(sys.argv[2])
        run = init(sys.argv[1], config=spec["config"])
        for name, step_metric, step_sync in spec["define"]:
            run.define_metric(name, step_metric=step_metric, step_sync=step_sync)
        for i, row in enumerate(spec["rows"]):
            if spec["steps"] is None:
                run.log(row)
            else:
                run.log(row, step=spec["steps"][i])
        run.finish()
    """,
        str(directory),
        payload,
    )
    return run_file(directory)


def leet_records(path: Path) -> list[dict]:
    """Every record of a run file, as W&B's own reader prints it (one JSON object a record)."""
    proc = subprocess.run(
        [str(WANDB_CLI), "leet", "inspect", "--json", str(path)],
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def _flatten(item: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in item.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def _as_number(value) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("NaN", "Infinity", "-Infinity"):  # JSON has no such numbers: W&B's reader writes them as strings
        return float(value.replace("Infinity", "inf"))
    return None


def leet_points(path: Path) -> dict[str, list[tuple[int, float, float]]]:
    """Scalar points per key from W&B's own reader: (_step, _timestamp, value), numbers only, in row order."""
    points: dict[str, list[tuple[int, float, float]]] = {}
    for record in leet_records(path):
        if record.get("type") != "history":
            continue
        item = _flatten(record["history"]["item"])
        step, wall = int(item["_step"]), float(item["_timestamp"])
        for key, value in item.items():
            number = _as_number(value)
            if key.startswith("_") or number is None:
                continue
            points.setdefault(key, []).append((step, wall, number))
    return points


def same_points(a: list[tuple[int, float, float]], b: list[tuple[int, float, float]]) -> bool:
    """Exact equality, NaN equal to NaN."""
    return len(a) == len(b) and all(
        sa == sb and wa == wb and (va == vb or (math.isnan(va) and math.isnan(vb)))
        for (sa, wa, va), (sb, wb, vb) in zip(a, b, strict=True)
    )
