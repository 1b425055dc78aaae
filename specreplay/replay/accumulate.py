"""Per-(request, bucket) sums of replayed rounds, added in archive order (bit-identical).

Each batch's per-round values
(:class:`~specreplay.replay.estimators.montecarlo.RoundValues`) are added one round at a time, in
archive order, into arrays keyed by request × bucket, so the floating-point sums do not depend on
the thread count or on where batches were cut (SPEC §5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import NDArray

from specreplay.replay.estimators.montecarlo import RoundValues

__all__ = ["ReplayAccumulator", "ReplaySums"]


@njit(cache=True)
def _add_rounds(
    keys: NDArray[np.int64],
    depth: NDArray[np.int32],
    t_an: NDArray[np.float64],
    s_an: NDArray[np.float64],
    t_mc: NDArray[np.float64],
    v_mc: NDArray[np.float64],
    s_mc: NDArray[np.float64],
    offpath: NDArray[np.float64],
    n: NDArray[np.float64],
    short: NDArray[np.float64],
    a_t: NDArray[np.float64],
    a_s: NDArray[np.float64],
    m_t: NDArray[np.float64],
    m_v: NDArray[np.float64],
    m_s: NDArray[np.float64],
    a_off: NDArray[np.float64],
    has_mc: bool,
) -> None:
    """Add each round's values to its key's sums, sequentially in the given order.

    ``n[key]`` counts rounds; ``short[key, d]`` counts rounds replayed at fewer than d + 1
    positions (depth d + 1 unsupported there); the others are sums over supported rounds.
    """
    max_depth = t_an.shape[1]
    for r in range(keys.shape[0]):
        k = keys[r]
        n[k] += 1.0
        for j in range(4):
            a_off[k, j] += offpath[r, j]
        for d in range(max_depth):
            if d >= depth[r]:
                short[k, d] += 1.0
                continue
            a_t[k, d] += t_an[r, d]
            a_s[k, d] += s_an[r, d]
            if has_mc:
                m_t[k, d] += t_mc[r, d]
                m_v[k, d] += v_mc[r, d]
                m_s[k, d] += s_mc[r, d]


@dataclass(frozen=True)
class ReplaySums:
    """Accumulated sums of one arm, per key = request code × n_buckets + bucket code.

    Attributes
    ----------
    keys : int64, (k,)
        Keys holding at least one round.
    n : float64, (k,)
        Rounds.
    short : float64, (k, D)
        Rounds that recorded fewer than d positions (column d − 1): depth d unsupported there.
    t_analytic, t_mc : float64, (k, D)
        Σ E[1 + A] at depth d over the supported rounds (analytic; Monte Carlo mean).
    var_mc : float64, (k, D)
        Σ of the rounds' Monte Carlo variances (their means' variance): MCSE² × rounds².
    surv_analytic, surv_mc : float64, (k, D)
        Σ P(A ≥ k) over the supported rounds.
    offpath : float64, (k, 4)
        Σ accepted, accepted off-path, evaluated, evaluated through an off-path prefix.
    """

    keys: NDArray[np.int64]
    n: NDArray[np.float64]
    short: NDArray[np.float64]
    t_analytic: NDArray[np.float64]
    t_mc: NDArray[np.float64]
    var_mc: NDArray[np.float64]
    surv_analytic: NDArray[np.float64]
    surv_mc: NDArray[np.float64]
    offpath: NDArray[np.float64]


class ReplayAccumulator:
    """Grow-as-needed per-key sums for one arm (D depths)."""

    def __init__(self, max_depth: int) -> None:
        self.d = max_depth
        self._cap = 0
        self._arrays: dict[str, NDArray[np.float64]] = {}
        self._grow(1024)

    def _grow(self, size: int) -> None:
        cap = max(size, 2 * self._cap)
        shapes = {
            "n": (cap,),
            "short": (cap, self.d),
            "a_t": (cap, self.d),
            "a_s": (cap, self.d),
            "m_t": (cap, self.d),
            "m_v": (cap, self.d),
            "m_s": (cap, self.d),
            "a_off": (cap, 4),
        }
        for name, shape in shapes.items():
            new = np.zeros(shape)
            if name in self._arrays:
                new[: self._cap] = self._arrays[name]
            self._arrays[name] = new
        self._cap = cap

    def add(self, keys: NDArray[np.int64], values: RoundValues, has_mc: bool) -> None:
        """Add a batch's rounds (``keys`` in archive order)."""
        if keys.shape[0] == 0:
            return
        need = int(keys.max()) + 1
        if need > self._cap:
            self._grow(need)
        a = self._arrays
        _add_rounds(
            keys, values.depth, values.t_analytic, values.surv_analytic, values.t_mc,
            values.var_mc, values.surv_mc, values.offpath,
            a["n"], a["short"], a["a_t"], a["a_s"], a["m_t"], a["m_v"], a["m_s"], a["a_off"],
            has_mc,
        )  # fmt: skip

    def result(self) -> ReplaySums:
        """Return the sums of every key that holds a round."""
        a = self._arrays
        keys = np.flatnonzero(a["n"][: self._cap])
        return ReplaySums(
            keys=keys.astype(np.int64),
            n=a["n"][keys],
            short=a["short"][keys],
            t_analytic=a["a_t"][keys],
            t_mc=a["m_t"][keys],
            var_mc=a["m_v"][keys],
            surv_analytic=a["a_s"][keys],
            surv_mc=a["m_s"][keys],
            offpath=a["a_off"][keys],
        )
