"""The import contract: which room may import which, read from the source, so a violation fails here.

Every ``import`` in ``triage_tui/`` counts, wherever it stands: at module level, inside a
function (a lazy import is still a dependency), and under ``TYPE_CHECKING`` (a type is one
too). The rooms, top to bottom (CONTRIBUTING.md draws the same map):

    cli, commands             parse arguments, print, exit codes
    samples                   the playground runs and the scripted demo (it starts the TUI)
    tui                       the Textual app: app over its check and remap flows over screens over widgets;
                              screens and flows never import the app
    core                      headless: never imports the three above, textual or rich

core is four packages, one a purpose, over the readers of files and buckets and the small shared
modules at its root (CORE_PACKAGES: fix over diagnose over watch over read over drafter, formats,
objstore and the rest of core's root). Within core, top to bottom, a module may import only from
layers below its own, never from a sibling room of its own layer (siblings are independent):

    diagnose.diagnosis | fix.remap    run the registered checks and rank causes / rewrite a checkpoint
    diagnose.evidence                 everything a diagnosis weighs about one run, gathered once
    diagnose.hypotheses | diagnose.check_inputs   rank causes / resolve a run's inputs
    diagnose.checks | watch.watcher   one verdict each / the live monitor over runs
    watch.watched_run | watch.read_schedule   one watched run: its settings from its files, its update
                                      into a RunStatus / when each run is read next (idle ones less often)
    watch.run_status | watch.derive   scan --json's object / the one derivation of a run's flags and metrics
    read.sources | watch.best_checkpoint | watch.setting_files   the readers of a run / the acceptance peak
    read.runs.discover                run discovery: which directory is a run, its files of each source kind
    read.runs.tracker_runs            a tracker's store of several runs as one run each
    read.source_kinds                 every kind of scalar source declared once
    read.wandb | watch.serving | watch.curve_shapes | watch.run_state   W&B / vLLM and SGLang acceptance /
                                      curve-shape flags / whether a run's writer is alive on this node
    read.events | watch.signals | drafter | read.console | watch.writers | read.trackers
                                      TensorBoard records / flags from scalars / the EAGLE-3 module /
                                      training consoles / which process writes a run / other trackers
    read.runs                         names over manifest over listing over walk, and triage.toml
    formats | watch.node | watch.process_table   files into typed results / GPUs, CPU, memory, disks /
                                      the user's processes, from one /proc scan
    objstore                          object-store URLs: listing, ranged and incremental reads, mirrors
    series | vocab | metric_names | decimal_text | text | device | fileio | json_numbers | natural_sort
    | bounds | log_tail | changed_file   small shared helpers
    errors                            BadInput, the one bad-input error

Inside ``formats`` the readers are layered too (mapping reads a checkpoint's buffers, a checkpoint
its weight files), and so are ``events`` (reader over decode over templates and columns over wire
and framing over crc) and ``wandb`` (history over records and framing) and ``console`` (reader and
view over follow over steps over one module per trainer's format over lines, record, literal and tuning) and
``hypotheses`` (rank over one module per cause family over scoring) and ``signals`` (the value
and stall flags over the chance line and tag choice over flags) and ``remap`` (execute
over verify and the write paths over rows over plan over staging and writer) and ``serving`` (read
and compare over the registry over one module per source format over the source protocol and the
tail over evidence); nothing in core imports in a circle. The modules tests patch (``fileio``,
``bounds`` and each package's ``tuning``) are imported whole, never ``from ... import name``.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "triage_tui"

# Top to bottom; each entry is one layer, a tuple of rooms (module-name prefixes, without
# "triage_tui."). The root package (``__version__``) may be imported from anywhere.
ROOMS: list[tuple[str, ...]] = [
    ("__main__",),
    ("cli",),
    ("commands",),
    ("samples",),
    ("tui",),
    ("core",),
]
CORE = [
    ("core.diagnose.diagnosis", "core.fix.remap"),
    ("core.diagnose.evidence",),
    ("core.diagnose.hypotheses", "core.diagnose.check_inputs"),
    ("core.diagnose.checks", "core.watch.watcher"),
    ("core.watch.watched_run", "core.watch.fs_wakeups", "core.watch.read_schedule"),
    ("core.watch.run_status", "core.watch.derive"),
    ("core.read.sources", "core.watch.best_checkpoint", "core.watch.setting_files"),
    ("core.read.runs.discover",),
    ("core.read.runs.tracker_runs",),
    ("core.read.source_kinds",),
    ("core.read.wandb", "core.watch.serving", "core.watch.curve_shapes", "core.watch.run_state"),
    (
        "core.read.events",
        "core.watch.signals",
        "core.drafter",
        "core.read.console",
        "core.watch.writers",
        "core.read.trackers",
    ),
    ("core.read.runs",),
    ("core.formats", "core.watch.node", "core.watch.process_table", "core.watch.fanout"),
    ("core.objstore",),
    (
        "core.series",
        "core.vocab",
        "core.metric_names",
        "core.decimal_text",
        "core.text",
        "core.device",
        "core.fileio",
        "core.json_numbers",
        "core.natural_sort",
        "core.bounds",
        "core.log_tail",
        "core.changed_file",
    ),
    ("core.errors",),
]
FORMATS = [
    ("core.formats.mapping_digest",),
    ("core.formats.mapping",),
    ("core.formats.checkpoint", "core.formats.target", "core.formats.hidden_states", "core.formats.tokenizer"),
    ("core.formats.weights",),
    (
        "core.formats.training_state",
        "core.formats.run_yaml",
        "core.formats.remote_safetensors",
        "core.formats.trainer_state",
        "core.formats.specforge_output",
        "core.formats.engine_launch",
        "core.formats.hub",
        "core.formats.remap_record",
        "core.formats.quantization",
    ),
    ("core.formats.safetensors_header",),
    ("core.formats.safe_torch", "core.formats.json_file"),
]
WANDB = [
    ("core.read.wandb.history",),
    ("core.read.wandb.records", "core.read.wandb.framing"),
]
EVENTS = [
    ("core.read.events.reader",),
    ("core.read.events.decode", "core.read.events.event_file"),
    ("core.read.events.templates", "core.read.events.columns"),
    ("core.read.events.wire", "core.read.events.framing"),
    ("core.read.events.crc", "core.read.events.tuning"),
]
HYPOTHESES = [
    ("core.diagnose.hypotheses.rank",),
    (
        "core.diagnose.hypotheses.mapping",
        "core.diagnose.hypotheses.dumps",
        "core.diagnose.hypotheses.curves",
        "core.diagnose.hypotheses.serving",
        "core.diagnose.hypotheses.target_weights",
    ),
    ("core.diagnose.hypotheses.weights",),
    ("core.diagnose.hypotheses.scoring",),
]
SIGNALS = [
    ("core.watch.signals.values", "core.watch.signals.stall"),
    ("core.watch.signals.chance", "core.watch.signals.tags"),
    ("core.watch.signals.flags", "core.watch.signals.metrics"),
    ("core.watch.signals.kinds",),
]
SOURCE_KINDS = [
    ("core.read.source_kinds.registry",),
    ("core.read.source_kinds.console",),
    (
        "core.read.source_kinds.tensorboard",
        "core.read.source_kinds.wandb",
        "core.read.source_kinds.trainer_state",
        "core.read.source_kinds.mlflow",
        "core.read.source_kinds.trackio",
        "core.read.source_kinds.lightning",
        "core.read.source_kinds.deepspeed_csv",
        "core.read.source_kinds.torchtune",
        "core.read.source_kinds.nemo_automodel",
        "core.read.source_kinds.nanogpt",
    ),
    ("core.read.source_kinds.kind",),
]
RUNS = [
    ("core.read.runs.discover", "core.read.runs.remote"),
    ("core.read.runs.tracker_runs",),
    ("core.read.runs.walk",),
    ("core.read.runs.listing",),
    ("core.read.runs.info", "core.read.runs.config"),
    ("core.read.runs.manifest", "core.read.runs.names"),
]
REMAP = [
    ("core.fix.remap.execute", "core.fix.remap.keep"),
    ("core.fix.remap.verify", "core.fix.remap.single_pass", "core.fix.remap.torch_path", "core.fix.remap.carry"),
    ("core.fix.remap.rows",),
    ("core.fix.remap.plan",),
    ("core.fix.remap.staging", "core.fix.remap.writer"),
    ("core.fix.remap.job", "core.fix.remap.digest"),
    ("core.fix.remap.tuning",),
]
OBJSTORE = [
    ("core.objstore.polls",),
    ("core.objstore.mirror",),
    ("core.objstore.levels",),
    ("core.objstore.sparse",),
    ("core.objstore.follow", "core.objstore.cache", "core.objstore.cost"),
    ("core.objstore.store",),
    ("core.objstore.budget",),
    ("core.objstore.url", "core.objstore.tuning", "core.objstore.scratch", "core.objstore.deferred"),
    ("core.objstore.failures",),
]
CONSOLE = [
    ("core.read.console.reader", "core.read.console.view"),
    ("core.read.console.follow",),
    ("core.read.console.steps",),
    ("core.read.console.specforge", "core.read.console.hf_trainer", "core.read.console.speculators"),
    ("core.read.console.lines", "core.read.console.record"),
    ("core.read.console.literal",),
    ("core.read.console.tuning",),
]
TRACKERS = [
    ("core.read.trackers.frameworks", "core.read.trackers.stores"),
    (
        "core.read.trackers.mlflow_db",
        "core.read.trackers.mlflow_files",
        "core.read.trackers.trackio_db",
        "core.read.trackers.csv_metrics",
        "core.read.trackers.torchtune_log",
        "core.read.trackers.nanogpt_log",
        "core.read.trackers.nemo_jsonl",
    ),
    ("core.read.trackers.line_log", "core.read.trackers.sqlite_ro"),
    ("core.read.trackers.points", "core.read.trackers.text_numbers"),
    ("core.read.trackers.tuning",),
]
SERVING = [
    ("core.watch.serving.read", "core.watch.serving.compare"),
    ("core.watch.serving.registry",),
    (
        "core.watch.serving.logs",
        "core.watch.serving.metrics",
        "core.watch.serving.meta_info",
        "core.watch.serving.per_request",
        "core.watch.serving.profile",
    ),
    ("core.watch.serving.json_lines",),
    ("core.watch.serving.source", "core.watch.serving.synthetic"),
    ("core.watch.serving.evidence", "core.watch.serving.tuning"),
]
# What core's tree says at a glance: its packages top to bottom, each one a purpose, and the small
# shared modules at core's root, under them all (the EAGLE-3 module above the readers of files it
# is loaded from). A package may import only from packages below it; a package's own __init__ holds
# nothing but its docstring.
CORE_PACKAGES = [
    ("core.fix",),
    ("core.diagnose",),
    ("core.watch",),
    ("core.read",),
    ("core.drafter",),
    ("core.formats",),
    ("core.objstore",),
]
CORE_SHARED = (*CORE[-2], *CORE[-1])  # the bottom of CORE: the helpers over errors
# The modules whose attributes tests replace (fault injection, sizes turned small): imported whole
# and read as ``module.name`` at the call, so a monkeypatch reaches every caller wherever code moves.
SEAM_MODULES = (
    "core.fileio",
    "core.read.events.tuning",
    "core.fix.remap.tuning",
    "core.watch.serving.tuning",
    "core.objstore.tuning",
    "core.bounds",
    "core.read.console.tuning",
    "core.read.trackers.tuning",
)
# Inside tui: the app over its two workflows (the remap over the checks it follows from), over the
# screens, over the widgets. A screen never imports the app (not even for a type): it posts a message
# of tui/messages.py for what the user asks and shows the state it is bound to (tui/view_state.py);
# the app answers by setting that state. A workflow never imports the app either: it is handed it,
# typed by what it needs of it (CheckHost, RemapHost).
TUI = [
    ("tui.app",),
    ("tui.remap_flow",),
    ("tui.check_flow",),
    ("tui.watch_flow", "tui.run_list", "tui.topbar", "tui.palette"),
    ("tui.screens",),
    ("tui.widgets",),
    ("tui.messages", "tui.view_state"),
    ("tui.view_data",),
]
# Never imported by core, at any depth of a function: the terminal belongs to tui/.
CORE_NEVER = ("textual", "rich", "textual_plotext", "plotext")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, int]]:
    """Every module an import statement in ``path`` names: (dotted name without "triage_tui.", line)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against this module's package
                base = ["triage_tui", *package.split(".")] if package else ["triage_tui"]
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((module, node.lineno))
            # `from triage_tui.core import diagnose` names the submodule, not the package
            out += [(f"{module}.{alias.name}", node.lineno) for alias in node.names]
    return out


