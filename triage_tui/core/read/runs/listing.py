"""Directory listings, cached while a directory is unchanged, and what each says by name.

Discovery runs every few seconds while the TUI watches, so listings are cached by the directory's
``(st_dev, st_ino, st_mtime_ns)``: a directory's mtime changes whenever an entry is added,
removed or renamed, so an unchanged directory costs one ``stat`` instead of a ``scandir``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import Any

from triage_tui.core.errors import BadInput
from triage_tui.core.natural_sort import natural_key
from triage_tui.core.read.runs.info import RunArtifacts
from triage_tui.core.read.runs.manifest import Manifest, load_manifest
from triage_tui.core.read.runs.names import (
    CONFIG_NAME,
    CONSOLE_SNIFF_BYTES,
    HS_SAFETENSORS,
    MANIFEST_NAME,
    MAPPING_DIR,
    MAPPING_FILE,
    SKIPPED_DIR_NAMES,
    SPECFORGE_DUMP,
    TRAINER_LINE,
    TRAINING_STATE_NAME,
    WEIGHT_NAMES,
    is_console_log_name,
    is_event_file_name,
    is_wandb_file_name,
)

# A listing taken within this many seconds of the directory's mtime may miss an entry added
# in the same timestamp tick (coarse mtimes on NFS/ext3), so it is re-taken next time
# (git's "racy index" rule).
RACY_MTIME_SECS = 2.0


@dataclass(frozen=True)
class Listing:
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
    console_names: tuple[str, ...] = ()  # training consoles by name (*.log, *.out: names.is_console_log_name)

    @classmethod
    def of(
        cls,
        key: tuple[int, int, int],
        trusted: bool,
        name: str,
        files: tuple[str, ...],
        dirs: tuple[str, ...],
        links: frozenset[str] = frozenset(),
    ) -> Listing:
        in_mapping_dir = bool(MAPPING_DIR.search(name))
        if any(SPECFORGE_DUMP.match(f) for f in files):
            dump_kind = "specforge"
        elif any(HS_SAFETENSORS.match(f) for f in files):
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
            mapping_names=tuple(f for f in files if MAPPING_FILE.search(f) or (in_mapping_dir and f.endswith(".pt"))),
            dump_kind=dump_kind,
            links=links,
            console_names=tuple(f for f in files if is_console_log_name(f)),
        )


def _is_weight_file(name: str) -> bool:
    if name in WEIGHT_NAMES:
        return True
    return name.endswith(".safetensors") and not HS_SAFETENSORS.match(name)


@dataclass
class ListingCache:
    """Directory listings reused while the directory's mtime is unchanged (see module doc).

    Also keeps each run's artifacts, recomputed only when one of its directories was
    re-listed, and each manifest, re-read only when its (mtime, size) changed.
    """

    listings: dict[str, Listing] = field(default_factory=dict)
    manifests: dict[str, tuple[tuple[int, int], Manifest | BadInput]] = field(default_factory=dict)
    artifacts: dict[str, tuple[tuple[int, ...], RunArtifacts]] = field(default_factory=dict)
    scandirs: int = 0  # how many real scandir calls were made (for tests and benchmarks)
    # Symlinks to directories outside the watched paths, not followed by the last walk: link -> target.
    skipped_links: dict[str, str] = field(default_factory=dict)
    # Parts of the tree the last walk did not go into (its depth or directory bound): path -> why.
    walk_limits: dict[str, str] = field(default_factory=dict)
    # Consoles found to hold a trainer's lines, by (st_dev, st_ino, st_size, st_mtime_ns): once a
    # file's head or tail said so it is not read again until it changes.
    trainer_lines: dict[str, tuple[tuple[int, int, int, int], bool]] = field(default_factory=dict)
    # Trackers' stores' runs (core/read/runs/tracker_runs.py), by store: (what its files were when
    # listed, its runs or None where it could not be listed), listed again when they change.
    store_runs: dict[str, tuple[tuple, Any]] = field(default_factory=dict)
    # What discovery concluded from a directory's names alone, kept while its listing is the same
    # object (or an equal one): whether a kind of scalar source claims a file of it (by directory),
    # and each run's RunInfo (by run directory and root). Rescans every few seconds otherwise asked
    # every kind about every file name of the tree again: 60 % of a cached rescan.
    claims: dict[str, tuple[Listing, bool]] = field(default_factory=dict)
    run_infos: dict[tuple[str, str], tuple[tuple, Any]] = field(default_factory=dict)
    listed: int = 0  # listings the walk under way asked for, cached or not (discover_runs sets it to 0)

    def listing(self, path: str, stat: os.stat_result) -> Listing | None:
        self.listed += 1
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
        listing = Listing.of(key, trusted, os.path.basename(path), tuple(files), tuple(dirs), frozenset(linked_dirs))
        self.listings[path] = listing
        return listing

    def forget_gone(self) -> int:
        """Drop what is kept of paths that no longer exist, once the listings kept are more than
        twice those the last walk asked for (and 256 more): on a node where runs come and go for
        weeks, each deleted run's listings, RunInfo, artifacts and manifest were otherwise held
        until exit. Each cache here is only a cache: a path dropped is read again if it comes back.
        Returns how many entries went."""
        if len(self.listings) <= 2 * self.listed + 256:
            return 0
        seen: dict[str, bool] = {}  # path -> whether it exists (a run's directory is asked of by several caches)

        def exists(path: str) -> bool:
            if path not in seen:
                seen[path] = os.path.lexists(path)
            return seen[path]

        dropped = 0
        for cache in (self.listings, self.manifests, self.artifacts, self.trainer_lines, self.store_runs, self.claims):
            for path in [path for path in cache if not exists(path)]:
                del cache[path]
                dropped += 1
        for run_key in [run_key for run_key in self.run_infos if not exists(run_key[0])]:
            del self.run_infos[run_key]
            dropped += 1
        return dropped

    def holds_trainer_lines(self, path: str) -> bool:
        """Whether a console file's first or last ``CONSOLE_SNIFF_BYTES`` hold a trainer's metrics
        line (``names.TRAINER_LINE``): the one file discovery reads besides triage.toml, and only for
        a directory nothing else makes a run. Read again only when its size or mtime changed; a FIFO
        or a device named like a log is never opened for reading."""
        try:
            stat = os.stat(path)
        except OSError:
            return False
        if not S_ISREG(stat.st_mode):
            return False
        key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        cached = self.trainer_lines.get(path)
        if cached is not None and (cached[0] == key or (cached[1] and cached[0][:2] == key[:2])):
            return cached[1]  # once found, a file keeps its lines while it grows
        found = False
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO put there since the stat must not hang
            if not S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                return False
            with os.fdopen(fd, "rb") as handle:
                head = handle.read(CONSOLE_SNIFF_BYTES)
                found = TRAINER_LINE.search(head) is not None
                if not found and stat.st_size > CONSOLE_SNIFF_BYTES:
                    handle.seek(max(CONSOLE_SNIFF_BYTES, stat.st_size - CONSOLE_SNIFF_BYTES))
                    found = TRAINER_LINE.search(handle.read(CONSOLE_SNIFF_BYTES)) is not None
        except OSError:
            return False
        self.trainer_lines[path] = (key, found)
        return found

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
