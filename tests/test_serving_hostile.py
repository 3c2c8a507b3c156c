"""The hostile battery for serving sources: every class in ``serving/registry.py`` SERVING_SOURCES,
attacked the day it is registered.

Each source is read from a healthy specimen in its engine's own format (the builders write them
through vLLM's and SGLang's formats and prometheus_client), then from that specimen truncated at
every byte of its first records, with bits flipped, with impossible and huge numbers, with markup
and escapes in every string; a URL source also meets a real server on 127.0.0.1 that trickles a
byte a second, sends gigabytes of headers or body, or redirects to another port, host or ftp://.
What must hold every time: no exception, every error a ``SourceError`` naming the source, in one
short line holding none of the source's text, and any evidence within core/bounds.py's bounds.
A new source class fails ``test_every_registered_source_is_attacked`` until it has its attacks here.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from builders.check_run import write_events
from builders.metrics_server import MetricsServer, Route
from builders.serving import (
    acceptance_rate_out,
    meta_info_line,
    sglang_line,
    sglang_line_text,
    sglang_metrics,
    spec_decode_metrics,
    speculation_profile,
    vllm_counters_page,
    vllm_json_formatter,
    vllm_line,
    vllm_line_raw,
    vllm_metrics,
    vllm_response,
)
from builders.waiting import load_factor
from triage_tui import cli
from triage_tui.core import bounds
from triage_tui.core.watch.serving.evidence import ServingEvidence
from triage_tui.core.watch.serving.registry import SERVING_SOURCES, source_class
from triage_tui.core.watch.serving.source import Following, ServingPoll

HOSTILE = "[bold]x[/bold][link=https://e.example]y[/link]\x1b[2J\r\x00"
# What no output may hold unless the test put it in the source's name: markup and escapes.
FORBIDDEN = ("[bold]", "[link", "\x1b", "\r", "\x00", "SECRET")


@dataclass(frozen=True)
class Attacks:
    """What one source class is attacked with."""

    good: bytes  # a healthy specimen; its first records are truncated and bit-flipped
    impossible: tuple[tuple[str, bytes, str], ...]  # (id, content, a fragment of the reason): the source is an error
    malformed: tuple[tuple[str, bytes], ...]  # (id, content): the bad records are counted, the rest read
    hostile_text: bytes  # the specimen's figures with markup and escapes in every string it has


def _lines(*lines: str) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


_VLLM_GOOD = (vllm_line(100, [60, 20, 4]), vllm_line(50, [10, 2, 0]))
_SGLANG_GOOD = sglang_line(412, 200)
LOG = Attacks(
    good=_lines("INFO 05-12 10:11:00 [api_server.py:1] vLLM API server starting", *_VLLM_GOOD),
    impossible=tuple(
        (name, _lines(first, bad), reason)
        for name, first, bad, reason in (
            (
                "accepted_above_drafted",
                _VLLM_GOOD[0],
                vllm_line_raw(501.0, 5000, 30, "900.000, 900.000, 900.000"),
                "line 2: 5000 tokens accepted of 30 drafted",
            ),
            ("negative", _VLLM_GOOD[0], vllm_line_raw(-0.5, -15, 30, "0.000, 0.000, 0.000"), "cannot be negative"),
            ("rate_above_one", _VLLM_GOOD[0], vllm_line_raw(1.5, 15, 30, "900.000, 0.000, 0.000"), "[0, 1]"),
            ("huge", _VLLM_GOOD[0], vllm_line_raw(1.5, 10**30, 10**31, "0.100, 0.000, 0.000"), "beyond any count"),
            (
                "beyond_a_float",
                _VLLM_GOOD[0],
                _VLLM_GOOD[1].replace("Accepted: 12 tokens", "Accepted: 1" + "0" * 400 + " tokens"),
                "an integer of 401 digits",
            ),
            (
                "too_many_positions",
                _VLLM_GOOD[0],
                vllm_line_raw(1.5, 15, 300, ", ".join(["0.010"] * 100)),
                "100 per-position rates",
            ),
            (
                "mean_above_k_plus_one",  # 3 speculative tokens: at most 4 tokens a step
                _VLLM_GOOD[0],
                vllm_line_raw(50.0, 270, 300, "0.900, 0.900, 0.900"),
                "line 2: Mean acceptance length is 50 (above 4 with 3 speculative tokens",
            ),
            (
                "mean_above_k_plus_one_with_nothing_accepted",
                _VLLM_GOOD[0],
                vllm_line_raw(5.4, 0, 300, "0.000, 0.000, 0.000"),
                "line 2: Mean acceptance length is 5.4 (above 4 with 3 speculative tokens",
            ),
            ("sglang_negative", _SGLANG_GOOD, sglang_line_text("-1.00"), "below 1"),
            ("sglang_below_one", _SGLANG_GOOD, sglang_line_text("0.50"), "below 1"),
            ("sglang_absurd", _SGLANG_GOOD, sglang_line_text("1e9"), "above 66"),
            ("sglang_infinite", _SGLANG_GOOD, sglang_line_text("inf"), "not finite"),
        )
    ),
    malformed=(
        ("sglang_1.2.3", _lines(_SGLANG_GOOD, sglang_line_text("1.2.3"), _SGLANG_GOOD)),
        ("vllm_garbled", _lines(_VLLM_GOOD[0], _VLLM_GOOD[1].replace("Drafted: 150", "Drafted: 1x0"))),
        ("vllm_digits", _lines(_VLLM_GOOD[0], _VLLM_GOOD[1].replace("Accepted: 12", "Accepted: " + "9" * 5000))),
    ),
    hostile_text=_lines(
        HOSTILE,
        vllm_line_raw(1.84, 84, 300, "0.600, 0.200, 0.040", filename=HOSTILE, prefix=HOSTILE),
        HOSTILE + " SpecDecoding metrics: " + HOSTILE,
    ),
)

_JSON = vllm_json_formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
_VLLM_JSON_GOOD = (vllm_line(100, [60, 20, 4], formatter=_JSON), vllm_line(50, [10, 2, 0], formatter=_JSON))
JSON_LOG = Attacks(  # vLLM's own lines through the JSON formatter of its logging docs' example
    good=_lines(*_VLLM_JSON_GOOD),
    impossible=(
        (
            "accepted_above_drafted",
            _lines(_VLLM_JSON_GOOD[0], vllm_line_raw(501.0, 5000, 30, "900.000, 900.000, 900.000", formatter=_JSON)),
            "line 2: 5000 tokens accepted of 30 drafted",
        ),
        (
            "negative",
            _lines(_VLLM_JSON_GOOD[0], vllm_line_raw(-0.5, -15, 30, "0.000, 0.000, 0.000", formatter=_JSON)),
            "cannot be negative",
        ),
        (
            "mean_above_k_plus_one",
            _lines(_VLLM_JSON_GOOD[0], vllm_line_raw(50.0, 270, 300, "0.900, 0.900, 0.900", formatter=_JSON)),
            "line 2: Mean acceptance length is 50 (above 4 with 3 speculative tokens",
        ),
    ),
    malformed=(
        ("vllm_garbled", _lines(_VLLM_JSON_GOOD[0], _VLLM_JSON_GOOD[1].replace("Drafted: 150", "Drafted: 1x0"))),
    ),
    hostile_text=_lines(
        _JSON.format(logging.LogRecord(HOSTILE, logging.INFO, HOSTILE, 1, HOSTILE, None, None)),
        json.dumps({"asctime": HOSTILE, "message": json.loads(_VLLM_JSON_GOOD[0])["message"], HOSTILE: HOSTILE}),
        vllm_line_raw(1.84, 84, 300, "0.600, 0.200, 0.040", filename=HOSTILE, formatter=_JSON),
    ),
)

_NAN, _INF = float("nan"), float("inf")
PAGE = Attacks(
    good=vllm_metrics(100, [60, 20, 4]),
    impossible=(
        ("negative", vllm_counters_page(10, 30, -15, {"0": -5}), "cannot be negative"),
        ("nan", vllm_counters_page(_NAN, 300, 84, {"0": 60}), "is nan (not a finite count)"),
        ("inf", vllm_counters_page(100, _INF, 84, {"0": 60}), "is inf (not a finite count)"),
        ("accepted_above_drafted", vllm_counters_page(10, 30, 5000, {"0": 9000}), "5000 tokens accepted of 30"),
        ("position_above_drafts", vllm_counters_page(10, 30, 20, {"0": 15}), "15 accepted at position 0 of 10"),
        ("position_index_huge", vllm_counters_page(100, 300, 84, {"100000000": 1}), "100000000 is above 64"),
        ("position_not_a_number", vllm_counters_page(100, 300, 84, {"x": 1}), "is not a position number"),
        ("huge", vllm_counters_page(1e300, 3e300, 1e300, {}), "beyond any count"),
        ("label_sets", vllm_metrics(1, [1], engines=bounds.MAX_LABEL_SETS + 1), "label sets"),
        ("sglang_nan", sglang_metrics([_NAN]), "not finite"),
        ("sglang_below_one", sglang_metrics([0.5]), "below 1"),
        ("sglang_absurd", sglang_metrics([1e9]), "above 66"),
        ("sglang_rate", sglang_metrics([2.5], rate=5.0), "a rate lies in [0, 1]"),
        ("not_prometheus", b"<html><body>SECRET-TOKEN</body></html>\n", "not Prometheus text (line 1 does not parse)"),
    ),
    malformed=(),  # a page is one document: any damage makes it an error (above)
    hostile_text=vllm_counters_page(100, 300, 84, {"0": 60, "1": 20, "2": 4}, model_name=HOSTILE, help_text=HOSTILE),
)

_META_GOOD = (meta_info_line(10, 20, [2, 4, 4, 0]), meta_info_line(6, 9, [3, 3, 0, 0]))
META_INFO = Attacks(
    good=_lines(*_META_GOOD),
    impossible=tuple(
        (name, _lines(_META_GOOD[0], bad), reason)
        for name, bad, reason in (
            ("completion_below_verify", meta_info_line(10, 5), "line 2: 5 completion tokens in 10 verify steps"),
            ("negative", meta_info_line(-10, 20), "cannot be negative"),
            ("huge", meta_info_line(10**30, 10**31), "beyond any count"),
            ("beyond_a_float", meta_info_line(10**400, 10**401), "an integer of 401 digits"),
            ("histogram_too_long", meta_info_line(10, 20, [0] * 100), "spec_accept_histogram of 100 entries"),
            ("absurd_length", meta_info_line(1, 1000), "above 66"),
            (
                "length_above_its_histogram",  # 0 to 3 accepted a step: at most 4 tokens
                meta_info_line(10, 60, [0, 0, 0, 10]),
                "completion_tokens / spec_verify_ct is 6 (above 4 with 3 speculative tokens",
            ),
        )
    ),
    malformed=tuple(
        (name, _lines(_META_GOOD[0], bad, _META_GOOD[1]))
        for name, bad in (
            ("not_json", '{"meta_info": {"spec_verify_ct": 1'),
            ("deep_nesting", '{"a": ' * 100_000 + "1" + "}" * 100_000),
            ("float_counts", meta_info_line(10.0, 20.0)),
            ("bool_counts", meta_info_line(True, True)),
            ("overflowing_float", '{"meta_info": {"spec_verify_ct": 1e400, "completion_tokens": 2}}'),
            ("digits_over_int_limit", '{"meta_info": {"spec_verify_ct": ' + "9" * 5000 + ', "completion_tokens": 2}}'),
        )
    ),
    hostile_text=_lines(
        meta_info_line(10, 20, [2, 4, 4, 0], text=HOSTILE),
        json.dumps({HOSTILE: HOSTILE, "meta_info": {"spec_verify_ct": 6, "completion_tokens": 9, HOSTILE: HOSTILE}}),
    ),
)


def _profile(**changes) -> dict:
    profile = speculation_profile(acceptance_rate_out([[3, 2, 4, 1, 2], [1, 1, 3], [4, 4, 2, 1]]), 3)
    profile.update(changes)
    return profile


def _histogram(**lengths) -> dict:
    return _profile(acceptance_length_histogram={k.removeprefix("L"): v for k, v in lengths.items()})


def _rates_only(**changes) -> dict:
    return _profile(acceptance_length_histogram=None, **changes)


def _json(document) -> bytes:
    return json.dumps(document, indent=2).encode()  # as AcceptanceRate writes it


PROFILE = Attacks(
    good=_json(_profile()),
    impossible=(
        ("length_above_k", _json(_histogram(L1=3, L9=2)), "acceptance length 9 in the histogram with num_speculative"),
        ("length_zero", _json(_histogram(L0=3, L2=2)), "acceptance length 0 in the histogram"),
        ("negative_steps", _json(_histogram(L1=3, L2=-2)), "cannot be negative"),
        ("huge_steps", _json(_histogram(L1=10**30)), "beyond any count"),
        ("beyond_a_float", _json(_histogram(L1=10**400)), "an integer of 401 digits"),
        (
            "too_many_lengths",
            _json(_profile(acceptance_length_histogram={str(i): 1 for i in range(1, 101)})),
            "100 lengths",
        ),
        ("k_huge", _json(_profile(num_speculative_tokens=100000)), "num_speculative_tokens is 100000"),
        ("rate_above_one", _json(_rates_only(marginal_accept_rates=[1.5, 0.2, 0.1])), "a rate lies in [0, 1]"),
        ("rising_marginals", _json(_rates_only(marginal_accept_rates=[0.2, 0.5, 0.1])), "rise at position 1"),
        ("nan_mean", _json(_rates_only(mean_accept_length=float("nan"))), "not finite"),
        ("mean_below_one", _json(_rates_only(mean_accept_length=0.5)), "below 1"),
        ("mean_above_k", _json(_rates_only(mean_accept_length=50.0)), "is 50 (above 4 with 3 speculative tokens"),
        ("mean_5.4_above_k", _json(_rates_only(mean_accept_length=5.4)), "is 5.4 (above 4 with 3 speculative"),
        ("more_rates_than_k", _json(_rates_only(marginal_accept_rates=[0.5] * 5)), "of 5 positions with num_specu"),
        ("measured_neither", _json(_profile(measured="yes")), "measured is neither true nor false"),
        ("not_json", b'{"schema_version": "1.0", "measured": true, "marginal_accept_rates": [0.8,', "not JSON"),
    ),
    malformed=(),  # a profile is one document: any damage makes it an error (above)
    hostile_text=_json(
        _profile(
            method=HOSTILE,
            draft_checkpoint={"path": HOSTILE},
            target_model={HOSTILE: HOSTILE},
            per_category={HOSTILE: {"mean_accept_length": 2.0}},
            measurement_conditions={"engine": HOSTILE, "dataset": HOSTILE},
            verification_method=HOSTILE,
            schema_version=HOSTILE,
            note=HOSTILE,
        )
    ),
)

_SPEC = spec_decode_metrics(3, [(3, 3), (3, 1), (3, 0), (3, 2), (2, 2)])
_REQUESTS_GOOD = (vllm_response(_SPEC), vllm_response(spec_decode_metrics(3, [(3, 0), (3, 1)]), chat=True))


def _spec(**changes) -> str:
    return vllm_response({**_SPEC, **changes})


VLLM_REQUESTS = Attacks(
    good=_lines(*_REQUESTS_GOOD),
    impossible=tuple(
        (name, _lines(_REQUESTS_GOOD[0], bad), reason)
        for name, bad, reason in (
            ("histogram_not_the_steps", _spec(num_spec_steps=9), "line 2: acceptance_histogram sums to 5 steps"),
            ("accepted_not_the_histogram", _spec(num_accepted_draft_tokens=2), "holds 8 accepted drafts"),
            ("mean_not_the_counts", _spec(mean_acceptance_length=3.5), "is not 1 + 8 accepted / 5 steps"),
            ("accepted_above_drafted", _spec(num_draft_tokens=4), "8 tokens accepted of 4 drafted"),
            ("negative", _spec(acceptance_histogram=[1, -1, 1, 1]), "cannot be negative"),
            ("huge", _spec(num_draft_tokens=10**30), "beyond any count"),
            ("beyond_a_float", _spec(num_spec_steps=10**400), "an integer of 401 digits"),
            ("histogram_too_long", _spec(acceptance_histogram=[0] * 100), "acceptance_histogram of 100 entries"),
            ("k_not_the_histogram", _spec(num_spec_tokens=5), "4 entries for num_spec_tokens 5"),
            ("rate_above_one", _spec(draft_acceptance_rate=2.0), "a rate lies in [0, 1]"),
            ("mean_infinite", _spec(mean_acceptance_length=float("inf")), "not finite"),
        )
    ),
    malformed=tuple(
        (name, _lines(_REQUESTS_GOOD[0], bad, _REQUESTS_GOOD[1]))
        for name, bad in (
            ("not_json", '{"choices": [], "metrics": {"speculative_decoding": {"num_spec_steps": 1'),
            ("deep_nesting", '{"a": ' * 100_000 + "1" + "}" * 100_000),
            ("float_counts", _spec(num_spec_steps=5.0)),
            ("bool_counts", _spec(num_spec_tokens=True)),
            ("histogram_not_a_list", _spec(acceptance_histogram="1,2,3")),
            ("overflowing_float", _spec(num_draft_tokens=float("inf")).replace("Infinity", "1e400")),
            (
                "digits_over_int_limit",
                _spec(num_spec_steps=1).replace('"num_spec_steps": 1', '"num_spec_steps": ' + "9" * 5000),
            ),
        )
    ),
    hostile_text=_lines(
        vllm_response(_SPEC, text=HOSTILE),
        json.dumps(
            {
                HOSTILE: HOSTILE,
                "id": HOSTILE,
                "choices": [{"text": HOSTILE}],
                "model": HOSTILE,
                "metrics": {"speculative_decoding": {**_SPEC, HOSTILE: HOSTILE}, HOSTILE: HOSTILE},
            }
        ),
    ),
)

ATTACKS = {
    "log": LOG,
    "json_log": JSON_LOG,
    "metrics_url": PAGE,
    "metrics_file": PAGE,
    "meta_info": META_INFO,
    "speculation_profile": PROFILE,
    "vllm_requests": VLLM_REQUESTS,
}


def _is_url_source(cls) -> bool:
    return cls.claims("http://127.0.0.1/metrics", b"")


URL_SOURCES = [cls for cls in SERVING_SOURCES if _is_url_source(cls)]


@pytest.fixture(scope="module")
def server():
    with MetricsServer() as running:
        yield running


class Place:
    """Puts content where a source class reads it: a file, or a page of the module's server."""

    def __init__(self, cls, tmp_path: Path, server: MetricsServer, tag: str) -> None:
        self.cls, self.tmp_path, self.server, self.tag = cls, tmp_path, server, tag
        self.count = 0

    def __call__(self, content: bytes | Route) -> str:
        self.count += 1
        if _is_url_source(self.cls):
            return self.server.route(f"/{self.tag}/{self.count}", content)
        path = self.tmp_path / f"source-{self.count}.txt"
        path.write_bytes(content if isinstance(content, bytes) else content.body)
        return str(path)


