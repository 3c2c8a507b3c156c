"""How a serving engine was launched, from its own log or a command line in it: the speculative
algorithm it runs the drafter with, and the drafter it names.

SGLang logs its resolved arguments once at start (sglang 0.5.23
``python/sglang/srt/entrypoints/engine.py``: ``logger.info(f"server_args={...}")``, a dict of the
resolved fields; older releases log the ``ServerArgs(...)`` dataclass repr), so either::

    server_args={'model_path': 'moonshotai/Kimi-K2.5', ..., 'speculative_algorithm': 'EAGLE', ...}
    server_args=ServerArgs(model_path='...', ..., speculative_algorithm='EAGLE', ...)

and a launch command (a job script's ``set -x`` trace, a wrapper echoing it) reads
``python -m sglang.launch_server ... --speculative-algorithm EAGLE --speculative-draft-model-path X``
(argparse takes the ``--speculative-algo``/``--speculative-draft`` prefixes the SGLang docs use).
SGLang resolves ``NEXTN`` to ``EAGLE`` (``arg_groups/speculative_hook.py``
``_resolve_speculative_algorithm_alias``); the value recorded here is the resolved one.

Why it matters: under ``EAGLE`` SGLang captures no aux hidden states, so an EAGLE-3 drafter's ``fc``
is skipped (``llama_eagle3.py`` applies it only when the hidden width differs from the embedding's)
and acceptance sits at exactly 1.00 with no warning (https://github.com/sgl-project/sglang/pull/21272).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triage_tui.core.text import printable

# Launch lines come first in a log; a server that ran for days leaves gigabytes after them.
HEAD_BYTES = 8 << 20
_ARGS_ALGORITHM = re.compile(r"""['"]?speculative_algorithm['"]?\s*[:=]\s*['"]([A-Za-z0-9_]+)['"]""")
_ARGS_DRAFT = re.compile(r"""['"]?speculative_draft_model_path['"]?\s*[:=]\s*['"]([^'"]+)['"]""")
_ALIASES = {"NEXTN": "EAGLE"}  # sglang speculative_hook.py: NEXTN and EAGLE run the same worker
_ALGORITHM_FLAGS = ("--speculative-algorithm", "--speculative-algo")
_DRAFT_FLAGS = ("--speculative-draft-model-path", "--speculative-draft-model", "--speculative-draft")


@dataclass(frozen=True)
class EngineLaunch:
    """One launch an engine's log records: the algorithm (as the engine resolves it) and the drafter."""

    engine: str  # "sglang"
    source: str  # the file it was read from
    line: int  # 1-based
    algorithm: str  # upper case, aliases resolved ("EAGLE", "EAGLE3", ...)
    draft_model: str | None
    how: str  # "server_args" | "command line"

    def describe(self) -> str:
        draft = f", drafter {printable(self.draft_model)}" if self.draft_model else ""
        where = f"{self.how}, {printable(self.source)}:{self.line}"
        return f"{self.engine} launched with --speculative-algorithm {self.algorithm}{draft} ({where})"

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "source": self.source,
            "line": self.line,
            "algorithm": self.algorithm,
            "draft_model": self.draft_model,
            "how": self.how,
        }


def parse_launch_line(line: str) -> tuple[str, str | None, str] | None:
    """(algorithm, draft model, how) from one SGLang log or command line; None when it names no algorithm."""
    if "server_args=" in line:
        found = _ARGS_ALGORITHM.search(line)
        if found is None:
            return None
        draft = _ARGS_DRAFT.search(line)
        return _resolved(found.group(1)), draft.group(1) if draft else None, "server_args"
    if "sglang" not in line or "--speculative-algo" not in line:
        return None
    try:
        words = shlex.split(line, comments=False)
    except ValueError:
        words = line.split()
    algorithm = _flag_value(words, _ALGORITHM_FLAGS)
    if algorithm is None or not re.fullmatch(r"[A-Za-z0-9_]+", algorithm):
        return None
    return _resolved(algorithm), _flag_value(words, _DRAFT_FLAGS), "command line"


def _resolved(algorithm: str) -> str:
    upper = algorithm.upper()
    return _ALIASES.get(upper, upper)


def _flag_value(words: list[str], flags: tuple[str, ...]) -> str | None:
    for i, word in enumerate(words):
        name, equals, value = word.partition("=")
        if name in flags:
            if equals:
                return value or None
            return words[i + 1] if i + 1 < len(words) else None
    return None


def read_engine_launches(path: str | Path) -> tuple[EngineLaunch, ...]:
    """Every launch recorded in the first ``HEAD_BYTES`` of a log; () for a file that cannot be read
    (the serving reader reports the file itself) or holds none."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return ()
    launches = []
    for number, raw in enumerate(head.decode("utf-8", errors="replace").splitlines(), start=1):
        parsed = parse_launch_line(raw)
        if parsed is not None:
            algorithm, draft, how = parsed
            launches.append(EngineLaunch("sglang", str(path), number, algorithm, draft, how))
    return tuple(launches)