def _edges() -> dict[str, set[tuple[str, int]]]:
    """Module -> the triage_tui modules it imports (names without "triage_tui.")."""
    edges: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for name, path in MODULES.items():
        for module, line in _imports(name, path):
            if module == "triage_tui" or not module.startswith("triage_tui."):
                continue
            target = module.removeprefix("triage_tui.")
            if target in MODULES and target != name:
                edges[name].add((target, line))
    return edges


EDGES = _edges()


def _room(name: str, layers: list[tuple[str, ...]]) -> tuple[int, str] | None:
    """(layer index, room) of the longest room prefix that holds ``name``; None when none does."""
    best = None
    for index, rooms in enumerate(layers):
        for room in rooms:
            if (name == room or name.startswith(room + ".")) and (best is None or len(room) > len(best[1])):
                best = (index, room)
    return best


def _violations(layers: list[tuple[str, ...]], within: str | None = None) -> list[str]:
    found = []
    for source, targets in sorted(EDGES.items()):
        if within and not source.startswith(within + "."):
            continue
        mine = _room(source, layers)
        for target, line in sorted(targets):
            theirs = _room(target, layers)
            if mine is None or theirs is None or mine[1] == theirs[1]:
                continue
            if theirs[0] <= mine[0]:
                how = "a sibling" if theirs[0] == mine[0] else "a layer above"
                found.append(f"{source} (line {line}) imports {target}: {how} ({theirs[1]} over {mine[1]})")
    return found


