"""Models placed in a Hugging Face cache the way ``hf_hub_download`` leaves them, without a network:
``<cache>/models--org--name/`` (``huggingface_hub.file_download.repo_folder_name``) holding
``blobs/<sha256>``, ``snapshots/<commit>/<file>`` as relative symlinks to the blobs, and
``refs/<revision>`` naming the commit; ``huggingface_hub.scan_cache_dir`` reads it back (the tests
check that it does), and ``snapshot_download(local_files_only=True)`` resolves it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def cache_snapshot(cache: Path, repo_id: str, source: Path, *, revision: str = "main") -> Path:
    """``source``'s files as the snapshot of ``repo_id`` at ``revision`` in ``cache``; returns the snapshot dir."""
    from huggingface_hub.file_download import repo_folder_name

    repo = cache / repo_folder_name(repo_id=repo_id, repo_type="model")
    files = sorted(p for p in source.rglob("*") if p.is_file())
    commit = hashlib.sha1(
        b"".join(p.relative_to(source).as_posix().encode() + p.read_bytes() for p in files)
    ).hexdigest()
    snapshot = repo / "snapshots" / commit
    for path in files:
        blob = repo / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        if not blob.exists():
            shutil.copyfile(path, blob)
        link = snapshot / path.relative_to(source)
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    return snapshot
