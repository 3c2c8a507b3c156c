"""Where a remap's output is written: a locked sibling temporary directory renamed into place, or removed.

A crash at any moment leaves either no output or a complete verified one; a temporary directory
left by a killed run is removed by the next run (an flock on it tells live from dead). ``--force``
replaces only a directory whose provenance file triage wrote and that holds nothing else.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from triage_tui.core import fileio
from triage_tui.core.errors import BadInput
from triage_tui.core.formats.remap_record import REMAP_RECORD
from triage_tui.core.objstore import scratch
from triage_tui.core.objstore.url import parse_url
from triage_tui.core.read.runs.remote import shown_path

# The remap's own record, named where core/diagnose/check_inputs.py reads it back.
PROVENANCE_FILE = REMAP_RECORD
KEPT_MAPPING_PROVENANCE_FILE = "triage-mapping.json"


def read_error(err: OSError, fallback: str | Path) -> BadInput:
    """An input that cannot be read (permissions, a name too long, a loop), as one line naming it."""
    reason = err.strerror or str(err)
    if err.errno == errno.ELOOP:
        reason = "a symlink loop"
    return BadInput(err.filename or fallback, f"cannot read: {reason}")


def write_error(err: OSError, output: Path) -> BadInput:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return BadInput(output.parent, f"no space left on the device while writing {output.name}; nothing was written")
    return BadInput(output.parent, f"cannot write {output.name}: {err.strerror or err}; nothing was written")


def check_output_name(output: Path) -> None:
    """The output's name must leave room for the temporary sibling it is written as first."""
    try:
        name_max = os.pathconf(output.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    # mkdtemp adds 8 characters to temp_prefix (and aside_prefix is as long)
    limit = name_max - len(os.fsencode(temp_prefix(Path("x")))) + 1 - 8
    length = len(os.fsencode(output.name))
    if length > limit:
        raise BadInput(
            output.parent,
            f"the --out name is {length} bytes long; with the temporary name it is "
            f"written under first, this filesystem allows at most {limit}",
        )


def is_within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def check_output_location(output: Path, source: Path, inputs: list[Path]) -> None:
    """Refuse an output that is an input or holds one, or that lies inside the source checkpoint."""
    for given in inputs:
        if is_within(given, output):
            raise BadInput(output, f"the output would replace {given}, an input; choose another --out")
    if is_within(output, source):
        raise BadInput(
            output, f"is inside the source checkpoint {source}, which is never written to; choose another --out"
        )


@dataclass(frozen=True)
class OutputPlace:
    """Where an output goes when no --out names it, and why there when it is not beside the source."""

    path: Path
    # None: beside the source. Else what the source's directory is in, and that tree or directory:
    # ("the git work tree", its root) or ("a directory that cannot be written", the directory).
    outside_of: tuple[str, Path] | None = None

    @property
    def outside_because(self) -> str | None:
        """The sentence the confirm dialog, `remap`'s report and its JSON say; None beside the source."""
        if self.outside_of is None:
            return None
        what, where = self.outside_of
        if what == GIT_WORK_TREE:
            return f"the source's directory is in the git work tree {where}, whose `git status` would show it"
        if what == BUCKET:
            return f"the source is in a bucket, {shown_path(where)}, which a remap never writes unless --out names it"
        return f"the source's directory {where} cannot be written"


GIT_WORK_TREE = "git work tree"
BUCKET = "bucket"
READ_ONLY = "read-only directory"


def default_output(source: Path, name: str) -> OutputPlace:
    """``name`` beside ``source``, unless that directory is in a git work tree (a file there is a
    change `git status` shows: a checkout, sample_runs/ among them, stays as it was) or not writable
    (a read-only mount, another user's models): then under triage's data directory,
    ``$XDG_DATA_HOME/triage/remapped/`` (``~/.local/share/...``, the XDG Base Directory default),
    at the source directory's own path, so two drafters of one name from two trees never meet. A
    remapped drafter is the user's data to train from, not a cache to be cleared: the data directory.
    A path git ignores there is no change to the checkout: beside it, as anywhere else."""
    beside = source.parent
    if scratch.holds(beside):
        # Mirrored from a bucket (runs/remote.py): beside it is a temporary directory removed at
        # exit. Under the data directory at the source's URL: s3/<bucket>/<key>/<name>.
        url = parse_url(shown_path(beside))
        return OutputPlace(remapped_home() / url.scheme / url.bucket / url.key.strip("/") / name, (BUCKET, beside))
    output = beside / name
    root = _git_work_tree(beside)
    if root is not None and not _git_ignores(root, output):
        outside_of = (GIT_WORK_TREE, root)
    elif not os.access(beside, os.W_OK):
        outside_of = (READ_ONLY, beside)
    else:
        return OutputPlace(output)
    return OutputPlace(remapped_home() / beside.relative_to(beside.anchor) / name, outside_of)


def remapped_home() -> Path:
    """``$XDG_DATA_HOME/triage/remapped`` (a relative XDG_DATA_HOME is ignored, as the spec says)."""
    data = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data):
        try:
            data = str(Path.home() / ".local" / "share")
        except RuntimeError:
            raise BadInput(
                None, "no home directory to write the remap under: set XDG_DATA_HOME or pass --out"
            ) from None
    return Path(data) / "triage" / "remapped"


def _git_work_tree(directory: Path) -> Path | None:
    """The work tree ``directory`` is in (a ``.git`` directory or file, a worktree's or submodule's, at
    it or above), or None."""
    for candidate in (directory, *directory.parents):
        if os.path.lexists(candidate / ".git"):
            return candidate
    return None


