"""No EQUIVALENT by chance (issue 16, item 2).

Where fewer than MIN_DIFFERING requests of a cell differ between the arms, the cell's interval is
forced: the conservative hull [−B, B], B = d·p_u·n_max/n̄ (÷ R̂_a on the relative scale), p_u the
one-sided Clopper–Pearson upper bound on the share differing at 1 − α. The cell is EQUIVALENT only
when the hull lies inside the margin, with the equivalence p-value P(K ≤ k | s*) at the share s*
that puts |Δ| at the margin. Equal data no longer means "identical inputs": that needs the two
arms to be one computation by construction (``same``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specreplay.stats.bootstrap import PairedSums
from specreplay.stats.compare import Comparison, compare, parse_margin
from specreplay.stats.cr2 import differing_tail, differing_upper_share

DEPTH = 5


def _ps(
    na: np.ndarray, ta: np.ndarray, nb: np.ndarray, tb: np.ndarray, fam: np.ndarray
) -> PairedSums:
    n = na.shape[0]
    return PairedSums(
        tuple(f"r{i}" for i in range(n)),
        np.arange(n, dtype=np.uint64) * 7 + 3,
        fam.astype(np.int32),
        np.arange(n, dtype=np.int64),
        np.zeros(n, np.int32),
        na.astype(float),
        ta.astype(float),
        nb.astype(float),
        tb.astype(float),
        tuple(f"f{f}" for f in range(int(fam.max()) + 1)),
        ("all",),
        depths=(DEPTH, DEPTH),
    )


def _run(ps: PairedSums, margin: str = "0.5%", **kw: object) -> Comparison:
    return compare(ps, arm_a="a", arm_b="b", n_boot=200, seed=1, margin=parse_margin(margin), **kw)  # type: ignore[arg-type]


def _identical(n: int, rounds: int = 20, r: float = 4.0) -> PairedSums:
    na = np.full(n, float(rounds))
    ta = na * r
    return _ps(na, ta, na.copy(), ta.copy(), np.zeros(n, np.int64))


def test_a_binomial_tail_is_the_clopper_pearson_dual() -> None:
    # P(K ≤ k | s) < α exactly when the one-sided upper bound at 1 − α lies below s
    from scipy.stats import binom

    for k, n, s in [(0, 40, 0.05), (1, 200, 0.02), (2, 3000, 0.001), (0, 748, 0.004)]:
        assert differing_tail(k, n, s) == pytest.approx(binom.cdf(k, n, s), rel=1e-10)
        u = differing_upper_share(k, n, 0.95)
        assert (differing_tail(k, n, s) < 0.05) == (u < s)
        assert differing_tail(k, n, u) == pytest.approx(0.05, rel=1e-6)


def test_forty_identical_requests_are_not_equivalent() -> None:
    pooled = _run(_identical(40)).pooled.delta
    assert pooled.verdict == "INCONCLUSIVE" and pooled.n_differing == 0
    # the hull: B = d·p_u(0, 40)·n_max/n̄ ÷ R̂_a = 5·(1 − 0.05^(1/40))/4 ≈ 9.2%, far beyond 0.5%
    assert pooled.tost is not None
    b = DEPTH * (1.0 - 0.05 ** (1 / 40)) / 4.0
    assert pooled.tost.hi == pytest.approx(b, rel=1e-9) and pooled.tost.lo == pytest.approx(-b)
    assert "hull" not in (pooled.verdict_reason or "")


def test_three_thousand_identical_requests_are_equivalent_by_their_hull() -> None:
    pooled = _run(_identical(3000)).pooled.delta
    # B = 5·(1 − 0.05^(1/3000))/4 ≈ 0.125% < 0.5%, with p = (1 − s*)^n, s* = 0.005·4/5
    b = DEPTH * (1.0 - 0.05 ** (1 / 3000)) / 4.0
    assert b == pytest.approx(0.00125, rel=0.01)
    assert pooled.verdict == "EQUIVALENT", pooled.verdict_reason
    assert pooled.tost is not None and pooled.tost.hi == pytest.approx(b, rel=1e-9)
    assert pooled.p_equivalence == pytest.approx((1 - 0.004) ** 3000, rel=1e-9)
    assert "hull" in (pooled.verdict_reason or "")
    # the break-even size the docs state: about 750 identical requests at depth 5, R ≈ 4
    assert _run(_identical(760)).pooled.delta.verdict == "EQUIVALENT"
    assert _run(_identical(740)).pooled.delta.verdict == "INCONCLUSIVE"


def test_identical_inputs_only_by_construction() -> None:
    ps = _identical(40)
    same = _run(ps, same=True).pooled.delta
    assert same.verdict == "EQUIVALENT" and same.lo == same.hi == 0.0
    assert _run(ps).pooled.delta.verdict == "INCONCLUSIVE"


def _few_changed(rng: np.random.Generator, per_family: int, families: int, c: float) -> PairedSums:
    """10% of requests changed: α^b = clip(α^a + c + 0.03·N(0, 1)); the rest identical."""
    n = per_family * families
    rounds = np.ceil(rng.lognormal(np.log(30.0), 0.8, n)).astype(np.int64)
    alpha = np.clip(rng.beta(8.0, 3.0, (n, DEPTH)), 0.0, 1.0)
    changed = rng.uniform(size=n) < 0.1
    alpha_b = alpha.copy()
    shift = c + 0.03 * rng.standard_normal((n, DEPTH))
    alpha_b[changed] = np.clip(alpha[changed] + shift[changed], 0.0, 1.0)
    ta, tb = np.empty(n), np.empty(n)
    for i in range(n):  # common random numbers: an unchanged request is identical in both arms
        u = rng.uniform(size=(rounds[i], DEPTH))
        ta[i] = (1 + np.cumprod(u < alpha[i], axis=1).sum(axis=1)).sum()
        tb[i] = (1 + np.cumprod(u < alpha_b[i], axis=1).sum(axis=1)).sum()
    fam = np.repeat(np.arange(families), per_family)
    return _ps(rounds, ta, rounds.copy(), tb, fam)


def _true_rel(c: float) -> float:
    """The population's Δ/R_a for the few-changed setting at shift c (expected values)."""
    rng = np.random.default_rng(0)
    alpha = rng.beta(8.0, 3.0, (200_000, DEPTH))
    alpha_b = np.clip(alpha + c + 0.03 * rng.standard_normal(alpha.shape), 0.0, 1.0)
    r_a = 1 + np.cumprod(alpha, axis=1).sum(axis=1)
    r_b = 1 + np.cumprod(alpha_b, axis=1).sum(axis=1)
    return float(0.1 * (r_b - r_a).mean() / r_a.mean())


