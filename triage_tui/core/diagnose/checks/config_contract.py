"""Config and weights contract: does the drafter's config.json ask for what its tensors hold, and
will the serving engines read it the way the trainer meant?

Nothing here needs the hidden-state dumps: the config, the tensor shapes (safetensors headers)
and, when known, the target's config. What the dumps hold against the drafter is the
hidden-state check's (core/diagnose/checks/hidden_state.py).

What is compared, and the public issue each rule comes from:
- the aux layer ids: present, and where each engine reads them. vLLM reads only the top-level
  ``eagle_aux_hidden_state_layer_ids`` and otherwise falls back to its own choice
  (https://github.com/vllm-project/vllm/pull/50170: a head trained on other layers served at
  accept length 1.036); SGLang reads ``eagle_config`` and adds 1 to each id (it captures before
  layer i), except in the model files https://github.com/sgl-project/sglang/pull/25454 changed
  (DeepSeek-V2/V3 and the targets built on them, GLM-4.7-Flash: +1 only when the first id is 1)
  and GPT-OSS (https://github.com/sgl-project/sglang/issues/32226: ids shifted one layer);
- ``fc``'s in-features = number of aux layers x target hidden size;
- the flags against the weights they need: ``norm_before_fc`` -> ``input_norm.weight``,
  ``fc_norm`` -> ``fc_norm.{i}.weight`` (https://github.com/vllm-project/vllm/pull/38111,
  https://github.com/vllm-project/speculators/pull/610), ``use_aux_hidden_state`` -> ``fc``;
- ``target_hidden_size``, ``draft_vocab_size`` and ``vocab_size`` against the tensors and the target.

The engines' readings of the aux layer ids (which ids, which layers) are core/diagnose/checks/aux_layers.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from triage_tui.core.diagnose.checks.aux_layers import (
    CAPTURE_BEFORE,
    DEFAULT_AUX_LAYERS,
    ENGINES,
    Convention,
    EngineReading,
    config_convention,
    engine_default_ids,
    engine_reading,
    physical_layers,
)
from triage_tui.core.diagnose.checks.engine_build import (
    LINK_BACKBONE,
    LINK_ROPE_LAYOUT,
    BackboneReading,
    RopeReading,
    read_backbone,
    read_rope,
)
from triage_tui.core.diagnose.checks.result import CheckResult, key_value_lines, show, table_lines

if TYPE_CHECKING:
    from triage_tui.core.formats.checkpoint import DrafterCheckpoint
    from triage_tui.core.formats.target import TargetModel

NAME = "config_contract"

# Public issues each finding is known from: shown in the drill-down and the hypothesis' links.
LINK_VLLM_MISSING_IDS = "https://github.com/vllm-project/vllm/pull/50170"
LINK_SGLANG_FIRST_ID = "https://github.com/sgl-project/sglang/pull/25454"
LINK_VLLM_OFF_BY_ONE = "https://github.com/vllm-project/vllm/pull/43671"
LINK_VLLM_NORM_BEFORE_FC = "https://github.com/vllm-project/vllm/pull/38111"
LINK_VLLM_NESTED_NORM_FLAG = "https://github.com/vllm-project/vllm/pull/42143"
LINK_VLLM_FC_NORM = "https://github.com/vllm-project/vllm/pull/46488"
LINK_SPECULATORS_EAGLE31 = "https://github.com/vllm-project/speculators/pull/610"
LINK_SPECULATORS_EXCLUSIVE = "https://github.com/vllm-project/speculators/pull/670"
LINK_SGLANG_NO_FC = "https://github.com/sgl-project/sglang/pull/21272"
LINK_SGLANG_NO_HEAD = "https://github.com/sgl-project/sglang/pull/27908"
LINK_VLLM_DRAFT_HIDDEN = "https://github.com/vllm-project/vllm/issues/18906"
LINK_EAGLE_HEAD_SIZE = "https://github.com/SafeAILab/EAGLE/issues/249"
LINK_EAGLE_ALL_LAYERS = "https://github.com/SafeAILab/EAGLE/issues/294"

FC = "fc.weight"


@dataclass(frozen=True)
class Finding:
    """One broken or risky clause of the contract, with the numbers in its message."""

    kind: str
    severity: Literal["error", "warning"]
    message: str
    link: str | None = None
    engine: str | None = None  # set when only that engine reads the config this way

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
            "link": self.link,
            "engine": self.engine,
        }


@dataclass(frozen=True)
class ShapeRow:
    """One compared shape: what the config, the drafter or the target implies against what is held
    (this check's and the hidden-state check's rows)."""

    what: str
    expected: Any  # an int, a list of ints, or None (JSON values)
    actual: Any
    ok: bool

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "expected": self.expected, "actual": self.actual, "ok": self.ok}


@dataclass(frozen=True)
class ConfigContractDetails:
    """What `config_contract` measured (docs/contracts.md, `check --json`)."""

    layout: str
    draft_hidden_size: int
    target_hidden_size: int | None
    target_hidden_size_source: str | None
    fc_in_features: int | None
    aux_layer_ids: tuple[int, ...] | None
    aux_layer_ids_at: str | None  # "top level", "eagle_config", "top level and eagle_config"
    trained_layers: tuple[int, ...] | None  # outputs of these layers, in the writer's convention
    trained_convention: Convention | None
    target_layers: int | None
    engines: tuple[EngineReading, ...]
    rows: tuple[ShapeRow, ...]
    findings: tuple[Finding, ...]
    backbone: BackboneReading | None = None  # the layer the weights were trained as, and what engines build
    rope: RopeReading | None = None  # the drafter's RoPE against the target's

    def kinds(self) -> set[str]:
        return {f.kind for f in self.findings}

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "draft_hidden_size": self.draft_hidden_size,
            "target_hidden_size": self.target_hidden_size,
            "target_hidden_size_source": self.target_hidden_size_source,
            "fc_in_features": self.fc_in_features,
            "aux_layer_ids": list(self.aux_layer_ids) if self.aux_layer_ids is not None else None,
            "aux_layer_ids_at": self.aux_layer_ids_at,
            "trained_layers": list(self.trained_layers) if self.trained_layers is not None else None,
            "trained_convention": self.trained_convention,
            "target_layers": self.target_layers,
            "engines": [e.to_json() for e in self.engines],
            "shapes": [r.to_json() for r in self.rows],
            "issues": [f.to_json() for f in self.findings],
            "backbone": self.backbone.to_json() if self.backbone is not None else None,
            "rope": self.rope.to_json() if self.rope is not None else None,
        }

    def drilldown(self) -> list[str]:
        lines = key_value_lines(
            [
                ("layout", self.layout),
                ("draft_hidden_size", self.draft_hidden_size),
                ("target_hidden_size", self.target_hidden_size),
                ("target_hidden_size_source", self.target_hidden_size_source),
                ("fc_in_features", self.fc_in_features),
                ("aux_layer_ids", self.aux_layer_ids if self.aux_layer_ids is not None else "none in config.json"),
                ("aux_layer_ids_at", self.aux_layer_ids_at),
                ("trained_on_outputs_of", self.trained_layers),
                ("trained_convention", self.trained_convention),
                ("target_layers", self.target_layers),
            ]
        )
        lines += ["", "aux layers each engine feeds (outputs of decoder layers)"]
        lines += table_lines(
            ("engine", "layers", "why"),
            [
                (r.engine, show(r.layers) if r.layers is not None else "target depth unknown", r.source)
                for r in self.engines
            ],
        )
        if self.backbone is not None:
            lines += ["", f"draft layer trained as {self.backbone.trained_as}: {self.backbone.evidence}"]
            lines += table_lines(
                ("engine", "builds", "why"), [(e.engine, e.builds or "-", e.why) for e in self.backbone.engines]
            )
        if self.rope is not None:
            lines += ["", *key_value_lines(self.rope.lines())]
        if self.rows:
            lines += ["", "config against the tensors and the target"]
            lines += table_lines(
                ("", "what", "expected", "found"),
                [("✔" if r.ok else "✖", r.what, show(r.expected), show(r.actual)) for r in self.rows],
            )
        return lines + findings_lines(self.findings)


class _Linked(Protocol):
    """A finding with the public issue it is known from (this check's and mapping_health's)."""

    @property
    def kind(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def link(self) -> str | None: ...


def findings_lines(findings: Sequence[_Linked]) -> list[str]:
    """A check's findings as drill-down lines: a table, then the public issues they are known from."""
    if not findings:
        return []
    lines = [
        "",
        "issues",
        *table_lines(("kind", "severity", "message"), [(f.kind, f.severity, f.message) for f in findings]),
    ]
    links = sorted({f.link for f in findings if f.link})
    return [*lines, "", "known from", *links] if links else lines


