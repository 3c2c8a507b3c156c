"""Every registered check at real size on the CPU, against the story's hand-written mapping script.

Builds in benchmarks/.work/checks/ (deleted at the end unless --keep), each in a child process:
- the Kimi-K2-shaped EAGLE-3 drafter of bench_remap.py (hidden 7168, draft vocab 32 000, target
  vocab 163 840, bf16 safetensors, d2t/t2d of the story's checkpoint mapping) and the run's
  mapping as SpecForge's .pt (252 / 32 000 positions agree, tests/builders/mappings.py);
- a target model directory as a K2-sized checkpoint names its head: a sharded safetensors index
  whose shards hold ``model.embed_tokens.weight`` and ``lm_head.weight`` [163 840, 7168] bf16 and
  ``model.norm.weight`` (the transformer layers are left out: no check reads them);
- SpecForge hidden-state dumps (``rows_0-4/data_{i}.ckpt``: input_ids, loss_mask,
  hidden_state [1, T, 7168], aux_hidden_state [1, T, 3 * 7168], bf16) of --tokens tokens each;
- a run directory whose triage.toml names all of them.

Then, each in a fresh process with its peak RSS from getrusage:
- ``diagnose()`` (what ``triage check`` runs) with device="cpu": the wall and CPU time of each check
  from its progress messages (a check's time includes reading the inputs it is the first to need,
  and the first check to apply the target head makes the one pass over it for all of them);
- the story's script: torch.load the run's mapping, read the drafter's d2t, build both hot-id
  lists and compare them position by position in a Python loop, plus the overlap and the
  reverse mapping (docs/case.md).

    .venv/bin/python benchmarks/bench_checks.py            # ~5 min on 2 loaded cores, ~9 GiB peak (building)
    .venv/bin/python benchmarks/bench_checks.py --keep     # keep the ~6 GB of inputs: a rerun skips building
    .venv/bin/python benchmarks/bench_checks.py --tokens 16 --dumps 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK = HERE / ".work" / "checks"
HIDDEN = 7168
TARGET_VOCAB = 163_840


def build_target(root: Path) -> None:
    """A K2-sized target head: embed_tokens and lm_head [163 840, 7168] bf16 in two shards, and the norm."""
    import torch
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": TARGET_VOCAB,
        "hidden_size": HIDDEN,
        "num_hidden_layers": 61,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (root / "config.json").write_text(json.dumps(config, indent=2))
    gen = torch.Generator().manual_seed(7)
    shards = {
        "model-00001-of-00002.safetensors": ["model.embed_tokens.weight"],
        "model-00002-of-00002.safetensors": ["lm_head.weight", "model.norm.weight"],
    }
    weight_map = {}
    for shard, names in shards.items():
        tensors = {}
        for name in names:
            if name == "model.norm.weight":
                tensors[name] = (1.0 + 0.1 * torch.randn(HIDDEN, generator=gen)).to(torch.bfloat16)
            else:
                tensors[name] = (0.02 * torch.randn(TARGET_VOCAB, HIDDEN, generator=gen)).to(torch.bfloat16)
            weight_map[name] = shard
        save_file(tensors, str(root / shard), metadata={"format": "pt"})
        del tensors
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def build_dumps(root: Path, count: int, tokens: int) -> None:
    """SpecForge prepare_hidden_states.py output: rows_{g}-{g+4}/data_{i}.ckpt (torch.save of a dict)."""
    import torch

    gen = torch.Generator().manual_seed(11)
    for i in range(count):
        ids = torch.randint(0, TARGET_VOCAB, (tokens,), generator=gen)
        loss_mask = torch.ones(tokens, dtype=torch.long)
        loss_mask[: tokens // 4] = 0  # the prompt
        data = {
            "input_ids": ids,
            "loss_mask": loss_mask,
            "hidden_state": torch.randn(1, tokens, HIDDEN, generator=gen).to(torch.bfloat16),
            "aux_hidden_state": torch.randn(1, tokens, 3 * HIDDEN, generator=gen).to(torch.bfloat16),
        }
        folder = root / f"rows_{i // 4 * 4}-{i // 4 * 4 + 4}"
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(data, folder / f"data_{i}.ckpt")


def build(root: Path, dumps: int, tokens: int) -> Path:
    """Every input, each builder in its own process (the parent stays small); the run directory."""
    drafter = root / "kimi-k2-eagle3"
    if not drafter.exists():
        subprocess.run([sys.executable, str(HERE / "bench_remap.py"), "--build", str(root)], check=True, cwd=REPO)
    if not (root / "target" / "model.safetensors.index.json").exists():
        subprocess.run([sys.executable, __file__, "--child", "target", str(root / "target")], check=True, cwd=REPO)
    data = root / "hidden_states"
    shutil.rmtree(data, ignore_errors=True)
    subprocess.run(
        [sys.executable, __file__, "--child", "dumps", str(data), str(dumps), str(tokens)], check=True, cwd=REPO
    )
    run = root / "k25-finetune"
    run.mkdir(exist_ok=True)
    (run / "triage.toml").write_text(
        "[run]\nvocab_size = 32000\n"
        f'checkpoint = "{drafter}"\nmapping = "{root / "run_vocab_mapping.pt"}"\n'
        f'data = "{data}"\ntarget = "{root / "target"}"\n'
    )
    return run


# --------------------------------------------------------------------------- children


def _peak_mib(pid: int | str = "self") -> float:
    """VmHWM: this process image's peak RSS (getrusage's maxrss also counts the parent before exec)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024
    except (OSError, StopIteration):
        return 0.0


def timed_check(run: Path) -> dict:
    """`triage check RUN --json --device cpu` as a user runs it: wall time from exec to exit, peak RSS."""
    cmd = [sys.executable, "-m", "triage_tui", "check", str(run), "--json", "--device", "cpu"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    peak = 0.0
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()
    while True:
        peak = max(peak, _peak_mib(proc.pid))
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.05)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    stderr = proc.stderr.read().decode()
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"triage check exited {proc.returncode}:\n{stderr[-3000:]}")
    doc = json.loads(out[0])
    return {
        "seconds": seconds,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_mib": peak,
        "exit": proc.returncode,
        "replay_tokens": doc["checks"]["replay"].get("tokens"),
        "top_hypothesis": doc["hypotheses"][0]["id"],
    }


def child_diagnose(run: str) -> dict:
    t0 = time.perf_counter()
    import torch

    from triage_tui.core.diagnose.check_inputs import resolve_run
    from triage_tui.core.diagnose.diagnosis import diagnose
    from triage_tui.core.diagnose.evidence import Evidence

    torch.set_num_threads(os.cpu_count() or 1)
    imports = time.perf_counter() - t0
    marks: dict[str, list[float]] = {}
    cpu_marks: dict[str, list[float]] = {}

    replay_tokens: list[tuple[float, int]] = []

    def progress(fraction: float, message: str) -> None:
        name = message.split(":", 1)[0]
        marks.setdefault(name, []).append(time.perf_counter())
        cpu_marks.setdefault(name, []).append(time.process_time())  # every thread of the process
        if name == "replay" and "tokens" in message:  # "replay: 35/140 tokens", once per dump file
            replay_tokens.append((time.perf_counter(), int(message.split(":", 1)[1].split("/")[0])))

    t0, cpu0 = time.perf_counter(), time.process_time()
    inputs = resolve_run(Path(run)).inputs
    diagnosis = diagnose(Evidence(inputs, device="cpu"), progress=progress)
    total, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    checks = {}
    for name, result in diagnosis.checks.items():
        stamps = marks.get(name, [t0, t0])
        cpu_stamps = cpu_marks.get(name, [cpu0, cpu0])
        checks[name] = {
            "seconds": stamps[-1] - stamps[0],
            "cpu_s": cpu_stamps[-1] - cpu_stamps[0],
            "status": result.status,
            "summary": result.summary,
        }
    # The first dump's interval holds the drafter's loading (and the target-head pass when the replay is
    # the first check to apply the head); the later ones are compute.
    replay_split = None
    if len(replay_tokens) >= 3:
        start = marks["replay"][0]
        later = [(t1 - t0, n1 - n0) for (t0, n0), (t1, n1) in itertools.pairwise(replay_tokens)]
        per_token = sum(dt for dt, _ in later) / sum(dn for _, dn in later)
        first_s = replay_tokens[0][0] - start
        replay_split = {"load_s": first_s - per_token * replay_tokens[0][1], "per_token_s": per_token}
    vocab = diagnosis.checks["vocab_mapping"].to_json()  # the check --json keys
    replay = diagnosis.checks["replay"].to_json()
    return {
        "imports_s": imports,
        "total_s": total,
        "cpu_s": cpu,
        "checks": checks,
        "peak_mib": _peak_mib(),
        "positional_match": vocab.get("positional_match"),
        "overlap": vocab.get("overlap"),
        "replay_tokens": replay.get("tokens"),
        "replay_device": replay.get("device"),
        "top_hypothesis": diagnosis.hypotheses[0].id,
        "threads": torch.get_num_threads(),
        "replay_split": replay_split,
    }


def child_manual(checkpoint: str, mapping: str) -> dict:
    """What the story's diagnostic script did (docs/case.md), written the way one writes it by hand."""
    t0 = time.perf_counter()
    import torch
    from safetensors import safe_open

    imports = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = torch.load(mapping, weights_only=True)
    with safe_open(str(Path(checkpoint) / "model.safetensors"), framework="pt") as f:
        their_d2t = f.get_tensor("d2t")
    their_hot = [i + int(their_d2t[i]) for i in range(len(their_d2t))]
    our_hot = [i + int(ours["d2t"][i]) for i in range(len(ours["d2t"]))]
    positional = 0
    for a, b in zip(their_hot, our_hot, strict=False):
        if a == b:
            positional += 1
    overlap = len(set(their_hot) & set(our_hot))
    our_position = {token: i for i, token in enumerate(our_hot)}
    moved = sum(1 for i, token in enumerate(their_hot) if token in our_position and our_position[token] != i)
    seconds = time.perf_counter() - t0
    return {
        "imports_s": imports,
        "seconds": seconds,
        "positional_match": positional,
        "overlap": overlap,
        "moved": moved,
        "peak_mib": _peak_mib(),
    }


def run_child(*args: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    import as_installed  # benchmarks/: the script's own directory is on sys.path

    as_installed.compile_triage()  # timed processes start as an installed triage does
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dumps", type=int, default=4, help="hidden-state dump files")
    parser.add_argument("--tokens", type=int, default=48, help="tokens per dump")
    parser.add_argument("--keep", action="store_true", help="keep benchmarks/.work/checks for a rerun")
    parser.add_argument("--dry-run", action="store_true", help="print the run, append nothing to RESULTS-checks.md")
    args = parser.parse_args()
    import record

    run = record.Run("checks", dry_run=args.dry_run)

    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    t0 = time.perf_counter()
    WORK.mkdir(parents=True, exist_ok=True)
    try:
        run_dir = build(WORK, args.dumps, args.tokens)
        sizes = {p.name: p.stat().st_size for p in WORK.rglob("*") if p.is_file()}
        print(
            f"built in {time.perf_counter() - t0:.0f} s: drafter "
            f"{sum(v for k, v in sizes.items() if k == 'model.safetensors') / 2**30:.2f} GiB, target head "
            f"{sum(v for k, v in sizes.items() if k.startswith('model-0000')) / 2**30:.2f} GiB, "
            f"{args.dumps} dumps of {args.tokens} tokens",
            flush=True,
        )
        manual = run_child("manual", str(WORK / "kimi-k2-eagle3"), str(WORK / "run_vocab_mapping.pt"))
        print(f"manual script: {json.dumps(manual)}", flush=True)
        diag = run_child("diagnose", str(run_dir))
        print(f"diagnose: {json.dumps(diag)}", flush=True)
        whole = timed_check(run_dir)
        print(f"triage check: {json.dumps(whole)}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(WORK, ignore_errors=True)

    assert manual["positional_match"] == diag["positional_match"] == 252, (manual, diag)
    assert manual["overlap"] == diag["overlap"]
    print(
        f"\n{os.cpu_count()} CPUs, load average {load_start} at start, "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at end; torch threads {diag['threads']}; "
        f"diagnose peak RSS {diag['peak_mib'] / 1024:.1f} GiB, imports {diag['imports_s']:.1f} s\n"
    )
    count = len(diag["checks"])
    print("| check | wall time on the CPU (s) | CPU time (s) | status | what it found |")
    print("|---|---|---|---|---|")
    for name, check in diag["checks"].items():
        print(f"| {name} | {check['seconds']:.2f} | {check['cpu_s']:.2f} | {check['status']} | {check['summary']} |")
    print(
        f"| **all {count} checks (diagnose)** | **{diag['total_s']:.2f}** | **{diag['cpu_s']:.1f}** | | "
        f"top hypothesis: {diag['top_hypothesis']} |"
    )
    print(
        f"\n`triage check RUN --json --device cpu`, the whole process from exec to exit (imports, reading, "
        f"all {count} checks, the JSON): **{whole['seconds']:.1f} s** wall ({whole['cpu_s']:.1f} s of CPU), "
        f"peak RSS **{whole['peak_mib'] / 1024:.2f} GiB**, "
        f"exit status {whole['exit']}, replay over {whole['replay_tokens']} tokens, top hypothesis "
        f"{whole['top_hypothesis']}."
    )
    vocab_s = diag["checks"]["vocab_mapping"]["seconds"]
    print("\n| story's script (torch.load + Python loop) | triage vocab_mapping check | ratio |")
    print("|---|---|---|")
    print(
        f"| {manual['seconds']:.2f} s ({manual['positional_match']} / 32000 positional, overlap "
        f"{manual['overlap']}) | {vocab_s:.2f} s (same numbers, plus moved rows and first mismatches) | "
        f"{manual['seconds'] / vocab_s:.1f}× |"
    )
    split = diag["replay_split"]
    if split:
        print(
            f"\nreplay on {diag['replay_device']}: {diag['replay_tokens']} tokens; loading the drafter (its labels "
            f"come from the one pass over the target head) ~{split['load_s']:.0f} s, then "
            f"{split['per_token_s']:.3f} s "
            f"per token (the stored aux chunk order); the CPU default cap of 512 tokens would add "
            f"~{(512 - diag['replay_tokens']) * split['per_token_s']:.0f} s of drafter passes "
            f"(and the head pass grows in proportion)."
        )
    print("The GPU number needs a machine with one: benchmarks/gpu_check.py.")
    run.save(
        "Checks at real size",
        f"`triage check RUN --json --device cpu`, the whole process: {whole['seconds']:.1f} s wall, "
        f"{whole['cpu_s']:.1f} s of CPU, peak RSS {whole['peak_mib'] / 1024:.2f} GiB, exit status {whole['exit']}, "
        f"top hypothesis {whole['top_hypothesis']}; the vocab check {vocab_s:.2f} s against the story's script's "
        f"{manual['seconds']:.2f} s.",
        [
            {
                "what": "`triage check` of a Kimi-K2-sized run on the CPU (drafter 1.7 GB, target vocab 163 840), "
                "every check",
                "triage": {
                    "name": "triage",
                    "label": "`triage check RUN --json --device cpu`",
                    "seconds": whole["seconds"],
                    "cpu": whole["cpu_s"],
                    "rss_mib": whole["peak_mib"],
                },
                "other": None,
            }
        ],
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.path.insert(0, str(REPO))
        kind, rest = sys.argv[2], sys.argv[3:]
        if kind == "target":
            build_target(Path(rest[0]))
        elif kind == "dumps":
            build_dumps(Path(rest[0]), int(rest[1]), int(rest[2]))
        elif kind == "diagnose":
            print(json.dumps(child_diagnose(rest[0])))
        elif kind == "manual":
            print(json.dumps(child_manual(rest[0], rest[1])))
        else:
            raise SystemExit(f"unknown child {kind}")
    else:
        main()
