"""A benchmark run's record: what was measured, where, when, at which commit, by which command.

Each benchmark appends its run to its ``RESULTS-<name>.md``: a heading with the date, load average
and commit, the table a person reads, and the same figures as one JSON comment line
(``<!-- record: {...} -->``) that ``report.py`` reads to write docs/speed.md and the README's
summary. The RESULTS files are the one source: the pages are regenerated from them, never edited.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MARK = "<!-- record: "


def commit() -> str:
    """HEAD's short hash, with ``+changes`` when the code measured (triage_tui/, the running benchmark) differs."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short=8", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "triage_tui", str(Path(sys.argv[0]).resolve())],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if changed else "")


def machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} CPUs{f' ({model})' if model else ''}, {memory:.0f} GiB, Python {platform.python_version()}"
    )


def _without_note(args: list[str]) -> list[str]:
    """The arguments but ``--note TEXT``: the note is printed under the table, not part of what ran."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--note":
            skip = True
        elif not arg.startswith("--note="):
            kept.append(arg)
    return kept


class Run:
    """Opened when a benchmark starts (the load average then), saved when it ends."""

    def __init__(self, benchmark: str, argv: list[str] | None = None, *, dry_run: bool = False) -> None:
        self.benchmark = benchmark
        self.dry_run = dry_run  # print the run, append nothing (checking a benchmark itself, small sizes)
        args = _without_note(sys.argv[1:] if argv is None else argv)
        self.command = shlex.join([".venv/bin/python", f"benchmarks/{Path(sys.argv[0]).name}", *args])
        self.started = time.time()
        self.load_start = os.getloadavg()[0]

    def save(self, title: str, table: str, rows: list[dict], notes: str = "") -> dict:
        """Append the run to RESULTS-<benchmark>.md; returns the record."""
        record = {
            "benchmark": self.benchmark,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.started)),
            "load": [round(self.load_start, 1), round(os.getloadavg()[0], 1)],
            "commit": commit(),
            "machine": machine(),
            "command": self.command,
            "rows": rows,
        }
        heading = f"## {title}: {record['date']}, load {record['load'][0]} → {record['load'][1]}, at {record['commit']}"
        text = f"\n{heading}\n\n- machine: {record['machine']}\n- command: `{record['command']}`\n\n{table.strip()}\n"
        if notes:
            text += f"\n{notes.strip()}\n"
        text += f"\n{MARK}{json.dumps(record, ensure_ascii=False)} -->\n"
        print(text)
        if not self.dry_run:
            path = results_file(self.benchmark)
            with open(path, "a", encoding="utf-8") as f:
                f.write(text)
            print(f"(appended to {path.relative_to(REPO)}; benchmarks/report.py writes docs/speed.md from it)")
        return record


def results_file(benchmark: str) -> Path:
    return HERE / f"RESULTS-{benchmark}.md"


def records(benchmark: str) -> list[dict]:
    """Every record in RESULTS-<benchmark>.md, oldest first."""
    path = results_file(benchmark)
    if not path.exists():
        return []
    return [
        json.loads(line[len(MARK) : line.rindex(" -->")])
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith(MARK)
    ]


def spread(xs: list[float], digits: int = 2) -> str:
    """Median (min–max)."""
    return f"{statistics.median(xs):.{digits}f} ({min(xs):.{digits}f}–{max(xs):.{digits}f})"


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a running process has used so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # after the name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def whole_process_peak_mib(usage) -> float:
    """Peak RSS of a process waited for with os.wait4: the largest of it and the children it waited for
    (Linux: ru_maxrss in KiB). The same figure for every tool: its whole process, not growth after imports."""
    return usage.ru_maxrss / 1024
