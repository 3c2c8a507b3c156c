"""ModelOpt's ``speculation_profile.json``: a drafter's measured acceptance, carried beside the export.

One serving source (``ServingSource``: kind "speculation_profile"), read whole and again when the
file changes. The schema (version "1.0") is ``build_profile`` in NVIDIA/Model-Optimizer
``examples/specdec_bench/specdec_bench/speculation_profile.py`` (commit edf879d3; pull request
#2247): ``measured``, ``num_speculative_tokens``, ``acceptance_length_histogram`` (steps per
acceptance length, keyed by the length as text after JSON, a length counting the target's bonus
token: ``specdec_bench/metrics/acceptance_rate.py``, ``AcceptanceRate._process_lengths``),
``marginal_accept_rates`` (P(first i+1 drafts accepted): this convention's per-position),
``conditional_accept_rates`` (P(draft i+1 accepted | first i accepted)), ``mean_accept_length``
(per step) and ``mean_accept_length_per_request`` (requests weighted equally), ``validation``.
ModelOpt's exporter writes a placeholder beside every drafter it exports without a measurement
(``modelopt/torch/export/plugins/hf_spec_export.py``, pull request #2313: ``"schema_version":
null, "measured": false``; ``stub_profile`` writes ``measured: false`` with zero vectors): it is
shown as not measured and never read as an acceptance of 1.0.

Into the one convention: from the histogram, drafts = steps, accepted = the sum of (length - 1)
over steps, per-position i = steps of length >= i + 2 / steps (exactly ModelOpt's marginals).
Without a histogram the marginal rates are the per-position figures (the conditional ones chained
into them when only those are given) and the length is the profile's per-step mean, without counts.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, ClassVar

from triage_tui.core import bounds
from triage_tui.core.changed_file import FileStamp, stamp_of
from triage_tui.core.watch.serving import tuning
from triage_tui.core.watch.serving.evidence import ServingEvidence
from triage_tui.core.watch.serving.source import Following, ServingPoll, source_error

PROFILE_NAME = "speculation_profile.json"
ENGINE = "modelopt"
# The engines specdec_bench measures with (``specdec_bench/models/``): named in a note when the
# profile's measurement_conditions say which one, never echoed otherwise.
_BENCH_ENGINES = ("vllm", "sglang", "trtllm", "auto_deploy")


class NotAProfile(ValueError):
    """A document that is not a speculation profile as ModelOpt writes it (the reason, no file text)."""


class SpeculationProfile:
    """A ``speculation_profile.json`` (``ServingSource``: kind "speculation_profile").

    Claims a file of that name, or a JSON document whose first bytes hold ``"schema_version"`` and
    ``"measured"``. Read whole, at most ``tuning.MAX_PROFILE_BYTES``; a changed file is read again.
    """

    kind: ClassVar[str] = "speculation_profile"

    @classmethod
    def claims(cls, location: str, head: bytes) -> bool:
        if bounds.is_url(location):
            return False
        if Path(location).name == PROFILE_NAME:
            return True
        return head.lstrip()[:1] == b"{" and b'"schema_version"' in head and b'"measured"' in head

    def __init__(self, location: str, following: Following | None = None) -> None:
        self.location = location
        self._ident: FileStamp | None = None
        self._result = ServingPoll(None)

    def poll(self) -> ServingPoll:
        try:
            fd = os.open(self.location, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang
        except OSError as err:
            why = "no such file (yet)" if isinstance(err, FileNotFoundError) else f"cannot read: {err.strerror or err}"
            return ServingPoll(None, (source_error(self.location, why),))
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            ident = stamp_of(st)
            if ident == self._ident:
                return self._result
            self._ident = ident
            if not stat.S_ISREG(st.st_mode):
                self._result = self._error("not a regular file")
                return self._result
            body = handle.read(tuning.MAX_PROFILE_BYTES + 1)
        if len(body) > tuning.MAX_PROFILE_BYTES:
            self._result = self._error(f"larger than {tuning.MAX_PROFILE_BYTES >> 20} MiB: not a speculation profile")
            return self._result
        try:
            document = json.loads(body.decode("utf-8", "replace"))
        except (ValueError, RecursionError):  # not JSON, an integer over int()'s digit limit, nested too deep
            self._result = self._error("not JSON (a speculation profile is one JSON object)")
            return self._result
        try:
            self._result = ServingPoll(profile_evidence(document, self.location))
        except (NotAProfile, bounds.Impossible) as err:
            self._result = self._error(str(err))
        return self._result

    def _error(self, message: str) -> ServingPoll:
        return ServingPoll(None, (source_error(self.location, message),))

    def nothing_found(self) -> str:
        return "holds no speculation profile"


def profile_evidence(document: Any, location: str) -> ServingEvidence:
    """A parsed profile as evidence in the one convention.

    NotAProfile for a document of another shape, bounds.Impossible for numbers that cannot be.
    """
    if not isinstance(document, dict):
        raise NotAProfile("not a speculation profile (not a JSON object)")
    measured = document.get("measured")
    if measured is False:
        return ServingEvidence(
            ENGINE,
            location,
            None,
            (),
            None,
            None,
            "not measured: ModelOpt's placeholder (measured: false), written at export before any measurement",
            measured=False,
        )
    if measured is not True:
        raise NotAProfile("not a speculation profile (measured is neither true nor false)")
    notes: list[str] = []
    k = _speculative_tokens(document.get("num_speculative_tokens"))
    histogram = _histogram(document.get("acceptance_length_histogram"), k)
    reported = _length_or_none(document.get("mean_accept_length"), "mean_accept_length", k)
    if histogram:
        evidence = _from_histogram(histogram, k, location, notes, reported)
    else:
        evidence = _from_rates(document, location, reported, k)
    per_request = _length_or_none(document.get("mean_accept_length_per_request"), "mean_accept_length_per_request", k)
    if per_request is not None:
        notes.append(f"ModelOpt's per-request mean {per_request:.2f} (requests weighted equally) is not used")
    validation = document.get("validation")
    consistency = validation.get("mean_consistency") if isinstance(validation, dict) else None
    if isinstance(consistency, dict) and consistency.get("passed") is False:
        notes.append(
            "the profile failed its own mean-consistency check: its rates do not add up to its mean "
            "(num_speculative_tokens below the K measured)"
        )
    if document.get("verification_method") == "block":
        notes.append("block verification: the per-position figures are not a longest-prefix distribution")
    if document.get("schema_version") not in (None, "1.0"):
        notes.append("schema_version is not 1.0: read with 1.0's fields")
    conditions = document.get("measurement_conditions")
    bench_engine = conditions.get("engine") if isinstance(conditions, dict) else None
    if bench_engine in _BENCH_ENGINES:
        notes.append(f"measured by specdec_bench with {bench_engine}")
    return ServingEvidence(
        evidence.engine,
        evidence.source,
        evidence.acceptance_length,
        evidence.per_position,
        evidence.drafts,
        evidence.accepted,
        evidence.convention,
        notes=tuple(notes),
    )


def _from_histogram(
    histogram: dict[int, int], k: int | None, location: str, notes: list[str], reported: float | None
) -> ServingEvidence:
    steps = sum(histogram.values())
    accepted = sum((length - 1) * count for length, count in histogram.items())
    positions = k if k is not None else max(histogram) - 1
    reached = [sum(c for length, c in histogram.items() if length >= i + 2) for i in range(positions)]
    bounds.accepted_within(accepted, drafts=steps, draft_tokens=None, per_position=reached)
    length = 1.0 + accepted / steps
    if reported is not None and abs(reported - length) > 0.01:
        notes.append(
            f"its mean_accept_length {reported:.2f} differs from its histogram's {length:.2f}: the histogram's "
            "counts are used"
        )
    convention = (
        f"1 + accepted / drafts from ModelOpt's acceptance_length_histogram over {steps} steps: drafts = steps, "
        "accepted = sum of (length - 1) per step (its lengths count the bonus token); per-position i = steps "
        "of length >= i + 2 / steps (its marginal_accept_rates, unconditional)"
    )
    return ServingEvidence(ENGINE, location, length, tuple(r / steps for r in reached), steps, accepted, convention)


def _from_rates(document: dict[str, Any], location: str, reported: float | None, k: int | None) -> ServingEvidence:
    marginal = _rates(document.get("marginal_accept_rates"), "marginal_accept_rates", k)
    conditional = _rates(document.get("conditional_accept_rates"), "conditional_accept_rates", k)
    if marginal is not None:
        per_position, source = marginal, "its marginal_accept_rates (unconditional, as they are)"
        for i in range(1, len(marginal)):
            if marginal[i] > marginal[i - 1] + 1e-6:
                raise bounds.Impossible(
                    f"marginal_accept_rates rise at position {i} (P(first i+1 accepted) cannot exceed P(first i))"
                )
    elif conditional is not None:
        running, chained = 1.0, []
        for rate in conditional:
            running *= rate
            chained.append(running)
        per_position, source = tuple(chained), "its conditional_accept_rates chained (products up to position i)"
    else:
        per_position, source = (), ""
    if reported is None and not per_position:
        raise NotAProfile(
            "measured, but holds no acceptance_length_histogram, accept rates or mean_accept_length to read"
        )
    if reported is not None:
        length, how = reported, "ModelOpt's per-step mean_accept_length"
    else:
        length = bounds.acceptance_length(1.0 + sum(per_position), "1 + the sum of the per-position rates", k)
        how = "1 + the sum of the per-position rates"
    convention = f"{how}, no counts (the profile has no histogram)" + (
        f"; per-position = {source}" if per_position else ""
    )
    return ServingEvidence(ENGINE, location, length, per_position, None, None, convention)


def _speculative_tokens(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise NotAProfile("num_speculative_tokens is not an integer")
    if not 1 <= value <= bounds.MAX_POSITION_INDEX + 1:
        raise bounds.Impossible(
            f"num_speculative_tokens is {value} (between 1 and {bounds.MAX_POSITION_INDEX + 1}: no engine drafts more)"
        )
    return value


def _histogram(value: Any, k: int | None) -> dict[int, int]:
    """{acceptance length: steps}, checked; {} when absent, null or empty (the stub's)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise NotAProfile("acceptance_length_histogram is not an object")
    if len(value) > bounds.MAX_POSITION_INDEX + 2:
        raise bounds.Impossible(
            f"acceptance_length_histogram of {len(value)} lengths (at most {bounds.MAX_POSITION_INDEX + 2})"
        )
    histogram: dict[int, int] = {}
    longest = bounds.MAX_POSITION_INDEX + 2
    for key, count in value.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 4):
            raise NotAProfile("an acceptance_length_histogram key is not a length")
        length = int(key)
        if not 1 <= length <= longest:
            raise bounds.Impossible(
                f"acceptance length {length} in the histogram (a step yields 1 to {longest} tokens)"
            )
        if k is not None and length > k + 1:
            raise bounds.Impossible(
                f"acceptance length {length} in the histogram with num_speculative_tokens {k} (at most {k + 1})"
            )
        if not isinstance(count, int) or isinstance(count, bool):
            raise NotAProfile("an acceptance_length_histogram count is not an integer")
        histogram[length] = histogram.get(length, 0) + bounds.count(count, f"steps of acceptance length {length}")
    if sum(histogram.values()) > bounds.MAX_COUNT:
        raise bounds.Impossible(f"more than {bounds.MAX_COUNT} steps in the histogram")
    return histogram if sum(histogram.values()) else {}


def _rates(value: Any, what: str, k: int | None) -> tuple[float, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise NotAProfile(f"{what} is not a list")
    if len(value) > bounds.MAX_POSITION_INDEX + 1:
        raise bounds.Impossible(f"{what} of {len(value)} positions (at most {bounds.MAX_POSITION_INDEX + 1})")
    if k is not None and len(value) > k:
        raise bounds.Impossible(f"{what} of {len(value)} positions with num_speculative_tokens {k}")
    rates = []
    for i, rate in enumerate(value):
        rates.append(bounds.rate(_number(rate, f"{what} {i}"), f"{what} {i}"))
    return tuple(rates) if rates else None


def _length_or_none(value: Any, what: str, k: int | None) -> float | None:
    if value is None:
        return None
    return bounds.acceptance_length(_number(value, what), what, k)


def _number(value: Any, what: str) -> float:
    """A JSON number as a float; NotAProfile for anything else, Impossible for an integer no float holds."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise NotAProfile(f"{what} is not a number")
    try:
        return float(value)
    except OverflowError:
        raise bounds.Impossible(f"{what} is an integer of {len(str(abs(value)))} digits") from None
