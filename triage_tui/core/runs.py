"""What a run is: discovery of run directories, their artifacts, and the triage.toml manifest.

docs/contracts.md "What a run is": a directory holding ``triage.toml``, or else a directory holding
event files; event files in its subdirectories belong to it unless a subdirectory is a run of
its own (has ``triage.toml``).

The one rule for trainers' output directories (no manifest): a log directory named ``runs``,
``logs`` or ``tensorboard`` whose event files sit in it or one level below it, beside
checkpoints, belongs to the directory that holds both, and that directory is the run.
"Beside checkpoints" means the directory holds a ``config.json``, or a child holding weights
or a ``training_state.pt``, or a child holding numbered epoch directories with weights. These
are the depths the trainers write at:

- SpecForge classic (``scripts/train_eagle3.py``, 2025): ``<output_dir>/runs/`` beside
  ``epoch_{e}_step_{s}/`` (config.json, model.safetensors, training_state.pt);
- SpecForge 0.2.0 (``specforge/tracker.py`` TensorboardTracker, ``specforge/training/checkpoint.py``
  CheckpointManager): ``<output_dir>/runs/`` beside ``<run_id>-step<N>/training_state.pt``;
- speculators 0.9.0 (``speculators/train/logger.py`` TensorBoardHandler,
  ``speculators/train/checkpointer.py``): ``<log_dir>/<run_name>/`` beside
  ``<save_path>/<epoch>/`` (config.json, model.safetensors) under one parent;
- HF Trainer (transformers ``TensorBoardCallback``; ModelOpt trains with it):
  ``<output_dir>/runs/<date_host>/`` beside ``<output_dir>/checkpoint-N/``.

Discovery runs every few seconds while the TUI watches, so it reads no file but
``triage.toml`` (and nothing here reads ``config.json``; ``read_config`` is called by the
watcher only when the file changed). Directory listings are cached by the directory's
``(st_dev, st_ino, st_mtime_ns)``: a directory's mtime changes whenever an entry is added,
removed or renamed, so an unchanged directory costs one ``stat`` instead of a ``scandir``.
Artifacts are recognised by name only; no pickle is ever opened here.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import Any

from triage_tui.core.errors import BadInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - pyproject pulls tomli in for 3.10
    import tomli as tomllib

MANIFEST_NAME = "triage.toml"
CONFIG_NAME = "config.json"
TRAINING_STATE_NAME = "training_state.pt"  # SpecForge: inside each epoch_{e}_step_{s}/ checkpoint
RUN_YAML_NAME = "run.yaml"  # speculators 0.9.0: in --save-path, beside the <epoch>/ checkpoints
# Event-file predicate of TensorBoard (io_wrapper.IsSummaryEventsFile) and rustboard
# (EVENT_FILE_BASENAME_INFIX): basename contains "tfevents"; profiler placeholders excluded.
EVENT_INFIX = "tfevents"
PROFILE_EMPTY_SUFFIX = ".profile-empty"
LOG_DIR_NAMES = frozenset({"runs", "logs", "tensorboard"})
# W&B writes <dir>/wandb/{run,offline-run}-<date>-<id>/run-<id>.wandb (wandb/sdk/wandb_settings.py:
# sync_dir, sync_file); besides them wandb/ holds latest-run (a link) and debug logs.
WANDB_DIR_NAME = "wandb"
WANDB_SUFFIX = ".wandb"
TARGET_DIR_NAMES = frozenset({"target", "target_model"})
SKIPPED_DIR_NAMES = frozenset({"__pycache__"})
# How far up from a given path to look for the triage.toml of the run it lies in
# (`triage out/runs` when out/triage.toml exists): manifests sit at the output dir,
# event files one or two levels below it.
MANIFEST_SEARCH_LEVELS = 3
# A listing taken within this many seconds of the directory's mtime may miss an entry added
# in the same timestamp tick (coarse mtimes on NFS/ext3), so it is re-taken next time
# (git's "racy index" rule).
RACY_MTIME_SECS = 2.0
MAX_CONFIG_BYTES = 4 << 20  # a drafter config.json is a few KiB; anything huge is not one

_WEIGHT_NAMES = frozenset({"pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json"})
_HS_SAFETENSORS = re.compile(r"^hs_\d+\.safetensors$")  # speculators offline dumps
_SPECFORGE_DUMP = re.compile(r"^data_\d+\.ckpt(\.gz)?$")  # SpecForge prepare_hidden_states.py
_MAPPING_FILE = re.compile(r"(vocab.*mapping.*\.pt|^d2t\.pt|^d2t\.npy|^t2d\.npy|^t2d-\d+\.npy)$", re.IGNORECASE)
_MAPPING_DIR = re.compile(r"vocab.*mapping", re.IGNORECASE)  # SpecForge cache/vocab_mapping/<hash>.pt
_HIDDEN_DIR = re.compile(r"hidden", re.IGNORECASE)  # hidden_states/, hidden-states/, ...
_NUMBER = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple:
    """Sort key that orders epoch_0_step_900 before epoch_0_step_1000."""
    # isdecimal, not isdigit: "²" is a digit that int() refuses (a directory may be named anything).
    return tuple(int(part) if part.isdecimal() else part for part in _NUMBER.split(text))


def is_event_file_name(name: str) -> bool:
    """tensorboard io_wrapper.IsSummaryEventsFile: "tfevents" in the name, profiler dummies excluded."""
    return EVENT_INFIX in name and not name.endswith(PROFILE_EMPTY_SUFFIX)


def is_wandb_file_name(name: str) -> bool:
    """A W&B run's transaction log: run-<id>.wandb (not the .wandb.synced marker beside it)."""
    return name.startswith("run-") and name.endswith(WANDB_SUFFIX)


