"""Diagnosing a run: its evidence gathered once, the registered checks, and the causes ranked."""
