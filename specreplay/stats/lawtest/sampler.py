"""The Monte Carlo sampler of the emitted token: counts over the n + 1 categories.

See docs/methods.md#law-tests.

A Numba kernel draws each token by rejection sampling with counter-based uniforms
(:mod:`specreplay.sim.rng`; draw i of a position uses round i), split into a fixed number of chunks
so the counts do not depend on the thread count. Draft draws by CDF inversion (float laws) or
against the integer cumulative sums of m_s (dyadic laws,
docs/methods.md#the-importance-estimator-and-its-weight).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numpy.typing import ArrayLike, NDArray

from specreplay import use_numba_cache
from specreplay.errors import SpecReplayError
from specreplay.sim.rng import STREAM_ACCEPT, STREAM_DRAFT, STREAM_RESIDUAL, uniform
from specreplay.sim.sampling import draw_float
from specreplay.stats.lawtest.exact import check_dyadic, check_laws, residual_weights

__all__ = ["counts_of_checked", "sample_counts"]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

_CHUNKS = 64  # fixed work split of the sampler: independent of the thread count
_TWO_53 = 9007199254740992.0


@njit(parallel=True, cache=True)
def _emit_counts(
    q_s: NDArray[np.float64],
    q_v: NDArray[np.float64],
    p: NDArray[np.float64],
    res_w: NDArray[np.float64],
    res_total: float,
    m_cum: NDArray[np.int64],
    bits: int,
    seed: np.uint64,
    key: np.uint64,
    position: int,
    draws: int,
    out: NDArray[np.int64],
) -> None:
    """Sample ``draws`` emitted tokens of one position and add their counts to ``out``.

    Parameters
    ----------
    q_s, q_v, p : float64 (n,)
        Sampler law, verifier law and target probabilities of the candidates.
    res_w : float64 (n + 1,)
        Residual weights (candidates, then the other bucket); res_total their sum (> 0).
    m_cum : int64 (n,) or (0,)
        Integer cumulative sums of a dyadic sampler with ``bits`` N; empty for a float law.
    seed, key : uint64; position : int
        Keys of the counter-based uniforms; draw i uses round i.
    draws : int
        Number of draws.
    out : int64 (n + 1,)
        Counts per category, incremented in place.
    """
    n = q_s.shape[0]
    local = np.zeros((_CHUNKS, n + 1), dtype=np.int64)
    shift = 53 - bits
    for c in prange(_CHUNKS):
        lo = draws * c // _CHUNKS
        hi = draws * (c + 1) // _CHUNKS
        for i in range(lo, hi):
            u = uniform(seed, key, i, position, STREAM_DRAFT)
            if m_cum.shape[0] > 0:
                # docs/methods.md#the-monte-carlo-estimator: k = ⌊u·2^53⌋ >> (53 − N)
                k = np.int64(u * _TWO_53) >> shift
                x = np.int64(0)
                while m_cum[x] <= k:
                    x += 1
            else:
                x = np.int64(draw_float(q_s, 0, q_s.shape[0], u))
            v = uniform(seed, key, i, position, STREAM_ACCEPT)
            # docs/methods.md#rounds-retained-tokens-and-r: accept when v·q^v(x) < p(x)
            if v * q_v[x] < p[x]:
                local[c, x] += 1
            else:
                w = uniform(seed, key, i, position, STREAM_RESIDUAL) * res_total
                local[c, draw_float(res_w, 0, res_w.shape[0], w)] += 1
    for c in range(_CHUNKS):
        for j in range(n + 1):
            out[j] += local[c, j]


def sample_counts(
    q_s: ArrayLike,
    q_v: ArrayLike,
    p: ArrayLike,
    p_other: float,
    *,
    draws: int,
    seed: int,
    key: int = 0,
    position: int = 0,
    m_s: ArrayLike | None = None,
    bits: int | None = None,
) -> NDArray[np.int64]:
    """Sample the emitted token of one position ``draws`` times (.md#law-tests Monte Carlo).

    See docs/methods.md#law-tests.

    Parameters
    ----------
    q_s, q_v, p : float64, (n,)
        Sampler law, verifier law, target probabilities (see :func:`output_law`).
    p_other : float
        Target mass outside the candidates.
    draws : int
        Number of emitted tokens to sample (≥ 1).
    seed, key, position : int
        Keys of the counter-based uniforms (key and seed taken modulo 2^64).
    m_s : int64, (n,), optional
        Dyadic integers of the sampler (Σ m_s = 2^bits, q_s = m_s / 2^bits); sampled by integer
        CDF inversion when given.
    bits : int, optional
        N of the dyadic sampler (1..53); ignored for a float sampler.

    Returns
    -------
    int64, (n + 1,)
        Counts of each candidate, then of the other bucket; they sum to ``draws``.
    """
    qs, qv, pp, po = check_laws(q_s, q_v, p, p_other, "")
    m_cum, n_bits = check_dyadic(m_s, bits, qs, "")
    if int(draws) < 1:
        raise SpecReplayError(f"draws must be at least 1, got {draws!r}")
    if int(position) < 0:
        raise SpecReplayError(f"position must be non-negative, got {position!r}")
    return counts_of_checked(
        qs, qv, pp, po, m_cum, n_bits, int(draws), int(seed), int(key), int(position)
    )


def counts_of_checked(
    qs: NDArray[np.float64],
    qv: NDArray[np.float64],
    pp: NDArray[np.float64],
    po: float,
    m_cum: NDArray[np.int64],
    bits: int,
    draws: int,
    seed: int,
    key: int,
    position: int,
) -> NDArray[np.int64]:
    """Return :func:`sample_counts` of laws already checked (the kernel, seeds taken mod 2^64)."""
    w = residual_weights(qv, pp, po)
    out = np.zeros(qs.shape[0] + 1, dtype=np.int64)
    _emit_counts(
        qs,
        qv,
        pp,
        w,
        float(w.sum()),
        m_cum,
        bits,
        np.uint64(seed % (1 << 64)),
        np.uint64(key % (1 << 64)),
        position,
        draws,
        out,
    )
    return out
