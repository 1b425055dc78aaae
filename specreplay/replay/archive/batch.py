"""RoundBatch: whole rounds of a position-trace archive as flat numpy arrays for kernels.

Terms (docs/methods.md#rounds-retained-tokens-and-r): a **round** drafts positions 1..d; each
position row carries the drafter's candidates (a CSR slice of the flat candidate arrays). A batch
always holds whole rounds, in archive order. Request, family and bucket are small integer codes into
the tables of the :class:`~specreplay.replay.archive.reader.ArchiveReader` that produced the batch;
``round_key`` is the stable 64-bit request key used by counter-based random numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import polars as pl
from numpy.typing import NDArray

__all__ = ["AT_FILE_SHIFT", "RoundBatch", "at_parts", "concat_batches", "take_rounds"]

AT_FILE_SHIFT = 40
"""A round's place in the archive is one int64, ``file index << AT_FILE_SHIFT | row/line``, so
the smallest value of a set of rounds is the first of them in archive order (files in sorted path
order, rows or lines within a file; up to 2^40 rows per file)."""


def at_parts(at: int) -> tuple[int, int]:
    """Return (file index, row or line) of a round's ``round_at`` value."""
    return at >> AT_FILE_SHIFT, at & ((1 << AT_FILE_SHIFT) - 1)


@dataclass(frozen=True)
class RoundBatch:
    """Whole rounds as flat arrays (n_pos position rows, n_rounds rounds, nnz candidates).

    Attributes
    ----------
    offsets : int64, (n_pos + 1,)
        Position row i's candidates are ``[offsets[i], offsets[i + 1])``.
    cand_ids : int64, (nnz,)
    draft_logprobs : float64, (nnz,)
        Full-vocabulary draft log-probabilities (−inf allowed).
    target_probs : float64, (nnz,)
    emitted_q : float64, (nnz,) or (0,) when the archive has no emitted_q.
    draft_tail, target_tail : float64, (n_pos,) or (0,)
        Schema v2: the draft's (the logging law's) and the target's mass outside the row's
        candidates, NaN where unknown; (0,) when the archive has neither column (v1).
    position : int64, (n_pos,)
        Draft position 1..d.
    drafted_idx : int32, (n_pos,)
        Index of drafted_id within the row's candidates; −1 when the archive has no drafted_id.
    accepted : int8, (n_pos,)
        1/0, or −1 when the archive has no accepted column.
    round_offsets : int64, (n_rounds + 1,)
        Round r's position rows are ``[round_offsets[r], round_offsets[r + 1])``.
    round_request : int64, (n_rounds,)
        Request code (index into the reader's request table).
    round_key : uint64, (n_rounds,)
        Stable request key of the round's request.
    round_index : int64, (n_rounds,)
        The archived round number.
    round_family : int32, (n_rounds,)
        Family code.
    round_bucket : int32, (n_rounds,)
        Context-bucket code.
    round_context : int64, (n_rounds,)
        context_tokens at the start of the round.
    round_depth : int32, (n_rounds,)
        Number of positions recorded in the round.
    measured_accepted : int32, (n_rounds,)
        MEASURED A: leading True values of ``accepted``; −1 without that column.
    extras : polars.DataFrame
        Carried-through columns, one row per position row (no columns when there are none).
    row_at : int64, (n_pos,) or (0,)
        Where each position row was read, encoded as ``round_at`` is, so that a replay meeting a
        row it cannot use names it (:func:`~specreplay.replay.archive.sources.format_location`);
        empty for batches built elsewhere than by the reader.
    round_capped : int8, (n_rounds,) or (0,)
        Schema v2's mark (issue 16): 1 where the request's end or token limit capped the round's
        draft length, 0 where it did not, −1 unknown; (0,) for batches built elsewhere than by
        the reader.
    round_at : int64, (n_rounds,) or (0,) when unknown
        Where the round's first position row is: ``file index << AT_FILE_SHIFT | row/line``
        (:data:`AT_FILE_SHIFT`; rows of Parquet files 0-based, lines of JSONL 1-based), file
        indices into the reader's files. Messages about a round cite it.
    """

    offsets: NDArray[np.int64]
    cand_ids: NDArray[np.int64]
    draft_logprobs: NDArray[np.float64]
    target_probs: NDArray[np.float64]
    emitted_q: NDArray[np.float64]
    position: NDArray[np.int64]
    drafted_idx: NDArray[np.int32]
    accepted: NDArray[np.int8]
    round_offsets: NDArray[np.int64]
    round_request: NDArray[np.int64]
    round_key: NDArray[np.uint64]
    round_index: NDArray[np.int64]
    round_family: NDArray[np.int32]
    round_bucket: NDArray[np.int32]
    round_context: NDArray[np.int64]
    round_depth: NDArray[np.int32]
    measured_accepted: NDArray[np.int32]
    extras: pl.DataFrame
    row_at: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    round_at: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    draft_tail: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0, np.float64))
    target_tail: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0, np.float64))
    round_capped: NDArray[np.int8] = field(default_factory=lambda: np.zeros(0, np.int8))

    @property
    def n_positions(self) -> int:
        """Number of position rows."""
        return int(self.position.shape[0])

    @property
    def n_rounds(self) -> int:
        """Number of rounds."""
        return int(self.round_index.shape[0])


