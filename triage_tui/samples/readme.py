"""sample_runs/README.md: what each run is, its numbers, its chance line, how to rebuild it.

Text only, written from what GENERATED.json records: tests/test_samples.py compares the committed
README.md with ``readme_text`` whole, and its numbers with what ``triage scan`` reads from the runs.
"""

from __future__ import annotations

import math

from triage_tui.core.diagnose.hypotheses.scoring import LIKELY
from triage_tui.core.watch.signals.chance import ChanceLine, chance_loss
from triage_tui.samples.world import WorldSpec

# The hypothesis `triage check` should rank first on each run (None: nothing may score >= LIKELY);
# tests/test_samples.py asserts it on the committed runs and on a freshly generated small set.
EXPECTED_CAUSE = {
    "healthy": None,
    "vocab-mismatch": "vocab_mapping_mismatch",
    "hidden-state-format": "hidden_state_format",
    "verifier-mask": "verifier_mask_mismatch",
    "diverged": "non_finite",
}
WHAT_IS_WRONG = {
    "healthy": "nothing: a from-scratch drafter on domain B with domain B's mapping",
    "vocab-mismatch": "drafter-a (mapping A) fine-tuned with a mapping regenerated from domain B (the story)",
    "hidden-state-format": "healthy's drafter fine-tuned on dumps whose aux chunks are in the order high, mid, low",
    "verifier-mask": "a frequency-ordered d2t (modelopt) fine-tuned with logits[..., t2d] labels (SpecForge)",
    "diverged": "fp16 compute and a learning rate 5000x SpecForge's default: NaN",
}


def sample_chance_line(world: dict) -> tuple[ChanceLine, int, int]:
    """(the chance line of every sample run, valid positions, sequence length) for the recorded world.

    The dumps' loss_mask is 0 on the prompt and 1 on the response; SpecForge's loader zeroes each
    sequence's last position too (formats/hidden_states.py ``read_loss_mask_fraction``), and its
    loss averages over every position, so the watcher's line is (valid / seq_len) x ln V.
    """
    seq_len = int(world["seq_len"])
    valid = seq_len - int(world["prompt_len"]) - 1
    return ChanceLine(int(world["draft_vocab_size"]), valid / seq_len), valid, seq_len


def readme_text(summary: dict) -> str:
    """sample_runs/README.md: what each run is, its numbers, how to rebuild it."""
    spec = summary["spec"]
    world = spec["world"]
    maps = summary["mappings"]
    chance, valid, seq_len = sample_chance_line(world)
    lines = [
        "# sample_runs",
        "",
        "Real training runs of a tiny EAGLE-3 world, one per failure `triage` diagnoses. Built by",
        f"`{summary['command']}` ({summary['seconds']:.0f} s with {summary['jobs']} processes "
        "on the machine that built it;",
        "deterministic seeds, CPU). Open them with `triage sample_runs`; `triage check sample_runs/<run>`",
        "ranks the causes.",
        "",
        f"World: target vocab {world['target_vocab_size']}, draft vocab {world['draft_vocab_size']}, "
        f"hidden size {world['hidden_size']}, {world['num_layers']} target layers, aux layers "
        f"{list(WorldSpec(**{**world, 'lm_head_scales': tuple(world['lm_head_scales'])}).aux_layer_ids)}. "
        f"The chance line `triage` draws for every run here is {chance.label()}: SpecForge averages its loss",
        f"over all {seq_len} positions of a sequence, the {seq_len - valid} masked ones (the prompt and the last "
        f"position) adding 0, so a drafter guessing uniformly reads {valid}/{seq_len} of "
        f"ln {chance.vocab_size} = {chance_loss(chance.vocab_size):.2f}.",
        "The target is hand-built, not trained (see triage_tui/samples/world.py); drafters are trained",
        "SpecForge's way (soft cross-entropy against the target restricted to the draft vocab, TTT steps,",
        "`train/ploss_{i}`, `train/acc_{i}`, `train/lr` in TensorBoard files under `runs/`).",
        f"Mappings A and B (counted from domains A and B) agree at {maps['a_vs_b_positional_match']} of "
        f"{maps['draft_vocab_size']} draft positions and share {maps['a_vs_b_overlap']} tokens.",
        "",
        "| run | what is wrong | steps | train/ploss_0 first -> last | train/acc_0 last | `triage check` ranks first |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in summary["runs"].items():
        last = "NaN" if not math.isfinite(r["last_ploss_0"]) else f"{r['last_ploss_0']:.2f}"
        cause = EXPECTED_CAUSE[name] or f"nothing scores >= {LIKELY}"
        lines.append(
            f"| `{name}/` | {WHAT_IS_WRONG[name]} | {r['steps']} | {r['first_ploss_0']:.2f} -> {last} "
            f"| {r['last_acc_0']:.3f} | {cause} |"
        )
    lines += [
        "",
        "Shared: `_target/` (the target model, fp16), `_drafters/drafter-a/` (trained on domain A with",
        "mapping A), `_drafters/drafter-modelopt/` (trained with a frequency-ordered d2t and modelopt's",
        "d2t gather). Each run's `triage.toml` names its checkpoint, mapping, dumps and target.",
        "`GENERATED.json` holds the full spec, timings and these numbers; tests/test_samples.py checks",
        "that the committed runs match the generator (files, the digests of its spec and code, curve shapes,",
        "diagnoses).",
        "",
    ]
    return "\n".join(lines)