@pytest.fixture
def place(request, tmp_path, server):
    cls = request.node.callspec.params["cls"]
    return Place(cls, tmp_path, server, re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name))


def _poll(cls, location: str) -> ServingPoll:
    return cls(location, Following(once=True)).poll()


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


def _sane(result: ServingPoll, location: str) -> ServingEvidence | None:
    """What must hold of any poll, whatever the source held."""
    assert isinstance(result, ServingPoll)
    for error in result.errors:
        assert (error.source, error.path) == ("serving", location)
        assert "\n" not in error.message and len(error.message) < 300, error.message
        assert not any(f in error.message for f in FORBIDDEN), error.message
    evidence = result.evidence
    if evidence is not None:
        length = evidence.acceptance_length
        assert length is None or 1.0 <= length <= bounds.MAX_ACCEPTANCE_LENGTH, length
        assert len(evidence.per_position) <= bounds.MAX_POSITION_INDEX + 1
        assert all(0.0 <= p <= 1.0 for p in evidence.per_position), evidence.per_position
        for n in (evidence.drafts, evidence.accepted):
            assert n is None or (isinstance(n, int) and 0 <= n <= bounds.MAX_COUNT * 1000)
        document = evidence.to_json()
        json.dumps(document, allow_nan=False)
        document.pop("source")
        assert not any(f in s for s in _strings(document) for f in FORBIDDEN), document
    return evidence


