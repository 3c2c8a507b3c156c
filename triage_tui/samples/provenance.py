"""Whether ``sample_runs/`` was built by this generator: a digest over the source of every module
that decides what ``generate`` writes, and the check GENERATED.json is held to."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from triage_tui.samples.spec import SampleSpec

# Modules the generator imports whose edits need no rebuild, each for a reason a test holds:
# - samples.readme: README.md is text, compared whole with readme_text's output (tests/test_samples.py);
# - the checkpoint readers: the fine-tunes start from drafters the generator wrote and reads back
#   (load_saved_drafter); tests/test_samples.py checks that the read-back drafter is exactly the one
#   written, so a reader edit that changed it fails there, and the many that cannot (bounds, messages,
#   other layouts) do not ask for sample_runs/ to be rebuilt.
OUTSIDE_THE_DIGEST = frozenset(
    {
        "triage_tui.samples.readme",
        "triage_tui.core.formats.checkpoint",
        "triage_tui.core.formats.weights",
        "triage_tui.core.formats.safe_torch",
        "triage_tui.core.formats.json_file",
        "triage_tui.core.formats.training_state",
    }
)
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def generator_sources(root: Path = _PACKAGE_ROOT) -> list[Path]:
    """Every triage_tui module whose code decides what ``generate`` writes, as source files under ``root``.

    This module and every module it imports, transitively, lazy imports inside functions too,
    read from the source as tests/test_layers.py reads it, less OUTSIDE_THE_DIGEST and less the
    imports under ``if TYPE_CHECKING:`` (a type shapes no byte).
    """
    found: dict[str, Path] = {}
    todo = ["triage_tui.samples.generate"]
    while todo:
        name = todo.pop()
        if name in found or name in OUTSIDE_THE_DIGEST or not name.startswith("triage_tui."):
            continue
        path = _module_source(root, name)
        if path is None:
            continue  # a name imported from a module, not a module
        found[name] = path
        todo.extend(_imported_names(ast.parse(path.read_text(encoding="utf-8"))))
    return sorted(found.values())


def _imported_names(node: ast.AST) -> list[str]:
    """Modules (and names in them) ``node`` imports anywhere, but under ``if TYPE_CHECKING:``."""
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        return [name for child in node.orelse for name in _imported_names(child)]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if not node.module or node.level:
            return []
        return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return [name for child in ast.iter_child_nodes(node) for name in _imported_names(child)]


def _module_source(root: Path, name: str) -> Path | None:
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def code_digest(root: Path = _PACKAGE_ROOT) -> str:
    """SHA-256 (16 hex digits) over the generator's sources under ``root``, each with its path in the package."""
    digest = hashlib.sha256()
    for path in generator_sources(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def built_by_this_generator(recorded: dict, spec: SampleSpec) -> bool:
    """A GENERATED.json's digests are this generator's: its spec's fields and its code."""
    return recorded.get("spec_digest") == spec.digest() and recorded.get("code_digest") == code_digest()
