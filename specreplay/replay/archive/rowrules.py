"""The per-row rules of a position trace, in plain Python that Numba also compiles.

See docs/inputs.md#position-traces-schema-v1.

One copy of the rules, two ways to run them:

- :mod:`specreplay.replay.archive.rowcheck` compiles :func:`check_row` (and :func:`dup_neg`)
  with Numba into its parallel kernel ``check_rows``: the reader's pass over an archive.
- :func:`check_rows_python` runs the same functions in the interpreter: the recorders' check of
  each round on their writer thread (:mod:`specreplay.capture.recorder`), which must not load
  Numba or llvmlite into a serving engine's process (docs/record-vllm.md). A round is a few rows,
  so the interpreter's cost is small there (measured in the recorder's docstring).

The functions use only what both run the same way: ``math`` (isnan, isfinite, exp), NumPy
scalars and arrays, loops. This module imports NumPy and the standard library only.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
from numpy.typing import NDArray

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
    "check_row",
    "check_rows_python",
    "dup_neg",
    "eq_rule",
    "lp_rule",
    "tp_rule",
]

TOL: Final[float] = 1e-6
"""Tolerance on Σ target_probs ≤ 1 and Σ exp(draft_logprobs) ≤ 1.

See docs/inputs.md#position-traces-schema-v1.
"""

OK, EMPTY, DUP_CAND, NEG_CAND, NONFINITE_LP, LP_POS, LP_SUM = 0, 1, 2, 3, 4, 5, 6
NONFINITE_TP, TP_RANGE, TP_SUM, NOT_IN_CANDS, NONFINITE_EQ, EQ_RANGE, EQ_SUM, EQ_ZERO = (
    7,
    8,
    9,
    10,
    11,
    12,
    13,
    14,
)
NO_DRAFT, LP_ZERO = 15, 16
TAIL_RANGE, EQ_TAIL_SUM, TP_TAIL_SUM = 17, 18, 19

NONFINITE: Final[frozenset[int]] = frozenset({NONFINITE_LP, NONFINITE_TP, NONFINITE_EQ})

ROW_RULES: Final[dict[int, str]] = {
    EMPTY: "empty candidate lists",
    DUP_CAND: "duplicate cand_ids",
    NEG_CAND: "negative cand_id",
    NONFINITE_LP: "NaN or +inf in draft_logprobs",
    LP_POS: "draft log-probability > 0",
    LP_SUM: "Σ exp(draft_logprobs) > 1 + 1e-6",
    NO_DRAFT: "every draft log-probability is −inf (no candidate can be drafted)",
    LP_ZERO: (
        "draft log-probability −inf at drafted_id and no emitted_q (the logged draft had "
        "probability 0)"
    ),
    NONFINITE_TP: "NaN or inf in target_probs",
    TP_RANGE: "target probability < 0 or > 1",
    TP_SUM: "Σ target_probs > 1 + 1e-6",
    NOT_IN_CANDS: "drafted_id not in cand_ids",
    NONFINITE_EQ: "NaN or inf in emitted_q",
    EQ_RANGE: "emitted_q value < 0 or > 1",
    EQ_SUM: "emitted_q does not sum to 1 within 1e-6",
    EQ_ZERO: "emitted_q is 0 at drafted_id (the logged draft had probability 0)",
    TAIL_RANGE: "draft_tail or target_tail is not a number in [0, 1]",
    EQ_TAIL_SUM: "Σ emitted_q + draft_tail is not 1 within 1e-6 (kept mass + tail = 1)",
    TP_TAIL_SUM: "Σ target_probs + target_tail is not 1 within 1e-6 (kept mass + tail = 1)",
}


def dup_neg(cand: NDArray[np.int64], a: int, b: int) -> tuple[bool, bool]:
    """Return (a cand_id repeats, a cand_id is negative) for candidates [a, b).

    A 64-bit signature of the ids seen so far (Fibonacci hashing to one bit): an id whose bit is
    clear is new; only one whose bit is set (another id may share it) is compared with the row's
    earlier ids: about 7 such ids in a row of 32 distinct ones. No allocation and no sort per
    row; rows wider than 64 (where the signature fills up) are sorted instead. Measured on 2 M
    rows of 32 candidates (2 threads): the whole row check 0.51 s with the former insertion
    sort of a fresh copy per row, 0.36 s with this, 0.24 s with no duplicate check at all.
    """
    neg = False
    if b - a > 64:
        srt = np.sort(cand[a:b])
        return bool(np.any(srt[1:] == srt[:-1])), bool(srt[0] < 0)
    m0 = np.uint64(0)
    for j in range(a, b):
        x = cand[j]
        if x < 0:
            neg = True
        bit = np.uint64(1) << ((np.uint64(x) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(58))
        seen = (m0 & bit) != 0
        m0 |= bit
        if seen:
            for i in range(a, j):
                if cand[i] == x:
                    for r in range(j + 1, b):  # the caller needs both flags
                        neg = neg or cand[r] < 0
                    return True, neg
    return False, neg


def check_row(
    i: int,
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
    """Check row ``i``: write its first failing rule (see :func:`check_rows_python`)."""
    has_tails = tails.shape[1] > 0
    dtail = tails[0, i] if has_tails else np.nan
    ttail = tails[1, i] if has_tails else np.nan
    a = offsets[i]
    b = offsets[i + 1]
    code[i] = OK
    detail[i] = np.nan
    drafted_idx[i] = -1
    if b <= a:
        code[i] = EMPTY
        return
    dup, neg = dup_neg(cand, a, b)
    if dup:
        code[i] = DUP_CAND
        return
    if neg:
        code[i] = NEG_CAND
        return
    bad = lp_rule(lp, a, b, detail, i)
    if bad == OK:
        bad = tp_rule(tp, a, b, dtail, ttail, has_tails, detail, i)
    if bad != OK:
        code[i] = bad
        return
    if has_drafted:
        for j in range(b - a):
            if cand[a + j] == drafted[i]:
                drafted_idx[i] = j
                break
        if drafted_idx[i] < 0:
            code[i] = NOT_IN_CANDS
            detail[i] = drafted[i]
            return
        if not has_eq and lp[a + drafted_idx[i]] == -np.inf:
            # the logging law is then the logging arm's law on draft_logprobs, 0 at this token
            # under every policy: the importance weight of the row would be 0/0 (cf. EQ_ZERO)
            code[i] = LP_ZERO
            return
    if has_eq:
        at = a + drafted_idx[i] if has_drafted else -1
        code[i] = eq_rule(eq, a, b, dtail, has_tails, at, detail, i)


def lp_rule(lp: NDArray[np.float64], a: int, b: int, detail: NDArray[np.float64], i: int) -> int:
    """Return the draft log-probabilities' first failing rule on [a, b) (OK: none)."""
    s = 0.0
    some = False  # a candidate with a finite log-probability (q > 0) exists
    for j in range(a, b):
        v = lp[j]
        if math.isnan(v) or v == np.inf:
            detail[i] = v
            return NONFINITE_LP
        if v > 0.0:
            detail[i] = v
            return LP_POS
        some = some or v > -np.inf
        s += math.exp(v)
    if s > 1.0 + TOL:
        detail[i] = s
        return LP_SUM
    if not some:  # no draft law: every arm's policy law is undefined here
        return NO_DRAFT
    return OK


