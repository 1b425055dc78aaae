"""The default interval of a cell: CR2, effective df, Hall's transformation (issue 10).

See docs/methods.md#the-default-interval-cr2-effective-df-halls-correction.

Every figure a cell compares is a ratio of sums over the cell's requests (the request is the
unit): R = Σ t_i / Σ n_i of one arm, Δ = R_b − R_a and Δ/R_a = R_b/R_a − 1. For each the module
forms the linearised influence u_i of request i (paired replays, n^a_i = n^b_i = n_i, give
u_i = e_i / X with e_i = d_i − θ̂ x_i, d_i = t^b_i − t^a_i, and x_i = n_i for Δ, x_i = t^a_i for
Δ/R_a; in general u_i is the delta-method influence of the ratio of ratios) and its leverage
h_i = x_i / X, and gives

* the **CR2 variance** (Bell & McCaffrey 2002; Imbens & Kolesár 2016)
  SE² = Σ_i u_i² / (1 − h_i), one term per request (a request's pieces in several context
  buckets are summed before squaring: the request is the cluster);
* **effective degrees of freedom**: the Satterthwaite df of that variance under the plug-in
  working variance ω_i = e_i², ν = (Σ λ)² / Σ λ², λ the eigenvalues of
  Ω^{1/2} Mᵀ A M Ω^{1/2} with M = I − h 1ᵀ the residual maker and A = diag(1/(1 − h_i)) (computed
  in O(n) from the rank-two structure, :func:`effective_df`); ν is small when the residual
  variance sits on a few requests (an effective number of clusters: Carter, Schnepel &
  Steigerwald 2017), and is clipped to [1, n − 1];
* **Hall's (1992) cubic transformation** of T = (θ̂ − θ)/SE, which removes the skewness a
  symmetric t interval ignores (the calibration study: per-request effects are skewed, and the
  misses of a symmetric interval all fall on the long-tail side): g(T) = T + aT² + a²T³/3 + b,
  a = γ̂/(3√N), b = γ̂/(6√N), γ̂ the skewness of the cell's influences (Σ(u − ū)³/N over
  (Σ(u − ū)²/N)^{3/2}), N the cell's requests; g is increasing ((1 + aT)² ≥ 0) with
  g⁻¹(z) = ((1 + 3a(z − b))^{1/3} − 1)/a, computed as 3(z − b)/(c² + c + 1) with
  c = (1 + 3a(z − b))^{1/3} (no division by a), and g(T) is referred to t_ν;
* the (1 − α) interval [θ̂ − g⁻¹(q)·SE, θ̂ − g⁻¹(−q)·SE], q = t_{ν, 1−α/2}, and its inversions:
  with G(x) = F_ν(g(x)), the two-sided p-value of θ = 0 is 2·min(G(θ̂/SE), 1 − G(θ̂/SE)) and the
  TOST p-value of |θ| ≥ m is max(1 − G((θ̂ + m)/SE), G((θ̂ − m)/SE)): p < α exactly when the
  interval excludes 0, TOST p < α exactly when the (1 − 2α) interval lies inside (−m, m).

The variance is not stratified: a pooled cell's requests are one sample even when the bootstrap
resamples within families (conservative when the families' mean residuals differ).

**Degenerate cells.** The interval is a t interval only when at least :data:`MIN_DIFFERING`
requests of the cell differ between the arms (their (n, t) are not identical; for one arm's R,
their t_i ≠ R̂·n_i), so SE > 0. Otherwise (SE = 0 included) the interval is **forced**: it is
widened to hold [−B, B] (for one arm's R, [R̂ − B, R̂ + B]), with k of n requests differing,

    B = d · p_u · n_max / n̄,   p_u = the one-sided Clopper–Pearson upper bound on the share of
                                differing requests at the interval's level (1 − α^{1/n} at k = 0),

d the depth (a differing request moves at most d tokens per round), n_max and n̄ the largest and
the mean x of the cell; for Δ/R_a, B is divided by R̂_a. Such a cell is never DIFFERENT (its
difference p-value is 1) and EQUIVALENT only when its **hull** [−B, B] at 1 − α lies inside the
margin m (issue 16): its equivalence p-value is P(K ≤ k) at the share s* = m·n̄/(d·n_max) (÷ R̂_a
undone on the relative scale) that puts |Δ| at the margin, (1 − s*)^n at k = 0, which is below
α exactly when the hull is inside the margin, and enters Holm in the cell's place. It assumes no
request in the population is longer than n_max. At depth 5, R ≈ 4 and equal rounds, a 0.5%
margin needs about 750 identical requests (s* = 0.004: (1 − s*)^n < 0.05 at n ≥ 748). Where the
depth is unknown B cannot be formed and the forced interval is null (NaN bounds) with the
reason. "Identical inputs" (the zero-width interval, EQUIVALENT) is kept for two arms that are
one computation by construction (an arm against itself), never inferred from equal data.

**Clamp.** Where the depth is known no bound lies outside what the data can reach:
R ∈ [1, d + 1], Δ ∈ [−d_a, d_b], Δ/R_a ∈ [1/(d_a + 1) − 1, d_b]. Where it is unknown, a bound
beyond ±10⁶ makes the interval null (NaN) with the reason.

This module depends on numpy, :mod:`specreplay.stats.tdist` and :mod:`specreplay.stats.tfast`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from specreplay.stats.tdist import beta_ppf, t_cdf, t_ppf
from specreplay.stats.tfast import tost_p_many

__all__ = [
    "HUGE_BOUND",
    "METHOD",
    "MIN_DIFFERING",
    "MIN_REQUESTS",
    "TTest",
    "differing_tail",
    "differing_upper_share",
    "effective_df",
    "paired_tests",
    "ratio_test",
    "skewness",
    "tost_p_values",
]

METHOD: Final = "cr2-eff-hall"
MIN_DIFFERING: Final = 3
"""Fewest differing requests at which a cell's t interval is used: in the calibration study the
default covered ≥ 0.96 in family cells with 3 or 4 requests differing (0.41 with none, without
this rule), and its false-EQUIVALENT excess does not grow as k falls (it comes from skew)."""
MIN_REQUESTS: Final = 50
"""Fewest requests at which a cell's verdict may be EQUIVALENT or DIFFERENT: the smallest
studied size at which the default meets its per-family and pooled coverage targets in every
setting of the calibration study (family cells of 50: 0.9365 ± 0.0039 for ≥ 0.94; of 20:
0.9205 ± 0.0043; pooled cells of 40: 0.929 ± 0.004, of 80: 0.936 ± 0.004)."""
HUGE_BOUND: Final = 1e6
"""Without a known depth, a bound beyond ± this makes the interval null."""


def differing_upper_share(k: int, n: int, level: float) -> float:
    """Return the one-sided upper confidence bound at ``level`` on a share seen k times in n.

    Clopper–Pearson: the ``level`` quantile of Beta(k + 1, n − k); 1 − (1 − level)^{1/n} at k = 0.

    Examples
    --------
    >>> round(differing_upper_share(0, 20, 0.95), 6)
    0.139108
    """
    if k >= n:
        return 1.0
    if k == 0:
        return float(1.0 - (1.0 - level) ** (1.0 / n))
    return beta_ppf(level, k + 1.0, float(n - k))


def differing_tail(k: int, n: int, share: float) -> float:
    """Return P(K ≤ k) for K ~ Binomial(n, ``share``): the hull's equivalence p-value.

    The Clopper–Pearson dual of :func:`differing_upper_share`: the one-sided upper bound at
    1 − α lies below ``share`` exactly when this is below α. At k = 0 it is (1 − share)^n.

    Examples
    --------
    >>> round(differing_tail(0, 20, 0.139108), 4)
    0.05
    """
    if share >= 1.0:
        return 1.0 if k >= n else 0.0
    if share <= 0.0:
        return 1.0
    log_q = math.log1p(-share)
    total = 0.0
    for j in range(min(k, n) + 1):
        total += math.exp(
            math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
            + j * math.log(share) + (n - j) * log_q
        )  # fmt: skip
    return min(total, 1.0)


def effective_df(u: NDArray[np.float64], h: NDArray[np.float64]) -> float:
    """Return the Satterthwaite df of Σ u_i²/(1 − h_i) under the working variance ω_i = u_i².

    With G = A^{1/2} (I − h 1ᵀ) Ω^{1/2}, G = D − w sᵀ (D = diag(a s), w = a h, s = |u|,
    a = (1 − h)^{−1/2}), so G Gᵀ = D² + P with P = W K Wᵀ, W = [q, w], q = a s²,
    K = [[0, −1], [−1, Σ s²]]: ν = tr(GGᵀ)² / tr((GGᵀ)²), each trace in O(n). Clipped to
    [1, n − 1]; 1 when every u is 0.
    """
    n = u.shape[0]
    s2 = u * u
    a = 1.0 / np.sqrt(1.0 - h)
    d2 = a * a * s2  # δ²
    q = a * s2
    w = a * h
    c = float(s2.sum())
    qw = float(q @ w)
    tr1 = float(d2.sum()) - 2.0 * qw + c * float(w @ w)
    gram = np.array([[float(q @ q), qw], [qw, float(w @ w)]])
    k = np.array([[0.0, -1.0], [-1.0, c]])
    kg = k @ gram
    tr2 = (
        float((d2 * d2).sum())
        + 2.0 * float((d2 * (-2.0 * q * w + c * w * w)).sum())
        + float(np.trace(kg @ kg))
    )
    if not tr2 > 0.0 or not math.isfinite(tr1):
        return 1.0
    return float(min(max(tr1 * tr1 / tr2, 1.0), max(n - 1.0, 1.0)))


@dataclass(frozen=True)
class TTest:
    """One statistic of a cell with its CR2 t interval, or the forced interval of a degenerate cell.

    Attributes
    ----------
    theta : float
        The point estimate.
    se : float
        CR2 standard error (0 for identical inputs).
    df : float
        Effective degrees of freedom of the t interval.
    limits : tuple of float
        What the data can reach (±inf where the depth is unknown).
    n_requests, n_differing : int
        Requests of the cell, and those that differ between the arms (for one arm's R: whose
        ratio differs from R̂).
    bound_scale : float or None
        For a forced interval, d·n_max/n̄ (divided by R̂_a for Δ/R_a): B = p_u·bound_scale; None
        where the depth is unknown.
    center : float
        The centre of the forced interval's [−B, B] (0 for Δ, R̂ for one arm's R).
    skew : float
        γ̂, the skewness of the cell's influences (Hall's transformation; 0: a t interval).
    forced : str or None
        Why the interval is forced (too few differing requests): the verdict is INCONCLUSIVE.
    identical : bool
        The two arms are one computation by construction (an arm against itself): the
        zero-width interval [θ̂, θ̂] and the verdict EQUIVALENT ("identical inputs").
    """

    theta: float
    se: float
    df: float
    limits: tuple[float, float]
    n_requests: int
    n_differing: int
    bound_scale: float | None = None
    center: float = 0.0
    skew: float = 0.0
    forced: str | None = None
    identical: bool = False

    @property
    def hall(self) -> tuple[float, float]:
        """Hall's (a, b) = (γ̂/(3√N), γ̂/(6√N))."""
        root = math.sqrt(max(self.n_requests, 1))
        return self.skew / (3.0 * root), self.skew / (6.0 * root)

    def _g(self, t: float) -> float:
        a, b = self.hall
        return t + a * t * t + a * a * t * t * t / 3.0 + b

    def _g_inverse(self, z: float) -> float:
        """g⁻¹(z) = (c − 1)/a = 3(z − b)/(c² + c + 1), c = (1 + 3a(z − b))^{1/3}.

        The second form (c³ − 1 = 3a(z − b)) never divides by a: exact as a → 0, where the first
        loses every digit (a skewness of 1e-16 from rounding must give the t interval).
        """
        a, b = self.hall
        c = math.cbrt(1.0 + 3.0 * a * (z - b))
        return 3.0 * (z - b) / (c * c + c + 1.0)

    def _cdf(self, x: float) -> float:
        """G(x) = F_ν(g(x)): the probability of T ≤ x."""
        return t_cdf(self._g(x), self.df) if math.isfinite(x) else (1.0 if x > 0 else 0.0)

    def interval(self, level: float) -> tuple[float, float]:
        """Return the (``level``) interval, clamped; NaN bounds when it cannot be formed."""
        if self.identical:
            return self.theta, self.theta
        lo, hi = -math.inf, math.inf
        if self.se > 0.0:
            q = t_ppf(1.0 - (1.0 - level) / 2.0, self.df)
            lo = self.theta - self._g_inverse(q) * self.se
            hi = self.theta - self._g_inverse(-q) * self.se
        if self.forced is not None:
            if self.bound_scale is None:
                return math.nan, math.nan
            b = differing_upper_share(self.n_differing, self.n_requests, level) * self.bound_scale
            lo = min(lo, self.center - b) if self.se > 0.0 else self.center - b
            hi = max(hi, self.center + b) if self.se > 0.0 else self.center + b
        lo, hi = max(lo, self.limits[0]), min(hi, self.limits[1])
        if not (abs(lo) <= HUGE_BOUND and abs(hi) <= HUGE_BOUND) and math.isinf(self.limits[0]):
            return math.nan, math.nan
        return lo, hi

    def hull(self, level: float) -> tuple[float, float]:
        """Return a forced interval's hull [centre − B, centre + B], B at one-sided ``level``."""
        if self.bound_scale is None:
            return math.nan, math.nan
        b = differing_upper_share(self.n_differing, self.n_requests, level) * self.bound_scale
        return max(self.center - b, self.limits[0]), min(self.center + b, self.limits[1])

    def hull_p(self, margin: float) -> float:
        """Return P(K ≤ k | s*), s* = ``margin``/``bound_scale`` (1 without a bound)."""
        if self.bound_scale is None or not self.bound_scale > 0.0:
            return 1.0
        return differing_tail(self.n_differing, self.n_requests, margin / self.bound_scale)

    def p_difference(self) -> float:
        """Return the two-sided p-value of θ = 0 (1 for a forced interval)."""
        if self.identical:
            return 1.0 if self.theta == 0.0 else 0.0
        if self.forced is not None:
            return 1.0
        g = self._cdf(self.theta / self.se)
        return min(1.0, 2.0 * min(g, 1.0 - g))

    def p_equivalence(self, margin: float) -> float:
        """Return the TOST p-value of |θ| ≥ ``margin``; a forced interval's is its hull's.

        A forced interval (fewer than :data:`MIN_DIFFERING` requests differ) is EQUIVALENT only
        when its conservative hull [−B, B] lies inside the margin: B = p_u·``bound_scale`` < m
        exactly when P(K ≤ k | share s* = m / ``bound_scale``) < α (:func:`differing_tail`;
        1 where the depth is unknown and no hull can be formed).
        """
        if self.identical:
            return 0.0 if abs(self.theta) < margin else 1.0
        if self.forced is not None:
            return self.hull_p(margin)
        upper = 1.0 - self._cdf((self.theta + margin) / self.se)
        lower = self._cdf((self.theta - margin) / self.se)
        return float(max(upper, lower))


