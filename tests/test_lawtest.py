"""Law tests: exact output law, Monte Carlo sampler, χ² tails, Holm, draws for power.

See docs/methods.md#law-tests.

Tiers (STYLE.md): exhaustive enumeration in exact rational arithmetic for the output law; scipy
as the external reference for the χ² / noncentral χ² functions and the G statistic; a slow Python
sampler fed the same counter-based uniforms for exact count equality; seeded statistical checks
with their false-failure rate stated.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numba
import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import stats

from specreplay.errors import SpecReplayError
from specreplay.sim.rng import STREAM_ACCEPT, STREAM_DRAFT, STREAM_RESIDUAL, uniform_py
from specreplay.stats.lawtest import (
    LawCase,
    LawTestResult,
    chi2_isf,
    chi2_power,
    chi2_sf,
    draws_for_power,
    gammainc_pq,
    goodness_of_fit,
    merge_categories,
    ncx2_cdf,
    output_law,
    run_law_tests,
    sample_counts,
    toy_cases,
    toy_quantize_dyadic_nearest,
)
from specreplay.stats.multiple import holm

TOY = toy_cases()
TOY_IDS = [f"{c.arm}@{c.position}" for c in TOY]


def _p_ref(case: LawCase) -> NDArray[np.float64]:
    ext = np.append(case.p, case.p_other)
    out: NDArray[np.float64] = ext / ext.sum()
    return out


# ------------------------------------------------------------------------------------------
# Exact output law against an exhaustive enumeration (exact rationals)
# ------------------------------------------------------------------------------------------


def _enumerate_law(
    q_s: NDArray[np.float64], q_v: NDArray[np.float64], p: NDArray[np.float64], p_other: float
) -> tuple[list[Fraction], Fraction]:
    """Draft token × accept/reject × residual token, in exact rational arithmetic."""
    qs = [Fraction(float(v)) for v in q_s]
    qv = [Fraction(float(v)) for v in q_v]
    pp = [Fraction(float(v)) for v in p]
    po = Fraction(float(p_other))
    n = len(qs)
    w = [max(Fraction(0), pp[i] - qv[i]) for i in range(n)] + [po]
    if sum(w) == 0:  # empty residual: the documented fallback to p_ext
        w = [*pp, po]
    total_w = sum(w)
    law = [Fraction(0)] * (n + 1)
    alpha = Fraction(0)
    for x in range(n):  # draft token x
        # docs/methods.md#the-importance-estimator-and-its-weight: v·0 < p(x) iff p(x) > 0
        if qv[x] == 0:
            acc = Fraction(1) if pp[x] > 0 else Fraction(0)
        else:
            acc = min(Fraction(1), pp[x] / qv[x])
        law[x] += qs[x] * acc  # accepted
        alpha += qs[x] * acc
        for y in range(n + 1):  # rejected, then residual token y
            law[y] += qs[x] * (1 - acc) * w[y] / total_w
    return law, alpha


EDGE = {
    # q_v(x) = 0 < p(x): x always accepted; law = [0.25, 0.75] by hand
    "qv-zero": ([0.5, 0.5], [1.0, 0.0], [0.5, 0.5], 0.0),
    # p = q_v and q_s drafts where p = q_v = 0: empty residual, fallback to p (by hand
    # law = [0.5, 0.25, 0, 0] + 0.25·[0.5, 0.5, 0, 0] = [0.625, 0.375, 0, 0])
    "empty-residual": ([0.5, 0.25, 0.25], [0.5, 0.5, 0.0], [0.5, 0.5, 0.0], 0.0),
    # p_other > 0 and a mismatched verifier
    "other": ([0.5, 0.3, 0.2], [0.6, 0.3, 0.1], [0.3, 0.3, 0.2], 0.2),
}


def _edge(
    name: str,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], float]:
    q_s, q_v, p, p_other = EDGE[name]
    return np.asarray(q_s), np.asarray(q_v), np.asarray(p), p_other


@pytest.mark.parametrize("case", TOY, ids=TOY_IDS)
def test_output_law_equals_enumeration_on_toy_laws(case: LawCase) -> None:
    out = output_law(case.q_s, case.q_v, case.p, case.p_other)
    law, alpha = _enumerate_law(case.q_s, case.q_v, case.p, case.p_other)
    # float64 against exact rationals: a few ulps per term, 32 terms
    np.testing.assert_allclose(out.law, [float(v) for v in law], rtol=0, atol=1e-15)
    assert out.alpha == pytest.approx(float(alpha), abs=1e-15)
    assert out.law.sum() == pytest.approx(1.0, abs=1e-15)
    tv = 0.5 * float(np.abs(np.array([float(v) for v in law]) - _p_ref(case)).sum())
    assert out.tv == pytest.approx(tv, abs=1e-15)


@pytest.mark.parametrize("name", sorted(EDGE))
def test_output_law_equals_enumeration_on_edge_laws(name: str) -> None:
    q_s, q_v, p, p_other = _edge(name)
    out = output_law(q_s, q_v, p, p_other)
    law, alpha = _enumerate_law(q_s, q_v, p, p_other)
    np.testing.assert_allclose(out.law, [float(v) for v in law], rtol=0, atol=1e-15)
    assert out.alpha == pytest.approx(float(alpha), abs=1e-15)


def test_edge_laws_by_hand() -> None:
    np.testing.assert_allclose(output_law(*EDGE["qv-zero"]).law, [0.25, 0.75, 0.0], atol=1e-15)
    out = output_law(*EDGE["empty-residual"])
    np.testing.assert_allclose(out.law, [0.625, 0.375, 0.0, 0.0], atol=1e-15)
    assert out.alpha == 0.75


def test_matched_law_is_p() -> None:
    """Matched verifier ⇒ law = p (TV ≤ 1e-12), on the toy laws and 200 random laws."""
    for case in TOY:
        if case.arm.endswith(("float64", "dyadic8")) and "/" not in case.arm:
            assert output_law(case.q_s, case.q_v, case.p, case.p_other).tv <= 1e-12
    rng = np.random.default_rng(20261129)
    for _ in range(200):
        n = int(rng.integers(1, 33))
        q = rng.dirichlet(np.full(n, 0.3))
        q[rng.random(n) < 0.2] = 0.0  # some candidates outside the sampler's support
        if q.sum() == 0.0:
            q[0] = 1.0
        q /= q.sum()
        p = rng.dirichlet(np.full(n + 1, 0.5))
        p[:n][rng.random(n) < 0.2] = 0.0  # some candidates outside the target's support
        p /= p.sum()
        out = output_law(q, q, p[:n], p[n])
        assert out.tv <= 1e-12
        assert out.alpha == pytest.approx(float(np.minimum(p[:n], q).sum()), abs=1e-15)


def test_mismatched_toy_laws_have_clearly_nonzero_tv() -> None:
    for case in TOY:
        if "/" in case.arm:
            assert output_law(case.q_s, case.q_v, case.p, case.p_other).tv > 2e-3


# ------------------------------------------------------------------------------------------
# Monte Carlo sampler
# ------------------------------------------------------------------------------------------


def _reference_counts(case: LawCase, draws: int, seed: int, key: int) -> NDArray[np.int64]:
    """Slow Python sampler fed the same counter-based uniforms as the kernel."""
    n = len(case.q_s)
    w = np.append(np.maximum(0.0, case.p - case.q_v), case.p_other)
    if not w.sum() > 0.0:
        w = np.append(case.p, case.p_other)

    def first_above(weights: NDArray[np.float64], t: float) -> int:
        c, last = 0.0, -1
        for i, wi in enumerate(weights):
            if wi > 0.0:
                last = i
                c += wi
                if t < c:
                    return i
        return last

    counts = np.zeros(n + 1, dtype=np.int64)
    for i in range(draws):
        u = uniform_py(seed, key, i, case.position, STREAM_DRAFT)
        if case.m_s is not None:
            assert case.bits is not None
            k = int(u * 2**53) >> (53 - case.bits)
            x = int(np.argmax(np.cumsum(case.m_s) > k))
        else:
            x = first_above(case.q_s, u)
        v = uniform_py(seed, key, i, case.position, STREAM_ACCEPT)
        if v * case.q_v[x] < case.p[x]:
            counts[x] += 1
        else:
            r = uniform_py(seed, key, i, case.position, STREAM_RESIDUAL) * float(w.sum())
            counts[first_above(w, r)] += 1
    return counts


def _counts(case: LawCase, draws: int, seed: int, key: int = 0) -> NDArray[np.int64]:
    return sample_counts(
        case.q_s,
        case.q_v,
        case.p,
        case.p_other,
        draws=draws,
        seed=seed,
        key=key,
        position=case.position,
        m_s=case.m_s,
        bits=case.bits,
    )


def _mismatched(float_sampler: bool) -> list[LawCase]:
    """Mismatched arms with a dyadic8 sampler (toy suite) or a float sampler (reversed)."""
    out = []
    for c in TOY:
        if "/" in c.arm:
            if float_sampler:  # sample with float64, verify with dyadic8
                out.append(c._replace(q_s=c.q_v, q_v=c.q_s, m_s=None, bits=None))
            else:
                out.append(c)
    return out


@pytest.mark.parametrize("float_sampler", [True, False], ids=["float", "dyadic"])
def test_kernel_equals_python_reference(float_sampler: bool) -> None:
    cases = _mismatched(float_sampler)
    if float_sampler:  # the edge laws (always-accept, empty residual, p_other) too
        cases += [LawCase("edge", 3, *_edge(k), None, None) for k in sorted(EDGE)]
    for case in cases:
        got = _counts(case, 1500, seed=11, key=99)
        np.testing.assert_array_equal(got, _reference_counts(case, 1500, seed=11, key=99))


@pytest.mark.parametrize("float_sampler", [True, False], ids=["float", "dyadic"])
def test_sampler_histogram_agrees_with_exact_law(float_sampler: bool) -> None:
    draws = 400_000
    for case in _mismatched(float_sampler):
        law = output_law(case.q_s, case.q_v, case.p, case.p_other).law
        counts = _counts(case, draws, seed=3)
        assert counts.sum() == draws
        assert np.all(counts[law == 0.0] == 0)  # exact: no draw outside the law's support
        # per category |z| ≤ 5: a correct sampler fails a given category w.p. 5.7e-7
        sd = np.sqrt(draws * law * (1.0 - law))
        pos = law > 0.0
        assert np.all(np.abs(counts[pos] - draws * law[pos]) <= 5.0 * sd[pos])
        # G-test against the exact law at level 1e-4 (false failure 1e-4 per law; seed fixed)
        assert goodness_of_fit(counts, law).p_value >= 1e-4


def test_sampler_always_accepts_where_qv_is_zero() -> None:
    # candidate 1 (q_v = 0 < p) is always accepted: law [0.25, 0.75, 0], 5 SE (fails w.p. 6e-7)
    counts = sample_counts(*EDGE["qv-zero"], draws=100_000, seed=0)
    law = output_law(*EDGE["qv-zero"]).law
    assert counts[2] == 0
    assert abs(counts[1] - 1e5 * law[1]) <= 5.0 * math.sqrt(1e5 * law[1] * law[0])


def test_reproducible_for_a_seed_and_different_for_another() -> None:
    case = TOY[2]  # peaked6 dyadic/float64
    a = _counts(case, 50_000, seed=5)
    np.testing.assert_array_equal(a, _counts(case, 50_000, seed=5))
    assert not np.array_equal(a, _counts(case, 50_000, seed=6))
    assert not np.array_equal(a, _counts(case, 50_000, seed=5, key=1))


def test_counts_do_not_depend_on_thread_count() -> None:
    case = TOY[-1]
    default = _counts(case, 30_000, seed=2)  # all threads (2 in CI)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = _counts(case, 30_000, seed=2)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(one, default)


# ------------------------------------------------------------------------------------------
# χ² and noncentral χ² without scipy, against scipy 1.18
# ------------------------------------------------------------------------------------------

DFS = [1, 2, 3, 4, 5, 7, 10, 15, 31, 32, 63, 100, 200]


def test_chi2_sf_against_scipy() -> None:
    """Relative 1e-10 wherever scipy's sf is above 1e-290 (measured worst: 5e-14)."""
    for df in DFS:
        for x in np.geomspace(1e-6, 5e3, 60):
            want = stats.chi2.sf(x, df)
            if want > 1e-290:
                assert chi2_sf(float(x), df) == pytest.approx(want, rel=1e-10), (df, x)


