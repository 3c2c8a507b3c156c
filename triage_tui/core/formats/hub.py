"""Hub ids where a target or drafter is named (``moonshotai/Kimi-K2-Instruct``, ``org/name@revision``),
found in the local Hugging Face cache and never downloaded.

Trainers name their target and starting drafter by hub id (SpecForge 0.2.0's provenance records a
source that is not a local path as ``("reference", name)``: ``specforge/training/provenance.py``
``model_source_identity``; speculators' run.yaml keeps ``verifier_name_or_path``/``from_pretrained``
as given); on a training node those sit in the Hugging Face cache. ``huggingface_hub``'s
``snapshot_download(..., local_files_only=True)`` resolves them there the way transformers does:
the cache directory from ``HF_HUB_CACHE``, else ``HF_HOME``/hub (``huggingface_hub.constants``),
a branch or tag through ``refs/<revision>`` to its commit's ``snapshots/<commit>/`` directory, a
commit hash directly; with ``local_files_only`` it makes no network call, as with ``HF_HUB_OFFLINE``.
One not in the cache is said in one line with the command that would fetch it (``hf download``,
huggingface_hub's CLI; ``huggingface-cli`` before 1.0).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

# org/name: huggingface_hub's repo-id characters (validate_repo_id), exactly one slash, no "--" or
# ".." (the Hub refuses both), neither part starting with "." (a relative path such as ../m/t or ./x).
_PART = r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,95}"
_HUB_ID = re.compile(rf"({_PART}/{_PART})(?:@([A-Za-z0-9_.\-/]{{1,255}}))?")


@dataclass(frozen=True)
class HubModel:
    """A hub id and where the local cache holds it (``path`` None: not cached here)."""

    repo_id: str
    revision: str | None
    path: Path | None
    cache: str  # the cache directory looked in, for the line that says it was not found

    @property
    def name(self) -> str:
        return f"{self.repo_id}@{self.revision}" if self.revision else self.repo_id

    def fetch_command(self) -> str:
        return shlex.join(["hf", "download", self.repo_id, *(["--revision", self.revision] if self.revision else [])])

    def line(self, named_by: str) -> str:
        """What was done with it, in one line: used from the cache, or not there and how to fetch it."""
        if self.path is not None:
            return f"{named_by} names the hub id {self.name}: using {self.path} from the local Hugging Face cache"
        return (
            f"{named_by} names {self.name}: no such path, and no such hub id in the local Hugging Face cache "
            f"({self.cache}); fetch it with: {self.fetch_command()}"
        )


def parse_hub_id(value: str) -> tuple[str, str | None] | None:
    """(repo id, revision) when ``value`` reads as ``org/name`` or ``org/name@revision``; else None."""
    found = _HUB_ID.fullmatch(value.strip())
    if found is None or "--" in found.group(1) or ".." in found.group(1):
        return None
    return found.group(1), found.group(2)


def find_in_cache(value: str) -> HubModel | None:
    """The hub id ``value`` resolved in the local cache; None when ``value`` is not a hub id at all."""
    parsed = parse_hub_id(value)
    if parsed is None:
        return None
    repo_id, revision = parsed
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        path = snapshot_download(repo_id, revision=revision, local_files_only=True)
    except (LocalEntryNotFoundError, HFValidationError, OSError):
        return HubModel(repo_id, revision, None, str(constants.HF_HUB_CACHE))
    return HubModel(repo_id, revision, Path(str(path)), str(constants.HF_HUB_CACHE))
