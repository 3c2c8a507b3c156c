"""Does the drafter rotate positions with the target's RoPE scaling? From the two config.json files.

The draft layer attends over the target's positions, so it must scale RoPE as the target does: a
Llama-3.1 target (``rope_type: llama3``, factor 8) with a drafter converted to plain RoPE serves
well on short prompts and worse as the context grows (https://github.com/vllm-project/speculators/pull/574:
speculators' EAGLE-3 converter forwarded ``rope_theta`` and dropped ``rope_scaling``).

The same scaling is spelled several ways, and none of those differences is evidence: transformers
before 5 writes ``rope_scaling`` (``type`` in older files, ``rope_type`` since 4.45) beside a top-level
``rope_theta``; transformers 5 writes ``rope_parameters`` with ``rope_theta`` inside; speculators keeps
the layer's config in ``transformer_layer_config``. Both sides are normalised to a type and its
parameters, ``rope_theta`` kept apart (a different base is another finding, not this one); a missing
or ``default`` type is no scaling. Parameters are compared where both sides state them, since a
writer may leave out the ones its reader defaults.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triage_tui.core.diagnose.checks.result import CheckResult, key_value_lines

if TYPE_CHECKING:
    from triage_tui.core.formats.checkpoint import DrafterCheckpoint
    from triage_tui.core.formats.target import TargetModel

NAME = "rope_scaling"

_SPELLINGS = ("type", "rope_type", "rope_theta")  # keys that name the scaling or the base, not a parameter
# transformers' older name for YaRN-like scaling in Phi-3 configs.
_ALIASES = {"su": "longrope"}


@dataclass(frozen=True)
class RopeScaling:
    """One side's RoPE scaling, normalised: its type (``default`` = none), parameters, base, and where
    it was written."""

    kind: str
    parameters: tuple[tuple[str, Any], ...]  # sorted (key, value), type and theta left out
    theta: float | None
    source: str  # "rope_scaling", "rope_parameters", "transformer_layer_config.rope_scaling", "none"

    @property
    def scaled(self) -> bool:
        return self.kind != "default"

    def words(self) -> str:
        params = ", ".join(f"{k} {_shown(v)}" for k, v in self.parameters)
        kind = f"{self.kind} ({params})" if params else self.kind
        theta = f"rope_theta {_shown(self.theta)}" if self.theta is not None else "no rope_theta"
        return f"{kind}, {theta}; from {self.source}"

    def to_json(self) -> dict[str, Any]:
        return {
            "rope_type": self.kind,
            "parameters": dict(self.parameters),
            "rope_theta": self.theta,
            "source": self.source,
        }


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return f"[{len(value)} values]"  # longrope's per-dimension factors: too many for a line
    return f"{value:g}" if isinstance(value, float) else str(value)[:40]


def normalised(config: Mapping[str, Any]) -> RopeScaling:
    """A config's RoPE scaling, whichever of the spellings in the module docstring it uses."""
    layer = config.get("transformer_layer_config")
    sources: list[tuple[str, Mapping[str, Any]]] = []
    if isinstance(layer, Mapping):  # speculators: the layer's own config first
        sources.append(("transformer_layer_config.", layer))
    sources.append(("", config))
    theta = None
    for prefix, source in sources:
        for key in ("rope_parameters", "rope_scaling"):
            value = source.get(key)
            if isinstance(value, Mapping) and _is_per_layer_type(value):
                value = value.get("full_attention")  # Gemma-3 style: one dict per attention type
            if not isinstance(value, Mapping):
                continue
            kind = value.get("rope_type", value.get("type"))
            kind = _ALIASES.get(kind, kind) if isinstance(kind, str) else "default"
            theta = _number(value.get("rope_theta")) or _number(source.get("rope_theta"))
            parameters = tuple(
                sorted(
                    (k, _number(v) if _number(v) is not None else v) for k, v in value.items() if k not in _SPELLINGS
                )
            )
            return RopeScaling(kind, parameters if kind != "default" else (), theta, prefix + key)
        theta = theta or _number(source.get("rope_theta"))
    return RopeScaling("default", (), theta, "none")


def _is_per_layer_type(value: Mapping[str, Any]) -> bool:
    return bool(value) and all(isinstance(v, Mapping) for v in value.values())


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class RopeScalingDetails:
    """What `rope_scaling` compared (docs/contracts.md, `check --json`)."""

    drafter: RopeScaling
    target: RopeScaling
    differences: tuple[str, ...]  # what differs in the scaling, in words; () = the same scaling

    def to_json(self) -> dict[str, Any]:
        return {
            "drafter": self.drafter.to_json(),
            "target": self.target.to_json(),
            "differences": list(self.differences),
        }

    def drilldown(self) -> list[str]:
        lines = key_value_lines([("drafter", self.drafter.words()), ("target", self.target.words())])
        return lines + (["", "differences", *self.differences] if self.differences else [])


def compare(drafter: RopeScaling, target: RopeScaling) -> tuple[str, ...]:
    """What differs in the scaling itself; spelling and rope_theta are not looked at."""
    if not drafter.scaled and not target.scaled:
        return ()
    if drafter.kind != target.kind:
        return (f"rope type: drafter {drafter.kind}, target {target.kind}",)
    theirs = dict(target.parameters)
    found = []
    for key, value in drafter.parameters:
        if key not in theirs:
            continue
        other = theirs[key]
        same = (
            math.isclose(value, other, rel_tol=1e-6)
            if isinstance(value, float) and isinstance(other, float)
            else value == other
        )
        if not same:
            found.append(f"{key}: drafter {_shown(value)}, target {_shown(other)}")
    return tuple(found)


def check_rope_scaling(checkpoint: DrafterCheckpoint | None, target: TargetModel | None) -> CheckResult:
    """The drafter's RoPE scaling against the target's, after normalising how each is written."""
    if checkpoint is None:
        return CheckResult.skipped(NAME, "no drafter checkpoint found for this run (pass --checkpoint)")
    if checkpoint.not_eagle3 is not None:
        return CheckResult.skipped(NAME, checkpoint.not_eagle3)
    if target is None:
        return CheckResult.skipped(NAME, "no target model named for this run (pass --target)")
    drafter_side, target_side = normalised(checkpoint.config), normalised(target.config)
    differences = compare(drafter_side, target_side)
    details = RopeScalingDetails(drafter_side, target_side, differences)
    if not differences:
        said = target_side.kind if target_side.scaled else "no scaling"
        return CheckResult(NAME, "pass", f"the drafter scales RoPE as the target does ({said})", details)
    evidence = (f"target RoPE {target_side.words()}; drafter RoPE {drafter_side.words()}: {'; '.join(differences)}",)
    return CheckResult(NAME, "fail", f"RoPE scaling differs: {differences[0]}", details, evidence)