def tost_p_values(tests: Sequence[TTest]) -> Callable[[float], list[float]]:
    """Return m ↦ every test's :meth:`TTest.p_equivalence` at m, computed at once (compiled)."""
    theta = np.array([t.theta for t in tests], np.float64)
    se = np.array([t.se if t.se > 0.0 else 1.0 for t in tests], np.float64)
    df = np.array([t.df for t in tests], np.float64)
    a = np.array([t.hall[0] for t in tests], np.float64)
    b = np.array([t.hall[1] for t in tests], np.float64)
    fixed = np.full(len(tests), -1.0)
    identical = [i for i, t in enumerate(tests) if t.identical]
    hulls = [i for i, t in enumerate(tests) if t.forced is not None and not t.identical]

    def at(m: float) -> list[float]:
        f = fixed.copy()
        for i in identical:
            f[i] = 0.0 if abs(theta[i]) < m else 1.0
        for i in hulls:
            f[i] = tests[i].hull_p(m)
        out: list[float] = tost_p_many(theta, se, df, a, b, f, m).tolist()
        return out

    return at


def skewness(u: NDArray[np.float64]) -> float:
    """Return γ̂ = (Σ(u − ū)³/N) / (Σ(u − ū)²/N)^{3/2} (0 when every u is equal)."""
    c = u - u.mean()
    c2 = float((c * c).mean())
    if c2 <= 0.0:
        return 0.0
    return float((c * c * c).mean()) / float(c2**1.5)


