"""The verdict rules of issue 10 through :func:`compare` (the glue between tested helpers).

Each test builds paired sums by hand and checks a rule against an independent computation: the
request is the cluster (pieces summed before the variance), a cell with no differing request is
never EQUIVALENT (its conservative bound computed by hand), identical inputs are EQUIVALENT with
zero width, bounds are clamped to what rounds of the arms' depths can reach, an unbounded
interval without a depth is null with the reason, and small cells carry the study's coverage.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from cr2_ref import hand_cr2, t_interval
from scipy import stats

from specreplay.stats.bootstrap import PairedSums
from specreplay.stats.compare import IDENTICAL, compare, parse_margin
from specreplay.stats.cr2 import MIN_DIFFERING
from specreplay.stats.studied import LOWEST_COVERAGE, NOMINAL_REQUESTS

KW: dict[str, Any] = {"n_boot": 200, "seed": 3, "min_requests": 5}


def _ps(
    na: np.ndarray,
    ta: np.ndarray,
    tb: np.ndarray,
    fam: np.ndarray,
    *,
    depths: tuple[int, int] | None = (4, 4),
    split: bool = False,
) -> PairedSums:
    """One piece per request (or two halves in two buckets when ``split``), b paired with a."""
    n = na.shape[0]
    req = np.arange(n)
    bucket = np.zeros(n, np.int32)
    vals = [na, ta, na.copy(), tb]
    if split:
        req = np.concatenate([req, req])
        bucket = np.concatenate([bucket, np.ones(n, np.int32)])
        vals = [np.concatenate([v / 2.0, v / 2.0]) for v in vals]
    return PairedSums(
        tuple(f"r{i}" for i in range(n)), np.arange(n, dtype=np.uint64) * 11 + 5,
        fam.astype(np.int32), req.astype(np.int64), bucket, *vals,
        tuple(f"f{f}" for f in range(int(fam.max()) + 1)), ("x", "y"), depths=depths,
    )  # fmt: skip


def _skewed(seed: int, n: int, families: int = 2) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    na = np.ceil(rng.lognormal(np.log(30.0), 0.8, n))
    ta = na + rng.binomial((4 * na).astype(np.int64), 0.6)
    tb = ta + rng.poisson(na * 0.05 * rng.lognormal(0.0, 1.0, n))
    return na, ta, np.minimum(tb, 5 * na), np.arange(n) % families


def test_the_request_is_the_cluster_in_every_cell() -> None:
    """Each request's rounds split in halves over two buckets: the pooled and family intervals
    equal those of the unsplit requests, and the reference CR2 of the request totals (a
    variance over pieces would count every request twice)."""
    na, ta, tb, fam = _skewed(1, 100)  # family cells of 50: at the verdict minimum, CR2 alone
    whole = compare(_ps(na, ta, tb, fam), arm_a="a", arm_b="b", **KW)
    split_ps = _ps(na, ta, tb, fam, split=True)
    split = compare(split_ps, arm_a="a", arm_b="b", **KW)
    top = ("pooled", "family")
    pairs = [(c1, c2, cell) for c1, c2, cell in zip(whole.cells, split.cells, split.layout,
             strict=False) if c2.spec.level in top]  # fmt: skip
    assert len(pairs) == 3
    for c1, c2, cell in pairs:
        assert (c1.spec.level, c1.spec.family) == (c2.spec.level, c2.spec.family)
        d1, d2 = c1.delta, c2.delta
        assert (d2.lo, d2.hi, d2.df) == pytest.approx((d1.lo, d1.hi, d1.df))
        ref = hand_cr2(split_ps, cell.fam_idx, cell.bucket_idx)
        assert (d2.lo, d2.hi) == pytest.approx(t_interval(ref, 0.95), rel=1e-9)


@pytest.mark.parametrize("margin", ["0.5%", "50%"])
def test_a_cell_where_no_request_differs_is_decided_by_its_hull(margin: str) -> None:
    """Family f0 identical in both arms, f1 not (60 requests each): f0 gets [−B, B],
    B = d·p_u·n_max/n̄ with p_u = 1 − 0.05^{1/n} (by hand); never DIFFERENT, EQUIVALENT only
    where the relative hull B/R_a lies inside the margin, with the TOST p-value (1 − s*)^60 at
    s* = m·R_a·n̄/(d·n_max) (issue 16)."""
    na, ta, tb, fam = _skewed(2, 120)
    tb = np.where(fam == 0, ta, tb)
    m = parse_margin(margin)
    comp = compare(_ps(na, ta, tb, fam), arm_a="a", arm_b="b", margin=m, **KW)
    cell = next(c for c in comp.cells if c.spec.family == "f0")
    d = cell.delta
    sel = fam == 0
    scale = 4 * na[sel].max() / na[sel].mean()
    b = (1 - 0.05 ** (1 / 60)) * scale
    assert (d.lo, d.hi) == pytest.approx((-min(b, 4.0), min(b, 4.0)))
    assert d.n_differing == 0 and d.df is None and d.p_difference == 1.0
    ra = ta[sel].sum() / na[sel].sum()
    s_star = m.value * ra / scale
    assert d.p_equivalence == pytest.approx((1 - s_star) ** 60 if s_star < 1 else 0.0)
    inside = b / ra < m.value
    assert inside == (margin == "50%")  # the two cases: hull outside, then inside the margin
    assert d.verdict == ("EQUIVALENT" if inside else "INCONCLUSIVE")
    assert "zero standard error" in d.verdict_reason
    assert ("hull at 1 − α lies inside the margin" in d.verdict_reason) == inside
    assert d.tests_in_level == 2  # it keeps its place in Holm's count
    other = next(c for c in comp.cells if c.spec.family == "f1").delta
    assert other.n_differing > MIN_DIFFERING and "hull" not in (other.verdict_reason or "")


def test_few_differing_requests_are_inconclusive_whatever_the_margin() -> None:
    """Two requests of 20 differ (< MIN_DIFFERING): INCONCLUSIVE with the count in the reason,
    and the interval holds ±B with p_u the Clopper–Pearson bound at 2 of 20 (scipy)."""
    na, ta, _, _ = _skewed(3, 20)
    tb = ta.copy()
    tb[[3, 11]] += 1.0
    fam = np.zeros(20, np.int64)
    comp = compare(_ps(na, ta, tb, fam), arm_a="a", arm_b="b", margin=parse_margin("90%"), **KW)
    d = comp.pooled.delta
    assert d.n_differing == 2 and d.verdict == "INCONCLUSIVE"
    assert "2 requests differ" in d.verdict_reason
    b = 4 * stats.beta.ppf(0.95, 3, 18) * na.max() / na.mean()
    assert d.lo <= -min(b, 4.0) + 1e-12 and d.hi >= min(b, 4.0) - 1e-12


def test_identical_inputs_are_equivalent_with_zero_width_in_every_cell() -> None:
    na, ta, _, fam = _skewed(4, 30)
    comp = compare(_ps(na, ta, ta.copy(), fam), arm_a="a", arm_b="b", same=True, **KW)
    for c in comp.cells:
        d = c.delta
        if d.null_reason is None:
            assert d.verdict == "EQUIVALENT" and d.verdict_reason == IDENTICAL
            assert d.lo == d.hi == d.point == 0.0


def test_bounds_are_clamped_to_the_arms_depths() -> None:
    """Depth 1 (R ∈ [1, 2]) and a cell whose t interval spans more: Δ within [−1, 1],
    Δ/R_a within [1/2 − 1, 1], each arm's R within [1, 2]; without the clamp they leave them."""
    rng = np.random.default_rng(5)
    n = 6
    na = np.ones(n)
    ta = 1.0 + rng.integers(0, 2, n).astype(float)
    tb = np.array([2.0, 1.0, 2.0, 1.0, 1.0, 2.0])
    fam = np.zeros(n, np.int64)
    comp = compare(_ps(na, ta, tb, fam, depths=(1, 1)), arm_a="a", arm_b="b",
                   level=0.9999, **KW)  # fmt: skip
    d = comp.pooled.delta
    raw = t_interval(hand_cr2(_ps(na, ta, tb, fam), (0,), (0,)), 0.9999)
    assert raw[0] < -1.0 or raw[1] > 1.0  # the clamp binds here
    assert (d.lo, d.hi) == (max(raw[0], -1.0), min(raw[1], 1.0))
    assert d.rel_lo >= -0.5 and d.rel_hi <= 1.0
    for fig in (comp.pooled.arm_a, comp.pooled.arm_b):
        assert fig.lo >= 1.0 and fig.hi <= 2.0


