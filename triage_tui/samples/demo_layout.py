"""Where `triage demo` lays out its run, and how: the target, drafter-a and the run's inputs, copied from a
matching ``sample_runs/`` or built as ``triage samples`` builds them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

DEMO_RUN = "vocab-mismatch-live"
REPO_SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"


@dataclass(frozen=True)
class DemoLayout:
    """Where the demo's files live under its root (SpecForge output layout for the run)."""

    root: Path

    @property
    def run(self) -> Path:
        return self.root / DEMO_RUN

    @property
    def init(self) -> Path:
        return self.root / "_drafters" / "drafter-a"

    @property
    def target(self) -> Path:
        return self.root / "_target"

    @property
    def data(self) -> Path:
        return self.run / "hidden_states"

    @property
    def mapping(self) -> Path:
        return next((self.run / "cache" / "vocab_mapping").glob("*.pt"))

    def remapped(self) -> list[Path]:
        """Remapped checkpoints beside the init one, complete ones only, oldest first."""
        found = [
            p
            for p in self.init.parent.glob(self.init.name + "-remapped-*")
            if (p / "config.json").is_file() and any(p.glob("*.safetensors"))
        ]
        return sorted(found, key=lambda p: p.stat().st_mtime)


def _samples_match(samples: Path) -> bool:
    """``samples`` holds the files the demo copies, written by this generator from its default spec."""
    from triage_tui.samples.provenance import built_by_this_generator
    from triage_tui.samples.spec import SampleSpec

    try:
        recorded = json.loads((samples / "GENERATED.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and built_by_this_generator(recorded, SampleSpec())


def prepare_demo(
    root: Path, *, samples: Path | None = REPO_SAMPLES, progress: Callable[[str], None] = lambda message: None
) -> DemoLayout:
    """Lay out the demo under ``root``: target, drafter-a and the run's inputs, copied from sample_runs/ or built.

    The live run's inputs are exactly ``sample_runs/vocab-mismatch``'s (domain B's mapping under
    the same cache name, the same dumps), so with a matching sample_runs/ nothing is computed.
    """
    from triage_tui.samples.recipes import mapping_cache_name, write_manifest
    from triage_tui.samples.spec import SampleSpec

    spec = SampleSpec()
    layout = DemoLayout(root)
    root.mkdir(parents=True, exist_ok=True)
    cache = Path("cache/vocab_mapping") / mapping_cache_name("domain-b.jsonl", spec, "../_target")
    if samples is not None and _samples_match(samples):
        progress(f"copying the target, drafter-a and the run's mapping and dumps from {samples}")
        shutil.copytree(samples / "_target", layout.target, dirs_exist_ok=True)
        shutil.copytree(samples / "_drafters" / "drafter-a", layout.init, dirs_exist_ok=True)
        story = samples / "vocab-mismatch"
        (layout.run / cache).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(story / cache, layout.run / cache)
        shutil.copytree(story / "hidden_states", layout.data, dirs_exist_ok=True)
    else:
        progress(
            f"no matching sample_runs/ to copy from: building the target and pretraining drafter-a "
            f"({spec.pretrain_steps} steps, about a minute)"
        )
        _build_inputs(layout, spec, cache)
    write_manifest(
        layout.run,
        mapping=str(cache),
        data="hidden_states",
        target="../_target",
        checkpoint="../_drafters/drafter-a",
        note="triage demo: drafter-a, trained with the mapping of domain A, fine-tuned on domain B\n"
        "with a mapping regenerated from domain B (SpecForge PR #534).",
    )
    return layout


def _build_inputs(layout: DemoLayout, spec, cache: Path) -> None:
    """What ``sample_runs/`` would have provided, built as ``triage samples`` builds it."""
    import torch

    from triage_tui.core.formats.mapping import write_mapping_pt
    from triage_tui.samples.recipes import build_world, pretrain_drafter, write_dumps
    from triage_tui.samples.world import save_target

    torch.set_num_threads(1)
    world = build_world(spec)
    save_target(world.target, layout.target)
    pretrain_drafter(world, layout.root, "drafter-a")
    write_mapping_pt(world.mapping_b, layout.run / cache)
    write_dumps(world, world.data_b, layout.run, spec.dumps_per_run)
