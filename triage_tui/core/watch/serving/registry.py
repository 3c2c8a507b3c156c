"""Every serving source once, in the order that decides which class reads a location.

A new source (a format an engine or a tool writes) is one class implementing
``serving.source.ServingSource`` in a module of its own beside ``logs``, ``metrics``,
``meta_info``, ``per_request`` and ``profile``, and one entry here. The first class whose
``claims(location, head)`` is true reads the location: URLs first, then files told apart by their
name or first bytes (the JSON sources, and an engine's log a JSON logging formatter wrote, before
``MetaInfoFile``, which claims any JSON-lines file), ``ServingLog`` last (it claims any file). A
file named as a saved /metrics page (triage.toml ``[serving] metrics``) is ``MetricsFile``'s
whatever its first bytes: a page that is not one is its error, not a log with no lines yet.
``tests/test_serving_hostile.py`` attacks every entry.
"""

from __future__ import annotations

from triage_tui.core.watch.serving.logs import JsonFormattedLog, ServingLog
from triage_tui.core.watch.serving.meta_info import MetaInfoFile
from triage_tui.core.watch.serving.metrics import MetricsFile, MetricsUrl
from triage_tui.core.watch.serving.per_request import VllmRequestMetrics
from triage_tui.core.watch.serving.profile import SpeculationProfile
from triage_tui.core.watch.serving.source import ServingSource

SERVING_SOURCES: tuple[type[ServingSource], ...] = (
    MetricsUrl,
    MetricsFile,
    SpeculationProfile,
    VllmRequestMetrics,
    JsonFormattedLog,
    MetaInfoFile,
    ServingLog,
)


def source_class(location: str, head: bytes, *, metrics_page: bool = False) -> type[ServingSource]:
    """The class that reads ``location`` (``head``: a file's first bytes, b"" for a URL).

    ``metrics_page``: the location was named as a /metrics page, so a file is a saved page.
    """
    if metrics_page and not MetricsUrl.claims(location, head):
        return MetricsFile
    return next(cls for cls in SERVING_SOURCES if cls.claims(location, head))
