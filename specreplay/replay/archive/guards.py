"""The replay's own guards over a chunk whose rows were validated earlier.

See :mod:`~specreplay.replay.archive.validated`. A file with a matching "validated" mark is not
checked row by row again, but nothing the replay computes may rest on the mark alone: the row
rules' screen (:func:`~specreplay.replay.archive.rowcheck.screen`), run without its duplicate-id
check, finds each row's drafted index (which the replay needs anyway) and flags every row that
might break a rule the replay's figures rest on:

- a null anywhere in a read column (:func:`nulls`: polars' null counts, no pass over the data);
- a negative cand_id (a null id read as a number), a drafted token outside the candidates;
- a value out of its range: NaN or a positive value in draft_logprobs, target_probs or
  emitted_q outside [0, 1], a tail outside [0, 1];
- a law that does not sum: Σ exp(draft_logprobs) ≤ 1 + TOL, Σ target_probs ≤ 1 + TOL, and
  emitted_q as :func:`~specreplay.replay.archive.rowrules.eq_rule` says (= 1 within TOL in
  schema v1; kept mass + draft tail = 1, or ≤ 1 + TOL with an unknown tail, in v2).

Where a guard fires, the reader checks that chunk in full and reports the full check's line
(the screen is conservative: a valid row near a threshold also sends its chunk to the full
check, which then finds nothing). No duplicate-id check: that one needs the full pass. The
guards cost the full check's time less the duplicate check (docs/scale.md, "Rows validated
earlier").
"""

from __future__ import annotations

import numpy as np
import polars as pl
from numpy.typing import NDArray

from specreplay.replay.archive import rowcheck

__all__ = ["fired", "nulls"]


def nulls(frame: pl.DataFrame, columns: list[str]) -> bool:
    """Return True when one of ``columns`` holds a null at the top level (metadata only)."""
    return any(frame.get_column(c).null_count() for c in columns)


def fired(
    offsets: NDArray[np.int64],
    cand: NDArray[np.int64],
    lp: NDArray[np.float64],
    tp: NDArray[np.float64],
    eq: NDArray[np.float64],
    drafted: NDArray[np.int64],
    has_eq: bool,
    has_drafted: bool,
    drafted_idx: NDArray[np.int32],
    tails: NDArray[np.float64],
) -> bool:
    """Return True when a guard fires on the chunk; else write each row's drafted index.

    The flat lists must each hold ``offsets[-1]`` values (a null list, or lists whose lengths
    differ in total, fire); then the screen checks every row.
    """
    nnz = int(offsets[-1])
    sizes = [cand.shape[0], lp.shape[0], tp.shape[0]] + ([eq.shape[0]] if has_eq else [])
    if any(size != nnz for size in sizes):
        return True
    suspect = rowcheck.screen(
        offsets, cand, lp, tp, eq, drafted, has_eq, has_drafted, tails, drafted_idx, ids=False
    )
    return bool(suspect.any())
