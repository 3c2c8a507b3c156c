"""Vocab-mapping check: does draft position i mean the same target token for the checkpoint and the run?

A drafter's ``lm_head`` row i was trained to predict target token ``hot_ids_checkpoint[i]``.
A fine-tune builds its labels with the run's mapping, so row i is now asked to predict
``hot_ids_run[i]``. Wherever the two differ, the gradient pulls a trained row towards an
unrelated token (docs/case.md: 252 of 32 000 positions agreed; SpecForge
PR #534: ``--ckpt-dir`` regenerated d2t/t2d from the new data and overwrote the checkpoint's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from triage_tui.core.diagnose.checks.result import CheckResult, key_value_lines, table_lines
from triage_tui.core.formats.mapping_digest import mapping_digest
from triage_tui.core.vocab import VocabMapping

NAME = "vocab_mapping"

# Below this share of positions that agree, the check fails. Any disagreeing row is a row
# trained for another token, but SpecForge/EAGLE/speculators draft vocabs are sorted by
# target id, so one token entering or leaving the vocab shifts every later position: in
# practice two mappings either agree almost everywhere or almost nowhere (the story: 0.8 %).
# 0.99 tolerates a handful of rows at the very end of the vocab (rare tokens whose rows
# barely moved during training) and fails everything that looks like a different mapping.
MIN_POSITIONAL_MATCH_FRACTION = 0.99

# How many disagreeing positions and moved positions the details list: enough to read a
# pattern off (a constant shift, a block of new tokens), small enough for JSON output.
MAX_LISTED_MISMATCHES = 50
MAX_LISTED_MOVES = 10


@dataclass(frozen=True)
class PositionMoves:
    """Where the checkpoint's draft positions land in the run's draft vocab."""

    same: int
    moved: int
    dropped: int  # no place in the run's vocab
    median_shift: int  # a constant shift means a block of tokens was inserted before them
    sample: tuple[tuple[int, int], ...]  # (checkpoint position, run position), spread over the moved rows

    def to_json(self) -> dict[str, Any]:
        return {
            "same": self.same,
            "moved": self.moved,
            "dropped": self.dropped,
            "median_shift": self.median_shift,
            "sample": [{"checkpoint_position": old, "run_position": new} for old, new in self.sample],
        }


@dataclass(frozen=True)
class Mismatch:
    """One draft position whose target token differs (None: that side has no row there)."""

    draft_id: int
    checkpoint_target_id: int | None
    run_target_id: int | None
    checkpoint_token: str | None
    run_token: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "draft_id": self.draft_id,
            "checkpoint_target_id": self.checkpoint_target_id,
            "run_target_id": self.run_target_id,
            "checkpoint_token": self.checkpoint_token,
            "run_token": self.run_token,
        }


@dataclass(frozen=True)
class TrainingTokens:
    """The run's loss-masked training tokens (from the dumps) against both draft vocabs."""

    samples: int
    tokens: int
    run_coverage: float | None = None
    checkpoint_coverage: float | None = None
    same_row_fraction: float | None = None  # of the tokens the run's vocab covers, those on their trained row
    tokens_out_of_vocab: int | None = None  # None when no token was loss-masked

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "samples": self.samples,
            "tokens": self.tokens,
            "run_coverage": self.run_coverage,
            "checkpoint_coverage": self.checkpoint_coverage,
            "same_row_fraction": self.same_row_fraction,
        }
        if self.tokens_out_of_vocab is not None:
            document["tokens_out_of_vocab"] = self.tokens_out_of_vocab
        return document


