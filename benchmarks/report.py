"""docs/speed.md and the README's speed summary, written from the benchmarks' RESULTS files.

Every benchmark appends each run to its ``RESULTS-<name>.md`` with a record (record.py): the figures,
the date, the load average, the commit and the command. This script takes the latest record of
each and writes the pages; nothing on them is typed by hand.

    .venv/bin/python benchmarks/report.py            # the pages, from the RESULTS files as they are
    .venv/bin/python benchmarks/report.py --run      # first the user-facing benchmarks at full size
                                                     # (~20 min on 2 quiet cores), then the pages
    .venv/bin/python benchmarks/report.py --run-all  # also checks, remap and W&B (~30 min more)
    .venv/bin/python benchmarks/report.py --check    # exit 1 when a page is not what this would write
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import record  # noqa: E402 - benchmarks/, found through the sys.path entry above

SPEED = REPO / "docs" / "speed.md"
KEEP_AT = 1.3  # benchmarks/ab.py's rule: a fast path stays where it gains this much on some figure
README = REPO / "README.md"
SUMMARY_BEGIN = "<!-- speed-summary: written by benchmarks/report.py -->"
SUMMARY_END = "<!-- /speed-summary -->"

# The benchmarks whose rows make the table, in its order; the command each --run starts.
USER_FACING = {
    "export": ["benchmarks/bench_export.py"],
    "paint": ["benchmarks/bench_paint.py", "--sweep"],
    "sweep": ["benchmarks/bench_sweep.py"],
    "events": ["benchmarks/bench_events.py"],
    "ab": ["benchmarks/ab.py"],
}
LONG = {
    "bucket": ["benchmarks/bench_bucket.py", "--runs", "200", "--points", "2000"],
    "bucket-gcs": ["benchmarks/bench_bucket.py", "--server", "gcs", "--runs", "1000", "--points", "1000"],
    "bucket-latency": ["benchmarks/bench_bucket_latency.py", "--runs", "200"],
    "wandb": ["benchmarks/bench_wandb.py"],
    "checks": ["benchmarks/bench_checks.py"],
    "remap": ["benchmarks/bench_remap.py"],
}
# bench_scale.py (idle CPU, bytes a point, 200 runs and a 10M-point run) keeps its figures in its
# RESULTS file only: none of them is set beside another tool's as a whole process.


def latest(benchmark: str) -> dict | None:
    found = record.records(benchmark)
    return found[-1] if found else None


def measured(rec: dict) -> str:
    load = f"{rec['load'][0]}→{rec['load'][1]}"
    source = f" ({rec['transcribed']})" if rec.get("transcribed") else ""
    return f"{rec['date']}, load {load}, `{rec['commit']}`{source}"


def seconds(x: float) -> str:
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.2f} s"


def headline_rows() -> list[tuple[dict, dict]]:
    """Each figure's latest measurement: a benchmark run at another size (a sweep of 10 000 small runs
    beside the 100 large ones) adds its rows beside the others' instead of replacing them."""
    rows = []
    for name in [*USER_FACING, *LONG]:
        if name in ("ab", "bucket-latency", "bucket-gcs"):  # each has a section of its own
            continue
        seen: set[str] = set()
        for rec in reversed(record.records(name)):
            fresh = [(row, rec) for row in rec["rows"] if _figure(row) not in seen]
            seen.update(_figure(row) for row, _ in fresh)
            rows += fresh
    return rows


def _figure(row: dict) -> str:
    """Which figure a row measures: its words, whether its numbers were written 1000 or 1,000."""
    return row["what"].replace(",", "")


def side(cell: dict | None) -> str:
    if not cell:
        return "–"
    return f"{cell['label']}: **{seconds(cell['seconds'])}**"


def memory(row: dict) -> str:
    ours = row["triage"].get("rss_mib")
    theirs = (row.get("other") or {}).get("rss_mib")
    if ours is None:
        return "–"
    return f"{ours:.0f} / {theirs:.0f} MiB" if theirs is not None else f"{ours:.0f} MiB"


def ratio(row: dict) -> str:
    other = row.get("other")
    if not other:
        return "–"
    return f"**{other['seconds'] / row['triage']['seconds']:.2f}**"


def mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n:,} bytes"


