"""W&B runs written by the wandb package itself, offline, in subprocesses (no network, no account).

Every run is written by a child Python process: wandb.init patches stdout/stderr and starts its
wandb-core service, neither of which belongs in the pytest process. ``leet_history`` reads a run file
back with W&B's own reader (``wandb leet inspect --json``, wandb-core's LiveReader) for comparison.
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import wandb  # noqa: F401 - the runs' writer, imported here so that a broken install fails as such

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
    define: Sequence[tuple] = (),
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


# ----------------------------------------------------------------- records written one by one
#
# wandb-core (Go) writes the run file and offers no way to write a chosen record, and the SDK refuses
# most impossible values before they reach it. Hostile records are therefore made with wandb's own
# generated protos and framed as wandb's Python writer framed them before wandb-core
# (wandb/sdk/internal/datastore.py, ``DataStore._write_data``: the LevelDB log format wandb-core's
# record.go still writes). ``test_reframed_run_reads_as_wandbs_own_reader_reads_it`` checks this
# framing against W&B's own reader.

_BLOCK = 32768
_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
FILE_HEADER = b":W&B\xe1\xbe\x00"  # ident, magic 0xBEE1 little-endian, version 0


def _chunk(data: bytes, kind: int) -> bytes:
    crc = zlib.crc32(data, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF
    return struct.pack("<IHB", crc, len(data), kind) + data


def frame_records(payloads: list[bytes]) -> bytes:
    """A whole run file holding `payloads`, framed as DataStore._write_data framed each record."""
    out = bytearray(FILE_HEADER)
    for data in payloads:
        left = _BLOCK - len(out) % _BLOCK
        if left < _HEADER:
            out += bytes(left)  # a block's trailer: padding
            left = _BLOCK
        if len(data) + _HEADER <= left:
            out += _chunk(data, _FULL)
            continue
        room = left - _HEADER
        out += _chunk(data[:room], _FIRST)
        used = room
        while len(data) - used > _BLOCK - _HEADER:
            out += _chunk(data[used : used + _BLOCK - _HEADER], _MIDDLE)
            used += _BLOCK - _HEADER
        out += _chunk(data[used:], _LAST)
    return bytes(out)


def records_of(path: Path) -> list[bytes]:
    """Every record of an undamaged run file, in order (each chunk's CRC checked)."""
    data = Path(path).read_bytes()
    assert data.startswith(FILE_HEADER)
    records: list[bytes] = []
    parts: list[bytes] = []
    pos = len(FILE_HEADER)
    while pos + _HEADER <= len(data):
        if _BLOCK - pos % _BLOCK < _HEADER:
            pos += _BLOCK - pos % _BLOCK
            continue
        crc, length, kind = struct.unpack_from("<IHB", data, pos)
        chunk = data[pos + _HEADER : pos + _HEADER + length]
        if kind == 0 and length == 0 and crc == 0:  # zeros to the end of the block
            pos += _BLOCK - pos % _BLOCK
            continue
        assert kind in (_FULL, _FIRST, _MIDDLE, _LAST) and _chunk(chunk, kind)[:4] == data[pos : pos + 4]
        parts.append(chunk)
        pos += _HEADER + length
        if kind in (_FULL, _LAST):
            records.append(b"".join(parts))
            parts = []
    assert not parts and pos == len(data), "a run file that ends inside a record"
    return records


def _protos() -> Any:
    """wandb's internal protos (Record and the rest): ``wandb_internal_pb2`` star-imports the module
    of the installed protobuf's major version, which mypy cannot follow, so their names are Any here."""
    from wandb.proto import wandb_internal_pb2

    return wandb_internal_pb2


def record_type(payload: bytes) -> str:
    pb = _protos()

    return pb.Record.FromString(payload).WhichOneof("record_type")


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def history_record(*items: tuple[str, str], step: int = 3) -> bytes:
    """A history record of (key, value_json) items, ``step.num`` set as wandb-core sets it."""
    pb = _protos()

    record = pb.Record()
    record.history.step.num = step
    for key, value in items:
        record.history.item.add(key=key, value_json=value)
    return record.SerializeToString()


def _history(*items: tuple[str, str]) -> bytes:
    """A hostile row: its items after a plausible loss and time, which must not become a point either."""
    return history_record(("loss", "123.5"), ("_timestamp", "1700000000.5"), *items)


def _typed_step(number: float) -> bytes:
    """A history record whose ``_step`` is a typed double (the protos' ``value`` oneof), not value_json."""
    pb = _protos()

    record = pb.Record.FromString(_history())
    item = record.history.item.add()
    item.key = "_step"
    item.number = number
    return record.SerializeToString()


def config_record(key: str, value_json: str, *, in_run: bool = False) -> bytes:
    """A config record (or a run record carrying config) with one update item."""
    pb = _protos()

    record = pb.Record()
    update = record.run.config.update if in_run else record.config.update
    item = update.add()
    item.key = key
    item.value_json = value_json
    return record.SerializeToString()


HOSTILE_DEPTH = 100_000  # json.loads raises RecursionError long before this
HOSTILE_LENGTH = (16 << 20) + 1  # past any bound a reader could mean for one key or value

# Records whose CRC is right and whose contents no writer could have meant: each must be skipped and
# counted as a damaged record, never become a point or a config value, never raise. The healthy run of
# ``write_step_metric_run`` defines ``acc`` against the step metric ``epoch_step``.
HOSTILE_RECORDS: dict[str, Callable[[], bytes]] = {
    "history_empty_key": lambda: _history(("", "1.0")),
    "history_step_past_int64": lambda: _history(("_step", str(2**70))),
    "history_step_below_int64": lambda: _history(("_step", str(-(2**63) - 1))),
    "history_step_1e300": lambda: _history(("_step", "1e300")),
    "history_step_nan": lambda: _history(("_step", "NaN")),
    "history_step_inf": lambda: _history(("_step", "Infinity")),
    "history_step_typed_inf": lambda: _typed_step(math.inf),
    "history_step_typed_1e300": lambda: _typed_step(1e300),
    "history_timestamp_nan": lambda: _history(("_timestamp", "NaN")),
    "step_metric_1e300": lambda: _history(("acc", "0.5"), ("epoch_step", "1e300")),
    "step_metric_inf": lambda: _history(("acc", "0.5"), ("epoch_step", "Infinity")),
    "step_metric_nan": lambda: _history(("acc", "0.5"), ("epoch_step", "NaN")),
    "history_value_deep": lambda: _history(("deep", _deep(HOSTILE_DEPTH))),
    "history_key_long": lambda: _history(("k" * 5000, "1.0")),
    "history_value_long": lambda: _history(("long", "[" + "0," * (HOSTILE_LENGTH // 2) + "0]")),
    "config_deep": lambda: config_record("deep", _deep(HOSTILE_DEPTH)),
    "run_config_deep": lambda: config_record("deep", _deep(HOSTILE_DEPTH), in_run=True),
    "config_key_long": lambda: config_record("k" * 5000, "1"),
    "config_value_long": lambda: config_record("long", '"' + "x" * HOSTILE_LENGTH + '"'),
    "config_empty_key": lambda: config_record("", "1"),
}


def write_step_metric_run(directory: Path) -> Path:
    """A small healthy run (wandb's own writer): loss against _step, acc against the step metric epoch_step."""
    rows = [{"loss": 10.0 - n, "acc": 0.1 * n, "epoch_step": 100 * n} for n in range(8)]
    return write_run(
        directory,
        rows,
        config={"draft_vocab_size": 32000, "nested": {"lr": 1e-4}},
        define=[("acc", "epoch_step", None)],
    )


def with_record(source: Path, dest: Path, payload: bytes) -> Path:
    """`source`'s records with `payload` put in the middle of its history rows, re-framed into `dest`."""
    records = records_of(source)
    rows = [i for i, r in enumerate(records) if record_type(r) == "history"]
    at = rows[len(rows) // 2]
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(frame_records([*records[:at], payload, *records[at:]]))
    return dest
