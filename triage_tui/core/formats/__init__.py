"""Readers that turn on-disk checkpoints, vocab mappings and hidden-state dumps into core types."""
