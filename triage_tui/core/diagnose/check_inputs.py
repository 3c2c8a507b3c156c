"""A run's inputs for the checks, and where each one came from.

Inputs are resolved field by field with the precedence command-line flag > ``triage.toml``
> SpecForge ``training_state.pt`` args > speculators ``run.yaml`` > discovery (``core/read/runs/``
artifacts); every choice a lower source made, or why it was passed over, is kept as a note the
user sees. A checkpoint or target named by hub id (``org/name``, ``org/name@revision``) anywhere
is taken from the local Hugging Face cache (core/formats/hub.py), never downloaded.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import TYPE_CHECKING, Any

from triage_tui.core.errors import BadInput

if TYPE_CHECKING:
    from triage_tui.core.formats.hub import HubModel
    from triage_tui.core.read.runs.info import RunInfo
    from triage_tui.core.read.runs.manifest import Manifest

INPUT_NAMES = ("checkpoint", "mapping", "data", "target")

# SpecForge classic scripts/train_eagle3.py argument names, as saved in training_state.pt's
# args Namespace: the drafter the fine-tune started from, the target, the offline dumps, and
# the cache dir whose vocab_mapping/<key>.pt holds the mapping the trainer labelled with
# (specforge/data/preprocessing.py generate_vocab_mapping_file).
# SpecForge 0.2.0 saves no args; its resume contract's model provenance names the target and the
# draft config source (the starting drafter's directory when the config came from it), and a
# vocab_mapping_path when one was given (formats/training_state.py). Without one, the run's
# mapping is the d2t/t2d it saved in draft_state_dict.
TRAINING_ARG_CHECKPOINT = ("ckpt_dir", "draft_config")
TRAINING_ARG_TARGET = ("target_model_path", "target_model")
TRAINING_ARG_DATA = ("train_hidden_states_path",)
TRAINING_ARG_CACHE = ("cache_dir",)
TRAINING_ARG_MAPPING = ("vocab_mapping",)


@dataclass(frozen=True)
class CheckInputs:
    """The four inputs of a diagnosis, and where each one came from."""

    run: Path
    checkpoint: Path | None = None
    mapping: Path | None = None
    data: Path | None = None
    target: Path | None = None
    # input name -> "flag" | "triage.toml" | "training_state.pt" | "run.yaml" | "discovery"
    sources: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # The checkpoints the run saved, oldest first (discovery): the mapping-health check compares
    # their d2t/t2d with one another.
    run_checkpoints: tuple[Path, ...] = ()
    # The drafter the run started from and who says so (a source as in ``sources``), which is the
    # checkpoint checked unless a flag names another one (a remap's output, a candidate) while the
    # run's own record (triage.toml, training_state.pt, run.yaml) names its start; None when nothing
    # names a start. The checks score ``checkpoint``; warm_start_broken judges ``start``.
    start: Path | None = None
    start_source: str | None = None
    # The checked checkpoint is triage's remap of this one (its triage-remap.json).
    remapped_from: Path | None = None

    def paths(self) -> dict[str, str | None]:
        return {name: (str(getattr(self, name)) if getattr(self, name) is not None else None) for name in INPUT_NAMES}

    def fix_commands(self) -> tuple[str, str] | None:
        """The shell commands of both fixes, remap the rows or keep the checkpoint's mapping; None
        without a checkpoint and a mapping. `check`'s text and the TUI show these same commands, so
        rows a drafter never had are initialised the same way (`--target`) from either."""
        if self.checkpoint is None or self.mapping is None:
            return None
        from triage_tui.core.read.runs.remote import shown_path

        # A bucket's input by its URL (the mirror's directory is gone when this process ends).
        checkpoint = shown_path(self.checkpoint)
        words = ["triage", "remap", checkpoint, "--mapping", shown_path(self.mapping)]
        if self.target is not None:
            words += ["--target", shown_path(self.target)]  # new rows from the target's lm_head
            if self.data is not None:
                words += ["--data", shown_path(self.data)]  # replay accuracy before and after
        return shlex.join(words), shlex.join(["triage", "remap", checkpoint, "--keep-checkpoint-mapping"])


@dataclass(frozen=True)
class ResolvedRun:
    """A run's inputs and the run as discovery found it: its ``RunInfo`` (None where only flags name
    inputs) and its triage.toml as read once, for whoever reads the run's other evidence next
    (core/diagnose/evidence.py), so neither is discovered or parsed again."""

    inputs: CheckInputs
    info: RunInfo | None
    manifest: Manifest | None


def resolve_run(
    run: str | Path,
    *,
    checkpoint: str | Path | None = None,
    mapping: str | Path | None = None,
    data: str | Path | None = None,
    target: str | Path | None = None,
) -> ResolvedRun:
    """The run's check inputs (flags > triage.toml > training_state.pt args > run.yaml > discovery),
    with its discovery and manifest (``ResolvedRun``); BadInput for a missing run or flag path."""
    from triage_tui.core.read.runs.discover import LOOKED_FOR, discover_runs, store_run_at
    from triage_tui.core.read.runs.manifest import expand_user, load_manifest, stat_or_bad_input
    from triage_tui.core.read.runs.names import MANIFEST_NAME

    run_path = Path(os.path.abspath(expand_user(run)))
    stored = store_run_at(run_path)  # one of a tracker store's runs: <dir>/mlflow.db/<run id>
    if stored is None and S_ISREG(stat_or_bad_input(run_path, "no such run directory").st_mode):
        # An event file or a triage.toml names the run it sits in.
        run_path = run_path.parent
    flags: dict[str, str | Path | None] = {"checkpoint": checkpoint, "mapping": mapping, "data": data, "target": target}
    notes: list[str] = []
    for name, value in flags.items():
        if value is None:
            continue
        hub = _flag_hub_model(name, value)
        if hub is None:
            stat_or_bad_input(expand_user(value), f"--{name}: no such file or directory")
        elif hub.path is None:
            raise BadInput(str(value), hub.line(f"--{name}"))
        else:
            notes.append(hub.line(f"--{name}"))
            flags[name] = hub.path

    infos = [stored] if stored is not None else discover_runs([run_path])
    info = next((i for i in infos if i.path == run_path), None)
    if info is None and len(infos) > 1:
        names = ", ".join(i.name for i in infos[:4]) + (", ..." if len(infos) > 4 else "")
        raise BadInput(run_path, f"holds {len(infos)} runs ({names}); pass one of them")
    info = info or (infos[0] if infos else None)
    if info is None and not (run_path / MANIFEST_NAME).is_file() and not any(flags.values()):
        raise BadInput(
            run_path,
            f"not a run: nothing here or below ({LOOKED_FOR}), and no --checkpoint/--mapping/--data/--target to check",
        )
    if info is not None and info.path != run_path:
        notes.append(f"the run is {info.path} (found from {run_path})")
        run_path = info.path
    manifest = info.manifest if info is not None else None
    if manifest is None and (run_path / MANIFEST_NAME).is_file():
        manifest = load_manifest(run_path / MANIFEST_NAME)
    if manifest is not None:
        notes.extend(note for note in manifest.notes if not any(flags[n] is not None for n in _named_in(note)))
    artifacts = info.artifacts if info is not None else None
    if manifest is not None:
        notes.extend(manifest.untrusted)  # what another user's triage.toml named and check does not use

    chosen: dict[str, Path | None] = {}
    sources: dict[str, str] = {}
    for name in INPUT_NAMES:
        flag = flags[name]
        if flag is not None:
            chosen[name], sources[name] = Path(os.path.abspath(expand_user(flag))), "flag"
        elif manifest is not None and getattr(manifest, name) is not None:
            chosen[name], sources[name] = getattr(manifest, name), "triage.toml"
    # Lower sources are consulted only for what is still missing; the notes kept are those of the
    # sources tried for it (a stale training arg behind a manifest path is no news).
    missing = [name for name in INPUT_NAMES if name not in chosen]
    if missing:
        state, args_notes = _training_state(artifacts)
        by_training = _from_training_state(state, run_path)
        by_run_yaml = _from_run_yaml(getattr(artifacts, "run_yaml", None))
        by_discovery = _discovered(artifacts)
        used_training = False
        for name in missing:
            chosen[name] = None
            for source, (path, field_notes) in (
                ("training_state.pt", by_training[name]),
                ("run.yaml", by_run_yaml[name]),
                ("discovery", by_discovery[name]),
            ):
                notes.extend(field_notes)  # why a source was passed over, or what the used one chose
                if path is not None:
                    chosen[name], sources[name] = path, source
                    used_training |= source == "training_state.pt"
                    break
        if args_notes and not used_training:
            notes.extend(args_notes)
    if sources.get("checkpoint") == "discovery":
        notes.append(
            f"no starting checkpoint is recorded (flag, triage.toml, training_state.pt ckpt_dir or run.yaml "
            f"from_pretrained): using the "
            f"run's earliest saved checkpoint {chosen['checkpoint']}. Its d2t/t2d are the run's own, so the "
            f"vocab check cannot see a mismatch with the drafter the fine-tune started from: pass --checkpoint"
        )
    run_checkpoints = tuple(artifacts.checkpoints) if artifacts is not None else ()
    start, start_source, remapped_from = _start(
        chosen["checkpoint"], sources.get("checkpoint"), run_path, manifest, artifacts, notes
    )
    inputs = CheckInputs(
        run=run_path,
        sources=sources,
        notes=tuple(notes),
        run_checkpoints=run_checkpoints,
        start=start,
        start_source=start_source,
        remapped_from=remapped_from,
        **chosen,
    )
    return ResolvedRun(inputs, info, manifest)


def _start(
    checked: Path | None, source: str | None, run_path: Path, manifest, artifacts, notes: list[str]
) -> tuple[Path | None, str | None, Path | None]:
    """(the run's starting drafter, who names it, what the checked checkpoint was remapped from).

    The run's record says where it started: triage.toml > training_state.pt > run.yaml. A flag
    names the checkpoint to check; it is the start too only when the run records none and it is
    not triage's own remap output (which no run started from unless its record says so: a run
    restarted from the repair names it in its triage.toml or training_state.pt)."""
    from triage_tui.core.formats.remap_record import read_remap_record

    if checked is None:
        return None, None, None
    record = read_remap_record(checked)
    remapped_from = record.source if record is not None else None
    if source != "flag":
        return checked, source, remapped_from
    recorded, recorded_source = _recorded_start(run_path, manifest, artifacts)
    if recorded is not None and not _same_path(recorded, checked):
        notes.append(
            f"the checks score {checked}; the run started from {recorded} ({recorded_source}), "
            "the drafter its start is judged against"
        )
        if remapped_from is not None and _same_path(remapped_from, recorded):
            remapped_from = recorded  # spelled as the run's record spells it: the same drafter
        return recorded, recorded_source, remapped_from
    if recorded is None and record is not None:
        notes.append(
            f"{checked} is triage's remap of {record.source} ({record.path.name}), and the run records no "
            "starting drafter (triage.toml checkpoint, training_state.pt, run.yaml): its start is not judged"
        )
        return None, None, remapped_from
    return checked, source, remapped_from


def _recorded_start(run_path: Path, manifest, artifacts) -> tuple[Path | None, str | None]:
    """The starting drafter the run's own record names, the first of triage.toml > training_state.pt > run.yaml."""
    if manifest is not None and manifest.checkpoint is not None:
        return manifest.checkpoint, "triage.toml"
    if artifacts is None:
        return None, None
    state, _ = _training_state(artifacts)
    path, _ = _from_training_state(state, run_path)["checkpoint"]
    if path is not None:
        return path, "training_state.pt"
    path, _ = _from_run_yaml(getattr(artifacts, "run_yaml", None))["checkpoint"]
    return (path, "run.yaml") if path is not None else (None, None)


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


