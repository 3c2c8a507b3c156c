import sys

from triage_tui.cli import main

sys.exit(main())
