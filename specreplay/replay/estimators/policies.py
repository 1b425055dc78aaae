"""Drafting policies replayed: per-round values of an arm that drafts by a rule, not a depth.

See docs/methods.md#policies-adaptive-drafting.

An arm with a rule (:meth:`~specreplay.sim.arms.Arm.with_rule`, ``sweep --policy``) drafts up to
D positions and stops by the rule (:mod:`specreplay.sim.drafting`). Its per-round values are
those of a fixed depth (:class:`~specreplay.replay.estimators.base.RoundValues`) with the policy's
laws: ``surv[:, k − 1]`` = P(A ≥ k), ``t[:, d − 1]`` = 1 + Σ_{k≤d} P(A ≥ k), so column D − 1 is the
policy's E[1 + A]. Its **length arm** (``length=True``) carries the positions drafted instead:
``surv[:, k − 1]`` = P(L ≥ k) and ``t[:, d − 1]`` = Σ_{k≤d} P(L ≥ k) = E[min(L, d)], whence the
cost of a round (``linear:T0:C``: T0 + C·E[L]; a table: T(1) + Σ_{k≥2} (T(k) − T(k − 1))·P(L ≥ k),
linear in the same sums) and its bootstrap beside R's.

Estimators (q^s the sampler law, a_j(x) = q^s_j(x)·min(1, p_j(x)/q^v_j(x)), α_j = Σ_x a_j(x)):

- **analytic** (path assumption): P(A ≥ k) = (Π_{j<k} c_j)·α_k and P(L ≥ k) = Π_{j<k} m_j, with
  c_j = Σ_{x: q^s_j(x) ≥ τ} a_j(x) and m_j = Σ_{x: q^s_j(x) ≥ τ} q^s_j(x) for ``stop-below``. Every
  τ of a run reads one sort of each row's candidates by q^s (descending) with the prefix sums of
  a_j and q^s (:func:`sorted_rows`, once per batch and sampler): c_j and m_j are a binary search
  away. For ``stop-cum`` the indicator is on the running product π = Π q^s(x_i), which depends on
  the tokens drafted before: the sum runs over the prefixes whose product stays ≥ τ, enumerated
  exactly (each prefix is an atom (π, Π a, Π q^s); since Σ π over the atoms of a position is at
  most 1, at most 1/τ atoms survive, so the enumeration is exact and bounded).
- **importance**: the same indicators on the archived tokens, P(A ≥ k) =
  E_L[Π_{j≤k} (a_j/q^L_j)(x_j)·Π_{j<k} 1{continue after x_j}] and P(L ≥ k) =
  E_L[Π_{j<k} (q^s_j/q^L_j)(x_j)·1{continue after x_j}]: the fixed-depth weights of the arm
  (:func:`~specreplay.replay.estimators.importance.importance_rounds`, computed once per batch for
  all its policies) times 0/1 indicators, so a rule that never triggers gives the fixed depth D's
  values to the bit, and the tail diagnostics read the arm's own policy ratios.
- ``depth-by-bucket``: a round of context c drafts d(c) positions; its values are the fixed depth
  d(c)'s (any estimator's), zero past it, and L = d(c).

Decisions
---------
- Continuing is ``q ≥ τ`` (``stop-below``) and ``π ≥ τ`` (``stop-cum``): the issue's "below τ"
  stops, equality continues. τ = 0 never stops; the analytic then uses α_j itself (c_j = α_j,
  m_j = 1), so such a rule equals the fixed depth D (to the bit for a float arm; the matched
  dyadic-nearest fast path of the fixed depth sums min(q^s, p) in its own order, a few ulps).
- **Support**: a round is supported when it records the positions the policy may draft (D for a
  stop rule; d(c) for a table, with a known context). Elsewhere ``depth`` is below D, so the
  accumulator counts the round as short at depth D and the cells holding it are null
  (docs/inputs.md#position-traces-schema-v1), as for a fixed depth.
- Monte Carlo is not offered for policies (``--policy`` asks for analytic, importance or auto).
- ``stop-cum`` under analytic refuses τ < 1e-6 (up to 1/τ atoms per position): use importance.
- ``offpath`` is zeros and ``var`` 0 (exact given the laws, or one importance sample per round).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.errors import SpecReplayError
from specreplay.replay.archive.batch import RoundBatch
from specreplay.replay.estimators.base import Estimator, RoundValues
from specreplay.sim.accept import accept_prob, alpha_row
from specreplay.sim.arms import Arm
from specreplay.sim.drafting import DepthByBucket, StopRule
from specreplay.sim.policy import LawCache

__all__ = ["MIN_CUM_TAU", "SortedRows", "policy_rounds", "remember_fixed", "sorted_rows"]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

MIN_CUM_TAU = 1e-6
"""The smallest ``stop-cum`` τ the analytic enumeration takes (up to 1/τ atoms per position)."""


@dataclasses.dataclass(frozen=True)
class SortedRows:
    """Each row's candidates sorted by q^s (descending), with prefix sums (one batch, one arm).

    Attributes
    ----------
    q : float64, (nnz,)
        q^s of the row's candidates in that order.
    a : float64, (nnz,)
        a(x) = q^s(x)·min(1, p(x)/q^v(x)) in that order.
    cum_a, cum_q : float64, (nnz,)
        Prefix sums of ``a`` and ``q`` within each row (inclusive).
    alpha : float64, (n_rows,)
        α = Σ_x a(x), summed as the fixed depth's kernel sums it (lane order).
    """

    q: NDArray[np.float64]
    a: NDArray[np.float64]
    cum_a: NDArray[np.float64]
    cum_q: NDArray[np.float64]
    alpha: NDArray[np.float64]


@njit(parallel=True, cache=True)
def _sort_rows(
    offsets: NDArray[np.int64],
    qs: NDArray[np.float64],
    qv: NDArray[np.float64],
    p: NDArray[np.float64],
    out_q: NDArray[np.float64],
    out_a: NDArray[np.float64],
    cum_a: NDArray[np.float64],
    cum_q: NDArray[np.float64],
    alpha: NDArray[np.float64],
) -> None:
    """Fill :class:`SortedRows`' arrays, row by row (stable sort: ties keep candidate order)."""
    n_rows = offsets.shape[0] - 1
    width = 1
    for i in range(n_rows):
        width = max(width, offsets[i + 1] - offsets[i])
    n_chunks = min(n_rows, 256)
    for c in prange(n_chunks):
        terms = np.empty(width)
        for row in range(c * n_rows // n_chunks, (c + 1) * n_rows // n_chunks):
            lo = offsets[row]
            hi = offsets[row + 1]
            n = hi - lo
            alpha[row] = alpha_row(qs[lo:hi], qv[lo:hi], p[lo:hi], -1, terms)[0]
            order = np.argsort(-qs[lo:hi], kind="mergesort")
            sa = 0.0
            sq = 0.0
            for i in range(n):
                x = lo + order[i]
                q = qs[x]
                a = q * accept_prob(qv[x], p[x])
                out_q[lo + i] = q
                out_a[lo + i] = a
                sa += a
                sq += q
                cum_a[lo + i] = sa
                cum_q[lo + i] = sq


def sorted_rows(batch: RoundBatch, arm: Arm, cache: LawCache) -> SortedRows:
    """Return the batch's rows sorted for ``arm``'s sampler (memoized on ``cache``)."""
    key = ("sorted-rows", arm.policy, arm.sampler, arm.verifier)
    got = cache.memo.get(key)
    if isinstance(got, SortedRows):
        return got
    laws = cache.laws(arm)
    nnz = batch.target_probs.shape[0]
    out = SortedRows(
        np.empty(nnz), np.empty(nnz), np.empty(nnz), np.empty(nnz), np.empty(batch.n_positions)
    )
    if batch.n_positions:
        _sort_rows(
            batch.offsets,
            laws.q_sampler,
            laws.q_verifier,
            batch.target_probs,
            out.q,
            out.a,
            out.cum_a,
            out.cum_q,
            out.alpha,
        )
    cache.memo[key] = out
    return out


@njit(inline="always", cache=True)
def _cut(q: NDArray[np.float64], lo: int, hi: int, tau: float) -> int:
    """Return how many of the row's sorted q[lo:hi] (descending) are ≥ τ (binary search)."""
    a = 0
    b = hi - lo
    while a < b:
        mid = (a + b) // 2
        if q[lo + mid] >= tau:
            a = mid + 1
        else:
            b = mid
    return a


@njit(inline="always", cache=True)
def _put(
    r: int,
    j: int,
    s: float,
    lk: float,
    acc: float,
    tl: float,
    t: NDArray[np.float64],
    surv: NDArray[np.float64],
    lt: NDArray[np.float64],
    ls: NDArray[np.float64],
) -> tuple[float, float]:
    """Write position j of round r: P(A ≥ j+1) = s and P(L ≥ j+1) = lk with their running sums.

    ``t`` and ``lt`` are the running sums 1 + Σ P(A ≥ k) and Σ P(L ≥ k); returns them updated.
    """
    acc += s
    surv[r, j] = s
    t[r, j] = acc
    tl += lk
    ls[r, j] = lk
    lt[r, j] = tl
    return acc, tl


@njit(parallel=True, cache=True)
def _stop_below_analytic(
    offsets: NDArray[np.int64],
    round_offsets: NDArray[np.int64],
    sq: NDArray[np.float64],
    cum_a: NDArray[np.float64],
    cum_q: NDArray[np.float64],
    alpha: NDArray[np.float64],
    tau: float,
    depth_max: int,
    depth: NDArray[np.int32],
    t: NDArray[np.float64],
    surv: NDArray[np.float64],
    lt: NDArray[np.float64],
    ls: NDArray[np.float64],
) -> None:
    """``stop-below:τ@D`` under the path assumption (module docstring), every round."""
    n_rounds = round_offsets.shape[0] - 1
    for r in prange(n_rounds):
        a0 = round_offsets[r]
        d_r = min(round_offsets[r + 1] - a0, depth_max)
        depth[r] = d_r
        c_prod = 1.0  # Π_{j<k} c_j
        m_prod = 1.0  # Π_{j<k} m_j
        acc = 1.0
        tl = 0.0
        for j in range(d_r):
            row = a0 + j
            lo = offsets[row]
            hi = offsets[row + 1]
            acc, tl = _put(r, j, c_prod * alpha[row], m_prod, acc, tl, t, surv, lt, ls)
            k = _cut(sq, lo, hi, tau)
            if k == hi - lo:  # every candidate continues: c = α, m = 1
                c_prod = c_prod * alpha[row]
            else:
                c_j = cum_a[lo + k - 1] if k > 0 else 0.0
                m_j = cum_q[lo + k - 1] if k > 0 else 0.0
                c_prod = c_prod * c_j
                m_prod = m_prod * m_j


@njit(parallel=True, cache=True)
def _stop_cum_analytic(
    offsets: NDArray[np.int64],
    round_offsets: NDArray[np.int64],
    sq: NDArray[np.float64],
    sa: NDArray[np.float64],
    alpha: NDArray[np.float64],
    tau: float,
    depth_max: int,
    cap: int,
    depth: NDArray[np.int32],
    t: NDArray[np.float64],
    surv: NDArray[np.float64],
    lt: NDArray[np.float64],
    ls: NDArray[np.float64],
) -> None:
    """``stop-cum:τ@D`` under the path assumption: exact enumeration of the surviving prefixes."""
    n_rounds = round_offsets.shape[0] - 1
    n_chunks = min(n_rounds, 256)
    for c in prange(n_chunks):
        buf = np.empty((2, 3, cap))  # two generations of atoms: (π, Π a, Π q)
        for r in range(c * n_rounds // n_chunks, (c + 1) * n_rounds // n_chunks):
            a0 = round_offsets[r]
            d_r = min(round_offsets[r + 1] - a0, depth_max)
            depth[r] = d_r
            cur = 0
            n_atoms = 1
            buf[0, 0, 0] = 1.0
            buf[0, 1, 0] = 1.0
            buf[0, 2, 0] = 1.0
            acc = 1.0
            tl = 0.0
            for j in range(d_r):
                row = a0 + j
                lo = offsets[row]
                hi = offsets[row + 1]
                reach_a = 0.0
                reach_q = 0.0
                for i in range(n_atoms):
                    reach_a += buf[cur, 1, i]
                    reach_q += buf[cur, 2, i]
                acc, tl = _put(r, j, reach_a * alpha[row], reach_q, acc, tl, t, surv, lt, ls)
                new = 1 - cur
                m = 0
                for i in range(n_atoms):
                    pi = buf[cur, 0, i]
                    for x in range(lo, hi):  # sorted by q descending: stop at the first cut
                        if pi * sq[x] < tau or m >= cap:
                            break
                        buf[new, 0, m] = pi * sq[x]
                        buf[new, 1, m] = buf[cur, 1, i] * sa[x]
                        buf[new, 2, m] = buf[cur, 2, i] * sq[x]
                        m += 1
                cur = new
                n_atoms = m


@njit(parallel=True, cache=True)
def _indicators(
    offsets: NDArray[np.int64],
    round_offsets: NDArray[np.int64],
    drafted: NDArray[np.int32],
    qs: NDArray[np.float64],
    tau: float,
    cumulative: bool,
    depth_max: int,
    cont: NDArray[np.float64],
) -> None:
    """cont[r, k − 1] = Π_{j<k} 1{continue after the archived x_j} (1 at k = 1)."""
    n_rounds = round_offsets.shape[0] - 1
    for r in prange(n_rounds):
        a0 = round_offsets[r]
        d_r = min(round_offsets[r + 1] - a0, depth_max)
        on = 1.0
        pi = 1.0
        for j in range(d_r):
            cont[r, j] = on
            row = a0 + j
            q = qs[offsets[row] + drafted[row]]
            pi = pi * q
            if (pi if cumulative else q) < tau:
                on = 0.0


@njit(parallel=True, cache=True)
def _weighted(
    depth: NDArray[np.int32],
    base_surv: NDArray[np.float64],
    base_ratio: NDArray[np.float64],
    cont: NDArray[np.float64],
    t: NDArray[np.float64],
    surv: NDArray[np.float64],
    lt: NDArray[np.float64],
    ls: NDArray[np.float64],
) -> None:
    """Fill the importance values of a stop rule from the fixed-depth weights and the indicators."""
    for r in prange(depth.shape[0]):
        acc = 1.0
        tl = 0.0
        for j in range(depth[r]):
            s = base_surv[r, j] * cont[r, j]
            lk = cont[r, j] * (base_ratio[r, j - 1] if j > 0 else 1.0)
            acc, tl = _put(r, j, s, lk, acc, tl, t, surv, lt, ls)


def _values(n: int, width: int, base: RoundValues) -> tuple[RoundValues, RoundValues]:
    """Empty (retained, length) values of ``n`` rounds and ``width`` depths, base's flags."""

    def one() -> RoundValues:
        return dataclasses.replace(
            base,
            depth=np.zeros(n, np.int32),
            t=np.full((n, width), np.nan),
            var=np.zeros((n, width)),
            surv=np.full((n, width), np.nan),
            offpath=np.zeros((n, 4)),
        )

    return one(), one()


def _fixed_key(estimator: str, arm: Arm, logging: Arm | None) -> tuple[object, ...]:
    """Return the memo key of a fixed-depth arm's values (read by :func:`_fixed`)."""
    return ("fixed", estimator, arm, logging)


def remember_fixed(
    cache: LawCache, estimator: str, arm: Arm, logging: Arm | None, v: RoundValues
) -> None:
    """Keep a fixed-depth arm's values, replayed by the pass, for the policies drafting with it.

    A policy with maximum depth D starts from its sampler at the fixed depth D
    (:func:`policy_rounds`); the sweep's pass replays that arm anyway, so the engine hands its
    values here and the policy does not replay it again. Only the estimators policies use
    (exact given the laws: no seed, no replicates) and arms without a rule are kept; the
    values may be wider than D (the pass's width): :func:`policy_rounds` resizes them.
    """
    if arm.rule is None and estimator in ("analytic", "importance"):
        cache.memo.setdefault(_fixed_key(estimator, arm, logging), v)


def _fixed(
    batch: RoundBatch, arm: Arm, cache: LawCache, est: Estimator, width: int, logging: Arm | None
) -> RoundValues:
    """Return the arm's sampler at the fixed depth ``width`` (memoized for all its rules).

    Its values may come wider from the pass (:func:`remember_fixed`): cut to ``width`` (an
    estimator may count the positions a round records up to the pass's width, past D).
    """
    base = arm.at_depth(width)
    key = _fixed_key(est.name, base, logging)
    got = cache.memo.get(key)
    if isinstance(got, RoundValues):
        return _resized(got, width)
    v = est.rounds(batch, base, cache, seed=0, replicates=0, max_depth=width, logging=logging)
    cache.memo[key] = v
    return v


def _table(
    batch: RoundBatch, rule: DepthByBucket, base: RoundValues, width: int
) -> tuple[RoundValues, RoundValues]:
    """``depth-by-bucket``: the fixed depth d(c) per round, zero past it; L = d(c)."""
    n = batch.n_rounds
    ret, length = _values(n, width, base)
    los = np.array([lo for lo, _, _ in rule.entries], np.int64)
    table = np.array([d for _, _, d in rule.entries], np.int32)
    ctx = batch.round_context
    # the table covers [0, ∞) (sim.drafting): the last range starting at or below c holds it
    d_of = np.where(ctx >= 0, table[np.maximum(np.searchsorted(los, ctx, "right") - 1, 0)], 0)
    recorded = batch.round_depth.astype(np.int32)
    ok = (d_of > 0) & (recorded >= d_of)
    depth = np.where(ok, rule.max_depth, np.minimum(recorded, np.maximum(d_of - 1, 0)))
    depth = np.minimum(depth, width).astype(np.int32)
    cols = np.arange(1, width + 1)
    inside = cols[None, :] <= d_of[:, None]
    valid = cols[None, :] <= depth[:, None]
    base_t = np.where(np.isnan(base.t), 0.0, base.t)
    last = base_t[np.arange(n), np.maximum(d_of, 1) - 1]
    for arr, v in (
        (ret.surv, np.where(inside, base.surv, 0.0)),
        (ret.t, np.where(inside, base_t, last[:, None])),
        (length.surv, inside.astype(np.float64)),
        (length.t, np.minimum(cols[None, :], d_of[:, None]).astype(np.float64)),
    ):
        arr[...] = np.where(valid, v, np.nan)
    ret.depth[:] = depth
    length.depth[:] = depth
    return ret, length


def _stop(
    batch: RoundBatch,
    arm: Arm,
    rule: StopRule,
    cache: LawCache,
    estimator: str,
    base: RoundValues,
    width: int,
) -> tuple[RoundValues, RoundValues]:
    """Return a stop rule's (retained, length) values under ``estimator``."""
    ret, length = _values(batch.n_rounds, width, base)
    arrays = (ret.depth, ret.t, ret.surv, length.t, length.surv)
    if estimator == "importance":
        assert base.ratio is not None
        cont = np.zeros((batch.n_rounds, width))
        qs = cache.laws(arm).q_sampler
        args = (batch.offsets, batch.round_offsets, batch.drafted_idx, qs, rule.tau)
        _indicators(*args, rule.cumulative, rule.depth, cont)
        ret.depth[:] = base.depth
        _weighted(base.depth, base.surv, base.ratio, cont, *arrays[1:])
    else:
        rows = sorted_rows(batch, arm, cache)
        if rule.cumulative and rule.tau > 0.0:
            if rule.tau < MIN_CUM_TAU:
                raise SpecReplayError(
                    f"--policy {rule.canonical}: the analytic estimator enumerates up to 1/τ "
                    f"prefixes per position; τ below {MIN_CUM_TAU:g} needs --estimator importance"
                )
            cap = int(1.0 / rule.tau * (1.0 + 1e-9)) + 2
            head = (batch.offsets, batch.round_offsets, rows.q, rows.a, rows.alpha)
            _stop_cum_analytic(*head, rule.tau, rule.depth, cap, *arrays)
        else:
            head = (batch.offsets, batch.round_offsets, rows.q, rows.cum_a, rows.cum_q)
            _stop_below_analytic(*head, rows.alpha, rule.tau, rule.depth, *arrays)
    length.depth[:] = ret.depth
    return ret, length


def policy_rounds(
    est: Estimator,
    batch: RoundBatch,
    arm: Arm,
    cache: LawCache,
    *,
    max_depth: int,
    logging: Arm | None = None,
) -> RoundValues:
    """Return the per-round values of ``arm`` (which drafts by its rule) under ``est``.

    ``max_depth``: the pass's width (columns past the rule's D stay NaN, as past a fixed
    depth). The retained and length values of one rule are computed together and memoized on
    ``cache``, so the length arm costs nothing more.
    """
    rule = arm.rule
    if rule is None:
        raise ValueError(f"{arm.canonical}: no drafting policy")
    estimator = est.name
    if estimator not in ("analytic", "importance"):
        raise SpecReplayError(
            f"--policy {rule.canonical}: policies are replayed by the analytic and importance "
            "estimators (--estimator analytic, importance or auto)"
        )
    key = ("policy", estimator, arm.with_rule(rule), logging, max_depth)
    got = cache.memo.get(key)
    if not isinstance(got, tuple):
        width = max(max_depth, rule.max_depth)
        base = _fixed(batch, arm, cache, est, rule.max_depth, logging)
        base = _resized(base, width)
        if isinstance(rule, DepthByBucket):
            got = _table(batch, rule, base, width)
        else:
            got = _stop(batch, arm, rule, cache, estimator, base, width)
        got = tuple(_resized(v, max_depth) for v in got)
        cache.memo[key] = got
    return got[1] if arm.length else got[0]


def _fit(x: NDArray[np.float64], width: int, fill: float) -> NDArray[np.float64]:
    """Return ``x`` (n, w) cut or padded with ``fill`` to ``width`` columns."""
    if x.shape[1] >= width:
        return np.ascontiguousarray(x[:, :width])
    return np.concatenate([x, np.full((x.shape[0], width - x.shape[1]), fill)], axis=1)


def _resized(v: RoundValues, width: int) -> RoundValues:
    """Return ``v`` with ``width`` depth columns (NaN past its own; ``var`` 0)."""
    if v.t.shape[1] == width:
        return v

    def opt(x: NDArray[np.float64] | None) -> NDArray[np.float64] | None:
        return None if x is None else _fit(x, width, np.nan)

    return dataclasses.replace(
        v,
        depth=np.minimum(v.depth, width).astype(np.int32),
        t=_fit(v.t, width, np.nan),
        var=_fit(v.var, width, 0.0),
        surv=_fit(v.surv, width, np.nan),
        ratio=opt(v.ratio),
        bound=opt(v.bound),
        moment=opt(v.moment),
    )
