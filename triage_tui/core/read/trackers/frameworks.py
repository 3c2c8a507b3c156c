"""Which framework wrote a run, from its files and their layout (``scan --json``'s ``trainer``).

Metric names alone mislead: Lightning's ``train_loss`` reads as HF Trainer's, torchtune's ``loss``
and ``lr`` as SpecForge's. Each framework leaves files of its own, named and placed its way:

- Lightning: ``<save_dir>/<name>/version_<N>/`` holding ``metrics.csv`` (CSVLogger) or
  ``hparams.yaml`` or event files (TensorBoardLogger) (lightning/fabric/loggers/csv_logs.py,
  lightning/pytorch/loggers/tensorboard.py: ``version_{N}``);
- torchtune: ``log_<unix time>.txt`` (DiskLogger, torchtune/training/metric_logging.py);
- NeMo Automodel: ``training.jsonl``, ``validation[_<name>].jsonl`` (its recipes' MetricLogger);
- nanoGPT: ``ckpt.pt`` in its ``out_dir`` (train.py), nanochat's consoles beside it;
- SpecForge: ``<run_id>-step<N>/`` or ``epoch_<e>_step_<s>/`` checkpoints holding ``training_state.pt``;
- speculators: ``run.yaml`` beside its ``<epoch>/`` checkpoints;
- HF Trainer: ``checkpoint-<N>/trainer_state.json``;
- the trackers, which say who stored the record, not who trained: MLflow (``mlflow.db``,
  ``mlruns/``) and trackio (``<project>.db`` beside ``<project>.lock``).

``trainer_of`` puts the layout and the metric names together: a trainer's own layout first; then
the EAGLE-3 trainers the names identify by a name only they log (ModelOpt and speculators train on
HF Trainer, whose layout they share; SpecForge logs to MLflow); then HF Trainer's layout or a
tracker's; then the names alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import PurePath

from triage_tui.core.read.runs.info import RunInfo
from triage_tui.core.read.trackers import mlflow_db, mlflow_files, nanogpt_log, nemo_jsonl, torchtune_log, trackio_db

LIGHTNING = "lightning"
TORCHTUNE = "torchtune"
NEMO_AUTOMODEL = "nemo-automodel"
NANOGPT = "nanogpt"
SPECFORGE = "specforge"
SPECULATORS = "speculators"
HF_TRAINER = "hf-trainer"
MLFLOW = "mlflow"
TRACKIO = "trackio"
# Frameworks whose layout names the trainer itself: they win over what the metric names say.
TRAINER_LAYOUTS = frozenset({LIGHTNING, TORCHTUNE, NEMO_AUTOMODEL, NANOGPT, SPECFORGE, SPECULATORS})
# Trainers the metric names identify that run on another's layout (core/metric_names.py ids).
EAGLE_TRAINERS = frozenset({"specforge", "specforge-classic", "speculators", "eagle", "modelopt"})

# Kinds of scalar source (core/read/source_kinds/) whose name is the framework's.
KIND_FRAMEWORKS = frozenset({NANOGPT, TORCHTUNE, NEMO_AUTOMODEL, LIGHTNING, MLFLOW, TRACKIO})
_VERSION_DIR = re.compile(r"^version_\d+$")
_SPECFORGE_STEP = re.compile(r"^(.+-step\d+|epoch_\d+_step_\d+)$")
_HF_CHECKPOINT = re.compile(r"^checkpoint-\d+$")
LIGHTNING_FILES = frozenset({"metrics.csv", "hparams.yaml"})


def _of_file(path: PurePath, names_here: frozenset[str]) -> str | None:
    name, parent = path.name, path.parent.name
    if nemo_jsonl.is_metrics_file_name(name):
        return NEMO_AUTOMODEL
    if torchtune_log.FILE_NAME.match(name):
        return TORCHTUNE
    if _VERSION_DIR.match(parent) and (name in LIGHTNING_FILES or "tfevents" in name):
        return LIGHTNING
    if name == nanogpt_log.CHECKPOINT_NAME:
        return NANOGPT
    if name == "training_state.pt" and _SPECFORGE_STEP.match(parent):
        return SPECFORGE
    if name == "run.yaml":
        return SPECULATORS
    if name == "trainer_state.json" and _HF_CHECKPOINT.match(parent):
        return HF_TRAINER
    if name == mlflow_db.DB_NAME or (name == mlflow_files.META_NAME and mlflow_files.DIR_NAME in path.parts):
        return MLFLOW
    if (
        name.endswith(trackio_db.DB_SUFFIX)
        and name.removesuffix(trackio_db.DB_SUFFIX) + trackio_db.LOCK_SUFFIX in names_here
    ):
        return TRACKIO
    return None


def framework_of(files: Iterable[PurePath], kinds: Iterable[str] = ()) -> str | None:
    """The framework a run's files say wrote it: a trainer's own layout over HF Trainer's over a
    tracker's; None when nothing is one's own. ``kinds``: the kinds of scalar source discovery
    found the run's files of (a console read as nanoGPT's is nanoGPT's: its ``ckpt.pt`` made the run)."""
    paths = list(files)
    by_dir: dict[PurePath, set[str]] = {}
    for path in paths:
        by_dir.setdefault(path.parent, set()).add(path.name)
    found = {_of_file(path, frozenset(by_dir[path.parent])) for path in paths} - {None}
    found |= {kind for kind in kinds if kind in KIND_FRAMEWORKS}
    for framework in (
        LIGHTNING,
        TORCHTUNE,
        NEMO_AUTOMODEL,
        NANOGPT,
        SPECFORGE,
        SPECULATORS,
        HF_TRAINER,
        MLFLOW,
        TRACKIO,
    ):
        if framework in found:
            return framework
    return None


def trainer_of(layout: str | None, by_names: str | None, *, identified: bool) -> str | None:
    """``scan --json``'s ``trainer``: the layout's framework, or the trainer the metric names matched
    (``by_names``, core/metric_names.py), whichever says more (the module docstring). Over another's
    layout (HF Trainer's, a tracker's) the names say who trained only when they are ``identified``:
    they hold a name only that trainer logs, not just ``train/loss`` and ``lr``."""
    if layout in TRAINER_LAYOUTS:
        return layout
    if by_names in EAGLE_TRAINERS and (identified or layout is None):
        return by_names
    return layout or by_names


def framework_of_run(info: RunInfo) -> str | None:
    """``framework_of`` the files discovery found of a run: its scalar files of every kind and the
    artifacts that name a trainer (a checkpoint's ``training_state.pt``, speculators' ``run.yaml``)."""
    artifacts = info.artifacts
    found = (artifacts.trainer_state, artifacts.training_state, artifacts.run_yaml)
    return framework_of([*info.scalar_file_set(), *(p for p in found if p)], info.sources)
