"""The CR2 interval with effective degrees of freedom (specreplay.stats.cr2), against independent
computations: dense eigenvalues for the degrees of freedom, the textbook CR2 sum for the variance,
scipy's t and beta distributions for the quantiles and p-values, and the bounds the data can reach.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from cr2_ref import Ref, t_interval, t_p_values
from scipy import stats

from specreplay.stats.cr2 import (
    MIN_DIFFERING,
    differing_upper_share,
    effective_df,
    paired_tests,
    ratio_test,
)


def _dense_df(u: np.ndarray, h: np.ndarray) -> float:
    """(Σλ)²/Σλ² of A^{1/2} M Ω M^T A^{1/2}, M = I − h 1ᵀ, by a dense eigendecomposition."""
    n = u.shape[0]
    g = np.diag(1.0 / np.sqrt(1.0 - h)) @ (np.eye(n) - np.outer(h, np.ones(n))) @ np.diag(np.abs(u))
    lam = np.linalg.eigvalsh(g @ g.T)
    return float(lam.sum() ** 2 / (lam**2).sum())


@pytest.mark.parametrize("seed", range(8))
def test_effective_df_equals_the_dense_eigenvalue_formula(seed: int) -> None:
    """The O(n) rank-two traces give the dense (Σλ)²/Σλ² to 1e-9 (skewed residuals, uneven h)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 40))
    x = rng.lognormal(3.0, 0.8, n)
    u = rng.standard_normal(n) * rng.exponential(1.0, n)
    h = x / x.sum()
    want = min(max(_dense_df(u, h), 1.0), n - 1.0)
    assert effective_df(u, h) == pytest.approx(want, rel=1e-9)


def test_effective_df_is_one_when_one_request_carries_the_residual() -> None:
    """One non-zero residual among equal leverages: a single eigenvalue, ν = 1."""
    u = np.zeros(10)
    u[3] = 2.5
    assert effective_df(u, np.full(10, 0.1)) == pytest.approx(1.0, abs=1e-12)


def _paired(seed: int, n: int = 15) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rounds = np.ceil(rng.lognormal(np.log(30.0), 0.8, n))
    ta = rounds + rng.binomial((4 * rounds).astype(np.int64), 0.6)
    tb = ta + rng.poisson(rounds * 0.05 * rng.lognormal(0.0, 1.0, n))
    return np.stack([rounds, ta, rounds, tb], axis=1).astype(np.float64)


@pytest.mark.parametrize("seed", range(4))
def test_paired_interval_is_the_textbook_cr2_hall_interval(seed: int) -> None:
    """SE² = Σ e_i²/(1 − h_i)/X², e_i = d_i − θ̂x_i, h_i = x_i/X (x = n for Δ, t_a for Δ/R_a);
    ν from dense eigenvalues; γ̂ scipy's skewness of e; the interval and the p-values from
    Hall's cubic inverted by a root finder and scipy's t (tests/cr2_ref.py)."""
    s = _paired(seed)
    n, ta, tb = s[:, 0], s[:, 1], s[:, 3]
    d = tb - ta
    for test, x in zip(paired_tests(s, depths=(4, 4)), (n, ta), strict=True):
        theta = d.sum() / x.sum()
        e = d - theta * x
        se = math.sqrt(float((e**2 / (1.0 - x / x.sum())).sum())) / x.sum()
        ref = Ref(theta, se, _dense_df(e / x.sum(), x / x.sum()), float(stats.skew(e)), len(e))
        assert test.theta == pytest.approx(theta, rel=1e-12)
        assert test.se == pytest.approx(se, rel=1e-12)
        assert test.df == pytest.approx(ref.df, rel=1e-9)
        assert test.skew == pytest.approx(ref.skew, rel=1e-9)
        assert test.interval(0.95) == pytest.approx(t_interval(ref, 0.95), rel=1e-9)
        p_diff, p_eq = t_p_values(ref, 0.02)
        assert test.p_difference() == pytest.approx(p_diff, rel=1e-9)
        assert test.p_equivalence(0.02) == pytest.approx(p_eq, rel=1e-9, abs=1e-15)


