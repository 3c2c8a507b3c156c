"""The one reader of JSON files (config.json, index.json, tokenizer.json): every way one can be
bad is BadInput naming the file, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from triage_tui.core.errors import BadInput

__all__ = ["read_json"]


def read_json(path: Path) -> Any:
    """The parsed document; BadInput when unreadable, not UTF-8, not JSON, or nested too deeply."""
    try:
        return json.loads(path.read_bytes())
    except OSError as err:
        raise BadInput(path, f"cannot read it: {err.strerror or err}") from None
    except UnicodeDecodeError as err:  # json.loads detects UTF-8/16/32; other bytes land here
        raise BadInput(path, f"not valid JSON: not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise BadInput(path, f"not valid JSON: {err}") from None
    except RecursionError:
        raise BadInput(path, "not valid JSON: nested too deeply") from None