@dataclass(frozen=True)
class VocabDetails:
    """What the vocab-mapping comparison measured (docs/contracts.md names the keys tools rely on)."""

    draft_vocab_size: int
    target_vocab_size: int
    run_draft_vocab_size: int
    run_target_vocab_size: int
    positional_match: int
    positional_match_fraction: float
    overlap: int
    only_in_checkpoint: int
    only_in_run: int
    # formats/mapping_digest.py mapping_digest: the file's bytes, the digest remap shows too.
    checkpoint_sha256: str
    checkpoint_sha256_of: str
    run_sha256: str
    run_sha256_of: str
    checkpoint_source: str
    run_source: str
    checkpoint_positions_in_run: PositionMoves
    first_mismatches: tuple[Mismatch, ...]
    notes: tuple[str, ...]
    training_tokens: TrainingTokens | None

    def to_json(self) -> dict[str, Any]:
        return {
            "draft_vocab_size": self.draft_vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "run_draft_vocab_size": self.run_draft_vocab_size,
            "run_target_vocab_size": self.run_target_vocab_size,
            "positional_match": self.positional_match,
            "positional_match_fraction": self.positional_match_fraction,
            "overlap": self.overlap,
            "only_in_checkpoint": self.only_in_checkpoint,
            "only_in_run": self.only_in_run,
            "checkpoint_sha256": self.checkpoint_sha256,
            "checkpoint_sha256_of": self.checkpoint_sha256_of,
            "run_sha256": self.run_sha256,
            "run_sha256_of": self.run_sha256_of,
            "checkpoint_source": self.checkpoint_source,
            "run_source": self.run_source,
            "checkpoint_positions_in_run": self.checkpoint_positions_in_run.to_json(),
            "first_mismatches": [m.to_json() for m in self.first_mismatches],
            "notes": list(self.notes),
            "training_tokens": self.training_tokens.to_json() if self.training_tokens is not None else None,
        }

    def drilldown(self) -> list[str]:
        lines = [
            f"{self.positional_match} / {self.draft_vocab_size} draft positions map to the same target token "
            "in both mappings",
            *key_value_lines(
                [
                    ("positional_match", self.positional_match),
                    ("positional_match_fraction", self.positional_match_fraction),
                    ("overlap", self.overlap),
                    ("only_in_checkpoint", self.only_in_checkpoint),
                    ("only_in_run", self.only_in_run),
                    ("draft_vocab_size", self.draft_vocab_size),
                    ("target_vocab_size", self.target_vocab_size),
                    ("run_draft_vocab_size", self.run_draft_vocab_size),
                    ("run_target_vocab_size", self.run_target_vocab_size),
                    ("checkpoint_source", self.checkpoint_source),
                    ("run_source", self.run_source),
                ]
            ),
        ]
        moves = self.checkpoint_positions_in_run
        lines += [
            "",
            "where the checkpoint's draft positions land in the run's vocab",
            f"{moves.same} keep their position, {moves.moved} move (median shift {moves.median_shift}), "
            f"{moves.dropped} have no place",
        ]
        if moves.sample:
            lines += table_lines(
                ("checkpoint pos", "→ run pos", "shift"), [(old, new, f"{new - old:+d}") for old, new in moves.sample]
            )
        if self.first_mismatches:
            lines += ["", f"first {len(self.first_mismatches)} mismatching draft positions"]
            lines += table_lines(
                ("draft id", "checkpoint → target", "token", "run → target", "token"),
                [
                    (
                        m.draft_id,
                        m.checkpoint_target_id,
                        _quoted(m.checkpoint_token),
                        m.run_target_id,
                        _quoted(m.run_token),
                    )
                    for m in self.first_mismatches
                ],
            )
        if self.training_tokens is not None:
            lines += ["", "the run's training tokens", *key_value_lines(list(self.training_tokens.to_json().items()))]
        return lines


def _quoted(token: str | None) -> str:
    return "–" if token is None else repr(token)