# --------------------------------------------------------------------------- manifest


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
    # [serving]: engine logs to follow, and a /metrics URL (or a saved metrics file); core/serving/
    serving_logs: tuple[Path, ...] = ()
    serving_metrics: str | None = None

    @property
    def serving_sources(self) -> list[str]:
        return [str(p) for p in self.serving_logs] + ([self.serving_metrics] if self.serving_metrics else [])


_MANIFEST_PATH_KEYS = ("checkpoint", "mapping", "data", "target")
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
    for key in _MANIFEST_PATH_KEYS:
        value = table.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise BadInput(path, f"[run] {key} must be a non-empty path string, got {value!r}")
        values[key] = Path(os.path.normpath(run_dir / expand_user(value, path)))
    for key in _MANIFEST_TAG_KEYS:
        value = table.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(tag, str) and tag for tag in value):
            raise BadInput(path, f"[run] {key} must be a list of tag strings, got {value!r}")
        values[key] = tuple(value)
    values.update(_serving_table(path, document.get("serving")))
    return Manifest(path=path, **values)


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
        if not is_url(metrics):
            metrics = os.path.normpath(path.parent / expand_user(metrics, path))
        values["serving_metrics"] = metrics
    return values


def is_url(source: str) -> bool:
    """A [serving] metrics source that is scraped over HTTP, not read from a file."""
    return source.startswith(("http://", "https://"))


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
            document = json.loads(path.read_bytes())
    except OSError as err:
        why = f"cannot read it: {err.strerror or err}"
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


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class RunArtifacts:
    """What discovery found on disk in a run directory (by name; nothing opened)."""

    config_json: Path | None = None
    checkpoints: tuple[Path, ...] = ()  # dirs holding weights or a training_state.pt, oldest first (natural order)
    mappings: tuple[Path, ...] = ()
    dumps: Path | None = None
    training_state: Path | None = None
    target: Path | None = None
    run_yaml: Path | None = None  # speculators: the args it ran with, in --save-path (formats/run_yaml.py)


