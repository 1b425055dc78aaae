"""The sign-flip randomisation test of a small cell (issue 16, item 3).

See docs/methods.md#small-cells-the-sign-flip-test and docs/calibration.md#small-cells.

Below :data:`~specreplay.stats.cr2.MIN_REQUESTS` requests the CR2 t interval alone may not give a
verdict (its false-DIFFERENT rate reaches 8–10% in the study's skewed settings). A cell there may
still be DIFFERENT where this test rejects Δ = 0 *and* the CR2 interval excludes 0 (the study,
``bench/smallcells.py``, measured the pair; :mod:`specreplay.stats.compare` forms the hull).

The test. A cell's figure is a ratio of sums θ = Σ y_i / Σ x_i over its requests: paired arms
(n_ai = n_bi) give y_i = d_i = t_bi − t_ai with x_i = n_i for Δ and x_i = t_ai for Δ/R_a; other
pairs give y_i = t_bi/N_b − t_ai/N_a with x_i = (n_ai + n_bi)/(N_a + N_b) for Δ and t_ai/N_a
for Δ/R_a (Σ y/Σ x is then R_b − R_a and R_b/R_a − 1). Under H0: θ = θ₀ the residuals
e_i = y_i − θ₀ x_i are taken to be symmetric about 0 (a null stronger than θ = θ₀; for a mean
the test is also valid without symmetry as n grows: the randomisation variance Σ e_i²
estimates the sampling one). The statistic Σ e_i is compared with Σ s_i e_i over sign vectors s
(every one of the 2^n at n ≤ :data:`EXHAUSTIVE_MAX`, else :data:`N_FLIPS` drawn with a fixed
seed: a cell's figures depend only on its data). Flipping the requests of a set S changes the
statistic by −2 Σ_S e_i, so a flip is at least as large as the observed one exactly when
θ₀ ≥ θ_S = Σ_S y / Σ_S x: the one-sided p-values are

    p₊(θ₀) = (1 + #{S : θ_S ≤ θ₀}) / (B + 1),   p₋(θ₀) = (1 + #{S : θ_S ≥ θ₀}) / (B + 1),

the two-sided p-value is min(1, 2·min(p₊, p₋)), and the (1 − α) interval is the set of θ₀ that
neither one-sided test rejects at α/2: [θ_(k+1), θ_(B−k)] in the order of the θ_S with
k = ⌈(B + 1)α/2⌉ − 2 (Hartigan's 1969 "typical values"). 0 lies outside that interval exactly
when the two-sided p-value is below α. A set with Σ_S x = 0 has no θ_S: it counts on the side
its Σ_S y allows for every θ₀ (±∞), and a |Σ_S y| within 1e-12 of the cell's Σ|y| is a tie
(0: counted on both sides: conservative). With integer token counts (paired arms at θ₀ = 0)
every sum is exact.

The Monte Carlo error of a drawn p-value is √(p(1 − p)/B): ±0.0022 at p = 0.05.

This module depends on numpy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from specreplay.stats.cr2 import HUGE_BOUND, TTest

__all__ = [
    "EXHAUSTIVE_MAX",
    "FLIP_SEED",
    "METHOD",
    "N_FLIPS",
    "SMALL_CELL_MIN",
    "SMALL_METHOD",
    "SignFlip",
    "SmallCellTest",
    "sign_flip_tests",
]

METHOD: Final = "sign-flip"
SMALL_CELL_MIN: Final = 7
"""Fewest requests at which the sign-flip test can reject at α/2 = 0.025: its smallest two-sided
p-value is 2/2^n (0.0156 at 7 requests, 0.031 at 6). A smaller cell keeps the CR2 interval and is
INCONCLUSIVE by rule: no test could decide it."""
SMALL_METHOD: Final = "cr2-eff-hall+sign-flip"
"""The method of a small cell's delta: the hull of the CR2 and sign-flip intervals at 1 − α/2."""
EXHAUSTIVE_MAX: Final = 12
"""At most this many requests: every sign vector (2^n − 1 flips besides the identity)."""
N_FLIPS: Final = 9_999
"""Flips drawn above :data:`EXHAUSTIVE_MAX` requests ((B + 1)·α/2 = 250 at α = 0.05)."""
FLIP_SEED: Final = 20_261_207
"""The fixed seed of the drawn flips (with the cell's size)."""
_TIE: Final = 1e-12


def _subsets(n: int) -> NDArray[np.float64]:
    """Return the flipped sets as 0/1 rows (B, n): every non-empty one, or :data:`N_FLIPS` drawn."""
    if n <= EXHAUSTIVE_MAX:
        codes = np.arange(1, 2**n, dtype=np.int64)
        return ((codes[:, None] >> np.arange(n)[None, :]) & 1).astype(np.float64)
    rng = np.random.default_rng([FLIP_SEED, n])
    return rng.integers(0, 2, (N_FLIPS, n)).astype(np.float64)


@dataclass(frozen=True)
class SignFlip:
    """The sign-flip test of one ratio of sums: its p-value of θ = 0 and its intervals.

    Attributes
    ----------
    theta : float
        The point estimate Σ y / Σ x.
    low, high : float64, (B,)
        Sorted θ_S as the lower and the upper tail count them (ties and Σ_S x = 0 resolved
        towards not rejecting).
    limits : tuple of float
        What the data can reach (the intervals are clamped to it).
    n_requests, n_differing : int
        Requests of the cell, and those whose y is not 0.
    """

    theta: float
    low: NDArray[np.float64]
    high: NDArray[np.float64]
    limits: tuple[float, float]
    n_requests: int
    n_differing: int

    @property
    def n_flips(self) -> int:
        """B, the flips besides the identity."""
        return int(self.low.size)

    def _k(self, level: float) -> int:
        """Return k = ⌈(B + 1)α/2⌉ − 2 for α = 1 − ``level`` (−1: nothing rejects)."""
        alpha = 1.0 - level
        return math.ceil((self.n_flips + 1) * alpha / 2.0 - 1e-9) - 2

    def interval(self, level: float) -> tuple[float, float]:
        """Return the (``level``) interval: the θ₀ neither one-sided test rejects, clamped."""
        k = self._k(level)
        lo = float(self.low[k]) if k >= 0 else -math.inf
        hi = float(self.high[self.n_flips - 1 - k]) if k >= 0 else math.inf
        return max(lo, self.limits[0]), min(hi, self.limits[1])

    def p_difference(self) -> float:
        """Return the two-sided p-value of θ = 0."""
        b1 = self.n_flips + 1.0
        p_up = (1.0 + np.searchsorted(self.low, 0.0, side="right")) / b1
        p_down = (1.0 + self.n_flips - np.searchsorted(self.high, 0.0, side="left")) / b1
        return float(min(1.0, 2.0 * min(p_up, p_down)))


def _one(
    y: NDArray[np.float64],
    x: NDArray[np.float64],
    sets: NDArray[np.float64],
    lim: tuple[float, float],
) -> SignFlip:
    """Return the test of Σ y / Σ x from the flipped sets (see the module docstring)."""
    sy, sx = sets @ y, sets @ x
    tie = _TIE * float(np.abs(y).sum())
    sy = np.where(np.abs(sy) <= tie, 0.0, sy)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = sy / np.where(sx > 0.0, sx, 1.0)
    zero_x = ~(sx > 0.0)
    # θ_S ≤ θ₀ for every θ₀ where Σ_S x = 0 and Σ_S y ≤ 0 (the flip never falls below)
    low = np.where(zero_x, np.where(sy <= 0.0, -math.inf, math.inf), ratio)
    high = np.where(zero_x, np.where(sy >= 0.0, math.inf, -math.inf), ratio)
    theta = float(y.sum() / x.sum()) if x.sum() > 0 else math.nan
    return SignFlip(theta, np.sort(low), np.sort(high), lim, int(y.size), int(np.count_nonzero(y)))


def sign_flip_tests(
    sums: NDArray[np.float64], *, depths: tuple[int, int] | None = None
) -> tuple[SignFlip, SignFlip]:
    """Return the sign-flip tests of Δ and Δ/R_a of one cell from its requests' totals.

    Parameters
    ----------
    sums : float64, (n, 4)
        Per request of the cell, its (n_a, t_a, n_b, t_b); every request has rounds of both arms.
    depths : (int, int), optional
        Depths of arms a and b: the intervals are clamped to what the data can reach.
    """
    na, ta, nb, tb = (sums[:, j].astype(np.float64) for j in range(4))
    n_a, n_b = float(na.sum()), float(nb.sum())
    if np.array_equal(na, nb):
        y, x_d, x_r = tb - ta, na, ta
    else:
        y = tb / n_b - ta / n_a
        x_d, x_r = (na + nb) / (n_a + n_b), ta / n_a
    if depths is not None:
        d_a, d_b = depths
        lim_d, lim_r = (-float(d_a), float(d_b)), (1.0 / (d_a + 1.0) - 1.0, float(d_b))
    else:
        lim_d = lim_r = (-math.inf, math.inf)
    sets = _subsets(sums.shape[0])
    return _one(y, x_d, sets, lim_d), _one(y, x_r, sets, lim_r)


@dataclass(frozen=True)
class SmallCellTest:
    """A cell below the verdict minimum: the CR2 test and the sign-flip test, each at α/2.

    DIFFERENT needs both to reject Δ = 0 at α/2 (an intersection of two tests, each run at half
    the level because at α the pair still called DIFFERENT falsely in up to 7.1% of the study's
    skewed 20-request cells: docs/calibration.md#small-cells). The p-value is
    min(1, 2·max(p_CR2, p_flip)) and the (``level``) interval is the hull of the two intervals at
    1 − (1 − ``level``)/2: 0 lies outside it exactly when the p-value is below 1 − ``level``
    (both intervals hold θ̂, so both exclude 0 on its side). EQUIVALENT is out of reach (its
    p-value is 1): the request minimum stands for it.
    """

    cr2: TTest
    flip: SignFlip

    @property
    def theta(self) -> float:
        """The point estimate."""
        return self.cr2.theta

    @property
    def se(self) -> float:
        """The CR2 standard error."""
        return self.cr2.se

    def interval(self, level: float) -> tuple[float, float]:
        """Return the hull of both intervals at 1 − (1 − ``level``)/2 (NaN if either is)."""
        half = 1.0 - (1.0 - level) / 2.0
        (c_lo, c_hi), (f_lo, f_hi) = self.cr2.interval(half), self.flip.interval(half)
        lo, hi = min(c_lo, f_lo), max(c_hi, f_hi)
        if math.isnan(c_lo) or math.isnan(c_hi) or not (abs(lo) <= HUGE_BOUND >= abs(hi)):
            return math.nan, math.nan  # beyond what can be bounded: the depth is unknown
        return lo, hi

    def p_difference(self) -> float:
        """Return min(1, 2·max(p_CR2, p_flip))."""
        return min(1.0, 2.0 * max(self.cr2.p_difference(), self.flip.p_difference()))

    def p_equivalence(self, margin: float) -> float:
        """Return 1: below the verdict minimum a cell is never EQUIVALENT by its interval."""
        del margin
        return 1.0
