"""The walk of a watched tree: each directory's node, its listing and the run files in it.

The walk keeps its own stack, never Python's: a directory nested thousands of levels deep (anyone
who can write into a shared tree can make one) must not end discovery in a RecursionError. It goes
``MAX_WALK_DEPTH`` levels below where it starts and lists at most ``MAX_WALK_DIRECTORIES``
directories; what it left out is recorded in ``ListingCache.walk_limits`` and said
(``walk_limits_note``: `scan` on stderr and in its JSON, the TUI as a notice), never silently.
Which directories are runs is ``core/read/runs/discover.py``'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from triage_tui.core.read.runs.listing import Listing, ListingCache

# The walk's bounds (tests turn them small: ``walk.NAME``). Trainers write a run within a
# few levels of its output directory and a sweep within a few more; a watched tree deeper or wider
# than this is walked as far as these say, and the rest is reported (``walk_limits_note``).
MAX_WALK_DEPTH = 64
MAX_WALK_DIRECTORIES = 200_000


@dataclass
class Node:
    path: str  # plain strings in the walk: pathlib costs more than the stat calls here
    listing: Listing
    children: list[Node]
    event_files: tuple[str, ...]  # non-empty event files
    wandb_files: tuple[str, ...] = ()  # W&B run files (even empty: wandb.init creates it at once)
    console_files: tuple[str, ...] = ()  # training consoles by name (*.log, *.out) in this directory

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def walk_limits_note(limits: dict[str, str]) -> str | None:
    """The one line that says where discovery stopped walking (``scan`` on stderr, the TUI as a
    notice), or None; paths shown as ``cat -v`` would, the deepest cut short from the left."""
    if not limits:
        return None
    from triage_tui.core.text import printable

    items = sorted(limits.items())
    shown = "; ".join(f"{_shortened(printable(path))}: {why}" for path, why in items[:2])
    more = f" and {len(items) - 2} more" if len(items) > 2 else ""
    return f"not every directory was walked: {shown}{more}"


def _shortened(text: str, keep: int = 120) -> str:
    return text if len(text) <= keep else "…" + text[-keep:]


def walk(
    path: str,
    cache: ListingCache,
    visited: set[tuple[int, int]],
    depth: int | None = None,
    within: tuple[str, ...] = (),
) -> Node | None:
    """The tree below `path`; `depth` levels of children at most (None: the walk's bounds).

    A symlink to a directory is followed only when its target lies within one of the real paths
    `within` (the watched paths): a link to / or /proc must not walk the machine, nor a
    triage.toml in some process's working directory decide a scan. Those not followed are
    recorded in ``cache.skipped_links``.

    The walk keeps its own stack, never Python's: a directory nested thousands of levels deep
    (anyone who can write into a shared tree can make one) must not end discovery in a
    RecursionError. It goes ``MAX_WALK_DEPTH`` levels below `path` and lists at most
    ``MAX_WALK_DIRECTORIES`` directories; what it left out is recorded in ``cache.walk_limits``
    (``walk_limits_note``), never silently.
    """
    bound = MAX_WALK_DEPTH if depth is None else min(depth, MAX_WALK_DEPTH)
    root = _visit(path, cache, visited)
    if root is None:
        return None
    listed = 1
    # (directory, its node, the depth of its children): children are pushed in reverse so that
    # they are visited, and appended to their parent, in listing order, as a recursion would.
    stack: list[tuple[Node, int]] = [(root, 1)]
    while stack:
        parent, level = stack.pop()
        if not parent.listing.dirs:
            continue
        if level > bound:
            if depth is None:
                cache.walk_limits[parent.path] = f"deeper than {MAX_WALK_DEPTH} levels: not walked below it"
            continue
        pending: list[tuple[Node, int]] = []
        for name in parent.listing.dirs:
            child_path = os.path.join(parent.path, name)
            if name in parent.listing.links:
                target = os.path.realpath(child_path)
                if not any(is_under(target, root_path) for root_path in within):
                    cache.skipped_links[child_path] = target
                    continue
            if listed >= MAX_WALK_DIRECTORIES:
                cache.walk_limits[parent.path] = (
                    f"{MAX_WALK_DIRECTORIES} directories listed: the rest of this tree was not walked"
                )
                stack.clear()
                pending.clear()
                break
            child = _visit(child_path, cache, visited)
            listed += 1
            if child is not None:
                parent.children.append(child)
                pending.append((child, level + 1))
        stack.extend(reversed(pending))
    return root


def _visit(path: str, cache: ListingCache, visited: set[tuple[int, int]]) -> Node | None:
    """One directory's node, its children not yet walked; None when it cannot be listed or was
    walked already (a symlink loop, a second link to one directory)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    inode = (stat.st_dev, stat.st_ino)
    if inode in visited:
        return None
    visited.add(inode)
    listing = cache.listing(path, stat)
    if listing is None:
        return None
    event_files = []
    for name in listing.event_names:
        file_path = os.path.join(path, name)
        try:
            # Sizes change without the directory's mtime changing, so these few are stat'ed
            # on every walk: a zero-size file joins once its first record lands.
            if os.stat(file_path).st_size > 0:
                event_files.append(file_path)
        except OSError:
            continue
    wandb_files = tuple(os.path.join(path, name) for name in listing.wandb_names)
    console_files = tuple(os.path.join(path, name) for name in listing.console_names)
    return Node(path, listing, [], tuple(event_files), wandb_files, console_files)


def preorder(root: Node) -> list[Node]:
    """Every node of the tree, each before its children, children in listing order (no recursion)."""
    order: list[Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(node.children))
    return order


def is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
