"""First paint on a real terminal: `triage PATH` under a pseudo-terminal, exec to the runs table's first row.

A user's figure, measured as a user meets it: the installed ``triage`` script is started on the
slave side of a pty (120 x 36, TERM=xterm-256color), and the master side's output stream is read
as the terminal would receive it. Escape sequences are stripped from it, and the first paint is
the moment a run's name (a row of the runs table) has been written; every run's name shows when
every row is on screen. Then ``q`` is typed and the time to the process's exit is taken too.
Nothing headless: the app draws through its Linux driver to a terminal, as in tmux.

Trees: ``sample_runs/`` (the walkthrough's first screen), and with ``--sweep`` the sweep of
bench_sweep.py (100 runs x 100 000 points, whose first rows come before every run is read).

    .venv/bin/python benchmarks/bench_paint.py                 # sample_runs, 5 fresh processes
    .venv/bin/python benchmarks/bench_paint.py --sweep         # and the sweep (~10 s to write it)
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import shutil
import statistics
import struct
import sys
import termios
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import record  # noqa: E402 - benchmarks/, found through the sys.path entry above

SAMPLE_RUNS = ["healthy", "vocab-mismatch", "hidden-state-format", "verifier-mask", "diverged"]
# CSI (colours, cursor moves, modes), OSC (titles, clipboard; BEL or ST ends it), and two-byte escapes.
ESCAPES = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|\x1b[()][0-9A-Za-z]")
COLUMNS, LINES = 120, 36


def triage_command() -> list[str]:
    """The console script pip installed beside this interpreter, else ``python -m triage_tui``."""
    script = Path(sys.executable).parent / "triage"
    return [str(script)] if script.exists() else [sys.executable, "-m", "triage_tui"]


def paint(path: Path, names: list[str], every_fits: bool, timeout: float = 120.0) -> dict:
    """One fresh `triage PATH` on a pty: seconds from exec to the first run name drawn, to every one
    (when ``every_fits`` the screen), and from typing q to the process's exit."""
    pid, master = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal, stdin, stdout and stderr
        try:
            os.environ.update(TERM="xterm-256color", COLUMNS=str(COLUMNS), LINES=str(LINES), PYTHONPATH=str(REPO))
            os.execv(triage_command()[0], [*triage_command(), str(path)])
        finally:
            os._exit(127)
    started = time.perf_counter()
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", LINES, COLUMNS, 0, 0))
    stream = bytearray()
    text = b""
    first = every = exited = None
    # A narrow run column cuts a long name in its middle ("hidden-st…e-format"): its first 9 characters
    # still tell the rows apart.
    wanted = [name[:9].encode() for name in names]
    try:
        while (every is None if every_fits else first is None) and time.perf_counter() - started < timeout:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: the child closed the terminal (it died)
                break
            now = time.perf_counter() - started
            stream += chunk
            text = ESCAPES.sub(b"", bytes(stream))
            if first is None and any(name in text for name in wanted):
                first = now
            if every_fits and all(name in text for name in wanted):
                every = now
        if first is None:
            raise SystemExit(f"no run name of {path} drawn in {timeout:.0f} s; the terminal got:\n{text[-2000:]!r}")
        quit_at = time.perf_counter()
        os.write(master, b"q")
        while exited is None and time.perf_counter() - quit_at < 30:
            select.select([master], [], [], 0.05)
            try:
                os.read(master, 1 << 16)  # keep draining: a full pty would block the app's last writes
            except OSError:
                pass
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                exited = time.perf_counter() - quit_at
                if os.waitstatus_to_exitcode(status) != 0:
                    raise SystemExit(f"triage {path} exited with status {os.waitstatus_to_exitcode(status)}")
    finally:
        if exited is None:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(master)
    return {"first_row_s": first, "every_row_s": every, "quit_s": exited}


def main() -> None:
    import as_installed  # benchmarks/: the script's own directory is on sys.path

    as_installed.compile_triage()  # timed processes start as an installed triage does
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes per tree (median reported)")
    parser.add_argument("--sweep", action="store_true", help="also the sweep of bench_sweep.py")
    parser.add_argument("--runs", type=int, default=100, help="--sweep: runs")
    parser.add_argument("--points", type=int, default=100_000, help="--sweep: points per run")
    parser.add_argument("--keep", action="store_true", help="--sweep: keep the tree for a rerun")
    parser.add_argument("--dry-run", action="store_true", help="print the run, append nothing to RESULTS-paint.md")
    args = parser.parse_args()
    run = record.Run("paint", dry_run=args.dry_run)
    trees = [("`sample_runs/` (5 runs)", REPO / "sample_runs", SAMPLE_RUNS)]
    sweep_root = None
    if args.sweep:
        import bench_sweep

        sweep_root = HERE / ".work" / "sweep" / f"{args.runs}x{args.points}"
        bench_sweep.write_tree(sweep_root, args.runs, args.points)
        names = [f"run_{i:03d}" for i in range(args.runs)]
        trees.append((f"a sweep, {args.runs} runs × {args.points:,} points", sweep_root, names))
    rows, lines = [], []
    for label, root, names in trees:
        every_fits = len(names) < LINES - 12  # the sweep's rows do not all fit on the screen
        paint(root, names, every_fits)  # a first one not counted: the page cache warm for every counted one
        shots = [paint(root, names, every_fits) for _ in range(args.repeat)]
        first = [s["first_row_s"] for s in shots]
        every = [s["every_row_s"] for s in shots if s["every_row_s"] is not None]
        quits = [s["quit_s"] for s in shots if s["quit_s"] is not None]
        print(f"{label}: {shots}", flush=True)
        rows.append(
            {
                "what": f"TUI first row on a terminal: {label}",
                "triage": {
                    "label": "`triage PATH` on a pty, exec to the first row drawn",
                    "seconds": statistics.median(first),
                },
                "other": None,
                "every_row_s": statistics.median(every) if every else None,
                "quit_s": statistics.median(quits) if quits else None,
            }
        )
        lines.append(
            f"| {label} | {record.spread(first, 3)} | "
            f"{record.spread(every, 3) if every else '–'} | {record.spread(quits, 3) if quits else '–'} |"
        )
    table = (
        f"| tree | exec → first row drawn, s, median (min–max) of {args.repeat} | exec → every row drawn | "
        "`q` → exit |\n|---|---|---|---|\n" + "\n".join(lines)
    )
    run.save("First paint on a pseudo-terminal", table, rows)
    if sweep_root is not None and not args.keep:
        shutil.rmtree(sweep_root, ignore_errors=True)


if __name__ == "__main__":
    main()
