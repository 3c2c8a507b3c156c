"""What a run is: discovery of run directories and their artifacts (the manifest: ``core/read/runs/manifest.py``).

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

HF Trainer's output dir is a run with no event files too: every ``checkpoint-N/`` holds a
``trainer_state.json`` whose log history is written whatever ``report_to`` says, so a directory
with such a child is a run (``_holds_trainer_state``) and its newest one a scalar source.

A run's files of each kind of scalar source (``RunInfo.scalar_files``, what ``scan --json`` lists
as its ``sources``) are asked of each kind core/read/source_kinds/registry.py lists: the rules above
place event files, W&B run files, consoles and trainer_state.json; a kind registered beside them
takes the files of the run it claims by name, and a directory holding one is a run (``makes_run``).

Discovery runs every few seconds while the TUI watches, so it reads no file but
``triage.toml`` (``core/read/runs/config.py``'s ``read_config`` is called by the watcher only when
``config.json`` changed) and, for a directory nothing else makes a run, the first and last 64 KiB
of its consoles, once per change of theirs (``ListingCache.holds_trainer_lines``); an unchanged
directory costs one ``stat`` (``core/read/runs/listing.py``). The walk itself is ``core/read/runs/walk.py``.
Artifacts are recognised by name only (``core/read/runs/names.py``); no pickle is ever opened here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG

from triage_tui.core.errors import BadInput
from triage_tui.core.natural_sort import natural_key
from triage_tui.core.read.runs.info import RunArtifacts, RunInfo
from triage_tui.core.read.runs.listing import ListingCache
from triage_tui.core.read.runs.manifest import Manifest, expand_user, stat_or_bad_input
from triage_tui.core.read.runs.names import (
    CONFIG_NAME,
    HF_CHECKPOINT_DIR,
    HIDDEN_DIR,
    LOG_DIR_NAMES,
    MANIFEST_NAME,
    RUN_YAML_NAME,
    SPECFORGE_BEST_META_SUFFIX,
    TARGET_DIR_NAMES,
    TRAINER_STATE_NAME,
    TRAINING_STATE_NAME,
    WANDB_DIR_NAME,
    is_event_file_name,
    is_wandb_file_name,
    specforge_run_id,
)
from triage_tui.core.read.runs.tracker_runs import store_runs
from triage_tui.core.read.runs.walk import Node, is_under, preorder, walk
from triage_tui.core.read.source_kinds import registry
from triage_tui.core.read.source_kinds.kind import RunTree

# How far up from a given path to look for the triage.toml of the run it lies in
# (`triage out/runs` when out/triage.toml exists): manifests sit at the output dir,
# event files one or two levels below it.
MANIFEST_SEARCH_LEVELS = 3


def _is_file(path: Path) -> bool:
    """Path.is_file, False where the path cannot even be looked at (pathlib raises PermissionError)."""
    try:
        return path.is_file()
    except OSError:
        return False


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


# What discovery looks for, said whenever it finds nothing (``scan``, ``check``, the TUI's empty table).
LOOKED_FOR = (
    "looked for TensorBoard event files (*tfevents*), W&B run files (run-*.wandb), training consoles "
    "(*.log, *.out beside checkpoints or holding a trainer's metrics lines), HF Trainer's "
    "checkpoint-N/trainer_state.json, trackers' records (mlflow.db, mlruns/, trackio's <project>.db beside its "
    ".lock, Lightning's metrics.csv, torchtune's log_*.txt, NeMo's training.jsonl) and triage.toml (its [logs] "
    "console names a console anywhere)"
)


def _holds_checkpoint(node: Node) -> bool:
    return node.listing.has_weights or node.listing.has_training_state


def _holds_output(node: Node) -> bool:
    """A trainer's output dir (module doc): a config.json, a checkpoint child, or a
    save-path child of numbered epoch checkpoints (speculators ``<save_path>/<epoch>/``)."""
    return node.listing.has_config or any(
        _holds_checkpoint(child)
        or any(grandchild.name.isdigit() and _holds_checkpoint(grandchild) for grandchild in child.children)
        for child in node.children
    )


def _hf_checkpoint_step(node: Node) -> int | None:
    """N of an HF ``checkpoint-<N>/`` holding its ``trainer_state.json``, else None (by name only)."""
    match = HF_CHECKPOINT_DIR.match(node.name)
    return int(match.group(1)) if match is not None and TRAINER_STATE_NAME in node.listing.files else None


def _holds_trainer_state(node: Node) -> bool:
    """An HF Trainer's output dir: a ``checkpoint-<N>/`` child with its ``trainer_state.json``, whose
    log history is a scalar source even with every tracker off (``report_to="none"``)."""
    return any(_hf_checkpoint_step(child) is not None for child in node.children)


def _is_log_dir(node: Node) -> bool:
    """runs/, logs/ or tensorboard/ with event files in it or one level below (HF's
    ``runs/<date_host>/``, speculators' ``logs/<run_name>/``), and no manifest of its own."""
    if node.name.lower() not in LOG_DIR_NAMES or node.listing.has_manifest:
        return False
    return bool(node.event_files) or any(
        child.event_files and not child.listing.has_manifest for child in node.children
    )


def _promotes_parent(node: Node) -> bool:
    """`node` is an output dir holding a log dir of event files (or a wandb/ dir of runs): it is the run.

    So is a directory holding both a log dir (or event files of its own) and a wandb/ dir of runs,
    checkpoints or not: one trainer wrote both (HF Trainer with report_to tensorboard and wandb, or
    a run stopped before its first save), and two runs would split one curve between them.

    And so is a directory holding a console beside a log dir of one writer (its event files in it
    or in one directory below it): SpecForge's usual layout before its first checkpoint, events in
    ``out/runs/`` and the console the user redirected in ``out/train.log``, whose crash must be
    the run's. A log dir of several writers beside a loose log is a sweep's, left apart."""
    log_dir = any(_is_log_dir(child) for child in node.children)
    wandb_dir = any(_is_wandb_dir(child) for child in node.children)
    return (
        (_holds_output(node) and (log_dir or wandb_dir))
        or ((log_dir or bool(node.event_files)) and wandb_dir)
        or (bool(node.console_files) and any(_is_one_writers_log_dir(child) for child in node.children))
    )


def _is_one_writers_log_dir(node: Node) -> bool:
    if not _is_log_dir(node):
        return False
    below = [child for child in node.children if child.event_files and not child.listing.has_manifest]
    return bool(node.event_files) + len(below) == 1


def _is_wandb_dir(node: Node) -> bool:
    return node.name == WANDB_DIR_NAME and any(run.wandb_files for run in node.children)


@dataclass
class _RunBuilder:
    node: Node
    nodes: list[Node] = field(default_factory=list)
    event_files: list[str] = field(default_factory=list)
    wandb_files: list[str] = field(default_factory=list)


def _assign(tree: Node, runs: list[_RunBuilder], cache: ListingCache) -> None:
    """Which directories are runs, and which directories each run holds (walk order, no recursion).

    A run holds every directory below it until one that has a triage.toml. A directory that is a
    run only by its consoles (a ``*.log`` or ``*.out`` beside a trainer's checkpoints, or one that
    holds a trainer's lines: SpecForge's default with tracking off, any trainer redirected to a
    file) is one only when no run lies below it: at a sweep's root, ``nohup.out`` or the launcher's
    log beside a ``config.json`` is the sweep's own, and must not swallow the runs below. An HF
    Trainer's output dir is a run too: its checkpoints' trainer_state.json hold the logged history.
    """
    order = preorder(tree)
    below: dict[int, bool] = {}  # id(node) -> some directory under it is a run of its own
    own: dict[int, bool] = {}  # id(node) -> it is a run by its own files, whatever is above it
    for node in reversed(order):  # children before their parents
        below[id(node)] = any(own[id(child)] or below[id(child)] for child in node.children)
        strong = bool(
            node.listing.has_manifest
            or node.event_files
            or node.wandb_files
            or _holds_trainer_state(node)
            or _promotes_parent(node)
            or _holds_claimed_files(node, cache)
        )
        own[id(node)] = strong or (not below[id(node)] and _console_run(node, cache))
    owner: dict[int, _RunBuilder | None] = {id(tree): None}
    for node in order:
        run = owner.pop(id(node))
        if node.listing.has_manifest or (run is None and own[id(node)]):
            run = _RunBuilder(node)
            runs.append(run)
        if run is not None:
            run.nodes.append(node)
            run.event_files.extend(node.event_files)
            run.wandb_files.extend(node.wandb_files)
        for child in node.children:
            owner[id(child)] = run


def _console_run(node: Node, cache: ListingCache) -> bool:
    """A directory that is a run by its training consoles: one beside a trainer's checkpoints, or
    one whose head or tail holds a trainer's metrics line (``ListingCache.holds_trainer_lines``:
    a ``*.log`` of anything else makes no run)."""
    if not node.console_files:
        return False
    return _holds_output(node) or any(cache.holds_trainer_lines(path) for path in node.console_files)


def _holds_claimed_files(node: Node, cache: ListingCache) -> bool:
    """A file of a kind of scalar source that makes a run (core/read/source_kinds/registry.py) is here,
    by the kind's own rule (its ``files``: trackio's database beside its lock, MLflow's run directory).
    The kinds judge names alone: asked again only when the directory was listed again."""
    cached = cache.claims.get(node.path)
    if cached is not None and cached[0] is node.listing:
        return cached[1]
    here = RunTree(Path(node.path), ((node.path, node.listing.files),), subdirs=node.listing.dirs)
    claimed = any(kind.files_in(here) for kind in registry.SCALAR_SOURCES if kind.makes_run)
    cache.claims[node.path] = (node.listing, claimed)
    return claimed


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
            probe = walk(str(log_dir.parent), cache, set(), depth=3, within=(os.path.realpath(log_dir.parent),))
            if probe is not None and _promotes_parent(probe):
                return log_dir.parent
    return root


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
    checkpoints: list[Node] = []
    mappings: list[str] = []
    training_states: list[str] = []
    run_yamls: list[str] = []
    trainer_states: list[tuple[int, int, str]] = []  # (N, depth, path) of checkpoint-<N>/trainer_state.json
    dumps: str | None = None
    targets = [
        node.path
        for node in run.nodes
        if node.path != run_dir and node.name.lower() in TARGET_DIR_NAMES and node.listing.has_config
    ]
    for node in run.nodes:
        if any(is_under(node.path, t) for t in targets):
            continue  # the target model's weights are not the run's checkpoints
        listing = node.listing
        if _holds_checkpoint(node):  # SpecForge 0.2.0 keeps the drafter inside training_state.pt
            checkpoints.append(node)
        mappings.extend(os.path.join(node.path, name) for name in listing.mapping_names)
        if listing.has_training_state:
            training_states.append(os.path.join(node.path, TRAINING_STATE_NAME))
        if RUN_YAML_NAME in listing.files:
            run_yamls.append(os.path.join(node.path, RUN_YAML_NAME))
        step = _hf_checkpoint_step(node)
        if step is not None:
            trainer_states.append((step, -node.path.count(os.sep), os.path.join(node.path, TRAINER_STATE_NAME)))
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
        # The largest N, as transformers' get_last_checkpoint picks it; the shallowest among equals.
        trainer_state=Path(max(trainer_states)[2]) if trainer_states else None,
        best_meta=_best_meta(run.node, checkpoints),
    )


