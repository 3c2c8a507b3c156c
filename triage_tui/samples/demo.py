"""`triage demo`: the story of docs/case.md, live, and its fix.

A background process fine-tunes ``drafter-a`` (trained with domain A's vocab mapping) on
domain B with a mapping regenerated from domain B, the bug of SpecForge PR #534: the loss
sits above ln 32000. It writes TensorBoard events every step. When a remapped checkpoint
appears beside ``drafter-a`` (``triage remap`` writes ``<checkpoint>-remapped-<sha8>/``), the
trainer reloads from it and carries on, and the loss falls under the chance line.

The trainer is ``python -m triage_tui.samples.demo train ROOT``; it prints one JSON object
per line (``started``, ``step`` every few steps, ``reloaded``, ``stopped``) and stops when its
parent dies, when ``ROOT/STOP`` appears, or after ``--max-steps``.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triage_tui.core.run_status import RunStatus

DEMO_RUN = "vocab-mismatch-live"
STOP_FILE = "STOP"
REPO_SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"
TRAIN_SEQUENCES = 4_000  # the trainer cycles through these; more than any demo needs
STEP_EVENT_EVERY = 5
# The story's budgets, in trainer steps, not seconds (a busy machine runs fewer steps a second,
# never a different story): the flag comes at about step 100, the loss falls under ln V within
# a few steps of the reload. Four times that is room for noise, not for a broken story.
FLAG_BY_STEP = 400
RECOVERY_STEPS = 200
# No new step for this long (wall clock) is a stuck trainer or watcher, not a slow one: at load
# 24 on two cores a step takes about 3 s.
STALL_SECONDS = 300.0


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


def _samples_match(samples: Path, digest: str) -> bool:
    try:
        recorded = json.loads((samples / "GENERATED.json").read_text())
    except (OSError, ValueError):
        return False
    return (
        recorded.get("spec_digest") == digest
        and (samples / "_target" / "model.safetensors").is_file()
        and (samples / "_drafters" / "drafter-a" / "model.safetensors").is_file()
    )


def prepare_demo(
    root: Path, *, samples: Path | None = REPO_SAMPLES, progress: Callable[[str], None] = lambda message: None
) -> DemoLayout:
    """Lay out the demo under ``root``: target and drafter-a (copied from sample_runs/ or built), the run's files."""
    import torch

    from triage_tui.core.formats.mapping import write_mapping_pt
    from triage_tui.samples.generate import (
        SampleSpec,
        build_world,
        mapping_cache_name,
        pretrain_drafter,
        write_dumps,
        write_manifest,
    )
    from triage_tui.samples.world import save_target

    torch.set_num_threads(1)
    spec = SampleSpec()
    layout = DemoLayout(root)
    root.mkdir(parents=True, exist_ok=True)
    world = build_world(spec)
    if samples is not None and _samples_match(samples, spec.digest()):
        progress(f"copying the target and drafter-a from {samples}")
        shutil.copytree(samples / "_target", layout.target, dirs_exist_ok=True)
        shutil.copytree(samples / "_drafters" / "drafter-a", layout.init, dirs_exist_ok=True)
    else:
        progress(
            f"no matching sample_runs/ to copy from: building the target and pretraining drafter-a "
            f"({spec.pretrain_steps} steps, about a minute)"
        )
        save_target(world.target, layout.target)
        pretrain_drafter(world, root, "drafter-a")
    cache = Path("cache/vocab_mapping") / mapping_cache_name("domain-b.jsonl", spec, "../_target")
    write_mapping_pt(world.mapping_b, layout.run / cache)
    write_dumps(world, world.data_b, layout.run, spec.dumps_per_run)
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


# ---------------------------------------------------------------------------------------------
# the trainer process


