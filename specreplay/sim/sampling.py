"""CDF inversion shared by every sampler, so replay, toy model and law tests agree.

See docs/methods.md#the-monte-carlo-estimator.

Float laws draw the first candidate whose cumulative sum exceeds the uniform u (the last positive
one when rounding leaves the total below u); dyadic laws draw k = ⌊u·2^53⌋ >> (53 − N) against
the integer cumulative sums. One implementation serves the replay kernels, the toy model's live
rounds (ground truth for counterfactual replays) and the law tests, so a draw never depends on
which of them made it.
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64
from numpy.typing import NDArray

from specreplay import use_numba_cache

__all__ = ["draw_dyadic", "draw_float"]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

_TWO53 = 9007199254740992.0


@njit(inline="always", cache=True)
def draw_float(q: NDArray[np.float64], a: int, b: int, u: float) -> int:
    """Return the first index in [a, b) whose cumulative q exceeds u (last positive if none).

    Returns −1 when q has no positive entry in [a, b).
    """
    c = 0.0
    last = -1
    for i in range(a, b):
        qi = q[i]
        if qi > 0.0:
            c += qi
            last = i
            if u < c:
                return i
    return last


@njit(inline="always", cache=True)
def draw_dyadic(m: NDArray[np.int64], a: int, b: int, u: float, bits: int) -> int:
    """Return the first index in [a, b) whose integer cumulative m exceeds ⌊u·2^53⌋ >> (53 − N)."""
    k = np.int64(np.uint64(u * _TWO53) >> uint64(53 - bits))
    c = np.int64(0)
    for i in range(a, b):
        c += m[i]
        if c > k:
            return i
    return b - 1