def test_without_a_depth_a_huge_bound_is_null_with_the_reason() -> None:
    """No depth known, a t interval beyond ±10⁶: the delta is null and says why."""
    na = np.ones(6)
    ta = np.ones(6)
    tb = np.array([3e6, 1.0, 1.0, 2.0, 1.0, 9e5])
    comp = compare(_ps(na, ta, tb, np.zeros(6, np.int64), depths=None), arm_a="a", arm_b="b",
                   **KW)  # fmt: skip
    d = comp.pooled.delta
    assert d.lo is None and d.verdict is None
    assert "depth is unknown" in d.null_reason


def test_small_cells_carry_the_study_coverage_at_their_size() -> None:
    """n < NOMINAL_REQUESTS: small_sample with the study entry of the largest studied size ≤ n."""
    na, ta, tb, fam = _skewed(6, 2 * (NOMINAL_REQUESTS - 10), families=2)
    comp = compare(_ps(na, ta, tb, fam), arm_a="a", arm_b="b", **KW)
    n_fam = NOMINAL_REQUESTS - 10
    want = max((s for s in LOWEST_COVERAGE if s.n_requests <= n_fam), key=lambda s: s.n_requests)
    fam_delta = next(c for c in comp.cells if c.spec.level == "family").delta
    assert fam_delta.small_sample is True
    assert fam_delta.coverage_at_size == want
    pooled = comp.cells[0]
    assert pooled.n_requests >= NOMINAL_REQUESTS
    assert pooled.delta.small_sample is False
    assert pooled.delta.coverage_at_size is None


