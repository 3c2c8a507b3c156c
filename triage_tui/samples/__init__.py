"""The tiny EAGLE-3 world behind ``sample_runs/`` and ``triage demo``: target, corpus, trainer, generator."""
