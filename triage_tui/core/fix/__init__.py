"""Fixing a run: the remap that rewrites a drafter checkpoint into the order its trainer labels with."""