def test_gammainc_against_scipy_special() -> None:
    from scipy import special

    for a in [0.1, 0.5, 1.0, 2.5, 17.0, 150.0]:
        for x in [1e-3, 0.5, a, a + 1.0, 3.0 * a + 5.0]:
            lo, up = gammainc_pq(a, x)
            assert lo == pytest.approx(special.gammainc(a, x), rel=1e-10, abs=1e-300)
            assert up == pytest.approx(special.gammaincc(a, x), rel=1e-10, abs=1e-300)


def test_chi2_sf_huge_statistics_underflow_to_zero() -> None:
    assert chi2_sf(1e4, 1) == 0.0
    assert chi2_sf(1e12, 31) == 0.0
    assert chi2_sf(0.0, 3) == 1.0
    assert chi2_sf(-1.0, 3) == 1.0
    assert gammainc_pq(2.0, math.inf) == (1.0, 0.0)


def test_chi2_isf_against_scipy() -> None:
    for df in [1, 2, 5, 31, 100]:
        for level in [0.5, 0.05, 1e-5, 1e-8, 1e-12]:
            assert chi2_isf(level, df) == pytest.approx(stats.chi2.isf(level, df), rel=1e-11)


def test_ncx2_cdf_against_scipy() -> None:
    """Absolute 1e-10 over df 1..100, λ up to 1e5, at the 1e-6..1−1e-6 quantiles.

    Measured worst: 4e-11 at λ = 1e5 (recurrence over ~2,000 terms), below 1e-13 for λ ≤ 5,000.
    """
    for df in [1, 2, 3, 5, 10, 31, 100]:
        for lam in [0.1, 1.0, 5.0, 20.0, 80.0, 300.0, 1000.0, 5000.0, 1e5]:
            for q in [1e-6, 0.01, 0.5, 0.99, 1.0 - 1e-6]:
                x = float(stats.ncx2.ppf(q, df, lam))
                want = stats.ncx2.cdf(x, df, lam)
                assert ncx2_cdf(x, df, lam) == pytest.approx(want, abs=1e-10), (df, lam, q)
    assert ncx2_cdf(4.0, 3, 0.0) == pytest.approx(stats.chi2.cdf(4.0, 3), abs=1e-15)
    assert ncx2_cdf(0.0, 3, 2.0) == 0.0