def bucket_section() -> list[str]:
    """The sweep in a bucket (bench_bucket.py): the first scan beside the local one and TensorBoard's
    loader on the same bucket, and what the polls of a watched bucket fetch."""
    rec = latest("bucket")
    lines = ["", "## A sweep in a bucket", ""]
    if rec is None:
        return [*lines, "Not measured yet: `.venv/bin/python benchmarks/bench_bucket.py`."]
    row = rec["rows"][0]
    first, polls = row["first_scan"], row["polls"]
    idle, grew = polls["idle poll"], polls["poll after one run grew"]
    lines += [
        f"Measured {measured(rec)} by `{rec['command']}`, on moto's S3 server (a Python server on the",
        "same machine, far slower than S3: the bucket's times are an upper bound). Best of the rounds,",
        "whole processes from exec to exit:",
        "",
        "| what | seconds | peak RSS, whole process | ÷ triage on the bucket |",
        "|---|---|---|---|",
    ]
    for key in ("triage", "local", "other"):
        cell = row[key]
        lines.append(
            f"| {cell['label']} | **{seconds(cell['seconds'])}** | {cell['rss_mib']:.0f} MiB "
            f"| {cell['seconds'] / row['triage']['seconds']:.2f} |"
        )
    lines += [
        "",
        f"The first scan fetched {mb(first['object_bytes'])} of object bodies in {first['requests']:,} requests, for",
        f"{mb(first['bucket_bytes'])} in the bucket. A watched bucket, polled (counted at a proxy in front of the",
        "server):",
        "",
        "| poll | requests | response bytes, listings included | object-body bytes |",
        "|---|---|---|---|",
        f"| nothing changed | {idle['requests']:,} | {idle['response_bytes']:,} | {idle['object_bytes']:,} |",
        f"| one run grew by {row['appended_bytes']:,} bytes | {grew['requests']:,} | {grew['response_bytes']:,} "
        f"| {grew['object_bytes']:,} |",
    ]
    return lines + _gcs_lines()


def _gcs_lines() -> list[str]:
    """The same first scan on fake-gcs-server (bench_bucket.py --server gcs), a Go server that takes
    far less of the shared cores a request than moto."""
    rec = latest("bucket-gcs")
    if rec is None:
        return []
    row = rec["rows"][0]
    bucket, local = row["triage"], row["local"]
    times = bucket["seconds"] / local["seconds"]
    return [
        "",
        f"On fake-gcs-server ({row['server']}, a Go server; measured {measured(rec)} by `{rec['command']}`),",
        f"{row['what'].removeprefix('a sweep in a bucket, ')}: {seconds(bucket['seconds'])} against",
        f"{seconds(local['seconds'])} for the same sweep on local disk, **{times:.2f}×**.",
    ]


def bucket_latency_section() -> list[str]:
    """A bucket at a provider's latency (bench_bucket_latency.py): a proxy holding every request, runs
    each holding a sharded checkpoint; the whole scan, the first rows and the idle poll."""
    rec = latest("bucket-latency")
    lines = ["", "## A bucket at a provider's latency", ""]
    if rec is None:
        return [*lines, "Not measured yet: `.venv/bin/python benchmarks/bench_bucket_latency.py`."]
    row = rec["rows"][0]
    shards = row["scan_kinds"].get("GET shard", 0)
    server = row.get("server", "moto's S3 server")
    lines += [
        f"Measured {measured(rec)} by `{rec['command']}`: {row['runs']} runs, each an event file and a",
        f"checkpoint of {row['shards']} safetensors shards ({row['objects']:,} objects), on {server} behind a",
        f"proxy holding every request {row['latency_ms']:g} ms. Best of the rounds, from exec, empty object cache:",
        "",
        "| what | seconds |",
        "|---|---|",
        f"| the whole `triage scan --json` of the bucket | **{seconds(row['scan_s'])}** |",
        f"| first rows (a Watcher as the TUI starts one) | **{seconds(row['first_rows_s'])}** |",
        f"| the same scan on local disk (no proxy) | {seconds(row['local_scan_s'])} |",
        "",
        *(
            [
                f"That scan read {row['scan_points']:,} of the {row['scan_points_expected']:,} points: the rest lay",
                "past its pass's deadline (each such run an error).",
            ]
            if row.get("scan_points", row.get("scan_points_expected")) != row.get("scan_points_expected")
            else []
        ),
        f"The scan sent {row['scan_requests']:,} requests and read {shards} shard objects; an idle poll sent",
        f"{row['idle_requests']:,} request(s) and {row['idle_object_bytes']:,} object bytes"
        + (f", its listings {row['idle_listing_bytes']:,} bytes." if "idle_listing_bytes" in row else "."),
        *(
            [f"The watcher's peak RSS (whole process): {row['watcher_rss_mib']:,.0f} MiB."]
            if "watcher_rss_mib" in row
            else []
        ),
    ]
    if "fake-gcs" in server:
        lines += ["fake-gcs-server answers a listing in one page whatever its size; S3 sends 1 000 keys a page."]
    later = row.get("idle_for_long") or {}
    if later:
        lines += [
            "",
            "Once every run has been idle for long (the listing tiers' clocks moved on), the same watcher's polls:",
            "",
            "| poll | requests | object bytes | shard keys listed |",
            "|---|---|---|---|",
            *(
                f"| {name} | {p['requests']:,} | {p['object_bytes']:,} | {p['shard_keys_listed']:,} |"
                for name, p in later.items()
            ),
        ]
    return lines