Found = tuple[Path | None, list[str]]  # a candidate path and the notes that come with it

_HUB_INPUTS = ("checkpoint", "target")  # the inputs a hub id may name: a drafter, a target


def _flag_hub_model(name: str, value: str | Path) -> HubModel | None:
    """A --checkpoint/--target value that is no path here but a hub id: where the cache holds it."""
    if name not in _HUB_INPUTS or os.path.lexists(os.path.expanduser(str(value))):
        return None
    return _cached_hub_model(str(value))


def _named_in(note: str) -> list[str]:
    """The input a manifest note is about ("triage.toml target names ..."), to drop it behind a flag."""
    return [name for name in _HUB_INPUTS if note.startswith(f"triage.toml {name} ")]


def _training_state(artifacts):
    path = getattr(artifacts, "training_state", None)
    if path is None:
        return None, []
    from triage_tui.core.formats.training_state import read_training_state

    try:
        return read_training_state(path), []
    except BadInput as err:
        return None, [f"training_state.pt not used: {err.line()}"]


def _from_training_state(state, run_path: Path) -> dict[str, Found]:
    args = state.args if state is not None else {}
    mapping, mapping_notes = _arg_path(args, TRAINING_ARG_MAPPING, run_path)
    if mapping is None:
        cache_dir, cache_notes = _arg_path(args, TRAINING_ARG_CACHE, run_path)
        mapping, cache_mapping_notes = _cache_mapping(cache_dir)
        mapping_notes += cache_notes + cache_mapping_notes
    if mapping is None and state is not None and state.generation == "0.2.0":
        mapping = state.path  # the d2t/t2d the trainer installed and saved with the drafter
    checkpoint, checkpoint_notes = _arg_path(args, TRAINING_ARG_CHECKPOINT, run_path, hub=True)
    if checkpoint is not None and not _holds_weights(checkpoint):
        # 0.2.0's draft_config source is a config file when model.draft_model_config was given.
        checkpoint_notes.append(
            f"training_state.pt names {checkpoint} as the draft config source; "
            "it holds no weights, so it is not the starting drafter"
        )
        checkpoint = None
    return {
        "checkpoint": (checkpoint, checkpoint_notes),
        "target": _arg_path(args, TRAINING_ARG_TARGET, run_path, hub=True),
        "data": _arg_path(args, TRAINING_ARG_DATA, run_path),
        "mapping": (mapping, mapping_notes),
    }


