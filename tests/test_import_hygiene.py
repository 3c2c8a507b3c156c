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


def test_the_reader_loads_crc32c_without_the_packages_init_and_computes_the_same_crcs():
    """The crc32c package's __init__ imports importlib.metadata and argparse (~25 ms before any
    first read): the reader loads its C function alone, and it gives the package's answers."""
    code = (
        "import sys, random\n"
        "from triage_tui.core.read.events import reader\n"
        "from triage_tui.core.read.events.crc import crc32c\n"
        "print('crc32c' in sys.modules)\n"
        "import crc32c as package\n"
        "rng = random.Random(252)\n"
        "blobs = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 300))) for _ in range(200)]\n"
        "print(all(crc32c(b) == package.crc32c(b) for b in blobs), crc32c(b'123456789') == 0xE3069283)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True"], out.stdout