def _git_ignores(root: Path, path: Path) -> bool:
    """git's own answer (``git check-ignore``), so .gitignore, info/exclude and global excludes all
    count; False when git is not installed or cannot say."""
    git = shutil.which("git")
    if git is None:
        return False
    try:
        done = subprocess.run(
            # The trailing "/": the output is a directory, and a pattern such as `out/` matches one only.
            [git, "-C", str(root), "check-ignore", "-q", "--", f"{path}/"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def prepare_output_parent(place_outside: bool, output: Path) -> None:
    """Make the directories an output under triage's data directory goes into (beside a source,
    the directory is the source's own and exists)."""
    if place_outside:
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise write_error(err, output) from None


def temp_prefix(output: Path) -> str:
    return f".{output.name}.triage-tmp-"


def aside_prefix(output: Path) -> str:
    return f".{output.name}.triage-old-"


def umask() -> int:
    """The process umask, read without setting it (os.umask would race other threads, e.g. the TUI's)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def _lock_dir(path: Path) -> int | None:
    """An exclusive flock on a directory, or None when another process holds it (it is alive)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def clean_stale_temporaries(output: Path) -> list[Path]:
    """Remove what killed runs left beside ``output``; a live run's directory is locked and kept."""
    removed: list[Path] = []
    parent = output.parent
    if not parent.is_dir():
        return removed
    prefixes = (temp_prefix(output), aside_prefix(output))
    for name in os.listdir(parent):  # not glob: an output name may hold [ or *
        candidate = parent / name
        if name.startswith(prefixes) and candidate.is_dir() and not candidate.is_symlink():
            fd = _lock_dir(candidate)
            if fd is None:
                continue
            try:
                shutil.rmtree(candidate, ignore_errors=True)
                removed.append(candidate)
            finally:
                os.close(fd)
    return removed


class TempOutput:
    """A locked sibling temporary directory that becomes ``output`` by rename, or disappears."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.path = Path(tempfile.mkdtemp(prefix=temp_prefix(output), dir=output.parent))
        self.fd = _lock_dir(self.path)
        if self.fd is None:  # a concurrent clean-up took it between mkdtemp and the lock
            raise BadInput(self.path, "temporary directory taken by another process; run again")
        self.committed = False

    def commit(self, replace: bool) -> None:
        """fsync the directory, rename it into place (the old output aside first), fsync the parent."""
        os.chmod(self.path, 0o777 & ~umask())  # mkdtemp made it 0700
        fileio.fsync_path(self.path)
        aside = aside_fd = None
        if replace and self.output.exists():
            aside = Path(tempfile.mkdtemp(prefix=aside_prefix(self.output), dir=self.output.parent))
            aside_fd = _lock_dir(aside)  # locked like the temporary one: a concurrent clean-up leaves it
            os.rename(self.output, aside / self.output.name)
        try:
            try:
                os.rename(self.path, self.output)
            except BaseException as err:  # Ctrl-C included: the old output goes back where it was
                if aside is not None:
                    os.rename(aside / self.output.name, self.output)
                    shutil.rmtree(aside, ignore_errors=True)
                if isinstance(err, OSError) and err.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise BadInput(self.output, "appeared while the remap was writing; nothing was replaced") from None
                raise
            self.committed = True
            fileio.fsync_path(self.output.parent)
            if aside is not None:
                shutil.rmtree(aside, ignore_errors=True)
        finally:
            if aside_fd is not None:
                os.close(aside_fd)

    def close(self) -> None:
        if not self.committed:
            shutil.rmtree(self.path, ignore_errors=True)
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def check_output_free(output: Path, force: bool) -> bool:
    """True when ``output`` exists and --force allows replacing it; BadInput when it may not be touched."""
    if not output.exists() and not output.is_symlink():
        if not output.parent.is_dir():
            raise BadInput(output.parent, "no such directory to write the output into")
        return False
    if not force:
        raise BadInput(output, "already exists; pass --force to replace it (nothing was written)")
    if output.is_symlink() or not output.is_dir():
        raise BadInput(output, "exists and is not a directory; refusing to replace it even with --force")
    present = set(os.listdir(output))
    if not present:
        return True
    written = _files_triage_wrote(output)
    if written is None:
        raise BadInput(
            output,
            f"exists and holds no {PROVENANCE_FILE} that triage wrote: not a triage output; "
            "refusing to replace it even with --force",
        )
    others = sorted(present - written)
    if others:
        more = f" and {len(others) - 5} more" if len(others) > 5 else ""
        shown = ", ".join(repr(name) for name in others[:5]) + more
        raise BadInput(
            output,
            f"holds {len(others)} file(s) triage did not write ({shown}); refusing to replace "
            "it even with --force: move them out first",
        )
    return True


def _files_triage_wrote(output: Path) -> set[str] | None:
    """The names an earlier triage run wrote into ``output``, from its provenance file; None when there
    is none that triage wrote (a symlink, not JSON, not triage's, no file list: a user's file)."""
    for name in (PROVENANCE_FILE, KEPT_MAPPING_PROVENANCE_FILE):
        path = output / name
        try:
            if not _is_regular_file(path) or path.stat().st_size > 1 << 20:
                continue
            provenance = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(provenance, dict) or provenance.get("tool") != "triage":
            continue
        files = provenance.get("files")
        if isinstance(files, list) and all(isinstance(f, str) for f in files) and name in files:
            return set(files)
    return None


def _is_regular_file(path: Path) -> bool:
    """A regular file itself, not a symlink to one."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
