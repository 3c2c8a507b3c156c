import sys
from pathlib import Path

# Lets tests import shared fixtures such as `story_mappings` by module name.
sys.path.insert(0, str(Path(__file__).parent))
