"""triage: watch EAGLE-3 drafter fine-tunes and diagnose why their loss looks random."""

__version__ = "0.1.0"
