import sys
from pathlib import Path

# Lets tests import the fixture builders (`from builders.mappings import story_mappings`).
sys.path.insert(0, str(Path(__file__).parent))

# Fixtures shared by several test modules live in builders and are registered here, so no test
# module imports fixtures from another.
pytest_plugins = ["builders.remap", "builders.modelopt", "builders.object_store"]


def pytest_collection_modifyitems(config, items) -> None:
    """The tests marked slow (a training run, a sample regeneration) first: started at once they run
    beside the short ones; started last, one of them would keep a worker busy while the other idles.
    The sort is stable, so every xdist worker collects the same order."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