sources = pytest.mark.parametrize("cls", SERVING_SOURCES, ids=lambda cls: cls.kind)


def test_every_registered_source_is_attacked():
    assert sorted(cls.kind for cls in SERVING_SOURCES) == sorted(ATTACKS)
    assert URL_SOURCES, "no URL source registered: the server attacks below would attack nothing"


@sources
def test_the_specimen_is_read_by_its_own_class(cls, place):
    location = place(ATTACKS[cls.kind].good)
    head = b"" if _is_url_source(cls) else Path(location).read_bytes()[:4096]
    assert source_class(location, head) is cls  # the registry sends this format to this class
    result = _poll(cls, location)
    assert result.errors == ()
    evidence = _sane(result, location)
    assert evidence is not None and evidence.acceptance_length is not None and evidence.drafts


@sources
def test_truncation_at_every_byte_of_the_first_records(cls, place):
    good = ATTACKS[cls.kind].good
    read = 0
    for cut in sorted({*range(min(len(good), 512) + 1), len(good)}):  # the whole: a one-document format's record
        location = place(good[:cut])
        read += _sane(_poll(cls, location), location) is not None
    assert read  # some cuts still hold whole records
    if _is_url_source(cls):  # the server promises more than it sends, then closes
        for cut in (0, 1, 100, len(good) // 2):
            location = place(Route(good[:cut], behaviour="cut"))
            result = _poll(cls, location)
            _sane(result, location)
            assert result.evidence is None and "mid-answer" in result.errors[0].message


@sources
def test_bit_flips(cls, place):
    good = ATTACKS[cls.kind].good
    rng = random.Random(f"bit flips {cls.kind}")
    for _ in range(200):
        flipped = bytearray(good)
        bit = rng.randrange(len(good) * 8)
        flipped[bit // 8] ^= 1 << (bit % 8)
        location = place(bytes(flipped))
        _sane(_poll(cls, location), location)


@pytest.mark.parametrize(
    ("cls", "content", "reason"),
    [
        pytest.param(cls, content, reason, id=f"{cls.kind}-{name}")
        for cls in SERVING_SOURCES
        for name, content, reason in ATTACKS[cls.kind].impossible
    ],
)
def test_impossible_and_huge_numbers_make_the_source_an_error(cls, content, reason, place):
    location = place(content)
    result = _poll(cls, location)
    _sane(result, location)
    assert result.evidence is None, result.evidence
    (error,) = result.errors
    assert reason in error.message


@pytest.mark.parametrize(
    ("cls", "content"),
    [
        pytest.param(cls, content, id=f"{cls.kind}-{name}")
        for cls in SERVING_SOURCES
        for name, content in ATTACKS[cls.kind].malformed
    ],
)
def test_malformed_records_are_counted_and_the_rest_read(cls, content, place):
    location = place(content)
    result = _poll(cls, location)
    evidence = _sane(result, location)
    assert result.errors == () and evidence is not None and evidence.acceptance_length is not None
    assert any("do not parse" in note or "skipped" in note for note in evidence.notes), evidence.notes


@sources
def test_markup_and_escapes_in_every_string_are_never_output(cls, place):
    location = place(ATTACKS[cls.kind].hostile_text)
    result = _poll(cls, location)
    evidence = _sane(result, location)
    assert result.errors == () and evidence is not None and evidence.drafts  # the figures are still read


# --------------------------------------------------------------------------- a real server that misbehaves

url_sources = pytest.mark.parametrize("cls", URL_SOURCES, ids=lambda cls: cls.kind)


@url_sources
@pytest.mark.parametrize("behaviour", ["trickle_body", "trickle_headers"])
def test_a_trickling_server_is_cut_at_the_deadline(cls, behaviour, place, server, monkeypatch):
    monkeypatch.setattr(bounds, "FETCH_DEADLINE_SECS", 0.5)  # the product's 15 s, made small
    location = place(Route(vllm_metrics(100, [60, 20, 4]), behaviour=behaviour))
    started = time.monotonic()
    result = _poll(cls, location)
    elapsed = time.monotonic() - started
    _sane(result, location)
    assert result.evidence is None
    (error,) = result.errors
    assert error.message == "metrics URL gave no complete answer within 0.5 s"
    assert 0.5 <= elapsed < 30 * load_factor()  # the bound is the deadline; this only turns a hang into a failure


@url_sources
@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        ("endless_body", "metrics page larger than 64 KiB: not read"),
        ("endless_headers", "more header lines than http.client reads (100)"),
        ("endless_header_line", "a header line longer than http.client reads (64 KiB)"),
    ],
)
def test_gigabytes_of_headers_or_body_stop_at_the_cap(cls, behaviour, reason, place, server, monkeypatch):
    monkeypatch.setattr(bounds, "FETCH_MAX_BYTES", 64 << 10)
    location = place(Route(behaviour=behaviour))
    result = _poll(cls, location)
    _sane(result, location)
    assert result.evidence is None
    (error,) = result.errors
    assert reason in error.message
    path = location.split(str(server.port), 1)[1]
    # The server offers 4 GiB; what it wrote before the client closed is the cap plus socket buffers.
    assert server.sent[path] < 64 << 20


