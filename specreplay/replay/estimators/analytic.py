"""Analytic replay fused with quantization: one pass from the policy law to per-round values.

The analytic estimator (docs/methods.md#the-analytic-estimator) needs, per position, α_j = Σ_x
q^s_j(x)·a_j(x) with the quantized sampler law q^s and a_j(x) = min(1, p_j(x)/q^v_j(x)). Computing
the quantized laws into full arrays first (:func:`~specreplay.sim.policy.quantize`) and reading them
back in the replay kernel moves 24 bytes per candidate through memory for every arm; this kernel
quantizes each row into a few registers' worth of scratch and forms α at once, so the policy law is
read once per arm and nothing per candidate is written. The policy law itself is still computed once
per batch per distinct policy and shared by the arms that use it
(:class:`~specreplay.sim.policy.LawCache`).

Matched dyadic ``nearest`` (the common requalification arm) takes a fast path. Largest-remainder
rounding gives one extra unit to the ``u`` largest fractional parts F_i = frac(q_i·2^N) (ties to
the lower index), i.e. m_i = ⌊q_i·2^N⌋ + [F_i ≥ t] for any threshold t with exactly ``u`` of
the F_i at or above it. The kernel searches t by counting F_i ≥ t at eight thresholds per pass
over the row (a short dependency chain instead of a sort); a row where no such t exists (tied
fractional parts straddling the cut) or where the search does not settle falls back to
:func:`~specreplay.sim.policy.quantize_row`, the reference quantizer, so the integers are always
exactly those of :func:`~specreplay.sim.policy.quantize`. α is then Σ_i min(m_i·2^−N, p_i), which
is q^s·a for a matched arm (q^s(x)·min(1, p/q^s) = min(q^s, p)). Every other arm (float kinds,
floor-argmax, mismatched verifiers) quantizes the row with the reference quantizer into scratch
and forms α with :func:`~specreplay.sim.accept.alpha_row`.

No ``fastmath`` reassociation: with it, a process that had just compiled the kernel summed α in
another order than one that loaded it from the Numba cache (last-bit differences; see
``tests/test_jit_determinism.py``). Every sum over a row's candidates runs in lane order instead
(:mod:`specreplay.sim.lanes`: eight accumulators, one fixed tree): the floors and the terms are
written into row scratch by element-wise loops, which LLVM vectorises, and summed eight chains
wide in an order the compiler may not change. Each row's arithmetic depends on that row alone, so
results are bit-identical whatever the thread count, batch size, process or machine.

Speed (``bench/kernels_vs_rev.py``, rows of 32 candidates, 1M positions, one thread, CPU time on
a loaded 2-core machine): 8.4 M positions/s for ``dyadic24`` against 2.5 M/s for the running
sums before issue 13 (3.3×), 7.0 against 4.3 for a float64 arm (1.6×). The threshold search
(one eight-threshold count settles 56% of rows, a second or a "largest below" pass most of the
rest) is what separates the stage from a pass that only reads q and p. Tried and measured slower
or no better: bisection with a fixed number of steps, the search on int16 keys of the fractional
parts (cheaper counts, same control flow), branch-free guesses verified afterwards, blocks of rows
processed phase by phase, rows transposed across SIMD lanes, δ-corrections precomputed in the
first pass, software prefetch; for the sums, eight lanes unrolled by hand without scratch (LLVM
does not pack them into SIMD registers, and the accept probability's selects then stay scalar).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.replay.archive.batch import RoundBatch
from specreplay.replay.estimators.base import Estimator, RoundValues
from specreplay.replay.estimators.policies import policy_rounds
from specreplay.replay.truncation import (
    round_limits,
    same_sampler,
    tail_rows,
    target_rest,
    with_rest,
)
from specreplay.sim.accept import ROUND_START, advance, alpha_row
from specreplay.sim.arms import Arm, Quant
from specreplay.sim.lanes import lane_sum
from specreplay.sim.policy import (
    HIST_BINS,
    KIND_CODES,
    KIND_DYADIC,
    ROUND_NEAREST,
    ROUNDING_CODES,
    LawCache,
    quantize_row,
)

__all__ = [
    "AnalyticEstimator",
    "analytic_rounds",
    "bounded_rounds",
    "dyadic_nearest_at",
    "dyadic_nearest_row",
    "nearest_cut",
]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

# no-NaN and no-signed-zero only: reassociation would let LLVM vectorise the per-row sums, but a
# freshly compiled kernel then summed in another order than the cached one (module docstring);
# laws are never NaN, and the NaN of depths past a round's last position are written outside
# the kernel (no "ninf": nothing here is infinite, but nothing needs the flag either)
_FM = {"nsz", "nnan"}


@njit(inline="always", fastmath=_FM, cache=True)
def _count8(f: NDArray[np.float64], n: int, a: float, h: float) -> tuple[int, ...]:
    """Count f[:n] ≥ a + k·h for k = 0..7 (one pass, eight independent accumulators)."""
    c0 = c1 = c2 = c3 = c4 = c5 = c6 = c7 = 0
    t0, t1, t2, t3 = a, a + h, a + 2.0 * h, a + 3.0 * h
    t4, t5, t6, t7 = a + 4.0 * h, a + 5.0 * h, a + 6.0 * h, a + 7.0 * h
    for i in range(n):
        x = f[i]
        c0 += x >= t0
        c1 += x >= t1
        c2 += x >= t2
        c3 += x >= t3
        c4 += x >= t4
        c5 += x >= t5
        c6 += x >= t6
        c7 += x >= t7
    return (c0, c1, c2, c3, c4, c5, c6, c7)


@njit(inline="always", fastmath=_FM, cache=True)
def _max_below(f: NDArray[np.float64], n: int, t: float) -> float:
    """Return the largest f[:n] strictly below t (−1.0 if none: candidates outside the support)."""
    m = -1.0
    for i in range(n):
        x = f[i]
        m = max(m, x if x < t else -1.0)
    return m


@njit(inline="always", fastmath=_FM, cache=True)
def _nearest_threshold(frac: NDArray[np.float64], n: int, u: int, n_support: int) -> float:
    """Return t with exactly ``u`` of frac[:n] ≥ t barring ties, or −1.0 (1 ≤ u ≤ n_support).

    The caller verifies the count (ties at the cut make it differ) and falls back when the
    search does not settle (−1.0).

    One pass counts frac ≥ t at eight thresholds one mean gap (1/n_support) apart around the
    guess 1 − u/n_support; a count equal to ``u`` ends the search (about 60% of rows). Otherwise
    the cut lies in a bracket [lo, hi) holding a few fractional parts, of which the ``need``
    largest are selected: one "largest below" pass each (usually one). A cut outside the eight
    thresholds, or a bracket needing more than three, is narrowed by further counting passes.
    """
    lo = 0.0  # invariant: count(frac ≥ lo) ≥ u > count(frac ≥ hi) = c_hi
    hi = 1.0
    c_hi = 0
    h = 1.0 / n_support  # the mean gap between fractional parts
    a = min(max(1.0 - (u + 3.5) * h, 0.0), 1.0 - 7.0 * h)  # eight thresholds around the guess
    for _ in range(12):
        cs = _count8(frac, n, a, h)
        for k in range(8):
            tk = a + k * h
            if cs[k] == u:
                return tk
            if cs[k] > u:
                lo = max(lo, tk)
            else:
                if tk < hi:
                    hi = tk
                    c_hi = cs[k]
                break
        need = u - c_hi
        if need <= 3:
            t = hi
            for _ in range(need):
                t = _max_below(frac, n, t)
            return t if t >= lo else -1.0
        h = (hi - lo) / 8.0
        a = lo + 0.5 * h
        if not (lo < a < hi):  # the bracket cannot be split further: tied fractional parts
            return -1.0
    return -1.0


@njit(inline="always", fastmath=_FM, cache=True)
def nearest_cut(
    q: NDArray[np.float64], bits: int, frac: NDArray[np.float64], fl: NDArray[np.float64]
) -> tuple[float, float, float, float]:
    """Return the dyadic-nearest cut of a row: (2^N, r, units, t); t < 0: fall back.

    Writes each candidate's floor ⌊q_i·2^N⌋ into ``fl`` and its fractional part F_i of q_i·2^N
    into ``frac`` (−1 outside the support: never a unit); r = 2^N − Σ⌊q_i·2^N⌋ units to hand
    out, ``units`` of them to the candidates with F_i ≥ t (the support's size at most), the rest
    to the argmax.
    """
    n = q.shape[0]
    scale = float(np.int64(1) << bits)
    n_support = 0
    for i in range(n):  # element-wise: vectorises
        x = q[i]
        v = x * scale  # exact: a power-of-two scaling
        f = np.floor(v)
        pos = x > 0.0
        fl[i] = f
        frac[i] = (v - f) if pos else -1.0  # candidates outside the support never get a unit
        n_support += pos
    r = scale - lane_sum(fl, n)  # integers below 2^53: exact in any order
    units = min(r, float(n_support)) if r > 0.0 else 0.0
    t = 2.0  # above every fractional part: no unit
    if units > 0.0:
        t = _nearest_threshold(frac, n, int(units), n_support)
    return scale, r, units, t


@njit(inline="always", fastmath=_FM, cache=True)
def _alpha_dyadic_nearest(
    q: NDArray[np.float64],
    p: NDArray[np.float64],
    bits: int,
    dr: int,
    frac: NDArray[np.float64],
    fl: NDArray[np.float64],
) -> tuple[float, float, float, bool]:
    """α, the drafted candidate's term and q^s there, of a matched dyadic-nearest row.

    Returns (α, min(q^s, p) at ``dr``, q^s at ``dr``, ok); ok False → fall back. ``frac`` and
    ``fl`` are scratch of the row's length; α = Σ_i min(m_i·2^−N, p_i) is summed in lane order
    (:mod:`specreplay.sim.lanes`), then the argmax's share of units beyond the support is added.

    ``q`` and ``p`` are the row's slices: indices from 0 let LLVM vectorise the loops (an offset
    index goes through Numba's negative-index wraparound, which blocks it).
    """
    n = q.shape[0]
    scale, r, units, t = nearest_cut(q, bits, frac, fl)
    if t < 0.0:
        return 0.0, 0.0, 0.0, False
    inv = 1.0 / scale
    given = 0
    for i in range(n):  # element-wise: the terms min(m_i·2^−N, p_i) replace the floors
        sel = frac[i] >= t
        given += sel
        fl[i] = min((fl[i] + (1.0 if sel else 0.0)) * inv, p[i])
    if given != units:  # tied fractional parts at the cut: the reference quantizer decides
        return 0.0, 0.0, 0.0, False
    alpha = lane_sum(fl, n)
    rest = r - units  # units beyond the support's size, or a deficit: to the argmax
    extra_dr = 0.0
    if rest != 0.0:
        top = 0
        for i in range(1, n):
            if q[i] > q[top]:
                top = i
        m_top = np.floor(q[top] * scale) + (1.0 if frac[top] >= t else 0.0)
        alpha += min((m_top + rest) * inv, p[top]) - min(m_top * inv, p[top])
        if top == dr:
            extra_dr = rest
    a_dr = 0.0
    q_dr = 0.0
    if 0 <= dr < n:
        m_dr = np.floor(q[dr] * scale) + (1.0 if frac[dr] >= t else 0.0) + extra_dr
        q_dr = m_dr * inv
        a_dr = min(q_dr, p[dr])
    return alpha, a_dr, q_dr, True


@njit(fastmath=_FM, cache=True)
def dyadic_nearest_at(
    q: NDArray[np.float64], p: NDArray[np.float64], bits: int, dr: int, frac: NDArray[np.float64]
) -> tuple[float, bool]:
    """Return (q^s at ``dr``, ok) of a dyadic-nearest row without writing the quantized row.

    The fast path of the analytic kernel (module docstring), for estimators that need the
    quantized law at one candidate only; ok False: fall back to
    :func:`~specreplay.sim.policy.quantize_row`. ``frac`` is scratch of the row's length (the
    floors' scratch is allocated here).
    """
    _, _, q_dr, ok = _alpha_dyadic_nearest(q, p, bits, dr, frac, np.empty(q.shape[0]))
    return q_dr, ok


@njit(fastmath=_FM, cache=True)
def dyadic_nearest_row(
    q: NDArray[np.float64], bits: int, frac: NDArray[np.float64], out: NDArray[np.float64]
) -> bool:
    """Write the dyadic-nearest quantized row of ``q`` into ``out``; False: fall back.

    The fast path's integers (module docstring) for every candidate, for estimators that need
    the whole quantized row (the importance estimator's exact ratio bound): m_i·2^−N with
    m_i = ⌊q_i·2^N⌋ + [F_i ≥ t], the units beyond the support to the argmax. False where the
    threshold search does not settle or tied fractional parts straddle the cut: the caller then
    uses :func:`~specreplay.sim.policy.quantize_row`. ``frac`` and ``out`` have the row's length
    at least.
    """
    n = q.shape[0]
    scale, r, units, t = nearest_cut(q, bits, frac, out)  # out holds the floors
    if t < 0.0:
        return False
    inv = 1.0 / scale
    given = 0
    for i in range(n):  # element-wise: vectorises
        sel = frac[i] >= t
        given += sel
        out[i] = (out[i] + (1.0 if sel else 0.0)) * inv  # exact: m_i·2^−N
    if given != units:
        return False
    rest = r - units  # units beyond the support's size, or a deficit: to the argmax
    if rest != 0.0:
        top = 0
        for i in range(1, n):
            if q[i] > q[top]:
                top = i
        out[top] += rest * inv  # exact: (m_top + rest)·2^−N
    return True


@njit(inline="always", cache=True)
def _alpha_generic(
    q: NDArray[np.float64],
    p: NDArray[np.float64],
    dr: int,
    s_kind: int,
    s_bits: int,
    s_round: int,
    matched: bool,
    v_kind: int,
    v_bits: int,
    v_round: int,
    qs: NDArray[np.float64],
    qv: NDArray[np.float64],
    m: NDArray[np.int64],
    key: NDArray[np.float64],
    order: NDArray[np.int64],
    hist: NDArray[np.int64],
) -> tuple[float, float]:
    """α and the drafted candidate's term with the reference quantizer (any arm; row slices)."""
    n = q.shape[0]
    quantize_row(q, 0, n, s_kind, s_bits, s_round, qs, m, key, order, hist)
    if not matched:
        quantize_row(q, 0, n, v_kind, v_bits, v_round, qv, m, key, order, hist)
    return alpha_row(qs[:n], (qs if matched else qv)[:n], p, dr, key)  # key: free scratch now


@njit(parallel=True, fastmath=_FM, cache=True)
def _analytic_kernel(
    offsets: NDArray[np.int64],
    q: NDArray[np.float64],
    p: NDArray[np.float64],
    drafted: NDArray[np.int32],
    round_offsets: NDArray[np.int64],
    s_kind: int,
    s_bits: int,
    s_round: int,
    matched: bool,
    v_kind: int,
    v_bits: int,
    v_round: int,
    max_depth: int,
    depth: NDArray[np.int32],
    t_an: NDArray[np.float64],
    s_an: NDArray[np.float64],
    offpath: NDArray[np.float64],
) -> None:
    """Fill depth, t_an, s_an (columns < depth) and offpath of every round (see RoundValues)."""
    n_rounds = round_offsets.shape[0] - 1
    width = 1
    for i in range(offsets.shape[0] - 1):
        width = max(width, offsets[i + 1] - offsets[i])
    fast = matched and s_kind == KIND_DYADIC and s_round == ROUND_NEAREST
    n_chunks = min(n_rounds, 256)  # scratch allocated once per chunk of rounds
    for c in prange(n_chunks):
        frac = np.empty(width)
        qs = np.empty(width)
        qv = np.empty(width)
        m = np.empty(width, np.int64)
        key = np.empty(width)
        order = np.empty(width, np.int64)
        hist = np.empty(HIST_BINS, np.int64)
        for r in range(c * n_rounds // n_chunks, (c + 1) * n_rounds // n_chunks):
            a = round_offsets[r]
            d_r = min(round_offsets[r + 1] - a, max_depth)
            depth[r] = d_r
            st = ROUND_START
            for j in range(d_r):
                lo = offsets[a + j]
                hi = offsets[a + j + 1]
                qrow = q[lo:hi]  # row slices: see _alpha_dyadic_nearest
                dr = int(drafted[a + j])
                ok = False
                alpha = 0.0
                a_dr = 0.0
                if fast:
                    alpha, a_dr, _, ok = _alpha_dyadic_nearest(qrow, p[lo:hi], s_bits, dr, frac, qs)
                if not ok:
                    alpha, a_dr = _alpha_generic(
                        qrow,
                        p[lo:hi],
                        dr,
                        s_kind,
                        s_bits,
                        s_round,
                        matched,
                        v_kind,
                        v_bits,
                        v_round,
                        qs,
                        qv,
                        m,
                        key,
                        order,
                        hist,
                    )
                st = advance(st, alpha, a_dr)
                s_an[r, j] = st[0]
                t_an[r, j] = st[2]
            for k in range(4):
                offpath[r, k] = st[3 + k]


def analytic_rounds(
    *,
    offsets: NDArray[np.int64],
    target_probs: NDArray[np.float64],
    q_policy: NDArray[np.float64],
    sampler: Quant,
    verifier: Quant,
    drafted_idx: NDArray[np.int32],
    round_offsets: NDArray[np.int64],
    max_depth: int,
    flag: NDArray[np.int8] | None = None,
) -> RoundValues:
    """Analytic per-round values of one arm from its policy law (quantized on the fly).

    Parameters
    ----------
    offsets : int64, (n_rows + 1,)
        CSR offsets of the position rows' candidates.
    target_probs : float64, (nnz,)
    q_policy : float64, (nnz,)
        The arm's policy law (:func:`~specreplay.sim.policy.policy_law`).
    sampler, verifier : Quant
        The arm's quantizers (equal for a matched arm).
    drafted_idx : int32, (n_rows,)
        Archived drafted candidate index per row, −1 when unknown.
    round_offsets : int64, (n_rounds + 1,)
    max_depth : int
    flag : int8, (n_rows,), optional
        The policy law's row flags, passed through to the values (zeros when omitted).

    Returns
    -------
    RoundValues
        E[1 + A], P(A ≥ k) and the off-path expectations; ``var`` is 0 (exact). The values are
        those of :func:`~specreplay.replay.estimators.montecarlo.replay_rounds` with
        ``replicates=0`` on the quantized laws, up to reassociation within a row.
    """
    n = round_offsets.shape[0] - 1
    out = RoundValues(
        depth=np.empty(n, np.int32),
        t=np.full((n, max_depth), np.nan),
        var=np.zeros((n, max_depth)),
        surv=np.full((n, max_depth), np.nan),
        offpath=np.empty((n, 4)),
        flag=flag if flag is not None else np.zeros(drafted_idx.shape[0], np.int8),
    )
    if n == 0:
        return out
    _analytic_kernel(
        offsets,
        q_policy,
        target_probs,
        drafted_idx,
        round_offsets,
        KIND_CODES[sampler.kind],
        sampler.bits,
        ROUNDING_CODES[sampler.rounding],
        sampler == verifier,
        KIND_CODES[verifier.kind],
        verifier.bits,
        ROUNDING_CODES[verifier.rounding],
        int(max_depth),
        out.depth,
        out.t,
        out.surv,
        out.offpath,
    )
    return out


def bounded_rounds(batch: RoundBatch, arm: Arm, max_depth: int) -> RoundValues:
    """Analytic values of the logging arm's sampler over a truncated law: midpoints and widths.

    See :mod:`specreplay.replay.truncation`. The arm drafts from ``emitted_q`` with each row's
    rest (1 − Σ ``emitted_q``) appended as one more candidate (:func:`~specreplay.replay.
    truncation.with_rest`), replayed twice: with the rest's target probability 0 (no unseen id
    is ever accepted: the low end) and with it the target's rest (the unseen ids accept
    min(q tail, p tail), the most they can; 1 for a verifier quantizer other than the
    sampler's, so that they accept the whole q tail). Every α_j lies between the two, so each
    round's E[1 + A], P(A ≥ k) and off-path sums do too; the values are the midpoints, ``width``
    the range of E[1 + A] and ``limit`` the issue's bound on it (:func:`~specreplay.replay.
    truncation.round_limits`).
    """
    offsets, p_lo, q = with_rest(batch)
    rest_at = offsets[1:] - 1
    p_tail, q_tail = target_rest(batch), q[rest_at]  # the logging law's rest: with_rest's
    p_hi = p_lo.copy()
    p_hi[rest_at] = p_tail if arm.sampler == arm.verifier else 1.0
    ends = [
        analytic_rounds(
            offsets=offsets,
            target_probs=target,
            q_policy=q,
            sampler=arm.sampler,
            verifier=arm.verifier,
            drafted_idx=batch.drafted_idx,
            round_offsets=batch.round_offsets,
            max_depth=max_depth,
            flag=np.zeros(batch.n_positions, np.int8),
        )
        for target in (p_lo, p_hi)
    ]
    lo, hi = ends
    width = hi.t - lo.t
    return RoundValues(
        depth=lo.depth,
        t=lo.t + 0.5 * width,
        var=lo.var,
        surv=0.5 * (lo.surv + hi.surv),
        offpath=0.5 * (lo.offpath + hi.offpath),
        flag=lo.flag,
        width=width,
        limit=round_limits(np.minimum(p_tail, q_tail), batch.round_offsets, lo.depth, max_depth),
    )


class AnalyticEstimator(Estimator):
    """``analytic``: E[1 + A] = 1 + Σ_k Π_{j≤k} α_j, exact given the laws.

    See docs/methods.md#the-analytic-estimator.

    Each arm quantizes its policy law row by row inside the replay; the policy law is computed
    once per batch per distinct policy (:meth:`~specreplay.sim.policy.LawCache.policy`).
    """

    name = "analytic"
    columns = frozenset({"drafted_id"})

    def rounds(
        self,
        batch: RoundBatch,
        arm: Arm,
        cache: LawCache,
        *,
        seed: int,
        replicates: int,
        max_depth: int,
        logging: Arm | None = None,
    ) -> RoundValues:
        """Analytic values of ``arm`` over ``batch`` (see :class:`Estimator`)."""
        if arm.rule is not None:  # a drafting policy (sweep --policy)
            return policy_rounds(self, batch, arm, cache, max_depth=max_depth, logging=logging)
        if same_sampler(arm, logging) and tail_rows(batch).size:
            return bounded_rounds(batch, arm, max_depth)  # a truncated logging law (schema v2)
        law = cache.policy(arm.policy)
        return analytic_rounds(
            offsets=batch.offsets,
            target_probs=batch.target_probs,
            q_policy=law.q,
            sampler=arm.sampler,
            verifier=arm.verifier,
            drafted_idx=batch.drafted_idx,
            round_offsets=batch.round_offsets,
            max_depth=max_depth,
            flag=law.flag,
        )
