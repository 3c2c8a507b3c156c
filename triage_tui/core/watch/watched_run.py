"""One watched run: its sources, the settings read from its files, and its update into a RunStatus.

The watcher (core/watch/watcher.py) finds the runs, scans the processes once a poll and runs the loop;
each run keeps here what it has read and re-reads a file only when its (path, mtime, size)
changed: config.json (the draft vocab), the config.json of the drafter its triage.toml names,
SpecForge 0.2.0's newest training_state.pt, SpecForge's best_meta.json, the dumps' loss-mask
fraction, the tail of its newest console (a crash line), its serving sources. ``update`` reads
what its sources appended, re-derives what depends on the values only when they or the settings
changed (core.watch.derive), and returns the same RunStatus object when nothing a user sees changed,
so the TUI skips a redraw. Everything here runs on the watcher's thread, never the UI's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triage_tui.core import bounds
from triage_tui.core.errors import BadInput, SourceError
from triage_tui.core.read.runs.info import RunInfo
from triage_tui.core.read.runs.remote import shown_path
from triage_tui.core.read.sources import RunSources, draft_vocab_from_config
from triage_tui.core.read.trackers.frameworks import framework_of_run, trainer_of
from triage_tui.core.read.trackers.stores import first_store, recorded_end, recorded_running
from triage_tui.core.series import RunScalars, display_series
from triage_tui.core.watch.derive import DEFAULT_FLUSH_SECS, Derived, RunSettings, derive, flags_at, serving_flags_of
from triage_tui.core.watch.process_table import ProcessTable
from triage_tui.core.watch.run_state import RunState, console_error, final_step, read_console_tail, run_state
from triage_tui.core.watch.run_status import RunStatus, manifest_error
from triage_tui.core.watch.serving.evidence import ServingEvidence
from triage_tui.core.watch.serving.read import ServingWatch, with_profile
from triage_tui.core.watch.setting_files import SettingFiles
from triage_tui.core.watch.signals.chance import (
    resolve_vocab_size,
)
from triage_tui.core.watch.signals.flags import Flag, worst_severity
from triage_tui.core.watch.signals.kinds import RunHealth


@dataclass(frozen=True)
class WatchSettings:
    """What every run of one watcher is read and judged with (the Watcher's options)."""

    vocab_size: int | None = None  # --vocab-size: overrides what the run's files say
    flush_secs: float = DEFAULT_FLUSH_SECS
    # `scan` (True): a [serving] metrics URL is scraped once and waited for; the TUI scrapes on a thread.
    strict: bool = False
    follow_serving: bool = True  # triage.toml [serving] followed with the run (`check` reads it itself)
    # The TUI: each series held to this many points (ScalarSeries.thin), and each source of a run to
    # bounds.MAX_DISPLAY_SERIES series (core.series.display_series), so memory stays bounded however
    # long a run logs and however many tags it invents; None (`scan`): every point and series, as read.
    max_points: int | None = None
    clock: Callable[[], float] = time.time


@dataclass
class WatchedRun:
    """The watcher's state for one run."""

    info: RunInfo
    events: RunSources
    files: SettingFiles = field(default_factory=SettingFiles)  # config.json, training_state.pt, ...
    valid_key: Path | None = None  # the dumps directory `valid` was measured from
    valid: Any = None  # formats.hidden_states.LossMaskFraction of the run's dumps, or None
    version: int | None = None  # scalars.version the value flags were computed for
    settings_changed: bool = True  # manifest, config or vocab flag changed: recompute
    settings_read: bool = False  # its setting files were read once (at the first update, or a rescan's)
    wandb_config_version: int = -1  # the W&B config the settings were computed from
    seen_live: bool = False  # new data arrived after the first read, in this session
    derived: Derived | None = None  # core.watch.derive of the scalars at `version` and the settings
    status: RunStatus | None = None
    serving: ServingWatch | None = None
    serving_sources: tuple[str, ...] = ()
    serving_flags: tuple[Flag, ...] = ()
    serving_flags_for: tuple[ServingEvidence | None, int | None] = (None, None)  # (evidence, scalars.version)
    # The crash line the run's newest console ends in (core.watch.run_state.console_error), and the
    # console's read mark it was found at (ConsoleLogs.newest): read again only when that moves.
    console_key: tuple | None = None
    console_error: str | None = None
    series_left_out: bool = False  # a tag beyond bounds.MAX_DISPLAY_SERIES was not kept (the TUI's bound)

    @classmethod
    def of(cls, info: RunInfo) -> WatchedRun:
        """A run just found: its sources set to its files, nothing read yet."""
        events = RunSources()
        events.set_files(info.scalar_files, info.store_run)
        return cls(info, events)

    def moved_to(self, info: RunInfo) -> None:
        """The same run under another directory (``out/runs`` became ``out``): its points kept."""
        self.events.set_files(info.scalar_files, info.store_run)
        self.info = info
        self.settings_changed = True

    def rediscovered(self, info: RunInfo) -> None:
        """What discovery found of the run this rescan: new files followed, new settings re-derived."""
        if info != self.info:
            if info.scalar_files != self.info.scalar_files or info.store_run != self.info.store_run:
                self.events.set_files(info.scalar_files, info.store_run)
            if info.manifest != self.info.manifest or info.artifacts != self.info.artifacts:
                self.settings_changed = True
            self.info = info

    # ------------------------------------------------------------------ settings, from the run's files

    def refresh_settings(self) -> None:
        """Re-read each file the run's settings come from, where it changed."""
        self.settings_read = True
        if self.files.refresh(self.info):
            self.settings_changed = True

    def valid_fraction(self):
        """The loss-mask fraction of the run's dumps (triage.toml data, else discovered), read once
        per dumps directory; None when there are none or they carry no loss mask."""
        manifest = self.info.manifest
        path = manifest.data if manifest is not None and manifest.data is not None else self.info.artifacts.dumps
        if path != self.valid_key:
            self.valid_key, self.valid = path, None
            if path is not None:
                from triage_tui.core.formats.hidden_states import read_loss_mask_fraction

                try:
                    self.valid = read_loss_mask_fraction(path)
                except BadInput:
                    self.valid = None  # unreadable dumps: ln V with the convention said; `check` reports them
        return self.valid

    def recompute(self, scalars: RunScalars, vocab_flag: int | None) -> None:
        """What the values and the settings say (core.watch.derive), kept until either changes."""
        manifest = self.info.manifest
        vocab_size, source = resolve_vocab_size(
            vocab_flag,
            manifest,
            self.files.config.value[0],
            self.files.training_state.value[0],
            wandb_vocab=draft_vocab_from_config(self.events.config),
            drafter_config=self.files.drafter.value[0],
        )
        settings = RunSettings(
            vocab_size=vocab_size,
            vocab_size_source=source,
            manifest=manifest,
            checkpoints=self.info.artifacts.checkpoints,
            best_meta=self.files.best_meta.value[0],
            valid_fraction=self.valid_fraction,
        )
        self.derived = derive(scalars, settings)
        self.version = scalars.version
        self.settings_changed = False

    # ------------------------------------------------------------------ each poll

    def update(
        self,
        watch: WatchSettings,
        now: float,
        processes: ProcessTable,
        mirror_errors: Mapping[str, tuple] = {},
        read_note: str | None = None,
    ) -> RunStatus:
        """Read what the run's sources appended and report the run; the same RunStatus object as
        the last poll's when nothing in it changed. ``mirror_errors``: the objects of a bucket
        that failed, by the run (its URL) they belong to; ``read_note``: how often the watcher
        reads the run, when less often than every poll (core.watch.read_schedule)."""
        if not self.settings_read:
            self.refresh_settings()
        # What fails is on self.events.errors.
        if watch.max_points is None:
            self.events.poll()
        else:
            with display_series(bounds.MAX_DISPLAY_SERIES) as bound:
                self.events.poll()
            self.series_left_out |= bound.left_out
            self.events.scalars.thin(watch.max_points)
        scalars = self.events.scalars
        wandb = self.events.wandb
        if wandb is not None and wandb.config_version != self.wandb_config_version:
            self.wandb_config_version = wandb.config_version
            self.settings_changed = True
        recompute = self.settings_changed or scalars.version != self.version
        if recompute:
            if self.version is not None and scalars.version != self.version:
                self.seen_live = True
            self.recompute(scalars, watch.vocab_size)
        derived = self.derived
        assert derived is not None  # set by the first recompute, which every run's first poll does
        own = tuple(e for e in (manifest_error(self.info), *self.files.problems, *self.events.errors) if e is not None)
        # A bucket object the pass could not fetch and a reader of the run then could not read is
        # one error, the reader's: it says the pass's reason and what the run does without it.
        read = {shown_path(e.path) for e in own}
        fetched = mirror_errors.get(shown_path(self.info.path), ()) if mirror_errors else ()
        errors = own + tuple(e for e in fetched if e.path not in read)
        serving, serving_notices, serving_failures = self._poll_serving(watch)
        state = self._run_state(derived, now, processes, watch.flush_secs)
        flags = flags_at(
            derived,
            now=now,
            flush_secs=watch.flush_secs,
            seen_live=self.seen_live,
            damaged=self.events.damaged,
            errors=errors,
            serving=self._serving_flags(serving, scalars),
            state=state,
        )
        errors += serving_failures
        notes = self.events.notes + ((read_note,) if read_note else ())
        if self.series_left_out:
            notes += (self._left_out_note(),)
        if (
            not recompute
            and self.status is not None
            and flags == self.status.flags
            and notes == self.status.source_notes
            and state == self.status.state
            and serving is self.status.serving
            and serving_notices == self.status.serving_notices
            and errors == self.status.errors
        ):
            return self.status  # nothing changed: the same object, so the TUI skips a redraw
        status = worst_severity(flags)  # an unreadable file is a warning flag: the run says so, the others go on
        if errors and not scalars.series and serving is None:
            status = RunHealth.ERROR  # nothing of the run could be read: no health to judge
        self.status = RunStatus(
            info=self.info,
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
            serving_notices=serving_notices,
            trainer=trainer_of(framework_of_run(self.info), derived.trainer, identified=derived.trainer_identified),
            start=derived.start,
            errors=errors,
            best=derived.best,
            state=state,
            source_notes=notes,
        )
        return self.status

    @staticmethod
    def _left_out_note() -> str:
        limit = bounds.MAX_DISPLAY_SERIES
        return (
            f"more than {limit:,} series in one source: the TUI keeps the first {limit:,} it read "
            "(triage scan and triage scalars read every one)"
        )

    def _run_state(self, derived: Derived, now: float, processes: ProcessTable, flush_secs: float) -> RunState:
        """Whether the run's writer is alive here, from the poll's process table and what the run's
        files already read say (the W&B exit record, the newest trainer_state.json, the console's end)."""
        wandb = self.events.wandb
        trainer = self.events.trainer_state
        store = first_store(self.events.sources)
        return run_state(
            self.info.directory,
            processes=processes,
            activity=derived.activity,
            now=now,
            event_files=self.info.event_files,
            wandb_exit_code=wandb.exit_code if wandb is not None else None,
            console_error_of=self._console_error,
            final_save=trainer is not None and final_step(trainer.global_step, trainer.max_steps),
            recorded_end=recorded_end(store.states) if store is not None else None,
            # One of a store's runs: a process writing the store may be writing another of its runs,
            # so what the store recorded of this one's end comes first.
            recorded_end_first=self.info.store_run is not None,
            recorded_running=recorded_running(store),
            flush_secs=flush_secs,
        )

    def _console_error(self) -> str | None:
        """The crash line the run's newest console ends in, its tail read again only when the
        console reader read more of it (an idle ended run's console is not read every poll)."""
        console = self.events.console
        newest = console.newest() if console is not None else None
        if newest != self.console_key:
            line = None
            if newest is not None:
                try:
                    line = console_error(read_console_tail(newest[0]))
                except OSError:
                    line = None  # the console's own reader says why it cannot be read (the run's errors)
            self.console_key, self.console_error = newest, line
        return self.console_error

    def _serving_flags(self, serving: ServingEvidence | None, scalars: RunScalars) -> tuple[Flag, ...]:
        """Collapsed serving acceptance, or serving far from the run's own estimate, as flags."""
        if serving is None:
            return ()
        evidence, version = self.serving_flags_for
        if evidence is not serving or version != scalars.version:
            self.serving_flags = serving_flags_of(serving, scalars)
            self.serving_flags_for = (serving, scalars.version)
        return self.serving_flags

    def _poll_serving(
        self, watch: WatchSettings
    ) -> tuple[ServingEvidence | None, tuple[str, ...], tuple[SourceError, ...]]:
        """The run's [serving] sources, followed: new log lines, a scrape when due. Returns the
        evidence, the notices of what an untrusted triage.toml named, and each failing source."""
        manifest = self.info.manifest
        sources = tuple(manifest.serving_sources) if manifest is not None and watch.follow_serving else ()
        if watch.follow_serving:
            # The profile ModelOpt exports beside the drafter the run names, else beside the newest it saved.
            saved = self.info.artifacts.checkpoints
            named = manifest.checkpoint if manifest is not None else None
            sources = tuple(with_profile(sources, named if named is not None else (saved[-1] if saved else None)))
        if sources != self.serving_sources:
            self.serving_sources = sources
            # The TUI scrapes a metrics URL on a thread of its own; scan (strict) waits for it once.
            pages = manifest.serving_metrics_pages if manifest is not None else ()
            self.serving = (
                ServingWatch(sources, clock=watch.clock, background=not watch.strict, metrics_pages=pages)
                if sources
                else None
            )
        # What an untrusted triage.toml named and was not used, then each failing source, one line each.
        notices = (
            tuple(e.line() for e in manifest.untrusted_errors())
            if manifest is not None and watch.follow_serving
            else ()
        )
        if self.serving is None:
            return None, notices, ()
        evidence, errors = self.serving.poll()
        return evidence, notices, tuple(errors)