def _best_meta(node: Node, checkpoints: Sequence[Node]) -> Path | None:
    """The run directory's SpecForge ``<run_id>.best_meta.json``: of several run ids (two configs
    writing into one output directory), the one the newest checkpoint belongs to, else the last."""
    metas = [name for name in node.listing.files if name.endswith(SPECFORGE_BEST_META_SUFFIX)]
    if not metas:
        return None
    run_ids = {specforge_run_id(name): name for name in metas}
    for checkpoint in reversed(checkpoints):
        name = run_ids.get(specforge_run_id(checkpoint.name))
        if name is not None:
            return Path(node.path, name)
    return Path(node.path, metas[-1])


def _dump_root(node: Node, run_dir: str) -> str | None:
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
    while directory != run_dir and is_under(directory, run_dir):
        if HIDDEN_DIR.search(os.path.basename(directory)):
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
    keep_bad_manifests: bool = False,
) -> list[RunInfo]:
    """Every run under `paths` (any depth), in walk order; BadInput if a path does not exist.

    Symlinks to directories are followed only into `paths` and `watched` (see core/read/runs/walk.py).

    With ``strict`` a path that cannot be listed, or a malformed triage.toml, raises BadInput;
    without it (or with ``keep_bad_manifests``: ``scan`` of many runs) the run is kept with
    ``manifest_error`` set, so one bad file cannot stop a report of many runs.
    """
    manifests_strict = strict and not keep_bad_manifests
    cache = cache if cache is not None else ListingCache()
    cache.skipped_links = {}
    cache.walk_limits = {}
    cache.listed = 0
    found: dict[str, RunInfo] = {}
    roots = [Path(os.path.abspath(expand_user(raw))) for raw in (*paths, *watched)]
    within = tuple(os.path.realpath(root) for root in roots)
    for raw in paths:
        root = Path(os.path.abspath(expand_user(raw)))
        if S_ISREG(stat_or_bad_input(root).st_mode):
            for info in _file_run(root, cache, manifests_strict):
                found.setdefault(str(info.path), info)
            continue
        start = str(_start_dir(root, cache))
        tree = walk(start, cache, set(), within=(*within, os.path.realpath(start)))
        if tree is None:
            if strict:
                _raise_unlistable(Path(start))
            continue  # unreadable directory: nothing to show, nothing to crash on
        builders: list[_RunBuilder] = []
        _assign(tree, builders, cache)
        for builder in sorted(builders, key=lambda b: natural_key(b.node.path)):
            run_dir = builder.node.path
            if not (is_under(run_dir, str(root)) or run_dir == start):
                continue  # a sibling of the given path, reached only because we walked from above
            if run_dir not in found:
                # A tracker's store of several runs: one run each (core/read/runs/tracker_runs.py).
                for info in store_runs(_run_info(builder, str(root), cache, manifests_strict), str(root), cache):
                    found.setdefault(str(info.path), info)
    cache.forget_gone()
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
    if run_dir != root and is_under(run_dir, root):
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
    artifacts = _artifacts(builder, cache)
    # Everything below is a function of these (names, and which event files are not empty): the same
    # RunInfo while they are the same, which also lets the watcher see an unchanged run at a glance.
    nodes = tuple((node.path, node.listing, node.event_files) for node in builder.nodes)
    key = (nodes, manifest, manifest_error, artifacts)
    cached = cache.run_infos.get((builder.node.path, root))
    if cached is not None and cached[0] == key:
        return cached[1]
    tree = RunTree(
        path=run_dir,
        dirs=tuple((node.path, node.listing.files) for node in builder.nodes),
        event_files=tuple(Path(p) for p in sorted(builder.event_files, key=natural_key)),
        wandb_files=tuple(Path(p) for p in builder.wandb_files),
        console_files=_console_files(builder.node, manifest),
        trainer_state=artifacts.trainer_state,
        subdirs=builder.node.listing.dirs,
    )
    info = RunInfo(
        path=run_dir,
        name=_run_name(builder.node.path, root),
        event_files=tree.event_files,
        manifest=manifest,
        artifacts=artifacts,
        manifest_error=manifest_error,
        wandb_files=tree.wandb_files,
        console_files=tree.console_files,
        scalar_files=_scalar_files(tree),
    )
    cache.run_infos[(builder.node.path, root)] = (key, info)
    return info


