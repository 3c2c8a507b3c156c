"""A run's ``triage.toml`` (docs/contracts.md "triage.toml"): the ``[run]``, ``[serving]`` and ``[logs]`` tables
read into a typed ``Manifest``, paths made absolute against the run directory; and the path
helpers its readers share (``~`` expanded, a stat that fails as one BadInput line).

Trust (docs/contracts.md, Trust): a URL, or a path outside the run directory, named in a
triage.toml is used only when the file is owned by the user running triage, the rule git applies
to ``safe.directory``. Otherwise it is left out of the ``Manifest`` and ``Manifest.untrusted``
says what was not used and why: ``scan`` of a shared tree never fetches what another user's
file names, nor reads a file of yours it points at. A triage.toml fetched from a bucket is nobody's
own: its URLs are never fetched and its paths are used only inside the prefix the user named.
"""

from __future__ import annotations

import errno
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triage_tui.core import bounds
from triage_tui.core.errors import BadInput, SourceError
from triage_tui.core.objstore import scratch

if TYPE_CHECKING:
    from triage_tui.core.formats.hub import HubModel

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - pyproject pulls tomli in for 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class Manifest:
    """The ``[run]`` table of a triage.toml, paths made absolute against the run directory."""

    path: Path
    vocab_size: int | None = None
    checkpoint: Path | None = None
    mapping: Path | None = None
    data: Path | None = None
    target: Path | None = None
    loss_tags: tuple[str, ...] = ()
    accuracy_tags: tuple[str, ...] = ()
    # [serving]: engine logs to follow, and a /metrics URL (or a saved metrics file); core/watch/serving/
    serving_logs: tuple[Path, ...] = ()
    serving_metrics: str | None = None
    # [logs]: training console logs to read as scalars (core/read/console/), beside those discovery finds
    console_logs: tuple[Path, ...] = ()
    # What the file names that is not used, one line each: a URL, or a path outside the run, in a
    # triage.toml owned by another user (git's safe.directory rule). The run carries these as notices.
    untrusted: tuple[str, ...] = ()
    # What reading it did that the user should see: a hub id used from the local cache, or not there.
    notes: tuple[str, ...] = ()

    @property
    def serving_sources(self) -> list[str]:
        return [str(p) for p in self.serving_logs] + ([self.serving_metrics] if self.serving_metrics else [])

    @property
    def serving_metrics_pages(self) -> tuple[str, ...]:
        """Those of ``serving_sources`` named as a /metrics page: a file there is a saved page."""
        return (self.serving_metrics,) if self.serving_metrics else ()

    def untrusted_errors(self) -> tuple[SourceError, ...]:
        """``untrusted`` as the run's errors: ``{"source": "manifest", "path": <triage.toml>, "message"}``."""
        return tuple(SourceError("manifest", str(self.path), line) for line in self.untrusted)


_MANIFEST_PATH_KEYS = ("checkpoint", "mapping", "data", "target")
_HUB_ID_KEYS = ("checkpoint", "target")  # a drafter or a target may be named by hub id (formats/hub.py)
_MANIFEST_TAG_KEYS = ("loss_tags", "accuracy_tags")
_MANIFEST_KEYS = ("vocab_size", *_MANIFEST_PATH_KEYS, *_MANIFEST_TAG_KEYS)


def expand_user(value: str | Path, named_in: str | Path | None = None) -> Path:
    """``Path(value).expanduser()``; BadInput naming the file the path came from (or the path)
    when ``~user`` names no user on this machine (pathlib raises RuntimeError)."""
    try:
        return Path(value).expanduser()
    except RuntimeError:
        where = f"{value}: " if named_in is not None else ""
        raise BadInput(
            named_in if named_in is not None else value, f"{where}no such user's home directory (~user)"
        ) from None