def test_chi2_power_against_scipy() -> None:
    for df in [1, 5, 31]:
        for level in [1e-5, 1e-7]:
            c = stats.chi2.isf(level, df)
            for lam in [10.0, 50.0, 120.0]:
                assert chi2_power(lam, df, level) == pytest.approx(
                    stats.ncx2.sf(c, df, lam), abs=1e-10
                )
    assert chi2_power(5.0, 0, 1e-5) == 0.0


# ------------------------------------------------------------------------------------------
# Merging, goodness of fit, Holm
# ------------------------------------------------------------------------------------------


def test_merge_small_candidates_into_other() -> None:
    # candidates 1 and 3 (expected 3 and 1) join the other bucket: 0.5 + 3 + 1 = 4.5 < 5,
    # so the merged other joins the smallest kept candidate (index 2, expected 20)
    group = merge_categories([50.0, 3.0, 20.0, 1.0, 0.5])
    assert group.tolist() == [0, 1, 1, 1, 1]
    # other already large enough after merging: it stays its own (last) category
    assert merge_categories([50.0, 3.0, 20.0, 1.0, 4.0]).tolist() == [0, 2, 1, 2, 2]
    # ties among kept candidates go to the lower index
    assert merge_categories([20.0, 20.0, 0.0]).tolist() == [0, 1, 0]
    # every candidate small: a single category
    assert merge_categories([1.0, 1.0, 1.0]).tolist() == [0, 0, 0]