@url_sources
@pytest.mark.parametrize("where", ["another_port", "another_host", "ftp"])
def test_a_redirect_elsewhere_is_not_followed(cls, where, place, server):
    with MetricsServer() as elsewhere:
        target = {
            "another_port": elsewhere.route("/metrics", vllm_metrics(100, [60, 20, 4])),
            "another_host": f"http://localhost:{server.port}/metrics",
            "ftp": f"ftp://127.0.0.1:{server.port}/metrics",
        }[where]
        location = place(Route(status=302, headers={"Location": target}))
        result = _poll(cls, location)
        assert elsewhere.hits["/metrics"] == 0
    _sane(result, location)
    assert result.evidence is None
    (error,) = result.errors
    assert "not followed (only the same scheme, host and port)" in error.message


# --------------------------------------------------------------------------- the fault boundary


@sources
def test_a_broken_source_in_one_run_leaves_the_others_json_unchanged(cls, place, tmp_path, capsys):
    """Run A's source holds its first impossible attack; run B's `scan --json` is byte-identical to B scanned alone."""
    name, content, reason = ATTACKS[cls.kind].impossible[0]
    tree = tmp_path / "tree"
    broken, healthy = tree / "a-broken", tree / "b-healthy"
    for run in (broken, healthy):
        write_events(run / "runs", [2.0, 1.5], [0.5, 0.6])
    if _is_url_source(cls):
        location = place(content)
        (broken / "triage.toml").write_text(f'[run]\nvocab_size = 32000\n[serving]\nmetrics = "{location}"\n')
    else:
        (broken / "source.txt").write_bytes(content)
        location = str(broken / "source.txt")
        (broken / "triage.toml").write_text('[run]\nvocab_size = 32000\n[serving]\nlogs = ["source.txt"]\n')
    (healthy / "serve.log").write_text(vllm_line(100, [60, 20, 4]) + "\n")
    (healthy / "triage.toml").write_text('[run]\nvocab_size = 32000\n[serving]\nlogs = ["serve.log"]\n')
    assert cli.main(["scan", str(tree), "--json", "--poll"]) in (0, 1)
    runs = {run["name"]: run for run in json.loads(capsys.readouterr().out)["runs"]}
    (error,) = runs["a-broken"]["serving"]["errors"]
    assert error.startswith(f"{location}: ") and reason in error
    assert cli.main(["scan", str(healthy), "--json", "--poll"]) in (0, 1)
    (alone,) = json.loads(capsys.readouterr().out)["runs"]
    assert json.dumps(runs["b-healthy"], indent=2) == json.dumps(alone, indent=2)