def test_every_module_has_a_room():
    """A new module must be placed on the map (here and in CONTRIBUTING.md) before it lands."""
    unplaced = [name for name in MODULES if name and _room(name, ROOMS) is None]
    unplaced += [
        name
        for name in MODULES
        if name.startswith("core.") and _room(name, CORE) is None and (name,) not in CORE_PACKAGES
    ]
    unplaced += [name for name in MODULES if name.startswith("core.formats.") and _room(name, FORMATS) is None]
    unplaced += [name for name in MODULES if name.startswith("core.read.events.") and _room(name, EVENTS) is None]
    unplaced += [name for name in MODULES if name.startswith("core.read.wandb.") and _room(name, WANDB) is None]
    unplaced += [
        name for name in MODULES if name.startswith("core.diagnose.hypotheses.") and _room(name, HYPOTHESES) is None
    ]
    unplaced += [name for name in MODULES if name.startswith("core.watch.signals.") and _room(name, SIGNALS) is None]
    unplaced += [name for name in MODULES if name.startswith("core.read.runs.") and _room(name, RUNS) is None]
    unplaced += [name for name in MODULES if name.startswith("core.fix.remap.") and _room(name, REMAP) is None]
    unplaced += [name for name in MODULES if name.startswith("core.watch.serving.") and _room(name, SERVING) is None]
    unplaced += [name for name in MODULES if name.startswith("core.objstore.") and _room(name, OBJSTORE) is None]
    unplaced += [name for name in MODULES if name.startswith("core.read.console.") and _room(name, CONSOLE) is None]
    unplaced += [name for name in MODULES if name.startswith("core.read.trackers.") and _room(name, TRACKERS) is None]
    unplaced += [
        name for name in MODULES if name.startswith("core.read.source_kinds.") and _room(name, SOURCE_KINDS) is None
    ]
    unplaced += [name for name in MODULES if name.startswith("tui.") and _room(name, TUI) is None]
    assert not unplaced, f"modules with no layer in tests/test_layers.py: {unplaced}"