def test_goodness_of_fit_on_crafted_merge_example() -> None:
    counts = np.array([48, 4, 22, 2, 1])  # 77 draws
    ref = np.array([50.0, 3.0, 20.0, 1.0, 3.0]) / 77.0  # expected = (50, 3, 20, 1, 3)
    g = goodness_of_fit(counts, ref)
    # merged by hand: (48 | 22 | 4 + 2 + 1) against (50 | 20 | 3 + 1 + 3)
    obs, exp = np.array([48.0, 22.0, 7.0]), np.array([50.0, 20.0, 7.0])
    want = stats.power_divergence(obs, exp, lambda_="log-likelihood")
    assert g.df == 2
    assert g.statistic == pytest.approx(want.statistic, rel=1e-12)
    assert g.p_value == pytest.approx(want.pvalue, rel=1e-10)
    assert g.merged == (1, 3)
    pearson = goodness_of_fit(counts, ref, method="pearson")
    want = stats.chisquare(obs, exp)
    assert pearson.statistic == pytest.approx(want.statistic, rel=1e-12)
    assert pearson.p_value == pytest.approx(want.pvalue, rel=1e-10)
    # other merged into a candidate is reported as category n
    assert goodness_of_fit([50, 3, 20, 1, 0], np.array([50, 3, 20, 1, 0]) / 74).merged == (1, 3, 4)