def _emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def train_live(root: Path, *, parent: int, max_steps: int, step_delay: float) -> int:
    """The background fine-tune: train, watch for a remapped checkpoint, reload, carry on."""
    import torch

    from triage_tui.core.formats.mapping import read_mapping
    from triage_tui.samples.generate import SampleSpec
    from triage_tui.samples.trainer import DrafterTrainer, RunData, TrainConfig, load_saved_drafter
    from triage_tui.samples.world import generate_corpus, load_target

    torch.set_num_threads(1)
    spec = SampleSpec()
    layout = DemoLayout(root)
    target = load_target(layout.target, spec.world)
    mapping = read_mapping(layout.mapping)  # the mapping the trainer labels with: domain B's
    corpus = generate_corpus(spec.world, "B", TRAIN_SEQUENCES)
    config = TrainConfig(
        total_steps=max_steps,
        batch_size=spec.batch_size,
        learning_rate=spec.finetune_lr,
        ttt_length=spec.ttt_length,
        eval_interval=0,
    )
    trainer = DrafterTrainer(
        layout.run, target, load_saved_drafter(layout.init), RunData(corpus, corpus, mapping), config, flush_secs=1.0
    )
    loaded: set[Path] = set()
    _emit("started", run=str(layout.run), checkpoint=str(layout.init), pid=os.getpid())
    reason = "max-steps"
    try:
        while trainer.step_index < max_steps:
            if os.getppid() != parent:
                reason = "parent exited"
                break
            if (root / STOP_FILE).exists():
                reason = "stop file"
                break
            fresh = [p for p in layout.remapped() if p not in loaded]
            if fresh:
                loaded.update(fresh)
                trainer.set_drafter(load_saved_drafter(fresh[-1]))
                _emit("reloaded", checkpoint=str(fresh[-1]), step=trainer.step_index)
            log = trainer.step()
            trainer.writer.flush()  # the watcher sees every step at once
            if log.step % STEP_EVENT_EVERY == 0:
                _emit("step", step=log.step, ploss_0=log.plosses[0], acc_0=log.accs[0])
            if step_delay:
                time.sleep(step_delay)
    finally:
        trainer.close()
        _emit("stopped", reason=reason, step=trainer.step_index)
    return 0


# ---------------------------------------------------------------------------------------------
# the parent side


class TrainerProcess:
    """The trainer subprocess and the events it prints."""

    def __init__(self, layout: DemoLayout, *, max_steps: int = 5_000, step_delay: float = 0.0) -> None:
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
        self.log_path = layout.root / "trainer.log"
        self._stderr = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        self.events: queue.Queue[dict] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="demo-trainer-events", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except ValueError:
                continue

    def wait_for(self, event: str, timeout: float) -> dict | None:
        """The next event of this kind (others are skipped), or None after ``timeout`` or if the trainer died."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                item = self.events.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None and self.events.empty():
                    return None
                continue
            if item.get("event") == event:
                return item
        return None

    def stop(self, timeout: float = 10.0) -> int | None:
        """Ask it to stop (STOP file), then terminate, then kill; returns its exit status."""
        if self.proc.poll() is None:
            (self.layout.root / STOP_FILE).touch()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
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


def _latest(status: RunStatus, tag: str | None) -> tuple[int, float] | None:
    series = status.scalars.get(tag) if tag else None
    last = series.last() if series is not None else None
    return (int(last[0]), float(last[2])) if last is not None else None


def _loss_points(status: RunStatus) -> list[tuple[int, float]]:
    """(step, value) of the run's loss curve; none while it has no loss tag."""
    series = status.scalars.get(status.loss_tag) if status.loss_tag else None
    if series is None:
        return []
    return list(zip(series.steps.tolist(), series.values.tolist(), strict=True))