def _from_run_yaml(path: Path | None) -> dict[str, Found]:
    """speculators' run.yaml (formats/run_yaml.py): the starting drafter, the verifier, and the
    mapping ``parse_vocab_mappings`` labelled with, wherever ``--data-path`` put it."""
    found: dict[str, Found] = {name: (None, []) for name in INPUT_NAMES}
    if path is None:
        return found
    from triage_tui.core.formats.run_yaml import read_run_yaml

    try:
        config = read_run_yaml(path)
    except BadInput as err:
        found["checkpoint"] = (None, [f"run.yaml not used: {err.line()}"])
        return found
    # Relative paths are relative to the trainer's working directory; speculators' examples run
    # from the directory that holds --save-path (the run yaml's parent's parent) or the run's.
    base = path.parent
    named = {
        "checkpoint": ("draft.from_pretrained", config.from_pretrained),
        "target": ("verifier.verifier_name_or_path", config.verifier),
        "mapping": ("draft.d2t_path" if config.d2t_path else "data.data_path", config.mapping_path()),
    }
    for name, (key, value) in named.items():
        if value is not None:
            found[name] = _arg_path({key: value}, (key,), base, origin=f"{path}: train", hub=name in _HUB_INPUTS)
    checkpoint, notes = found["checkpoint"]
    if checkpoint is not None and not _holds_weights(checkpoint):
        # speculators' is_config_only_dir: a config-only directory initialises fresh weights.
        found["checkpoint"] = (None, [*notes, f"{path} from_pretrained {checkpoint} holds no weights: a fresh start"])
    return found