def test_hall_moves_the_interval_towards_the_long_tail() -> None:
    """Right-skewed influences (γ̂ > 0): the interval reaches further above θ̂ than below."""
    test = paired_tests(_paired(11, n=30), depths=(4, 4))[0]
    assert test.skew > 0.5
    lo, hi = test.interval(0.95)
    assert hi - test.theta > 1.05 * (test.theta - lo)


def test_t_not_z_at_few_effective_clusters() -> None:
    """With ν < 3 the 95% interval uses t_ν (scipy), far wider than with the normal quantile."""
    s = _paired(0, n=12)
    s[:, 3] = s[:, 1]
    s[2, 3] += 40.0  # two requests carry almost the whole difference
    s[7, 3] += 25.0
    s[9, 3] += 1.0
    test = paired_tests(s, depths=(4, 4))[0]
    assert test.forced is None and test.df < 3.0
    ref = Ref(test.theta, test.se, test.df, test.skew, test.n_requests)
    lo, hi = test.interval(0.95)
    assert (lo, hi) == pytest.approx(t_interval(ref, 0.95), rel=1e-9)
    z_lo, z_hi = t_interval(ref._replace(df=1e12), 0.95)
    assert hi - lo > 1.3 * (z_hi - z_lo)


def test_upper_share_is_clopper_pearson() -> None:
    """k = 0: 1 − α^{1/n}; k ≥ 1: scipy's Beta(k + 1, n − k) quantile."""
    assert differing_upper_share(0, 20, 0.95) == pytest.approx(1 - 0.05 ** (1 / 20))
    for k, n in ((1, 10), (2, 20), (5, 50)):
        assert differing_upper_share(k, n, 0.95) == pytest.approx(
            stats.beta.ppf(0.95, k + 1, n - k), rel=1e-10
        )


def test_no_differing_request_gives_the_conservative_bound_never_equivalent() -> None:
    """0 of 20 requests differ: interval [−B, B], B = d·p_u·n_max/n̄; p-values 1."""
    s = _paired(1, n=20)
    s[:, 3] = s[:, 1]  # identical cell ...
    delta, rel = paired_tests(s, depths=(5, 5))  # ... but not declared identical inputs
    assert delta.forced is not None and delta.n_differing == 0 and delta.se == 0.0
    b = 5 * (1 - 0.05 ** (1 / 20)) * s[:, 0].max() / s[:, 0].mean()
    assert delta.interval(0.95) == pytest.approx((-min(b, 5.0), min(b, 5.0)))
    ra = s[:, 1].sum() / s[:, 0].sum()
    _lo, hi = rel.interval(0.95)
    assert hi == pytest.approx(min(b / ra, 5.0))
    assert delta.p_difference() == 1.0
    scale = 5 * s[:, 0].max() / s[:, 0].mean()  # the hull's p-value: (1 − m/scale)^20
    for m in (0.01 * scale, 0.2 * scale):
        assert delta.p_equivalence(m) == pytest.approx(stats.binom.cdf(0, 20, m / scale))
    assert delta.p_equivalence(0.01 * scale) > 0.05 > delta.p_equivalence(0.2 * scale)


def test_identical_inputs_are_equivalent_with_zero_width() -> None:
    """Declared identical: [θ̂, θ̂] = [0, 0], TOST p 0, difference p 1."""
    s = _paired(2)
    s[:, 3] = s[:, 1]
    delta, _ = paired_tests(s, depths=(4, 4), identical=True)
    assert delta.interval(0.95) == (0.0, 0.0)
    assert delta.p_equivalence(1e-9) == 0.0 and delta.p_difference() == 1.0


def test_few_differing_requests_are_forced_and_the_bound_is_held() -> None:
    """k < MIN_DIFFERING: the interval holds ±B with p_u at k of n, and the t interval."""
    s = _paired(3, n=20)
    s[:, 3] = s[:, 1]
    s[4, 3] += 3.0
    delta, _ = paired_tests(s, depths=(5, 5))
    assert delta.n_differing == 1 < MIN_DIFFERING and delta.forced is not None
    b = 5 * stats.beta.ppf(0.95, 2, 19) * s[:, 0].max() / s[:, 0].mean()
    lo, hi = delta.interval(0.95)
    assert lo <= -min(b, 5.0) + 1e-12 and hi >= min(b, 5.0) - 1e-12
    scale = 5 * s[:, 0].max() / s[:, 0].mean()
    m = 0.3 * scale  # the hull's p-value: P(K ≤ 1) at s* = m/scale
    assert delta.p_equivalence(m) == pytest.approx(stats.binom.cdf(1, 20, 0.3), rel=1e-9)


