import sys
from pathlib import Path

# Lets tests import the fixture builders (`from builders.mappings import story_mappings`).
sys.path.insert(0, str(Path(__file__).parent))

# Fixtures shared by several test modules live in builders and are registered here, so no test
# module imports fixtures from another.
pytest_plugins = ["builders.remap", "builders.modelopt"]
