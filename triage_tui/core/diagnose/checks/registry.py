"""Every check, listed once: its name, its title, how it runs from a diagnosis, whether it counts.

``CHECKS`` is the one list of check names: its order is the order of ``triage check``, its JSON
(docs/contracts.md) and the TUI's progress bars. A check's runner takes the ``CheckContext``
(the run's inputs, each read once on first use; the results of the checks before it; the device;
progress; cancel; the target head, read once) and calls the check's pure function with typed inputs.

The target's ``lm_head`` (2.2 GiB at Kimi-K2 size) is read once for every check that applies it:
a check that does says what it will ask (``Check.head_request``, the same request its pure
function makes), and the first of them to ask makes one pass for all (``CheckContext.head``,
core/diagnose/checks/target_head.py ``SharedHeadPass``).

Adding a check: a module ``core/diagnose/checks/<name>.py`` (``NAME``, a frozen details dataclass with
``to_json()`` and ``drilldown()``, a pure function returning a ``CheckResult``), one ``Check``
entry below, its hypothesis function(s) in ``core/diagnose/hypotheses/`` and a row of the README's
hypotheses table (CONTRIBUTING.md, "A new check").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from triage_tui.core.device import resolve_device
from triage_tui.core.diagnose.checks.result import CheckResult
from triage_tui.core.errors import BadInput

if TYPE_CHECKING:
    from triage_tui.core.diagnose.checks.target_head import HeadRequest, HeadScanner
    from triage_tui.core.formats.checkpoint import DrafterCheckpoint
    from triage_tui.core.formats.hidden_states import HiddenStateDumps
    from triage_tui.core.formats.target import TargetModel
    from triage_tui.core.vocab import VocabMapping

Progress = Callable[[float, str], None]
T = TypeVar("T")


class CheckContext:
    """What a check's runner may use: the inputs, read once on first use (a failure is kept and
    re-raised to every check that needs that input), earlier checks' results, device, progress, cancel."""

    def __init__(
        self,
        *,
        checkpoint: Path | None = None,
        mapping: Path | None = None,
        data: Path | None = None,
        target: Path | None = None,
        run_checkpoints: tuple[Path, ...] = (),
        device: str = "auto",
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        all_chunk_orders: bool = False,
    ) -> None:
        # The resolved input paths (core/diagnose/check_inputs.py); each is read on first use below.
        self.checkpoint_path = checkpoint
        self.mapping_path = mapping
        self.data_path = data
        self.target_path = target
        self.run_checkpoints = run_checkpoints  # the run's saved checkpoints, oldest first
        self.device = device
        self.cancel = cancel
        self.all_chunk_orders = all_chunk_orders
        self.results: dict[str, CheckResult] = {}  # the checks that ran before, by name
        self._progress = progress
        self._cache: dict[str, tuple[Any, BaseException | None]] = {}
        self._head: HeadScanner | None = None

    # -- progress

    def progress(self, name: str) -> Progress:
        """``progress(fraction, message)`` for check ``name``: messages start with its name."""

        def report(fraction: float, message: str) -> None:
            if self._progress is not None:
                self._progress(fraction, message if message.startswith(f"{name}:") else f"{name}: {message}")

        return report

    def resolved_device(self) -> str:
        return str(resolve_device(self.device))

    # -- the target head, read once for every check that applies it

    def head(self) -> HeadScanner:
        """What a check's runner hands its check to apply the target head with: the first request
        makes one pass over the head for every check still to run that will ask (module docstring)."""
        if self._head is None:
            from triage_tui.core.diagnose.checks.target_head import SharedHeadPass

            self._head = SharedHeadPass(self._head_requests)
        return self._head

    def _head_requests(self) -> list[HeadRequest]:
        requests = []
        for check in CHECKS:
            if check.head_request is None or check.name in self.results:
                continue
            try:
                request = check.head_request(self)
            except Exception:  # noqa: BLE001 - the check meets the same error itself, and reports it
                continue
            if request is not None:
                requests.append(request)
        return requests

    # -- inputs, each read once

    def _load(self, key: str, read: Callable[[], T]) -> T:
        if key not in self._cache:
            try:
                self._cache[key] = (read(), None)
            except Exception as err:  # noqa: BLE001 - kept, re-raised to each check that needs it
                self._cache[key] = (None, err)
        value, error = self._cache[key]
        if error is not None:
            raise error
        return value

    def _read_path(self, key: str, path: Path | None, read: Callable[[Path], T]) -> T | None:
        """``read(path)`` once (None without a path), cached under ``key``."""
        return self._load(key, lambda: None if path is None else read(path))

    def optional(self, read: Callable[[], T | None]) -> T | None:
        """An input that only refines a check: when it cannot be read, the check runs without it
        (the check that needs it reports the error)."""
        try:
            return read()
        except Exception:  # noqa: BLE001 - see the docstring
            return None

    # The readers are imported on call: the TUI imports this module (CHECK_NAMES) before any check
    # runs, and must not pay for torch then.

    def checkpoint(self) -> DrafterCheckpoint | None:
        from triage_tui.core.formats.checkpoint import read_checkpoint

        return self._read_path("checkpoint", self.checkpoint_path, read_checkpoint)

    def target(self) -> TargetModel | None:
        from triage_tui.core.formats.target import read_target

        return self._read_path("target", self.target_path, read_target)

    def run_mapping(self) -> VocabMapping | None:
        from triage_tui.core.formats.mapping import read_mapping

        def read(path: Path) -> VocabMapping:
            # The target's vocab size lets a bare d2t be read; the mapping can be read without it.
            target = self.optional(self.target)
            return read_mapping(path, target_vocab_size=int(target.vocab_size) if target is not None else None)

        return self._read_path("run_mapping", self.mapping_path, read)

    def dumps(self) -> HiddenStateDumps | None:
        from triage_tui.core.formats.hidden_states import read_dumps

        return self._read_path("dumps", self.data_path, read_dumps)

    def checkpoint_mapping(self) -> VocabMapping | None:
        checkpoint = self.checkpoint()
        return checkpoint.mapping if checkpoint is not None else None

    def token_strings(self) -> dict[int, str] | None:
        """Token strings from the target's or the checkpoint's tokenizer; they only label output."""

        def read() -> dict[int, str] | None:
            from triage_tui.core.formats.tokenizer import read_token_strings

            for root in (self.target_path, self.checkpoint_path):
                if root is None:
                    continue
                try:
                    strings = read_token_strings(root)
                except BadInput:
                    continue
                if strings:
                    return strings
            return None

        return self.optional(lambda: self._load("token_strings", read))


