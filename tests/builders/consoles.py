"""Training consoles as the trainers and launchers write them, and SpecForge's output directory.

Each console is written by the owner's code into a file the way a user's ``> train.log 2>&1`` does
(one open file for stdout and stderr; the trainer runs in a child process where buffering matters):

- HF Trainer (``hf_trainer_console``): transformers' ``Trainer`` with ``disable_tqdm=False`` on a tiny
  ``LlamaForCausalLM``, in a child process, with stdout block-buffered (Python's default for a file)
  or unbuffered (``PYTHONUNBUFFERED=1``, as ``python -u`` and many SLURM scripts run it);
- speculators 0.9.0 (``speculators_console``): its ``setup_root_logger`` and
  ``setup_metric_logger`` (rich's ``RichHandler`` at the 80 columns a file gets), logging the dicts
  ``speculators/train/trainer.py`` logs, in a child process;
- SpecForge: its output directory with ``train.log`` (``trainers.specforge_train_output``: its own
  ``TrainerController``); ``specforge_lines``: what its console ``_logger`` prints;
- torchrun's ``--tee`` copy (``torchrun_tee``): ``tail_logfile`` of
  ``torch/distributed/elastic/multiprocessing/tail_log.py``, the function each of ``TailLog``'s
  threads runs, prefixing every line ``[default<rank>]:``; and torch's own ``[rank0]:`` on a worker's
  traceback (``rank0_traceback_console``: ``init_process_group`` installs the hook).
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path

from builders.cache import builders_key, built_once
from builders.trainers import CONSOLE_DRAFT_VOCAB, SPECFORGE_TRAIN_RUN_ID, SpecForgeOutput, specforge_train_output

DRAFT_VOCAB = CONSOLE_DRAFT_VOCAB  # ln 32 000 = 10.37 is the chance line
# Built once per machine and version of the builders and writers (builders.cache): the trainers'
# children take a minute or more each on a loaded machine. The directory is named by that version,
# so two checkouts whose builders differ never build over the runs the other's tests are reading.
CONSOLE_RUNS = Path("/tmp/triage-tui-consoles")


def _child_env(*, unbuffered: bool, colour: bool) -> dict[str, str]:
    drop = ("PYTHONUNBUFFERED", "COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TERM")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["TOKENIZERS_PARALLELISM"] = "false"
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    if colour:
        env["FORCE_COLOR"] = "1"
    return env


def _run_child(script: str, log: Path, cwd: Path, *, unbuffered: bool, colour: bool = False, check: bool = True) -> int:
    """``python train.py > log 2>&1`` in ``cwd``, ``train.py`` holding ``script``."""
    (cwd / "train.py").write_text(textwrap.dedent(script))
    with open(log, "wb") as out:
        done = subprocess.run(
            [sys.executable, "train.py"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=_child_env(unbuffered=unbuffered, colour=colour),
            timeout=900,
        )
    if check and done.returncode != 0:
        raise RuntimeError(f"the child writing {log} failed ({done.returncode}):\n{log.read_text()[-3000:]}")
    return done.returncode


# --------------------------------------------------------------------------- HF Trainer


@dataclass(frozen=True)
class HFConsoleRun:
    output: Path  # the Trainer's output_dir: checkpoint-N/ with trainer_state.json
    log: Path  # its console, stdout and stderr
    max_steps: int
    logging_steps: int
    save_steps: int
    eval_steps: int

    @property
    def newest_trainer_state(self) -> Path:
        """The ``trainer_state.json`` of the ``checkpoint-N`` with the largest N (transformers'
        ``get_last_checkpoint``): the trainer's whole logged history up to its last save."""
        newest = max(self.output.glob("checkpoint-*"), key=lambda path: int(path.name.removeprefix("checkpoint-")))
        return newest / "trainer_state.json"


HF_SCHEDULE = (12, 2, 5, 6)  # max_steps, logging_steps, save_steps, eval_steps


