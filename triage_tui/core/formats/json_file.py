"""The one reader of JSON files (config.json, index.json, tokenizer.json, trainer_state.json): every
way one can be bad is BadInput naming the file, never a traceback."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from triage_tui.core.errors import BadInput
from triage_tui.core.objstore import deferred

__all__ = ["read_json"]

# A JSON string (escapes included) or a bracket: what the nesting bound looks at.
_STRING_OR_BRACKET = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def read_json(path: Path, *, max_bytes: int | None = None, max_depth: int | None = None) -> Any:
    """The parsed document; BadInput when unreadable, larger than ``max_bytes``, not UTF-8, not JSON,
    or nested deeper than ``max_depth`` (else than the interpreter's recursion allows). A mirrored
    object left unfetched until read (``objstore.deferred``) is fetched first."""
    deferred.materialize(path)
    try:
        # O_NONBLOCK: a FIFO named like the file must not hang the read; only a regular file is read.
        with open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK)) as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise BadInput(path, "not a regular file")
            data = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
    except OSError as err:
        raise BadInput(path, f"cannot read it: {err.strerror or err}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise BadInput(path, f"larger than {max_bytes} bytes: not a file this reader reads whole")
    if max_depth is not None:
        _check_depth(path, data, max_depth)
    try:
        return json.loads(data)
    except UnicodeDecodeError as err:  # json.loads detects UTF-8/16/32; other bytes land here
        raise BadInput(path, f"not valid JSON: not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise BadInput(path, f"not valid JSON: {err}") from None
    except ValueError as err:  # an integer beyond Python's digit limit for int(str)
        raise BadInput(path, f"not valid JSON here: {err}") from None
    except RecursionError:
        raise BadInput(path, "not valid JSON: nested too deeply") from None


def _check_depth(path: Path, data: bytes, max_depth: int) -> None:
    """BadInput when brackets outside strings nest deeper than ``max_depth`` (before json's recursion)."""
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(data):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > max_depth:
                raise BadInput(path, f"not valid JSON here: nested deeper than {max_depth} levels")
        elif token in (b"]", b"}"):
            depth -= 1
