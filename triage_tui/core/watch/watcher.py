"""The headless live monitor: polls event files, rescans for runs, recomputes flags.

Polling is what guarantees correctness: inotify never fires for writes made by another NFS
client, and NFS attribute caching delays size changes (gorakhargosh/watchdog issue #504),
so every ``poll_interval`` each known event file is stat'ed and its appended bytes read
(core.read.sources.RunSources: every kind core/read/source_kinds/registry.py lists; a run whose
files are idle for long less often, core.watch.read_schedule), and every ``rescan_interval`` (or
ten times the last walk's duration, forty while the observer runs, when longer) the given paths
are walked again for new runs and files (core.read.runs, cheap thanks to its listing cache). A
watchdog Observer, where it works, only calls ``wake()`` so a local write shows up at once instead
of within a poll interval; ``use_watchdog=False`` (``--poll``) leaves polling alone.

``triage scan`` is one ``poll_once`` (its runs read in forked processes on a node's cores,
core.watch.fanout); the TUI runs ``Watcher.run`` in a worker thread. Each run's
own state, the files its settings come from and its update into a RunStatus are core.watch.watched_run's;
here are the runs found, the processes scanned once a poll, and the loop.
An idle ``poll_once`` (nothing appended) costs one stat per event file, one scan of /proc for
all runs (core.watch.run_state: whether each run's writer is alive here; what a process holds open is
read again only every ``REFRESH_SECS``) plus a few lookups per run: what depends on the values
(core.watch.derive ``derive``) is recomputed only when a run's scalars or settings changed
(``RunScalars.version``); the run's state and the flags of the clock and the run's files
(``flags_at``: ``stalled`` and ``crashed`` among them) are cheap and made every poll.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from triage_tui.core.errors import BadInput, SourceError
from triage_tui.core.read.runs.discover import discover_runs
from triage_tui.core.read.runs.info import RunInfo
from triage_tui.core.read.runs.listing import ListingCache
from triage_tui.core.read.runs.remote import Mirrors, shown_path
from triage_tui.core.series import RunScalars
from triage_tui.core.watch.derive import DEFAULT_FLUSH_SECS
from triage_tui.core.watch.fanout import done_everywhere
from triage_tui.core.watch.fs_wakeups import start_observer
from triage_tui.core.watch.process_table import ProcessScanner, ProcessTable
from triage_tui.core.watch.read_schedule import ReadSchedule
from triage_tui.core.watch.run_status import RunStatus, failed_status
from triage_tui.core.watch.watched_run import WatchedRun, WatchSettings
from triage_tui.core.watch.writers import event_file_pids

# A burst of watchdog events (tensorboardX issues 4 writes per record) is coalesced into one
# poll: after a wake-up the watcher waits this long before polling.
WAKE_COALESCE_SECS = 0.05
# Longest sleep between checks of the stop event, so a TUI quits promptly.
STOP_CHECK_SECS = 0.25
# How often a long first poll reports the runs read so far (a few redraws a second at most).
PROGRESS_SECS = 0.25
PROGRESS_MAX_SECS = 2.0  # the interval doubles after each report, up to this
# A rescan walks every watched directory: the next one comes no sooner than this many times the
# last one's duration after it (10 000 runs: ~0.5 s a rescan, one every 5 s at most), so discovery
# takes at most about a tenth of the watcher's thread. A watchdog event asks for one at once, so
# while the observer runs the walk is only the net for what inotify cannot see (a write from
# another host of a network filesystem, a lost event): a fortieth (10 000 runs: one every 20 s).
RESCAN_COST_FACTOR = 10.0
RESCAN_COST_FACTOR_OBSERVED = 40.0


class _FirstPoll:
    """A watcher's first poll on a thread of its own (Watcher.start_first_poll): what it reports
    before anyone listens is kept, the latest only, and handed over with the listener."""

    def __init__(self, watcher: Watcher) -> None:
        self._lock = threading.Lock()  # held while a report is handed on: reports arrive in order
        self._listener: Callable[[list[RunStatus]], None] | None = None
        self._unheard: list[RunStatus] | None = None
        self._statuses: list[RunStatus] | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self.discovered = threading.Event()  # the runs are found (or discovery failed): the poll reads them next
        self._watcher = watcher
        threading.Thread(target=self._poll, name="triage-first-poll", daemon=True).start()

    def _poll(self) -> None:
        watcher = self._watcher
        try:
            with watcher._lock:
                watcher._rescan_if_due()  # first, on its own: start_first_poll may wait for it
            self.discovered.set()
            self._statuses = watcher.poll_once(on_progress=self._progress)
        except BaseException as err:  # noqa: BLE001 - raised again where run() takes the poll over
            self._error = err
        finally:
            self.discovered.set()
            self._done.set()

    def _progress(self, statuses: list[RunStatus]) -> None:
        with self._lock:
            if self._listener is None:
                self._unheard = statuses
            else:
                self._listener(statuses)

    def take(self, listener: Callable[[list[RunStatus]], None], stop: threading.Event) -> list[RunStatus] | None:
        """Reports go to ``listener`` from now on (the last one made before, at once); the poll's
        statuses when it is done, or None if ``stop`` is set first."""
        with self._lock:
            self._listener = listener
            unheard, self._unheard = self._unheard, None
            if unheard is not None:
                listener(unheard)
        while not self._done.wait(0.05):
            if stop.is_set():
                return None
        if self._error is not None:
            raise self._error
        return self._statuses


def place_mirror_errors(
    errors: list[SourceError], runs: list[str]
) -> tuple[dict[str, tuple[SourceError, ...]], tuple[SourceError, ...]]:
    """Each object that failed said on the run whose tree holds it (the deepest such run), else on
    the one run in a directory beside it (a config beside the run's ``runs/``, the run being
    ``runs/`` while its config is not fetched); by run (``runs``: their shown paths), and those
    said on no run (a prefix that could not be listed: the runs below it are not its only ones)."""
    placed: dict[str, list[SourceError]] = {}
    unplaced: list[SourceError] = []
    deepest_first = sorted(runs, key=len, reverse=True)
    for error in errors:
        owner = next((run for run in deepest_first if error.path.startswith(run.rstrip("/") + "/")), None)
        if owner is None and not error.path.endswith("/"):  # an object's, not a prefix's
            directory = error.path.rsplit("/", 1)[0] + "/"
            below = [run for run in runs if run.startswith(directory) and "/" not in run[len(directory) :].strip("/")]
            owner = below[0] if len(below) == 1 else None
        if owner is None:
            unplaced.append(error)
        else:
            placed.setdefault(owner, []).append(error)
    return {run: tuple(found) for run, found in placed.items()}, tuple(unplaced)


def _stop_mirrors_with(stop: threading.Event, mirrors: Mirrors) -> None:
    """``mirrors`` stopped once ``stop`` is set: a pass over a bucket ends with the watcher wherever
    it waits on the store (the first poll's thread too), so quitting never waits for a server."""

    def wait_then_stop() -> None:
        stop.wait()
        mirrors.stop()

    threading.Thread(target=wait_then_stop, name="triage-stop-mirrors", daemon=True).start()


class Watcher:
    """Watches PATHs for runs; `poll_once` returns every run's current RunStatus."""

    def __init__(
        self,
        paths: Sequence[str | Path],
        *,
        vocab_size: int | None = None,
        poll_interval: float = 1.0,
        rescan_interval: float = 5.0,
        use_watchdog: bool = True,
        strict: bool = False,
        flush_secs: float = DEFAULT_FLUSH_SECS,
        clock: Callable[[], float] = time.time,
        mirrors: Mirrors | None = None,
        scanner: ProcessScanner | None = None,
        max_points: int | None = None,
        tier_idle_reads: bool = True,
        processes: int = 1,
    ) -> None:
        self.paths = [Path(p) for p in (paths or ["."])]
        # `scan`, one poll of local runs: read in up to this many forked processes (core.watch.fanout),
        # the statuses sent back without their series (RunStatus.scalars empty); 1: all read here.
        self.processes = processes
        # The URLs among the PATHs, mirrored into local trees (runs/remote.py): synced once per
        # rescan, on the thread that polls, before discovery walks their trees.
        self.mirrors = mirrors
        if mirrors is not None:  # a prefix idle for long is listed less often than this
            mirrors.polls.rescan_secs = rescan_interval
        # The last pass's objects that failed, by the run they belong to (its shown path: the
        # URL); ``unplaced_errors``: those under no run (a prefix that could not be listed).
        self._mirror_errors: dict[str, tuple[SourceError, ...]] = {}
        self.unplaced_errors: tuple[SourceError, ...] = ()
        self.poll_interval = poll_interval
        self.rescan_interval = rescan_interval
        self.use_watchdog = use_watchdog
        # `scan`: a PATH that does not exist or cannot be listed is BadInput; the TUI keeps going.
        # Either way a run's own bad file is an error of that run (RunStatus.errors), never BadInput.
        self.strict = strict
        self.clock = clock
        # What every run is read and judged with (core.watch.watched_run): `scan` waits for a metrics URL
        # once (strict); `check` reads [serving] itself (scan_run, below).
        # ``max_points``: the TUI holds each series to that many points (a display series), `scan` all.
        self.settings = WatchSettings(
            vocab_size=vocab_size, flush_secs=flush_secs, strict=strict, clock=clock, max_points=max_points
        )
        # Scans /proc once a poll for every run's writer (core.watch.run_state); a test gives one over a made-up /proc.
        self.scanner = scanner if scanner is not None else ProcessScanner()
        self.watchdog_active = False  # True while an Observer delivers wake-ups
        self.skipped_links: dict[str, str] = {}  # symlinks out of the watched paths, not followed: link -> target
        self.walk_limits: dict[str, str] = {}  # where discovery stopped walking (its bounds): path -> why
        self._cache = ListingCache()
        self._runs: dict[Path, WatchedRun] = {}
        # Runs whose files are idle for long are read less often (core.watch.read_schedule); `scan`,
        # one poll, reads every run once and says nothing of it (tier_idle_reads=False).
        self._schedule = ReadSchedule(poll_interval, tiered=tier_idle_reads)
        self._next_rescan = 0.0  # time.monotonic() deadline; 0 = at the first poll
        self._rescan_requested = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()  # poll_once may be called from the TUI and the worker
        self.polls = 0  # poll_once calls completed: tests wait for polls, never for seconds
        # run(): the last poll whose on_update (if any) was called, and the last one that called it. A
        # consumer that has taken in the update of poll `updated` has seen everything polls up to
        # `reported` read (polls is counted before on_update is called: waiting on it alone races).
        self.reported = 0
        self.updated = 0
        self._first_poll: _FirstPoll | None = None  # begun by start_first_poll, taken over by run()

    # ------------------------------------------------------------------ public

    def wake(self, *, rescan: bool = False, path: Path | None = None) -> None:
        """Poll now instead of at the next interval (a watchdog hint; never required); ``path``: the
        file or directory that changed, whose run is read at that poll however idle."""
        if path is not None:
            self._schedule.touched(path)
        if rescan:
            self._rescan_requested.set()
        self._wake.set()

    def poll_once(
        self, now: float | None = None, on_progress: Callable[[list[RunStatus]], None] | None = None
    ) -> list[RunStatus]:
        """Rescan if due, read appended bytes, recompute flags; every run's status.

        ``on_progress`` gets the statuses read so far after PROGRESS_SECS, then at doubling
        intervals, while a long poll (the first one over a big tree) is still reading, so runs
        fill in as they load. After the first, a report is skipped while, at the pace so far, the
        poll would end within half the interval: the poll's own statuses would redraw it at once.
        """
        with self._lock:
            self._rescan_if_due()
            now = self.clock() if now is None else now
            runs = list(self._runs.values())
            processes = self._scan_processes(runs)
            statuses: list[RunStatus | None] = [None] * len(runs)
            started = reported = time.monotonic()
            interval = PROGRESS_SECS
            done = 0
            reports = 0

            self._schedule.take_touched(tracked.info for tracked in self._runs.values())

            def update(i: int) -> None:
                nonlocal reported, interval, done, reports
                tracked = runs[i]
                if tracked.status is not None and not self._schedule.due(tracked.info.path):
                    statuses[i] = tracked.status  # idle for long, read at its own interval: its last report
                    done += 1
                    return
                try:
                    note = self._schedule.plan(tracked.info, tracked.status)
                    statuses[i] = status = self._update(tracked, now, processes, note)
                    self._schedule.read(tracked.info, status)
                except Exception as err:  # noqa: BLE001 - the fault boundary: one run's failure stays on it
                    statuses[i] = failed_status(tracked.info, self.settings.vocab_size, err)
                done += 1
                clock = time.monotonic()
                if on_progress is None or clock - reported < interval:
                    return
                if reports and (len(runs) - done) * (clock - started) < done * interval / 2:
                    return  # nearly done: each report rebuilds every row shown (a 100-run table: ~60 ms)
                on_progress([status for status in statuses if status is not None])
                reports += 1
                reported = time.monotonic()
                # Each report rebuilds every row shown so far (smoothing included): first rows
                # at once, then less and less often, so a long load is not spent redrawing.
                interval = min(2 * interval, PROGRESS_MAX_SECS)

            workers = self.processes if self.mirrors is None and on_progress is None else 1

            def read(i: int) -> RunStatus:
                update(i)
                status = statuses[i]
                assert status is not None
                return status if workers == 1 else replace(status, scalars=RunScalars())  # its series stay there

            for i, status in done_everywhere(len(runs), read, workers):
                statuses[i] = status
            self.polls += 1
            return [status for status in statuses if status is not None]

    def start_first_poll(self, wait_for_discovery: float = 0.0) -> None:
        """Begin the first poll now, on a thread of its own; ``run`` takes it over, with the runs it
        read so far. The TUI calls this before it imports Textual: the reading then begins during
        the UI's start-up instead of after it.

        ``wait_for_discovery``: return once the runs are found, or after this many seconds if that
        is sooner. Beside Textual's import, which holds the GIL, a 100-run sweep's discovery (~35 ms
        alone) took ~0.2 s; a tree so big that its
        discovery takes longer goes on being discovered while the UI starts."""
        self._first_poll = _FirstPoll(self)
        self._first_poll.discovered.wait(wait_for_discovery)

    def _rescan_if_due(self) -> None:
        if self._rescan_requested.is_set() or time.monotonic() >= self._next_rescan:
            self._rescan_requested.clear()
            started = time.monotonic()
            with _no_cyclic_gc():
                self._rescan()
            took = time.monotonic() - started
            # rescan_interval 0 (tests, the benchmarks): at every poll, whatever it costs.
            factor = RESCAN_COST_FACTOR_OBSERVED if self.watchdog_active else RESCAN_COST_FACTOR
            wait = max(self.rescan_interval, factor * took) if self.rescan_interval > 0 else 0.0
            self._next_rescan = time.monotonic() + wait

    def run(self, on_update: Callable[[list[RunStatus]], None], stop: threading.Event) -> None:
        """Poll until `stop` is set; call `on_update` whenever any run's status changed."""
        observer = None
        previous: list[RunStatus] | None = None
        previous_notes: tuple = ((), (), ())
        first, self._first_poll = self._first_poll, None
        if self.mirrors is not None:
            _stop_mirrors_with(stop, self.mirrors)
        try:
            while not stop.is_set():
                # The first poll of a big tree takes seconds (200 runs x 100k points: ~6 s):
                # show each run as soon as it is read rather than all of them at the end.
                if first is not None:
                    taken = first.take(on_update, stop)
                    first = None
                    if taken is None:
                        break  # stopped while it was still reading
                    statuses = taken
                else:
                    statuses = self.poll_once(on_progress=on_update if previous is None else None)
                # What is said beside the runs (links not followed, a bucket not listed) changes alone too.
                notes = (self.unplaced_errors, tuple(self.skipped_links.items()), tuple(self.walk_limits.items()))
                if (
                    previous is None
                    or len(statuses) != len(previous)
                    or any(a is not b for a, b in zip(statuses, previous, strict=True))
                    or notes != previous_notes
                ):
                    on_update(statuses)
                    self.updated = self.polls
                self.reported = self.polls
                previous_notes = notes
                if previous is None and self.use_watchdog:
                    # After the first update: adding inotify watches to a big tree takes a while
                    # and must not delay the first screenful.
                    observer = self._start_observer()
                previous = statuses
                self._sleep(stop)
        finally:
            if observer is not None:
                observer.stop()
                observer.join(timeout=2.0)
            self.watchdog_active = False

    # ------------------------------------------------------------------ discovery

    def _rescan(self) -> None:
        mirror_errors = self.mirrors.sync(strict=self.strict) if self.mirrors is not None else []
        if self.mirrors is not None:  # the runs whose objects the pass fetched are read at this poll
            self._schedule.touched(*self.mirrors.written)
        if self.mirrors is not None and self.mirrors.behind:
            self._rescan_requested.set()  # what a short pass left is fetched by the next poll's
        found: dict[Path, RunInfo] = {}
        skipped: dict[str, str] = {}
        limits: dict[str, str] = {}
        for path in self.paths:
            try:
                infos = discover_runs(
                    [path], cache=self._cache, strict=self.strict, watched=self.paths, keep_bad_manifests=True
                )
            except BadInput:
                if self.strict:
                    raise
                # A watched directory deleted mid-session drops its runs; the TUI keeps going.
                continue
            finally:
                skipped.update(self._cache.skipped_links)
                limits.update(self._cache.walk_limits)
            for info in infos:
                found.setdefault(info.path, info)
        self.skipped_links = skipped
        self.walk_limits = limits
        vanished = {path: tracked for path, tracked in self._runs.items() if path not in found}
        for path in vanished:
            del self._runs[path]
        for path, info in found.items():
            tracked = self._runs.get(path)
            if tracked is None:
                tracked = _moved_run(info, vanished)
                if tracked is not None:
                    self._runs[path] = tracked
            before = tracked.info if tracked is not None else None
            if tracked is None:  # its settings are read at its first update, not before the first rows
                tracked = self._runs[path] = WatchedRun.of(info)
            else:
                tracked.rediscovered(info)
                tracked.refresh_settings()
            if tracked.info is not before or tracked.settings_changed:
                self._schedule.mark_due(path)  # its files or settings changed: read at this poll
        # New runs keep discovery order; the dict preserves insertion order.
        self._runs = {path: self._runs[path] for path in found}
        self._place_mirror_errors(mirror_errors)
        self._schedule.keep_only(self._runs.keys())

    def _place_mirror_errors(self, errors: list[SourceError]) -> None:
        placed, self.unplaced_errors = place_mirror_errors(errors, [shown_path(path) for path in self._runs])
        if placed != self._mirror_errors:
            for path in self._runs:  # a run whose bucket objects failed, or fail no more: read at this poll
                if placed.get(shown_path(path)) != self._mirror_errors.get(shown_path(path)):
                    self._schedule.mark_due(path)
        self._mirror_errors = placed

    # ------------------------------------------------------------------ per-run update

    def _scan_processes(self, runs: list[WatchedRun]) -> ProcessTable:
        """One scan of /proc for every run (core.watch.run_state), on this thread, never the UI's."""
        return _scan_processes(self.scanner, self.paths, runs)

    def _update(self, tracked: WatchedRun, now: float, processes: ProcessTable, note: str | None) -> RunStatus:
        """One run's poll (core.watch.watched_run): its own fault boundary is poll_once's."""
        return tracked.update(self.settings, now, processes, self._mirror_errors, note)

    # ------------------------------------------------------------------ waiting

    def _sleep(self, stop: threading.Event) -> None:
        deadline = time.monotonic() + self.poll_interval
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if self._wake.wait(min(remaining, STOP_CHECK_SECS)):
                time.sleep(WAKE_COALESCE_SECS)
                self._wake.clear()
                return

    def _start_observer(self):
        """A watchdog Observer on the watched paths (core.watch.fs_wakeups), or None where it cannot run."""
        observer = start_observer(self.paths, lambda rescan, path: self.wake(rescan=rescan, path=path))
        self.watchdog_active = observer is not None
        return observer


def _moved_run(info: RunInfo, vanished: dict[Path, WatchedRun]) -> WatchedRun | None:
    """The vanished run whose event or W&B files now belong to the run at ``info.path``, carried over.

    Files appear in whatever order a trainer and its user write them: ``out/runs/`` with its
    first events can land before ``out/triage.toml`` (or the first checkpoint), so the run is
    ``out/runs`` for a moment and then ``out``. It is one run: its points are kept (not read
    again) and it keeps what it had seen, so the TUI neither rings twice nor redraws it from
    nothing. Returns None when no vanished run shares a file.
    """
    files = info.scalar_file_set()
    for old_path, old in vanished.items():
        if not files.isdisjoint(old.info.scalar_file_set()):
            del vanished[old_path]
            old.moved_to(info)
            return old
    return None


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The cyclic collector paused: a rescan builds objects that stay (10 000 runs' readers and
    settings), and the collections their allocations set off walked all of them again and again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _scan_processes(scanner: ProcessScanner, roots: Sequence[Path], runs: list[WatchedRun]) -> ProcessTable:
    """One scan of /proc for the runs under ``roots`` (core.watch.run_state)."""
    if not runs:
        return ProcessTable({}, scanner.hostname, False)
    pids = event_file_pids((path for tracked in runs for path in tracked.info.event_files), scanner.hostname)
    try:
        return scanner.scan(roots, pids)
    except Exception:  # noqa: BLE001 - the processes unseen: every run keeps the silence rule (unknown)
        return ProcessTable({}, scanner.hostname, False)


def scan_run(info: RunInfo, *, clock: Callable[[], float] = time.time) -> RunStatus:
    """One run, already discovered, read once and reported as `scan` reports it (a strict watcher's
    first poll, without the walk); its [serving] is not followed: `check` reads its serving
    sources itself (core/diagnose/evidence.py). The fault boundary is a poll's: a failure is the run's error."""
    settings = WatchSettings(strict=True, follow_serving=False, clock=clock)
    tracked = WatchedRun.of(info)  # its settings are read by its update, inside the fault boundary
    processes = _scan_processes(ProcessScanner(), [info.path], [tracked])
    try:
        return tracked.update(settings, clock(), processes)
    except Exception as err:  # noqa: BLE001 - the fault boundary, as in poll_once
        return failed_status(info, settings.vocab_size, err)