def test_a_cell_under_the_study_minimum_is_inconclusive_by_rule() -> None:
    """--min-requests 5 lets a 6-request cell through; the study's MIN_REQUESTS does not let it
    give a verdict: INCONCLUSIVE, p-values 1, whatever the margin; under 7 requests not even the
    small-cell test can reject (2/2⁶ > α/2), so the CR2 interval is printed."""
    from specreplay.stats.cr2 import MIN_REQUESTS

    na, ta, tb, fam = _skewed(7, 6)
    fam = np.zeros(6, np.int64)
    comp = compare(_ps(na, ta, tb, fam), arm_a="a", arm_b="b", margin=parse_margin("99%"), **KW)
    d = comp.pooled.delta
    assert d.n_differing >= MIN_DIFFERING and MIN_REQUESTS > 6
    assert d.verdict == "INCONCLUSIVE" and "6 requests < 7: too few" in d.verdict_reason
    assert d.p_equivalence == d.p_difference == 1.0
    assert d.method == "cr2-eff-hall"


def test_an_inconclusive_no_rule_forced_says_neither_test_decides() -> None:
    """60 requests, Δ/R_a near 0 with noise, margin 0.01%: the TOST cannot pass and Δ = 0 is not
    rejected (adjusted p ≥ α, checked), so the verdict is INCONCLUSIVE with the NEITHER reason."""
    from specreplay.stats.compare import NEITHER

    rng = np.random.default_rng(8)
    na, ta, _, _ = _skewed(8, 60)
    tb = ta + rng.choice([-2.0, -1.0, 0.0, 1.0, 2.0], 60)
    comp = compare(_ps(na, ta, tb, np.zeros(60, np.int64)), arm_a="a", arm_b="b",
                   margin=parse_margin("0.01%"), **KW)  # fmt: skip
    d = comp.pooled.delta
    assert d.p_equivalence_adj >= 0.05 and d.p_difference_adj >= 0.05
    assert d.verdict == "INCONCLUSIVE" and d.verdict_reason == NEITHER


def test_a_bonferroni_bound_past_the_huge_bound_leaves_no_bonferroni_interval() -> None:
    """No depth known; family f0's 95% interval stays under ±10⁶ (hi ≈ 0.232·4e6) but its
    Bonferroni one at 1 − 0.05/2 does not (≈ 0.262·4e6, both measured at 1e6–3e6 outliers): the
    delta keeps its figures and verdict with ``bonferroni`` None (a null bound would break the
    results.json schema); f1, bounded at both levels, keeps its Bonferroni interval. Family cells
    of 50 requests: at the verdict minimum, so the CR2 interval alone is printed."""
    na, ta = np.ones(100), np.ones(100)
    tb = 1.0 + np.arange(100) % 3
    tb[0], tb[2] = 4e6, 4e6 / 3
    comp = compare(_ps(na, ta, tb, np.arange(100) % 2, depths=None), arm_a="a", arm_b="b", **KW)
    f0, f1 = (c.delta for c in comp.cells if c.spec.level == "family")
    assert f0.null_reason is None and f0.hi is not None and f0.hi <= 1e6
    assert f0.bonferroni is None and f0.verdict is not None and f0.tests_in_level == 2
    assert f1.bonferroni is not None and f1.bonferroni.level == pytest.approx(0.975)
    assert f1.bonferroni.hi is not None and f1.bonferroni.hi > f1.hi


def test_holm_adjusted_p_values_not_raw_ones_decide_equivalence() -> None:
    """4 families of 60 requests, an absolute margin just above the widest family TOST bound:
    every raw TOST p is < α, yet two cells' Holm-adjusted ones are not, so those two are not
    EQUIVALENT (seed 11 chosen to put two raw p-values in (α/2, α); a verdict from raw p-values,
    bench/mutants.py's "verdicts from raw p-values", would call them EQUIVALENT)."""
    na, ta, tb, fam = _skewed(11, 240, families=4)
    first = compare(_ps(na, ta, tb, fam), arm_a="a", arm_b="b", margin=parse_margin("0.01"), **KW)
    tost = [c.delta.tost for c in first.cells if c.spec.level == "family"]
    m = max(max(abs(t.lo), abs(t.hi)) for t in tost if t is not None) * (1 + 1e-4)
    comp = compare(_ps(na, ta, tb, fam), arm_a="a", arm_b="b", margin=parse_margin(repr(m)), **KW)
    deltas = [c.delta for c in comp.cells if c.spec.level == "family"]
    assert all(d.p_equivalence < 0.05 for d in deltas)
    held = [d for d in deltas if d.p_equivalence_adj >= 0.05]
    assert len(held) == 2 and all(d.verdict != "EQUIVALENT" for d in held)
    assert all(d.verdict == "EQUIVALENT" for d in deltas if d not in held)