def check_vocab_mapping(
    checkpoint_mapping: VocabMapping | None,
    run_mapping: VocabMapping | None,
    *,
    token_strings: Mapping[int, str] | None = None,
    dumps: Any = None,
) -> CheckResult:
    """Compare the checkpoint's draft vocab with the run's, position by position."""
    if checkpoint_mapping is None and run_mapping is None:
        return CheckResult.skipped(
            NAME, "no vocab mapping found for the checkpoint or the run: pass --checkpoint and --mapping"
        )
    if checkpoint_mapping is None:
        return CheckResult.skipped(
            NAME,
            "the checkpoint holds no d2t buffer: vLLM then aligns draft id i with target id i (identity) "
            "while the run labels with its own mapping (NeMo Automodel PR #2447); pass --checkpoint "
            "the drafter the fine-tune started from, or a checkpoint dir with d2t/t2d",
        )
    if run_mapping is None:
        return CheckResult.skipped(
            NAME,
            "no vocab mapping found for the run (the file the trainer builds labels with, e.g. "
            "SpecForge cache/vocab_mapping/<key>.pt or speculators d2t.npy): pass --mapping",
        )

    checkpoint_digest, run_digest = mapping_digest(checkpoint_mapping), mapping_digest(run_mapping)
    ckpt_hot, run_hot = checkpoint_mapping.hot_ids, run_mapping.hot_ids
    ckpt_vd, run_vd = checkpoint_mapping.draft_vocab_size, run_mapping.draft_vocab_size
    common = min(ckpt_vd, run_vd)
    same_position = ckpt_hot[:common] == run_hot[:common]
    positional_match = int(np.count_nonzero(same_position))
    # Measured against the checkpoint's rows: those are the trained rows whose meaning we ask about.
    fraction = positional_match / ckpt_vd if ckpt_vd else 0.0

    ckpt_tokens = np.unique(ckpt_hot)
    run_tokens = np.unique(run_hot)
    overlap = int(np.intersect1d(ckpt_tokens, run_tokens, assume_unique=True).size)

    moves = _position_moves(checkpoint_mapping, run_mapping)
    mismatches = _first_mismatches(ckpt_hot, run_hot, same_position, token_strings)

    coverage = _training_token_coverage(checkpoint_mapping, run_mapping, dumps) if dumps is not None else None
    details = VocabDetails(
        draft_vocab_size=ckpt_vd,
        target_vocab_size=checkpoint_mapping.target_vocab_size,
        run_draft_vocab_size=run_vd,
        run_target_vocab_size=run_mapping.target_vocab_size,
        positional_match=positional_match,
        positional_match_fraction=fraction,
        overlap=overlap,
        only_in_checkpoint=int(ckpt_tokens.size - overlap),
        only_in_run=int(run_tokens.size - overlap),
        checkpoint_sha256=checkpoint_digest[0],
        checkpoint_sha256_of=checkpoint_digest[1],
        run_sha256=run_digest[0],
        run_sha256_of=run_digest[1],
        checkpoint_source=checkpoint_mapping.source,
        run_source=run_mapping.source,
        checkpoint_positions_in_run=moves,
        first_mismatches=mismatches,
        notes=(*checkpoint_mapping.notes, *run_mapping.notes),
        training_tokens=coverage,
    )

    problems: list[str] = []
    if ckpt_vd != run_vd:
        problems.append(f"draft vocab sizes differ: checkpoint {ckpt_vd}, run {run_vd}")
    if checkpoint_mapping.target_vocab_size != run_mapping.target_vocab_size:
        problems.append(
            f"target vocab sizes differ: checkpoint {checkpoint_mapping.target_vocab_size}, "
            f"run {run_mapping.target_vocab_size}"
        )
    if fraction < MIN_POSITIONAL_MATCH_FRACTION:
        problems.append(f"only {positional_match} / {ckpt_vd} draft positions map to the same target token")
    weighted = coverage.same_row_fraction if coverage else None
    if weighted is not None and weighted < MIN_POSITIONAL_MATCH_FRACTION:
        problems.append(f"only {weighted:.1%} of the run's training tokens land on the lm_head row trained for them")

    evidence = [
        f"{positional_match} / {ckpt_vd} draft positions map to the same target token ({fraction:.2%})",
        f"{overlap} target tokens are in both draft vocabs; {details.only_in_checkpoint} only in the "
        f"checkpoint's, {details.only_in_run} only in the run's",
        f"of the checkpoint's rows, {moves.same} keep their position, {moves.moved} move, "
        f"{moves.dropped} have no place in the run's vocab",
    ]
    if coverage and coverage.same_row_fraction is not None:
        evidence.append(
            f"{coverage.same_row_fraction:.1%} of {coverage.tokens} loss-masked training tokens hit the "
            f"row trained for them; the run's vocab covers {coverage.run_coverage:.1%}, the checkpoint's "
            f"{coverage.checkpoint_coverage:.1%}"
        )

    if problems:
        summary = "; ".join(problems)
        if moves.moved and moves.same < moves.moved:
            summary += " (the lm_head rows are ordered for another mapping: remap them)"
        return CheckResult(NAME, "fail", summary, details, tuple(evidence))
    if positional_match == ckpt_vd:
        summary = f"the two mappings agree at all {ckpt_vd} draft positions"
    else:
        summary = f"{positional_match} / {ckpt_vd} draft positions agree ({ckpt_vd - positional_match} differ, listed)"
    return CheckResult(NAME, "pass", summary, details, tuple(evidence))


