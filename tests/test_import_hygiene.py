"""The headless core must be usable without a terminal: importing it pulls in no TUI library."""

import subprocess
import sys


def test_core_imports_without_textual():
    code = (
        "import sys, importlib, pkgutil\n"
        "import triage_tui.core as core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'triage_tui.core.'):\n"
        "    importlib.import_module(m.name)\n"
        "import triage_tui.cli\n"
        "bad = [n for n in ('textual', 'rich', 'textual_plotext') if n in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"triage_tui.core pulls in: {out.stdout.strip()}"
