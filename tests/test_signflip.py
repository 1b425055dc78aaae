"""The sign-flip test of a small cell against a brute-force enumeration (issue 16, item 3).

The module computes p-values and intervals from the sorted subset ratios θ_S (Hartigan); here
every sign vector is enumerated and the statistic Σ s_i (y_i − θ₀ x_i) compared directly, at
θ₀ = 0 for the p-value and on a fine grid of θ₀ for the interval.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from specreplay.stats.signflip import EXHAUSTIVE_MAX, N_FLIPS, sign_flip_tests


def _brute_p(y: np.ndarray, x: np.ndarray, theta0: float) -> tuple[float, float]:
    """(p₊, p₋) by enumerating every sign vector (the identity included)."""
    e = y - theta0 * x
    t = e.sum()
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=y.size)))
    ts = signs @ e
    scale = 1e-12 * max(np.abs(y).sum(), 1.0) + 1e-12 * abs(theta0) * np.abs(x).sum()
    up = np.count_nonzero(ts >= t - scale) / ts.size
    down = np.count_nonzero(ts <= t + scale) / ts.size
    return float(up), float(down)


def _sums(rng: np.random.Generator, n: int, changed: float) -> np.ndarray:
    rounds = rng.integers(3, 40, n).astype(np.float64)
    ta = rounds + rng.binomial((5 * rounds).astype(np.int64), 0.5)
    move = rng.integers(-6, 9, n) * (rng.random(n) < changed)
    tb = np.clip(ta + move, rounds, 6 * rounds)
    return np.stack([rounds, ta, rounds, tb], axis=1)


@pytest.mark.parametrize("seed", range(6))
def test_p_value_equals_the_enumeration(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sums = _sums(rng, 9, changed=0.7)
    d, r = sign_flip_tests(sums, depths=(5, 5))
    up, down = _brute_p(sums[:, 3] - sums[:, 1], sums[:, 0], 0.0)
    want = min(1.0, 2.0 * min(up, down))
    assert d.p_difference() == pytest.approx(want, abs=1e-12)
    assert r.p_difference() == pytest.approx(want, abs=1e-12)  # Δ = 0 ⇔ Δ/R_a = 0
    assert d.n_flips == 2**9 - 1


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("level", [0.95, 0.9])
def test_interval_is_the_set_the_test_does_not_reject(seed: int, level: float) -> None:
    """θ₀ just inside either bound is not rejected at (1 − level)/2; just outside it is."""
    rng = np.random.default_rng(100 + seed)
    sums = _sums(rng, 10, changed=0.8)
    y, x = sums[:, 3] - sums[:, 1], sums[:, 0]
    lo, hi = sign_flip_tests(sums)[0].interval(level)
    a2 = (1.0 - level) / 2.0
    eps = 1e-9
    assert _brute_p(y, x, lo + eps)[0] >= a2  # p₊ not below α/2 just inside
    assert _brute_p(y, x, lo - eps)[0] < a2  # rejected just outside
    assert _brute_p(y, x, hi - eps)[1] >= a2
    assert _brute_p(y, x, hi + eps)[1] < a2


def test_relative_interval_uses_t_a() -> None:
    rng = np.random.default_rng(7)
    sums = _sums(rng, 8, changed=1.0)
    y, x = sums[:, 3] - sums[:, 1], sums[:, 1]
    lo, hi = sign_flip_tests(sums)[1].interval(0.95)
    assert _brute_p(y, x, lo - 1e-9)[0] < 0.025 <= _brute_p(y, x, lo + 1e-9)[0]
    assert _brute_p(y, x, hi + 1e-9)[1] < 0.025 <= _brute_p(y, x, hi - 1e-9)[1]
    assert sign_flip_tests(sums)[1].theta == pytest.approx(y.sum() / x.sum(), rel=1e-14)


def test_zero_outside_the_interval_exactly_when_p_below_alpha() -> None:
    rng = np.random.default_rng(11)
    agree = 0
    for _ in range(300):
        n = int(rng.integers(6, 12))
        sums = _sums(rng, n, changed=float(rng.uniform(0.2, 1.0)))
        sums[:, 3] += rng.integers(0, 3) * sums[:, 0] * (rng.random(n) < 0.5)
        for t in sign_flip_tests(sums):
            lo, hi = t.interval(0.95)
            assert (t.p_difference() < 0.05) == (lo > 0.0 or hi < 0.0)
            agree += t.p_difference() < 0.05
    assert agree > 20  # both outcomes were exercised


def test_unchanged_requests_are_ties_and_few_changes_cannot_reject() -> None:
    """With two requests changed, every flip of the rest ties: p ≥ 2·(2^(n−2))/2^n = 0.5."""
    sums = np.array([[10.0, 30.0, 10.0, 30.0]] * 10)
    sums[0, 3] += 9
    sums[1, 3] += 7
    d, _ = sign_flip_tests(sums)
    assert d.p_difference() == pytest.approx(0.5)
    assert d.n_differing == 2


def test_drawn_flips_above_the_exhaustive_size() -> None:
    """At 30 requests, each changed by +1 token/round: every drawn flip is at most the observed
    sum, only the flips of no request tie (probability 2^-30): p = 2/(B + 1)."""
    n = 30
    rounds = np.full(n, 10.0)
    sums = np.stack([rounds, 3 * rounds, rounds, 4 * rounds], axis=1)
    d, r = sign_flip_tests(sums, depths=(5, 5))
    assert n > EXHAUSTIVE_MAX and d.n_flips == N_FLIPS
    assert d.p_difference() == pytest.approx(2.0 / (N_FLIPS + 1))
    # every θ_S is exactly 1 (each request moved by 1 per round): the interval is [1, 1]
    assert d.interval(0.95) == (1.0, 1.0)
    assert r.interval(0.95) == pytest.approx((1 / 3, 1 / 3))


def test_unpaired_rounds_give_the_ratio_of_ratios() -> None:
    rng = np.random.default_rng(3)
    sums = _sums(rng, 9, changed=1.0)
    sums[:, 2] = sums[:, 0] + rng.integers(0, 3, 9)
    sums[:, 3] = np.maximum(sums[:, 3], sums[:, 2])
    d, r = sign_flip_tests(sums)
    ra, rb = sums[:, 1].sum() / sums[:, 0].sum(), sums[:, 3].sum() / sums[:, 2].sum()
    assert d.theta == pytest.approx(rb - ra, rel=1e-12)
    assert r.theta == pytest.approx(rb / ra - 1.0, rel=1e-12)
    assert math.isfinite(d.interval(0.95)[0])
