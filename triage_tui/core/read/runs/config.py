"""A run's ``config.json``, read leniently for the chance line (the draft vocab size)."""

from __future__ import annotations

import json
from pathlib import Path

from triage_tui.core.errors import BadInput
from triage_tui.core.objstore import deferred

MAX_CONFIG_BYTES = 4 << 20  # a drafter config.json is a few KiB; anything huge is not one


def read_config(path: Path | None, problems: list[str] | None = None) -> dict | None:
    """A run's config.json as a dict, or None when absent, unreadable, or not a JSON object.

    Lenient on purpose: the watcher may read it while a trainer is still writing it, and it
    only refines the chance line; a broken one falls back to the default vocab size. Why it was
    not used is appended to ``problems`` (the watcher shows it: a silent fallback is a chance
    line nobody can question).
    """
    if path is None:
        return None
    why = None
    document = None
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            why = f"{size} bytes, over {MAX_CONFIG_BYTES >> 20} MiB: not a drafter config"
        else:
            deferred.materialize(path)  # a mirrored config left for its reader is fetched now
            document = json.loads(path.read_bytes())
    except OSError as err:
        why = f"cannot read it: {err.strerror or err}"
    except BadInput as err:  # a mirrored object that could not be fetched
        why = f"cannot read it: {err.what}"
    except UnicodeDecodeError as err:
        why = f"not valid JSON: not UTF-8 text (byte {err.start})"
    except ValueError as err:
        why = f"not valid JSON: {err}"
    except RecursionError:
        why = "not valid JSON: nested too deeply"
    if why is None and not isinstance(document, dict):
        why = f"a JSON {type(document).__name__}, not an object"
    if why is not None:
        if problems is not None:
            problems.append(f"{why}; the chance line does not use it")
        return None
    return document