def run_headless(
    layout: DemoLayout, trainer: TrainerProcess, *, timeout: float = 300.0, say: Callable[[str], None] = print
) -> int:
    """The same scenario without a terminal UI: watch, flag, check, remap, and see the loss fall."""
    from triage_tui.core.check_inputs import resolve_inputs
    from triage_tui.core.checks.replay import ReplayDetails
    from triage_tui.core.diagnose import diagnose
    from triage_tui.core.remap.execute import remap_checkpoint
    from triage_tui.core.signals.chance import chance_loss
    from triage_tui.core.watch import Watcher

    started = time.monotonic()
    deadline = started + timeout

    def stamp(message: str) -> None:
        say(f"[{time.monotonic() - started:5.1f} s] {message}")

    if trainer.wait_for("started", timeout=max(1.0, deadline - time.monotonic())) is None:
        stamp(f"the trainer did not start; see {trainer.log_path}")
        return 1
    watcher = Watcher([layout.run], poll_interval=0.5, use_watchdog=False)
    ln_v = chance_loss(32_000)
    flag = status = None
    last_said = 0.0
    progress = _Progress()
    while flag is None:
        statuses = watcher.poll_once()
        status = statuses[0] if statuses else None
        point = _latest(status, status.loss_tag) if status is not None else None
        if status is not None:
            flag = next((f for f in status.flags if f.kind == "loss_above_chance"), None)
            if point and time.monotonic() - last_said > 10:
                last_said = time.monotonic()
                stamp(f"step {point[0]:4d}  {status.loss_tag} {point[1]:.2f}  (ln 32000 = {ln_v:.2f})")
        if flag is not None:
            break
        why = progress.stop_waiting(point[0] if point else None, FLAG_BY_STEP, deadline)
        if why:
            stamp(f"no loss_above_chance flag: {why}")
            return 1
        time.sleep(0.5)
    if status is None:
        return 1
    stamp(f"flag {flag.kind}: {flag.message}")

    inputs = resolve_inputs(layout.run)
    diagnosis = diagnose(inputs, device="auto", flags=status.flags, metrics=status.metrics, start=status.start)
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

    reloaded = trainer.wait_for("reloaded", timeout=max(1.0, deadline - time.monotonic()))
    if reloaded is None:
        stamp("the trainer did not reload the remapped checkpoint")
        return 1
    reload_step = int(reloaded["step"])
    stamp(f"trainer reloaded from {Path(reloaded['checkpoint']).name} at step {reload_step}")

    above = [v for s, v in _loss_points(status) if s <= reload_step]
    progress = _Progress()
    while True:
        statuses = watcher.poll_once()
        status = statuses[0]
        after = [(s, v) for s, v in _loss_points(status) if s > reload_step]
        still_flagged = any(f.kind in ("loss_above_chance", "loss_at_chance") for f in status.flags)
        below = [point for point in after if point[1] < ln_v]
        if below and not still_flagged and len(after) >= 5 and sum(v for _, v in after[-5:]) / 5 < ln_v:
            step, value = below[0]
            stamp(
                f"step {step}: {status.loss_tag} {value:.2f}, under ln 32000 = {ln_v:.2f}, "
                f"{time.monotonic() - remapped_at:.0f} s after the remap; loss flag cleared"
            )
            mean_before = sum(above[-20:]) / len(above[-20:])
            mean_after = sum(v for _, v in after[-5:]) / 5
            say(
                f"done: {status.loss_tag} averaged {mean_before:.2f} over the last {len(above[-20:])} steps before "
                f"the remap (above ln 32000 = {ln_v:.2f}) and {mean_after:.2f} over the last 5 after it."
            )
            return 0
        point = _latest(status, status.loss_tag)
        why = progress.stop_waiting(point[0] if point else None, reload_step + RECOVERY_STEPS, deadline)
        if why:
            stamp(f"the loss did not fall under the chance line: {why}")
            return 1
        time.sleep(0.5)


class _Progress:
    """When to stop waiting for the story's next turn: past its step budget, a stall, or --timeout."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.moved = time.monotonic()

    def stop_waiting(self, step: int | None, by_step: int, deadline: float) -> str | None:
        """Why to give up now (the trainer is at ``step``, the turn was due by ``by_step``); None: wait on."""
        now = time.monotonic()
        if step != self.step:
            self.step, self.moved = step, now
        if step is not None and step > by_step:
            return f"the trainer is at step {step}, past step {by_step}"
        if now - self.moved > STALL_SECONDS:
            return f"no new step for {STALL_SECONDS:.0f} s (last: {step})"
        if now > deadline:
            return "--timeout reached"
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m triage_tui.samples.demo")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="the demo's background trainer")
    train.add_argument("root", type=Path)
    train.add_argument("--parent", type=int, required=True, help="exit when this process is no longer the parent")
    train.add_argument("--max-steps", type=int, default=5_000)
    train.add_argument("--step-delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    return train_live(args.root, parent=args.parent, max_steps=args.max_steps, step_delay=args.step_delay)


if __name__ == "__main__":
    sys.exit(main())
