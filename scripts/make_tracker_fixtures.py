"""Write tests/fixtures/trackers/: runs logged by the trackers' own code, one at chance and one healthy each.

Run it with a Python that has the trackers installed (they are not in the test extra: heavy, and
the suite reads only what they wrote), torch importable beside them:

    python3 -m venv /tmp/trk-venv
    /tmp/trk-venv/bin/pip install mlflow trackio omegaconf
    /tmp/trk-venv/bin/pip install --no-deps lightning lightning-utilities torchmetrics torchtune torchao nemo_automodel
    /tmp/trk-venv/bin/python scripts/make_tracker_fixtures.py
    /tmp/trk-venv/bin/python scripts/make_tracker_fixtures.py --unfinished-only  # those stores alone

A tiny LM (a 32 000-token embedding and head, as a drafter's draft vocab) is trained on the CPU
twice: on labels drawn uniformly at random (nothing to learn: its loss stays at ln 32 000 ≈ 10.37)
and on one repeated sequence (its loss falls). Each tracker then logs both runs' values through its
own logging API: MLflow (a SQLite store and a file store, and two more of runs that did not finish:
one ended KILLED, one left RUNNING by a writer killed with SIGKILL), trackio, Lightning's CSVLogger,
torchtune's DiskLogger and NeMo Automodel's MetricLogger. nanoGPT and nanochat are scripts, not
packages: their consoles are written with their print statements' format strings. ``expected.json``
holds every value as logged, the oracle of tests/test_trackers.py; ``VERSIONS`` names the writers.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import torch

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "trackers"
VOCAB = 32_000
STEPS = 40
EVAL_EVERY = 10
WALL0 = 1_760_000_000.0
UNFINISHED_STEPS = 10  # the unfinished runs log the healthy run's first steps, then stop


def train(seed: int, learnable: bool) -> list[tuple[int, float]]:
    """(step, loss) of a tiny LM trained for STEPS steps; ``learnable`` False: random labels."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    head = torch.nn.Linear(16, VOCAB)
    torch.nn.init.zeros_(head.weight)  # every logit equal at step 0: loss ln V exactly
    torch.nn.init.zeros_(head.bias)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 16), head)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05 if learnable else 1e-4)
    fixed = torch.randint(0, VOCAB, (65,), generator=gen)
    losses = []
    for step in range(STEPS):
        sequence = fixed if learnable else torch.randint(0, VOCAB, (65,), generator=gen)
        logits = model(sequence[:-1])
        loss = torch.nn.functional.cross_entropy(logits, sequence[1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append((step, float(loss.item())))
    return losses


def load_module(package: str, module: str) -> types.ModuleType:
    """``package.module`` imported without running the package's ``__init__`` (torchtune's and NeMo
    Automodel's import their whole training stacks, which need other torch releases than this one):
    the module itself is the trackers' own code, as shipped."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, package
    root = Path(spec.submodule_search_locations[0])
    parts = module.split(".")
    for depth in range(len(parts)):
        name = ".".join([package, *parts[:depth]])
        if name not in sys.modules:
            stub = types.ModuleType(name)
            stub.__path__ = [str(root.joinpath(*parts[:depth]))]
            sys.modules[name] = stub
    return importlib.import_module(f"{package}.{module}")


def mlflow_runs(runs: dict[str, dict[str, list[tuple[int, float]]]], uri: str) -> None:
    import mlflow

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("tiny-lm")
    client = mlflow.MlflowClient()
    for name, series in runs.items():
        with mlflow.start_run(run_name=name) as run:
            for tag, points in series.items():
                for step, value in points:
                    mlflow.log_metric(tag, value, step=step, timestamp=int((WALL0 + step) * 1000))
        if name == "chance":
            client.set_terminated(run.info.run_id, status="FAILED")


def log_unfinished(uri: str, name: str) -> None:
    import mlflow

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("tiny-lm")
    mlflow.start_run(run_name=name)
    for step, value in train(1, learnable=True)[:UNFINISHED_STEPS]:
        mlflow.log_metric("train/loss", value, step=step, timestamp=int((WALL0 + step) * 1000))


def mlflow_unfinished_runs(uri: str) -> None:
    """Two runs that did not finish, in a store of their own: ``killed`` ended by
    ``mlflow.end_run(status="KILLED")`` (as a cancelled MLflow Project's), ``running`` left RUNNING by
    a writer killed with SIGKILL (as the OOM killer's): MLflow's atexit hook ends the run of a process
    that exits any other way, so only such a kill leaves one RUNNING."""
    import mlflow

    log_unfinished(uri, "killed")
    mlflow.end_run(status="KILLED")
    child = subprocess.run([sys.executable, __file__, "--left-running", uri], check=False)
    assert child.returncode == -signal.SIGKILL, child.returncode


def write_mlflow_unfinished() -> None:
    shutil.rmtree(OUT / "mlflow-sqlite-unfinished", ignore_errors=True)
    shutil.rmtree(OUT / "mlflow-files-unfinished", ignore_errors=True)
    (OUT / "mlflow-sqlite-unfinished").mkdir()
    mlflow_unfinished_runs(f"sqlite:///{OUT / 'mlflow-sqlite-unfinished' / 'mlflow.db'}")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # 3.x refuses the file store unless asked: old runs have one
    mlflow_unfinished_runs((OUT / "mlflow-files-unfinished" / "mlruns").as_uri())


def main() -> None:
    if sys.argv[1:2] == ["--left-running"]:  # the child of mlflow_unfinished_runs: log, then die
        log_unfinished(sys.argv[2], "running")
        os.kill(os.getpid(), signal.SIGKILL)
    if sys.argv[1:] == ["--unfinished-only"]:  # every other fixture left as it is
        import mlflow

        recorded = (OUT / "VERSIONS").read_text()
        assert f"mlflow=={mlflow.__version__}\n" in recorded, f"VERSIONS names another MLflow than {mlflow.__version__}"
        write_mlflow_unfinished()
        return
    chance, healthy = train(0, learnable=False), train(1, learnable=True)
    runs = {
        name: {
            "train/loss": losses,
            "val/loss": [(s, v) for s, v in losses if s % EVAL_EVERY == EVAL_EVERY - 1],
            "lr": [(s, 1e-4 * (s + 1) / STEPS) for s, _ in losses],
        }
        for name, losses in (("chance", chance), ("healthy", healthy))
    }
    runs["chance"]["grad_norm"] = [(s, math.nan if s == 5 else 1.0 + s / 100) for s, _ in chance]
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    versions = {"torch": torch.__version__, "numpy": np.__version__, "python": sys.version.split()[0]}

    import mlflow

    (OUT / "mlflow-sqlite").mkdir()
    mlflow_runs(runs, f"sqlite:///{OUT / 'mlflow-sqlite' / 'mlflow.db'}")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # 3.x refuses the file store unless asked: old runs have one
    mlflow_runs(runs, (OUT / "mlflow-files" / "mlruns").as_uri())
    write_mlflow_unfinished()
    versions["mlflow"] = mlflow.__version__

    os.environ["TRACKIO_DIR"] = str(OUT / "trackio")
    import trackio

    for name, series in runs.items():
        trackio.init(project="tiny-lm", name=name, embed=False)
        for step in range(STEPS):
            trackio.log({tag: v for tag, points in series.items() for s, v in points if s == step}, step=step)
        trackio.finish()
    versions["trackio"] = trackio.__version__

    import lightning
    from lightning.pytorch.loggers import CSVLogger

    for name, series in runs.items():
        logger = CSVLogger(str(OUT / "lightning"), name=f"tiny-lm-{name}")
        for step in range(STEPS):
            logged = {tag: v for tag, points in series.items() for s, v in points if s == step and tag != "val/loss"}
            logger.log_metrics({**logged, "epoch": 0}, step=step)
            if step % EVAL_EVERY == EVAL_EVERY - 1:
                logger.save()  # val/loss first appears after this save: the file is rewritten wider
                if step == EVAL_EVERY - 1:  # the file as a reader finds it before that rewrite
                    before = Path(logger.log_dir) / "metrics.csv"
                    shutil.copyfile(before, OUT / "lightning" / f"{name}-before-rewrite.csv")
                logger.log_metrics({"val/loss": dict(series["val/loss"])[step], "epoch": 0}, step=step)
        logger.save()
    versions["lightning"] = lightning.__version__

    metric_logging = load_module("torchtune", "training.metric_logging")
    for name, series in runs.items():
        disk = metric_logging.DiskLogger(str(OUT / "torchtune" / name), filename=f"log_{int(WALL0)}.txt")
        for step in range(STEPS):
            payload = {"loss": series["train/loss"][step][1]}
            disk.log_dict({**payload, "lr": series["lr"][step][1], "tokens_per_second_per_gpu": 1234.5}, step + 1)
        disk.close()
    versions["torchtune"] = importlib.metadata.version("torchtune")

    metric_logger = load_module("nemo_automodel", "components.loggers.metric_logger")
    for name, series in runs.items():
        directory = OUT / "nemo-automodel" / name / "checkpoints"
        with metric_logger.MetricLogger(str(directory / "training.jsonl")) as train_log:
            for step in range(STEPS):
                metrics = {"loss": series["train/loss"][step][1], "lr": series["lr"][step][1]}
                train_log.log(metric_logger.MetricsSample(step=step, epoch=0, metrics=metrics))
        with metric_logger.MetricLogger(str(directory / "validation.jsonl")) as val_log:
            for step, value in series["val/loss"]:
                val_log.log(metric_logger.MetricsSample(step=step, epoch=0, metrics={"val_loss": value}))
    versions["nemo_automodel"] = importlib.metadata.version("nemo_automodel")

    for name, series in runs.items():
        # nanoGPT train.py's two prints (karpathy/nanoGPT, master), then nanochat base_train.py's.
        lines = []
        for step, loss in series["train/loss"]:
            if step % EVAL_EVERY == 0:
                val = next(v for s, v in series["val/loss"] if s >= step)
                lines.append(f"step {step}: train loss {loss:.4f}, val loss {val:.4f}")
            lines.append(
                f"iter {step}: loss {loss:.4f}, time {101.5 + step:.2f}ms, mfu {-100.0 if step < 5 else 12.34:.2f}%"
            )
        (OUT / "nanogpt" / name).mkdir(parents=True)
        (OUT / "nanogpt" / name / "train.log").write_text("\n".join(lines) + "\n")
        torch.save({"iter_num": STEPS - 1, "model_args": {"vocab_size": VOCAB}}, OUT / "nanogpt" / name / "ckpt.pt")
        chat = []
        for step, loss in series["train/loss"]:
            pct = 100 * step / STEPS
            chat.append(
                f"step {step:05d}/{STEPS:05d} ({pct:.2f}%) | loss: {loss:.6f} | lrm: 1.00 | dt: {250.5:.2f}ms | "
                f"tok/sec: {524288:,} | mfu: {41.2:.2f} | total time: {step * 0.01:.2f}m"
            )
            if step % EVAL_EVERY == EVAL_EVERY - 1:
                chat.append(f"Step {step:05d} | Validation bpb: {loss / math.log(2) / 4:.4f}")
        (OUT / "nanochat" / name).mkdir(parents=True)
        (OUT / "nanochat" / name / "train.log").write_text("\n".join(chat) + "\n")

    expected = {
        name: {tag: [[s, None if math.isnan(v) else v] for s, v in points] for tag, points in series.items()}
        for name, series in runs.items()
    }
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    (OUT / "VERSIONS").write_text("".join(f"{k}=={v}\n" for k, v in sorted(versions.items())))


if __name__ == "__main__":
    main()