def _id_list(value: object) -> tuple[int, ...] | None:
    if isinstance(value, list) and value and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return tuple(value)
    return None


def _flag(config: Mapping[str, Any], eagle: Mapping[str, Any], name: str) -> tuple[bool, str | None]:
    """(set, where): a flag is on when true at the top level or in eagle_config."""
    top, nested = config.get(name) is True, eagle.get(name) is True
    where = "top level" if top else "eagle_config" if nested else None
    return top or nested, where


def check_config_contract(checkpoint: DrafterCheckpoint | None, target: TargetModel | None = None) -> CheckResult:
    """Config against tensors, config against the target, and the aux layers each engine would feed.

    Findings that hold for one engine only carry its name; the hypothesis weighs them against the
    engine the run is served on, when serving evidence names it."""
    if checkpoint is None:
        return CheckResult.skipped(NAME, "no drafter checkpoint found for this run (pass --checkpoint)")
    if checkpoint.not_eagle3 is not None:
        return CheckResult.skipped(NAME, checkpoint.not_eagle3)  # a plain model has no drafter contract
    config = checkpoint.config
    eagle = config.get("eagle_config")
    eagle = eagle if isinstance(eagle, Mapping) else {}
    tensors = checkpoint.tensors
    rows: list[ShapeRow] = []
    findings: list[Finding] = []

    def row(what: str, expected: Any, actual: Any) -> bool:
        ok = bool(expected == actual)
        rows.append(ShapeRow(what, expected, actual, ok))
        return ok

    def find(kind: str, message: str, link: str | None = None, *, severity="error", engine=None) -> None:
        findings.append(Finding(kind, severity, message, link, engine))

    top_ids = _id_list(config.get("eagle_aux_hidden_state_layer_ids"))
    nested_ids = _id_list(eagle.get("eagle_aux_hidden_state_layer_ids"))
    at = (
        "top level and eagle_config"
        if top_ids and nested_ids
        else "top level"
        if top_ids
        else "eagle_config"
        if nested_ids
        else None
    )
    # The ids the trainer used: speculators reads the top level, SpecForge/EAGLE eagle_config.
    trained_ids = (top_ids or nested_ids) if checkpoint.layout == "speculators" else (nested_ids or top_ids)
    convention = config_convention(checkpoint.layout)
    trained = physical_layers(trained_ids, convention) if trained_ids else None
    num_layers = int(target.num_layers) if target is not None else None
    aux_count = len(trained_ids) if trained_ids else DEFAULT_AUX_LAYERS

    # -- aux layer ids: present, in range, and read the same way by the engines
    if trained_ids is None:
        default = (
            f"outputs of layers {list(physical_layers(engine_default_ids(num_layers), CAPTURE_BEFORE))}"
            if num_layers
            else "ids (2, N//2, N-3)"
        )
        find(
            "aux_layer_ids_missing",
            f"config.json names no eagle_aux_hidden_state_layer_ids: vLLM and SGLang feed their default {default}"
            + ", right only for a drafter trained on those (vLLM PR #50170: accept length 1.036)",
            LINK_VLLM_MISSING_IDS,
            severity="warning",
        )
    elif num_layers is not None and trained is not None and trained_ids is not None:
        beyond = [i for i in trained if not 0 <= i < num_layers]
        if beyond:
            # A drafter trained for a deeper sibling model names layers this target does not have.
            find(
                "aux_layer_out_of_range",
                f"config aux layer ids {list(trained_ids)} name layer outputs {beyond} that a target with "
                f"{num_layers} layers does not have: the drafter was trained for another target",
            )
    architectures = tuple(target.architectures) if target is not None else None
    engines = tuple(engine_reading(engine, top_ids, nested_ids, num_layers, architectures) for engine in ENGINES)
    if trained is not None and trained_ids is not None:
        for reading in engines:
            if reading.layers is None or reading.layers == trained:
                continue
            find(
                "aux_layers_engine_mismatch",
                f"{reading.engine} {reading.source} and feeds the outputs of layers {list(reading.layers)}; "
                f"the drafter was trained on {list(trained)} (ids {list(trained_ids)}, {convention})",
                LINK_VLLM_MISSING_IDS
                if reading.ids is None
                else LINK_VLLM_OFF_BY_ONE
                if reading.engine == "vllm"
                else LINK_SGLANG_FIRST_ID,
                engine=reading.engine,
            )

    # -- fc: present when aux states are used, and as wide as the aux layers the config names
    target_hidden, target_hidden_source = _target_hidden_size(checkpoint, target)
    fc = tensors.get(FC)
    fc_in = int(fc.shape[1]) if fc is not None else None
    use_aux = eagle.get("use_aux_hidden_state", True) is not False
    if fc is None and use_aux:
        find(
            "missing_fc",
            "checkpoint has no fc.weight: the aux hidden states cannot be read (an EAGLE-1/2 draft? "
            "sglang PR #21272: fc silently skipped gives accept length 1.00)",
            LINK_SGLANG_NO_FC,
        )
    elif fc is not None and not use_aux:
        find(
            "aux_disabled",
            f"eagle_config.use_aux_hidden_state is false but the checkpoint has fc.weight {list(fc.shape)}: "
            "the engines then feed the last hidden state and skip fc (sglang PR #21272: accept length 1.00)",
            LINK_SGLANG_NO_FC,
        )
    if fc is not None and target_hidden:
        expected = aux_count * target_hidden
        if not row("fc.weight in-features", expected, fc_in):
            find(
                "fc_width",
                f"fc.weight reads {fc_in} features, {aux_count} aux layers"
                + (" (the config's ids)" if trained_ids else "")
                + f" x target hidden {target_hidden} ({target_hidden_source}) = {expected}",
                LINK_EAGLE_ALL_LAYERS,
            )
        row("fc.weight out-features", int(checkpoint.hidden_size), int(fc.shape[0]))
    declared_target_hidden = _config_int(config, "target_hidden_size")
    if fc_in is not None and declared_target_hidden is not None and fc_in != aux_count * declared_target_hidden:
        find(
            "target_hidden_size_mismatch",
            f"config.json target_hidden_size {declared_target_hidden} x {aux_count} aux layers = "
            f"{aux_count * declared_target_hidden}, but fc.weight reads {fc_in}: an engine building fc from "
            "the config cannot load the weights",
            LINK_VLLM_DRAFT_HIDDEN,
        )
    if (
        target is not None
        and int(checkpoint.hidden_size) != int(target.hidden_size)
        and not row("config target_hidden_size", int(target.hidden_size), declared_target_hidden)
    ):
        find(
            "draft_hidden_mismatch",
            f"draft hidden size {checkpoint.hidden_size} differs from the target's {target.hidden_size} "
            f"and the config does not declare target_hidden_size (vLLM #18906)",
            LINK_VLLM_DRAFT_HIDDEN,
        )

    # -- flags against the weights they need
    _flag_findings(checkpoint, config, eagle, aux_count, target_hidden, find)

    # -- vocab sizes against the tensors and the target
    _vocab_findings(checkpoint, config, target, row, find)

    # -- what the engines build for this config: the draft layer, its RoPE
    backbone = read_backbone(tensors, config)
    for build in backbone.engines:
        if build.builds is not None and build.builds != backbone.trained_as:
            find(
                "backbone_fallback",
                f"{build.why}, a {build.builds} decoder layer; the weights were trained as {backbone.trained_as} "
                f"({backbone.evidence}): the engine loads what fits its layer and runs without the rest "
                "(speculators #796: served under another backbone, acceptance extremely low)",
                LINK_BACKBONE,
                engine=build.engine,
            )
    rope = read_rope(config, target.config if target is not None else None, architectures or ())
    if rope.layouts_differ:
        inherited = rope.drafter_family == "dflash"
        find(
            "rope_layout_mismatch",
            f"the target rotates {rope.target_layout} ({rope.target_layout_source}), the drafter "
            f"{rope.drafter_layout} ({rope.drafter_layout_source}): "
            + (
                "vLLM's DFlash loader before PR #54373 gives the drafter the target's layout, rotating its Q/K "
                "another way than it was distilled with (vLLM #53063: acceptance 1.03 against 7.78)"
                if inherited
                else "engines rotate an EAGLE-3 drafter by its own config, so this matters only to one that "
                "gives it the target's layout"
            ),
            LINK_ROPE_LAYOUT,
            severity="error" if inherited else "warning",
            engine="vllm" if inherited else None,
        )

    details = ConfigContractDetails(
        layout=checkpoint.layout,
        draft_hidden_size=int(checkpoint.hidden_size),
        target_hidden_size=target_hidden,
        target_hidden_size_source=target_hidden_source,
        fc_in_features=fc_in,
        aux_layer_ids=trained_ids,
        aux_layer_ids_at=at,
        trained_layers=trained,
        trained_convention=convention if trained_ids else None,
        target_layers=num_layers,
        engines=engines,
        rows=tuple(rows),
        findings=tuple(findings),
        backbone=backbone,
        rope=rope,
    )
    errors = [f for f in findings if f.severity == "error"]
    evidence = tuple(f.message for f in findings)
    if errors:
        return CheckResult(NAME, "fail", "; ".join(f.message for f in errors[:3]), details, evidence)
    parts = [f"{sum(r.ok for r in rows)} / {len(rows)} config clauses agree with the tensors"]
    parts.extend(f.message for f in findings[:1])
    return CheckResult(NAME, "pass", "; ".join(parts), details, evidence)


