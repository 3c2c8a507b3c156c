"""`triage check RUN [--checkpoint P] [--mapping P] [--data P] [--target P] [--device D] [--json]`.

All checks on one run and the ranked hypotheses. Exit status (docs/contracts.md): 0 the
checks that ran found nothing >= 0.5 and the mapping comparison or the replay was among them,
1 some hypothesis scored >= 0.5, 2 bad input, a path that is not a run, or nothing checked.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from triage_tui.core.diagnose.check_inputs import INPUT_NAMES
from triage_tui.core.diagnose.checks.registry import CHECK_NAME_WIDTH, CHECK_NAMES, CHECKS
from triage_tui.core.diagnose.diagnosis import Diagnosis, diagnose
from triage_tui.core.diagnose.evidence import Overrides, gather_evidence
from triage_tui.core.diagnose.hypotheses.scoring import LIKELY
from triage_tui.core.errors import BadInput
from triage_tui.core.json_numbers import finite_json
from triage_tui.core.read.runs.remote import shown_path, shown_text
from triage_tui.core.text import printable
from triage_tui.core.watch.signals.chance import ChanceLine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # `triage check --help` lists the checks from the registry, in the order they run.
    parser.epilog = "checks, in the order they run:\n" + "\n".join(
        f"  {check.name:<{CHECK_NAME_WIDTH}}  {check.title}" for check in CHECKS
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "run", metavar="RUN", help="the run directory (holds triage.toml or event files), or its s3:// or gs:// prefix"
    )
    parser.add_argument("--checkpoint", metavar="P", help="drafter checkpoint the fine-tune started from")
    parser.add_argument("--mapping", metavar="P", help="vocab mapping the trainer builds labels with")
    parser.add_argument("--data", metavar="P", help="hidden-state dumps (a sample is enough)")
    parser.add_argument("--target", metavar="P", help="target model dir (embeddings and lm_head)")
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where the replay runs (auto: CUDA when torch sees a GPU)",
    )
    parser.add_argument(
        "--serving",
        metavar="PATH_OR_URL",
        action="append",
        default=None,
        help="serving evidence: a vLLM/SGLang log, a saved /metrics page, an SGLang meta_info "
        "JSONL, a JSONL of vLLM responses with per-request metrics, a ModelOpt speculation_profile.json, "
        "a saved command line, or a live http:// metrics URL (repeatable; default: triage.toml [serving] "
        "and the speculation_profile.json beside the checkpoint)",
    )
    parser.add_argument(
        "--all-chunk-orders",
        action="store_true",
        help="replay every order of the three aux chunks (6 drafter passes), not only the stored "
        "order; done anyway when the hidden-state check finds the chunks suspect",
    )
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON (docs/contracts.md)")


def run(args: argparse.Namespace) -> int:
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise BadInput(None, "--device cuda: torch sees no GPU on this machine (use --device auto or cpu)")
    # One evidence path (core/diagnose/evidence.py): the TUI's `c` and the demo gather the same. Serving
    # sources are read there, before the checks: a URL that does not answer is bad input (exit 2).
    overrides = Overrides(
        checkpoint=args.checkpoint,
        mapping=args.mapping,
        data=args.data,
        target=args.target,
        serving=tuple(args.serving or ()),
        device=args.device,
        all_chunk_orders=args.all_chunk_orders,
    )
    evidence = gather_evidence(args.run, overrides)
    for error in evidence.unread:
        print(f"triage check: {printable(error.line())}", file=sys.stderr)
    progress = _stderr_progress if sys.stderr.isatty() and not args.json else None
    diagnosis = diagnose(evidence, progress=progress)
    crash = evidence.crash.to_json() if evidence.crash is not None else None
    if args.json:
        # A crashed run's crash comes first (docs/contracts.md): what a reader must see before any cause.
        document = {"crash": crash, **diagnosis.to_json()}
        if evidence.chance is not None:
            document["chance"] = finite_json(evidence.chance.to_json())  # the line the flags compared the loss with
        document["source_notes"] = list(evidence.source_notes)  # what was read of the run's files
        # A run in a bucket: every path read as its URL, not the local mirror's (runs/remote.py).
        json.dump(shown_text(document), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        text = render_text(diagnosis, evidence.flags, evidence.chance, crash, evidence.source_notes)
        sys.stdout.write(str(shown_text(text)))
    return exit_status(diagnosis)


def _crash_line(crash: dict[str, Any]) -> str:
    when = crash["time"]
    at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if when is not None else "an unknown time"
    step = f"step {crash['step']}" if crash["step"] is not None else "no step logged"
    return f"crashed: {crash['line']}  (last logged {step}, {at})"


def exit_status(diagnosis: Diagnosis) -> int:
    """docs/contracts.md: 2 when nothing could be checked (one line on stderr says why), else 1 when a
    hypothesis scored >= 0.5, else 0. Never 0 when nothing was looked at."""
    reason = diagnosis.nothing_checked()
    if reason is not None:
        print(
            f"triage check: {printable(shown_path(diagnosis.inputs.run))}: {printable(str(shown_text(reason)))}",
            file=sys.stderr,
        )
        return 2
    return 1 if diagnosis.top_score >= LIKELY else 0


def _stderr_progress(fraction: float, message: str) -> None:
    if fraction == 0.0:
        print(f"  {printable(message)}", file=sys.stderr)


def render_text(
    diagnosis: Diagnosis,
    flags,
    chance: ChanceLine | None = None,
    crash: dict[str, Any] | None = None,
    source_notes: tuple[str, ...] = (),
) -> str:
    """A crashed run's crash first, the run's inputs and what was read of its files, then ranked
    hypotheses with their evidence, then one line per check; every line as `cat -v` would show it
    (paths, tags and notes come from files)."""
    inputs = diagnosis.inputs
    lines = [_crash_line(crash)] if crash is not None else []
    lines.append(f"run  {inputs.run}")
    for name in INPUT_NAMES:
        path = getattr(inputs, name)
        source = inputs.sources.get(name)
        lines.append(f"  {name:<10} {path if path is not None else '-'}" + (f"  ({source})" if source else ""))
    if chance is not None:
        # The same line `scan` and the TUI draw (RunStatus.chance), and why it is that value.
        lines.append(f"  {'chance':<10} {chance.label()}  ({chance.convention})")
    for note in inputs.notes:
        lines.append(f"  note: {note}")
    for note in source_notes:
        lines.append(f"  {'read':<10} {note}")  # a console's rank read, lines skipped, a read cut short
    for flag in flags:
        lines.append(f"  flag {flag.severity}: {flag.message}")
    lines.append("")
    lines.append("hypotheses (best first)")
    for hypothesis in diagnosis.hypotheses:
        mark = "!" if hypothesis.score >= LIKELY else " "
        lines.append(f"{mark} {hypothesis.score:4.2f}  {hypothesis.id}: {hypothesis.title}")
        for line in hypothesis.evidence:
            lines.append(f"        - {line}")
        if hypothesis.score > 0:
            lines.extend(f"        known from {link}" for link in hypothesis.links)
        commands = diagnosis.fix_commands() if hypothesis.action == "remap" else ()
        if commands:
            lines.append(f"        fix: {commands[0]}")  # the TUI's Action tab shows the same command
    if diagnosis.serving is not None:
        lines.append("")
        lines.extend(_serving_lines(diagnosis.serving))
    lines.append("")
    lines.append("checks")
    for name in CHECK_NAMES:
        result = diagnosis.checks.get(name)
        if result is not None:
            lines.append(f"  {name:<{CHECK_NAME_WIDTH}} {result.status:<8} {result.summary}")
    return "\n".join(map(printable, lines)) + "\n"


def _serving_lines(comparison) -> list[str]:
    serving, training = comparison.serving, comparison.training
    length = f"{serving.acceptance_length:.2f}" if serving.acceptance_length is not None else "-"
    lines = [
        f"serving ({serving.engine}, {serving.source})",
        f"  acceptance length {length}"
        + (f"  ({serving.accepted} accepted / {serving.drafts} drafts)" if serving.drafts else ""),
    ]
    if serving.per_position:
        lines.append("  per position      " + " ".join(f"{p:.3f}" for p in serving.per_position))
    lines.append(f"  convention        {serving.convention}")
    why = serving.not_scored()
    if why is not None:
        lines.append(f"  not scored        {why}")
    if training is not None:
        lines.append(
            f"  training estimate {training.acceptance_length:.2f} at step {training.step} ({training.arithmetic})"
        )
    for note in serving.notes:
        lines.append(f"  note: {note}")
    for finding in comparison.findings:
        lines.append(f"  ! {finding.kind}: {finding.message}")
    return lines
