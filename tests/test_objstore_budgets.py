"""What one pass over a bucket may spend, whatever the server does: a deadline, bytes, keys held.

The servers are real: ``builders/unruly_s3.py``, a small S3 endpoint on a socket that lists an
object as 1 TiB, lists forever or never answers a GET (what moto cannot be made to do), and moto's
own server behind the counting proxy (``builders/object_store.py``). obstore talks to them as to a
bucket through the standard AWS variables; nothing of the clients is replaced. Each test turns the
budget it attacks small (``objstore.tuning``) and asserts what the user sees and what the server
was asked, from the server's side.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from builders.object_store import s3_environment
from builders.tensorboard import write_scalars
from builders.unruly_s3 import UnrulyObject, UnrulyS3
from builders.waiting import load_factor
from triage_tui.core.objstore import tuning
from triage_tui.core.objstore.mirror import PrefixMirror
from triage_tui.core.objstore.url import parse_url
from triage_tui.core.read.runs.remote import Mirrors, fetch_policy

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="obstore needs Python 3.11")

TIB = 1 << 40
_BUCKETS = itertools.count()


@pytest.fixture(autouse=True)
def _small(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(tuning, "BACKOFF_FIRST_SECS", 0.01)
    monkeypatch.setattr(tuning, "BACKOFF_MAX_SECS", 0.02)


@pytest.fixture(scope="module")
def event_file(tmp_path_factory) -> bytes:
    """A real event file, torch's SummaryWriter's: 200 points of a loss and an accuracy."""
    series = {
        "train/loss": [(step, 10.4 - step / 100) for step in range(200)],
        "train/acc_0": [(step, step / 400) for step in range(200)],
    }
    path = write_scalars(tmp_path_factory.mktemp("events") / "runs", series, wall_time=1_700_000_000.0)
    return path.read_bytes()


def _scan(triage, url: str) -> tuple[int, str, str]:
    done = triage("scan", url)
    return done.returncode, done.stdout, done.stderr


def _serve(objects: dict[str, UnrulyObject], **misbehaviour: Any) -> UnrulyS3:
    """A server of its own bucket: mirrors of one bucket share a local directory in the process."""
    return UnrulyS3(f"lab-{next(_BUCKETS)}", objects, **misbehaviour)


def test_an_object_listed_as_a_tebibyte_is_read_by_ranges_as_far_as_its_budget(event_file, triage, monkeypatch):
    monkeypatch.setattr(tuning, "MAX_POLL_BYTES", 1 << 20)
    monkeypatch.setattr(tuning, "FOLLOW_MAX_BYTES", 4 << 20)
    objects = {
        # the run's real records, then zeros to 1 TiB (a server's listing is not to be believed)
        "sweep/huge/runs/events.out.tfevents.1": UnrulyObject(TIB, event_file),
        "sweep/huge/checkpoint-100/model.safetensors": UnrulyObject(TIB),
    }
    with _serve(objects) as server, s3_environment(server.endpoint):
        started = time.monotonic()
        code, out, err = _scan(triage, f"s3://{server.bucket}/sweep")
        took = time.monotonic() - started
    (line,) = out.splitlines()
    # the run's 200 points are read (its records lie in the first bytes), its error says where it stopped
    assert "huge" in line and "step 199" in line and "train/loss 8.41" in line, line
    assert f"listed as {TIB} bytes: read to byte {4 << 20}, as far as a followed object is read" in line, line
    assert code == 1, err
    # never asked whole; the event file read to its budget and no further, the weights not at all
    assert server.whole_gets == 0
    assert server.get_bytes <= (4 << 20) + 4 * tuning.TAIL_CHECK_BYTES, server.get_bytes
    assert took < 20 * load_factor()


def test_a_capped_object_costs_no_request_on_the_next_pass_and_keeps_its_error(event_file, tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "MAX_POLL_BYTES", 1 << 20)
    monkeypatch.setattr(tuning, "FOLLOW_MAX_BYTES", 2 << 20)
    with _serve({"run/events.out.tfevents.1": UnrulyObject(TIB, event_file)}) as server:
        with s3_environment(server.endpoint):
            mirror = PrefixMirror(parse_url(f"s3://{server.bucket}/run"), tmp_path / "mirror", fetch_policy)
            first = mirror.sync()
            gets = server.gets
            second = mirror.sync()
    assert [e.message for e in first.errors] == [e.message for e in second.errors]
    assert first.errors[0].message.startswith(f"listed as {TIB} bytes: read to byte {2 << 20}")
    assert server.gets == gets and second.body_bytes == 0  # the listing only
    local = (tmp_path / "mirror" / "events.out.tfevents.1").read_bytes()
    assert local[: len(event_file)] == event_file and len(local) == 2 << 20


def test_a_pass_fetches_its_byte_budget_and_the_next_pass_reads_on(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "MAX_POLL_BYTES", 256 << 10)
    monkeypatch.setattr(tuning, "PASS_MAX_BYTES", 1 << 20)
    monkeypatch.setattr(tuning, "FETCH_THREADS", 1)  # one object after the other: which one waits is known
    bodies = {f"run/{name}.log": os.urandom(768 << 10) for name in ("a", "b")}
    with _serve({key: UnrulyObject(len(body), body) for key, body in bodies.items()}) as server:
        with s3_environment(server.endpoint):
            mirror = PrefixMirror(parse_url(f"s3://{server.bucket}/run"), tmp_path / "mirror", fetch_policy)
            first = mirror.sync()
            second = mirror.sync()
            third = mirror.sync()
    assert first.body_bytes <= (1 << 20) + 2 * tuning.TAIL_CHECK_BYTES
    (short,) = first.errors
    assert short.path == f"s3://{server.bucket}/run/b.log"
    assert (
        short.message == f"read to byte {256 << 10} of {768 << 10}: this pass's byte budget is spent, the next reads on"
    )
    assert second.errors == () and third.errors == () and third.body_bytes == 0
    for key, body in bodies.items():
        assert (tmp_path / "mirror" / key.split("/")[1]).read_bytes() == body


def test_a_listing_that_never_ends_stops_at_the_cap_with_the_runs_listed(event_file, triage, monkeypatch):
    monkeypatch.setattr(tuning, "MAX_LISTED_KEYS", 5_000)
    objects = {
        f"sweep/run-{n}/runs/events.out.tfevents.{n}": UnrulyObject(len(event_file), event_file) for n in range(3)
    }
    with _serve(objects, endless_listing=True) as server, s3_environment(server.endpoint):
        code, out, err = _scan(triage, f"s3://{server.bucket}/sweep")
    assert [line.split()[1] for line in out.splitlines()] == ["run-0/runs", "run-1/runs", "run-2/runs"]
    assert all("step 199" in line for line in out.splitlines())
    assert err.splitlines() == [
        f"triage scan: s3://{server.bucket}/sweep: listing stopped at 5000 keys, "
        "the most one listing holds: list a narrower prefix"
    ]
    assert code == 1
    # the pages past the cap were never asked for (the client may have asked one ahead): what is
    # held is bounded by the cap, the listing ended
    assert server.list_pages <= 5_000 // 1000 + 2, server.list_pages


def test_a_listing_answered_while_gets_never_are_reports_every_run_within_the_deadline(triage, monkeypatch):
    """64 runs, each an event file and a config beside it; the server lists them and holds every GET."""
    patience = 1.0 * load_factor()
    monkeypatch.setattr(tuning, "REQUEST_TIMEOUT_SECS", patience)
    monkeypatch.setattr(tuning, "DEADLINE_SECS", patience * 1.5)
    monkeypatch.setattr(tuning, "STALLED_SECS", patience * 1.5)
    objects: dict[str, UnrulyObject] = {}
    for n in range(64):
        objects[f"sweep/run-{n:02d}/runs/events.out.tfevents.{n}"] = UnrulyObject(1000)
        objects[f"sweep/run-{n:02d}/config.json"] = UnrulyObject(2, b"{}")
    with _serve(objects, hang_gets=True) as server, s3_environment(server.endpoint):
        started = time.monotonic()
        code, out, err = _scan(triage, f"s3://{server.bucket}/sweep")
        took = time.monotonic() - started
    lines = out.splitlines()
    # Each run as on disk (its config.json, never fetched, still marks the run's root), its config
    # unread for the pass's reason, said once (by the chance line's reader, not again by the pass),
    # and its event file.
    assert [line.split()[1] for line in lines] == [f"run-{n:02d}" for n in range(64)]
    assert all(
        f"no scalars yet  error: s3://{server.bucket}/sweep/run-" in line
        and ("/config.json: cannot read it: no answer within" in line or "not asked: the store has answered" in line)
        and "(+1 more)" in line
        for line in lines
    )
    assert err == "" and code == 1
    # the first requests wait out their deadline; once the store has answered nothing for
    # STALLED_SECS the rest are not sent: 128 objects cost about one deadline, not 128 of them
    assert took < patience * 1.5 + 5 * load_factor(), took


ANSWER_EVERY_SECS = 0.1  # the slow server's pace: one GET answered at a time, this far apart


def _slow_sweep(event_file: bytes, quiet: float) -> dict[str, UnrulyObject]:
    """Runs enough for three of the pass's quiet deadlines at the slow server's pace: each an event
    file (200 points) and a config.json."""
    config = b'{"draft_vocab_size": 32000}'
    objects: dict[str, UnrulyObject] = {}
    for n in range(math.ceil(3 * quiet / ANSWER_EVERY_SECS / 2)):
        objects[f"sweep/run-{n:02d}/runs/events.out.tfevents.{n}"] = UnrulyObject(len(event_file), event_file)
        objects[f"sweep/run-{n:02d}/config.json"] = UnrulyObject(len(config), config)
    return objects


def test_a_slow_server_that_keeps_answering_is_read_to_the_end_past_the_quiet_deadline(event_file, triage, monkeypatch):
    """The pass's deadline is a silence's: each answer moves it on. A server that answers one GET
    every 0.1 s, for objects enough for three deadlines, has every run read, none in error (a fixed
    deadline left two thirds of them an error each: a 10 000-run bucket's scan read half its runs)."""
    quiet = 1.0 * load_factor()
    monkeypatch.setattr(tuning, "PASS_DEADLINE_SECS", quiet)
    objects = _slow_sweep(event_file, quiet)
    runs = len(objects) // 2
    with _serve(objects, one_at_a_time_secs=ANSWER_EVERY_SECS) as server, s3_environment(server.endpoint):
        started = time.monotonic()
        code, out, err = _scan(triage, f"s3://{server.bucket}/sweep")
        took = time.monotonic() - started
    lines = out.splitlines()
    assert [line.split()[1] for line in lines] == [f"run-{n:02d}" for n in range(runs)]
    assert all("step 199" in line and "error" not in line for line in lines), out
    assert err == "", err
    assert took > 2 * quiet, took  # the objects did take longer than the deadline


def test_a_pass_ends_by_its_bound_however_its_server_answers(event_file, triage, monkeypatch):
    """However steadily a server answers, a pass ends ``PASS_MAX_SECS`` after it began: the objects
    it did not reach are one error each, the runs it reached are read."""
    quiet = 1.0 * load_factor()
    monkeypatch.setattr(tuning, "PASS_DEADLINE_SECS", quiet)
    monkeypatch.setattr(tuning, "PASS_MAX_SECS", 1.5 * quiet)
    objects = _slow_sweep(event_file, quiet)
    with _serve(objects, one_at_a_time_secs=ANSWER_EVERY_SECS) as server, s3_environment(server.endpoint):
        started = time.monotonic()
        code, out, err = _scan(triage, f"s3://{server.bucket}/sweep")
        took = time.monotonic() - started
    lines = out.splitlines()
    assert len(lines) == len(objects) // 2, out
    assert any("step 199" in line and "error" not in line for line in lines), out  # reached: read
    # cut by the bound: abandoned at it ("no answer within ... (the pass's deadline)") or not sent
    # after it ("not fetched: the pass's deadline passed first")
    assert any("no scalars yet" in line and "the pass's deadline" in line for line in lines), out
    assert all("step 199" in line or "the pass's deadline" in line for line in lines), out
    assert code == 1
    assert took < 1.5 * quiet + 5 * load_factor(), took


def test_quitting_ends_a_pass_that_waits_on_a_silent_store_at_once(tmp_path):
    import threading

    objects = {f"run-{n}/runs/events.out.tfevents.{n}": UnrulyObject(1000) for n in range(40)}
    stop = threading.Event()
    with _serve(objects, hang_gets=True) as server, s3_environment(server.endpoint):
        mirror = PrefixMirror(parse_url(f"s3://{server.bucket}"), tmp_path / "mirror", fetch_policy, stop=stop)
        done: list[float] = []
        worker = threading.Thread(target=lambda: (mirror.sync(), done.append(time.monotonic())))
        worker.start()
        deadline = time.monotonic() + 10
        while server.held < 16 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.held >= 16  # requests in flight, none answered
        stopped = time.monotonic()
        stop.set()
        worker.join(5)
    assert done and done[0] - stopped < 0.5, done
    assert all(path.stat().st_size == 1 for path in Path(tmp_path / "mirror").rglob("*tfevents*"))


def test_requests_in_flight_are_capped_and_no_caller_waits_past_its_deadline(monkeypatch):
    """96 callers at once, each reading an object the server never answers: at most MAX_IN_FLIGHT
    requests reach the server, and every caller has its one-line answer by its deadline, the
    requests queued behind the cap never sent."""
    from concurrent.futures import ThreadPoolExecutor

    from triage_tui.core.errors import BadInput
    from triage_tui.core.objstore.store import Store

    patience = 1.0 * load_factor()
    monkeypatch.setattr(tuning, "DEADLINE_SECS", patience)
    monkeypatch.setattr(tuning, "REQUEST_TIMEOUT_SECS", patience * 10)
    with _serve({f"k{n}": UnrulyObject(10) for n in range(96)}, hang_gets=True) as server:
        with s3_environment(server.endpoint):
            store = Store(parse_url(f"s3://{server.bucket}"))

            def read(n: int) -> tuple[str, float]:
                started = time.monotonic()
                try:
                    store.read(f"k{n}")
                except BadInput as err:
                    return err.what, time.monotonic() - started
                return "answered", time.monotonic() - started

            with ThreadPoolExecutor(96) as pool:
                answers = list(pool.map(read, range(96)))
    assert 0 < server.most_held <= tuning.MAX_IN_FLIGHT, server.most_held
    assert {what for what, _ in answers} == {f"no answer within {patience:.1f} s"}
    assert max(took for _, took in answers) < patience + 1.0


async def test_the_tui_shows_the_runs_that_answer_first_and_q_quits_at_once_while_one_hangs(event_file, monkeypatch):
    """`triage s3://…` as commands/tui.py starts it (the first poll begun before the app), on a bucket
    where one run's event file is listed and never served: the others are on the first screen with
    their points, that one listed beside them; `q` ends the app and its reading threads at once."""
    import asyncio

    from builders.pilot import make_app
    from builders.waiting import wait_for
    from triage_tui.commands.tui import start_reading

    # the hanging request is not given up on for two minutes: nothing on screen may wait for that
    monkeypatch.setattr(tuning, "DEADLINE_SECS", 120.0)
    monkeypatch.setattr(tuning, "REQUEST_TIMEOUT_SECS", 120.0)
    monkeypatch.setattr(tuning, "STALLED_SECS", 120.0)
    served = UnrulyObject(len(event_file), event_file)
    objects = {f"sweep/fast-{n}/runs/events.out.tfevents.{n}": served for n in range(2)}
    objects["sweep/slow/runs/events.out.tfevents.9"] = served
    with _serve(objects, hang_keys=("slow/",)) as server, s3_environment(server.endpoint):
        mirrors = Mirrors()
        root = mirrors.local(f"s3://{server.bucket}/sweep")
        started = time.monotonic()
        watcher = start_reading([root], poll_interval=0.2, use_watchdog=False, mirrors=mirrors)
        app = make_app(root, readonly=True, watcher=watcher)
        async with app.run_test(size=(120, 32)) as pilot:

            def first_screen() -> bool:
                steps = {row.name: row.last_step for row in app.rows}
                return steps == {"fast-0/runs": 199, "fast-1/runs": 199, "slow/runs": None}

            await wait_for(pilot, first_screen, what="the runs that answer, and the one that does not")
            shown = time.monotonic() - started
            assert server.held == 1  # the slow run's GET is still unanswered
            pressed = time.monotonic()
            await pilot.press("q")
        # what asyncio.run waits for when `triage` returns from app.run(): the worker's thread
        await asyncio.wait_for(asyncio.get_running_loop().shutdown_default_executor(), 30)
        quit_secs = time.monotonic() - pressed
    assert shown < 30, shown
    assert quit_secs < 1.0, quit_secs


def test_a_followed_object_not_fetched_yet_stands_in_as_a_hole_and_an_empty_one_stays_empty(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "DEADLINE_SECS", 0.5 * load_factor())
    objects = {"run/slow/runs/events.out.tfevents.1": UnrulyObject(5000), "run/train.log": UnrulyObject(0)}
    with _serve(objects, hang_keys=("slow/",)) as server, s3_environment(server.endpoint):
        mirror = PrefixMirror(parse_url(f"s3://{server.bucket}/run"), tmp_path / "mirror", fetch_policy)
        done = mirror.sync()
    stood_in = tmp_path / "mirror" / "slow" / "runs" / "events.out.tfevents.1"
    assert stood_in.stat().st_size == 1 and stood_in.read_bytes() == b"\0"  # found by discovery, read as pending
    assert (tmp_path / "mirror" / "train.log").stat().st_size == 0
    assert [e.path for e in done.errors] == [f"s3://{server.bucket}/run/slow/runs/events.out.tfevents.1"]