@dataclass(frozen=True)
class RunInfo:
    """One run: its directory, the event files that belong to it, its manifest and artifacts.

    ``manifest_error`` is set, and ``manifest`` is None, when discovery ran with
    ``strict=False`` and the run's triage.toml was malformed (the watcher keeps going).
    """

    path: Path
    name: str
    event_files: tuple[Path, ...]
    manifest: Manifest | None
    artifacts: RunArtifacts
    manifest_error: str | None = None
    wandb_files: tuple[Path, ...] = ()  # W&B run files (run-<id>.wandb), natural order

    @property
    def sources(self) -> tuple[str, ...]:
        """Which writers' files the run has: "tensorboard", "wandb" (docs/contracts.md, scan --json)."""
        return tuple(name for name, files in (("tensorboard", self.event_files), ("wandb", self.wandb_files)) if files)


# --------------------------------------------------------------------------- listing cache


@dataclass(frozen=True)
class _Listing:
    """One directory's entries, and what they say by name, computed once per listing."""

    key: tuple[int, int, int]  # (st_dev, st_ino, st_mtime_ns) of the directory when listed
    trusted: bool
    files: tuple[str, ...]
    dirs: tuple[str, ...]  # real directories, then symlinks to directories
    event_names: tuple[str, ...]
    wandb_names: tuple[str, ...]
    has_manifest: bool
    has_config: bool
    has_weights: bool
    has_training_state: bool
    mapping_names: tuple[str, ...]
    dump_kind: str | None  # "specforge" | "speculators" | "pt" | None
    links: frozenset[str] = frozenset()  # which of `dirs` are symlinks

    @classmethod
    def of(
        cls,
        key: tuple[int, int, int],
        trusted: bool,
        name: str,
        files: tuple[str, ...],
        dirs: tuple[str, ...],
        links: frozenset[str] = frozenset(),
    ) -> _Listing:
        in_mapping_dir = bool(_MAPPING_DIR.search(name))
        if any(_SPECFORGE_DUMP.match(f) for f in files):
            dump_kind = "specforge"
        elif any(_HS_SAFETENSORS.match(f) for f in files):
            dump_kind = "speculators"
        elif any(f.endswith(".pt") for f in files):
            dump_kind = "pt"
        else:
            dump_kind = None
        return cls(
            key,
            trusted,
            files,
            dirs,
            event_names=tuple(f for f in files if is_event_file_name(f)),
            wandb_names=tuple(f for f in files if is_wandb_file_name(f)),
            has_manifest=MANIFEST_NAME in files,
            has_config=CONFIG_NAME in files,
            has_weights=any(_is_weight_file(f) for f in files),
            has_training_state=TRAINING_STATE_NAME in files,
            mapping_names=tuple(f for f in files if _MAPPING_FILE.search(f) or (in_mapping_dir and f.endswith(".pt"))),
            dump_kind=dump_kind,
            links=links,
        )


def _is_weight_file(name: str) -> bool:
    if name in _WEIGHT_NAMES:
        return True
    return name.endswith(".safetensors") and not _HS_SAFETENSORS.match(name)


