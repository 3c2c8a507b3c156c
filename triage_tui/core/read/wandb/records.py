"""One W&B record's bytes into a typed result, decoded with wandb's own generated protos.

A logical record (core.read.wandb.framing) is a serialized ``wandb_internal_pb2.Record``, decoded with the
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
something that is not a Record. So is one that decodes but whose contents no writer could have
meant, checked before anything of it is used, and the whole record is dropped (none of its
numbers become points, none of its config values the config): a key that is empty or over
MAX_KEY_CHARS; a value over MAX_VALUE_CHARS; JSON nested deeper than MAX_JSON_DEPTH (json.loads
recurses a level at a time, and so would whatever walks the config after it); a ``_step`` that is not an integer within
int64 (the series store steps as int64); a ``_timestamp`` that is not finite. A step metric's value
is checked the same way where a row is placed (core.read.wandb.history, ``step_in_int64``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf.message import DecodeError

from triage_tui.core.errors import BadInput

STEP_KEY = "_step"
TIME_KEY = "_timestamp"
INSTALL_HINT = "pip install 'triage-tui[wandb]'"

_NUMBER_START = frozenset("-0123456789NI")  # JSON numbers, and NaN/Infinity as Python's json writes them

# Bounds on what a record holds. W&B's keys are metric and config names (tens of characters); its
# values are numbers, short strings, media references and histograms (a few kB) or a config entry
# (a trainer's nested arguments, kB). Far past any of those, a key or value is not one a writer meant.
MAX_KEY_CHARS = 1024
MAX_VALUE_CHARS = 16 << 20  # as much as one fetched body may be (core.bounds); a row's values are kB
MAX_JSON_DEPTH = 64  # trainers' configs nest a handful of levels; json.loads recurses once a level
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


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


def step_in_int64(value: float) -> int | None:
    """`value` as a step when it is an integer that int64 holds, else None."""
    if not math.isfinite(value) or value != int(value):
        return None
    step = int(value)
    return step if INT64_MIN <= step <= INT64_MAX else None


def nested_deeper_than(text: str, depth: int) -> bool:
    """Whether brackets outside JSON strings in `text` nest deeper than `depth` (or never close)."""
    if text.count("[") + text.count("{") <= depth:
        return False  # the common case, at C speed: too few brackets to nest that deep
    level = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            level += 1
            if level > depth:
                return True
        elif token in ("]", "}"):
            level -= 1
    return level != 0


def _bad_key(key: str) -> bool:
    return not key or len(key) > MAX_KEY_CHARS


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
        names = (metric.name, metric.glob_name, metric.step_metric)
        if any(len(name) > MAX_KEY_CHARS for name in names):
            return DAMAGED
        return MetricDefinition(*names)
    if kind == "run":
        return _config(record.run.config.update, ())
    if kind == "config":
        return _config(record.config.update, record.config.remove)
    if kind == "exit":
        return RunExit(int(record.exit.exit_code))
    return None


def _row(history, typed: bool) -> Row | _Damaged:
    # The hot loop of a cold read (one pass per item of every row): attribute reads on upb
    # messages are the cost, so each is read once and the common case (value_json) goes first.
    values: dict[str, float] = {}
    step: int = history.step.num
    wall = 0.0
    for item in history.item:
        nested = item.nested_key
        key = item.key or (nested[0] if len(nested) == 1 else ".".join(nested))
        if not key or len(key) > MAX_KEY_CHARS:
            return DAMAGED
        text = item.value_json
        if text:
            if len(text) > MAX_VALUE_CHARS:
                return DAMAGED
            if text[0] not in _NUMBER_START:
                # strings, booleans, null, lists and objects (media, histograms): not points, and
                # never parsed, but nesting no JSON writer produces says what the record is
                if len(text) > 2 * MAX_JSON_DEPTH and nested_deeper_than(text, MAX_JSON_DEPTH):
                    return DAMAGED
                continue
            if key == STEP_KEY:
                try:
                    number = int(text)  # exact, even past 2**53
                except ValueError:
                    pass
                else:
                    if not INT64_MIN <= number <= INT64_MAX:
                        return DAMAGED
                    step = number
                    continue
            try:
                value = float(text)
            except ValueError:
                continue
        elif typed:
            which = item.WhichOneof("value")
            if which == "number":
                value = item.number
            elif which == "integer":
                if key == STEP_KEY:
                    step = item.integer  # an int64 already
                    continue
                value = float(item.integer)
            else:
                continue
        else:
            continue
        if key == TIME_KEY:
            if not math.isfinite(value):
                return DAMAGED
            wall = value
        elif key == STEP_KEY:
            whole = step_in_int64(value)
            if whole is None:
                return DAMAGED
            step = whole
        elif key[0] != "_":  # W&B's own keys (_runtime, _wandb.*): not metrics
            values[key] = value
    return Row(step, wall, values)


def _item_key(item) -> str:
    return item.key or ".".join(item.nested_key)


def _config(update, remove) -> ConfigChange | _Damaged:
    parsed: dict[str, Any] = {}
    for item in update:
        key = _item_key(item)
        text = item.value_json
        if _bad_key(key) or len(text) > MAX_VALUE_CHARS or nested_deeper_than(text, MAX_JSON_DEPTH):
            return DAMAGED
        try:
            parsed[key] = json.loads(text)
        except ValueError:
            continue  # not JSON (or an integer past int()'s digit limit): this entry only
        except RecursionError:  # within MAX_JSON_DEPTH it cannot recurse that far; never let it escape
            return DAMAGED
    removed = tuple(_item_key(item) for item in remove)
    if any(_bad_key(key) for key in removed):
        return DAMAGED
    return ConfigChange(parsed, removed)