def fine_seconds(x: float) -> str:
    return f"{x * 1000:.1f} ms" if x < 0.01 else seconds(x)


def fast_paths_section() -> list[str]:
    """Each fast path against its plain path (ab.py), and which stayed: a fast path the record
    measured that ab.py no longer has (its FAST_PATHS) was deleted, its plain path the one left."""
    import ab as harness  # benchmarks/: the fast paths the code still has

    rec = latest("ab")
    lines = [
        "",
        "## What each fast path buys",
        "",
        f"A fast path stays where it gains at least {KEEP_AT}× on a figure a user feels, with a plain",
        "path beside it, chosen by a switch the tests use to check that both give the same answer;",
        "`benchmarks/ab.py` times the two alternating in one window. One that gains less is deleted",
        "and its plain path is the only one.",
        "",
    ]
    if rec is None:
        return [*lines, "Not measured yet: `.venv/bin/python benchmarks/ab.py`."]
    rounds = max(row["rounds"] for row in rec["rows"])
    lines += [
        f"Measured {measured(rec)} on {rec['machine']}, by `{rec['command']}`: the median of",
        f"{rounds} rounds, fast and plain alternating which goes first.",
        "",
        "| fast path | plain path | figure | fast | plain | plain ÷ fast | now |",
        "|---|---|---|---|---|---|---|",
    ]
    paths: dict[str, list[dict]] = {}
    for row in rec["rows"]:
        paths.setdefault(row["fast_path"], []).append(row)
        if row["fast_path"] not in harness.FAST_PATHS:
            continue  # deleted since: the code is gone, its figures are said once below
        lines.append(
            f"| {row['what']} | {row['plain']} | {row['figure']} | {fine_seconds(row['fast_s'])} "
            f"| {fine_seconds(row['plain_s'])} | **{row['ratio']:.2f}** | kept |"
        )
    cores = int(rec["machine"].split()[0])
    lines.append("")
    for name, rows in paths.items():
        what, best = rows[0]["what"], max(rows, key=lambda row: row["ratio"])
        each = "; ".join(f"{row['ratio']:.2f}× ({row['figure']})" for row in rows)
        if name not in harness.FAST_PATHS and best["ratio"] < KEEP_AT:
            verdict = (
                f"deleted. Measured {each}: under {KEEP_AT}× on every figure, at load {rec['load'][0]} on "
                f"{cores} cores. Its plain path ({rows[0]['plain']}) is the only one."
            )
        elif name not in harness.FAST_PATHS:
            verdict = (
                f"deleted. Measured {each}: {best['ratio']:.2f}× on {best['figure']} only, and under {KEEP_AT}× "
                f"on the others; one way to read is kept. Its plain path ({rows[0]['plain']}) is the only one."
            )
        elif best["ratio"] >= KEEP_AT:
            at = ", just at the threshold" if best["ratio"] < KEEP_AT + 0.05 else ""
            verdict = f"kept. Measured {each}: {best['ratio']:.2f}× at best{at}."
            for row in rows:
                if row["ratio"] < 1:
                    verdict += (
                        f" It is slower on {row['figure']}: {fine_seconds(row['fast_s'])} against "
                        f"{fine_seconds(row['plain_s'])} on its plain path ({row['ratio']:.2f}×)."
                    )
        elif rec["load"][0] > cores:
            verdict = f"under {KEEP_AT}× at load {rec['load'][0]} on {cores} cores, to be measured on a quiet machine."
        else:
            verdict = f"under {KEEP_AT}× on every figure: to be deleted."
        lines.append(f"- {what}: {verdict}")
    return lines


