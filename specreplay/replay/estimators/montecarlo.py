"""Replay kernels: Monte Carlo and analytic retained tokens per round, for every depth at once.

Terms (docs/methods.md#rounds-retained-tokens-and-r, docs/methods.md#the-monte-carlo-estimator). A
**round** replays the archived positions 1..D of one archived round under an arm: at position j the
sampler law q^s_j drafts x (CDF inversion of a uniform u), the verifier accepts when v·q^v_j(x) <
p_j(x) (v a second uniform), and the round stops at the first rejection. A = accepted drafts; the
round retains 1 + A tokens. Replaying depth d ≤ D truncates the same draws at d, so one pass gives
every depth 1..D (**path assumption**: the archived laws are used as if they did not depend on what
was drafted before).

- **montecarlo**: M replicates; replicate m of position j of round r uses
  ``uniform(seed, request_key, round, j, stream + STREAMS_PER_REPLICATE·m)``: every arm of a run
  sees the same (u, v) for the same (request, round, position, replicate) (common random numbers).
  Float laws draw x as the first candidate whose cumulative sum exceeds u; dyadic laws draw k =
  ⌊u·2^53⌋ >> (53 − N) against the integer cumulative sums
  (docs/methods.md#the-monte-carlo-estimator).
- **analytic** (Rao-Blackwellised): α_j = Σ_x q^s_j(x)·a_j(x) with a_j(x) = min(1, p_j(x)/q^v_j(x))
  (1 when q^v = 0 < p, 0 when p = 0), E[1 + A] at depth d = 1 + Σ_{k≤d} Π_{j≤k} α_j.

The kernels compute per-round values in parallel;
:class:`~specreplay.replay.accumulate.ReplayAccumulator` adds them into per-(request, bucket) sums
sequentially in archive order, so sums are bit-identical whatever the thread count or batch size.
:class:`MonteCarloEstimator` is the registry's ``montecarlo`` entry.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.errors import SpecReplayError
from specreplay.replay.archive.batch import RoundBatch
from specreplay.replay.estimators.base import Estimator, RoundValues
from specreplay.replay.estimators.policies import policy_rounds
from specreplay.sim.accept import ROUND_START, advance, alpha_row
from specreplay.sim.arms import Arm
from specreplay.sim.policy import LawCache
from specreplay.sim.rng import STREAM_ACCEPT, STREAM_DRAFT, STREAMS_PER_REPLICATE, uniform
from specreplay.sim.sampling import draw_dyadic, draw_float

__all__ = ["MonteCarloEstimator", "replay_rounds"]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)


@njit(parallel=True, cache=True)
def _replay_kernel(
    offsets: NDArray[np.int64],
    p: NDArray[np.float64],
    qs: NDArray[np.float64],
    ms: NDArray[np.int64],
    bits: int,
    qv: NDArray[np.float64],
    drafted: NDArray[np.int32],
    round_offsets: NDArray[np.int64],
    round_key: NDArray[np.uint64],
    round_index: NDArray[np.int64],
    seed: np.uint64,
    n_rep: int,
    max_depth: int,
    depth: NDArray[np.int32],
    t_an: NDArray[np.float64],
    s_an: NDArray[np.float64],
    t_mc: NDArray[np.float64],
    v_mc: NDArray[np.float64],
    s_mc: NDArray[np.float64],
    offpath: NDArray[np.float64],
) -> None:
    """Fill per-round analytic (t_an, s_an) and Monte Carlo (t_mc, v_mc, s_mc) values.

    Shapes are those of :class:`~specreplay.replay.estimators.base.RoundValues`; the Monte Carlo
    arrays are left NaN when ``n_rep`` is 0.

    Parameters
    ----------
    offsets : int64, (n_rows + 1,)
        CSR offsets of the position rows' candidates.
    p : float64, (nnz,)
        Target probabilities of the candidates.
    qs, qv : float64, (nnz,)
        Sampler and verifier laws over the candidates.
    ms : int64, (nnz,) or (0,)
        Dyadic integers of the sampler law when ``bits`` > 0.
    bits : int
        N of a dyadic sampler, 0 for float samplers.
    drafted : int32, (n_rows,)
        Archived drafted candidate index per row, −1 when unknown.
    round_offsets : int64, (n_rounds + 1,)
    round_key : uint64, (n_rounds,)
    round_index : int64, (n_rounds,)
    seed : uint64
    n_rep : int
        Monte Carlo replicates M (0: analytic only).
    max_depth : int
        D: depths 1..D are evaluated.
    """
    n_rounds = round_offsets.shape[0] - 1
    width = 1
    for i in range(offsets.shape[0] - 1):
        width = max(width, offsets[i + 1] - offsets[i])
    n_chunks = min(n_rounds, 256)  # α's scratch allocated once per chunk of rounds
    for c in prange(n_chunks):
        terms = np.empty(width)
        for r in range(c * n_rounds // n_chunks, (c + 1) * n_rounds // n_chunks):
            a = round_offsets[r]
            d_r = min(round_offsets[r + 1] - a, max_depth)
            depth[r] = d_r
            key = round_key[r]
            rnd = round_index[r]
            for d in range(max_depth):
                t_an[r, d] = np.nan
                s_an[r, d] = np.nan
                t_mc[r, d] = np.nan
                v_mc[r, d] = np.nan
                s_mc[r, d] = np.nan
            # analytic: products of acceptance probabilities, and off-path expectations
            st = ROUND_START
            for j in range(d_r):
                lo = offsets[a + j]
                hi = offsets[a + j + 1]
                alpha, a_dr = alpha_row(qs[lo:hi], qv[lo:hi], p[lo:hi], drafted[a + j], terms)
                st = advance(st, alpha, a_dr)
                s_an[r, j] = st[0]
                t_an[r, j] = st[2]
            if n_rep == 0:
                for k in range(4):
                    offpath[r, k] = st[3 + k]
                continue
            # Monte Carlo with common random numbers
            for d in range(d_r):
                t_mc[r, d] = 0.0
                v_mc[r, d] = 0.0
                s_mc[r, d] = 0.0
            n_acc = 0.0
            n_acc_off = 0.0
            n_eval = 0.0
            n_eval_off = 0.0
            for m in range(n_rep):
                base = STREAMS_PER_REPLICATE * m
                big_a = d_r
                off = False
                for j in range(d_r):
                    row = a + j
                    lo = offsets[row]
                    hi = offsets[row + 1]
                    u = uniform(seed, key, rnd, j + 1, base + STREAM_DRAFT)
                    x = draw_dyadic(ms, lo, hi, u, bits) if bits > 0 else draw_float(qs, lo, hi, u)
                    v = uniform(seed, key, rnd, j + 1, base + STREAM_ACCEPT)
                    n_eval += 1.0
                    if off:
                        n_eval_off += 1.0
                    if x >= 0 and v * qv[x] < p[x]:
                        n_acc += 1.0
                        if x - lo != drafted[row]:
                            n_acc_off += 1.0
                            off = True
                    else:
                        big_a = j
                        break
                for d in range(d_r):
                    kept = min(big_a, d + 1)
                    val = 1.0 + kept
                    t_mc[r, d] += val
                    v_mc[r, d] += val * val
                    if big_a >= d + 1:
                        s_mc[r, d] += 1.0
            inv = 1.0 / n_rep
            for d in range(d_r):
                mean = t_mc[r, d] * inv
                var = (v_mc[r, d] - n_rep * mean * mean) / (n_rep - 1) if n_rep > 1 else 0.0
                t_mc[r, d] = mean
                v_mc[r, d] = max(var, 0.0) * inv
                s_mc[r, d] *= inv
            offpath[r, 0] = n_acc * inv
            offpath[r, 1] = n_acc_off * inv
            offpath[r, 2] = n_eval * inv
            offpath[r, 3] = n_eval_off * inv


def replay_rounds(
    *,
    offsets: NDArray[np.int64],
    target_probs: NDArray[np.float64],
    q_sampler: NDArray[np.float64],
    m_sampler: NDArray[np.int64] | None,
    bits: int,
    q_verifier: NDArray[np.float64],
    drafted_idx: NDArray[np.int32],
    round_offsets: NDArray[np.int64],
    round_key: NDArray[np.uint64],
    round_index: NDArray[np.int64],
    seed: int,
    replicates: int,
    max_depth: int,
    flag: NDArray[np.int8] | None = None,
) -> RoundValues:
    """Replay every round of a batch under one arm's laws (see the module docstring).

    With ``replicates`` M > 0 the values are Monte Carlo (the mean over M replicates, its
    variance, the share of replicates with A ≥ k, off-path means); with M = 0 they are the
    analytic values on the quantized laws (``var`` 0), which
    :func:`~specreplay.replay.estimators.analytic.analytic_rounds` computes faster.
    """
    n = round_index.shape[0]
    depth = np.empty(n, np.int32)
    t_an, s_an = np.empty((n, max_depth)), np.empty((n, max_depth))
    t_mc, v_mc, s_mc = np.empty((n, max_depth)), np.empty((n, max_depth)), np.empty((n, max_depth))
    offpath = np.empty((n, 4))
    ms = m_sampler if (m_sampler is not None and bits > 0) else np.zeros(0, np.int64)
    _replay_kernel(
        offsets,
        target_probs,
        q_sampler,
        ms,
        int(bits),
        q_verifier,
        drafted_idx,
        round_offsets,
        round_key,
        round_index,
        np.uint64(seed),
        int(replicates),
        int(max_depth),
        depth,
        t_an,
        s_an,
        t_mc,
        v_mc,
        s_mc,
        offpath,
    )
    row_flag = flag if flag is not None else np.zeros(drafted_idx.shape[0], np.int8)
    if replicates == 0:
        return RoundValues(depth, t_an, np.zeros((n, max_depth)), s_an, offpath, row_flag)
    return RoundValues(depth, t_mc, v_mc, s_mc, offpath, row_flag)


class MonteCarloEstimator(Estimator):
    """``montecarlo``: M replicates per round with common random numbers.

    See docs/methods.md#the-monte-carlo-estimator.

    The quantized laws and their dyadic integers are computed once per batch per distinct
    (policy, quantizer) (:meth:`~specreplay.sim.policy.LawCache.laws`).
    """

    name = "montecarlo"
    columns = frozenset({"drafted_id"})

    def replicates_used(self, replicates: int) -> int:
        """Return ``replicates``; raise when it is below 2 (no variance from one replicate)."""
        if replicates < 2:
            raise SpecReplayError("--replicates: Monte Carlo needs at least 2 replicates")
        return replicates

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
        """Monte Carlo values of ``arm`` over ``batch`` (see :class:`Estimator`)."""
        if arm.rule is not None:  # a drafting policy (sweep --policy)
            return policy_rounds(self, batch, arm, cache, max_depth=max_depth, logging=logging)
        laws = cache.laws(arm)
        return replay_rounds(
            offsets=batch.offsets,
            target_probs=batch.target_probs,
            q_sampler=laws.q_sampler,
            m_sampler=laws.m_sampler,
            bits=laws.sampler_bits,
            q_verifier=laws.q_verifier,
            drafted_idx=batch.drafted_idx,
            round_offsets=batch.round_offsets,
            round_key=batch.round_key,
            round_index=batch.round_index,
            seed=seed,
            replicates=replicates,
            max_depth=max_depth,
            flag=laws.flag,
        )
