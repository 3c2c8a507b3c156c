"""Experiment trackers' own records as scalar sources: what a framework writes when it is not
TensorBoard or W&B.

Modules, top to bottom: one per record format, each a ``ScalarSource`` (core/read/sources.py) read
incrementally, and, for a store that holds many runs, the function that lists them as the tracker
names them: ``mlflow_db`` (MLflow's SQLite store, ``mlflow.db``), ``mlflow_files`` (its file store,
``mlruns/``), ``trackio_db`` (a trackio project's ``<project>.db``), ``csv_metrics`` (Lightning's
CSVLogger and DeepSpeed's CSV monitor), ``torchtune_log`` (torchtune's DiskLogger),
``nanogpt_log`` (nanoGPT and nanochat consoles) and ``nemo_jsonl`` (NeMo Automodel's
``training.jsonl``) over ``line_log`` (a followed text log parsed line by line) and ``sqlite_ro``
(the one way a store is opened: read-only, a writer's lock waited on briefly, never a byte written)
over ``points`` (a poll's points into a run's series; names, values and steps checked) and
``text_numbers`` over ``tuning``. The package re-exports nothing: import the module that holds the name.
"""
