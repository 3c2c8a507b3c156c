"""Watching runs: the live monitor, each run's flags, state and serving evidence, and the node they run on."""