def _config_int(config: Mapping[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _target_hidden_size(checkpoint: DrafterCheckpoint, target: TargetModel | None) -> tuple[int | None, str | None]:
    if target is not None:
        return int(target.hidden_size), "target config"
    declared = _config_int(checkpoint.config, "target_hidden_size")
    if declared:
        return declared, "checkpoint config target_hidden_size"
    # Without target_hidden_size every loader assumes Ht == H (sglang `python/sglang/srt/configs/model_config.py`).
    return int(checkpoint.hidden_size), "checkpoint hidden_size (no target_hidden_size)"


def _norm_names(tensors: Mapping[str, Any], stem: str) -> list[str]:
    """Tensors named ``<stem>...`` with or without a ``model.`` prefix (NeMo writes ``model.fc_norm.0.weight``)."""
    return sorted(name for name in tensors if name.removeprefix("model.").startswith(stem))


def _flag_findings(checkpoint, config, eagle, aux_count: int, target_hidden: int | None, find) -> None:
    tensors = checkpoint.tensors
    norm_before_fc, norm_where = _flag(config, eagle, "norm_before_fc")
    fc_norm, fc_norm_where = _flag(config, eagle, "fc_norm")
    input_norm = [n for n in _norm_names(tensors, "input_norm.") if n.endswith("weight")]
    fc_norms = [n for n in _norm_names(tensors, "fc_norm.") if n.endswith("weight")]
    if norm_before_fc and fc_norm:
        find(
            "exclusive_flags",
            "config.json sets both norm_before_fc and fc_norm: speculators refuses the pair (one norm over "
            "the concatenation, or one per aux layer), and an engine applies both",
            LINK_SPECULATORS_EXCLUSIVE,
        )
    width = aux_count * target_hidden if target_hidden else None
    if norm_before_fc and not input_norm:
        find(
            "flag_without_weights",
            f"config.json sets norm_before_fc ({norm_where}) but the checkpoint has no input_norm.weight"
            + (f" [{width}]" if width else "")
            + ": the engine builds an RMSNorm the drafter never trained and leaves it at its initial weights",
            LINK_SPECULATORS_EAGLE31,
        )
    elif input_norm and not norm_before_fc:
        find(
            "weights_without_flag",
            f"the checkpoint has {input_norm[0]} {list(tensors[input_norm[0]].shape)} but config.json does not "
            "set norm_before_fc: the engines skip the norm the drafter was trained with (vLLM PR #38111, "
            "SGLang #32226: acceptance collapsed)",
            LINK_VLLM_NORM_BEFORE_FC,
        )
    elif norm_before_fc and norm_where == "eagle_config":
        find(
            "flag_not_at_top_level",
            "norm_before_fc is set only inside eagle_config: vLLM before PR #42143 reads the top level "
            "and skips the norm",
            LINK_VLLM_NESTED_NORM_FLAG,
            severity="warning",
            engine="vllm",
        )
    if fc_norm and len(fc_norms) != aux_count:
        find(
            "flag_without_weights",
            f"config.json sets fc_norm ({fc_norm_where}) but the checkpoint has {len(fc_norms)} fc_norm weights "
            f"for {aux_count} aux layers: the missing norms stay at their initial weights",
            LINK_SPECULATORS_EAGLE31,
        )
    elif fc_norms and not fc_norm:
        find(
            "weights_without_flag",
            f"the checkpoint has {len(fc_norms)} fc_norm weights ({fc_norms[0]}, ...) but config.json does not set "
            "fc_norm: the engines skip the per-layer norms the drafter was trained with (vLLM PR #46488)",
            LINK_VLLM_FC_NORM,
        )


def _vocab_findings(checkpoint, config, target, row, find) -> None:
    tensors = checkpoint.tensors
    lm_head = tensors.get("lm_head.weight")
    d2t = tensors.get("d2t")
    rows_held = int(lm_head.shape[0]) if lm_head is not None else int(d2t.shape[0]) if d2t is not None else None
    held_by = "lm_head.weight" if lm_head is not None else "d2t"
    declared = _config_int(config, "draft_vocab_size")
    target_vocab = checkpoint.target_vocab_size
    if lm_head is None:
        find(
            "missing_lm_head",
            "checkpoint has no lm_head.weight: the draft head starts random (sglang PR #27908: accept len 1.00)",
            LINK_SGLANG_NO_HEAD,
        )
    if rows_held is not None and declared is not None:
        if not row(f"config draft_vocab_size vs {held_by} rows", declared, rows_held):
            find(
                "draft_vocab_size_mismatch",
                f"config.json draft_vocab_size is {declared} but {held_by} holds {rows_held} rows: an engine "
                "building the head from the config cannot load it (SafeAILab/EAGLE #249)",
                LINK_EAGLE_HEAD_SIZE,
            )
    elif rows_held is not None and target_vocab is not None and rows_held < target_vocab and declared is None:
        # sglang llama_eagle3.py: draft_vocab_size None -> the target's vocab and the target's head.
        find(
            "draft_vocab_size_missing",
            f"config.json has no draft_vocab_size while {held_by} holds {rows_held} rows of a {target_vocab}-token "
            "target vocab: SGLang then builds a full-vocab head and loads the target's instead",
            LINK_SGLANG_NO_HEAD,
        )
    layer_config = config.get("transformer_layer_config")
    layer_config = layer_config if isinstance(layer_config, Mapping) else {}
    configured_vocab = _config_int(config, "vocab_size") or _config_int(layer_config, "vocab_size")
    held_vocab = next(
        (int(tensors[name].shape[0]) for name in ("t2d", "embed_tokens.weight") if name in tensors),
        None,
    )
    if (
        configured_vocab is not None
        and held_vocab is not None
        and not row("config vocab_size vs t2d/embed_tokens", configured_vocab, held_vocab)
    ):
        find(
            "vocab_size_mismatch",
            f"config.json vocab_size is {configured_vocab} but the tensors span a target vocab of {held_vocab}",
        )
    if (
        target is not None
        and target_vocab is not None
        and not row("target vocab size (checkpoint vs target)", int(target.vocab_size), int(target_vocab))
    ):
        find(
            "target_vocab",
            f"checkpoint targets a vocab of {target_vocab}, the target model has {target.vocab_size}",
        )
