"""The committed sample_runs/ as the generator wrote it, whatever a user has added to it since.

``sample_runs/`` is the user's playground: the README's walkthrough (`m`, `y`) writes a remapped
drafter into ``_drafters/``, ``triage remap --keep-checkpoint-mapping`` a mapping beside it. Tests
never read the working tree as a whole: they copy exactly the files ``expected_files`` names (the
generator's list) into a temporary directory, so what a user wrote there is neither seen nor touched.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from triage_tui.samples.generate import EVENT_FILE_PATTERN, expected_files
from triage_tui.samples.spec import SampleSpec

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "sample_runs"


def generated_paths(root: Path, spec: SampleSpec | None = None) -> list[Path]:
    """The generator's files under ``root`` (the event-file pattern resolved); AssertionError if one is missing."""
    paths = []
    for rel in expected_files(spec or SampleSpec()):
        if rel.endswith(EVENT_FILE_PATTERN):
            head = rel[: -len(EVENT_FILE_PATTERN)]
            matches = sorted((root / head).glob(EVENT_FILE_PATTERN))
            assert len(matches) == 1, f"{root / rel}: {len(matches)} event files"
            paths.extend(matches)
        else:
            assert (root / rel).is_file(), f"{root / rel} is missing"
            paths.append(root / rel)
    return paths


def copy_samples(dest: Path, runs: tuple[str, ...] | None = None, *, source: Path = COMMITTED) -> Path:
    """Copy the generator's files of ``source`` (all runs, or ``runs`` plus what they share) to ``dest``."""
    for path in generated_paths(source):
        rel = path.relative_to(source)
        top = rel.parts[0]
        if runs is not None and not top.startswith("_") and len(rel.parts) > 1 and top not in runs:
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest / rel)
    return dest


def tracked_sample_files() -> list[str] | None:
    """``git ls-files sample_runs`` relative to sample_runs/, or None outside a git checkout."""
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        return None
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--", "sample_runs"], capture_output=True, check=False
    )
    if listed.returncode != 0:
        return None
    return sorted(Path(p).relative_to("sample_runs").as_posix() for p in listed.stdout.decode().split("\0") if p)


def git(*args: str, cwd: Path) -> str:
    """``git ARGS`` in ``cwd`` (an author given, for commits on a machine without one); its stdout."""
    done = subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout
