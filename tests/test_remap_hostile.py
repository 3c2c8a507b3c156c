"""`triage remap` against hostile and degenerate inputs (issue 11, items 4, 7, 8 and 9).

Each test here failed before its fix. Permissions are taken away for real: the remap runs in a
child process that drops root to `nobody` (root reads a chmod 000 file anyway), after one remap
as root has loaded every module a remap imports (the interpreter's own files are root's).
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from builders.drafter import drafter_config, drafter_state, write_drafter
from builders.remap import run_cli, tree_digest
from triage_tui.core import fileio
from triage_tui.core.errors import BadInput
from triage_tui.core.fix.remap.execute import execute_remap, output_entries
from triage_tui.core.fix.remap.plan import plan_remap
from triage_tui.core.fix.remap.staging import PROVENANCE_FILE
from triage_tui.core.formats.mapping import write_mapping_pt

NOBODY = 65534


def _remap_as_nobody(warm_argv: list[str], cases: dict[str, list[str]], replies) -> None:
    """Spawned child: one remap as root, then each case as `nobody`; replies {case: (exit code, stderr)}."""
    from triage_tui.cli import main

    def run(argv: list[str]) -> tuple[object, str]:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code: object = main(["remap", *argv])
        except BaseException as exc:  # noqa: BLE001 - a traceback is what the test looks for
            code = f"raised {exc!r}"
        return code, err.getvalue()

    try:
        warm = run(warm_argv)
        assert warm[0] == 0, warm
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        replies.put({name: run(argv) for name, argv in cases.items()})
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        replies.put(f"child failed: {exc!r}")


def test_unreadable_inputs_are_one_line_exit_2_as_an_unprivileged_user(story):
    """PermissionError on the config, the weights, the mapping, a shard index, the checkpoint directory
    and a file carried over: one line naming the file, exit 2, nothing written (was a traceback)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to nobody")
    ckpt_mapping, run_mapping = story
    base = Path(tempfile.mkdtemp(prefix="triage-remap-perm-", dir="/tmp"))
    try:
        base.chmod(0o755)
        state = drafter_state("specforge", ckpt_mapping)
        cases: dict[str, list[str]] = {}
        unreadable: dict[str, Path] = {}
        for case in ("warm", "config", "weights", "mapping", "index", "directory", "carried-over file"):
            root = base / case
            source = write_drafter(
                root / "drafter",
                state,
                drafter_config("specforge"),
                file_kind="sharded" if case == "index" else "safetensors",
            )
            (source / "tokenizer.json").write_text("{}")
            mapping = write_mapping_pt(run_mapping, root / "run_mapping.pt")
            for path in [root, *root.rglob("*")]:
                path.chmod(0o777 if path.is_dir() else 0o644)  # nobody may write outputs beside the source
            unreadable[case] = {
                "config": source / "config.json",
                "weights": source / "model.safetensors",
                "mapping": mapping,
                "index": source / "model.safetensors.index.json",
                "directory": source,
                "carried-over file": source / "tokenizer.json",
                "warm": None,
            }[case]
            argv = [str(source), "--mapping", str(mapping), "--out", str(root / "out")]
            if case == "warm":
                warm_argv = argv
            else:
                cases[case] = argv
        for path in unreadable.values():
            if path is not None:
                path.chmod(0o000)
        before = {case: tree_digest(base / case) for case in cases}

        ctx = multiprocessing.get_context("spawn")
        replies = ctx.Queue()
        child = ctx.Process(target=_remap_as_nobody, args=(warm_argv, cases, replies))
        child.start()
        try:
            results = replies.get(timeout=240)
        finally:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
        assert isinstance(results, dict), results
        for case, (code, err) in results.items():
            assert code == 2, (case, code, err)
            assert err.startswith("triage: ") and err.count("\n") == 1, (case, err)
            assert str(unreadable[case]) in err and "Permission denied" in err, (case, err)
            assert not (base / case / "out").exists(), case
            assert [p for p in os.listdir(base / case) if ".triage-" in p] == [], case
            for path in [base / case, *(base / case).rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)
            assert tree_digest(base / case) == before[case], case
    finally:
        for path in [base, *base.rglob("*")]:
            with contextlib.suppress(OSError):
                path.chmod(0o755 if path.is_dir() else 0o644)
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------------------------------
# --force replaces only what triage wrote (item 8)


def _args(world, out: Path, *more: str) -> list[str]:
    return [str(world["source"]), "--mapping", str(world["mapping"]), "--out", str(out), *more]


@pytest.mark.parametrize("fake", ["empty object", "symlink to a real one", "another tool's"])
def test_force_does_not_take_a_look_alike_provenance_file_for_a_triage_output(world, capsys, fake):
    out = world["root"] / "out"
    out.mkdir()
    (out / "thesis.tex").write_text("mine")
    if fake == "empty object":
        (out / PROVENANCE_FILE).write_text("{}")
    elif fake == "symlink to a real one":
        assert run_cli(_args(world, world["root"] / "real", "--init-missing", "zeros"), capsys)[0] == 0
        (out / PROVENANCE_FILE).symlink_to(world["root"] / "real" / PROVENANCE_FILE)
    else:
        (out / PROVENANCE_FILE).write_text(json.dumps({"tool": "other", "files": ["thesis.tex"]}))
    before = tree_digest(out)
    code, stdout, err = run_cli(_args(world, out, "--force"), capsys)
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert "not a triage output" in err
    assert tree_digest(out) == before and (out / "thesis.tex").read_text() == "mine"


def test_force_refuses_an_earlier_output_that_holds_files_the_user_added(world, capsys):
    out = world["root"] / "out"
    assert run_cli(_args(world, out, "--init-missing", "zeros"), capsys)[0] == 0
    (out / "eval-results.json").write_text('{"acceptance": 0.61}')
    (out / "notes").mkdir()
    before = tree_digest(out)
    code, stdout, err = run_cli(_args(world, out, "--force"), capsys)
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert "2 file(s) triage did not write ('eval-results.json', 'notes')" in err
    assert tree_digest(out) == before and (out / "notes").is_dir()
    # once they are moved out, --force replaces it
    (out / "eval-results.json").unlink()
    (out / "notes").rmdir()
    code, stdout, err = run_cli(_args(world, out, "--force", "--json"), capsys)
    assert code == 0 and json.loads(stdout)["replaced"] is True, err


def test_force_replaces_an_earlier_kept_mapping_output(world, capsys):
    out = world["root"] / "kept"
    args = [str(world["source"]), "--keep-checkpoint-mapping", "--out", str(out)]
    assert run_cli(args, capsys)[0] == 0
    assert run_cli(args + ["--force"], capsys)[0] == 0
    (out / "mine.txt").write_text("x")
    code, _, err = run_cli(args + ["--force"], capsys)
    assert code == 2 and "'mine.txt'" in err and (out / "mine.txt").exists()


# ------------------------------------------------------------------------------------------
# what is carried over from the checkpoint directory (item 7)


def test_a_symlink_out_of_the_checkpoint_is_not_followed(world, capsys, tmp_path_factory):
    secret = tmp_path_factory.mktemp("home") / "api-key"
    secret.write_text("sk-do-not-copy")
    secret.chmod(0o600)
    (world["source"] / "tokenizer.json").symlink_to(secret)
    inside = world["source"] / "files"
    inside.mkdir()
    (inside / "vocab.txt").write_text("a\nb\n")
    (world["source"] / "vocab.txt").symlink_to(inside / "vocab.txt")  # within the checkpoint: carried
    before = tree_digest(world["source"])
    code, stdout, err = run_cli(_args(world, world["root"] / "out", "--json"), capsys)
    assert code == 0, err
    report = json.loads(stdout)
    out = world["root"] / "out"
    assert not (out / "tokenizer.json").exists()
    assert not any(b"sk-do-not-copy" in p.read_bytes() for p in out.iterdir())
    assert (out / "vocab.txt").read_text() == "a\nb\n" and not (out / "vocab.txt").is_symlink()
    assert any("tokenizer.json (symlinks to outside the checkpoint" in note for note in report["notes"])
    assert tree_digest(world["source"]) == before


def test_carried_over_files_keep_their_modes(world, capsys):
    modes = {"special_tokens_map.json": 0o600, "tokenizer_config.json": 0o640, "README.md": 0o444}
    for name, mode in modes.items():
        (world["source"] / name).write_text(name)
        (world["source"] / name).chmod(mode)
    assert run_cli(_args(world, world["root"] / "out"), capsys)[0] == 0
    for name, mode in modes.items():
        copy = world["root"] / "out" / name
        assert copy.read_text() == name and copy.stat().st_mode & 0o777 == mode, name


def test_a_sparse_carried_over_file_is_streamed_and_stays_sparse(world, capsys):
    big = world["source"] / "tokenizer.model"
    size = 3 << 30
    with open(big, "wb") as f:
        f.write(b"head")
        f.seek(size - 4)
        f.write(b"tail")
    if big.stat().st_blocks * 512 > 1 << 20:
        pytest.skip("this filesystem does not keep holes")
    code, stdout, err = run_cli(_args(world, world["root"] / "out"), capsys)
    assert code == 0, err
    copy = world["root"] / "out" / "tokenizer.model"
    assert copy.stat().st_size == size and copy.stat().st_blocks * 512 <= 1 << 20
    with open(copy, "rb") as f:
        assert f.read(4) == b"head" and f.read(4) == b"\0" * 4
        f.seek(size - 4)
        assert f.read() == b"tail"


def test_carried_over_files_count_in_the_free_space_check(world, capsys, monkeypatch):
    (world["source"] / "tokenizer.json").write_bytes(os.urandom(8 << 20))
    plan = plan_remap(world["source"], world["mapping"], out=world["root"] / "out")
    weights = sum(e.nbytes for entries in output_entries(plan).values() for e in entries)
    del plan
    # room for the weights and a little more, not for the 8 MiB tokenizer.json
    monkeypatch.setattr(fileio, "free_bytes", lambda directory: weights + (4 << 20))
    code, _, err = run_cli(_args(world, world["root"] / "out"), capsys)
    assert code == 2 and "GB is free" in err and err.count("\n") == 1, err
    assert sorted(os.listdir(world["root"])) == ["drafter", "run_mapping.pt"]


# ------------------------------------------------------------------------------------------
# the digest recorded is that of the bytes copied (item 9)


def _flip_in_place(path: Path, offset: int) -> None:
    """Change one byte without a new inode, size or mtime (what (dev, inode, size, mtime) misses)."""
    info = path.stat()
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def test_a_source_changed_in_place_after_planning_is_recorded_as_copied(world):
    import blake3
    from safetensors import safe_open

    plan = plan_remap(world["source"], world["mapping"], out=world["root"] / "out")
    thread = getattr(getattr(plan, "source_digest", None), "thread", None)
    if thread is not None:  # a plan that hashed the source up front (as triage did) has finished by now
        thread.join()
    weights = world["source"] / "model.safetensors"
    begin, _ = plan.checkpoint.tensors["fc.weight"].data
    _flip_in_place(weights, begin + 5)
    report = execute_remap(plan, device="cpu")
    now = blake3.blake3(weights.read_bytes()).hexdigest()
    assert report.source_blake3 == {"model.safetensors": now}
    provenance = json.loads((report.output / PROVENANCE_FILE).read_text())
    assert provenance["source_blake3"] == {"model.safetensors": now}
    with (
        safe_open(str(report.output / "model.safetensors"), framework="np") as out,
        safe_open(str(weights), framework="np") as source,
    ):  # the output holds the bytes as changed
        assert out.get_tensor("fc.weight").tobytes() == source.get_tensor("fc.weight").tobytes()


