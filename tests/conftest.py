import os
import sys
from pathlib import Path

from hypothesis import settings

# One OpenMP thread per test process, and so in every child they start, unless the caller set it.
# Two xdist workers already fill the 2 cores the suite is sized for: torch's second intra-op
# thread finds no idle core and spin-waits for the first. Measured on an idle 2-core machine, the
# whole suite: 599 CPU-s and 6:05 with OMP_NUM_THREADS=2 (torch's default there), 559 CPU-s and
# 5:53 with 1 (a drafter the replay tests train: 24 CPU-s on two threads, 6-8 on one). Set before
# anything imports torch, which reads it once.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# "repeatable" (scripts/check.sh, so CI): every property test draws the same examples on every run,
# seeded by the test itself; the default profile draws new ones each run, to find what those miss.
settings.register_profile("repeatable", derandomize=True)
settings.load_profile(os.environ.get("TRIAGE_HYPOTHESIS_PROFILE", "default"))

# Lets tests import the fixture builders (`from builders.mappings import story_mappings`).
sys.path.insert(0, str(Path(__file__).parent))

# Fixtures shared by several test modules live in builders and are registered here, so no test
# module imports fixtures from another.
pytest_plugins = [
    "builders.remap",
    "builders.modelopt",
    "builders.object_store",
    "builders.gcs_store",
    "builders.commands",
]


def pytest_collection_modifyitems(config, items) -> None:
    """The tests marked slow (a training run, a sample regeneration) first: started at once they run
    beside the short ones; started last, one of them would keep a worker busy while the other idles.
    The sort is stable, so every xdist worker collects the same order."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