def test_few_changed_requests_never_give_equivalent() -> None:
    """10 requests per family, 10% changed, true Δ/R_a = +1.0% (twice the 0.5% margin): no
    cell of 2,000 datasets is EQUIVALENT. Inferring identical inputs from equal data (before
    issue 16) called every cell EQUIVALENT whenever all 40 sampled requests were unchanged
    (0.9^40 ≈ 1.5% of datasets).

    Every dataset with at most two changed requests (the ones an accident of the data could
    fool: about 22% of them) is compared, and every fourth of the others (the comparisons
    are the test's time: 63 s for all 2,000 on a quiet machine)."""
    lo, hi = 0.0, 0.2
    for _ in range(40):  # c with a true Δ/R_a of +1.0%
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _true_rel(mid) < 0.01 else (lo, mid)
    c = (lo + hi) / 2
    assert _true_rel(c) == pytest.approx(0.01, abs=1e-6)
    rng = np.random.default_rng(20261207)
    equivalent = identical = compared = few = 0
    for i in range(2000):
        ps = _few_changed(rng, 10, 4, c)
        changed = int(np.count_nonzero((ps.t_a != ps.t_b) | (ps.n_a != ps.n_b)))
        identical += changed == 0
        few += changed <= 2
        if changed > 2 and i % 4:
            continue
        compared += 1
        comp = compare(ps, arm_a="a", arm_b="b", n_boot=200, seed=1, min_requests=5)
        equivalent += sum(cell.delta.verdict == "EQUIVALENT" for cell in comp.cells)
    print(f"\n2,000 datasets: {identical} with every request unchanged, {few} with at most two "
          f"changed; {compared} compared; EQUIVALENT cells: {equivalent}")  # fmt: skip
    assert identical > 10  # the datasets that fooled the old rule are there
    assert few > 400 and compared - few > 300  # the hard cases and a quarter of the rest
    assert equivalent == 0


def test_a_tiny_difference_everywhere_is_decided_by_the_t_interval() -> None:
    # a dyadic24 comparison: every request differs by about 1e-7 (relative): k = n, no hull
    rng = np.random.default_rng(3)
    n = 200
    na = np.ceil(rng.lognormal(np.log(30.0), 0.8, n))
    ta = na * rng.uniform(3.5, 4.5, n)
    tb = ta * (1 + 1e-7 * rng.standard_normal(n))
    d = _run(_ps(na, ta, na.copy(), tb, np.zeros(n, np.int64))).pooled.delta
    assert d.n_differing == n and d.verdict == "EQUIVALENT"
    assert d.tost is not None and d.tost.level == pytest.approx(0.90)  # the t interval's TOST
    assert math.isclose(d.smallest_equivalent_margin or 1.0, 0.0, abs_tol=1e-5)
