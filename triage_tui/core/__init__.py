"""The headless core: everything that knows about runs. Never imports textual or rich."""
