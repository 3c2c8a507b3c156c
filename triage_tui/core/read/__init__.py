"""Reading runs: which directory is a run, and what each of its sources logged."""
