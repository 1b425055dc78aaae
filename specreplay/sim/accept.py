"""Acceptance of one position and the round state after it.

See docs/methods.md#acceptance-at-one-position-alpha.

Terms: at a position the sampler law q^s drafts x, the verifier accepts when v·q^v(x) < p(x) for a
uniform v, so the accept probability is a(x) = min(1, p(x)/q^v(x)) (1 when q^v(x) = 0 < p(x), 0
when p(x) = 0); the position's acceptance is α = Σ_x q^s(x)·a(x). A round's analytic state after
j positions is :data:`ROUND_START` advanced j times by :func:`advance`. These are the one
implementation shared by the replay estimators and the law tests.

This module depends on NumPy, Numba and :mod:`specreplay.sim.lanes` only.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from specreplay import use_numba_cache
from specreplay.sim.lanes import lane_sum

__all__ = ["ROUND_START", "accept_prob", "accept_probs", "advance", "alpha_row"]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)


@njit(inline="always", cache=True)
def accept_prob(qv: float, p: float) -> float:
    """a(x) = P(v·q^v(x) < p(x)) for v ~ U[0, 1): 0 where p = 0, 1 where q^v ≤ p, else p/q^v.

    Written as selects, so that a loop over candidates vectorises: the quotient is formed first
    (inf where q^v = 0) and clamped to 1; since rounding is monotone, p/q^v rounds to ≥ 1 exactly
    when q^v ≤ p, so the value is the branchy definition's to the bit.
    """
    r = p / qv if qv > 0.0 else np.inf  # the guard lets the compiler drop Numba's zero check
    a = r if r < 1.0 else 1.0
    return a if p > 0.0 else 0.0


@njit(cache=True)
def accept_probs(qv: NDArray[np.float64], p: NDArray[np.float64]) -> NDArray[np.float64]:
    """Return a(x) per candidate, float64 (n,): :func:`accept_prob` over qv, p float64 (n,)."""
    out = np.empty(qv.shape[0])
    for i in range(qv.shape[0]):
        out[i] = accept_prob(qv[i], p[i])
    return out


@njit(inline="always", cache=True)
def alpha_row(
    qs: NDArray[np.float64],
    qv: NDArray[np.float64],
    p: NDArray[np.float64],
    dr: int,
    terms: NDArray[np.float64],
) -> tuple[float, float]:
    """α = Σ_x q^s(x)·a(x) over one row's slices, and the drafted candidate's term (0 if dr < 0).

    ``terms`` is scratch of the row's length at least: the terms q^s(x)·a(x) are written there
    (an element-wise loop, which vectorises) and summed in lane order
    (:func:`~specreplay.sim.lanes.lane_sum`), so α is the same in every process while the
    compiler still runs the sum eight lanes wide.
    """
    n = qs.shape[0]
    for i in range(n):
        terms[i] = qs[i] * accept_prob(qv[i], p[i])
    a_dr = terms[dr] if 0 <= dr < n else 0.0
    return lane_sum(terms, n), a_dr


# Analytic state of a round after j positions: (P(A ≥ j), P(reach j + 1 on the archived path),
# E[1 + min(A, j)], then the off-path expectations: accepted, accepted off the archived token,
# evaluated, evaluated through an off-path prefix).
ROUND_START = (1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0)


@njit(inline="always", cache=True)
def advance(
    state: tuple[float, float, float, float, float, float, float], alpha: float, a_dr: float
) -> tuple[float, float, float, float, float, float, float]:
    """Return the round state after one more position of acceptance α (a_dr: archived token's)."""
    prod, on_path, acc, e_acc, e_acc_off, e_eval, e_eval_off = state
    nxt = prod * alpha
    return (
        nxt,
        on_path * a_dr,
        acc + nxt,
        e_acc + nxt,
        e_acc_off + prod * (alpha - a_dr),
        e_eval + prod,
        e_eval_off + (prod - on_path),
    )
