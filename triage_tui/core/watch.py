"""The headless live monitor: polls event files, rescans for runs, recomputes flags.

Polling is what guarantees correctness: inotify never fires for writes made by another NFS
client, and NFS attribute caching delays size changes (gorakhargosh/watchdog issue #504),
so every ``poll_interval`` each known event file is stat'ed and its appended bytes read
(core.sources.RunSources: event files, W&B run files, consoles, trainer_state.json), and every ``rescan_interval`` the
given paths are walked again for new runs and files (core.runs, cheap thanks to its listing
cache). A watchdog Observer, where it works, only calls ``wake()`` so a local write shows up
at once instead of within a poll interval; ``use_watchdog=False`` (``--poll``) leaves polling
alone.

``triage scan`` is one ``poll_once``; the TUI runs ``Watcher.run`` in a worker thread.
An idle ``poll_once`` (nothing appended) costs one stat per event file, one scan of /proc for
all runs (core.run_state: whether each run's writer is alive here; what a process holds open is
read again only every ``REFRESH_SECS``) plus a few lookups per run: what depends on the values
(core.derive ``derive``) is recomputed only when a run's scalars or settings changed
(``RunScalars.version``); the run's state and the flags of the clock and the run's files
(``flags_at``: ``stalled`` and ``crashed`` among them) are cheap and made every poll.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triage_tui.core.derive import DEFAULT_FLUSH_SECS, Derived, RunSettings, derive, flags_at, serving_flags_of
from triage_tui.core.errors import BadInput, SourceError
from triage_tui.core.events.reader import RunEvents
from triage_tui.core.formats.specforge_output import BestMeta, read_best_meta
from triage_tui.core.parallel_read import MIN_PARALLEL_BYTES, read_runs, release_early_helpers, worth_a_helper
from triage_tui.core.run_state import (
    ProcessScanner,
    ProcessTable,
    RunState,
    console_error,
    event_file_pids,
    final_step,
    read_console_tail,
    run_state,
)
from triage_tui.core.run_status import RunStatus, failed_status, manifest_error
from triage_tui.core.runs.config import read_config
from triage_tui.core.runs.discover import discover_runs
from triage_tui.core.runs.info import RunInfo
from triage_tui.core.runs.listing import ListingCache
from triage_tui.core.runs.names import (
    CONFIG_NAME,
    MANIFEST_NAME,
    TRAINER_STATE_NAME,
    is_event_file_name,
    is_wandb_file_name,
)
from triage_tui.core.runs.remote import Mirrors, shown_path
from triage_tui.core.series import RunScalars
from triage_tui.core.serving.evidence import ServingEvidence
from triage_tui.core.serving.read import ServingWatch, with_profile
from triage_tui.core.signals.chance import (
    config_vocab_problems,
    named_drafter_config,
    named_drafter_config_path,
    resolve_vocab_size,
)
from triage_tui.core.signals.flags import Flag, worst_severity
from triage_tui.core.sources import RunSources, draft_vocab_from_config

# A burst of watchdog events (tensorboardX issues 4 writes per record) is coalesced into one
# poll: after a wake-up the watcher waits this long before polling.
WAKE_COALESCE_SECS = 0.05
# Longest sleep between checks of the stop event, so a TUI quits promptly.
STOP_CHECK_SECS = 0.25
# How often a long first poll reports the runs read so far (a few redraws a second at most).
PROGRESS_SECS = 0.25
PROGRESS_MAX_SECS = 2.0  # the interval doubles after each report, up to this


@dataclass
class _Tracked:
    """The watcher's state for one run."""

    info: RunInfo
    events: RunSources
    config_key: tuple[str, int, int] | None = None
    config: dict | None = None
    state_key: tuple[str, int, int] | None = None
    state_vocab: int | None = None  # SpecForge 0.2.0: draft vocab of the newest training_state.pt
    valid_key: Path | None = None  # the dumps directory `valid` was measured from
    valid: Any = None  # formats.hidden_states.LossMaskFraction of the run's dumps, or None
    version: int | None = None  # scalars.version the value flags were computed for
    settings_changed: bool = True  # manifest, config or vocab flag changed: recompute
    wandb_config_version: int = -1  # the W&B config the settings were computed from
    config_problems: tuple[SourceError, ...] = ()  # why config.json (or its vocab size) was not used
    state_problem: SourceError | None = None  # why the newest training_state.pt could not be read
    # The config.json of the drafter triage.toml names: its draft vocab is the run's when nothing
    # closer says it (a fine-tune keeps its starting drafter's head). Re-read when it changes.
    drafter_key: tuple[str, int, int] | None = None
    drafter_config: dict | None = None
    drafter_problems: tuple[SourceError, ...] = ()
    # SpecForge's <run_id>.best_meta.json: the step its trainer chose as best. Re-read when it changes.
    best_meta_key: tuple[str, int, int] | None = None
    best_meta: BestMeta | None = None
    best_meta_problem: SourceError | None = None
    seen_live: bool = False  # new data arrived after the first read, in this session
    derived: Derived | None = None  # core.derive of the scalars at `version` and the settings
    status: RunStatus | None = None
    serving: ServingWatch | None = None
    serving_sources: tuple[str, ...] = ()
    serving_flags: tuple[Flag, ...] = ()
    serving_flags_for: tuple[ServingEvidence | None, int | None] = (None, None)  # (evidence, scalars.version)
    # The crash line the run's newest console ends in (core.run_state.console_error), and the
    # console's read mark it was found at (ConsoleLogs.newest): read again only when that moves.
    console_key: tuple | None = None
    console_error: str | None = None


