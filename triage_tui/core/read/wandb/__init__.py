"""W&B run files (``run-<id>.wandb``): incremental, damage-tolerant reading of history rows into scalars.

A W&B run always leaves its records on the training node, online or offline:
``wandb/run-<date>-<id>/run-<id>.wandb`` (``offline-run-…`` when offline). Nothing here contacts a
server or writes into the run directory; files are opened read-only.

The rooms, bottom up:

    framing   the LevelDB log format: 32 KiB blocks of CRC-checked chunks into whole records,
              damage stepped over, a record still being written left for the next poll
    records   one record's bytes into a typed result (a history row, a config change, a metric
              definition, the exit code) with every key, value and number bounded first; a record
              whose CRC matched but whose contents are impossible is damage, like a bad CRC
    history   ``WandbHistory``: a run's files polled, rows into series (step metrics, resumes),
              the config

Importers name the module that holds what they use (``from triage_tui.core.read.wandb.history import
WandbHistory``); this package re-exports nothing.
"""