def test_goodness_of_fit_single_category_has_nothing_to_test() -> None:
    g = goodness_of_fit([1000, 0, 0], [1.0, 0.0, 0.0])
    assert (g.statistic, g.df, g.p_value) == (0.0, 0, 1.0)


# ------------------------------------------------------------------------------------------
# The law test end to end
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_results() -> list[LawTestResult]:
    return run_law_tests(TOY, seed=0)


def test_matched_pass_and_mismatched_dyadic8_detected(toy_results: list[LawTestResult]) -> None:
    assert [r.arm for r in toy_results] == [c.arm for c in TOY]
    for r in toy_results:
        assert r.label == "SIMULATED"
        if "/" in r.arm:  # dyadic8/float64: exact TV > 2e-3, powered at 1e-5 / 12
            assert r.tv > 2e-3
            assert not r.passed and r.p_adj < 1e-5, r
            assert r.power is not None and r.power >= 0.99
            assert not r.underpowered
            assert r.draws_rule in {"power", "min-draws"}
        else:  # matched: law = p, min_draws draws, nothing to power against
            assert r.tv <= 1e-12
            assert r.passed and r.p_adj >= 1e-5, r
            assert (r.draws, r.power, r.draws_rule) == (200_000, None, "null-law")


def test_pearson_method_agrees_on_verdicts() -> None:
    res = run_law_tests(TOY, seed=1, method="pearson")
    assert [r.passed for r in res] == ["/" not in c.arm for c in TOY]
    assert {r.method for r in res} == {"pearson"}


def test_holm_is_over_the_whole_run(toy_results: list[LawTestResult]) -> None:
    np.testing.assert_allclose(
        [r.p_adj for r in toy_results], holm([r.p_value for r in toy_results])
    )


def test_draws_are_the_smallest_reaching_power_per_scipy() -> None:
    case = TOY[5]  # flat16 dyadic8/float64: needs more than min_draws
    assert case.arm == "toy-flat16:dyadic8/float64"
    law = output_law(case.q_s, case.q_v, case.p, case.p_other).law
    ref = _p_ref(case)
    level = 1e-5 / 12
    draws, power, under, rule = draws_for_power(law, ref, level=level)
    assert (rule, under) == ("power", False)

    def scipy_power(n: int) -> float:  # merged as the test merges (all 16 candidates kept here)
        group = merge_categories(n * ref)
        k = int(group.max()) + 1
        lg, pg = np.bincount(group, law, k), np.bincount(group, ref, k)
        lam = n * float(np.sum((lg - pg) ** 2 / pg))
        return float(stats.ncx2.sf(stats.chi2.isf(level, k - 1), k - 1, lam))

    assert power == pytest.approx(scipy_power(draws), abs=1e-9)
    assert scipy_power(draws) >= 0.99 - 1e-9
    assert scipy_power(draws - 50) < 0.99  # smallest up to the λ bisection (rel. 1e-9)


def test_underpowered_case_reports_underpowered() -> None:
    case = TOY[5]  # flat16 dyadic8/float64 needs ~3e5 draws for power 0.99
    (r,) = run_law_tests([case], seed=0, max_draws=20_000, min_draws=1_000)
    assert r.underpowered and r.draws == 20_000 and r.draws_rule == "max-draws"
    assert r.power is not None and r.power < 0.99
    law = output_law(case.q_s, case.q_v, case.p, case.p_other).law
    ref = _p_ref(case)
    lam = 20_000 * float(np.sum((law[:16] - ref[:16]) ** 2 / ref[:16]))  # other: empty, merged
    assert r.power == pytest.approx(stats.ncx2.sf(stats.chi2.isf(1e-5, 15), 15, lam), abs=1e-9)


def test_min_draws_floor_and_results_are_reproducible() -> None:
    case = TOY[2]  # peaked6 dyadic8/float64: power needs fewer than min_draws
    a = run_law_tests([case], seed=4)
    assert a[0].draws_rule == "min-draws" and a[0].draws == 200_000
    assert a == run_law_tests([case], seed=4)
    assert a[0].statistic != run_law_tests([case], seed=5)[0].statistic


def test_plain_tuples_and_empty_runs() -> None:
    assert run_law_tests([], seed=0) == []
    (r,) = run_law_tests([tuple(TOY[0])], seed=0, min_draws=1_000)
    assert r.arm == TOY[0].arm and r.draws == 1_000


# ------------------------------------------------------------------------------------------
# Toy quantizer (toy suite only)
# ------------------------------------------------------------------------------------------


