"""Student's t distribution (CDF and quantile) and the Beta quantile, in pure Python.

The default interval's test (:mod:`specreplay.stats.cr2`) reads its t quantiles and p-values
here, and :func:`specreplay.stats.intervals.requests_for_margin` its t quantiles.

The t CDF is the regularized incomplete beta function (Abramowitz & Stegun 26.7.1, 26.5.8),
evaluated by its continued fraction (Lentz's method, as Numerical Recipes §6.4); the quantile is
a bisection of the CDF. The continued fraction is the compiled one of
:mod:`specreplay.stats.tfast` (one implementation for both).
"""

from __future__ import annotations

import math
from functools import lru_cache

from specreplay.stats.tfast import betacf as _betacf

__all__ = ["beta_ppf", "t_cdf", "t_ppf"]


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for 0 ≤ x ≤ 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbt + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def beta_ppf(p: float, a: float, b: float) -> float:
    """Return the p-quantile of Beta(a, b) (bisection of the regularized incomplete beta, 1e-14).

    Examples
    --------
    >>> round(beta_ppf(0.95, 2.0, 19.0), 6)
    0.216106
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), not {p}")
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-14:
        mid = 0.5 * (lo + hi)
        if _betainc(a, b, mid) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def t_cdf(x: float, df: float) -> float:
    """Return P(T ≤ x) for Student's t with ``df`` degrees of freedom.

    Examples
    --------
    >>> round(t_cdf(2.0, 5), 10)
    0.9490302606
    """
    if math.isinf(x):
        return 1.0 if x > 0 else 0.0
    tail = 0.5 * _betainc(0.5 * df, 0.5, df / (df + x * x))
    return 1.0 - tail if x > 0 else tail


@lru_cache(maxsize=65536)
def t_ppf(p: float, df: float) -> float:
    """Return the p-quantile of Student's t with ``df`` degrees of freedom (bisection, 1e-12).

    Examples
    --------
    >>> round(t_ppf(0.975, 19), 6)
    2.093024
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), not {p}")
    if p == 0.5:
        return 0.0
    sign = 1.0 if p > 0.5 else -1.0
    q = p if p > 0.5 else 1.0 - p
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return sign * 0.5 * (lo + hi)