@dataclass
class ListingCache:
    """Directory listings reused while the directory's mtime is unchanged (see module doc).

    Also keeps each run's artifacts, recomputed only when one of its directories was
    re-listed, and each manifest, re-read only when its (mtime, size) changed.
    """

    listings: dict[str, _Listing] = field(default_factory=dict)
    manifests: dict[str, tuple[tuple[int, int], Manifest | BadInput]] = field(default_factory=dict)
    artifacts: dict[str, tuple[tuple[int, ...], RunArtifacts]] = field(default_factory=dict)
    scandirs: int = 0  # how many real scandir calls were made (for tests and benchmarks)
    # Symlinks to directories outside the watched paths, not followed by the last walk: link -> target.
    skipped_links: dict[str, str] = field(default_factory=dict)

    def listing(self, path: str, stat: os.stat_result) -> _Listing | None:
        key = (stat.st_dev, stat.st_ino, stat.st_mtime_ns)
        cached = self.listings.get(path)
        if cached is not None and cached.key == key and cached.trusted:
            return cached
        files: list[str] = []
        dirs: list[str] = []
        linked_dirs: list[str] = []
        try:
            self.scandirs += 1
            with os.scandir(path) as entries:
                for entry in entries:
                    name = entry.name
                    if name.startswith(".") or name in SKIPPED_DIR_NAMES:
                        continue
                    try:
                        if entry.is_dir():  # follows symlinks; loops are cut by the walker
                            (linked_dirs if entry.is_symlink() else dirs).append(name)
                        elif entry.is_file():
                            files.append(name)
                    except OSError:
                        continue  # dangling link, vanished entry
        except OSError:
            self.listings.pop(path, None)
            return None  # unreadable or vanished: skip, never crash the watcher
        files.sort(key=natural_key)
        dirs.sort(key=natural_key)
        # Real directories first, so a run is named by its real path, not by a link to it.
        dirs.extend(sorted(linked_dirs, key=natural_key))
        trusted = time.time() - stat.st_mtime > RACY_MTIME_SECS
        listing = _Listing.of(key, trusted, os.path.basename(path), tuple(files), tuple(dirs), frozenset(linked_dirs))
        self.listings[path] = listing
        return listing

    def manifest(self, path: Path) -> Manifest:
        """load_manifest, re-read only when the file's (mtime, size) changed."""
        try:
            stat = path.stat()
        except OSError as err:
            raise BadInput(path, f"cannot read: {err.strerror or err}") from None
        key = (stat.st_mtime_ns, stat.st_size)
        cached = self.manifests.get(str(path))
        if cached is None or cached[0] != key:
            try:
                result: Manifest | BadInput = load_manifest(path)
            except BadInput as err:
                result = err
            cached = (key, result)
            self.manifests[str(path)] = cached
        if isinstance(cached[1], BadInput):
            raise cached[1]
        return cached[1]


# --------------------------------------------------------------------------- the walk


@dataclass
class _Node:
    path: str  # plain strings in the walk: pathlib costs more than the stat calls here
    listing: _Listing
    children: list[_Node]
    event_files: tuple[str, ...]  # non-empty event files
    wandb_files: tuple[str, ...] = ()  # W&B run files (even empty: wandb.init creates it at once)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def skipped_links_note(links: dict[str, str]) -> str | None:
    """The one line that says which symlinks discovery did not follow (``scan`` on stderr, the TUI
    as a notice), or None; names shown as ``cat -v`` would."""
    if not links:
        return None
    from triage_tui.core.text import printable

    items = sorted(links.items())
    shown = ", ".join(f"{printable(link)} -> {printable(target)}" for link, target in items[:3])
    more = f" and {len(items) - 3} more" if len(items) > 3 else ""
    return f"not following {len(items)} symlink(s) to directories outside the given paths: {shown}{more}"


def _walk(
    path: str,
    cache: ListingCache,
    visited: set[tuple[int, int]],
    depth: int | None = None,
    within: tuple[str, ...] = (),
) -> _Node | None:
    """The tree below `path`; `depth` levels of children at most (None: all).

    A symlink to a directory is followed only when its target lies within one of the real paths
    `within` (the watched paths): a link to / or /proc must not walk the machine, nor a
    triage.toml in some process's working directory decide a scan. Those not followed are
    recorded in ``cache.skipped_links``.
    """
    try:
        stat = os.stat(path)
    except OSError:
        return None
    inode = (stat.st_dev, stat.st_ino)
    if inode in visited:  # a symlink loop, or a second link to a directory already walked
        return None
    visited.add(inode)
    listing = cache.listing(path, stat)
    if listing is None:
        return None
    event_files = []
    for name in listing.event_names:
        file_path = os.path.join(path, name)
        try:
            # Sizes change without the directory's mtime changing, so these few are stat'ed
            # on every walk: a zero-size file joins once its first record lands.
            if os.stat(file_path).st_size > 0:
                event_files.append(file_path)
        except OSError:
            continue
    children = []
    if depth is None or depth > 0:
        for name in listing.dirs:
            child_path = os.path.join(path, name)
            if name in listing.links:
                target = os.path.realpath(child_path)
                if not any(_is_under(target, root) for root in within):
                    cache.skipped_links[child_path] = target
                    continue
            child = _walk(child_path, cache, visited, None if depth is None else depth - 1, within)
            if child is not None:
                children.append(child)
    wandb_files = tuple(os.path.join(path, name) for name in listing.wandb_names)
    return _Node(path, listing, children, tuple(event_files), wandb_files)