def _holds_weights(path: Path) -> bool:
    from triage_tui.core.formats.weights import find_weights

    try:
        find_weights(path)
    except BadInput:
        return False
    return True


def _arg_path(
    args: dict[str, Any],
    keys: Sequence[str],
    run_path: Path,
    origin: str = "training_state.pt args",
    *,
    hub: bool = False,
) -> Found:
    """The first of ``keys`` whose value exists on this machine; ``hub``: a value that does not may be
    a hub id (a target or a drafter), looked up in the local cache."""
    from triage_tui.core.read.runs.manifest import expand_user

    notes = []
    for key in keys:
        value = args.get(key)
        if not isinstance(value, (str, os.PathLike)) or not str(value):
            continue
        try:
            path = expand_user(str(value))
        except BadInput:
            notes.append(f"{origin}.{key} = {value!r}: no such user's home directory; ignored")
            continue
        # The trainer's paths are relative to its working directory, unknown here; the run
        # directory and its parent are the best guesses (SpecForge is usually launched from
        # the output's parent).
        candidates = [path] if path.is_absolute() else [run_path / path, run_path.parent / path]
        for candidate in candidates:
            if candidate.exists():
                return Path(os.path.abspath(candidate)), notes
        cached = _cached_hub_model(str(value)) if hub and not path.is_absolute() else None
        if cached is not None:
            notes.append(cached.line(f"{origin}.{key}"))
            if cached.path is not None:
                return cached.path, notes
            continue
        notes.append(f"{origin}.{key} = {value!r} does not exist on this machine; ignored")
    return None, notes