def test_a_source_changed_in_place_during_the_remap_writes_nothing(world):
    """Changed after its bytes were copied, before the comparison: the output no longer matches the
    source, so nothing is renamed into place (and no digest of the changed bytes is recorded)."""
    weights = world["source"] / "model.safetensors"
    plan = plan_remap(world["source"], world["mapping"], out=world["root"] / "out")
    # the verification goes in file order: the last copied tensor is compared after every other
    last = max(
        (name for name in plan.checkpoint.tensors if name not in (plan.lm_head_name, "d2t", "t2d")),
        key=lambda name: plan.checkpoint.tensors[name].data[0],
    )
    begin, _ = plan.checkpoint.tensors[last].data
    flipped: list[str] = []

    def progress(fraction: float, phase: str) -> None:
        if phase.startswith("verifying") and not flipped:  # every byte is copied by now
            _flip_in_place(weights, begin + 5)
            flipped.append(phase)

    with pytest.raises(BadInput, match=f"verification failed: {re.escape(last)} differs from the source"):
        execute_remap(plan, device="cpu", progress=progress)
    assert len(flipped) == 1 and flipped[0] != f"verifying {last}"  # before it was compared
    assert sorted(os.listdir(world["root"])) == ["drafter", "run_mapping.pt"]


def test_a_dropped_lm_head_row_changed_during_the_remap_writes_nothing(world):
    """The mean is summed over every old row, those no new row copies too: a change there after the
    copy is invisible to the comparison with the output, so the pass's digest of them catches it."""
    weights = world["source"] / "model.safetensors"
    plan = plan_remap(world["source"], world["mapping"], out=world["root"] / "out", init="mean")
    assert plan.rows_initialized > 0
    kept = set(plan.source_rows[plan.source_rows >= 0].tolist())
    old_rows, width = plan.checkpoint.tensors[plan.lm_head_name].shape
    dropped = next(row for row in range(old_rows) if row not in kept)
    begin, end = plan.checkpoint.tensors[plan.lm_head_name].data
    row_bytes = (end - begin) // old_rows
    flipped: list[str] = []

    def progress(fraction: float, phase: str) -> None:
        if phase.startswith("verifying") and not flipped:
            _flip_in_place(weights, begin + dropped * row_bytes + 1)
            flipped.append(phase)

    with pytest.raises(BadInput, match="rows the mean was taken over changed in the source"):
        execute_remap(plan, device="cpu", progress=progress)
    assert flipped
    assert sorted(os.listdir(world["root"])) == ["drafter", "run_mapping.pt"]


@pytest.mark.parametrize("keep", [False, True], ids=["remap", "keep-checkpoint-mapping"])
def test_an_out_on_a_filesystem_that_stores_no_files_says_so(world, capsys, keep):
    """`--out /proc/x` said "needs 0.00 GB for x but only 0.00 GB is free" (remap), or was a
    FileNotFoundError traceback from mkdtemp (--keep-checkpoint-mapping)."""
    argv = (
        [str(world["source"]), "--keep-checkpoint-mapping", "--out", "/proc/x"]
        if keep
        else _args(world, Path("/proc/x"), "--init-missing", "zeros")
    )
    code, stdout, err = run_cli(argv, capsys)
    assert (code, stdout) == (2, "")
    assert (
        err == "triage: /proc: is on a filesystem that stores no files (such as /proc or /sys): choose another --out\n"
    )


def test_a_checkpoint_under_a_name_that_is_not_utf8_is_remapped(tmp_path, capsys):
    """The provenance in the output's safetensors header held the source path's undecodable byte as
    a lone surrogate: the header was not UTF-8 JSON, the output did not read back, and verification
    refused every remap of such a checkpoint."""
    from safetensors import safe_open

    from builders.tensorboard import write_drafter_checkpoint

    write_drafter_checkpoint(tmp_path / "ck", draft_vocab=32)
    source = Path(os.fsdecode(os.fsencode(tmp_path) + b"/ck-\xff\x1b[2J"))
    os.rename(tmp_path / "ck", source)
    out = tmp_path / "out"
    code, stdout, err = run_cli([str(source), "--mapping", str(source), "--out", str(out)], capsys)
    assert code == 0, err
    with safe_open(str(out / "model.safetensors"), framework="np") as written:
        assert written.metadata()["triage.source"] == f"{tmp_path}/ck-\\xff\x1b[2J"
