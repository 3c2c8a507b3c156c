"""The Textual app: a thin layer over triage_tui.core."""
