"""Every arm in one pass: the analytic and importance values of all fixed-depth arms of a batch.

The default pass (``--estimator auto``, or ``analytic`` with the importance companion) replays
each arm twice over every batch: the analytic kernel (:mod:`~specreplay.replay.estimators.
analytic`) and the importance kernel (:mod:`~specreplay.replay.estimators.importance`), each
reading the arm's policy law, which :class:`~specreplay.sim.policy.LawCache` first materialises
over the whole batch. :func:`all_arms_rounds` computes the same values in one kernel: per round,
position by position, each distinct policy's law row is computed once into per-thread scratch
(:func:`~specreplay.sim.policy.policy_row`, the function the batch-wide law uses) and shared by
the arms that use it; each arm quantizes that row once and both estimators read the quantized
row (the analytic α, the importance ratio, bound and second moment). The candidates, target
probabilities and logging law of a position are read once for every arm.

Terms
-----
fused pass
    :func:`all_arms_rounds`: the analytic values of every arm, and the importance values too
    when ``q_logging`` is given; what :func:`~specreplay.replay.shard.replay_reader` runs for the
    arms without a drafting rule when the run's own estimator is analytic and the batch has no
    truncated rows (schema v2 tails). Everything else (Monte Carlo, importance as the run's own
    estimator, drafting policies, batches with truncated rows) replays arm by arm as before.

Decisions
---------
- **Bit for bit today's values, with no exception.** Each figure is computed by the same
  functions, in the same order, as the per-arm kernels: ``policy_row`` for the law,
  :func:`~specreplay.sim.policy.quantize_row` for the reference quantizer,
  :func:`~specreplay.sim.accept.alpha_row` and :func:`~specreplay.sim.accept.advance` for α and
  the round state, :func:`~specreplay.replay.estimators.importance.ratio_row` for the bound and
  the moment. The matched dyadic-nearest fast path runs the threshold search once
  (:func:`~specreplay.replay.estimators.analytic.nearest_cut`) and writes both the analytic
  terms min(m_i·2^−N, p_i) (summed in lane order as the analytic kernel sums them) and the
  quantized row m_i·2^−N (as :func:`~specreplay.replay.estimators.analytic.dyadic_nearest_row`
  writes it); every other value there is an exact dyadic, equal whichever way it is formed.
  ``tests/test_arms_pass.py`` compares the two paths with ``np.array_equal`` on random batches
  (every quantizer kind and rounding, matched and not, greedy, top-k above the candidates,
  −inf log-probabilities, unknown drafted tokens, rounds longer than the depth) and on a
  synthesised archive's whole pass.
- **Flags of rows past the depth.** A round recording more positions than the pass's depth D
  has rows no estimator evaluates, whose policy flags are still counted
  (:func:`~specreplay.sim.policy.policy_row_flag`: the flags without the law).
- **Fast-math**: no-NaN and no-signed-zero, as the analytic kernel (never ``reassoc``, no
  ``contract``): the sums run in lane order (:mod:`specreplay.sim.lanes`).

Speed: ``bench/arms_pass.py`` (the per-arm kernels and the fused one on the same batches, in
one process, best of 3) and the ``arms (all)`` stage of ``SPECREPLAY_TIMINGS``; the figures are
in docs/scale.md#benchmarks. :func:`_position` (every arm at one position) is a compiled call,
not inlined into the parallel kernel: a cold compile then took 23 s of CPU time here instead of
39 s (the parallel kernel's body is compiled twice, once as its gufunc), and the call per
position did not measurably slow the pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.replay.estimators.analytic import nearest_cut
from specreplay.replay.estimators.base import RoundValues
from specreplay.replay.estimators.importance import ratio_row
from specreplay.sim.accept import ROUND_START, accept_prob, advance, alpha_row
from specreplay.sim.arms import Arm
from specreplay.sim.lanes import lane_sum
from specreplay.sim.policy import (
    FLAG_LOGGING_SUPPORT,
    HIST_BINS,
    KIND_CODES,
    KIND_DYADIC,
    ROUND_NEAREST,
    ROUNDING_CODES,
    policy_row,
    policy_row_flag,
    quantize_row,
)

__all__ = ["AllArms", "all_arms_rounds"]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

# the analytic kernel's flags (module docstring): never "reassoc", no "contract"
_FM = {"nsz", "nnan"}

_AN = 2  # analytic planes per arm: t, surv
_IM = 5  # importance planes per arm: t, surv, ratio, bound, moment
_ST = 7  # the analytic round state (specreplay.sim.accept.ROUND_START)


@njit(inline="always", fastmath=_FM, cache=True)
def _dyadic_both(
    q: NDArray[np.float64],
    p: NDArray[np.float64],
    bits: int,
    dr: int,
    frac: NDArray[np.float64],
    fl: NDArray[np.float64],
    qs: NDArray[np.float64],
) -> tuple[float, float, bool]:
    """α, the drafted candidate's term and ok of a matched dyadic-nearest row; ``qs`` written.

    One threshold search for both estimators: the analytic kernel's α (its terms, sum and
    argmax correction as ``_alpha_dyadic_nearest`` forms them) and the quantized row as
    ``dyadic_nearest_row`` writes it. ok False (the search did not settle, or tied fractional
    parts straddle the cut): fall back to the reference quantizer, as both kernels do.
    """
    n = q.shape[0]
    scale, r, units, t = nearest_cut(q, bits, frac, fl)
    if t < 0.0:
        return 0.0, 0.0, False
    inv = 1.0 / scale
    given = 0
    for i in range(n):  # element-wise: the quantized row and the terms min(m_i·2^−N, p_i)
        sel = frac[i] >= t
        given += sel
        v = (fl[i] + (1.0 if sel else 0.0)) * inv  # exact: m_i·2^−N
        qs[i] = v
        fl[i] = min(v, p[i])
    if given != units:
        return 0.0, 0.0, False
    alpha = lane_sum(fl, n)
    rest = r - units  # units beyond the support's size, or a deficit: to the argmax
    if rest != 0.0:
        top = 0
        for i in range(1, n):
            if q[i] > q[top]:
                top = i
        m_top = np.floor(q[top] * scale) + (1.0 if frac[top] >= t else 0.0)
        alpha += min((m_top + rest) * inv, p[top]) - min(m_top * inv, p[top])
        qs[top] += rest * inv  # exact: (m_top + rest)·2^−N
    a_dr = min(qs[dr], p[dr]) if 0 <= dr < n else 0.0  # q^s exact: the analytic kernel's m_dr·2^−N
    return alpha, a_dr, True


@njit(inline="always", fastmath=_FM, cache=True)
def _arm_row(
    q: NDArray[np.float64],
    p: NDArray[np.float64],
    dr: int,
    cd: NDArray[np.int64],
    sc: tuple[
        NDArray[np.float64],
        NDArray[np.float64],
        NDArray[np.float64],
        NDArray[np.int64],
        NDArray[np.float64],
        NDArray[np.int64],
        NDArray[np.int64],
    ],
) -> tuple[float, float, bool]:
    """Quantize one arm's policy row into scratch; return (α, the drafted term, matched).

    ``cd`` = (sampler kind, bits, rounding, verifier kind, bits, rounding, matched). The sampler
    row is left in ``sc[1]`` (and the verifier's in ``sc[2]`` when not matched).
    """
    frac, qs, qv, m, key, order, hist = sc
    n = q.shape[0]
    matched = cd[6] != 0
    if matched and cd[0] == KIND_DYADIC and cd[2] == ROUND_NEAREST:
        alpha, a_dr, ok = _dyadic_both(q, p, cd[1], dr, frac, key, qs)
        if ok:
            return alpha, a_dr, matched
    quantize_row(q, 0, n, cd[0], cd[1], cd[2], qs, m, key, order, hist)
    if not matched:
        quantize_row(q, 0, n, cd[3], cd[4], cd[5], qv, m, key, order, hist)
    alpha, a_dr = alpha_row(qs[:n], (qs if matched else qv)[:n], p, dr, key)
    return alpha, a_dr, matched


@njit(inline="always", fastmath=_FM, cache=True)
def _importance_step(
    st: NDArray[np.float64], qs_x: float, qv_x: float, ql_x: float, p_x: float, b: float, m: float
) -> None:
    """Advance one arm's importance state (w, 1 + Σw, r_k, b_k, m_k) by one position, in place.

    The importance kernel's per-position step
    (docs/methods.md#the-importance-estimator-and-its-weight): a_j(x_j)/q^L_j(x_j) with the
    policy ratio first, then the bound and moment.
    """
    ratio = 0.0
    pol = 0.0
    if ql_x > 0.0:
        pol = qs_x / ql_x
        ratio = pol * accept_prob(qv_x, p_x)
    st[0] *= ratio
    st[2] *= pol
    st[3] *= b
    st[4] *= m
    st[1] += st[0]


@njit(inline="always", fastmath=_FM, cache=True)
def _round_start(
    offsets: NDArray[np.int64],
    lp: NDArray[np.float64],
    past: int,
    end: int,
    greedy: NDArray[np.bool_],
    top_k: NDArray[np.int64],
    arm_pol: NDArray[np.int64],
    pflag: NDArray[np.int8],
    iflag: NDArray[np.int8],
    st: NDArray[np.float64],
    ist: NDArray[np.float64],
) -> None:
    """Start a round: every arm's state, and the flags of its rows [past, end) past the depth.

    Those rows are not evaluated: their policy flags need no law (each arm's copy as well).
    """
    for k in range(arm_pol.shape[0]):
        for i in range(_ST):
            st[k, i] = ROUND_START[i]
        ist[k, :] = 1.0
    for row in range(past, end):
        lrow = lp[offsets[row] : offsets[row + 1]]
        for k in range(greedy.shape[0]):
            pflag[k, row] = policy_row_flag(lrow, greedy[k], top_k[k])
        for k in range(arm_pol.shape[0]):
            iflag[k, row] = pflag[arm_pol[k], row]


@njit(fastmath=_FM, cache=True)  # a call, not inlined: compiles in half the time (docstring)
def _position(
    r: int,
    j: int,
    lo: int,
    hi: int,
    dr: int,
    p: NDArray[np.float64],
    q_log: NDArray[np.float64],
    qpol: NDArray[np.float64],
    width: int,
    arm_pol: NDArray[np.int64],
    codes: NDArray[np.int64],
    importance: bool,
    sc: tuple[
        NDArray[np.float64],
        NDArray[np.float64],
        NDArray[np.float64],
        NDArray[np.int64],
        NDArray[np.float64],
        NDArray[np.int64],
        NDArray[np.int64],
    ],
    st: NDArray[np.float64],
    ist: NDArray[np.float64],
    an: NDArray[np.float64],
    im: NDArray[np.float64],
    off: NDArray[np.bool_],
) -> None:
    """Every arm at position j of round r (the policy rows in ``qpol``).

    Writes each arm's state (``st``, ``ist``), its values at (r, j) and ``off[k]``: whether
    arm k can accept a candidate outside the logging law's support here (importance only).
    """
    n = hi - lo
    prow = p[lo:hi]
    for k in range(arm_pol.shape[0]):
        base = arm_pol[k] * width
        alpha, a_dr, matched = _arm_row(qpol[base : base + n], prow, dr, codes[k], sc)
        s = advance(
            (st[k, 0], st[k, 1], st[k, 2], st[k, 3], st[k, 4], st[k, 5], st[k, 6]), alpha, a_dr
        )
        for i in range(_ST):
            st[k, i] = s[i]
        an[k, 0, r, j] = s[2]
        an[k, 1, r, j] = s[0]
        if importance:
            qs = sc[1]
            qver = qs if matched else sc[2]
            o, b_j, m_j = ratio_row(qs, prow, q_log[lo:hi], n, sc[0], sc[4])
            off[k] = o
            _importance_step(ist[k], qs[dr], qver[dr], q_log[lo + dr], p[lo + dr], b_j, m_j)
            im[k, 0, r, j] = ist[k, 1]  # t = 1 + Σ_{k≤d} w_k
            im[k, 1, r, j] = ist[k, 0]  # surv = w_k
            im[k, 2, r, j] = ist[k, 2]  # the policy ratio r_k
            im[k, 3, r, j] = ist[k, 3]  # its bound b_k
            im[k, 4, r, j] = ist[k, 4]  # the second moments' product m_k


@njit(parallel=True, fastmath=_FM, cache=True)
def _all_arms_kernel(
    offsets: NDArray[np.int64],
    lp: NDArray[np.float64],
    p: NDArray[np.float64],
    q_log: NDArray[np.float64],
    drafted: NDArray[np.int32],
    round_offsets: NDArray[np.int64],
    greedy: NDArray[np.bool_],
    top_k: NDArray[np.int64],
    temperature: NDArray[np.float64],
    top_p: NDArray[np.float64],
    arm_pol: NDArray[np.int64],
    codes: NDArray[np.int64],
    max_depth: int,
    importance: bool,
    depth: NDArray[np.int32],
    pflag: NDArray[np.int8],
    iflag: NDArray[np.int8],
    an: NDArray[np.float64],
    offpath: NDArray[np.float64],
    im: NDArray[np.float64],
) -> None:
    """Fill every arm's analytic (and importance) values of every round (:func:`all_arms_rounds`).

    P policies: ``greedy``, ``top_k`` (0: all), ``temperature``, ``top_p``, each (P,). A arms:
    ``arm_pol`` (A,) their policy's index, ``codes`` (A, 7) (sampler kind, bits, rounding,
    verifier kind, bits, rounding, matched). Written: ``depth`` (n_rounds,), ``pflag`` (P,
    n_rows), ``iflag`` (A, n_rows), ``an`` (A, 2, n_rounds, D) analytic t, surv, ``offpath``
    (A, n_rounds, 4), ``im`` (A, 5, n_rounds, D) importance t, surv, ratio, bound, moment.
    """
    n_rounds, n_pol, n_arms = round_offsets.shape[0] - 1, greedy.shape[0], arm_pol.shape[0]
    width = 1
    for i in range(offsets.shape[0] - 1):
        width = max(width, offsets[i + 1] - offsets[i])
    zero = offsets[0]  # 0, unknown to the compiler (specreplay.sim.policy._opaque)
    n_chunks = min(n_rounds, 256)  # scratch allocated once per chunk of rounds
    for c in prange(n_chunks):
        qpol = np.empty(n_pol * width)  # each policy's law row, ``width`` apart
        sc = (
            np.empty(width),
            np.empty(width),
            np.empty(width),
            np.empty(width, np.int64),
            np.empty(width),
            np.empty(width, np.int64),
            np.empty(HIST_BINS, np.int64),
        )
        st = np.empty((n_arms, _ST))
        ist = np.empty((n_arms, _IM))
        off = np.zeros(n_arms, np.bool_)
        for r in range(c * n_rounds // n_chunks, (c + 1) * n_rounds // n_chunks):
            a = round_offsets[r]
            d_r = min(round_offsets[r + 1] - a, max_depth)
            depth[r] = d_r
            _round_start(offsets, lp, a + d_r, round_offsets[r + 1], greedy, top_k, arm_pol,
                         pflag, iflag, st, ist)  # fmt: skip
            for j in range(d_r):
                row = a + j
                lo = offsets[row]
                hi = offsets[row + 1]
                for k in range(n_pol):
                    pflag[k, row] = policy_row(
                        lp[lo:hi],
                        greedy[k],
                        top_k[k],
                        temperature[k],
                        top_p[k],
                        qpol[k * width : k * width + hi - lo],
                        zero,
                    )
                dr = int(drafted[row])
                _position(
                    r, j, lo, hi, dr, p, q_log, qpol, width, arm_pol, codes, importance, sc,
                    st, ist, an, im, off,
                )  # fmt: skip
                for k in range(n_arms):
                    iflag[k, row] = pflag[arm_pol[k], row] | (FLAG_LOGGING_SUPPORT if off[k] else 0)
            for k in range(n_arms):
                for i in range(4):
                    offpath[k, r, i] = st[k, 3 + i]


@dataclass(frozen=True)
class AllArms:
    """Per-round values of every arm of one batch, in the arms' order.

    Attributes
    ----------
    analytic : tuple of RoundValues
        Each arm's analytic values (:meth:`~specreplay.replay.estimators.analytic.
        AnalyticEstimator.rounds`, bit for bit), ``flag`` its policy's row flags.
    importance : tuple of RoundValues, or None
        Each arm's importance values (:meth:`~specreplay.replay.estimators.importance.
        ImportanceEstimator.rounds`, bit for bit); None when no logging law was given.
    """

    analytic: tuple[RoundValues, ...]
    importance: tuple[RoundValues, ...] | None


def _codes(arms: Sequence[Arm]) -> NDArray[np.int64]:
    """Each arm's quantizers as the kernel takes them (the per-arm kernels' codes, + matched)."""
    return np.array(
        [
            [
                KIND_CODES[a.sampler.kind],
                a.sampler.bits,
                ROUNDING_CODES[a.sampler.rounding],
                KIND_CODES[a.verifier.kind],
                a.verifier.bits,
                ROUNDING_CODES[a.verifier.rounding],
                int(a.sampler == a.verifier),
            ]
            for a in arms
        ],
        np.int64,
    ).reshape(len(arms), 7)


def all_arms_rounds(
    *,
    arms: Sequence[Arm],
    offsets: NDArray[np.int64],
    draft_logprobs: NDArray[np.float64],
    target_probs: NDArray[np.float64],
    drafted_idx: NDArray[np.int32],
    round_offsets: NDArray[np.int64],
    max_depth: int,
    q_logging: NDArray[np.float64] | None = None,
) -> AllArms:
    """Return every arm's analytic values, and importance values when ``q_logging`` is given.

    Parameters
    ----------
    arms : sequence of Arm
        Fixed-depth arms (no drafting rule); arms sharing a policy share its law's rows.
    offsets : int64, (n_rows + 1,)
    draft_logprobs, target_probs : float64, (nnz,)
    drafted_idx : int32, (n_rows,)
        Archived drafted candidate index per row, −1 when unknown (every one ≥ 0 when
        ``q_logging`` is given).
    round_offsets : int64, (n_rounds + 1,)
    max_depth : int
        D: depths 1..D are evaluated.
    q_logging : float64, (nnz,), optional
        The logging law q^L (:func:`~specreplay.replay.estimators.importance.logging_law`).

    Returns
    -------
    AllArms
    """
    if any(a.rule is not None for a in arms):
        raise ValueError("all_arms_rounds replays fixed-depth arms only (no drafting rule)")
    policies = list(dict.fromkeys(a.policy for a in arms))
    n, n_rows, n_arms, d = round_offsets.shape[0] - 1, drafted_idx.shape[0], len(arms), max_depth
    depth = np.zeros(n, np.int32)
    pflag = np.zeros((len(policies), n_rows), np.int8)
    iflag = np.zeros((n_arms, n_rows), np.int8)
    an = np.full((n_arms, _AN, n, d), np.nan)
    offpath = np.zeros((n_arms, n, 4))
    importance = q_logging is not None
    im = np.full((n_arms, _IM, n, d) if importance else (n_arms, _IM, 0, d), np.nan)
    pol_of = [policies.index(a.policy) for a in arms]
    if n and n_arms:
        _all_arms_kernel(
            offsets,
            draft_logprobs,
            target_probs,
            q_logging if q_logging is not None else np.empty(0),
            drafted_idx,
            round_offsets,
            np.array([pol.greedy for pol in policies], np.bool_),
            np.array([0 if pol.top_k is None else pol.top_k for pol in policies], np.int64),
            np.array([pol.temperature for pol in policies], np.float64),
            np.array([pol.top_p for pol in policies], np.float64),
            np.array(pol_of, np.int64),
            _codes(arms),
            int(max_depth),
            importance,
            depth,
            pflag,
            iflag,
            an,
            offpath,
            im,
        )
    return _values(depth, an, offpath, pflag[pol_of], im if importance else None, iflag)


def _values(
    depth: NDArray[np.int32],
    an: NDArray[np.float64],
    offpath: NDArray[np.float64],
    flag: NDArray[np.int8],
    im: NDArray[np.float64] | None,
    iflag: NDArray[np.int8],
) -> AllArms:
    """Each arm's :class:`RoundValues` from the kernel's planes (``flag``: each arm's policy's)."""
    n, d = an.shape[2], an.shape[3]
    analytic = tuple(
        RoundValues(
            depth=depth.copy(),
            t=an[k, 0],
            var=np.zeros((n, d)),
            surv=an[k, 1],
            offpath=offpath[k],
            flag=flag[k],
        )
        for k in range(an.shape[0])
    )
    if im is None:
        return AllArms(analytic, None)
    weights = tuple(
        RoundValues(
            depth=depth.copy(),
            t=im[k, 0],
            var=np.zeros((n, d)),
            surv=im[k, 1],
            offpath=np.zeros((n, 4)),
            flag=iflag[k],
            ratio=im[k, 2],
            bound=im[k, 3],
            moment=im[k, 4],
        )
        for k in range(im.shape[0])
    )
    return AllArms(analytic, weights)
