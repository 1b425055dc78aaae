"""Per-row validation kernel over the flat (CSR) list columns of a chunk.

See docs/inputs.md#position-traces-schema-v1.

One jitted pass checks every rule that looks at a single row's lists, and finds the drafted
candidate's index. The rules themselves live in :mod:`specreplay.replay.archive.rowrules`
(plain Python, the recorders run them there without Numba); this module compiles them. Rules
spanning rows (order, duplicates, constancy) live in :mod:`specreplay.replay.archive.reader`.
"""

from __future__ import annotations

import math

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
    "compile_rules",
    "screen",
    "validate_rows",
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


# -- the two-stage check: a screen of every row, the exact rules on the rows it flags -----------

BAND = 1e-9
"""How near a sum may come to a rule's threshold before the screen hands the row to the rules.

The screen sums in another order than the rules (eight lanes) and with NumPy's ``exp`` (within an
ulp or so of ``math.exp``): its sums differ from the rules' by at most a few ulps per candidate,
about 1e-13 for the widest row it screens (:data:`SCREEN_WIDTH`), far inside the band.
"""

SCREEN_WIDTH = 256
"""Rows wider than this go to the exact rules (they sort the ids to find a duplicate)."""

_BITMAP_WORDS = 16  # 1,024 bits: 32 distinct ids collide about 0.5 times a row


@njit(inline="always", cache=True)
def _sum8(x: NDArray[np.float64], a: int, b: int) -> float:
    """Σ x[a:b] over eight accumulators (any order is good enough for the screen: ``BAND``)."""
    v = x[a:b]
    n = v.shape[0]
    n8 = n - n % 8
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    for j in range(0, n8, 8):
        s0 += v[j]
        s1 += v[j + 1]
        s2 += v[j + 2]
        s3 += v[j + 3]
        s4 += v[j + 4]
        s5 += v[j + 5]
        s6 += v[j + 6]
        s7 += v[j + 7]
    for j in range(n8, n):
        s0 += v[j]
    return ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7))


_SIGN = np.int64(-(2**63))  # the sign bit of a float64's bits, as int64
_ONE_FLIPPED = np.int64(0x3FF0000000000000) ^ _SIGN  # 1.0's bits with the sign bit flipped
_NEG_INF = np.int64(np.array(-np.inf).view(np.int64))  # −inf's bits, as int64


@njit(inline="always", cache=True)
def _elements_suspect(
    cand: NDArray[np.int64],
    lp: NDArray[np.int64],
    tp: NDArray[np.int64],
    eq: NDArray[np.int64],
    lo: int,
    hi: int,
    has_eq: bool,
) -> bool:
    """Whether some element in [lo, hi) breaks a rule of its own, on the floats' bits.

    ``lp``, ``tp``, ``eq`` are the float64 columns viewed as int64: a float in [+0, 1] is one
    whose bits, read unsigned, are at most 1.0's (so NaN, ±inf and every negative value, −0
    included, are not: −0 only sends its row to the exact rules); a draft log-probability is
    valid when its bits, +0 read as −0, are at most −inf's read signed (−0 … −inf; NaN and
    every positive value are above). Integer maxima vectorise where a float compare's NaN
    handling keeps the loop scalar: measured 9 ns a row of 32 against 46.
    """
    # slices indexed from 0: an index that may be negative (range(lo, hi)) makes Numba wrap it
    # around, and that check alone kept these loops scalar (47 against 9 ns a row of 32)
    ids, lpb, tpb = cand[lo:hi], lp[lo:hi], tp[lo:hi]
    m_id = np.int64(0)
    for j in range(ids.shape[0]):  # one loop per column: a loop of several maxima stays scalar
        m_id |= ids[j]
    m_lp = _SIGN
    for j in range(lpb.shape[0]):
        x = lpb[j]
        m_lp = max(m_lp, _SIGN if x == 0 else x)
    m_tp = _SIGN
    for j in range(tpb.shape[0]):
        m_tp = max(m_tp, tpb[j] ^ _SIGN)
    bad = m_id < 0 or m_lp > _NEG_INF or m_tp > _ONE_FLIPPED
    if has_eq and not bad:
        eqb = eq[lo:hi]
        m_eq = _SIGN
        for j in range(eqb.shape[0]):
            m_eq = max(m_eq, eqb[j] ^ _SIGN)
        bad = m_eq > _ONE_FLIPPED
    return bool(bad)


