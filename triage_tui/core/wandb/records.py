"""One W&B record's bytes into a typed result, decoded with wandb's own generated protos.

A logical record (core.wandb.framing) is a serialized ``wandb_internal_pb2.Record``, decoded with the
wandb package's protos (the optional extra ``triage-tui[wandb]``, imported on first use, so
TensorBoard-only users never load it). Only the records a reader of scalars needs become results:

- ``history``, one per committed ``wandb.log`` row: a ``Row``. Every item whose JSON value is a number
  (``NaN`` and ``Infinity`` included, as the SDK writes them) is a value of the series named by its
  key (nested keys joined with ``.``, as W&B names them); booleans, strings, media and histograms are
  not. The row's step is its ``_step`` (else ``step.num``), its wall time its ``_timestamp``.
- ``run`` and ``config``: a ``ConfigChange`` (``wandb.config``'s updates and removals).
- ``metric``: a ``MetricDefinition`` (``define_metric``: a key's or a glob's step metric).
- ``exit``: a ``RunExit`` (the code ``wandb.finish`` or the process's exit hook recorded).

A record that does not decode as a Record is ``DAMAGED``: the CRC matched, so the writer wrote
something that is not a Record.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf.message import DecodeError

from triage_tui.core.errors import BadInput

STEP_KEY = "_step"
TIME_KEY = "_timestamp"
INSTALL_HINT = "pip install 'triage-tui[wandb]'"

_NUMBER_START = frozenset("-0123456789NI")  # JSON numbers, and NaN/Infinity as Python's json writes them


class WandbUnavailable(BadInput):
    """W&B files were found but the wandb package (the optional extra) cannot be imported."""


_protos_module: Any = None


def wandb_protos():
    """wandb's generated ``wandb_internal_pb2`` (imported once, lazily: importing wandb takes ~1 s)."""
    global _protos_module
    if _protos_module is None:
        try:
            from wandb.proto import wandb_internal_pb2
        except ImportError as err:
            raise WandbUnavailable(None, f"reading W&B runs needs the wandb package ({INSTALL_HINT}): {err}") from None
        _protos_module = wandb_internal_pb2
    return _protos_module


def has_typed_values(pb) -> bool:
    """Newer protos carry typed history values (a ``value`` oneof); older ones only value_json."""
    return "value" in pb.HistoryItem.DESCRIPTOR.oneofs_by_name


@dataclass(slots=True)
class Row:
    """One history row: its step, wall time, and the numbers it logged by key (W&B's own ``_`` keys left out)."""

    step: int
    wall: float
    values: dict[str, float]


@dataclass(frozen=True, slots=True)
class ConfigChange:
    update: dict[str, Any]  # key -> its value, parsed from JSON
    remove: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MetricDefinition:
    """``define_metric``: the step metric of a key (``name``) or of the keys a glob matches ("" = _step)."""

    name: str
    glob: str
    step_metric: str


@dataclass(frozen=True, slots=True)
class RunExit:
    code: int  # RunExitRecord.exit_code (wandb/proto/wandb_internal.proto)


class _Damaged:
    """A record whose CRC matched but which is not one a writer could have meant: counted as damage."""

    def __repr__(self) -> str:
        return "DAMAGED"


DAMAGED: Final = _Damaged()

Decoded = Row | ConfigChange | MetricDefinition | RunExit | _Damaged | None  # None: a record of no interest


def decode(pb, payload: bytes, typed: bool) -> Decoded:
    """`payload` (one whole record) as the result a scalar reader uses, DAMAGED, or None."""
    try:
        record = pb.Record.FromString(payload)
    except DecodeError:  # the CRC matched, so the writer wrote something that is not a Record
        return DAMAGED
    kind = record.WhichOneof("record_type")
    if kind == "history":
        return _row(record.history, typed)
    if kind == "metric":
        metric = record.metric
        return MetricDefinition(metric.name, metric.glob_name, metric.step_metric)
    if kind == "run":
        return _config(record.run.config.update, ())
    if kind == "config":
        return _config(record.config.update, record.config.remove)
    if kind == "exit":
        return RunExit(int(record.exit.exit_code))
    return None


def _row(history, typed: bool) -> Row:
    # The hot loop of a cold read (one pass per item of every row): attribute reads on upb
    # messages are the cost, so each is read once and the common case (value_json) goes first.
    values: dict[str, float] = {}
    step = history.step.num
    wall = 0.0
    for item in history.item:
        nested = item.nested_key
        key = item.key or (nested[0] if len(nested) == 1 else ".".join(nested))
        text = item.value_json
        if text:
            if text[0] not in _NUMBER_START:
                continue  # strings, booleans, null, lists and objects (media, histograms)
            if key == STEP_KEY:
                try:
                    step = int(text)  # exact, even past 2**53
                    continue
                except ValueError:
                    pass
            try:
                value = float(text)
            except ValueError:
                continue
        elif typed:
            which = item.WhichOneof("value")
            if which == "number":
                value = item.number
            elif which == "integer":
                value = float(item.integer)
            else:
                continue
        else:
            continue
        if key == TIME_KEY:
            wall = value
        elif key == STEP_KEY:
            if math.isfinite(value):
                step = int(value)
        elif key[0] != "_":  # W&B's own keys (_runtime, _wandb.*): not metrics
            values[key] = value
    return Row(step, wall, values)


def _item_key(item) -> str:
    return item.key or ".".join(item.nested_key)


def _config(update, remove) -> ConfigChange:
    parsed: dict[str, Any] = {}
    for item in update:
        try:
            parsed[_item_key(item)] = json.loads(item.value_json)
        except ValueError:
            continue
    return ConfigChange(parsed, tuple(_item_key(item) for item in remove))