def hf_trainer_console(root: Path, *, unbuffered: bool) -> HFConsoleRun:
    """A tiny HF Trainer run with its progress bar on, its console in ``<root>/train.log``."""
    max_steps, logging_steps, save_steps, eval_steps = HF_SCHEDULE
    root.mkdir(parents=True, exist_ok=True)
    output = root / "out"
    script = f"""
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_attention_heads=2,
            num_key_value_heads=1, num_hidden_layers=1, vocab_size=256, max_position_embeddings=32))
        g = torch.Generator().manual_seed(0)
        data = [{{"input_ids": x, "labels": x}} for x in torch.randint(0, 256, (16, 16), generator=g)]
        args = TrainingArguments(output_dir={str(output)!r}, max_steps={max_steps}, save_steps={save_steps},
            logging_steps={logging_steps}, eval_strategy="steps", eval_steps={eval_steps},
            per_device_train_batch_size=4, per_device_eval_batch_size=4, report_to=[], use_cpu=True,
            disable_tqdm=False, dataloader_num_workers=0)
        Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:4]).train()
    """
    log = root / "train.log"
    _run_child(script, log, root, unbuffered=unbuffered)
    return HFConsoleRun(output, log, max_steps, logging_steps, save_steps, eval_steps)


# --------------------------------------------------------------------------- speculators


def speculators_console(root: Path, *, steps: int = 6, nan_at: int = 3, coloured: bool = False) -> Path:
    """speculators 0.9.0's console (``<root>/train.log``): its loggers set up as ``train/cli.py``
    ``main`` does, then the training and validation dicts ``Trainer.train_epoch``/``val_epoch`` log
    (per-position keys of ``models/eagle3``: ``loss_{k}``, ``full_acc_{k}``, ``cond_acc_{k}``), a
    NaN at step ``nan_at``, a learning rate below 0.001 (printed ``{:.2e}``). ``coloured``: rich
    colours its records as on a terminal (``FORCE_COLOR=1``)."""
    root.mkdir(parents=True, exist_ok=True)
    script = f"""
        import logging, math
        from speculators.train.logger import setup_metric_logger, setup_root_logger
        setup_root_logger()
        setup_metric_logger(loggers="", run_name="k25-ft", output_dir="logs")
        root_logger = logging.getLogger("speculators")
        metric_logger = logging.getLogger("speculators.metrics")
        root_logger.info("Starting training")
        for step in range({steps}):
            loss = [math.log({DRAFT_VOCAB}) - step / 10 - k / 100 for k in range(3)]
            train = {{"loss": sum(loss)}}
            for k in range(3):
                train[f"loss_{{k}}"] = float("nan") if step == {nan_at} and k == 0 else loss[k]
                train[f"full_acc_{{k}}"] = step / 1000 / (k + 1)
                train[f"cond_acc_{{k}}"] = step / 100
            metric_logger.info({{"train": train, "profile": None, "epoch": 0, "lr": 3e-4, "global_step": step}},
                               extra={{"step": step}})
        metric_logger.info({{"val": {{"loss_epoch": 29.5, "full_acc_0_epoch": 0.02}}, "epoch": 0}},
                           extra={{"step": {steps}}})
        root_logger.info("Saving checkpoint to checkpoints/0")
    """
    log = root / "train.log"
    _run_child(script, log, root, unbuffered=False, colour=coloured)
    return log


@dataclass(frozen=True)
class ConsoleRuns:
    """Every console the tests read, written once by the owners' code (``console_runs``)."""

    hf_buffered: HFConsoleRun  # `> train.log 2>&1`: stdout block-buffered
    hf_unbuffered: HFConsoleRun  # the same under PYTHONUNBUFFERED=1
    speculators: Path
    speculators_coloured: Path  # rich told to colour (FORCE_COLOR=1): ANSI escapes in the file
    specforge: SpecForgeOutput


def console_runs() -> ConsoleRuns:
    """The consoles of ``ConsoleRuns``, built at CONSOLE_RUNS unless a build by these builders is there."""
    key = builders_key()
    root = built_once(CONSOLE_RUNS.with_name(f"{CONSOLE_RUNS.name}-{key[:16]}"), _build_console_runs, key)
    return _console_runs(root)


def _build_console_runs(root: Path) -> None:
    hf_trainer_console(root / "hf-buffered", unbuffered=False)
    hf_trainer_console(root / "hf-unbuffered", unbuffered=True)
    speculators_console(root / "speculators")
    speculators_console(root / "speculators-coloured", coloured=True)
    specforge_train_output(root / "specforge")


