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

from triage_tui.core.check_inputs import INPUT_NAMES, resolve_inputs
from triage_tui.core.checks.registry import CHECK_NAME_WIDTH, CHECK_NAMES, CHECKS
from triage_tui.core.diagnose import Diagnosis, diagnose
from triage_tui.core.errors import BadInput
from triage_tui.core.hypotheses.scoring import LIKELY
from triage_tui.core.json_numbers import finite_json
from triage_tui.core.run_status import RunStatus
from triage_tui.core.runs.remote import Mirrors, shown_path, shown_text
from triage_tui.core.signals.chance import ChanceLine
from triage_tui.core.text import printable


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
    inputs = _resolve(args)
    status = _run_status(inputs.run)
    flags = tuple(status.flags) if status is not None else ()
    scalars = status.scalars if status is not None else None
    chance = status.chance if status is not None else None
    # Serving sources are read before the checks: a URL that does not answer is bad input (exit 2).
    sources, pages = _serving_sources(inputs.run, args.serving, inputs.checkpoint)
    serving = _serving(sources, pages, scalars)
    progress = _stderr_progress if sys.stderr.isatty() and not args.json else None
    diagnosis = diagnose(
        inputs,
        device=args.device,
        flags=flags,
        metrics=status.metrics if status is not None else None,
        progress=progress,
        serving=serving,
        all_chunk_orders=args.all_chunk_orders,
        start=status.start if status is not None else None,
        launches=_launches(sources),
        acceptance=status.acceptance_history() if status is not None else None,
    )
    crash = crash_of(status)
    if args.json:
        # A crashed run's crash comes first (docs/contracts.md): what a reader must see before any cause.
        document = {"crash": crash, **diagnosis.to_json()}
        if chance is not None:
            document["chance"] = finite_json(chance.to_json())  # the line the flags compared the loss with
        # A run in a bucket: every path read as its URL, not the local mirror's (runs/remote.py).
        json.dump(shown_text(document), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(str(shown_text(render_text(diagnosis, flags, chance, crash))))
    return exit_status(diagnosis)


def crash_of(status: RunStatus | None) -> dict[str, Any] | None:
    """A crashed run's crash: the console's error line (or W&B's exit code), the last step logged and
    when (unix time), as `scan` judged it (core.run_state); None for any other run."""
    if status is None or status.state is None or status.state.state != "crashed":
        return None
    state = status.state
    return {"line": state.line, "step": status.last_step, "time": state.last_update}


def _crash_line(crash: dict[str, Any]) -> str:
    when = crash["time"]
    at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if when is not None else "an unknown time"
    step = f"step {crash['step']}" if crash["step"] is not None else "no step logged"
    return f"crashed: {crash['line']}  (last logged {step}, {at})"


def _resolve(args: argparse.Namespace):
    """The run's inputs; a bucket prefix (s3://, gs://) is mirrored first (runs/remote.py), with the
    directories its triage.toml names out of it in the same bucket. Its checkpoints are placeholders
    there, which the checks read by range (formats/remote_safetensors.py), never as zeros."""
    mirrors = Mirrors()
    run_path = mirrors.local(args.run)
    errors = mirrors.sync()

    def resolve():
        return resolve_inputs(
            run_path, checkpoint=args.checkpoint, mapping=args.mapping, data=args.data, target=args.target
        )

    inputs = resolve()
    if mirrors.mirrors:
        before = len(mirrors.mirrors)
        errors += mirrors.mirror_outside([inputs.checkpoint, inputs.mapping, inputs.data, inputs.target])
        if len(mirrors.mirrors) > before:
            inputs = resolve()
    for error in errors:
        print(f"triage check: {printable(error.line())}", file=sys.stderr)
    return inputs


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


def _run_status(run_path) -> RunStatus | None:
    """One scan pass of the run: its flags, metrics, scalars, start and acceptance history feed the
    hypotheses; its chance line is the one `scan` and the TUI draw, said with its basis."""
    from triage_tui.core.watch import Watcher

    statuses = Watcher([run_path], use_watchdog=False, strict=True, follow_serving=False).poll_once()
    return next((s for s in statuses if s.info.path == run_path), statuses[0] if statuses else None)


def _serving_sources(
    run_path, flag_sources: list[str] | None, checkpoint: Any = None
) -> tuple[list[str], tuple[str, ...]]:
    """--serving sources, else triage.toml's [serving] and the speculation profile beside the
    drafter checked; and those named as a /metrics page (triage.toml's metrics), read as one as
    scan and the watcher read them."""
    from triage_tui.core.runs.manifest import load_manifest
    from triage_tui.core.runs.names import MANIFEST_NAME
    from triage_tui.core.serving.read import with_profile

    sources, pages = list(flag_sources or []), tuple[str, ...]()
    if not sources:
        if (run_path / MANIFEST_NAME).is_file():
            manifest = load_manifest(run_path / MANIFEST_NAME)
            sources, pages = manifest.serving_sources, manifest.serving_metrics_pages
        sources = with_profile(sources, checkpoint)
    return sources, pages


def _launches(sources: list[str]) -> tuple:
    """How the engine was launched, from the serving logs among the sources (never a URL)."""
    from triage_tui.core import bounds
    from triage_tui.core.formats.engine_launch import read_engine_launches

    return tuple(launch for source in sources if not bounds.is_url(source) for launch in read_engine_launches(source))


def _serving(sources: list[str], pages: tuple[str, ...], scalars: Any):
    """The serving sources read and set beside the training estimate."""
    from triage_tui.core.serving.compare import compare_serving, training_estimate_from_scalars
    from triage_tui.core.serving.read import read_serving_sources

    evidence = read_serving_sources(sources, pages)
    if evidence is None:
        return None
    estimate = training_estimate_from_scalars(scalars) if scalars is not None else None
    return compare_serving(evidence, estimate)


def _stderr_progress(fraction: float, message: str) -> None:
    if fraction == 0.0:
        print(f"  {printable(message)}", file=sys.stderr)


def render_text(
    diagnosis: Diagnosis, flags, chance: ChanceLine | None = None, crash: dict[str, Any] | None = None
) -> str:
    """A crashed run's crash first, then ranked hypotheses with their evidence, then one line per
    check; every line as `cat -v` would show it (paths, tags and notes come from files)."""
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