def tp_rule(
    tp: NDArray[np.float64],
    a: int,
    b: int,
    dtail: float,
    ttail: float,
    has_tails: bool,
    detail: NDArray[np.float64],
    i: int,
) -> int:
    """Return the target probabilities' (and the tails') first failing rule on [a, b)."""
    s = 0.0
    for j in range(a, b):
        v = tp[j]
        if not math.isfinite(v):
            detail[i] = v
            return NONFINITE_TP
        if v < 0.0 or v > 1.0:
            detail[i] = v
            return TP_RANGE
        s += v
    if s > 1.0 + TOL:
        detail[i] = s
        return TP_SUM
    if has_tails:
        for t in (dtail, ttail):
            if not math.isnan(t) and not (0.0 <= t <= 1.0):
                detail[i] = t
                return TAIL_RANGE
    if not math.isnan(ttail) and abs(s + ttail - 1.0) > TOL:
        detail[i] = s + ttail
        return TP_TAIL_SUM
    return OK


def eq_rule(
    eq: NDArray[np.float64],
    a: int,
    b: int,
    dtail: float,
    has_tails: bool,
    at: int,
    detail: NDArray[np.float64],
    i: int,
) -> int:
    """Return emitted_q's first failing rule on [a, b); ``at``: the drafted id's index or -1."""
    s = 0.0
    for j in range(a, b):
        v = eq[j]
        if not math.isfinite(v):
            detail[i] = v
            return NONFINITE_EQ
        if v < 0.0 or v > 1.0:
            detail[i] = v
            return EQ_RANGE
        s += v
    if not has_tails and abs(s - 1.0) > TOL:
        detail[i] = s
        return EQ_SUM  # v1: the logging law on the candidates is the whole law
    if has_tails and not math.isnan(dtail) and abs(s + dtail - 1.0) > TOL:
        detail[i] = s + dtail
        return EQ_TAIL_SUM  # v2: kept mass + tail = 1
    if has_tails and math.isnan(dtail) and s > 1.0 + TOL:
        detail[i] = s
        return EQ_SUM  # v2 with an unknown tail: at most 1
    if at >= 0 and eq[at] == 0.0:
        return EQ_ZERO
    return OK


def check_rows_python(
    offsets: NDArray[np.int64],
    cand: NDArray[np.int64],
    lp: NDArray[np.float64],
    tp: NDArray[np.float64],
    eq: NDArray[np.float64],
    drafted: NDArray[np.int64],
    has_eq: bool,
    has_drafted: bool,
    tails: NDArray[np.float64],
) -> tuple[NDArray[np.int8], NDArray[np.float64]]:
    """Run :func:`check_row` on every row in the interpreter; return (code, detail) per row.

    The arguments are those of :func:`specreplay.replay.archive.rowcheck.check_rows` (same
    shapes and dtypes), without the outputs. The float lists are read as Python floats (a list
    is read faster than an array element by element); the ids stay int64 arrays (the duplicate
    signature's uint64 arithmetic wraps as in the kernel: its overflow warning is silenced).
    """
    n = offsets.shape[0] - 1
    code = np.zeros(n, dtype=np.int8)
    detail = np.full(n, np.nan)
    drafted_idx = np.full(n, -1, dtype=np.int32)
    lists = offsets.tolist(), lp.tolist(), tp.tolist(), eq.tolist(), drafted.tolist()
    off, lpl, tpl, eql, dl = lists
    with np.errstate(over="ignore"):
        for i in range(n):
            check_row(
                i, off, cand, lpl, tpl, eql, dl, has_eq, has_drafted, code, detail, drafted_idx,
                tails,
            )  # fmt: skip
    return code, detail
