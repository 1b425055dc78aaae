"""Bootstrap intervals, tests and verdicts for paired deltas of R.

See docs/methods.md#the-verdict-rule.

Given the bootstrap replicates θ*_1..θ*_B of a statistic θ (Δ = R_b − R_a or Δ/R_a) and its
leave-one-request-out jackknife values, this module computes the BCa interval (Efron & Tibshirani
1993, §14.3 and Eq. 15.36; the same construction as ``scipy.stats.bootstrap``: z0 from the mean
percentile of θ̂ among the replicates, acceleration a = Σd³ / (6 (Σd²)^{3/2}) with d = mean(θ_(i)) −
θ_(i), linear-interpolated quantiles), Holm's step-down adjustment, and, from the default interval's
test (:class:`IntervalTest`: the ``cr2-eff-hall`` :class:`specreplay.stats.cr2.TTest`, chosen by the
calibration study, docs/calibration.md#calibration-of-the-intervals), the verdict of
docs/methods.md#the-verdict-rule, the smallest Holm-adjusted equivalent margin and the TOST sample
size.

A degenerate replicate distribution (all replicates equal, e.g. two identical runs) gives a
null BCa with its reason, and never a warning.
This module depends on numpy, the standard library (the normal quantile comes from
:class:`statistics.NormalDist`) and the t distribution of :mod:`specreplay.stats.tdist`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Final, Protocol

import numpy as np
from numpy.typing import NDArray

from specreplay.stats.cr2 import METHOD
from specreplay.stats.multiple import holm as holm_adjust
from specreplay.stats.tdist import t_ppf

__all__ = [
    "DEFAULT_METHOD",
    "BCa",
    "IntervalTest",
    "SampleSize",
    "Verdict",
    "bca_interval",
    "holm",
    "holm_smallest_margins",
    "requests_for_margin",
    "verdict",
]

_N01: Final = NormalDist()

EQUIVALENT, DIFFERENT, INCONCLUSIVE = "EQUIVALENT", "DIFFERENT", "INCONCLUSIVE"

DEFAULT_METHOD: Final = METHOD
"""The ``method`` of the default interval: ``cr2-eff-hall``
(docs/calibration.md#calibration-of-the-intervals)."""


class IntervalTest(Protocol):
    """A statistic with an interval and the p-values that invert it.

    The default :class:`specreplay.stats.cr2.TTest`, or
    :class:`specreplay.stats.studentized.Studentized`.
    """

    @property
    def theta(self) -> float:
        """The point estimate."""

    @property
    def se(self) -> float:
        """Its standard error."""

    def interval(self, level: float) -> tuple[float, float]:
        """Return the interval at confidence ``level``."""

    def p_difference(self) -> float:
        """Return the two-sided p-value of θ = 0."""

    def p_equivalence(self, margin: float) -> float:
        """Return the TOST p-value of |θ| ≥ ``margin``."""


@dataclass(frozen=True)
class BCa:
    """A BCa interval, or null bounds with the reason it cannot be computed."""

    lo: float | None
    hi: float | None
    z0: float | None
    acceleration: float | None
    null_reason: str | None = None


def bca_interval(
    reps: NDArray[np.float64], theta_hat: float, jack: NDArray[np.float64], level: float
) -> BCa:
    """Return the BCa interval from replicates, the point estimate and jackknife values.

    Parameters
    ----------
    reps : float64, (B,)
        Bootstrap replicates of the statistic.
    theta_hat : float
        The statistic on the observed data.
    jack : float64, (n,)
        Leave-one-request-out values of the statistic (O(n) from leave-one-out sums).
    level : float
        Confidence level, e.g. 0.95.
    """
    b = reps.shape[0]
    if b == 0 or not np.all(np.isfinite(reps)):
        return BCa(None, None, None, None, "no finite bootstrap replicates")
    if float(reps.min()) == float(reps.max()):
        return BCa(
            None,
            None,
            None,
            None,
            "degenerate bootstrap distribution (every replicate equal): BCa undefined",
        )
    frac = (np.count_nonzero(reps < theta_hat) + np.count_nonzero(reps <= theta_hat)) / (2.0 * b)
    if frac <= 0.0 or frac >= 1.0:
        return BCa(None, None, None, None, "point estimate outside the replicates: z0 infinite")
    z0 = _N01.inv_cdf(frac)
    d = jack.mean() - jack
    den = float((d**2).sum())
    if den == 0.0 or not math.isfinite(den):
        return BCa(None, None, z0, None, "jackknife values all equal: acceleration undefined")
    a = float((d**3).sum()) / (6.0 * den**1.5)
    alpha = (1.0 - level) / 2.0
    bounds = []
    for z in (_N01.inv_cdf(alpha), _N01.inv_cdf(1.0 - alpha)):
        num = z0 + z
        denom = 1.0 - a * num
        if denom <= 0.0:
            return BCa(None, None, z0, a, "acceleration too large for this level")
        bounds.append(_N01.cdf(z0 + num / denom))
    lo, hi = np.quantile(reps, bounds)
    return BCa(float(lo), float(hi), z0, a)


def holm(p: list[float]) -> list[float]:
    """Return Holm's adjusted p-values (:func:`specreplay.stats.multiple.holm`) as floats.

    Each is rounded to 15 decimals so that exact decimal products print as such in results.json
    (3 × 0.01 gives 0.03, not 0.030000000000000002); the bootstrap p-values adjusted here are
    multiples of 1/B, so the rounding moves none of them by more than 5e-16.

    Examples
    --------
    >>> holm([0.01, 0.04, 0.03])
    [0.03, 0.06, 0.06]
    """
    return [round(float(x), 15) for x in holm_adjust(p)]


@dataclass(frozen=True)
class Verdict:
    """The verdict of one delta and the figures behind it."""

    verdict: str
    p_equivalence: float
    p_difference: float
    smallest_equivalent_margin: float


def verdict(
    test: IntervalTest,
    margin: float,
    alpha: float = 0.05,
    p_equivalence: float | None = None,
    p_difference: float | None = None,
) -> Verdict:
    """Return the verdict of one delta from its default interval's test.

    See docs/methods.md#the-verdict-rule.

    EQUIVALENT iff the (1 − 2α) interval lies inside (−m, m) (TOST p < α); otherwise DIFFERENT
    iff the (1 − α) interval excludes 0 (p < α); otherwise INCONCLUSIVE. Adjusted p-values
    (Holm) may be passed in place of the raw ones; the smallest equivalent margin returned here
    is the unadjusted one (:func:`holm_smallest_margins` gives the adjusted one).
    """
    pe = test.p_equivalence(margin) if p_equivalence is None else p_equivalence
    pd = test.p_difference() if p_difference is None else p_difference
    lo90, hi90 = test.interval(1.0 - 2.0 * alpha)
    smallest = max(abs(lo90), abs(hi90))
    if pe < alpha:
        v = EQUIVALENT
    elif pd < alpha:
        v = DIFFERENT
    else:
        v = INCONCLUSIVE
    return Verdict(v, pe, pd, smallest)


def holm_smallest_margins(
    tests: Sequence[IntervalTest],
    alpha: float = 0.05,
    p_equivalence_all: Callable[[float], Sequence[float]] | None = None,
) -> list[float | None]:
    """Return, per delta of one Holm family, the smallest margin its verdict would be EQUIVALENT at.

    With one margin m for the whole family (as ``--margin`` is), every TOST p-value is
    non-increasing in m and Holm's adjusted p-values are non-decreasing in each raw one, so the
    adjusted p of delta j is non-increasing in m: the smallest m with ``p_adj_j(m) < α`` is
    found by bisection (to 1e-9 relative). It lies, up to one replicate spacing (the p-values
    count replicates, the interval interpolates between them), between the unadjusted figure
    (the (1 − 2α) interval's largest |bound|) and the Bonferroni one (the (1 − 2α/k) interval's,
    k deltas in the family). None for a delta that no margin makes EQUIVALENT (a cell forced
    INCONCLUSIVE: its p-values are 1). ``p_equivalence_all(m)``, when given, returns every test's
    TOST p-value at m at once (the same values, computed faster).
    """
    every = p_equivalence_all or (lambda m: [t.p_equivalence(m) for t in tests])
    k = len(tests)
    out: list[float | None] = []
    for j in range(k):
        if tests[j].p_equivalence(math.inf) >= alpha:
            out.append(None)
            continue
        lo = max(abs(x) for x in tests[j].interval(1.0 - 2.0 * alpha))
        hi = max(abs(x) for x in tests[j].interval(1.0 - 2.0 * alpha / k))
        lo, hi = lo * (1 - 1e-12), hi * (1 + 1e-12) + 1e-300

        def adj(m: float, j: int = j) -> float:
            # holm(...)[j] without rounding the family's other k − 1 values (the same figure)
            return round(float(holm_adjust(list(every(m)))[j]), 15)

        if adj(hi) >= alpha:  # replicate ties at the bound: widen until EQUIVALENT
            while adj(hi) >= alpha and hi < 1e300:
                hi *= 2.0
        # bisection to 1e-9 relative (a degenerate family, all replicates 0, stops at ~1e-300)
        for _ in range(200):
            if hi - lo <= 1e-9 * hi:
                break
            mid = 0.5 * (lo + hi)
            if adj(mid) < alpha:
                hi = mid
            else:
                lo = mid
        out.append(hi)
    return out


@dataclass(frozen=True)
class SampleSize:
    """Requests for the EQUIVALENT verdict with the stated power, or None and the reason."""

    requests: int | None
    null_reason: str | None = None


def requests_for_margin(
    se: float,
    margin: float,
    n_requests: int,
    alpha: float = 0.05,
    power: float = 0.8,
    df: float | None = None,
) -> SampleSize:
    """Return the requests giving the EQUIVALENT verdict with ``power`` if the true θ were 0.

    A stated power calculation for the TOST (Chow, Shao & Wang 2008, *Sample Size Calculations
    in Clinical Research*, §3.2.3): at the observed per-request SD s = se·√n and a true θ = 0,
    the TOST at level α rejects both one-sided nulls with probability ≈ 2Φ(m√n'/s − q) − 1,
    q the one-sided (1 − α) quantile of the default interval, t_{ν'} with ν' = ν·n'/n (the
    effective degrees of freedom ``df`` of the cell's n requests scale with the requests; clipped
    to [1, n' − 1]; without ``df``, n' − 1); so n' = (s (q + z_{(1+power)/2}) / m)², iterated to
    a fixed point in q. ``alpha`` is the test level the verdict uses (α/k for Holm's first step
    of k deltas).
    """
    if not math.isfinite(se) or margin <= 0.0:
        return SampleSize(None, "no finite standard error")
    if se == 0.0:
        return SampleSize(None, "zero standard error: the verdict does not depend on n")
    sd = se * math.sqrt(n_requests)
    zb = _N01.inv_cdf(0.5 + power / 2.0)
    z = _N01.inv_cdf(1.0 - alpha)
    need = max(2, math.ceil((sd * (z + zb) / margin) ** 2))
    for _ in range(50):
        nu = need - 1.0 if df is None else min(max(df * need / n_requests, 1.0), need - 1.0)
        q = t_ppf(1.0 - alpha, nu)
        nxt = max(2, math.ceil((sd * (q + zb) / margin) ** 2))
        if nxt == need:
            break
        need = nxt
    return SampleSize(need)