def _position_moves(checkpoint: VocabMapping, run: VocabMapping) -> PositionMoves:
    """Where each checkpoint draft position's token sits in the run's draft vocab."""
    ckpt_hot = checkpoint.hot_ids
    run_position = run.draft_position_of()
    in_range = (ckpt_hot >= 0) & (ckpt_hot < run.target_vocab_size)
    new_position = np.full(ckpt_hot.shape[0], -1, dtype=np.int64)
    new_position[in_range] = run_position[ckpt_hot[in_range]]
    old_position = np.arange(ckpt_hot.shape[0], dtype=np.int64)
    kept = new_position >= 0
    same = kept & (new_position == old_position)
    moved = kept & ~same
    shifts = new_position[moved] - old_position[moved]
    # Spread the sample over all moved rows: the first few are often one block with one shift.
    picked = np.unique(np.linspace(0, shifts.size - 1, num=min(MAX_LISTED_MOVES, shifts.size)).astype(np.int64))
    sample = tuple((int(old_position[moved][k]), int(new_position[moved][k])) for k in picked.tolist())
    return PositionMoves(
        same=int(np.count_nonzero(same)),
        moved=int(np.count_nonzero(moved)),
        dropped=int(np.count_nonzero(~kept)),
        median_shift=int(np.median(shifts)) if shifts.size else 0,
        sample=sample,
    )


def _first_mismatches(
    ckpt_hot: np.ndarray, run_hot: np.ndarray, same_position: np.ndarray, token_strings: Mapping[int, str] | None
) -> tuple[Mismatch, ...]:
    """The first disagreeing draft positions, with token strings when a tokenizer was found."""
    differing = np.flatnonzero(~same_position)[:MAX_LISTED_MISMATCHES]
    # Positions past the shorter vocab disagree too: one side has no row there.
    longer = ckpt_hot if ckpt_hot.shape[0] > run_hot.shape[0] else run_hot
    tail = np.arange(same_position.shape[0], longer.shape[0])[: MAX_LISTED_MISMATCHES - differing.size]
    rows = []
    for draft_id in (*differing.tolist(), *tail.tolist()):
        ckpt_id = int(ckpt_hot[draft_id]) if draft_id < ckpt_hot.shape[0] else None
        run_id = int(run_hot[draft_id]) if draft_id < run_hot.shape[0] else None
        rows.append(
            Mismatch(int(draft_id), ckpt_id, run_id, _token(token_strings, ckpt_id), _token(token_strings, run_id))
        )
    return tuple(rows)


def _token(token_strings: Mapping[int, str] | None, token_id: int | None) -> str | None:
    if token_strings is None or token_id is None:
        return None
    return token_strings.get(token_id)


def _training_token_coverage(checkpoint: VocabMapping, run: VocabMapping, dumps: Any) -> TrainingTokens | None:
    """Share of the run's loss-masked training tokens each draft vocab covers, and the share on the right row.

    SpecForge builds its draft vocab from exactly these tokens (``input_ids[loss_mask == 1]``,
    specforge/data/preprocessing.py), so the run's vocab should cover nearly all of them. What the
    masks themselves look like (empty, covering the prompt) is the loss-mask check's.
    """
    chunks = []
    for sample in getattr(dumps, "samples", ()):
        ids = np.asarray(sample.input_ids, dtype=np.int64).reshape(-1)
        if sample.loss_mask is not None:
            ids = ids[np.asarray(sample.loss_mask).reshape(-1) != 0]
        chunks.append(ids)
    if not chunks:
        return None
    ids = np.concatenate(chunks)
    counts = {"samples": len(chunks), "tokens": int(ids.size)}
    if ids.size == 0:
        # Every loss mask is empty: nothing to cover (checks/loss_mask.py reports it).
        return TrainingTokens(**counts)
    vocab = max(checkpoint.target_vocab_size, run.target_vocab_size)
    valid = (ids >= 0) & (ids < vocab)
    out_of_vocab = int(ids.size - np.count_nonzero(valid))
    ids = ids[valid]
    ckpt_pos = _padded_inverse(checkpoint, vocab)[ids]
    run_pos = _padded_inverse(run, vocab)[ids]
    in_run = run_pos >= 0
    return TrainingTokens(
        **counts,
        run_coverage=float(np.mean(in_run)) if ids.size else 0.0,
        checkpoint_coverage=float(np.mean(ckpt_pos >= 0)) if ids.size else 0.0,
        # Of the tokens the run actually trains on, how many land on the row the checkpoint trained for them.
        same_row_fraction=float(np.mean(ckpt_pos[in_run] == run_pos[in_run])) if np.any(in_run) else None,
        tokens_out_of_vocab=out_of_vocab,
    )


def _padded_inverse(mapping: VocabMapping, vocab: int) -> np.ndarray:
    inverse = np.full(vocab, -1, dtype=np.int64)
    inverse[: mapping.target_vocab_size] = mapping.draft_position_of()
    return inverse