def _cache_mapping(cache_dir: Path | None) -> Found:
    """SpecForge writes the run's mapping to <cache_dir>/vocab_mapping/<key>.pt."""
    if cache_dir is None:
        return None, []
    files = sorted((cache_dir / "vocab_mapping").glob("*.pt"), key=lambda p: p.stat().st_mtime)
    if not files:
        return None, [f"{cache_dir / 'vocab_mapping'} holds no .pt mapping"]
    if len(files) > 1:
        # Several cache keys (other datasets, other vocab sizes: SpecForge PR #602); the newest is
        # the one a run that just started wrote or reused last.
        return files[-1], [
            f"{len(files)} mappings in {cache_dir / 'vocab_mapping'}; using the newest, {files[-1].name}"
        ]
    return files[-1], []


def _discovered(artifacts) -> dict[str, Found]:
    if artifacts is None:
        return {name: (None, []) for name in INPUT_NAMES}
    # speculators keeps t2d.npy beside d2t.npy; read_mapping finds the pair from the d2t file.
    mappings = [p for p in artifacts.mappings if not p.name.startswith("t2d")] or list(artifacts.mappings)
    mapping_notes = (
        [f"{len(mappings)} mapping files found in the run; using {mappings[0]}"] if len(mappings) > 1 else []
    )
    return {
        # Oldest first (natural name order): the earliest saved checkpoint is the closest to the start.
        "checkpoint": (artifacts.checkpoints[0] if artifacts.checkpoints else None, []),
        "mapping": (mappings[0] if mappings else None, mapping_notes),
        "data": (artifacts.dumps, []),
        "target": (artifacts.target, []) if artifacts.target is not None else _verifier_path(artifacts.config_json),
    }


def _verifier_path(config_json: Path | None) -> Found:
    """speculators' config.json names its target: ``speculators_config.verifier.name_or_path``
    (speculators 0.9.0 ``Eagle3SpeculatorConfig``); used when that path exists on this machine."""
    from triage_tui.core.read.runs.config import read_config

    config = read_config(config_json) or {}
    speculators = config.get("speculators_config")
    verifier = speculators.get("verifier") if isinstance(speculators, dict) else None
    name = verifier.get("name_or_path") if isinstance(verifier, dict) else None
    if not isinstance(name, str) or not name:
        return None, []
    path = Path(name).expanduser()
    if path.is_absolute() and path.is_dir():
        return path, []
    hub = None if path.is_absolute() else _cached_hub_model(name)
    if hub is not None:
        return hub.path, [hub.line(f"{config_json} verifier")]
    return None, [f"{config_json} names the verifier {name!r}, not a directory on this machine; pass --target"]


def _cached_hub_model(value: str) -> HubModel | None:
    """``value`` looked up in the local Hugging Face cache; None when it is not a hub id at all."""
    from triage_tui.core.formats.hub import find_in_cache

    return find_in_cache(value)
