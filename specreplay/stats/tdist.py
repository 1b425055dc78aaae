"""Student's t distribution (CDF and quantile) and the expanded-percentile tail map (SPEC §3.4).

The default interval of the paired bootstrap is Hesterberg's expanded percentile interval
(Hesterberg 2015, "What teachers should know about the bootstrap", *The American Statistician*
69(4), §4.3): with n requests in the cell, a tail of probability α of the interval is read at
the replicate quantile

    α' = g_n(α) = Φ(√(n / (n − 1)) · t_{n−1}⁻¹(α)),

which widens the percentile interval by the factor a t-interval has over a z-interval and undoes
the (n − 1)/n narrowness of the bootstrap variance. ``g_n`` is increasing, so a test inverts it:
a replicate tail fraction p* gives the tail p-value g_n⁻¹(p*) = t_{n−1}(Φ⁻¹(p*) / √(n/(n−1))).

The t CDF is the regularized incomplete beta function (Abramowitz & Stegun 26.7.1, 26.5.8),
evaluated by its continued fraction (Lentz's method, as Numerical Recipes §6.4); the quantile is
a bisection of the CDF. The continued fraction is the compiled one of
:mod:`specreplay.stats.tfast` (one implementation for both).
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist
from typing import Final

from specreplay.stats.tfast import betacf as _betacf

__all__ = ["beta_ppf", "expanded_tail", "t_cdf", "t_ppf", "tail_p_value"]

_N01: Final = NormalDist()


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


def expanded_tail(alpha: float, n: int) -> float:
    """Return g_n(α) = Φ(√(n/(n−1))·t_{n−1}⁻¹(α)): the replicate tail read for a tail α.

    ``n < 2`` (no degrees of freedom) returns α unchanged.

    Examples
    --------
    >>> round(expanded_tail(0.025, 20), 5)
    0.01588
    """
    if n < 2 or alpha <= 0.0 or alpha >= 1.0:
        return alpha
    return _N01.cdf(math.sqrt(n / (n - 1)) * t_ppf(alpha, n - 1))


def tail_p_value(frac: float, n: int) -> float:
    """Return g_n⁻¹(p*): the one-sided p-value of a replicate tail fraction ``frac``.

    The inverse of :func:`expanded_tail`: ``tail_p_value(expanded_tail(a, n), n) == a``.

    Examples
    --------
    >>> round(tail_p_value(expanded_tail(0.05, 20), 20), 12)
    0.05
    """
    if n < 2 or frac <= 0.0 or frac >= 1.0:
        return frac
    return t_cdf(_N01.inv_cdf(frac) * math.sqrt((n - 1) / n), n - 1)
