"""The replay's own guards over a chunk whose rows were validated earlier.

See :mod:`~specreplay.replay.archive.validated`. A file with a matching "validated" mark is not
checked row by row again, but nothing the replay computes may rest on the mark alone: one jitted
pass finds each row's drafted index (which the replay needs anyway) and checks what would make
the replay's figures wrong rather than refused:

- a null anywhere in a read column (:func:`nulls`: polars' null counts, no pass over the data);
- a negative cand_id (a null id read as a number), a drafted token outside the candidates;
- a non-finite value: NaN or +inf in draft_logprobs, NaN or ±inf in target_probs or emitted_q;
- a law that does not sum: Σ exp(draft_logprobs) ≤ 1 + TOL, Σ target_probs ≤ 1 + TOL, and
  emitted_q as :func:`~specreplay.replay.archive.rowrules.eq_rule` says (= 1 within TOL in
  schema v1; kept mass + draft tail = 1, or ≤ 1 + TOL with an unknown tail, in v2).

A guard is a subset of the full rules (:mod:`~specreplay.replay.archive.rowrules`), so it never
fires on a valid row; where it fires, the reader checks that chunk in full and reports the full
check's line. No duplicate check, no range checks: those need the full pass.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from numba import njit, prange
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.replay.archive.rowrules import TOL

__all__ = ["fired", "guard_rows", "nulls"]

use_numba_cache()  # before the kernel below is decorated (Numba picks its cache dir then)


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
    differ in total, fire); then :func:`guard_rows` checks every row.
    """
    nnz = int(offsets[-1])
    sizes = [cand.shape[0], lp.shape[0], tp.shape[0]] + ([eq.shape[0]] if has_eq else [])
    if any(size != nnz for size in sizes):
        return True
    bad = guard_rows(offsets, cand, lp, tp, eq, drafted, has_eq, has_drafted, drafted_idx, tails)
    return int(bad) > 0


@njit(parallel=True, cache=True)
def guard_rows(
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
) -> int:
    """Write each row's drafted index; return how many rows fail a guard (module docstring).

    Parameters
    ----------
    offsets, cand, lp, tp, eq, drafted, has_eq, has_drafted, tails
        As :func:`~specreplay.replay.archive.rowcheck.check_rows` takes them (same shapes and
        dtypes; the flat arrays hold ``offsets[-1]`` values each, checked by the caller).
    drafted_idx : int32, shape (n,)
        Output: index of drafted_id within the row's candidates, −1 without the column.
    """
    bad = 0
    has_tails = tails.shape[1] > 0
    for i in prange(offsets.shape[0] - 1):
        a = offsets[i]
        b = offsets[i + 1]
        fail = b <= a
        s_lp = 0.0
        s_tp = 0.0
        s_eq = 0.0
        k = -1
        for j in range(a, b):
            v = lp[j]
            t = tp[j]
            if cand[j] < 0 or math.isnan(v) or v == np.inf or not math.isfinite(t):
                fail = True
            s_lp += math.exp(v)
            s_tp += t
            if has_eq:
                e = eq[j]
                if not math.isfinite(e):
                    fail = True
                s_eq += e
            if has_drafted and k < 0 and cand[j] == drafted[i]:
                k = j - a
        if s_lp > 1.0 + TOL or s_tp > 1.0 + TOL:
            fail = True
        if has_eq:
            dtail = tails[0, i] if has_tails else np.nan
            if not has_tails:
                fail = fail or abs(s_eq - 1.0) > TOL
            elif math.isnan(dtail):
                fail = fail or s_eq > 1.0 + TOL
            else:
                fail = fail or abs(s_eq + dtail - 1.0) > TOL
        if has_drafted and k < 0:
            fail = True
        drafted_idx[i] = k
        if fail:
            bad += 1
    return bad