def test_toy_quantizer_largest_remainder() -> None:
    # 8·(0.5, 0.3, 0.2) = (4, 2.4, 1.6): floors (4, 2, 1), one unit to the largest fraction
    assert toy_quantize_dyadic_nearest([0.5, 0.3, 0.2], 3).tolist() == [4, 2, 2]
    # ties to the lower index: 4·(1/3, 1/3, 1/3) = 1.33 each, one unit to index 0
    assert toy_quantize_dyadic_nearest([1 / 3, 1 / 3, 1 / 3], 2).tolist() == [2, 1, 1]
    for case in TOY:
        if case.m_s is not None:
            assert int(case.m_s.sum()) == 256


# ------------------------------------------------------------------------------------------
# Validation messages
# ------------------------------------------------------------------------------------------

Q = np.array([0.5, 0.5])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"q_s": np.zeros((0,))}, r"q_s must be a non-empty 1-D array"),
        ({"q_v": np.array([1.5, -0.5])}, r"q_v must be finite and non-negative"),
        ({"p": np.array([0.5, 0.25, 0.25])}, r"must have the same length, got 2, 2, 3"),
        ({"q_s": np.array([0.5, 0.6])}, r"q_s sums to 1\.1"),
        ({"p_other": -0.1}, r"p_other must be finite and non-negative"),
        ({"p_other": 0.1}, r"p sums with p_other to 1\.1"),
        ({"m_s": np.array([1.0, 1.0]), "bits": 1}, r"m_s must be a 1-D integer array"),
        ({"m_s": np.array([1, 1]), "bits": 0}, r"bits must be in 1\.\.53"),
        ({"m_s": np.array([1, 2]), "bits": 1}, r"m_s must be non-negative and sum to 2\^1"),
        ({"m_s": np.array([2, 0]), "bits": 1}, r"q_s must equal m_s / 2\^1 exactly"),
        ({"draws": 0}, r"draws must be at least 1"),
        ({"position": -1}, r"position must be non-negative"),
    ],
)
def test_sample_counts_validation(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {"q_s": Q, "q_v": Q, "p": Q, "p_other": 0.0, "draws": 10, "seed": 0}
    args |= kwargs
    with pytest.raises(SpecReplayError, match=match):
        sample_counts(**args)


def test_run_law_tests_validation() -> None:
    good = LawCase("a", 1, Q, Q, Q, 0.0, None, None)
    with pytest.raises(SpecReplayError, match=r"method must be 'G' or 'pearson', got 'chi'"):
        run_law_tests([good], seed=0, method="chi")
    with pytest.raises(SpecReplayError, match=r"family_alpha must be in \(0, 1\)"):
        run_law_tests([good], seed=0, family_alpha=0.0)
    with pytest.raises(SpecReplayError, match=r"need 1 <= min_draws <= max_draws"):
        run_law_tests([good], seed=0, min_draws=10, max_draws=5)
    with pytest.raises(SpecReplayError, match=r"law test 'b' position -1: position must be"):
        run_law_tests([good._replace(arm="b", position=-1)], seed=0)
    with pytest.raises(SpecReplayError, match=r"law test 'c' position 2: q_v sums to 0\.9"):
        run_law_tests([good._replace(arm="c", position=2, q_v=np.array([0.5, 0.4]))], seed=0)


def test_goodness_of_fit_and_numeric_validation() -> None:
    with pytest.raises(SpecReplayError, match=r"counts and p_ref must be 1-D arrays"):
        goodness_of_fit([1, 2], [1.0])
    with pytest.raises(SpecReplayError, match=r"counts must be non-negative and p_ref"):
        goodness_of_fit([1, -2], [0.5, 0.5])
    with pytest.raises(SpecReplayError, match=r"method must be 'G' or 'pearson'"):
        goodness_of_fit([1, 2], [0.5, 0.5], method="g")
    with pytest.raises(ValueError, match=r"gammainc_pq needs a > 0 and x >= 0"):
        gammainc_pq(0.0, 1.0)
    with pytest.raises(ValueError, match=r"chi2_sf needs df > 0"):
        chi2_sf(1.0, 0)
    with pytest.raises(ValueError, match=r"chi2_isf needs 0 < level < 1 and df > 0"):
        chi2_isf(1.0, 3)
    with pytest.raises(ValueError, match=r"ncx2_cdf needs df > 0 and lam >= 0"):
        ncx2_cdf(1.0, 3, -1.0)
