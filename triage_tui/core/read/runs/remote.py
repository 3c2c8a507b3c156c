"""Which objects of a run tree in a bucket are fetched, and how, when the tree is mirrored locally.

By name alone (``names``), as discovery recognises files: what no reader opens (a trainer's
optimizer and scheduler states) is not fetched at all; the files a reader follows as they
grow (event files, W&B run files, logs) are followed; weights (``*.safetensors``, ``*.bin``,
``*.pth`` that are neither hidden-state dumps nor mappings) stay placeholders of their size,
fetched by range when a check needs them (``objstore.sparse``); everything else a run holds
(manifests, configs, mappings, dumps, training states) is small enough to read whole, and is
what the watcher opens.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from triage_tui.core.errors import BadInput, SourceError
from triage_tui.core.objstore import scratch, tuning
from triage_tui.core.objstore.cost import PrefixCost
from triage_tui.core.objstore.mirror import How, MirrorPass, PrefixMirror, fill_placeholders, local_relative
from triage_tui.core.objstore.polls import PollBook
from triage_tui.core.objstore.store import store_for
from triage_tui.core.objstore.url import ObjectURL, is_object_url, parse_url
from triage_tui.core.read.runs.names import (
    HF_CHECKPOINT_DIR,
    HS_SAFETENSORS,
    MAPPING_FILE,
    SPECFORGE_STEP_DIR,
    is_event_file_name,
    is_wandb_file_name,
)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth")
FOLLOWED_SUFFIXES = (".log", ".jsonl")


# What a trainer saves beside its weights that no reader of triage opens: HF Trainer's optimizer,
# scheduler and AMP scaler states (transformers trainer.py OPTIMIZER_NAME, SCHEDULER_NAME,
# SCALER_NAME) and DeepSpeed's per-rank states. Not mirrored at all: an optimizer.pt is twice the
# weights (over 256 MiB for any real drafter), and a sweep holds one per checkpoint.
NEVER_READ = frozenset({"optimizer.pt", "scheduler.pt", "scaler.pt", "optimizer.bin"})
NEVER_READ_SUFFIXES = ("_optim_states.pt", "_model_states.pt")


def fetch_policy(relative: str) -> How:
    """How the object at ``relative`` (a key below the mirrored prefix) is fetched."""
    name = relative.rsplit("/", 1)[-1]
    if name in NEVER_READ or name.endswith(NEVER_READ_SUFFIXES):
        return "skip"
    if is_event_file_name(name) or is_wandb_file_name(name) or name.endswith(FOLLOWED_SUFFIXES):
        return "follow"
    if name.endswith(WEIGHT_SUFFIXES) and not HS_SAFETENSORS.match(name) and not MAPPING_FILE.search(name):
        return "placeholder"
    return "whole"


# What a scan reads of an HF Trainer's newest checkpoint-N/ (runs/info.py, source_kinds/trainer_state.py):
# every other JSON of a checkpoint is fetched when a reader opens it (a check), not by the mirror.
SCANNED_IN_CHECKPOINT = frozenset({"trainer_state.json", "config.json"})
# SpecForge classic's checkpoint directories, epoch_{e}_step_{s}/ (as core/watch/best_checkpoint.py names them).
SPECFORGE_EPOCH_STEP_DIR = re.compile(r"^epoch_\d{1,9}_step_\d{1,18}$")


def fetched_when_read(relatives: Collection[str]) -> frozenset[str]:
    """Which of a listing's ``relatives`` are fetched only when read (``objstore.deferred``): the
    JSON files of an HF Trainer's ``checkpoint-N/`` but the newest one's that a scan reads (on disk,
    a scan of 200 checkpoints opens the newest's two; a mirror fetching all would GET 600), and
    those of SpecForge's checkpoints (``epoch_E_step_S/``, ``<run>-stepN/``: a config and a shard
    index a check reads, never a scan)."""
    newest: dict[str, int] = {}  # the directory holding checkpoint-N/ -> the largest N
    placed: list[tuple[str, str, int, str]] = []  # (relative, holder, N, the path below checkpoint-N/)
    later: set[str] = set()
    for rel in relatives:
        if not rel.endswith(".json"):
            continue
        parts = rel.split("/")
        for depth in range(len(parts) - 2, -1, -1):  # the nearest checkpoint directory above the file
            match = HF_CHECKPOINT_DIR.match(parts[depth])
            if match:
                holder, n = "/".join(parts[:depth]), int(match.group(1))
                newest[holder] = max(n, newest.get(holder, n))
                placed.append((rel, holder, n, "/".join(parts[depth + 1 :])))
                break
            if SPECFORGE_EPOCH_STEP_DIR.match(parts[depth]) or SPECFORGE_STEP_DIR.match(parts[depth]):
                later.add(rel)
                break
    return frozenset(
        later | {rel for rel, holder, n, below in placed if n != newest[holder] or below not in SCANNED_IN_CHECKPOINT}
    )


def written_once(directory: str) -> bool:
    """Whether a layout says ``directory`` (relative to the mirrored prefix) is written once and
    holds only what the mirror leaves to a reader: a checkpoint's (HF ``checkpoint-N/``, SpecForge's
    ``epoch_E_step_S/`` and ``<run>-stepN/``), listed once then kept (``objstore.levels``)."""
    name = directory.rsplit("/", 1)[-1]
    return bool(HF_CHECKPOINT_DIR.match(name) or SPECFORGE_EPOCH_STEP_DIR.match(name) or SPECFORGE_STEP_DIR.match(name))


def mirror_runs(url: str, root: Path, stop: threading.Event | None = None) -> PrefixMirror:
    """A mirror of the run tree at ``url`` under ``root``, fetching as ``fetch_policy`` says (and
    ``fetched_when_read``); ``sync()`` it once per rescan (each pass ends at once when ``stop`` is
    set). ValueError when ``url`` is not an object-store URL."""
    return PrefixMirror(
        parse_url(url), root, fetch_policy, stop=stop, defer=fetched_when_read, written_once=written_once
    )


# --- the command line's URLs, as local trees --------------------------------------------------

# Where URLs given on the command line are mirrored: below this process's scratch directory
# (objstore.scratch), removed however the process ends. Not a per-user directory kept between runs:
# a mirror's record of what it fetched (ETags, followed offsets) lives in its process, so a tree
# left by an earlier one could hold objects deleted from the bucket since, and nothing would know
# to remove them. Small objects are kept between runs anyway, by ETag, in the object cache
# (objstore.cache, $XDG_CACHE_HOME/triage, size-capped); weights are sparse placeholders, so the
# directory costs the followed files' bytes.
_BUCKETS: dict[str, str] = {}  # local directory of a bucket (absolute) -> "scheme://bucket/"
_BASE_LOCK = threading.Lock()


def _base() -> Path:
    return scratch.scratch_dir() / "mirror"


def local_root(url: ObjectURL) -> Path:
    """Where ``url`` (a prefix) is mirrored: below its bucket's directory at its key, so that
    a triage.toml's relative path out of the run (``../_drafters/a``) lands where that prefix
    would be mirrored. BadInput when the key is not a plain relative path."""
    key = url.key.strip("/")
    if key and local_relative(key) is None:
        raise BadInput(url.text, "the key is not a plain relative path (an empty, '.' or '..' part)")
    bucket_url = f"{url.scheme}://{url.bucket}/"
    # The bucket's name is untrusted text: its directory is named by a hash of it.
    bucket_dir = _base() / hashlib.sha256(bucket_url.encode(errors="surrogateescape")).hexdigest()[:16]
    with _BASE_LOCK:
        _BUCKETS[str(bucket_dir)] = bucket_url
    return bucket_dir / key if key else bucket_dir


def shown_path(path: str | os.PathLike[str]) -> str:
    """``path`` as the user should read it: the URL of what a mirror holds there, else as given."""
    text = os.fspath(path)
    if not _BUCKETS:
        return text
    with _BASE_LOCK:
        for bucket_dir, bucket_url in _BUCKETS.items():
            if text == bucket_dir:
                return bucket_url
            if text.startswith(bucket_dir + os.sep):
                return bucket_url + text[len(bucket_dir) + 1 :].replace(os.sep, "/")
    return text


def shown_text(value: object) -> object:
    """``value`` (a JSON document, or any string in it) with every local mirror directory named
    in its strings read as its URL: the paths inside prose (a flag's evidence) too."""
    if isinstance(value, str):
        if _BUCKETS:
            for bucket_dir, bucket_url in list(_BUCKETS.items()):
                value = value.replace(bucket_dir + os.sep, bucket_url).replace(bucket_dir, bucket_url.rstrip("/"))
        return value
    if isinstance(value, dict):
        return {key: shown_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shown_text(item) for item in value]
    return value


NOTHING_FOUND = (
    "nothing found: no object under this prefix nor at this key "
    "(looked for runs: event files, W&B run files, consoles, triage.toml)"
)


def _single_object(mirror: PrefixMirror) -> tuple[PrefixMirror, MirrorPass] | None:
    """``mirror``'s URL as one object's key (a file's URL: ``s3://b/run/events.out.tfevents.1``),
    mirrored alone where the local path of the URL already points; None when no such object is."""
    key = mirror.url.key.strip("/")
    parent = mirror.url.key.rstrip("/").rsplit("/", 1)[0] if "/" in key else ""
    parent_url = ObjectURL(mirror.url.scheme, mirror.url.bucket, parent)
    if mirror.root.is_dir():
        if any(mirror.root.iterdir()):
            return None
        mirror.root.rmdir()  # the empty directory the prefix would have been: the file goes there
    single = PrefixMirror(
        parent_url, local_root(parent_url), fetch_policy, only_key=key, stop=mirror.stop, defer=fetched_when_read
    )
    done = single.sync()
    if done.listed == 0:
        if not mirror.root.exists():
            mirror.root.mkdir(parents=True, exist_ok=True)
        return None
    return single, done


class Mirrors:
    """The URLs among a command's PATHs, each a mirror; ``sync()`` brings them all up to date, each
    prefix as often as ``polls`` says (less often when idle for long), counting what it cost."""

    def __init__(self, *, price_custom_endpoints: bool = False) -> None:
        self.mirrors: list[PrefixMirror] = []
        # Set by ``stop``: every pass of these mirrors ends at once, whatever the store does.
        self.stopping = threading.Event()
        # The last ``sync`` left objects for the next (a pass ran into its deadline or byte budget,
        # or returned while its listing was still under way).
        self.behind = False
        # The directories of the local files the last ``sync`` wrote (appended, rewritten, created):
        # their runs have news. Directories, not files: a first pass over 10 000 runs writes 540 000
        # files (each checkpoint shard's placeholder), held as paths ~0.5 GB until the next pass.
        self.written: list[Path] = []
        self.polls = PollBook(price_custom=price_custom_endpoints)

    def stop(self) -> None:
        """End every pass now (the TUI quits): each request in flight is abandoned, none is sent."""
        self.stopping.set()

    def local(self, text: str, *, named: bool = True) -> Path:
        """``text`` as a local path: a URL (``s3://``, ``gs://``, any fsspec URL) is the
        directory it is mirrored into (nothing fetched yet: ``sync``), a path is itself.
        ``named``: the user named it (what a triage.toml below it may name stays inside it).
        BadInput naming the URL when its client is not installed."""
        if not is_object_url(text):
            return Path(text)
        url = parse_url(text)
        root = local_root(url)
        if named:
            scratch.mark_named(root)
        if not any(m.root == root for m in self.mirrors):
            self.mirrors.append(mirror_runs(url.text, root, self.stopping))
        return root

    def fill_placeholders(self, path: str | Path) -> int:
        """The weights mirrored at or below ``path`` fetched whole (``mirror.fill_placeholders``)."""
        return fill_placeholders(path)

    def local_input(self, value: str | Path | None) -> str | Path | None:
        """A command's flag (``--checkpoint s3://...``) as ``local`` makes it when it is a URL; else as given."""
        return self.local(value) if isinstance(value, str) and is_object_url(value) else value

    def sync(self, *, strict: bool = True) -> list[SourceError]:
        """One pass of every mirror; the objects that failed. A prefix that cannot be listed, or
        with nothing under it (and no object at its key), is BadInput when ``strict`` (a one-shot
        command), else one more error (the TUI goes on, and sees objects that arrive later)."""
        errors: list[SourceError] = []
        self.behind = False
        self.written = []
        for i, mirror in enumerate(list(self.mirrors)):
            if not self.polls.due(mirror):  # idle for long: listed less often (objstore/polls.py)
                errors.extend(self.polls.last_errors(mirror))
                continue
            named, before = mirror.url.text, replace(mirror.store.stats)
            # a one-shot command waits for the whole pass; the TUI's passes are short, one after another
            mirror.wait_secs = None if strict else tuning.LIVE_PASS_SECS
            try:
                done: MirrorPass = mirror.sync()
                # a listing still under way (the TUI's first, of many pages) has not found nothing yet
                if done.listed == 0 and not done.partial and mirror.only_key is None and mirror.url.key.strip("/"):
                    single = _single_object(mirror)
                    if single is not None:
                        self.mirrors[i], (mirror, done) = single[0], single
                # a listing that failed in part is said as such
                if done.listed == 0 and not done.errors and not done.partial:
                    raise BadInput(mirror.url.text, NOTHING_FOUND)
                self.behind = self.behind or done.cut_short or done.partial
                self.written += [mirror.root / where for where in {rel.rpartition("/")[0] for rel in done.written}]
            except BadInput as err:
                if strict:
                    raise
                errors.append(SourceError("objstore", err.path or mirror.url.text, err.what))
                continue
            self.polls.record(mirror, before, list(done.errors), named, listing_pending=done.partial)
            errors.extend(done.errors)
        return errors

    def costs(self) -> tuple[PrefixCost, ...]:
        """What each prefix named on the command line cost so far, and how often it is listed."""
        return self.polls.costs()

    def mirror_outside(self, paths: list[Path | None]) -> list[SourceError]:
        """Mirror the directories a mirrored run's triage.toml points to out of its own prefix
        (``../_drafters/a``, ``../_target``) that are in the same bucket, each at its own prefix;
        the objects that failed. A prefix holding nothing (a single file's key) is not kept."""
        added: list[PrefixMirror] = []
        for path in paths:
            if path is None or path.exists():
                continue
            shown = shown_path(path)
            if is_object_url(shown):
                before = len(self.mirrors)
                self.local(shown, named=False)
                added += self.mirrors[before:]
        errors: list[SourceError] = []
        for mirror in added:
            done = mirror.sync()
            errors.extend(done.errors)
            if done.listed == 0:
                self.mirrors.remove(mirror)
                shutil.rmtree(mirror.root, ignore_errors=True)
        return errors


def refuse_output_url(text: str, *, sources: list[str | Path | None], force: bool) -> None:
    """BadInput when the URL ``text`` (a remap's ``--out``) is one of ``sources``, lies in or over one
    (never over the source), or already holds objects and ``force`` is not given."""
    url = parse_url(text)
    prefix = url.prefix()
    for source in sources:
        shown = shown_path(source) if source is not None else ""
        if not is_object_url(shown):
            continue
        other = parse_url(shown)
        theirs = other.prefix()
        same_bucket = (other.scheme, other.bucket) == (url.scheme, url.bucket)
        if same_bucket and (prefix.startswith(theirs) or theirs.startswith(prefix)):
            raise BadInput(text, f"--out would write in or over the source {shown}: choose another prefix")
    if not force and store_for(url).listing(prefix).objects:
        raise BadInput(text, "objects are already there: choose another --out, or pass --force to replace them")


def upload_output(local: Path, text: str) -> str:
    """The directory ``local`` (a remap's output) written below the URL ``text``, file by file; the URL."""
    url = parse_url(text)
    store = store_for(url)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        store.put(url.prefix() + path.relative_to(local).as_posix(), path)
    return url.text.rstrip("/")