def _holds_checkpoint(node: _Node) -> bool:
    return node.listing.has_weights or node.listing.has_training_state


def _holds_output(node: _Node) -> bool:
    """A trainer's output dir (module doc): a config.json, a checkpoint child, or a
    save-path child of numbered epoch checkpoints (speculators ``<save_path>/<epoch>/``)."""
    return node.listing.has_config or any(
        _holds_checkpoint(child)
        or any(grandchild.name.isdigit() and _holds_checkpoint(grandchild) for grandchild in child.children)
        for child in node.children
    )


def _is_log_dir(node: _Node) -> bool:
    """runs/, logs/ or tensorboard/ with event files in it or one level below (HF's
    ``runs/<date_host>/``, speculators' ``logs/<run_name>/``), and no manifest of its own."""
    if node.name.lower() not in LOG_DIR_NAMES or node.listing.has_manifest:
        return False
    return bool(node.event_files) or any(
        child.event_files and not child.listing.has_manifest for child in node.children
    )


def _promotes_parent(node: _Node) -> bool:
    """`node` is an output dir holding a log dir of event files (or a wandb/ dir of runs): it is the run."""
    return _holds_output(node) and any(
        _is_log_dir(child) or (child.name == WANDB_DIR_NAME and any(run.wandb_files for run in child.children))
        for child in node.children
    )


@dataclass
class _RunBuilder:
    node: _Node
    nodes: list[_Node] = field(default_factory=list)
    event_files: list[str] = field(default_factory=list)
    wandb_files: list[str] = field(default_factory=list)


def _assign(node: _Node, run: _RunBuilder | None, runs: list[_RunBuilder]) -> None:
    has_logs = node.event_files or node.wandb_files
    if node.listing.has_manifest or (run is None and (has_logs or _promotes_parent(node))):
        run = _RunBuilder(node)
        runs.append(run)
    if run is not None:
        run.nodes.append(node)
        run.event_files.extend(node.event_files)
        run.wandb_files.extend(node.wandb_files)
    for child in node.children:
        _assign(child, run, runs)


def _start_dir(root: Path, cache: ListingCache) -> Path:
    """The directory to walk so that `root`'s events land in the run they belong to.

    `triage out/runs` should show the run `out` when out/ has a triage.toml, or when runs/
    is a log dir beside out/'s checkpoints: look a few levels up before walking down.
    """
    if _is_file(root / MANIFEST_NAME):
        return root
    for ancestor in list(root.parents)[:MANIFEST_SEARCH_LEVELS]:
        if _is_file(ancestor / MANIFEST_NAME):
            return ancestor
    # `triage out/runs` or `triage out/runs/<date_host>` (`out/wandb/run-<id>`): the log dir or one below it.
    for log_dir in (root, root.parent):
        if log_dir.name.lower() in LOG_DIR_NAMES or log_dir.name == WANDB_DIR_NAME:
            # Three levels are all _promotes_parent looks at (save_path/epoch/ and log_dir/run/).
            probe = _walk(str(log_dir.parent), cache, set(), depth=3, within=(os.path.realpath(log_dir.parent),))
            if probe is not None and _promotes_parent(probe):
                return log_dir.parent
    return root


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


# --------------------------------------------------------------------------- artifacts


def _artifacts(run: _RunBuilder, cache: ListingCache) -> RunArtifacts:
    """The run's artifacts, recomputed only when one of its directories was re-listed."""
    key = tuple(id(node.listing) for node in run.nodes)
    cached = cache.artifacts.get(run.node.path)
    if cached is not None and cached[0] == key:
        return cached[1]
    artifacts = _collect_artifacts(run)
    cache.artifacts[run.node.path] = (key, artifacts)
    return artifacts