def tui_watcher(
    paths: Sequence[str | Path],
    *,
    vocab_size: int | None = None,
    poll_interval: float = 1.0,
    rescan_interval: float = 5.0,
    use_watchdog: bool = True,
    clock: Callable[[], float] = time.time,
    mirrors: Mirrors | None = None,
) -> Watcher:
    """The TUI's watcher (the app builds it, or `triage` before it imports Textual): a sweep's first
    load is decoded off this process, so the UI thread keeps the GIL."""
    return Watcher(
        paths,
        vocab_size=vocab_size,
        poll_interval=poll_interval,
        rescan_interval=rescan_interval,
        use_watchdog=use_watchdog,
        clock=clock,
        parse_in_helpers=True,
        mirrors=mirrors,
    )


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
        parallel_min_bytes: int | None = MIN_PARALLEL_BYTES,
        parse_in_helpers: bool = False,
        follow_serving: bool = True,
        mirrors: Mirrors | None = None,
        scanner: ProcessScanner | None = None,
    ) -> None:
        self.paths = [Path(p) for p in (paths or ["."])]
        # The URLs among the PATHs, mirrored into local trees (runs/remote.py): synced once per
        # rescan, on the thread that polls, before discovery walks their trees.
        self.mirrors = mirrors
        # The last pass's objects that failed, by the run they belong to (its shown path: the
        # URL); ``unplaced_errors``: those under no run (a prefix that could not be listed).
        self._mirror_errors: dict[str, tuple[SourceError, ...]] = {}
        self.unplaced_errors: tuple[SourceError, ...] = ()
        # Runs never read, holding at least this many bytes together, are read on two cores
        # (core/parallel_read.py); None: always in this process.
        self.parallel_min_bytes = parallel_min_bytes
        # True (the TUI): those runs are parsed only in helper processes, one per core, never in
        # this process, whose UI thread would otherwise wait for the GIL while a run is decoded.
        self.parse_in_helpers = parse_in_helpers
        self.vocab_size = vocab_size
        self.poll_interval = poll_interval
        self.rescan_interval = rescan_interval
        self.use_watchdog = use_watchdog
        # `scan`: a PATH that does not exist or cannot be listed is BadInput; the TUI keeps going.
        # Either way a run's own bad file is an error of that run (RunStatus.errors), never BadInput.
        self.strict = strict
        self.flush_secs = flush_secs
        self.clock = clock
        # triage.toml [serving] followed with the runs; `check` reads it itself, to the end, once.
        self.follow_serving = follow_serving
        # Scans /proc once a poll for every run's writer (core.run_state); a test gives one over a made-up /proc.
        self.scanner = scanner if scanner is not None else ProcessScanner()
        self.watchdog_active = False  # True while an Observer delivers wake-ups
        self.skipped_links: dict[str, str] = {}  # symlinks out of the watched paths, not followed: link -> target
        self._cache = ListingCache()
        self._runs: dict[Path, _Tracked] = {}
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

    def wake(self, *, rescan: bool = False) -> None:
        """Poll now instead of at the next interval (a watchdog hint; never required)."""
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

            def update(i: int) -> None:
                nonlocal reported, interval, done, reports
                try:
                    statuses[i] = self._update(runs[i], now, processes)
                except Exception as err:  # noqa: BLE001 - the fault boundary: one run's failure stays on it
                    statuses[i] = failed_status(runs[i].info, self.vocab_size, err)
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

            fresh = [i for i, tracked in enumerate(runs) if tracked.version is None]
            # The helper reads event files (RunSources.events); W&B files are read here, in update().
            if self.parallel_min_bytes is not None and worth_a_helper(
                [runs[i].events.events for i in fresh], self.parallel_min_bytes
            ):

                def read(j: int, events: RunEvents) -> None:
                    runs[fresh[j]].events.events = events  # the helper's copy, read; the poll below is a stat
                    update(fresh[j])

                read_runs([runs[i].events.events for i in fresh], read, here=not self.parse_in_helpers)
            release_early_helpers()  # the TUI's, started before it imported Textual, if read_runs did not take them
            for i in range(len(runs)):
                if statuses[i] is None:
                    update(i)
            self.polls += 1
            return [status for status in statuses if status is not None]

    def start_first_poll(self, wait_for_discovery: float = 0.0) -> None:
        """Begin the first poll now, on a thread of its own; ``run`` takes it over, with the runs it
        read so far. The TUI calls this before it imports Textual: the helpers' reading then overlaps
        the UI's start-up (~0.45 s on a 100-run sweep) instead of following it.

        ``wait_for_discovery``: return once the runs are found, or after this many seconds if that
        is sooner. Beside Textual's import, which holds the GIL, a 100-run sweep's discovery (~35 ms
        alone) took ~0.2 s while both helpers waited for their first runs; a tree so big that its
        discovery takes longer goes on being discovered while the UI starts."""
        self._first_poll = _FirstPoll(self)
        self._first_poll.discovered.wait(wait_for_discovery)

    def _rescan_if_due(self) -> None:
        if self._rescan_requested.is_set() or time.monotonic() >= self._next_rescan:
            self._rescan_requested.clear()
            self._rescan()
            self._next_rescan = time.monotonic() + self.rescan_interval

    def run(self, on_update: Callable[[list[RunStatus]], None], stop: threading.Event) -> None:
        """Poll until `stop` is set; call `on_update` whenever any run's status changed."""
        observer = None
        previous: list[RunStatus] | None = None
        previous_notes: tuple = ((), ())
        first, self._first_poll = self._first_poll, None
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
                notes = (self.unplaced_errors, tuple(self.skipped_links.items()))
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
        found: dict[Path, RunInfo] = {}
        skipped: dict[str, str] = {}
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
            for info in infos:
                found.setdefault(info.path, info)
        self.skipped_links = skipped
        vanished = {path: tracked for path, tracked in self._runs.items() if path not in found}
        for path in vanished:
            del self._runs[path]
        for path, info in found.items():
            tracked = self._runs.get(path)
            if tracked is None:
                tracked = self._moved_run(info, vanished)
            if tracked is None:
                events = RunSources()
                events.set_files(*_files(info))
                tracked = _Tracked(info, events)
                self._runs[path] = tracked
            elif info != tracked.info:
                if _files(info) != _files(tracked.info):
                    tracked.events.set_files(*_files(info))
                if info.manifest != tracked.info.manifest or info.artifacts != tracked.info.artifacts:
                    tracked.settings_changed = True
                tracked.info = info
            self._refresh_config(tracked)
        # New runs keep discovery order; the dict preserves insertion order.
        self._runs = {path: self._runs[path] for path in found}
        self._place_mirror_errors(mirror_errors)

    def _place_mirror_errors(self, errors: list[SourceError]) -> None:
        """Each object that failed said on the run whose tree holds it (the deepest such run)."""
        placed: dict[str, list[SourceError]] = {}
        unplaced: list[SourceError] = []
        runs = sorted((shown_path(path) for path in self._runs), key=len, reverse=True)
        for error in errors:
            owner = next((run for run in runs if error.path.startswith(run.rstrip("/") + "/")), None)
            if owner is None:
                unplaced.append(error)
            else:
                placed.setdefault(owner, []).append(error)
        self._mirror_errors = {run: tuple(found) for run, found in placed.items()}
        self.unplaced_errors = tuple(unplaced)

    def _moved_run(self, info: RunInfo, vanished: dict[Path, _Tracked]) -> _Tracked | None:
        """The vanished run whose event or W&B files now belong to the run at ``info.path``, carried over.

        Files appear in whatever order a trainer and its user write them: ``out/runs/`` with its
        first events can land before ``out/triage.toml`` (or the first checkpoint), so the run is
        ``out/runs`` for a moment and then ``out``. It is one run: its points are kept (not read
        again) and it keeps what it had seen, so the TUI neither rings twice nor redraws it from
        nothing. Returns None when no vanished run shares a file.
        """
        files = _file_set(info)
        for old_path, old in vanished.items():
            if not files.isdisjoint(_file_set(old.info)):
                del vanished[old_path]
                old.events.set_files(*_files(info))
                old.info = info
                old.settings_changed = True
                self._runs[info.path] = old
                return old
        return None

    def _refresh_config(self, tracked: _Tracked) -> None:
        """Re-read config.json only when its (mtime, size) changed."""
        path = tracked.info.artifacts.config_json
        key = _file_key(path)
        if key != tracked.config_key:
            tracked.config_key = key
            problems: list[str] = []
            tracked.config = read_config(path, problems) if key is not None else None
            problems += config_vocab_problems(tracked.config)
            tracked.config_problems = tuple(SourceError("config", str(path), problem) for problem in problems)
            tracked.settings_changed = True
        self._refresh_drafter_config(tracked)
        self._refresh_training_state(tracked)
        self._refresh_best_meta(tracked)

    def _refresh_drafter_config(self, tracked: _Tracked) -> None:
        """Re-read the named drafter's config.json only when its path, mtime or size changed."""
        path = named_drafter_config_path(tracked.info.manifest)
        key = _file_key(path)
        if key == tracked.drafter_key:
            return
        problems: list[str] = []
        tracked.drafter_key = key
        tracked.drafter_config = named_drafter_config(tracked.info.manifest, problems) if key is not None else None
        tracked.drafter_problems = tuple(SourceError("config", str(path), problem) for problem in problems)
        tracked.settings_changed = True

    def _refresh_training_state(self, tracked: _Tracked) -> None:
        """A run without config.json (SpecForge 0.2.0): the draft vocab from its newest
        training_state.pt, read (weights-only) once per new file, never on the UI thread."""
        path = tracked.info.artifacts.training_state
        if path is None or tracked.config is not None:
            if tracked.state_key is not None:
                tracked.state_key, tracked.state_vocab, tracked.settings_changed = None, None, True
                tracked.state_problem = None
            return
        key = _file_key(path)
        if key is None or key == tracked.state_key:
            return
        from triage_tui.core.formats.training_state import read_training_state

        problem = None
        try:
            vocab = read_training_state(path).draft_vocab_size  # None: a classic state holds no drafter
        except BadInput as err:
            what = f"{err.what}; the chance line does not use it"
            vocab, problem = None, SourceError("training_state", err.path or str(path), what)
        except Exception as err:  # noqa: BLE001 - a reader bug on one run's file must not stop the watch
            what = f"cannot read it: {type(err).__name__}: {err}"
            vocab, problem = None, SourceError("training_state", str(path), what)
        tracked.state_key, tracked.state_vocab, tracked.settings_changed = key, vocab, True
        tracked.state_problem = problem

    def _refresh_best_meta(self, tracked: _Tracked) -> None:
        """Re-read SpecForge's best_meta.json only when its path, mtime or size changed: the trainer
        replaces it (atomically) each time an evaluation beats the best."""
        path = tracked.info.artifacts.best_meta
        key = _file_key(path)
        if key == tracked.best_meta_key:
            return
        tracked.best_meta_key, tracked.best_meta, tracked.best_meta_problem = key, None, None
        tracked.settings_changed = True
        if path is None or key is None:
            return
        try:
            tracked.best_meta = read_best_meta(path)
        except BadInput as err:
            tracked.best_meta_problem = SourceError("specforge", err.path or str(path), err.what)

    # ------------------------------------------------------------------ per-run update

    def _scan_processes(self, runs: list[_Tracked]) -> ProcessTable:
        """One scan of /proc for every run (core.run_state), on this thread, never the UI's."""
        scanner = self.scanner
        if not runs:
            return ProcessTable({}, scanner.hostname, False)
        pids = event_file_pids((path for tracked in runs for path in tracked.info.event_files), scanner.hostname)
        try:
            return scanner.scan(self.paths, pids)
        except Exception:  # noqa: BLE001 - the processes unseen: every run keeps the silence rule (unknown)
            return ProcessTable({}, scanner.hostname, False)

    def _run_state(self, tracked: _Tracked, derived: Derived, now: float, processes: ProcessTable) -> RunState:
        """Whether the run's writer is alive here, from the poll's process table and what the run's
        files already read say (the W&B exit record, the newest trainer_state.json, the console's end)."""
        wandb = tracked.events.wandb
        trainer = tracked.events.trainer_state
        return run_state(
            tracked.info.path,
            processes=processes,
            activity=derived.activity,
            now=now,
            event_files=tracked.info.event_files,
            wandb_exit_code=wandb.exit_code if wandb is not None else None,
            console_error_of=lambda: self._console_error(tracked),
            final_save=trainer is not None and final_step(trainer.global_step, trainer.max_steps),
            flush_secs=self.flush_secs,
        )

    def _console_error(self, tracked: _Tracked) -> str | None:
        """The crash line the run's newest console ends in, its tail read again only when the
        console reader read more of it (an idle ended run's console is not read every poll)."""
        console = tracked.events.console
        newest = console.newest() if console is not None else None
        if newest != tracked.console_key:
            line = None
            if newest is not None:
                try:
                    line = console_error(read_console_tail(newest[0]))
                except OSError:
                    line = None  # the console's own reader says why it cannot be read (the run's errors)
            tracked.console_key, tracked.console_error = newest, line
        return tracked.console_error

    def _update(self, tracked: _Tracked, now: float, processes: ProcessTable) -> RunStatus:
        tracked.events.poll()  # what fails is on tracked.events.errors
        scalars = tracked.events.scalars
        wandb = tracked.events.wandb
        if wandb is not None and wandb.config_version != tracked.wandb_config_version:
            tracked.wandb_config_version = wandb.config_version
            tracked.settings_changed = True
        recompute = tracked.settings_changed or scalars.version != tracked.version
        if recompute:
            if tracked.version is not None and scalars.version != tracked.version:
                tracked.seen_live = True
            self._recompute(tracked, scalars)
        derived = tracked.derived
        assert derived is not None  # set by the first _recompute, which every run's first poll does
        source_errors = tuple(f"{path}: {what}" for path, what in tracked.events.problems.items())
        errors = tuple(
            e
            for e in (
                manifest_error(tracked.info),
                *tracked.config_problems,
                *tracked.drafter_problems,
                tracked.state_problem,
                tracked.best_meta_problem,
                *tracked.events.errors,
                *(self._mirror_errors.get(shown_path(tracked.info.path), ()) if self._mirror_errors else ()),
            )
            if e is not None
        )
        serving, serving_errors, serving_failures = self._poll_serving(tracked)
        state = self._run_state(tracked, derived, now, processes)
        flags = flags_at(
            derived,
            now=now,
            flush_secs=self.flush_secs,
            seen_live=tracked.seen_live,
            damaged=tracked.events.damaged,
            errors=errors,
            serving=self._serving_flags(tracked, serving, scalars),
            state=state,
        )
        errors += serving_failures
        if (
            not recompute
            and tracked.status is not None
            and flags == tracked.status.flags
            and state == tracked.status.state
            and serving is tracked.status.serving
            and serving_errors == tracked.status.serving_errors
            and errors + serving_failures == tracked.status.errors
        ):
            return tracked.status  # nothing changed: the same object, so the TUI skips a redraw
        status = worst_severity(flags)  # an unreadable file is a warning flag: the run says so, the others go on
        if errors and not scalars.series and serving is None:
            status = "error"  # nothing of the run could be read: no health to judge
        tracked.status = RunStatus(
            info=tracked.info,
            status=status,
            vocab_size=derived.vocab_size,
            vocab_size_source=derived.vocab_size_source,
            chance_loss=derived.chance.value,
            chance=derived.chance,
            last_step=derived.last_step,
            last_update=scalars.last_wall_time,
            metrics=derived.metrics,
            flags=flags,
            loss_tag=derived.loss_tag,
            accuracy_tag=derived.accuracy_tag,
            scalars=scalars,
            serving=serving,
            serving_errors=serving_errors,
            trainer=derived.trainer,
            source_errors=source_errors,
            start=derived.start,
            errors=errors,
            best=derived.best,
            state=state,
        )
        return tracked.status

    def _serving_flags(
        self, tracked: _Tracked, serving: ServingEvidence | None, scalars: RunScalars
    ) -> tuple[Flag, ...]:
        """Collapsed serving acceptance, or serving far from the run's own estimate, as flags."""
        if serving is None:
            return ()
        evidence, version = tracked.serving_flags_for
        if evidence is not serving or version != scalars.version:
            tracked.serving_flags = serving_flags_of(serving, scalars)
            tracked.serving_flags_for = (serving, scalars.version)
        return tracked.serving_flags

    def _poll_serving(
        self, tracked: _Tracked
    ) -> tuple[ServingEvidence | None, tuple[str, ...], tuple[SourceError, ...]]:
        """The run's [serving] sources, followed: new log lines, a scrape when due (this thread, never the UI's)."""
        manifest = tracked.info.manifest
        sources = tuple(manifest.serving_sources) if manifest is not None and self.follow_serving else ()
        if self.follow_serving:
            # The profile ModelOpt exports beside the drafter the run names, else beside the newest it saved.
            saved = tracked.info.artifacts.checkpoints
            named = manifest.checkpoint if manifest is not None else None
            sources = tuple(with_profile(sources, named if named is not None else (saved[-1] if saved else None)))
        if sources != tracked.serving_sources:
            tracked.serving_sources = sources
            # The TUI scrapes a metrics URL on a thread of its own; scan (strict) waits for it once.
            pages = manifest.serving_metrics_pages if manifest is not None else ()
            tracked.serving = (
                ServingWatch(sources, clock=self.clock, background=not self.strict, metrics_pages=pages)
                if sources
                else None
            )
        # What an untrusted triage.toml named and was not used, then each failing source, one line each.
        notices = (
            tuple(e.line() for e in manifest.untrusted_errors()) if manifest is not None and self.follow_serving else ()
        )
        if tracked.serving is None:
            return None, notices, ()
        evidence, errors = tracked.serving.poll()
        return evidence, notices + tuple(e.line() for e in errors), tuple(errors)

    def _valid_fraction(self, tracked: _Tracked):
        """The loss-mask fraction of the run's dumps (triage.toml data, else discovered), read once
        per dumps directory; None when there are none or they carry no loss mask."""
        manifest = tracked.info.manifest
        path = manifest.data if manifest is not None and manifest.data is not None else tracked.info.artifacts.dumps
        if path != tracked.valid_key:
            tracked.valid_key, tracked.valid = path, None
            if path is not None:
                from triage_tui.core.formats.hidden_states import read_loss_mask_fraction

                try:
                    tracked.valid = read_loss_mask_fraction(path)
                except BadInput:
                    tracked.valid = None  # unreadable dumps: ln V with the convention said; `check` reports them
        return tracked.valid

    def _recompute(self, tracked: _Tracked, scalars: RunScalars) -> None:
        manifest = tracked.info.manifest
        vocab_size, source = resolve_vocab_size(
            self.vocab_size,
            manifest,
            tracked.config,
            tracked.state_vocab,
            wandb_vocab=draft_vocab_from_config(tracked.events.config),
            drafter_config=tracked.drafter_config,
        )
        settings = RunSettings(
            vocab_size=vocab_size,
            vocab_size_source=source,
            manifest=manifest,
            checkpoints=tracked.info.artifacts.checkpoints,
            best_meta=tracked.best_meta,
            valid_fraction=lambda: self._valid_fraction(tracked),
        )
        tracked.derived = derive(scalars, settings)
        tracked.version = scalars.version
        tracked.settings_changed = False

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
        """A watchdog Observer on the watched paths, or None where it cannot run."""
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:
            return None
        watcher = self

        class _Hint(FileSystemEventHandler):
            def on_any_event(self, event) -> None:  # runs on the observer's thread
                watcher._on_fs_event(event)

        observer = Observer()
        try:
            for path in self.paths:
                if path.is_dir():
                    observer.schedule(_Hint(), str(path), recursive=True)
            observer.start()
        except (OSError, RuntimeError):
            # inotify watch/instance limits (ENOSPC / EMFILE): polling alone still works.
            return None
        self.watchdog_active = True
        return observer

    def _on_fs_event(self, event) -> None:
        """Wake for event files, manifests, configs and new directories; ignore the rest
        (a hidden-state dump being written must not turn into a poll storm)."""
        if event.event_type in ("opened", "closed_no_write"):
            # Our own polls open and close every event file; waking on those would poll
            # again at once, forever (measured: ~19 polls/s, 12 % of a core at 200 runs).
            return
        for raw in (getattr(event, "src_path", ""), getattr(event, "dest_path", "")):
            name = os.path.basename(os.fsdecode(raw)) if raw else ""
            if not name:
                continue
            created = event.event_type in ("created", "moved", "deleted")
            if is_event_file_name(name) or is_wandb_file_name(name) or name == TRAINER_STATE_NAME:
                self.wake(rescan=created)
                return
            if name in (MANIFEST_NAME, CONFIG_NAME) or (event.is_directory and created):
                self.wake(rescan=True)
                return


def _file_key(path: Path | None) -> tuple[str, int, int] | None:
    """(path, mtime, size) of a file a run's settings are read from, to re-read it only when it
    changed; None when there is none or it cannot be looked at."""
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return str(path), stat.st_mtime_ns, stat.st_size


def _files(info: RunInfo) -> tuple[tuple[Path, ...], tuple[Path, ...], tuple[Path, ...], Path | None]:
    """A run's scalar files, as RunSources.set_files takes them: event files, W&B files, consoles,
    the newest checkpoint's trainer_state.json."""
    return info.event_files, info.wandb_files, info.console_files, info.artifacts.trainer_state


def _file_set(info: RunInfo) -> set[Path]:
    """Every scalar file of a run, as one set (a run that moved is known by them)."""
    state = info.artifacts.trainer_state
    return {*info.event_files, *info.wandb_files, *info.console_files, *((state,) if state is not None else ())}