@pytest.mark.parametrize(
    ("layers", "within"),
    [
        (ROOMS, None),
        (CORE, "core"),
        (FORMATS, "core.formats"),
        (EVENTS, "core.read.events"),
        (WANDB, "core.read.wandb"),
        (HYPOTHESES, "core.diagnose.hypotheses"),
        (SIGNALS, "core.watch.signals"),
        (RUNS, "core.read.runs"),
        (REMAP, "core.fix.remap"),
        (SERVING, "core.watch.serving"),
        (OBJSTORE, "core.objstore"),
        (CONSOLE, "core.read.console"),
        (TRACKERS, "core.read.trackers"),
        (SOURCE_KINDS, "core.read.source_kinds"),
        (TUI, "tui"),
    ],
    ids=[
        "rooms",
        "core",
        "formats",
        "events",
        "wandb",
        "hypotheses",
        "signals",
        "runs",
        "remap",
        "serving",
        "objstore",
        "console",
        "trackers",
        "source_kinds",
        "tui",
    ],
)
def test_imports_only_go_down(layers, within):
    assert _violations(layers, within) == []


def test_core_is_its_packages_over_its_shared_modules():
    """core/ reads as its purpose: read, watch, diagnose, fix (and the files and buckets they read),
    each importing only what lies below it; nothing else sits loose at core's root."""
    loose = [
        name
        for name, path in MODULES.items()
        if name.count(".") == 1 and name.startswith("core.") and path.name != "__init__.py"
    ]
    assert sorted(loose) == sorted((*CORE_SHARED, "core.drafter"))
    # the shared modules are one room here (their own order is CORE's)
    assert _violations([*CORE_PACKAGES, ("core",)], "core") == []
    for (package,) in CORE_PACKAGES:
        init = PACKAGE.joinpath(*package.split("."), "__init__.py")
        if init.is_file():
            body = ast.parse(init.read_text()).body
            assert len(body) == 1 and isinstance(body[0], ast.Expr), f"{init} holds more than its docstring"