def _collect_artifacts(run: _RunBuilder) -> RunArtifacts:
    run_dir = run.node.path
    checkpoints: list[_Node] = []
    mappings: list[str] = []
    training_states: list[str] = []
    run_yamls: list[str] = []
    dumps: str | None = None
    targets = [
        node.path
        for node in run.nodes
        if node.path != run_dir and node.name.lower() in TARGET_DIR_NAMES and node.listing.has_config
    ]
    for node in run.nodes:
        if any(_is_under(node.path, t) for t in targets):
            continue  # the target model's weights are not the run's checkpoints
        listing = node.listing
        if _holds_checkpoint(node):  # SpecForge 0.2.0 keeps the drafter inside training_state.pt
            checkpoints.append(node)
        mappings.extend(os.path.join(node.path, name) for name in listing.mapping_names)
        if listing.has_training_state:
            training_states.append(os.path.join(node.path, TRAINING_STATE_NAME))
        if RUN_YAML_NAME in listing.files:
            run_yamls.append(os.path.join(node.path, RUN_YAML_NAME))
        if dumps is None and listing.dump_kind is not None:
            dumps = _dump_root(node, run_dir)
    checkpoints.sort(key=lambda n: natural_key(n.path))
    mappings.sort(key=natural_key)
    training_states.sort(key=natural_key)
    config_json = None
    if run.node.listing.has_config:
        config_json = os.path.join(run_dir, CONFIG_NAME)
    else:
        # The newest checkpoint's config tells the draft vocab size of what is being trained.
        newest = next((n for n in reversed(checkpoints) if n.listing.has_config), None)
        if newest is not None:
            config_json = os.path.join(newest.path, CONFIG_NAME)
    return RunArtifacts(
        config_json=Path(config_json) if config_json else None,
        checkpoints=tuple(Path(n.path) for n in checkpoints),
        mappings=tuple(map(Path, mappings)),
        dumps=Path(dumps) if dumps else None,
        training_state=Path(training_states[-1]) if training_states else None,
        target=Path(targets[0]) if targets else None,
        # The shallowest: the run's own --save-path, not a copy inside one of its checkpoints.
        run_yaml=Path(min(run_yamls, key=lambda p: (p.count(os.sep), natural_key(p)))) if run_yamls else None,
    )


def _dump_root(node: _Node, run_dir: str) -> str | None:
    """The root of a hidden-state dump this directory is part of, if it is one."""
    kind = node.listing.dump_kind
    if kind == "specforge":
        # SpecForge groups files as <out>/rows_{g}-{g+n}/data_{i}.ckpt: the root is <out>.
        if node.name.startswith("rows_") and node.path != run_dir:
            return os.path.dirname(node.path)
        return node.path
    if kind == "speculators":
        return node.path
    # modelopt writes <conversation_id>.pt; only trusted under a hidden-state-like dir.
    directory = node.path
    while directory != run_dir and _is_under(directory, run_dir):
        if _HIDDEN_DIR.search(os.path.basename(directory)):
            return directory
        directory = os.path.dirname(directory)
    return None


# --------------------------------------------------------------------------- discovery


