"""Sums in a fixed order that the compiler can still vectorise: eight lanes, one fixed tree.

Without fast-math reassociation LLVM must add a loop's terms one after the other, so a sum over
a row's candidates waits one add latency per term and keeps the loop around it from vectorising;
with reassociation it may reorder them however it likes, and a freshly compiled kernel summed in
another order than the same kernel loaded from Numba's cache (``tests/test_jit_determinism.py``).
Here the order is written out instead: the terms go round-robin into eight independent
accumulators, eight dependency chains the core runs side by side (LLVM may also pack them into
SIMD registers: nothing is reassociated, the lanes are independent already), and the lanes are
combined in one fixed tree. The result is a function of the terms alone, whatever the compiler,
the vector width, the thread or the process.

Terms
-----
lane order
    Σ_{i<n} x_i = tree(s_0, …, s_7), where lane l sums the x_i with i ≡ l (mod 8) in increasing
    i from 0.0, and tree(s) = ((s_0 + s_4) + (s_2 + s_6)) + ((s_1 + s_5) + (s_3 + s_7)): the two
    4-wide halves added lane by lane, then the 4-vector folded in half twice (the cheapest
    horizontal sum on AVX2). :func:`lane_sum_reference` spells it out in Python floats.

Kernels that fuse the terms with other work (``specreplay/replay/estimators/analytic.py``)
write the terms into row scratch first (an element-wise loop, which vectorises on its own) and
sum the scratch here. This module depends on NumPy and Numba only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit
from numpy.typing import NDArray

from specreplay import use_numba_cache

__all__ = ["LANES", "lane_max", "lane_sum", "lane_sum_reference", "lane_tree"]

use_numba_cache()  # before the kernels below are decorated (Numba picks their cache dir then)

LANES = 8

# no-NaN and no-signed-zero only: never "reassoc" (module docstring), and no "contract" (the
# sums hold no products to fuse)
_FM = {"nsz", "nnan"}


@njit(inline="always", fastmath=_FM, cache=True)
def lane_tree(
    s0: float, s1: float, s2: float, s3: float, s4: float, s5: float, s6: float, s7: float
) -> float:
    """Combine eight lane sums in the module's fixed tree."""
    return ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7))


@njit(inline="always", fastmath=_FM, cache=True)
def lane_sum(x: NDArray[np.float64], n: int) -> float:
    """Return Σ x[:n] in lane order (module docstring); ``x`` a slice indexed from 0."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    n8 = n - n % LANES
    for i in range(0, n8, LANES):
        s0 += x[i]
        s1 += x[i + 1]
        s2 += x[i + 2]
        s3 += x[i + 3]
        s4 += x[i + 4]
        s5 += x[i + 5]
        s6 += x[i + 6]
        s7 += x[i + 7]
    k = n - n8  # the last, partial round: lane l takes x[n8 + l] for l < k
    if k > 0:
        s0 += x[n8]
    if k > 1:
        s1 += x[n8 + 1]
    if k > 2:
        s2 += x[n8 + 2]
    if k > 3:
        s3 += x[n8 + 3]
    if k > 4:
        s4 += x[n8 + 4]
    if k > 5:
        s5 += x[n8 + 5]
    if k > 6:
        s6 += x[n8 + 6]
    return lane_tree(s0, s1, s2, s3, s4, s5, s6, s7)


@njit(inline="always", fastmath=_FM, cache=True)
def lane_max(x: NDArray[np.float64], n: int, init: float) -> float:
    """Return max(init, x[:n]) over eight lanes (exact in any order: the lanes are for speed).

    LLVM does not vectorise a floating-point maximum over a loop even with no-NaN fast-math, so
    a plain loop waits one compare per element; eight lanes run side by side. No NaN in ``x``.
    """
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = init
    n8 = n - n % LANES
    for i in range(0, n8, LANES):
        m0 = max(m0, x[i])
        m1 = max(m1, x[i + 1])
        m2 = max(m2, x[i + 2])
        m3 = max(m3, x[i + 3])
        m4 = max(m4, x[i + 4])
        m5 = max(m5, x[i + 5])
        m6 = max(m6, x[i + 6])
        m7 = max(m7, x[i + 7])
    for i in range(n8, n):
        m0 = max(m0, x[i])
    return max(max(max(m0, m4), max(m2, m6)), max(max(m1, m5), max(m3, m7)))


def lane_sum_reference(x: Sequence[float] | NDArray[np.float64]) -> float:
    """:func:`lane_sum` step by step in Python floats (the same IEEE operations, the same bits).

    Examples
    --------
    >>> lane_sum_reference([1e16, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1e16])
    7.0
    """
    s = [0.0] * LANES
    for i, v in enumerate(x):
        s[i % LANES] += float(v)
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]))
