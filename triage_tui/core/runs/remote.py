"""Which objects of a run tree in a bucket are fetched, and how, when the tree is mirrored locally.

By name alone (``names``), as discovery recognises files: the files a reader follows as they
grow (event files, W&B run files, logs) are followed; weights (``*.safetensors``, ``*.bin``,
``*.pth`` that are neither hidden-state dumps nor mappings) stay placeholders of their size,
fetched by range when a check needs them (``objstore.sparse``); everything else a run holds
(manifests, configs, mappings, dumps, training states) is small enough to read whole, and is
what the watcher opens.
"""

from __future__ import annotations

from pathlib import Path

from triage_tui.core.objstore.mirror import How, PrefixMirror
from triage_tui.core.objstore.url import parse_url
from triage_tui.core.runs.names import (
    HS_SAFETENSORS,
    MAPPING_FILE,
    is_event_file_name,
    is_wandb_file_name,
)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth")
FOLLOWED_SUFFIXES = (".log", ".jsonl")


def fetch_policy(relative: str) -> How:
    """How the object at ``relative`` (a key below the mirrored prefix) is fetched."""
    name = relative.rsplit("/", 1)[-1]
    if is_event_file_name(name) or is_wandb_file_name(name) or name.endswith(FOLLOWED_SUFFIXES):
        return "follow"
    if name.endswith(WEIGHT_SUFFIXES) and not HS_SAFETENSORS.match(name) and not MAPPING_FILE.search(name):
        return "placeholder"
    return "whole"


def mirror_runs(url: str, root: Path) -> PrefixMirror:
    """A mirror of the run tree at ``url`` under ``root``, fetching as ``fetch_policy`` says;
    ``sync()`` it once per rescan. ValueError when ``url`` is not an object-store URL."""
    return PrefixMirror(parse_url(url), root, fetch_policy)