def test_bounds_are_clamped_to_what_the_data_can_reach() -> None:
    """Depth 1 and a huge interval: Δ within [−1, 1], Δ/R_a within [1/2 − 1, 1]; R in [1, 2]."""
    s = np.array([[1.0, 1.0, 1.0, 2.0], [1.0, 2.0, 1.0, 1.0], [1.0, 1.0, 1.0, 2.0],
                  [1.0, 2.0, 1.0, 1.0], [1.0, 1.0, 1.0, 2.0]])  # fmt: skip
    delta, rel = paired_tests(s, depths=(1, 1))
    lo, hi = delta.interval(0.999999)
    assert lo >= -1.0 and hi <= 1.0 and (lo, hi) == (-1.0, 1.0)
    rlo, rhi = rel.interval(0.999999)
    assert rlo >= -0.5 and rhi <= 1.0
    r = ratio_test(s[:, 0], s[:, 1], depth=1).interval(0.999999)
    assert r[0] >= 1.0 and r[1] <= 2.0


def test_unknown_depth_and_a_huge_bound_is_null() -> None:
    """No depth, ν = 1 and a large spread: a bound beyond ±10⁶ gives NaN (null with reason)."""
    s = np.array([[1.0, 1.0, 1.0, 1e6], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0],
                  [1.0, 1.0, 1.0, 3e5]])  # fmt: skip
    lo, hi = paired_tests(s)[0].interval(0.95)
    assert math.isnan(lo) and math.isnan(hi)


def test_request_pieces_are_summed_before_squaring() -> None:
    """The request is the cluster: the same totals give the same test however they were split
    (a per-piece variance would count each piece as its own request)."""
    s = _paired(5, n=14)
    whole = paired_tests(s, depths=(4, 4))[0]
    assert whole.n_requests == 14
    # a per-piece computation on the split rows differs: it is not what the cell must use
    halves = np.concatenate([s / 2.0, s / 2.0])
    split = paired_tests(halves, depths=(4, 4))[0]
    assert split.se != pytest.approx(whole.se, rel=1e-3)


def test_compiled_tost_p_values_equal_each_tests_own() -> None:
    """tost_p_values (compiled t CDF) gives TTest.p_equivalence for ordinary, forced and
    identical tests at margins on both sides of each; and the t CDF equals scipy's."""
    from specreplay.stats.cr2 import tost_p_values
    from specreplay.stats.tfast import t_cdf_many

    tests = [*paired_tests(_paired(7), depths=(4, 4)), *paired_tests(_paired(8, n=30))]
    s = _paired(9)
    s[:, 3] = s[:, 1]
    tests += [paired_tests(s, depths=(4, 4))[0], paired_tests(s, identical=True)[0]]
    every = tost_p_values(tests)
    for m in (1e-6, 0.005, 0.02, 0.3, 5.0):
        assert every(m) == pytest.approx([t.p_equivalence(m) for t in tests], rel=1e-12, abs=1e-15)
    x = np.array([-40.0, -2.5, -0.3, 0.0, 0.7, 3.1, 60.0])
    df = np.array([1.0, 2.7, 14.5, 1e5, 3.3, 50.0, 1.2])
    assert t_cdf_many(x, df) == pytest.approx(stats.t.cdf(x, df), rel=1e-10, abs=1e-15)


def test_hall_inverse_is_stable_when_the_skewness_is_rounding_noise() -> None:
    """A skewness of 1e-16 (rounding) gives the symmetric t interval to 1e-12, which contains θ̂;
    the naive (c − 1)/a loses every digit there (it gave a lower bound above the upper)."""
    from specreplay.stats.cr2 import TTest

    test = TTest(3.0867, 0.2093, 7.0, (1.0, 4.0), 8, 8, skew=-3.07e-16)
    q = stats.t.ppf(0.975, 7.0)
    lo, hi = test.interval(0.95)
    assert (lo, hi) == pytest.approx((3.0867 - q * 0.2093, min(3.0867 + q * 0.2093, 4.0)))
    assert lo < test.theta < hi