def test_seam_modules_are_imported_whole():
    """``from triage_tui.core.fileio import write_at`` binds the function where it is imported: a
    test's monkeypatch of ``fileio.write_at`` would then miss that caller, silently."""
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = node.module.removeprefix("triage_tui.")
                if module in SEAM_MODULES:
                    found.append(f"{name} (line {node.lineno}) imports names from {module}")
    assert found == []


def test_no_test_module_imports_another():
    """Tests share what they build through tests/builders/, never by importing a test module (that
    runs the other module's setup and ties the two files' helpers and fixtures together)."""
    tests = Path(__file__).resolve().parent
    found = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            found += [
                f"{path.relative_to(tests)} (line {node.lineno}) imports {n}" for n in names if n.startswith("test_")
            ]
    assert found == []


def test_core_never_imports_the_terminal():
    found = [
        f"{name} (line {line}) imports {module}"
        for name, path in MODULES.items()
        if name.startswith("core")
        for module, line in _imports(name, path)
        if module.split(".")[0] in CORE_NEVER
    ]
    assert found == []


def test_core_has_no_import_cycle():
    graph = {
        name: {target for target, _ in targets if target.startswith("core")}
        for name, targets in EDGES.items()
        if name.startswith("core")
    }
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_contract_sees_a_violation(tmp_path, monkeypatch):
    """The checker itself: an upward import, a sibling import and a cycle are each caught."""
    fake = {
        "core.errors": "from triage_tui.core.read.runs import Run\n",  # up, and a cycle with runs
        "core.read.runs": "from triage_tui.core import errors\n",
        "core.read.events": "def f():\n    from triage_tui.core.watch.signals import Flag\n",  # a sibling, lazily
        "core.watch.signals": "",
    }
    modules = {}
    for name, text in fake.items():
        path = tmp_path / (name.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        modules[name] = path
    monkeypatch.setattr(sys.modules[__name__], "MODULES", modules)
    monkeypatch.setattr(sys.modules[__name__], "EDGES", _edges())
    found = _violations(CORE, "core")
    assert any("core.errors (line 1) imports core.read.runs: a layer above" in v for v in found), found
    assert any("core.read.events (line 2) imports core.watch.signals: a sibling" in v for v in found), found
    with pytest.raises(AssertionError, match="core.errors -> core.read.runs -> core.errors"):
        test_core_has_no_import_cycle()


# The house's size rule, no exceptions: a module over MODULE_LINES or a class over CLASS_LINES is
# split by moving a responsibility out of it.
MODULE_LINES = 600
CLASS_LINES = 300


def test_no_module_over_600_lines_and_no_class_over_300():
    import ast

    big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        lines = len(source.splitlines())
        if lines > MODULE_LINES:
            big.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
        big += [
            f"{path.relative_to(PACKAGE.parent)}: class {node.name}: {node.end_lineno - node.lineno + 1} lines"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ClassDef)
            and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > CLASS_LINES
        ]
    assert big == []
