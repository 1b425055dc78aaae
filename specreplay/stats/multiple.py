"""Multiple-testing adjustment: Holm's step-down procedure, the one implementation.

The law tests (:mod:`specreplay.stats.lawtest`, docs/methods.md#law-tests: every arm × position of a
run) and the paired comparison (:mod:`specreplay.stats.intervals`,
docs/methods.md#holm-and-bonferroni: the cells of one level) adjust their p-values with
:func:`holm`.

This module depends on NumPy only.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["holm"]


def holm(p_values: ArrayLike) -> NDArray[np.float64]:
    """Return Holm's step-down adjusted p-values (Holm 1979), in the input order.

    With the p-values in ascending order p_(1) ≤ … ≤ p_(m) (ties in input order),
    ``p_adj_(i) = max_{j ≤ i} min(1, (m − j + 1)·p_(j))``: monotone in the p-values and capped at 1.
    Rejecting where ``p_adj < α`` controls the family-wise error rate at α.

    Parameters
    ----------
    p_values : float64, (m,)
        Unadjusted p-values in [0, 1]; m may be 0.

    Returns
    -------
    float64, (m,)
        The adjusted p-values.

    Examples
    --------
    >>> holm([0.01, 0.04, 0.03, 0.005]).round(6).tolist()
    [0.03, 0.06, 0.06, 0.02]
    """
    pv = np.asarray(p_values, dtype=np.float64)
    m = pv.shape[0]
    order = np.argsort(pv, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * pv[order])
    out = np.empty(m, dtype=np.float64)
    out[order] = np.maximum.accumulate(scaled)
    return out
