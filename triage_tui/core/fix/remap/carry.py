"""Files beside the weights carried into the output (tokenizer, README, generation config).

Carried with their modes and holes, compared after the copy; weights in other forms and pickles
are not carried (optimizer and training state hold lm_head moments in the old row order), and a
symlink out of the checkpoint is never followed (a link to a private file must not become a
readable copy).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from triage_tui.core import fileio
from triage_tui.core.errors import BadInput
from triage_tui.core.fix.remap import tuning
from triage_tui.core.fix.remap.job import check_cancel
from triage_tui.core.fix.remap.plan import RemapPlan
from triage_tui.core.fix.remap.rows import same_file_bytes
from triage_tui.core.fix.remap.staging import PROVENANCE_FILE, is_within

# Files in a checkpoint directory that are never carried over: weights in other forms and
# pickles (optimizer and training state hold lm_head moments in the old row order).
_NOT_COPIED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".gz", ".index.json")


@dataclass(frozen=True)
class Extra:
    """A file beside the weights that is carried into the output (tokenizer, README, generation config)."""

    path: Path  # as listed in the checkpoint directory
    real: Path  # the file itself (a symlink resolved, never to outside the checkpoint)
    mode: int  # permission bits, kept on the copy
    size: int
    allocated: int  # bytes it occupies (a sparse file's holes stay holes in the copy)


def extra_files(plan: RemapPlan) -> tuple[list[Extra], list[str], list[str]]:
    """The files carried over; the names not carried over (weights in other forms, pickles); the
    symlinks that point out of the checkpoint (never followed: a link to a private file must not
    become a readable copy)."""
    weights = {f.name for f in plan.checkpoint.files}
    # A Hugging Face cache snapshot is a directory of links into its repository's blobs/.
    blobs = plan.source.parent.parent / "blobs" if plan.source.parent.name == "snapshots" else None
    copied, skipped, outside = [], [], []
    for path in sorted(plan.source.iterdir()):
        name = path.name
        if name in weights or name in ("config.json", PROVENANCE_FILE) or name.startswith("."):
            continue
        real = Path(os.path.realpath(path))
        if path.is_symlink() and not (is_within(real, plan.source) or (blobs is not None and is_within(real, blobs))):
            outside.append(name)
            continue
        try:
            info = os.stat(real)
        except OSError:
            continue  # a dangling link: nothing to carry
        if not stat.S_ISREG(info.st_mode):
            continue
        if name.endswith(_NOT_COPIED_SUFFIXES):
            skipped.append(name)
        else:
            copied.append(
                Extra(
                    path,
                    real,
                    stat.S_IMODE(info.st_mode) & 0o777,
                    info.st_size,
                    min(info.st_size, info.st_blocks * 512),
                )
            )
    return copied, skipped, outside


def copy_extra(extra: Extra, target: Path, cancel: threading.Event | None) -> int:
    """Stream one carried-over file into ``target`` with its mode and holes, then compare the two;
    returns the bytes compared. Read errors name the source file."""
    try:
        source_fd = os.open(extra.real, os.O_RDONLY)
    except OSError as err:
        raise BadInput(extra.path, f"cannot read: {err.strerror or err}; nothing was written") from None
    try:
        target_fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(target_fd, extra.mode)
            segments = fileio.data_segments(source_fd, extra.size)
            for begin, end in segments:
                for offset in range(begin, end, tuning.WINDOW_BYTES):
                    check_cancel(cancel)
                    length = min(tuning.WINDOW_BYTES, end - offset)
                    try:
                        fileio.copy_range(source_fd, target_fd, offset, offset, length)
                    except fileio.NoInKernelCopy:
                        with fileio.mapped(source_fd, offset, length) as data:
                            fileio.write_at(target_fd, data, offset)
                            del data
            os.ftruncate(target_fd, extra.size)
            os.fsync(target_fd)
            for begin, end in segments:
                if not same_file_bytes(source_fd, begin, target_fd, begin, end - begin, cancel, None, ""):
                    raise BadInput(
                        target.parent,
                        f"verification failed: {extra.path.name} differs from the source; nothing was written",
                    )
        finally:
            os.close(target_fd)
    except OSError as err:
        if err.filename is None and err.errno in (errno.EACCES, errno.EIO):
            raise BadInput(extra.path, f"cannot read: {err.strerror or err}; nothing was written") from None
        raise
    finally:
        os.close(source_fd)
    return sum(end - begin for begin, end in segments)
