"""The kinds of a run's scalar sources, each declared once, and their one list.

Modules, top to bottom: ``registry`` (``SCALAR_SOURCES``: every kind once, in the order of
``scan --json``'s ``sources``; a kind's series are prefixed when one listed before it has files in
the run) over one module per kind (``tensorboard``, ``wandb``, ``console``, ``trainer_state``, and
the trackers' records: ``mlflow``, ``trackio``, ``lightning``, ``deepspeed_csv``, ``torchtune``,
``nemo_automodel``, ``nanogpt``, their readers in core/read/trackers/) over ``kind``
(``ScalarSourceKind``, ``ScalarSource``, ``RunTree``). It re-exports nothing.
"""