def _scalar_files(tree: RunTree) -> tuple[tuple[str, tuple[Path, ...]], ...]:
    """The run's files of each registered kind of scalar source that has any, in the registry's order."""
    found = ((kind.name, kind.files_in(tree)) for kind in registry.SCALAR_SOURCES)
    return tuple((name, files) for name, files in found if files)


def _console_files(node: Node, manifest: Manifest | None) -> tuple[Path, ...]:
    """The run's training consoles: those its triage.toml names ([logs] console), then the *.log and
    *.out in the run's own directory (not below it: a W&B directory's debug.log and output.log, a
    log dir's files), less the serving logs the triage.toml names."""
    named = manifest.console_logs if manifest is not None else ()
    serving = set(manifest.serving_logs) if manifest is not None else set()
    found = (Path(p) for p in sorted(node.console_files, key=natural_key))
    return tuple(dict.fromkeys(p for p in (*named, *found) if p not in serving))


def file_kind(name: str) -> str | None:
    """The kind of scalar source a file given alone is a run of (core/read/source_kinds/registry.py):
    an event file, a W&B run file, or a file of a kind that makes runs; else None."""
    for kind in registry.SCALAR_SOURCES:
        if (kind.makes_run or _alone(name)) and kind.claims(name):
            return kind.name
    return None