_OFFSET_FIELDS = {"offsets": "cand_ids", "round_offsets": "position"}


def concat_batches(batches: list[RoundBatch]) -> RoundBatch:
    """Concatenate batches in order (offsets rebased), e.g. to compare streamed and whole reads."""
    if not batches:
        raise ValueError("no batch to concatenate")
    out: dict[str, object] = {}
    for f in fields(RoundBatch):
        name = f.name
        if name == "extras":
            out[name] = pl.concat([b.extras for b in batches], how="vertical")
        elif name in _OFFSET_FIELDS:
            parts = [getattr(batches[0], name)]
            base = int(parts[0][-1])
            for b in batches[1:]:
                arr = getattr(b, name)
                parts.append(arr[1:] + base)
                base += int(arr[-1])
            out[name] = np.concatenate(parts)
        else:
            out[name] = np.concatenate([getattr(b, name) for b in batches])
    return RoundBatch(**out)  # type: ignore[arg-type]


def take_rounds(batch: RoundBatch, keep: NDArray[np.bool_]) -> RoundBatch:
    """Return the rounds of ``batch`` where ``keep`` (n_rounds,) is True, in order."""
    if bool(keep.all()):
        return batch
    ro = batch.round_offsets
    rows = np.repeat(keep, np.diff(ro))
    lens = np.diff(batch.offsets)[rows]
    offsets = np.zeros(lens.shape[0] + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    nnz = np.repeat(rows, np.diff(batch.offsets))
    depth = batch.round_depth[keep]
    round_offsets = np.zeros(depth.shape[0] + 1, np.int64)
    np.cumsum(depth, out=round_offsets[1:])
    out: dict[str, object] = {}
    for f in fields(RoundBatch):
        v = getattr(batch, f.name)
        if f.name == "offsets":
            out[f.name] = offsets
        elif f.name == "round_offsets":
            out[f.name] = round_offsets
        elif f.name in ("cand_ids", "draft_logprobs", "target_probs"):
            out[f.name] = v[nnz]
        elif f.name == "emitted_q":
            out[f.name] = v[nnz] if v.shape[0] else v
        elif f.name in ("row_at", "draft_tail", "target_tail"):
            out[f.name] = v[rows] if v.shape[0] else v
        elif f.name == "extras":
            out[f.name] = v.filter(pl.Series(rows)) if v.width else v
        elif f.name.startswith("round_") or f.name == "measured_accepted":
            out[f.name] = v[keep] if v.shape[0] else v
        else:  # per position row
            out[f.name] = v[rows]
    return RoundBatch(**out)  # type: ignore[arg-type]
