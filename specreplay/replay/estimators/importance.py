"""Importance replay: the arm's survival reweighted on the archived drafted tokens.

See docs/methods.md#the-importance-estimator-and-its-weight.

Terms. The archive's **logging arm** L drafted every position j = 1..D of a round from its
**logging law** q^L_j (``emitted_q`` when archived, else L's sampler law on the archived
log-probabilities), each at the prefix it had drafted before, and the target scored all D
positions in one pass; the archive holds the drafted token x_j, p_j and the draft's
log-probabilities at exactly that prefix. An arm a drafts x with q^s_j(x) and accepts it with
probability min(1, p_j(x)/q^v_j(x)) (:func:`~specreplay.sim.accept.accept_prob`), so the
probability that a drafts exactly x_1..x_k and accepts all of them is Π_{j≤k} a_j(x_j) with
a_j(x) = q^s_j(x)·min(1, p_j(x)/q^v_j(x)). Summing over prefixes gives P^a(A ≥ k), and
reweighting by the logging law gives the per-round **importance weight**

    w_k = Π_{j≤k} a_j(x_j) / q^L_j(x_j),    E_L[w_k] = P^a(A ≥ k),

unbiased without the path assumption whenever q^L_j covers the support of a_j. Per round: ``surv[:,
k − 1]`` = w_k, ``t[:, d − 1]`` = 1 + Σ_{k≤d} w_k, for every depth d ≤ the round's recorded depth
(and ≤ D) in one pass. The same pass returns the **policy ratio** ``ratio[:, k − 1]`` = r_k =
Π_{j≤k} q^s_j(x_j)/q^L_j(x_j) (the weight without its acceptance factor: the logging arm's r_k is
1), whose effective sample size and Pareto k̂ are the tail diagnostics
(docs/methods.md#tail-diagnostics-ess-and-pareto-k-hat; :mod:`specreplay.stats.importance_diag`).

Decisions
---------
- **Every logged position enters the product**, including those after the archived rejection:
  all positions of a round were drafted before verification, each at its drafted prefix, so
  x_1..x_D is a draw from Π_j q^L_j whatever the verifier then did. Cutting the product at the
  archived rejection (w_k = 0 past it) would weight each round by the logging arm's own accept
  outcomes as well, i.e. estimate E_L[1{A_L ≥ k}·w_k] ≠ P^a(A ≥ k): biased for every arm other
  than one whose acceptances coincide with the logging arm's.
- The ratio is formed as (q^s_j(x)/q^L_j(x))·min(1, p_j(x)/q^v_j(x)): for the logging arm itself
  ``emitted_q`` equals its policy law bit for bit, and its sampler law is that law renormalised
  once more by the float64 quantizer, so the first factor is 1 within a few ulps (≤ 9u measured)
  and w_k is Π_{j≤k} min(1, p_j/q^L_j)(x_j) to that precision.
- ``var`` is 0: each round's w_k is one sample of the importance weight, not an average of
  draws, so there is no within-round Monte Carlo error to report; the weights' noise enters the
  per-request sums and reaches the intervals through the request bootstrap
  (docs/methods.md#the-paired-bootstrap).
- ``offpath`` is zeros: the importance estimator follows the archived path only (every product
  is over the archived tokens), so no replayed token ever leaves it.
- **Support check**, per evaluated position row: when the arm can accept a candidate the
  logging law never drafts (a_j(x) > 0 where q^L_j(x) = 0), the weight cannot see that mass and
  the estimate is biased low; the row gets :data:`~specreplay.sim.policy.FLAG_LOGGING_SUPPORT`
  on top of the policy flags, and the shard code counts such rows per arm and request (a greedy
  logging arm and a sampled arm trigger it); requalify nulls that arm's figures in the cells
  whose requests hold them, with the count. A drafted token with q^L = 0 (an inconsistent
  archive) gives a ratio of 0; its row is flagged whenever the arm could accept it.

- **Ratio bound and second moment**, per round and depth: b_k = Π_{j≤k} max_x
  q^s_j(x)/q^L_j(x) over the candidates x of position j, so r_k ≤ b_k whatever tokens the
  logging arm drafted; both laws are known on every candidate, so the bound is exact, not read
  off the observed ratios (``--estimator auto`` reports it beside the second moment below,
  which its rule reads: :mod:`specreplay.replay.choice`). A candidate with **logging
  probability 0** is left out of the max: the logging arm never drafts it, so no round's ratio
  takes its value (if the arm can accept it, the support check above flags the row and the
  arm's figures there are null). A candidate with **target probability 0** enters like any
  other (the policy ratio has no acceptance factor), and one the arm never drafts (q^s = 0)
  contributes 0. Beside it, over the same candidates, the product m_k = Π_{j≤k} Σ_x
  q^s_j(x)²/q^L_j(x) of each position's exact second moment of its ratio factor
  E_L[(q^s_j/q^L_j)²] at the archived prefix: what bounds the importance mean's variance (a
  dyadic quantizer's rare rounded-up candidates make b_k large, yet weigh q^L(x) in m_k).

Like the other kernels, per-round values are computed in parallel over rounds and each round's
arithmetic depends on that round alone, so values are bit-identical whatever the thread count or
batch size; :class:`ImportanceEstimator` is the registry's ``importance`` entry.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.errors import SpecReplayError
from specreplay.replay.archive.batch import RoundBatch
from specreplay.replay.estimators.analytic import dyadic_nearest_row
from specreplay.replay.estimators.base import Estimator, RoundValues
from specreplay.replay.estimators.policies import policy_rounds
from specreplay.replay.truncation import same_sampler, tail_rows, with_rest
from specreplay.sim.accept import accept_prob
from specreplay.sim.arms import Arm, Quant
from specreplay.sim.lanes import lane_sum
from specreplay.sim.policy import (
    FLAG_LOGGING_SUPPORT,
    HIST_BINS,
    KIND_CODES,
    KIND_DYADIC,
    ROUND_NEAREST,
    ROUNDING_CODES,
    LawCache,
    quantize_row,
)

__all__ = ["ImportanceEstimator", "importance_rounds", "ratio_row"]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)


_F = NDArray[np.float64]
_I = NDArray[np.int64]
_Scratch = tuple[_F, _F, _F, _I, _F, _I, _I]
"""Per-thread row scratch: fractional parts, q^s, q^v, integers, keys, order, histogram."""


@njit(inline="always", cache=True)
def _row_laws(
    q: NDArray[np.float64],
    p: NDArray[np.float64],
    q_log: NDArray[np.float64],
    dr: int,
    fast: bool,
    codes: NDArray[np.int64],
    matched: bool,
    scratch: _Scratch,
) -> tuple[float, float, bool, float, float]:
    """q^s, q^v at ``dr`` of one row (slices), support flag, ratio bound, exact second moment.

    ``codes`` = (sampler kind, bits, rounding, verifier kind, bits, rounding). A matched
    dyadic-nearest row takes the analytic kernel's fast path (:func:`dyadic_nearest_row`);
    any other row, or one where the fast path does not settle, is quantized into scratch by
    the reference quantizer. Then :func:`ratio_row`: the support check, the bound and the
    second moment.
    """
    frac, qs, qv, m, key, order, hist = scratch
    n = q.shape[0]
    if not (fast and dyadic_nearest_row(q, codes[1], frac, qs)):
        quantize_row(q, 0, n, codes[0], codes[1], codes[2], qs, m, key, order, hist)
    if not matched:
        quantize_row(q, 0, n, codes[3], codes[4], codes[5], qv, m, key, order, hist)
    qver = qs if matched else qv
    off, bound, moment = ratio_row(qs, p, q_log, n, frac, key)  # frac: free once quantized
    return qs[dr], qver[dr], off, bound, moment


@njit(inline="always", cache=True)
def ratio_row(
    qs: NDArray[np.float64],
    p: NDArray[np.float64],
    q_log: NDArray[np.float64],
    n: int,
    ratio: NDArray[np.float64],
    key: NDArray[np.float64],
) -> tuple[bool, float, float]:
    """Support flag, ratio bound and exact second moment of one quantized row (module docstring).

    ``qs`` holds the row's sampler law in its first ``n`` entries, ``p`` and ``q_log`` are the
    row's slices; ``ratio`` and ``key`` are scratch of the row's length at least (written: the
    ratios q^s/q^L and the moment's terms). Candidate by candidate: the support check (a_j(x) > 0
    where q^L_j(x) = 0), the bound max_x q^s_j(x)/q^L_j(x) and the second moment
    Σ_x q^s_j(x)²/q^L_j(x), both over the candidates with q^L_j(x) > 0 ("Ratio bound").
    """
    n_off = 0
    for i in range(n):  # element-wise, branch-free: vectorises
        logged = q_log[i] > 0.0
        ratio[i] = qs[i] / q_log[i] if logged else 0.0
        key[i] = qs[i] * ratio[i]  # the second moment's term, 0 where q^L = 0
        # support: a_j(x) > 0 where q^L = 0; a_j(x) > 0 exactly when p_j(x) > 0 (q^v ≤ 1)
        n_off += (not logged) & (qs[i] > 0.0) & (p[i] > 0.0)
    bound = 0.0
    for i in range(n):
        bound = max(bound, ratio[i])
    moment = lane_sum(key, n)  # lane order (specreplay.sim.lanes)
    return n_off > 0, bound, moment


@njit(parallel=True, cache=True)
def _importance_kernel(
    offsets: NDArray[np.int64],
    q: NDArray[np.float64],
    p: NDArray[np.float64],
    q_log: NDArray[np.float64],
    drafted: NDArray[np.int32],
    round_offsets: NDArray[np.int64],
    codes: NDArray[np.int64],
    matched: bool,
    max_depth: int,
    flag_in: NDArray[np.int8],
    depth: NDArray[np.int32],
    t: NDArray[np.float64],
    surv: NDArray[np.float64],
    flag: NDArray[np.int8],
    policy: NDArray[np.float64],
    bound: NDArray[np.float64],
    moment: NDArray[np.float64],
) -> None:
    """Fill depth, t, surv, policy, bound, moment (columns < depth; the rest as given), flags.

    Parameters
    ----------
    offsets : int64, (n_rows + 1,)
        CSR offsets of the position rows' candidates.
    q : float64, (nnz,)
        The arm's policy law (quantized here, row by row, into the sampler and verifier laws).
    p : float64, (nnz,)
        Target probabilities of the candidates.
    q_log : float64, (nnz,)
        The logging law q^L.
    drafted : int32, (n_rows,)
        Archived drafted candidate index per row (≥ 0).
    round_offsets : int64, (n_rounds + 1,)
    codes : int64, (6,)
        Sampler kind, bits, rounding; verifier kind, bits, rounding (``KIND_CODES``, …).
    matched : bool
        Whether the verifier law is the sampler's.
    max_depth : int
        D: depths 1..D are evaluated.
    flag_in : int8, (n_rows,)
        The policy's row flags, copied into ``flag``.
    depth : int32, (n_rounds,)
    t, surv : float64, (n_rounds, D)
    flag : int8, (n_rows,)
        Written: ``flag_in``, plus FLAG_LOGGING_SUPPORT on evaluated rows where the arm can
        accept a candidate of logging probability 0.
    policy : float64, (n_rounds, D)
        The policy ratio r_k = Π_{j≤k} q^s_j(x_j)/q^L_j(x_j) (a factor is 0 where q^L_j(x_j) = 0).
    bound : float64, (n_rounds, D)
        Its exact bound b_k = Π_{j≤k} max_x q^s_j(x)/q^L_j(x) over the candidates of q^L_j(x) > 0.
    moment : float64, (n_rounds, D)
        m_k = Π_{j≤k} Σ_x q^s_j(x)²/q^L_j(x) over the same candidates: the product of each
        position's exact E[(q^s/q^L)²] under the logging law at the archived prefix.
    """
    n_rounds = round_offsets.shape[0] - 1
    width = 1
    for i in range(offsets.shape[0] - 1):
        width = max(width, offsets[i + 1] - offsets[i])
    fast = matched and codes[0] == KIND_DYADIC and codes[2] == ROUND_NEAREST
    n_chunks = min(n_rounds, 256)  # scratch allocated once per chunk of rounds
    for c in prange(n_chunks):
        scratch = (
            np.empty(width),
            np.empty(width),
            np.empty(width),
            np.empty(width, np.int64),
            np.empty(width),
            np.empty(width, np.int64),
            np.empty(HIST_BINS, np.int64),
        )
        for r in range(c * n_rounds // n_chunks, (c + 1) * n_rounds // n_chunks):
            a = round_offsets[r]
            b = round_offsets[r + 1]
            for row in range(a, b):
                flag[row] = flag_in[row]
            d_r = min(b - a, max_depth)
            depth[r] = d_r
            w = 1.0
            acc = 1.0
            r_k = 1.0
            b_k = 1.0
            m_k = 1.0
            for j in range(d_r):
                row = a + j
                lo = offsets[row]
                hi = offsets[row + 1]
                dr = int(drafted[row])
                qs_x, qv_x, off, b_j, m_j = _row_laws(
                    q[lo:hi], p[lo:hi], q_log[lo:hi], dr, fast, codes, matched, scratch
                )
                if off:
                    flag[row] |= FLAG_LOGGING_SUPPORT
                x = lo + dr
                ratio = 0.0
                pol = 0.0
                # docs/methods.md#the-importance-estimator-and-its-weight: a_j(x_j) / q^L_j(x_j),
                # policy ratio first
                if q_log[x] > 0.0:
                    pol = qs_x / q_log[x]
                    ratio = pol * accept_prob(qv_x, p[x])
                w *= ratio
                # docs/methods.md#the-importance-estimator-and-its-weight diagnostics: the policy
                # ratio, acceptance factor left out
                r_k *= pol
                policy[r, j] = r_k
                b_k *= b_j  # the exact bound of r_k: each factor at its largest candidate
                bound[r, j] = b_k
                m_k *= m_j  # each position's exact second moment of its ratio factor
                moment[r, j] = m_k
                acc += w
                surv[r, j] = w
                t[r, j] = acc


def _quant_codes(sampler: Quant, verifier: Quant) -> NDArray[np.int64]:
    """Return the two quantizers as the kernel takes them: (kind, bits, rounding) each."""
    return np.array(
        [
            KIND_CODES[sampler.kind],
            sampler.bits,
            ROUNDING_CODES[sampler.rounding],
            KIND_CODES[verifier.kind],
            verifier.bits,
            ROUNDING_CODES[verifier.rounding],
        ],
        np.int64,
    )


def importance_rounds(
    *,
    offsets: NDArray[np.int64],
    target_probs: NDArray[np.float64],
    q_policy: NDArray[np.float64],
    sampler: Quant,
    verifier: Quant,
    q_logging: NDArray[np.float64],
    drafted_idx: NDArray[np.int32],
    round_offsets: NDArray[np.int64],
    max_depth: int,
    flag: NDArray[np.int8] | None = None,
) -> RoundValues:
    """Return the importance per-round values of one arm (see the module docstring).

    Parameters
    ----------
    offsets : int64, (n_rows + 1,)
    target_probs : float64, (nnz,)
    q_policy : float64, (nnz,)
        The arm's policy law (:meth:`~specreplay.sim.policy.LawCache.policy`).
    sampler, verifier : Quant
        The arm's quantizers, applied row by row inside the kernel (the values are those of
        :func:`~specreplay.sim.policy.quantize`, bit for bit).
    q_logging : float64, (nnz,)
        The logging law q^L (``emitted_q``, or the logging arm's sampler law).
    drafted_idx : int32, (n_rows,)
        Archived drafted candidate index per row (every one ≥ 0).
    round_offsets : int64, (n_rounds + 1,)
    max_depth : int
    flag : int8, (n_rows,), optional
        The policy law's row flags (not modified: a new array adds FLAG_LOGGING_SUPPORT).

    Returns
    -------
    RoundValues
        ``surv`` the importance weights w_k, ``t`` = 1 + Σ_{k≤d} w_k (NaN past a round's
        depth), ``var`` and ``offpath`` zeros, ``ratio`` the policy ratios r_k, ``bound``
        their exact per-round bounds b_k and ``moment`` the products m_k of the positions'
        exact second moments (all NaN past a round's depth).
    """
    n = round_offsets.shape[0] - 1
    n_rows = drafted_idx.shape[0]
    ratio = np.full((n, max_depth), np.nan)
    bound = np.full((n, max_depth), np.nan)
    moment = np.full((n, max_depth), np.nan)
    out = RoundValues(
        depth=np.empty(n, np.int32),
        t=np.full((n, max_depth), np.nan),
        var=np.zeros((n, max_depth)),
        surv=np.full((n, max_depth), np.nan),
        offpath=np.zeros((n, 4)),
        flag=np.empty(n_rows, np.int8),
        ratio=ratio,
        bound=bound,
        moment=moment,
    )
    flag_in = flag if flag is not None else np.zeros(n_rows, np.int8)
    codes = _quant_codes(sampler, verifier)
    _importance_kernel(
        offsets,
        q_policy,
        target_probs,
        q_logging,
        drafted_idx,
        round_offsets,
        codes,
        sampler == verifier,
        int(max_depth),
        flag_in,
        out.depth,
        out.t,
        out.surv,
        out.flag,
        ratio,
        bound,
        moment,
    )
    return out


def logging_law(batch: RoundBatch, cache: LawCache, logging: Arm | None) -> NDArray[np.float64]:
    """Return the batch's logging law q^L: ``emitted_q`` when archived, else the logging arm's.

    Raises
    ------
    SpecReplayError
        Naming what is missing: the drafted_id column, or both emitted_q and a logging arm.
    """
    if batch.drafted_idx.shape[0] and int(batch.drafted_idx.min()) < 0:
        raise SpecReplayError(
            "--estimator importance needs the archive's drafted_id column (the tokens the "
            "logging arm drafted); this archive has none: use --estimator analytic or montecarlo"
        )
    if batch.emitted_q.shape[0] == batch.target_probs.shape[0]:
        return batch.emitted_q
    if logging is None:
        raise SpecReplayError(
            "--estimator importance needs the logging law: this archive has neither an "
            "emitted_q column nor a logging arm (a logging_arm column or --logging-arm)"
        )
    return cache.laws(logging).q_sampler


class ImportanceEstimator(Estimator):
    """``importance``: P^a(A ≥ k) = E_L[Π_{j≤k} a_j(x_j)/q^L_j(x_j)], no path assumption.

    Needs the archive's drafted_id and its logging law (``emitted_q``, else the logging arm).
    """

    name = "importance"
    columns = frozenset({"drafted_id", "emitted_q", "logging_arm"})

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
        """Return the importance values of ``arm`` over ``batch`` (see :class:`Estimator`)."""
        if arm.rule is not None:  # a drafting policy (sweep --policy)
            return policy_rounds(self, batch, arm, cache, max_depth=max_depth, logging=logging)
        q_log = logging_law(batch, cache, logging)
        if same_sampler(arm, logging) and tail_rows(batch).size:
            # a truncated logging law (schema v2): the arm drafts from emitted_q itself
            # (specreplay.replay.truncation): its rest appended, the quantizers see the whole law
            offsets, target, q = with_rest(batch)
            q_policy, q_log, flag = q, q, None
        else:
            law = cache.policy(arm.policy)
            offsets, target, q_policy, flag = batch.offsets, batch.target_probs, law.q, law.flag
        return importance_rounds(
            offsets=offsets,
            target_probs=target,
            q_policy=q_policy,
            sampler=arm.sampler,
            verifier=arm.verifier,
            q_logging=q_log,
            drafted_idx=batch.drafted_idx,
            round_offsets=batch.round_offsets,
            max_depth=max_depth,
            flag=flag,
        )