def _alone(name: str) -> bool:
    """An event file or a W&B run file: each a run of its own when given alone (docs/contracts.md)."""
    return is_event_file_name(name) or is_wandb_file_name(name)


def check_watch_path(path: Path) -> None:
    """BadInput unless ``path`` is something runs can be found in: a directory, an event file, a W&B
    run file (or a file of another kind of scalar source that makes runs) or a triage.toml. The TUI
    asks before it starts, so `triage README.md` says so instead of watching nothing."""
    if not path.exists():
        raise BadInput(path, "no such file or directory")
    if path.is_dir() or path.name == MANIFEST_NAME or file_kind(path.name) is not None:
        return
    raise BadInput(path, "not a directory, an event file (*tfevents*), a W&B run file (run-*.wandb) or a triage.toml")


def _file_run(path: Path, cache: ListingCache, strict: bool) -> list[RunInfo]:
    """A path that is a file: one scalar file is a run of its own; a triage.toml names its dir."""
    check_watch_path(path)
    if path.name == MANIFEST_NAME:
        return discover_runs([path.parent], cache=cache, strict=strict)
    kind = file_kind(path.name)
    manifest, manifest_error = None, None
    if _is_file(path.parent / MANIFEST_NAME):
        manifest, manifest_error = _load_run_manifest(path.parent / MANIFEST_NAME, cache, strict)
    events = (path,) if is_event_file_name(path.name) else ()
    wandb = (path,) if is_wandb_file_name(path.name) else ()
    files = ((kind, (path,)),) if kind is not None else ()
    info = RunInfo(path.parent, path.name, events, manifest, RunArtifacts(), manifest_error, wandb, (), files)
    return store_runs(info, str(path.parent), cache)  # a store of several runs given alone: each


def store_run_at(path: Path) -> RunInfo | None:
    """The run of a tracker's store that ``path`` names (``<dir>/mlflow.db/<run id>``, as ``scan``
    lists it: core/read/runs/tracker_runs.py), None where ``path`` exists or names no such run."""
    if os.path.lexists(path):
        return None
    store = next((parent for parent in path.parents if _is_file(parent)), None)
    if store is None:
        return None
    runs = discover_runs([store.parent], strict=False)
    return next((info for info in runs if info.path == path and info.store_run is not None), None)