def stat_or_bad_input(path: Path, missing: str = "no such file or directory") -> os.stat_result:
    """os.stat(path), or BadInput saying why not: missing, a symlink loop, permission denied."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise BadInput(path, missing) from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise BadInput(path, "a symlink loop (too many levels of symbolic links)") from None
        raise BadInput(path, f"cannot reach it: {err.strerror or err}") from None


def _is_file(path: Path) -> bool:
    """Path.is_file, False where the path cannot even be looked at (pathlib raises PermissionError)."""
    try:
        return path.is_file()
    except OSError:
        return False


def load_manifest(path: str | Path) -> Manifest:
    """Read a triage.toml; BadInput naming the file on malformed TOML or a wrong type."""
    path = Path(path).absolute()
    try:
        with open(path, "rb") as handle:
            owner = os.fstat(handle.fileno()).st_uid  # of the file read, not of a name swapped since
            document = tomllib.load(handle)
    except tomllib.TOMLDecodeError as err:
        raise BadInput(path, f"not valid TOML: {err}") from None
    except UnicodeDecodeError as err:
        raise BadInput(path, f"not valid TOML: not UTF-8 text (byte {err.start})") from None
    except RecursionError:
        raise BadInput(path, "not valid TOML: nested too deeply") from None
    except OSError as err:
        raise BadInput(path, f"cannot read: {err.strerror or err}") from None
    table = document.get("run", {})
    if not isinstance(table, dict):
        raise BadInput(path, "[run] must be a table")
    unknown = sorted(set(table) - set(_MANIFEST_KEYS))
    if unknown:
        # A misspelt key would otherwise be ignored without a word.
        raise BadInput(path, f"unknown key(s) in [run]: {', '.join(unknown)} (known: {', '.join(_MANIFEST_KEYS)})")
    run_dir = path.parent
    values: dict[str, Any] = {}
    vocab_size = table.get("vocab_size")
    if vocab_size is not None:
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
            raise BadInput(path, f"[run] vocab_size must be an integer >= 2, got {vocab_size!r}")
        values["vocab_size"] = vocab_size
    notes: list[str] = []
    for key in _MANIFEST_PATH_KEYS:
        value = table.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise BadInput(path, f"[run] {key} must be a non-empty path string, got {value!r}")
        named = Path(os.path.normpath(run_dir / expand_user(value, path)))
        hub = _hub_model(named, value) if key in _HUB_ID_KEYS else None
        if hub is not None:
            notes.append(hub.line(f"triage.toml {key}"))
            if hub.path is None:
                continue  # not here and not cached: left unset, the note says how to fetch it
            named = hub.path
        values[key] = named
    for key in _MANIFEST_TAG_KEYS:
        value = table.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(tag, str) and tag for tag in value):
            raise BadInput(path, f"[run] {key} must be a list of tag strings, got {value!r}")
        values[key] = tuple(value)
    values.update(_serving_table(path, document.get("serving")))
    values.update(_logs_table(path, document.get("logs")))
    if scratch.holds(path):
        # Fetched from a bucket: whoever could write there wrote it, not the user (objstore.scratch).
        bound = scratch.named_root(path) or str(path.parent)
        why = f"{path.name} was fetched from a bucket, nobody's own file"
        values = _trusted_only(path, values, why, bound, "outside the prefix you named")
    elif owner != _me():
        why = f"{path.name} is owned by uid {owner}, not by you (uid {_me()}), as git's safe.directory rule asks"
        values = _trusted_only(path, values, why, str(path.parent), "outside the run")
    return Manifest(path=path, notes=tuple(notes), **values)


def _hub_model(named: Path, value: str) -> HubModel | None:
    """The hub id ``value`` in the local cache, when no path of that name exists beside the run."""
    if os.path.lexists(named):
        return None
    from triage_tui.core.formats.hub import find_in_cache

    return find_in_cache(value)


def _me() -> int:
    """The user triage runs as (the effective uid, as git's safe.directory check compares)."""
    return os.geteuid()


def _trusted_only(path: Path, values: dict[str, Any], why: str, bound: str, outside: str) -> dict[str, Any]:
    """``values`` without the URLs and the paths out of ``bound`` that a file not the user's names
    (``why`` it is not); ``untrusted`` says what was left out, each path ``outside`` ``bound``."""
    run_dir = os.path.realpath(bound)

    def inside(value: Path | str) -> bool:
        return os.path.commonpath([run_dir, os.path.realpath(value)]) == run_dir

    kept, untrusted = dict(values), []
    for key in _MANIFEST_PATH_KEYS:
        value = kept.get(key)
        if value is not None and not inside(value):
            untrusted.append(f"[run] {key} {value} not used: {outside}, and {why}")
            del kept[key]
    for key, table in (("serving_logs", "[serving] logs"), ("console_logs", "[logs] console")):
        logs = kept.get(key, ())
        if any(not inside(p) for p in logs):
            kept[key] = tuple(p for p in logs if inside(p))
            untrusted += [f"{table} {p} not read: {outside}, and {why}" for p in logs if not inside(p)]
    metrics = kept.get("serving_metrics")
    if metrics is not None and bounds.is_url(metrics):
        untrusted.append(f"[serving] metrics {metrics} not fetched: {why} (pass it to check --serving to fetch it)")
        del kept["serving_metrics"]
    elif metrics is not None and not inside(metrics):
        untrusted.append(f"[serving] metrics {metrics} not read: {outside}, and {why}")
        del kept["serving_metrics"]
    return {**kept, "untrusted": tuple(untrusted)}


def _serving_table(path: Path, table: Any) -> dict[str, Any]:
    """``[serving] logs = [...]`` (paths, relative to the run) and ``metrics = "URL or path"``."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise BadInput(path, "[serving] must be a table")
    unknown = sorted(set(table) - {"logs", "metrics"})
    if unknown:
        raise BadInput(path, f"unknown key(s) in [serving]: {', '.join(unknown)} (known: logs, metrics)")
    values: dict[str, Any] = {}
    logs = table.get("logs")
    if isinstance(logs, str):
        logs = [logs]
    if logs is not None:
        if not isinstance(logs, list) or not all(isinstance(p, str) and p for p in logs):
            raise BadInput(path, f"[serving] logs must be a list of path strings, got {logs!r}")
        values["serving_logs"] = tuple(Path(os.path.normpath(path.parent / expand_user(p, path))) for p in logs)
    metrics = table.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, str) or not metrics:
            raise BadInput(path, f"[serving] metrics must be a URL or path string, got {metrics!r}")
        if not bounds.is_url(metrics):
            metrics = os.path.normpath(path.parent / expand_user(metrics, path))
        values["serving_metrics"] = metrics
    return values


def _logs_table(path: Path, table: Any) -> dict[str, Any]:
    """``[logs] console = [...]``: a trainer's console logs (paths relative to the run; one string is one path)."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise BadInput(path, "[logs] must be a table")
    unknown = sorted(set(table) - {"console"})
    if unknown:
        raise BadInput(path, f"unknown key(s) in [logs]: {', '.join(unknown)} (known: console)")
    console = table.get("console")
    if console is None:
        return {}
    if isinstance(console, str):
        console = [console]
    if not isinstance(console, list) or not all(isinstance(p, str) and p for p in console):
        raise BadInput(path, f"[logs] console must be a list of path strings, got {console!r}")
    return {"console_logs": tuple(Path(os.path.normpath(path.parent / expand_user(p, path))) for p in console)}