def discover_runs(
    paths: Sequence[str | Path],
    *,
    cache: ListingCache | None = None,
    strict: bool = True,
    watched: Sequence[str | Path] = (),
) -> list[RunInfo]:
    """Every run under `paths` (any depth), in walk order; BadInput if a path does not exist.

    Symlinks to directories are followed only into `paths` and `watched` (see _walk).

    With ``strict`` a malformed triage.toml raises BadInput; without it the run is kept with
    ``manifest_error`` set, so one bad file cannot stop a watcher of many runs.
    """
    cache = cache if cache is not None else ListingCache()
    cache.skipped_links = {}
    found: dict[str, RunInfo] = {}
    roots = [Path(os.path.abspath(expand_user(raw))) for raw in (*paths, *watched)]
    within = tuple(os.path.realpath(root) for root in roots)
    for raw in paths:
        root = Path(os.path.abspath(expand_user(raw)))
        if S_ISREG(stat_or_bad_input(root).st_mode):
            for info in _file_run(root, cache, strict):
                found.setdefault(str(info.path), info)
            continue
        start = str(_start_dir(root, cache))
        tree = _walk(start, cache, set(), within=(*within, os.path.realpath(start)))
        if tree is None:
            if strict:
                _raise_unlistable(Path(start))
            continue  # unreadable directory: nothing to show, nothing to crash on
        builders: list[_RunBuilder] = []
        _assign(tree, None, builders)
        for builder in sorted(builders, key=lambda b: natural_key(b.node.path)):
            run_dir = builder.node.path
            if not (_is_under(run_dir, str(root)) or run_dir == start):
                continue  # a sibling of the given path, reached only because we walked from above
            if run_dir not in found:
                found[run_dir] = _run_info(builder, str(root), cache, strict)
    return list(found.values())


def _raise_unlistable(path: Path) -> None:
    """BadInput saying why a directory given on the command line could not be walked."""
    try:
        with os.scandir(path):
            pass
    except OSError as err:
        raise BadInput(path, f"cannot list it: {err.strerror or err}") from None
    raise BadInput(path, "cannot list it")


def _run_name(run_dir: str, root: str) -> str:
    if run_dir != root and _is_under(run_dir, root):
        return Path(os.path.relpath(run_dir, root)).as_posix()
    return os.path.basename(run_dir) or run_dir


def _load_run_manifest(path: Path, cache: ListingCache, strict: bool) -> tuple[Manifest | None, str | None]:
    try:
        return cache.manifest(path), None
    except BadInput as err:
        if strict:
            raise
        return None, err.line()


def _run_info(builder: _RunBuilder, root: str, cache: ListingCache, strict: bool) -> RunInfo:
    manifest, manifest_error = None, None
    run_dir = Path(builder.node.path)
    if builder.node.listing.has_manifest:
        manifest, manifest_error = _load_run_manifest(run_dir / MANIFEST_NAME, cache, strict)
    return RunInfo(
        path=run_dir,
        name=_run_name(builder.node.path, root),
        event_files=tuple(Path(p) for p in sorted(builder.event_files, key=natural_key)),
        manifest=manifest,
        artifacts=_artifacts(builder, cache),
        manifest_error=manifest_error,
        wandb_files=tuple(Path(p) for p in builder.wandb_files),
    )


def check_watch_path(path: Path) -> None:
    """BadInput unless ``path`` is something runs can be found in: a directory, an event file, a W&B
    run file or a triage.toml. The TUI asks before it starts, so `triage README.md` says so instead
    of watching nothing."""
    if not path.exists():
        raise BadInput(path, "no such file or directory")
    name = path.name
    if path.is_dir() or name == MANIFEST_NAME or is_event_file_name(name) or is_wandb_file_name(name):
        return
    raise BadInput(path, "not a directory, an event file (*tfevents*), a W&B run file (run-*.wandb) or a triage.toml")


def _file_run(path: Path, cache: ListingCache, strict: bool) -> list[RunInfo]:
    """A path that is a file: one event file is a run of its own; a triage.toml names its dir."""
    check_watch_path(path)
    if path.name == MANIFEST_NAME:
        return discover_runs([path.parent], cache=cache, strict=strict)
    wandb_file = is_wandb_file_name(path.name)
    manifest, manifest_error = None, None
    if _is_file(path.parent / MANIFEST_NAME):
        manifest, manifest_error = _load_run_manifest(path.parent / MANIFEST_NAME, cache, strict)
    if wandb_file:
        return [RunInfo(path.parent, path.name, (), manifest, RunArtifacts(), manifest_error, (path,))]
    return [RunInfo(path.parent, path.name, (path,), manifest, RunArtifacts(), manifest_error)]