def speed_page() -> str:
    lines = [
        "# Speed",
        "",
        "<!-- Written by benchmarks/report.py from benchmarks/RESULTS-*.md: rerun a benchmark (or",
        "     `report.py --run`), never edit this page. -->",
        "",
        "Each figure is a whole process as a user runs it, timed against the tool a user would",
        "otherwise run on the same files in the same round, so the ratio holds even where the machine",
        "is shared (its load average is given; on a loaded machine the wall times grow, the ratios",
        "less). Memory is the same figure for every tool: the whole process's peak RSS. Each row names",
        "its run: the date, the load average at its start and end, the commit measured, and the",
        "command that measured it; `benchmarks/RESULTS-<name>.md` has every run with its full table.",
        "The other tools install with `.venv/bin/pip install -e '.[bench]'` (tbparse, and rclone, whose S3",
        "server serves the lab-sized bucket; tensorboard and its Rust data server come with triage's own",
        "dependencies).",
        "",
        "## Against the tools a user would otherwise run",
        "",
        "| what | triage | the other tool | other ÷ triage | peak RSS, whole process: triage / other "
        "| measured | command |",
        "|---|---|---|---|---|---|---|",
    ]
    for row, rec in headline_rows():
        lines.append(
            f"| {row['what']} | {side(row['triage'])} | {side(row.get('other'))} | {ratio(row)} | {memory(row)} "
            f"| {measured(rec)} | `{rec['command']}` |"
        )
    lines += fast_paths_section()
    lines += bucket_section()
    lines += bucket_latency_section()
    lines += [
        "",
        "## Regenerating",
        "",
        "```sh",
        ".venv/bin/python benchmarks/report.py --run   # the benchmarks above at full size, then this page",
        ".venv/bin/python benchmarks/report.py         # this page and the README's summary from the RESULTS files",
        "```",
        "",
    ]
    return "\n".join(lines)


def summary() -> str:
    lines = []
    for row, rec in headline_rows():
        other = row.get("other")
        # The machine's state beside every figure: on a loaded machine the wall times grow.
        where = f"load {rec['load'][0]} on {rec['machine'].split(' (')[0].split(',')[0]}, {rec['date'][:10]}"
        if other:
            name = other.get("name") or other["label"]
            lines.append(
                f"- {row['what']}: triage {seconds(row['triage']['seconds'])}, {name} {seconds(other['seconds'])} "
                f"({other['seconds'] / row['triage']['seconds']:.1f}× triage's time; {where})."
            )
        else:
            lines.append(f"- {row['what']}: {seconds(row['triage']['seconds'])} ({where}).")
        if rec["benchmark"] == "bucket":
            idle, grew = row["polls"]["idle poll"], row["polls"]["poll after one run grew"]
            lines.append(
                f"- that bucket, watched: a poll with nothing changed sends {idle['requests']:,} listing "
                f"request(s) and fetches {idle['object_bytes']:,} object bytes; after one run grew by "
                f"{row['appended_bytes']:,} bytes, {grew['requests']:,} requests and {grew['object_bytes']:,} "
                f"object bytes ({where})."
            )
    return "\n".join(lines)


def readme_with_summary(text: str) -> str:
    if SUMMARY_BEGIN not in text or SUMMARY_END not in text:
        raise SystemExit(f"README.md has no {SUMMARY_BEGIN} ... {SUMMARY_END} block")
    head, rest = text.split(SUMMARY_BEGIN, 1)
    _, tail = rest.split(SUMMARY_END, 1)
    return f"{head}{SUMMARY_BEGIN}\n{summary()}\n{SUMMARY_END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="store_true", help="run the user-facing benchmarks first")
    parser.add_argument("--run-all", action="store_true", help="run every benchmark first")
    parser.add_argument("--check", action="store_true", help="exit 1 if a page differs from what would be written")
    args = parser.parse_args()
    if args.run or args.run_all:
        for name, command in {**USER_FACING, **(LONG if args.run_all else {})}.items():
            print(f"== {name}: {' '.join(command)}", flush=True)
            subprocess.run([sys.executable, *command], cwd=REPO, check=True)
    pages = {SPEED: speed_page(), README: readme_with_summary(README.read_text(encoding="utf-8"))}
    if args.check:
        stale = [p.relative_to(REPO) for p, text in pages.items() if not p.exists() or p.read_text("utf-8") != text]
        if stale:
            print(f"not what benchmarks/report.py writes: {', '.join(map(str, stale))}", file=sys.stderr)
            return 1
        return 0
    for path, text in pages.items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
