"""`triage demo`: the story of docs/case.md, live, and its fix.

A background process fine-tunes ``drafter-a`` (trained with domain A's vocab mapping) on
domain B with a mapping regenerated from domain B, the bug of SpecForge PR #534: the loss
sits above the chance line. It writes TensorBoard events every step. When a remapped checkpoint
appears beside ``drafter-a`` (``triage remap`` writes ``<checkpoint>-remapped-<sha8>/``), the
trainer reloads from it and carries on, and the loss falls under the chance line.

The trainer is ``python -m triage_tui.samples.demo train ROOT``; it prints one JSON object
per line (``started``, ``step``, ``waiting``, ``reloaded``, ``stopped``) and reads orders on its
stdin: ``run N`` (with ``--paced``: step up to step N, then wait). It stops when its stdin
closes (the parent stopped it or died), when its parent is gone, or after ``--max-steps``.

Where the demo's files live and how they are laid out is samples/demo_layout.py.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, NoReturn, TypeVar

from triage_tui.core.watch.signals.kinds import FlagKind
from triage_tui.samples.demo_layout import DemoLayout

if TYPE_CHECKING:
    from triage_tui.core.watch.run_status import RunStatus
    from triage_tui.core.watch.signals.chance import ChanceLine
    from triage_tui.core.watch.signals.flags import Flag
    from triage_tui.samples.trainer import ComputeDtype

TRAIN_SEQUENCES = 4_000  # the trainer cycles through these; more than any demo needs
# Two sequences a step, not the samples' four: a step costs in proportion to the batch (the
# [B, T, 32000] logits dominate it), and the demo's story (a loss nats above the chance line,
# then under it after the remap) reads the same at either size.
BATCH_SIZE = 2
# The story's budgets, in trainer steps, not seconds (a busy machine runs fewer steps a second,
# never a different story): the flag comes at about step 110 (the watcher's warm-up is 100
# steps), the loss falls under the chance line within a few steps of the reload. Four times
# that is room for noise, not for a broken story.
FLAG_BY_STEP = 400
RECOVERY_STEPS = 200
# No sign of life from the trainer or the watcher for this long (wall clock) is a hang, not a
# slow machine: at load 24 on two cores a step takes about 3 s.
STALL_SECONDS = 300.0
# How long a stopped trainer gets to finish its step and close its event file before it is
# terminated: `q` in the TUI must hand the terminal back within a second.
STOP_GRACE_SECONDS = 0.5

# ISA caps (ONEDNN_MAX_CPU_ISA, DNNL_MAX_CPU_ISA before oneDNN 2.x) under which oneDNN, which
# runs autocast's CPU matmuls, has no bfloat16 dot product (oneDNN "CPU Dispatcher Control",
# enum dnnl::cpu_isa: avx512_core_bf16 and the AMX ISAs are the first with one).
_ONEDNN_ISAS_WITHOUT_BF16 = frozenset(
    {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}
)


def cpu_compute_dtype(env: Mapping[str, str] = os.environ) -> ComputeDtype:
    """The demo trainer's compute dtype: bfloat16 where the CPU has bf16 instructions, float32 elsewhere.

    SpecForge trains in bfloat16, but without AVX512-BF16 or AMX oneDNN emulates it and a
    bfloat16 linear layer is about 7x slower than float32 (measured: 208 vs 31 ms for
    [256, 64] x [64, 32000] on one core with oneDNN capped at AVX2).
    """
    import torch

    cap = (env.get("ONEDNN_MAX_CPU_ISA") or env.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    if cap in _ONEDNN_ISAS_WITHOUT_BF16:
        return "float32"
    # torch's own cpuinfo probes (torch/cpu/__init__.py); private names, so looked up, not assumed
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return "bfloat16" if any(probe is not None and probe() for probe in probes) else "float32"


# ---------------------------------------------------------------------------------------------
# the trainer process


def _emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


class _Orders:
    """What the parent says on the trainer's stdin: ``run N`` lines; end of file: stop.

    Unpaced, the trainer may always step; paced, only while its step count is under the last
    ``run N``. A thread reads the lines, so the training loop never blocks on the pipe.
    """

    def __init__(self, stream: IO[str], *, paced: bool) -> None:
        self.allowance: int | None = 0 if paced else None
        self.closed = False
        self._changed = threading.Condition()
        threading.Thread(target=self._read, args=(stream,), name="demo-trainer-orders", daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            verb, _, number = line.strip().partition(" ")
            if verb == "run" and number.isdigit():
                with self._changed:
                    if self.allowance is not None:
                        self.allowance = int(number)
                    self._changed.notify_all()
        with self._changed:
            self.closed = True
            self._changed.notify_all()

    def may_step(self, done: int) -> bool:
        return self.allowance is None or done < self.allowance

    def wait(self, seconds: float) -> None:
        """Until the next order or end of file, at most ``seconds`` (the caller looks around meanwhile)."""
        with self._changed:
            self._changed.wait(seconds)


def train_live(root: Path, *, parent: int, max_steps: int, step_delay: float, paced: bool) -> int:
    """The background fine-tune: train, watch for a remapped checkpoint, reload, carry on."""
    import torch

    from triage_tui.core.formats.mapping import read_mapping
    from triage_tui.samples.spec import SampleSpec
    from triage_tui.samples.trainer import DrafterTrainer, RunData, TrainConfig, load_saved_drafter
    from triage_tui.samples.world import generate_corpus, load_target

    orders = _Orders(sys.stdin, paced=paced)
    torch.set_num_threads(1)
    spec = SampleSpec()
    layout = DemoLayout(root)
    target = load_target(layout.target, spec.world)
    mapping = read_mapping(layout.mapping)  # the mapping the trainer labels with: domain B's
    corpus = generate_corpus(spec.world, "B", TRAIN_SEQUENCES)
    config = TrainConfig(
        total_steps=max_steps,
        batch_size=BATCH_SIZE,
        learning_rate=spec.finetune_lr,
        ttt_length=spec.ttt_length,
        eval_interval=0,
        compute_dtype=cpu_compute_dtype(),
    )
    trainer = DrafterTrainer(
        layout.run, target, load_saved_drafter(layout.init), RunData(corpus, corpus, mapping), config, flush_secs=1.0
    )
    loaded: set[Path] = set()
    _emit(
        "started",
        run=str(layout.run),
        checkpoint=str(layout.init),
        pid=os.getpid(),
        compute_dtype=config.compute_dtype,
        batch_size=config.batch_size,
    )
    reason = "max-steps"
    waiting_at: int | None = None
    try:
        while trainer.step_index < max_steps:
            if orders.closed:
                reason = "stdin closed"
                break
            if os.getppid() != parent:
                reason = "parent exited"
                break
            fresh = [p for p in layout.remapped() if p not in loaded]
            if fresh:
                loaded.update(fresh)
                trainer.set_drafter(load_saved_drafter(fresh[-1]))
                _emit("reloaded", checkpoint=str(fresh[-1]), step=trainer.step_index)
            if not orders.may_step(trainer.step_index):
                if waiting_at != trainer.step_index:
                    waiting_at = trainer.step_index
                    _emit("waiting", step=trainer.step_index)
                orders.wait(0.5)  # then look again for a remapped checkpoint and the parent
                continue
            log = trainer.step()
            trainer.writer.flush()  # the watcher sees every step at once
            _emit("step", step=log.step, ploss_0=log.plosses[0], acc_0=log.accs[0])
            if step_delay:
                orders.wait(step_delay)
    finally:
        trainer.close()
        _emit("stopped", reason=reason, step=trainer.step_index)
    return 0


# ---------------------------------------------------------------------------------------------
# the parent side

T = TypeVar("T")


class TrainerProcess:
    """The trainer subprocess, what it has said so far, and the orders it is given."""

    def __init__(
        self, layout: DemoLayout, *, max_steps: int = 5_000, step_delay: float = 0.0, paced: bool = False
    ) -> None:
        self.layout = layout
        command = [
            sys.executable,
            "-m",
            "triage_tui.samples.demo",
            "train",
            str(layout.root),
            "--parent",
            str(os.getpid()),
            "--max-steps",
            str(max_steps),
            "--step-delay",
            str(step_delay),
        ]
        if paced:
            command.append("--paced")
        self.log_path = layout.root / "trainer.log"
        self._stderr = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        # What the trainer has said, kept (not consumed) so that any number of waiters can ask.
        self.started: dict | None = None
        self.step = 0  # the last step it finished
        self.waiting: int | None = None  # the step it waits at for a `run` order (paced), None while it steps
        self.reloads: list[dict] = []
        self.stopped: dict | None = None
        self.exited = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="demo-trainer-events", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if not isinstance(item, dict):
                continue
            with self._changed:
                self._take(item)
                self._changed.notify_all()
        with self._changed:
            self.exited = True
            self._changed.notify_all()

    def _take(self, item: dict) -> None:
        event = item.get("event")
        if event == "started":
            self.started = item
        elif event == "step":
            self.step, self.waiting = int(item["step"]), None
        elif event == "waiting":
            self.waiting = int(item["step"])
        elif event == "reloaded":
            self.reloads.append(item)
        elif event == "stopped":
            self.stopped = item

    def wait_until(self, predicate: Callable[[TrainerProcess], T], timeout: float) -> T | None:
        """``predicate(self)`` once it is true; None when the trainer's output ended first or ``timeout`` passed.

        ``predicate`` is asked again each time the trainer says something, not on a clock.
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = predicate(self)
                if found:
                    return found
                left = deadline - time.monotonic()
                if self.exited or left <= 0:
                    return None
                self._changed.wait(left)

    def allow(self, step: int) -> None:
        """Paced: the trainer may step up to ``step`` (a lower number holds it after its current step)."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.write(f"run {step}\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass  # it has exited; its events say so

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> int | None:
        """Close its stdin (it stops after its current step), terminate it after ``grace``; its exit status."""
        if self.proc.poll() is None:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                # a step in progress: its events are flushed after every step, nothing is lost
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        self._stderr.close()
        return self.proc.returncode


def demo_app(layout: DemoLayout, **kwargs):
    """The TUI on the live run, remap allowed (it writes beside drafter-a, inside the demo's root)."""
    from triage_tui.tui.app import TriageApp

    kwargs.setdefault("poll_interval", 0.5)
    return TriageApp([layout.run], readonly=False, **kwargs)


def run_with_tui(layout: DemoLayout, trainer: TrainerProcess) -> int:
    """Open the TUI on the live run; the trainer stops when the app quits."""
    app = demo_app(layout)
    try:
        app.run()
    finally:
        trainer.stop()
    return 0


def _loss_points(status: RunStatus) -> list[tuple[int, float]]:
    """(step, value) of the run's loss curve; none while it has no loss tag."""
    series = status.scalars.get(status.loss_tag) if status.loss_tag else None
    if series is None:
        return []
    return list(zip(series.steps.tolist(), series.values.tolist(), strict=True))


def _chance(status: RunStatus) -> ChanceLine:
    """The run's chance line as the watcher derived it (the one the TUI and `scan` show)."""
    from triage_tui.core.watch.signals.chance import ChanceLine

    return status.chance if status.chance is not None else ChanceLine(status.vocab_size)


class _Story:
    """The headless demo's clock: the trainer's steps. It is paced, so each turn of the story is
    due by a step (the flag by FLAG_BY_STEP, the recovery RECOVERY_STEPS after the reload)
    whatever the machine's speed; wall clock only bounds a hang (STALL_SECONDS, --timeout)."""

    def __init__(
        self, layout: DemoLayout, trainer: TrainerProcess, deadline: float, stamp: Callable[[str], None]
    ) -> None:
        from triage_tui.core.watch.watcher import Watcher

        self.trainer = trainer
        self.deadline = deadline
        self.stamp = stamp
        self.watcher = Watcher([layout.run], poll_interval=0.5, use_watchdog=False)
        self.said_step = 0

    def poll(self) -> RunStatus | None:
        statuses = self.watcher.poll_once()
        return statuses[0] if statuses else None

    def until(self, turn: Callable[[RunStatus], T | None], due_step: int, what: str) -> tuple[T, RunStatus] | None:
        """Poll until ``turn(status)`` holds; None (said why) once the trainer waits at ``due_step``
        and the watcher has seen that step without it, the trainer ended, or the wall-clock bounds passed."""
        self.trainer.allow(due_step)
        moved, last = time.monotonic(), None
        while True:
            status = self.poll()
            points = _loss_points(status) if status is not None else []
            seen = points[-1][0] if points else 0
            if status is not None:
                found = turn(status)
                if found is not None:
                    return found, status
                if seen >= self.said_step + 25:
                    self.said_step = seen - seen % 25
                    self.stamp(
                        f"step {seen:4d}  {status.loss_tag} {points[-1][1]:.2f}  (chance {_chance(status).label()})"
                    )
            trainer = self.trainer
            said = (trainer.step, trainer.waiting)
            if trainer.waiting is not None and trainer.waiting >= due_step and seen >= trainer.waiting:
                self.stamp(f"{what}: not by step {due_step}")
                return None
            if trainer.exited:
                self.stamp(f"{what}: the trainer stopped at step {trainer.step}; see {trainer.log_path}")
                return None
            now = time.monotonic()
            if (seen, said) != last:
                moved, last = now, (seen, said)
            if now - moved > STALL_SECONDS:
                self.stamp(f"{what}: no new step for {STALL_SECONDS:.0f} s (last: {seen})")
                return None
            if now > self.deadline:
                self.stamp(f"{what}: --timeout reached at step {seen}")
                return None
            # the next poll once the trainer says something (a step, a wait), at most half a second on
            trainer.wait_until(functools.partial(_said_more, said), 0.5)


def _said_more(said: tuple[int, int | None], trainer: TrainerProcess) -> bool:
    return (trainer.step, trainer.waiting) != said


def run_headless(
    layout: DemoLayout, trainer: TrainerProcess, *, timeout: float = 300.0, say: Callable[[str], None] = print
) -> int:
    """The same scenario without a terminal UI: watch, flag, check, remap, and see the loss fall.

    ``trainer`` must be paced: the story gives it its steps.
    """
    from triage_tui.core.diagnose.checks.replay import ReplayDetails
    from triage_tui.core.diagnose.diagnosis import diagnose
    from triage_tui.core.diagnose.evidence import gather_evidence
    from triage_tui.core.fix.remap.execute import remap_checkpoint

    started = time.monotonic()

    def stamp(message: str) -> None:
        say(f"[{time.monotonic() - started:5.1f} s] {message}")

    info = trainer.wait_until(lambda t: t.started, timeout)
    if info is None:
        stamp(f"the trainer did not start; see {trainer.log_path}")
        return 1
    stamp(f"trainer computing in {info['compute_dtype']}, {info['batch_size']} sequences a step")
    story = _Story(layout, trainer, started + timeout, stamp)

    def flagged(status: RunStatus) -> Flag | None:
        return next((f for f in status.flags if f.kind == FlagKind.LOSS_ABOVE_CHANCE), None)

    found = story.until(flagged, FLAG_BY_STEP, "no loss_above_chance flag")
    if found is None:
        return 1
    flag, status = found
    trainer.allow(trainer.step)  # hold it while the check and the remap run: the story, not the race
    stamp(f"flag {flag.kind}: {flag.message}")

    diagnosis = diagnose(gather_evidence(layout.run))  # what `triage check` and the TUI's `c` gather
    inputs = diagnosis.inputs
    top = diagnosis.hypotheses[0]
    stamp(f"check: {top.id} scores {top.score:.2f}; " + "; ".join(top.evidence[:2]))
    replay_result = diagnosis.checks.get("replay")
    replay = replay_result.details_as(ReplayDetails) if replay_result is not None else None
    if replay is not None:
        own, run_acc = replay.accuracy_checkpoint_mapping, replay.accuracy_run_mapping
        if run_acc is not None:
            stamp(
                f"replay: drafter-a predicts {own:.1%} of the target's next tokens under its own mapping, "
                f"{run_acc:.1%} under the run's"
            )
    if top.id != "vocab_mapping_mismatch":
        stamp("the check did not rank the vocab-mapping mismatch first")
        return 1

    if inputs.checkpoint is None or inputs.mapping is None:
        stamp("the run names no checkpoint and mapping to remap")
        return 1
    report = remap_checkpoint(inputs.checkpoint, inputs.mapping, target=inputs.target, data=inputs.data)
    remapped_at = time.monotonic()
    accuracy = ""
    if report.accuracy_before is not None and report.accuracy_after is not None:
        accuracy = f"; replay under the run's mapping {report.accuracy_before:.1%} -> {report.accuracy_after:.1%}"
    stamp(
        f"remap: wrote {report.output.name} ({report.rows_copied} rows copied, {report.rows_initialized} "
        f"initialised from {report.init}, verified={report.verified}{accuracy})"
    )

    reloaded = trainer.wait_until(lambda t: t.reloads[-1] if t.reloads else None, max(1.0, STALL_SECONDS))
    if reloaded is None:
        stamp("the trainer did not reload the remapped checkpoint")
        return 1
    reload_step = int(reloaded["step"])
    stamp(f"trainer reloaded from {Path(reloaded['checkpoint']).name} at step {reload_step}")
    due = reload_step + RECOVERY_STEPS
    held = story.poll() or status
    above = [v for s, v in _loss_points(held) if s <= reload_step]

    def recovered(status: RunStatus) -> tuple[tuple[int, float], list[tuple[int, float]]] | None:
        after = [(s, v) for s, v in _loss_points(status) if reload_step < s <= due]
        chance = _chance(status).value
        still_flagged = any(f.kind in (FlagKind.LOSS_ABOVE_CHANCE, FlagKind.LOSS_AT_CHANCE) for f in status.flags)
        below = [point for point in after if point[1] < chance]
        if below and not still_flagged and len(after) >= 5 and sum(v for _, v in after[-5:]) / 5 < chance:
            return below[0], after
        return None

    found_after = story.until(recovered, due, "the loss did not fall under the chance line")
    if found_after is None:
        return 1
    ((step, value), after), status = found_after
    chance = _chance(status)
    stamp(
        f"step {step}: {status.loss_tag} {value:.2f}, under the chance line {chance.label()}, "
        f"{time.monotonic() - remapped_at:.0f} s after the remap; loss flag cleared"
    )
    mean_before = sum(above[-20:]) / len(above[-20:])
    mean_after = sum(v for _, v in after[-5:]) / 5
    say(
        f"done: {status.loss_tag} averaged {mean_before:.2f} over the last {len(above[-20:])} steps before "
        f"the remap (above the chance line {chance.label()}) and {mean_after:.2f} over the last 5 after it."
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m triage_tui.samples.demo")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="the demo's background trainer")
    train.add_argument("root", type=Path)
    train.add_argument("--parent", type=int, required=True, help="exit when this process is no longer the parent")
    train.add_argument("--max-steps", type=int, default=5_000)
    train.add_argument("--step-delay", type=float, default=0.0)
    train.add_argument("--paced", action="store_true", help="step only as far as the `run N` orders on stdin allow")
    args = parser.parse_args(argv)
    return train_live(
        args.root, parent=args.parent, max_steps=args.max_steps, step_delay=args.step_delay, paced=args.paced
    )


def exit_now(status: int) -> NoReturn:
    """Exit without the interpreter's teardown, which takes seconds once torch is imported (measured at
    load 15 on two cores: 2.6 s for `python -c "import torch"` to exit, 0.13 s with os._exit).
    Only for a process whose work is done: files closed, children stopped, output flushed here."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    exit_now(main())  # the trainer has closed its event file; its parent waits for it to go
