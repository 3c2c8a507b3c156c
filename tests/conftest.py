import sys
from pathlib import Path

# Lets tests import the fixture builders (`from builders.mappings import story_mappings`) and `waiting`.
sys.path.insert(0, str(Path(__file__).parent))
