"""Bootstrap intervals, tests and verdicts for paired deltas of R (SPEC §3.4).

Given the bootstrap replicates θ*_1..θ*_B of a statistic θ (Δ = R_b − R_a or Δ/R_a) and its
leave-one-request-out jackknife values, this module computes the percentile interval, the BCa
interval (Efron & Tibshirani 1993, §14.3 and Eq. 15.36; the same construction as
``scipy.stats.bootstrap``: z0 from the mean percentile of θ̂ among the replicates, acceleration
a = Σd³ / (6 (Σd²)^{3/2}) with d = mean(θ_(i)) − θ_(i), linear-interpolated quantiles), bootstrap
p-values, Holm's step-down adjustment and the verdict of SPEC §3.4.

A degenerate replicate distribution (all replicates equal, e.g. two identical runs) gives a
zero-width percentile interval and a null BCa with its reason, and never a warning.
This module depends on numpy and the standard library only (the normal quantile comes from
:class:`statistics.NormalDist`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Final

import numpy as np
from numpy.typing import NDArray

from specreplay.stats.multiple import holm as holm_adjust

__all__ = [
    "BCa",
    "Verdict",
    "bca_interval",
    "holm",
    "percentile_interval",
    "requests_for_margin",
    "tost_p",
    "two_sided_p",
    "verdict",
]

_N01: Final = NormalDist()

EQUIVALENT, DIFFERENT, INCONCLUSIVE = "EQUIVALENT", "DIFFERENT", "INCONCLUSIVE"


@dataclass(frozen=True)
class BCa:
    """A BCa interval, or null bounds with the reason it cannot be computed."""

    lo: float | None
    hi: float | None
    z0: float | None
    acceleration: float | None
    null_reason: str | None = None


def percentile_interval(reps: NDArray[np.float64], level: float) -> tuple[float, float]:
    """Return the percentile interval of the replicates at confidence ``level``.

    Examples
    --------
    >>> [round(x, 9) for x in percentile_interval(np.arange(101.0), 0.9)]
    [5.0, 95.0]
    """
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


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


def two_sided_p(reps: NDArray[np.float64]) -> float:
    """Return the bootstrap two-sided p-value of θ = 0: 2·min(P*(θ ≤ 0), P*(θ ≥ 0)), at most 1.

    Consistent with the percentile interval: p < α iff the (1 − α) interval excludes 0 (up to
    interpolation between replicates).
    """
    b = reps.shape[0]
    le = np.count_nonzero(reps <= 0.0) / b
    ge = np.count_nonzero(reps >= 0.0) / b
    return float(min(1.0, 2.0 * min(le, ge)))


def tost_p(reps: NDArray[np.float64], margin: float) -> float:
    """Return the bootstrap TOST p-value of |θ| ≥ margin: max(P*(θ ≤ −m), P*(θ ≥ m)).

    p < α iff the (1 − 2α) percentile interval lies inside (−m, m).
    """
    b = reps.shape[0]
    return float(max(np.count_nonzero(reps <= -margin) / b, np.count_nonzero(reps >= margin) / b))


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
    reps: NDArray[np.float64],
    margin: float,
    alpha: float = 0.05,
    p_equivalence: float | None = None,
    p_difference: float | None = None,
) -> Verdict:
    """Return the SPEC §3.4 verdict for replicates of θ and a margin.

    EQUIVALENT iff the (1 − 2α) interval lies inside (−m, m) (TOST p < α); otherwise DIFFERENT
    iff the (1 − α) interval excludes 0 (p < α); otherwise INCONCLUSIVE. Adjusted p-values
    (Holm) may be passed in place of the raw ones.
    """
    pe = tost_p(reps, margin) if p_equivalence is None else p_equivalence
    pd = two_sided_p(reps) if p_difference is None else p_difference
    lo90, hi90 = percentile_interval(reps, 1.0 - 2.0 * alpha)
    smallest = max(abs(lo90), abs(hi90))
    if pe < alpha:
        v = EQUIVALENT
    elif pd < alpha:
        v = DIFFERENT
    else:
        v = INCONCLUSIVE
    return Verdict(v, pe, pd, smallest)


def requests_for_margin(
    point: float, se: float, margin: float, n_requests: int, alpha: float = 0.05
) -> int | None:
    """Return the requests needed for the (1 − 2α) interval to fit inside ±margin.

    At the observed per-request variance the half-width scales as 1/√n, so the interval
    |θ̂| ± z_{1−α}·se·√(n/n') fits when n' ≥ n·(z·se / (m − |θ̂|))². None when |θ̂| ≥ m (no
    sample size makes the observed delta equivalent).
    """
    gap = margin - abs(point)
    if gap <= 0.0:
        return None
    if se == 0.0:
        return 1
    z = _N01.inv_cdf(1.0 - alpha)
    return max(1, math.ceil(n_requests * (z * se / gap) ** 2))
