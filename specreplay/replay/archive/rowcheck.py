"""Per-row validation kernel over the flat (CSR) list columns of a chunk.

See docs/inputs.md#position-traces-schema-v1.

One jitted pass checks every rule that looks at a single row's lists, and finds the drafted
candidate's index. The rules themselves live in :mod:`specreplay.replay.archive.rowrules`
(plain Python, the recorders run them there without Numba); this module compiles them. Rules
spanning rows (order, duplicates, constancy) live in :mod:`specreplay.replay.archive.reader`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.replay.archive import rowrules
from specreplay.replay.archive.rowrules import (
    DUP_CAND,
    LP_ZERO,
    NEG_CAND,
    NO_DRAFT,
    NONFINITE,
    NONFINITE_LP,
    NOT_IN_CANDS,
    OK,
    ROW_RULES,
    TOL,
)

__all__ = [
    "DUP_CAND",
    "LP_ZERO",
    "NEG_CAND",
    "NONFINITE",
    "NONFINITE_LP",
    "NOT_IN_CANDS",
    "NO_DRAFT",
    "OK",
    "ROW_RULES",
    "TOL",
    "check_rows",
]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

# check_row calls these by their global names: registered, Numba compiles the same functions
for _rule in (rowrules.dup_neg, rowrules.lp_rule, rowrules.tp_rule, rowrules.eq_rule):
    register_jitable(inline="always")(_rule)
_check_row = njit(cache=True, inline="always")(rowrules.check_row)


@njit(parallel=True, cache=True)
def check_rows(
    offsets: NDArray[np.int64],
    cand: NDArray[np.int64],
    lp: NDArray[np.float64],
    tp: NDArray[np.float64],
    eq: NDArray[np.float64],
    drafted: NDArray[np.int64],
    has_eq: bool,
    has_drafted: bool,
    code: NDArray[np.int8],
    detail: NDArray[np.float64],
    drafted_idx: NDArray[np.int32],
    tails: NDArray[np.float64],
) -> None:
    """Check each row's lists; write the first failing rule's code per row.

    Parameters
    ----------
    offsets : int64, shape (n + 1,)
        Row i's candidates are ``[offsets[i], offsets[i + 1])`` of the flat arrays.
    cand, lp, tp : int64 / float64 / float64, shape (nnz,)
        cand_ids, draft_logprobs, target_probs, flattened.
    eq : float64, shape (nnz,) or (0,)
        emitted_q flattened (ignored unless ``has_eq``).
    drafted : int64, shape (n,) or (0,)
        drafted_id per row (ignored unless ``has_drafted``).
    code : int8, shape (n,)
        Output: 0 when the row passes, else the first failing rule (see ``ROW_RULES``).
    detail : float64, shape (n,)
        Output: the offending sum or value where the rule has one, else NaN.
    drafted_idx : int32, shape (n,)
        Output: index of drafted_id within the row's candidates, −1 if absent.
    tails : float64, shape (2, n) or (2, 0)
        Schema v2: row 0 draft_tail, row 1 target_tail, NaN where unknown; (2, 0) when the
        archive has neither column (v1). A known draft tail turns "Σ emitted_q = 1" into
        "Σ emitted_q + draft_tail = 1" (an unknown one into "Σ emitted_q ≤ 1"); a known target
        tail adds "Σ target_probs + target_tail = 1".
    """
    for i in prange(offsets.shape[0] - 1):
        _check_row(
            i, offsets, cand, lp, tp, eq, drafted, has_eq, has_drafted, code, detail, drafted_idx,
            tails,
        )  # fmt: skip
