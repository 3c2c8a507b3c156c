"""Write screenshots/*.svg from the real app running headless on sample_runs/.

    .venv/bin/python scripts/screenshots.py [--runs sample_runs] [--out screenshots]

The walkthrough of the README, one picture per step: the main screen in an 80x24 pane and
wide, the hypotheses after `c`, the drill-down's details, the remap dialog and its result.
The remap writes beside the source checkpoint, so the runs are copied to a scratch
directory first; sample_runs/ itself is never written. The clock is frozen a minute after
the newest event so that regenerating gives the same pictures.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from triage_tui.core.watch.watcher import Watcher  # noqa: E402
from triage_tui.tui.app import TriageApp  # noqa: E402
from triage_tui.tui.screens.drilldown import DrillDownScreen  # noqa: E402
from triage_tui.tui.screens.remap import ConfirmRemapScreen, RemapScreen  # noqa: E402
from triage_tui.tui.widgets.loss_chart import LossChart  # noqa: E402

SMALL = (80, 24)
WIDE = (160, 45)


async def until(pilot, predicate, timeout: float = 300.0) -> None:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise SystemExit(f"screenshots: timed out after {timeout}s")
        await pilot.pause(0.05)


async def settle(pilot) -> None:
    pilot.app.clear_notifications()
    await pilot.pause(0.3)


def save(app: TriageApp, out: Path, name: str, title: str) -> None:
    path = out / name
    path.write_text(app.export_screenshot(title=title))
    print(f"wrote {path}")


def make_app(runs: Path, now: float) -> TriageApp:
    app = TriageApp([runs], poll_interval=0.5, use_watchdog=False, now=lambda: now)
    app.animation_level = "none"
    return app


async def loaded(pilot) -> None:
    """The first whole poll taken in (a big first poll shows runs as they load: not a picture of all)."""
    app = pilot.app
    await until(
        pilot,
        lambda: (
            app.watcher is not None
            and app.watcher.reported >= 1
            and app.watcher_poll >= app.watcher.updated
            and app.main.query_one(LossChart).series is not None
        ),
    )


async def select(pilot, run_name: str) -> None:
    app = pilot.app
    names = [row.name for row in app.rows]
    if run_name not in names:
        raise SystemExit(f"screenshots: no run named {run_name!r} (runs: {', '.join(names)})")
    await pilot.press(*["down"] * names.index(run_name))
    await until(
        pilot, lambda: (series := app.main.query_one(LossChart).series) is not None and series.path.name == run_name
    )


async def check(pilot) -> None:
    app = pilot.app
    await pilot.press("c")
    await until(pilot, lambda: app.checks.running_for is None and bool(app.checks.diagnoses))


async def main_screen(runs: Path, now: float, out: Path) -> None:
    """The first thing a user sees in an 80x24 pane: the runs, worst first."""
    app = make_app(runs, now)
    async with app.run_test(size=SMALL) as pilot:
        await loaded(pilot)
        await settle(pilot)
        save(app, out, "main-80x24.svg", "triage sample_runs (80x24)")


async def wide_screen(runs: Path, now: float, out: Path, run_name: str) -> None:
    """The room at 160x45: table, chart, flags, checks and hypotheses side by side."""
    app = make_app(runs, now)
    async with app.run_test(size=WIDE) as pilot:
        await loaded(pilot)
        await select(pilot, run_name)
        await check(pilot)
        await settle(pilot)
        save(app, out, "main-wide.svg", f"triage sample_runs ({WIDE[0]}x{WIDE[1]}), c on {run_name}")


async def walkthrough(runs: Path, now: float, out: Path, run_name: str) -> None:
    """check -> hypotheses -> drill-down -> remap dialog -> y -> result, in one 80x24 session."""
    app = make_app(runs, now)
    async with app.run_test(size=SMALL) as pilot:
        await loaded(pilot)
        await select(pilot, run_name)
        await check(pilot)
        await settle(pilot)
        save(app, out, "hypotheses-80x24.svg", "triage: c ran the checks")
        await pilot.press("h", "enter")
        await until(pilot, lambda: isinstance(app.screen, DrillDownScreen))
        await pilot.press("2")
        await settle(pilot)
        save(app, out, "drilldown.svg", "triage: enter on the top hypothesis, Details tab")
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, ConfirmRemapScreen))
        await settle(pilot)
        save(app, out, "remap-dialog.svg", "triage: m asks before writing")
        await pilot.press("y")

        def remap_done() -> bool:
            screen = app.screen_stack[-1]  # Screen[Any]: isinstance narrows it to the RemapScreen itself
            return isinstance(screen, RemapScreen) and (screen.report is not None or screen.error is not None)

        await until(pilot, remap_done)
        await settle(pilot)
        save(app, out, "remap-result.svg", "triage: y wrote and verified the remapped checkpoint")


# vLLM's v1 log line (vllm/v1/spec_decode/metrics.py, SpecDecodingLogging.log), verbatim.
VLLM_SPEC_LINE = (
    "INFO %s [metrics.py:96] SpecDecoding metrics: Mean acceptance length: %.2f, "
    "Accepted throughput: %.2f tokens/s, Drafted throughput: %.2f tokens/s, Accepted: %d tokens, "
    "Drafted: %d tokens, Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%"
)


def write_example_serving_log(run: Path) -> Path:
    """An example vLLM log (2 speculative tokens, 10 s intervals) for the serving picture, and [serving].

    Not a measurement: the counts are drawn from fixed per-position acceptance probabilities
    (0.66, then 0.6 of those) to show the founding case, a drafter that works when served with its
    own mapping while the fine-tune's accuracy sits at chance.
    """
    import numpy as np

    rng = np.random.default_rng(7)
    lines = []
    for i in range(30):
        drafts = int(rng.integers(400, 600))
        first = int(rng.binomial(drafts, 0.66))
        second = int(rng.binomial(first, 0.6))
        accepted, drafted = first + second, 2 * drafts
        stamp = time.strftime("%m-%d %H:%M:%S", time.gmtime(1_796_000_000 + 10 * i))
        rates = f"{first / drafts:.3f}, {second / drafts:.3f}"
        lines.append(
            VLLM_SPEC_LINE
            % (
                stamp,
                1 + accepted / drafts,
                accepted / 10,
                drafted / 10,
                accepted,
                drafted,
                rates,
                100 * accepted / drafted,
            )
        )
    log = run / "vllm-serve.log"
    log.write_text("\n".join(lines) + "\n")
    with open(run / "triage.toml", "a") as handle:
        handle.write('\n[serving]\nlogs = ["vllm-serve.log"]\n')
    return log


async def serving_screen(runs: Path, now: float, out: Path, run_name: str) -> None:
    """A run whose triage.toml names its vLLM log: acceptance under the loss, then `c`."""
    from triage_tui.tui.widgets.serving_chart import ServingChart

    write_example_serving_log(runs / run_name)
    app = make_app(runs, now)
    async with app.run_test(size=WIDE) as pilot:
        await loaded(pilot)
        await select(pilot, run_name)
        await until(pilot, lambda: app.main.query_one(ServingChart).series is not None)
        await check(pilot)
        await settle(pilot)
        save(app, out, "serving-wide.svg", f"triage: {run_name} with its vLLM log in [serving], c")


def frozen_now(runs: Path) -> float:
    """A minute after the newest event of any run, so 'age' reads the same on every regeneration."""
    statuses = Watcher([runs], use_watchdog=False).poll_once()
    latest = max((s.last_update for s in statuses if s.last_update is not None), default=time.time())
    return float(latest) + 60.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=ROOT / "sample_runs")
    parser.add_argument("--out", type=Path, default=ROOT / "screenshots")
    parser.add_argument("--run", default="vocab-mismatch", help="the run the walkthrough checks and remaps")
    args = parser.parse_args()
    if not args.runs.is_dir():
        print(f"screenshots: {args.runs}: no such directory (run `triage samples` first)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    # A fixed scratch path: the dialog and the result name the files they write.
    scratch = Path(tempfile.gettempdir()) / "triage-screenshots"
    shutil.rmtree(scratch, ignore_errors=True)
    runs = scratch / "sample_runs"
    shutil.copytree(args.runs, runs)
    try:
        now = frozen_now(runs)
        asyncio.run(main_screen(runs, now, args.out))
        asyncio.run(wide_screen(runs, now, args.out, args.run))
        asyncio.run(walkthrough(runs, now, args.out, args.run))
        # Last: it adds a serving log to the scratch copy of the run.
        asyncio.run(serving_screen(runs, now, args.out, args.run))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
