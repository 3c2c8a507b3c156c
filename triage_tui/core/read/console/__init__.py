"""Training consoles (what a trainer prints, as ``> train.log 2>&1`` or SLURM keeps it) as scalars.

Modules, top to bottom: ``reader`` (``ConsoleLogs``: a run's console files followed, their series
merged, HF Trainer's steps re-derived when a checkpoint's ``trainer_state.json`` says them) over
``follow`` (``ConsoleFile``: one file's lines through ``core/log_tail.LogTail``, rank prefixes,
progress bars and wrapped records handled, each trainer's line parsed) over ``steps`` (HF Trainer's
steps: printed, from the progress bar, from trainer_state.json, or inferred) over one module per
trainer's line format (``specforge``, ``hf_trainer``, ``speculators``) over ``lines`` (ANSI
escapes, rank prefixes, tqdm bars), ``literal`` (a bounded parser of the dicts trainers print,
never eval) and ``record`` (``ConsoleRecord``, ``Damaged``) over ``tuning``. Beside ``reader``,
``view`` (``ConsoleView``) is the console as a person reads it: the bounded tail of its lines,
followed, each told plain, a traceback's or a crash's (the TUI's console pane). The package re-exports
nothing: import the module that holds the name.
"""