@njit(inline="always", cache=True)
def _ids_suspect(cand: NDArray[np.int64], a: int, b: int, bm: NDArray[np.uint64]) -> bool:
    """Whether [a, b) repeats an id; ``bm`` is all zero before and after.

    A 1,024-bit signature of the ids seen (Fibonacci hashing): only an id whose bit is already set
    is compared with the row's earlier ids, about once in two rows of 32 distinct ids.
    """
    ids = cand[a:b]  # indexed from 0 (see _elements_suspect)
    dup = False
    for j in range(ids.shape[0]):
        x = ids[j]
        h = (np.uint64(x) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(54)
        w = h >> np.uint64(6)
        bit = np.uint64(1) << (h & np.uint64(63))
        old = bm[w]
        if old & bit:
            for r in range(j):
                dup |= ids[r] == x
        bm[w] = old | bit
    for k in range(_BITMAP_WORDS):
        bm[k] = 0
    return dup


@njit(inline="always", cache=True)
def _sums_suspect(
    e: NDArray[np.float64],
    tp: NDArray[np.float64],
    eq: NDArray[np.float64],
    a: int,
    b: int,
    at: int,
    tails: NDArray[np.float64],
    i: int,
    has_eq: bool,
) -> bool:
    """Whether a rule on a row's sums or tails might fail (its elements passed on their own).

    ``e`` = exp(draft_logprobs); a row whose Σ e is 0 (every log-probability −inf, or so low
    that exp underflows) goes to the exact rules, which tell the two apart. ``at``: the
    drafted id's index or -1.
    """
    se = _sum8(e, a, b)
    if not (0.0 < se <= 1.0 + TOL - BAND):
        return True
    st = _sum8(tp, a, b)
    if st > 1.0 + TOL - BAND:
        return True
    dtail = np.nan
    if tails.shape[1] > 0:
        dtail = tails[0, i]
        ttail = tails[1, i]
        for t in (dtail, ttail):
            if not math.isnan(t) and not (0.0 <= t <= 1.0):
                return True
        if not math.isnan(ttail) and abs(st + ttail - 1.0) > TOL - BAND:
            return True
    if not has_eq:
        return False
    sq = _sum8(eq, a, b)
    if tails.shape[1] == 0:
        bad = abs(sq - 1.0) > TOL - BAND
    elif not math.isnan(dtail):
        bad = abs(sq + dtail - 1.0) > TOL - BAND
    else:
        bad = sq > 1.0 + TOL - BAND
    return bad or (at >= 0 and eq[at] == 0.0)


@njit(inline="always", cache=True)
def _screen_row(
    i: int,
    offsets: NDArray[np.int64],
    cand: NDArray[np.int64],
    e: NDArray[np.float64],
    lp: NDArray[np.float64],
    tp: NDArray[np.float64],
    eq: NDArray[np.float64],
    drafted: NDArray[np.int64],
    has_eq: bool,
    has_drafted: bool,
    tails: NDArray[np.float64],
    drafted_idx: NDArray[np.int32],
    bm: NDArray[np.uint64],
    ids: bool,
) -> bool:
    """Whether row ``i`` might break a rule its elements cannot break alone; its drafted index.

    ``ids``: look for a repeated id too (a row wider than :data:`SCREEN_WIDTH` is suspect
    either way).
    """
    a = offsets[i]
    b = offsets[i + 1]
    drafted_idx[i] = -1
    if b <= a or b - a > SCREEN_WIDTH or (ids and _ids_suspect(cand, a, b, bm)):
        return True
    at = -1
    if has_drafted:
        k = -1
        row = cand[a:b]
        d = drafted[i]
        for j in range(row.shape[0]):
            if row[j] == d:
                k = j
                break
        if k < 0 or (not has_eq and lp[a + k] == -np.inf):
            return True
        drafted_idx[i] = k
        at = a + k
    return _sums_suspect(e, tp, eq, a, b, at, tails, i, has_eq)


@njit(parallel=True, cache=True)
def _screen(
    offsets: NDArray[np.int64],
    cand: NDArray[np.int64],
    e: NDArray[np.float64],
    lp: NDArray[np.float64],
    tp: NDArray[np.float64],
    eq: NDArray[np.float64],
    drafted: NDArray[np.int64],
    has_eq: bool,
    has_drafted: bool,
    tails: NDArray[np.float64],
    suspect: NDArray[np.bool_],
    drafted_idx: NDArray[np.int32],
    ids: bool,
) -> None:
    """Screen every row in chunks over both threads: elements first, then each row's sums.

    The elements' own rules are checked over a chunk's whole flat range at once (a long loop
    vectorises); only a chunk that holds a bad element is checked again row by row to find it.
    """
    n = offsets.shape[0] - 1
    n_chunks = min(n, 256)
    lp_b, tp_b, eq_b = lp.view(np.int64), tp.view(np.int64), eq.view(np.int64)
    for c in prange(n_chunks):
        bm = np.zeros(_BITMAP_WORDS, np.uint64)
        r0, r1 = c * n // n_chunks, (c + 1) * n // n_chunks
        some = _elements_suspect(cand, lp_b, tp_b, eq_b, offsets[r0], offsets[r1], has_eq)
        for i in range(r0, r1):
            bad = some and _elements_suspect(
                cand, lp_b, tp_b, eq_b, offsets[i], offsets[i + 1], has_eq
            )
            suspect[i] = bad or _screen_row(
                i, offsets, cand, e, lp, tp, eq, drafted, has_eq, has_drafted, tails,
                drafted_idx, bm, ids,
            )  # fmt: skip


@njit(parallel=True, cache=True)
def _check_at(
    rows: NDArray[np.int64],
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
    """:func:`check_rows` on the rows listed in ``rows`` only."""
    for k in prange(rows.shape[0]):
        _check_row(
            rows[k], offsets, cand, lp, tp, eq, drafted, has_eq, has_drafted, code, detail,
            drafted_idx, tails,
        )  # fmt: skip


def screen(
    offsets: NDArray[np.int64],
    cand: NDArray[np.int64],
    lp: NDArray[np.float64],
    tp: NDArray[np.float64],
    eq: NDArray[np.float64],
    drafted: NDArray[np.int64],
    has_eq: bool,
    has_drafted: bool,
    tails: NDArray[np.float64],
    drafted_idx: NDArray[np.int32],
    *,
    ids: bool = True,
) -> NDArray[np.bool_]:
    """Flag every row that might break a rule; write the drafted index of every other row.

    One read of each row with no branch per candidate: NumPy's vectorised ``exp`` for
    Σ exp(draft_logprobs), sums over eight lanes, the elements' own rules on the floats' bits
    (:func:`_elements_suspect`), a 1,024-bit signature for repeated ids (``ids``; the guards of
    a file validated earlier leave it out: :mod:`~specreplay.replay.archive.guards`). A row is
    flagged for a value out of range, a sum within :data:`BAND` of its threshold, a repeated
    or negative id, a drafted id not found, no candidate, more than :data:`SCREEN_WIDTH`.
    Arguments as :func:`check_rows` takes them.
    """
    n = offsets.shape[0] - 1
    suspect = np.empty(n, np.bool_)
    if n == 0:
        return suspect
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(lp)
    _screen(
        offsets, cand, e, lp, tp, eq, drafted, has_eq, has_drafted, tails, suspect, drafted_idx,
        ids,
    )  # fmt: skip
    return suspect


def validate_rows(
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
) -> int:
    """:func:`check_rows`'s outputs, to the bit, in two stages; return the rows the rules saw.

    :func:`screen` flags every row that might break a rule; the exact rules
    (:func:`check_rows`) then run on the flagged rows only and write their code, detail and
    drafted index; every other row passes every rule (code ``OK``, detail NaN, its drafted index
    from the screen). Measured in docs/scale.md ("validating rows").
    """
    code[:] = OK
    detail[:] = np.nan
    suspect = screen(offsets, cand, lp, tp, eq, drafted, has_eq, has_drafted, tails, drafted_idx)
    rows = np.flatnonzero(suspect).astype(np.int64)
    if rows.shape[0]:
        _check_at(
            rows, offsets, cand, lp, tp, eq, drafted, has_eq, has_drafted, code, detail,
            drafted_idx, tails,
        )  # fmt: skip
    return int(rows.shape[0])


def compile_rules() -> None:
    """Compile (or load) the exact rules' kernel, which a clean archive never calls.

    ``specreplay warmup`` calls it, so the first archive with a bad row does not wait for it.
    """
    none_i, none_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
    _check_at(
        none_i, np.zeros(1, np.int64), none_i, none_f, none_f, none_f, none_i, False, False,
        np.zeros(0, np.int8), none_f, np.zeros(0, np.int32), np.zeros((2, 0)),
    )  # fmt: skip