def _console_runs(root: Path) -> ConsoleRuns:
    def hf(name: str) -> HFConsoleRun:
        return HFConsoleRun(root / name / "out", root / name / "train.log", *HF_SCHEDULE)

    return ConsoleRuns(
        hf("hf-buffered"),
        hf("hf-unbuffered"),
        root / "speculators" / "train.log",
        root / "speculators-coloured" / "train.log",
        SpecForgeOutput.at(root / "specforge" / "output", SPECFORGE_TRAIN_RUN_ID),
    )


def specforge_lines(metrics_by_step: list[tuple[int, dict]]) -> str:
    """What SpecForge's console ``_logger`` prints for each (step, metrics), captured."""
    import io

    from specforge.training.assembly import _logger

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for step, metrics in metrics_by_step:
            _logger(metrics, step)
    return out.getvalue()


def specforge_meter_console(log: Path, steps: int, *, colour: str | None = None) -> Path:
    """SpecForge's console on a terminal (``script``, a pty under SLURM): its ``_logger`` prints each
    step and its ``TrainerController``'s tqdm bar (built by its own ``_make_progress_bar``, shown only
    when stderr is a terminal) is redrawn after each step, in a child whose stdout and stderr are one
    pseudo-terminal of 120 columns; the terminal's bytes are the log. The bar is redrawn at every
    update (``mininterval`` 0; SpecForge's 1 s redraws once a second, the same interleaving, less
    often), optionally in ``colour`` (tqdm's own ANSI escapes)."""
    import fcntl
    import pty
    import struct
    import termios

    script = f"""
        import types
        from specforge.training.assembly import _logger
        from specforge.training.controller import TrainerController
        controller = types.SimpleNamespace(max_steps={steps}, global_step=0, total_steps={steps})
        bar = TrainerController._make_progress_bar(controller)
        assert bar is not None, "stderr is no terminal"
        bar.mininterval = 0.0
        bar.colour = {colour!r}
        for step in range(1, {steps} + 1):
            _logger({{"loss": 10.5 - step / 1000, "acc": step / {steps}}}, step)
            bar.update(1)
        bar.close()
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    (log.parent / "train.py").write_text(textwrap.dedent(script))
    main, child_side = pty.openpty()
    fcntl.ioctl(child_side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    child = subprocess.Popen(
        [sys.executable, "train.py"],
        stdin=subprocess.DEVNULL,
        stdout=child_side,
        stderr=child_side,
        cwd=log.parent,
        env=_child_env(unbuffered=False, colour=False),
    )
    os.close(child_side)
    written = bytearray()
    with contextlib.suppress(OSError):  # EIO: the child's side closed
        while chunk := os.read(main, 1 << 16):
            written += chunk
    os.close(main)
    if child.wait(timeout=300) != 0:
        raise RuntimeError(f"the SpecForge child failed:\n{bytes(written[-3000:]).decode(errors='replace')}")
    log.write_bytes(bytes(written))
    return log


# --------------------------------------------------------------------------- launchers


def torchrun_tee(log: Path, rank_files: list[tuple[int, Path]]) -> Path:
    """torchrun's console copy of its workers' output: each worker file's lines prefixed
    ``[default<rank>]:`` by ``tail_logfile`` (the function ``TailLog`` runs per worker), the files
    copied one after the other in the order given."""
    from torch.distributed.elastic.multiprocessing.tail_log import tail_logfile

    finished = threading.Event()
    finished.set()  # every worker has exited: each file is copied to its end
    with open(log, "w") as dst:
        for rank, path in rank_files:
            tail_logfile(f"[default{rank}]:", str(path), dst, finished, 0.01, lambda _line: True)
    return log


def rank0_traceback_console(root: Path, lines: str) -> Path:
    """A worker's console (``<root>/worker.log``) that prints ``lines`` and then dies: after
    ``init_process_group`` torch prefixes its traceback ``[rank0]:``."""
    root.mkdir(parents=True, exist_ok=True)
    store = root / "store"
    script = f"""
        import sys
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method={("file://" + str(store))!r}, rank=0, world_size=1)
        sys.stdout.write({lines!r})
        sys.stdout.flush()
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    """
    log = root / "worker.log"
    _run_child(script, log, root, unbuffered=False, check=False)
    return log


def chance(vocab: int = DRAFT_VOCAB) -> float:
    return math.log(vocab)