@dataclass(frozen=True)
class Check:
    """One registry entry."""

    name: str
    title: str  # what it compares, for people (README, help)
    run: Callable[[CheckContext], CheckResult]
    # docs/contracts.md: a clean verdict (exit 0) needs one of the checks that count to have run.
    counts_as_checked: bool = False
    # What the check will ask of the target head (the request its run makes), for the one shared pass.
    head_request: Callable[[CheckContext], HeadRequest | None] | None = None


# --------------------------------------------------------------------------- the runners


def _vocab_mapping(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.vocab import NAME, check_vocab_mapping

    if ctx.checkpoint_path is None:
        # Not the same as a checkpoint without d2t, which the check itself explains.
        return CheckResult.skipped(NAME, "no drafter checkpoint found for this run (pass --checkpoint)")
    checkpoint = ctx.checkpoint()
    if checkpoint is not None and checkpoint.not_eagle3 is not None:
        return CheckResult.skipped(NAME, checkpoint.not_eagle3)  # not "pass --checkpoint": one was found
    checkpoint_mapping = ctx.checkpoint_mapping()
    run_mapping = ctx.run_mapping()
    return check_vocab_mapping(
        checkpoint_mapping, run_mapping, token_strings=ctx.token_strings(), dumps=ctx.optional(ctx.dumps)
    )


def _hidden_state(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.hidden_state import check_hidden_state

    return check_hidden_state(ctx.checkpoint(), ctx.dumps(), ctx.target())


def _verifier_mask(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.verifier_mask import NAME, check_verifier_mask

    # The run's mapping is what the trainer masks with; the checkpoint's only adds a comparison,
    # so a checkpoint that cannot be read (reported by the other checks) does not stop this one.
    return check_verifier_mask(
        ctx.optional(ctx.checkpoint_mapping),
        ctx.run_mapping(),
        dumps=ctx.optional(ctx.dumps),
        target=ctx.optional(ctx.target),
        device=ctx.resolved_device(),
        progress=ctx.progress(NAME),
        cancel=ctx.cancel,
        head=ctx.head(),
    )


def _verifier_mask_head(ctx: CheckContext) -> HeadRequest | None:
    from triage_tui.core.diagnose.checks.verifier_mask import head_request

    if ctx.run_mapping() is None and ctx.optional(ctx.checkpoint_mapping) is None:
        return None  # the check is skipped
    return head_request(ctx.optional(ctx.dumps), ctx.optional(ctx.target), device=ctx.resolved_device())


def _replay(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.hidden_state import HiddenStateDetails
    from triage_tui.core.diagnose.checks.replay import NAME, run_replay

    # run_replay says itself what it lacks (no checkpoint, no dumps; without a target it falls
    # back to the checkpoint's own embedding when it has one). Aux chunks the hidden-state check
    # finds suspect make it try all six chunk orders.
    hidden = ctx.results.get("hidden_state")
    details = hidden.details_as(HiddenStateDetails) if hidden is not None else None
    suspect = details is not None and details.has_issue(*AUX_CHUNK_ISSUES)
    return run_replay(
        ctx.checkpoint(),
        ctx.dumps(),
        ctx.target(),
        ctx.checkpoint_mapping(),
        ctx.run_mapping(),
        device=ctx.resolved_device(),
        all_chunk_orders=ctx.all_chunk_orders or suspect,
        progress=ctx.progress(NAME),
        cancel=ctx.cancel,
        head=ctx.head(),
    )


def _replay_head(ctx: CheckContext) -> HeadRequest | None:
    from triage_tui.core.diagnose.checks.replay import head_request

    return head_request(
        ctx.checkpoint(),
        ctx.dumps(),
        ctx.target(),
        ctx.checkpoint_mapping(),
        ctx.run_mapping(),
        device=ctx.resolved_device(),
    )


def _loss_mask(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.loss_mask import check_loss_mask

    return check_loss_mask(ctx.dumps())


def _dump_values(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.dump_values import check_dump_values

    # The target only names the dtype the dumps should have; without it the values are still checked.
    return check_dump_values(ctx.dumps(), ctx.optional(ctx.target))


def _dump_target(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.dump_target import NAME, check_dump_target

    return check_dump_target(
        ctx.dumps(),
        ctx.target(),
        device=ctx.resolved_device(),
        progress=ctx.progress(NAME),
        cancel=ctx.cancel,
        head=ctx.head(),
    )


def _dump_target_head(ctx: CheckContext) -> HeadRequest | None:
    from triage_tui.core.diagnose.checks.dump_target import head_request

    return head_request(ctx.dumps(), ctx.target(), device=ctx.resolved_device())


def _config_contract(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.config_contract import check_config_contract

    # The target only refines the contract (its hidden size, depth and vocab); without it the
    # config is still held against its own tensors.
    return check_config_contract(ctx.checkpoint(), ctx.optional(ctx.target))


def _mapping_health(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.mapping_health import NAME, SavedMapping, check_mapping_health
    from triage_tui.core.formats.checkpoint import read_checkpoint

    report = ctx.progress(NAME)

    def saved(
        path: Path, role: Literal["starting drafter", "run checkpoint"], read: Callable[[], DrafterCheckpoint | None]
    ) -> SavedMapping | None:
        try:
            checkpoint = read()  # headers and the d2t/t2d buffers only
        except BadInput as err:
            return SavedMapping.unreadable(path, role, err.line())
        if checkpoint is None:
            return None
        if checkpoint.not_eagle3 is not None:
            plain.append(checkpoint.not_eagle3)  # an HF Trainer checkpoint has no drafter mapping to judge
            return None
        return SavedMapping.of(checkpoint, role)

    plain: list[str] = []
    run_checkpoints = [Path(p) for p in ctx.run_checkpoints]
    start = ctx.checkpoint_path
    found: list[SavedMapping | None] = []
    if start is not None and _directory(start) not in {_directory(p) for p in run_checkpoints}:
        found.append(saved(start, "starting drafter", ctx.checkpoint))
    for i, path in enumerate(run_checkpoints):
        if ctx.cancel is not None and ctx.cancel.is_set():
            return CheckResult.skipped(NAME, "cancelled")
        report(i / len(run_checkpoints), f"reading {path.name}")
        found.append(saved(path, "run checkpoint", partial(read_checkpoint, path)))
    readable = [s for s in found if s is not None]
    if not readable and plain:
        return CheckResult.skipped(NAME, plain[0])
    target = ctx.optional(ctx.target)
    return check_mapping_health(
        readable,
        ctx.optional(ctx.run_mapping),
        target_vocab_size=int(target.vocab_size) if target is not None else None,
        dumps=ctx.optional(ctx.dumps),
    )


def _drafter_tensors(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.drafter_tensors import check_drafter_tensors

    return check_drafter_tensors(ctx.checkpoint())


def _quantization(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.quantization import check_quantization

    return check_quantization(ctx.checkpoint())


def _rope_scaling(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.rope_scaling import check_rope_scaling

    return check_rope_scaling(ctx.checkpoint(), ctx.target())


def _embed_tokens(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.embed_tokens import check_embed_tokens

    return check_embed_tokens(ctx.checkpoint(), ctx.target())


def _target_tie(ctx: CheckContext) -> CheckResult:
    from triage_tui.core.diagnose.checks.target_tie import check_target_tie

    return check_target_tie(ctx.target())


def _directory(path: Path) -> Path:
    """A checkpoint named by its directory or by a weights file in it, as one directory."""
    resolved = path.resolve()
    return resolved if resolved.is_dir() else resolved.parent


# Hidden-state findings about the aux chunks that make the replay try all six chunk orders.
AUX_CHUNK_ISSUES = ("aux_chunk_order", "repeated_aux_chunk", "aux_chunk_is_last_hidden")

CHECKS: tuple[Check, ...] = (
    Check(
        "vocab_mapping",
        "the checkpoint's and the run's vocab mappings, position by position",
        _vocab_mapping,
        counts_as_checked=True,
    ),
    Check("hidden_state", "the dumps' shapes, aux chunks and layers against the drafter's fc", _hidden_state),
    Check(
        "verifier_mask",
        "the verifier mask (t2d) against the drafter's row order",
        _verifier_mask,
        head_request=_verifier_mask_head,
    ),
    Check(
        "replay",
        "the drafter replayed on the run's dumps under both mappings",
        _replay,
        counts_as_checked=True,
        head_request=_replay_head,
    ),
    Check("loss_mask", "the dumps' loss masks: the supervised fraction, empty or covering the prompt", _loss_mask),
    Check("dump_values", "the dumped hidden states: NaN/inf, and the stored dtype against the target's", _dump_values),
    Check(
        "dump_target",
        "the dumps' last hidden states against the named target's final norm and lm_head",
        _dump_target,
        head_request=_dump_target_head,
    ),
    Check(
        "config_contract",
        "the drafter's config against its tensors, the target, and the aux layers each engine feeds",
        _config_contract,
    ),
    Check(
        "mapping_health",
        "the mapping saved in each checkpoint: present, not the identity, unchanged across the run",
        _mapping_health,
    ),
    Check("drafter_tensors", "the drafter's tensor names against those its layer requires", _drafter_tensors),
    Check("quantization", "the drafter's 8-bit weights against the scales stored beside them", _quantization),
    Check("rope_scaling", "the drafter's RoPE scaling against the target's", _rope_scaling),
    Check(
        "embed_tokens",
        "the drafter's embed_tokens against the target's, on a sample of rows",
        _embed_tokens,
    ),
    Check("target_tie", "the target's tie_word_embeddings against the lm_head its weights store", _target_tie),
)
CHECK_NAMES = tuple(check.name for check in CHECKS)
# A column of check names is this wide, so the longest (config_contract, 15) never runs into the
# text after it ("config_contract5 / 5 config clauses").
CHECK_NAME_WIDTH = max(len(name) for name in CHECK_NAMES)
COUNTING_CHECKS = tuple(check.name for check in CHECKS if check.counts_as_checked)


def _one_line(err: BaseException) -> str:
    """An exception as one line: BadInput's own line, else its type and first line."""
    if isinstance(err, BadInput):
        return err.line()
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def run_checks(ctx: CheckContext) -> dict[str, CheckResult]:
    """Every registered check in order, each isolated: any exception in one becomes its
    ``status="error"`` with a one-line reason and the others still run; a set cancel skips the rest."""
    for check in CHECKS:
        report = ctx.progress(check.name)
        if ctx.cancel is not None and ctx.cancel.is_set():
            ctx.results[check.name] = CheckResult.skipped(check.name, "cancelled")
            continue
        report(0.0, "running")
        try:
            result = check.run(ctx)
        except Exception as err:  # noqa: BLE001 - one check's failure must not stop the others
            result = CheckResult.error(check.name, _one_line(err))
        ctx.results[check.name] = result
        report(1.0, result.status)
    return dict(ctx.results)