def _cr2(u: NDArray[np.float64], h: NDArray[np.float64]) -> tuple[float, float]:
    """Return (SE, effective df) of influences ``u`` with leverages ``h``."""
    h = np.minimum(h, 1.0 - 1e-12)
    var = float((u * u / (1.0 - h)).sum())
    return math.sqrt(var), effective_df(u, h)


def _forced_reason(k: int, se: float) -> str | None:
    if se == 0.0:
        return (
            f"zero standard error ({k} requests differ): a conservative interval from the "
            "share of requests that could differ; EQUIVALENT only when it lies inside the "
            "margin, else INCONCLUSIVE"
        )
    if k < MIN_DIFFERING:
        return (
            f"{k} {'request differs' if k == 1 else 'requests differ'} between the arms "
            f"< {MIN_DIFFERING} (calibration study): a conservative interval; EQUIVALENT only "
            "when it lies inside the margin, else INCONCLUSIVE"
        )
    return None


def _scale(depth: int | None, x: NDArray[np.float64], divide: float = 1.0) -> float | None:
    if depth is None or x.shape[0] == 0 or float(x.mean()) <= 0.0:
        return None
    return depth * float(x.max()) / float(x.mean()) / divide


def paired_tests(
    sums: NDArray[np.float64],
    *,
    depths: tuple[int, int] | None = None,
    identical: bool = False,
) -> tuple[TTest, TTest]:
    """Return the tests of Δ = R_b − R_a and Δ/R_a of one cell from its requests' totals.

    Parameters
    ----------
    sums : float64, (n, 4)
        Per request of the cell, its (n_a, t_a, n_b, t_b) over its pieces in the cell; every
        request has rounds of both arms.
    depths : (int, int), optional
        Depths of arms a and b (the clamp and the forced interval's bound); None when unknown.
    identical : bool
        The arms are one computation by construction (every request identical).
    """
    na, ta, nb, tb = (sums[:, j].astype(np.float64) for j in range(4))
    n_a, t_a, n_b, t_b = float(na.sum()), float(ta.sum()), float(nb.sum()), float(tb.sum())
    ra, rb = t_a / n_a, t_b / n_b
    n = sums.shape[0]
    k = int(np.count_nonzero((na != nb) | (ta != tb)))
    ea, eb = ta - ra * na, tb - rb * nb
    paired = bool(np.array_equal(na, nb))
    if paired:  # exact residuals: nothing cancels however small the difference
        d = tb - ta
        u_d = (d - (rb - ra) * na) / n_a
        u_r = (d - (rb / ra - 1.0) * ta) / t_a
    else:
        u_d = eb / n_b - ea / n_a
        u_r = (rb / ra) * (eb / t_b - ea / t_a)
    h_d = (na + nb) / (n_a + n_b)
    h_r = ta / t_a
    if depths is not None:
        d_a, d_b = depths
        lim_d, lim_r = (-float(d_a), float(d_b)), (1.0 / (d_a + 1.0) - 1.0, float(d_b))
        depth: int | None = max(d_a, d_b)
    else:
        lim_d = lim_r = (-math.inf, math.inf)
        depth = None
    out = []
    for theta, u, h, lim, div in (
        (rb - ra, u_d, h_d, lim_d, 1.0),
        (rb / ra - 1.0, u_r, h_r, lim_r, ra),
    ):
        if identical:
            out.append(TTest(theta, 0.0, max(n - 1.0, 1.0), lim, n, 0, identical=True))
            continue
        se, df = _cr2(u, h) if k > 0 else (0.0, 1.0)
        out.append(
            TTest(
                theta,
                se,
                df,
                lim,
                n,
                k,
                bound_scale=_scale(depth, 0.5 * (na + nb), div),
                skew=skewness(u) if se > 0.0 else 0.0,
                forced=_forced_reason(k, se),
            )
        )
    return out[0], out[1]


def ratio_test(n: NDArray[np.float64], t: NDArray[np.float64], *, depth: int | None) -> TTest:
    """Return the test of one arm's R = Σt/Σn over a cell's requests (its interval only)."""
    total_n = float(n.sum())
    r = float(t.sum()) / total_n
    e = t - r * n
    tol = 1e-12 * np.maximum(n, 1.0) * max(abs(r), 1.0)
    k = int(np.count_nonzero(np.abs(e) > tol))
    se, df = _cr2(e / total_n, n / total_n) if k > 0 else (0.0, 1.0)
    lim = (1.0, depth + 1.0) if depth is not None else (-math.inf, math.inf)
    return TTest(
        r,
        se,
        df,
        lim,
        int(n.shape[0]),
        k,
        bound_scale=_scale(depth, n),
        center=r,
        skew=skewness(e) if se > 0.0 else 0.0,
        forced=_forced_reason(k, se),
    )
