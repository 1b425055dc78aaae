"""Cells below the verdict minimum decide by the CR2 and sign-flip tests at α/2 (issue 16, item 3).

The glue of :func:`specreplay.stats.compare.compare`: which cells take the small-cell test, the
p-value that enters Holm, the printed and Bonferroni intervals (the hull of both at 1 − α/2 and
1 − α/(2m)), and the verdict, each recomputed here from the two tests and a hand-written Holm.
"""

from __future__ import annotations

import numpy as np
import pytest

from specreplay.stats.bootstrap import PairedSums
from specreplay.stats.compare import compare, parse_margin
from specreplay.stats.cr2 import MIN_REQUESTS, paired_tests
from specreplay.stats.signflip import SMALL_METHOD, sign_flip_tests

KW = {"n_boot": 200, "seed": 3, "min_requests": 5, "margin": parse_margin("0.5%")}


def _ps(na: np.ndarray, ta: np.ndarray, tb: np.ndarray, fam: np.ndarray) -> PairedSums:
    n = na.shape[0]
    return PairedSums(
        tuple(f"r{i}" for i in range(n)), np.arange(n, dtype=np.uint64) * 7 + 1,
        fam.astype(np.int32), np.arange(n, dtype=np.int64), np.zeros(n, np.int32),
        na, ta, na.copy(), tb, tuple(f"f{f}" for f in range(int(fam.max()) + 1)), ("x",),
        depths=(5, 5),
    )  # fmt: skip


def _data(seed: int, per_family: int, shifts: tuple[float, ...]) -> tuple[np.ndarray, ...]:
    """Families of ``per_family`` requests; family f's acceptance moves by shifts[f] (noisy)."""
    rng = np.random.default_rng(seed)
    fams = len(shifts)
    n = fams * per_family
    fam = np.repeat(np.arange(fams), per_family)
    na = np.ceil(rng.lognormal(np.log(25.0), 0.7, n))
    p = rng.uniform(0.35, 0.65, n)
    ta = na + rng.binomial((5 * na).astype(np.int64), p)
    pb = np.clip(p + np.asarray(shifts)[fam] + 0.03 * rng.standard_normal(n), 0.0, 1.0)
    tb = na + rng.binomial((5 * na).astype(np.int64), pb)
    return na, ta, tb, fam


def _holm(p: list[float]) -> list[float]:
    order = np.argsort(p)
    m, run, out = len(p), 0.0, [0.0] * len(p)
    for i, j in enumerate(order):
        run = max(run, min(1.0, (m - i) * p[j]))
        out[j] = run
    return out


def test_small_family_cells_decide_by_both_tests_and_holm() -> None:
    """4 families × 20 requests (two moved by −0.15 and −0.02 in acceptance, two unmoved): each
    family cell's p, Holm p, verdict, interval and Bonferroni interval as recomputed from
    paired_tests and sign_flip_tests; the pooled cell (80 requests) keeps the CR2 interval."""
    na, ta, tb, fam = _data(5, 20, (-0.15, -0.02, 0.0, 0.0))
    comp = compare(_ps(na, ta, tb, fam), arm_a="a", arm_b="b", **KW)
    fams = [c for c in comp.cells if c.spec.level == "family"]
    want_p, hulls, bonf = [], [], []
    for f in range(len(fams)):
        rows = np.stack([na, ta, na, tb], axis=1)[fam == f]
        cr2 = paired_tests(rows, depths=(5, 5))[1]  # the margin is relative: Δ/R_a decides
        flip = sign_flip_tests(rows, depths=(5, 5))[1]
        want_p.append(min(1.0, 2.0 * max(cr2.p_difference(), flip.p_difference())))
        d_cr2, d_flip = (
            paired_tests(rows, depths=(5, 5))[0],
            sign_flip_tests(rows, depths=(5, 5))[0],
        )
        lo = min(d_cr2.interval(0.975)[0], d_flip.interval(0.975)[0])
        hi = max(d_cr2.interval(0.975)[1], d_flip.interval(0.975)[1])
        hulls.append((lo, hi))
        b = 1 - 0.05 / (2 * 4)
        bonf.append((min(d_cr2.interval(b)[0], d_flip.interval(b)[0]),
                     max(d_cr2.interval(b)[1], d_flip.interval(b)[1])))  # fmt: skip
    adj = _holm(want_p)
    for c, p, a, hull, bf in zip(fams, want_p, adj, hulls, bonf, strict=True):
        d = c.delta
        assert c.n_requests == 20 < MIN_REQUESTS and d.method == SMALL_METHOD
        assert d.p_difference == pytest.approx(p, rel=1e-12)
        assert d.p_difference_adj == pytest.approx(a, rel=1e-12)
        assert d.p_equivalence == 1.0
        assert d.verdict == ("DIFFERENT" if a < 0.05 else "INCONCLUSIVE")
        assert (d.lo, d.hi) == pytest.approx(hull, rel=1e-12)
        assert d.bonferroni is not None
        assert (d.bonferroni.lo, d.bonferroni.hi) == pytest.approx(bf, rel=1e-12)
        # the small-sample mark cites the hull's own study, not the CR2 interval's
        assert d.coverage_at_size is not None and d.coverage_at_size.coverage == 0.951
        assert d.coverage_at_size.n_requests == 20
    verdicts = [c.delta.verdict for c in fams]
    assert verdicts[0] == "DIFFERENT" and verdicts[2] == verdicts[3] == "INCONCLUSIVE"
    assert "sign-flip tests both reject" in str(fams[0].delta.verdict_reason)
    pooled = comp.pooled.delta
    rows = np.stack([na, ta, na, tb], axis=1)
    assert comp.pooled.n_requests == 80 and pooled.method == "cr2-eff-hall"
    assert pooled.coverage_at_size is not None and pooled.coverage_at_size.coverage == 0.9357
    want = paired_tests(rows, depths=(5, 5))[0].interval(0.95)
    assert (pooled.lo, pooled.hi) == pytest.approx(want, rel=1e-12)


def test_a_40_request_cell_with_a_large_effect_is_different() -> None:
    """The issue's case: a 40-request cell with Δ/R_a near −40% was INCONCLUSIVE by rule (a
    --fail-on DIFFERENT gate passed); both tests reject it at α/2 by far."""
    na, ta, tb, fam = _data(9, 40, (-0.3,))
    comp = compare(_ps(na, ta, tb, fam), arm_a="a", arm_b="b", **KW)
    d = comp.pooled.delta
    assert d.rel is not None and d.rel < -0.3
    assert d.verdict == "DIFFERENT" and d.method == SMALL_METHOD
    assert d.rel_hi is not None and d.rel_hi < 0.0


def test_at_the_verdict_minimum_the_cr2_interval_alone_decides() -> None:
    """A 50-request cell takes today's rule: the CR2 interval at 95%, its own p-value."""
    na, ta, tb, fam = _data(2, 50, (-0.02,))
    d = compare(_ps(na, ta, tb, fam), arm_a="a", arm_b="b", **KW).pooled.delta
    rows = np.stack([na, ta, na, tb], axis=1)
    st_d, st_r = paired_tests(rows, depths=(5, 5))
    assert d.method == "cr2-eff-hall"
    assert (d.lo, d.hi) == pytest.approx(st_d.interval(0.95), rel=1e-12)
    assert d.p_difference == pytest.approx(st_r.p_difference(), rel=1e-12)
