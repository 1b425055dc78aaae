"""The studentized (bootstrap-t) interval, today a candidate of the calibration study, and the
default CR2 interval of :func:`compare`, each against an independent hand computation.

``studentized_ref.hand_studentized`` recomputes every replicate's SE* from the raw pieces in the
original coordinates, with the kernel's draw counts; the package gets SE* from moments in
residual coordinates. They must agree to rounding (1e-9 relative), in every kind of cell, with
and without stratification, and also when the two arms differ by 1e-9 tokens per round (where the
naive expansion of the quadratic form would lose every digit).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from cr2_ref import hand_cr2, t_interval, t_p_values
from studentized_ref import hand_studentized

from specreplay.stats.bootstrap import PairedSums, bootstrap_moments, bootstrap_sums
from specreplay.stats.compare import ArmEstimate, ComparedCell, compare, parse_margin
from specreplay.stats.cr2 import MIN_REQUESTS
from specreplay.stats.studentized import Studentized, cell_standard_errors


def _sums(seed: int, n: int = 60, shift: float = 0.05) -> PairedSums:
    """n requests in 3 families, each with rounds in up to two buckets; b = a + Poisson(n·shift)."""
    rng = np.random.default_rng(seed)
    fam = rng.integers(0, 3, n).astype(np.int32)
    req = np.repeat(np.arange(n), 2)
    bucket = np.tile([0, 1], n).astype(np.int32)
    keep = rng.random(2 * n) < 0.8
    keep[::2] |= ~keep[1::2]  # every request keeps a piece
    req, bucket = req[keep], bucket[keep]
    na = rng.integers(5, 40, req.shape[0]).astype(float)
    ta = na + rng.binomial((4 * na).astype(np.int64), 0.6)
    tb = ta + (rng.poisson(na * shift) if shift >= 0.01 else na * shift * rng.random(na.shape))
    return PairedSums(
        tuple(f"r{i}" for i in range(n)), np.arange(n, dtype=np.uint64) * 7 + 3, fam, req,
        bucket, na, ta, na.copy(), tb, ("a", "b", "c"), ("x", "y"),
    )  # fmt: skip


CELLS = [((0, 1, 2), (0, 1)), ((1,), (0, 1)), ((0, 1, 2), (1,)), ((2,), (0,))]


@pytest.mark.parametrize("stratify", ["family", "none"])
@pytest.mark.parametrize("shift", [0.05, 1e-9])
def test_standard_errors_and_t_equal_the_hand_computation(stratify: str, shift: float) -> None:
    ps = _sums(1, shift=shift)
    b = 40
    mom = bootstrap_moments(ps, n_boot=b, seed=5, stratify=stratify)
    sums = bootstrap_sums(ps, n_boot=b, seed=5, stratify=stratify)
    for fi, bi in CELLS:
        sel = np.isin(ps.family[ps.piece_request], fi) & np.isin(ps.piece_bucket, bi)
        point = np.array([a[sel].sum() for a in (ps.n_a, ps.t_a, ps.n_b, ps.t_b)])
        reps = sums[:, list(fi)][:, :, list(bi)].reshape(b, -1, 4).sum(axis=1)
        ses = cell_standard_errors(mom, fi, bi, point, reps)
        for rel, (se, se_reps) in zip((False, True), ses[:2], strict=True):
            theta, se_hand, t_hand = hand_studentized(
                ps, n_boot=b, seed=5, stratify=stratify, fam_idx=fi, bucket_idx=bi, rel=rel
            )
            # the hand computation itself cancels to ~1e-7 relative at a 1e-9 shift
            tol = 1e-9 if shift >= 0.01 else 1e-5
            assert se > 0 and se == pytest.approx(se_hand, rel=tol)
            rb, ra = reps[:, 3] / reps[:, 2], reps[:, 1] / reps[:, 0]
            th = rb / ra - 1.0 if rel else rb - ra
            atol = 1e-9 if shift >= 0.01 else 1e-4  # θ* − θ̂ itself cancels to ~1e-7 relative
            np.testing.assert_allclose((th - theta) / se_reps, t_hand, rtol=tol * 100, atol=atol)


def test_compare_gives_the_hand_cr2_interval_and_p_values() -> None:
    """Every cell of compare (pooled, family, bucket, family × bucket; pieces in two buckets)
    gives the reference CR2 t interval, TOST interval, p-values and df (tests/cr2_ref.py)."""
    ps = _sums(4, n=80)
    comp = compare(ps, arm_a="a", arm_b="b", n_boot=400, seed=9, stratify="family",
                   margin=parse_margin("0.03"), min_requests=5)  # fmt: skip
    checked = 0
    for c, cell in zip(comp.cells, comp.layout, strict=True):
        d = c.delta
        if d.null_reason is not None:
            continue
        ref = hand_cr2(ps, cell.fam_idx, cell.bucket_idx)
        # below the verdict minimum the hull of CR2 and sign flips is printed (test_small_cells)
        small = c.n_requests < MIN_REQUESTS
        assert d.method == ("cr2-eff-hall+sign-flip" if small else "cr2-eff-hall")
        assert d.df == pytest.approx(ref.df, rel=1e-9)
        assert (d.tost.lo, d.tost.hi) == pytest.approx(t_interval(ref, 0.90), rel=1e-9)
        p_diff, p_eq = t_p_values(ref, 0.03)
        rel_ref = hand_cr2(ps, cell.fam_idx, cell.bucket_idx, rel=True)
        if small:  # never EQUIVALENT; DIFFERENT needs CR2 at α/2 too: p ≥ 2·p_CR2
            assert d.p_equivalence == 1.0 and d.verdict in ("INCONCLUSIVE", "DIFFERENT")
            assert d.p_difference >= min(1.0, 2.0 * p_diff) * (1 - 1e-7)
            lo95, hi95 = t_interval(ref, 0.975)
            assert d.lo <= lo95 + 1e-9 * abs(lo95) and d.hi >= hi95 - 1e-9 * abs(hi95)
        else:
            assert d.p_difference == pytest.approx(p_diff, rel=1e-7, abs=1e-14)
            assert d.p_equivalence == pytest.approx(p_eq, rel=1e-7, abs=1e-14)
            assert (d.lo, d.hi) == pytest.approx(t_interval(ref, 0.95), rel=1e-9)
            assert (d.rel_lo, d.rel_hi) == pytest.approx(t_interval(rel_ref, 0.95), rel=1e-9)
        checked += 1
    assert checked >= 8


def test_a_zero_standard_error_gives_a_zero_width_interval_and_sure_p_values() -> None:
    st = Studentized.of(0.0, 0.0, np.zeros(10), np.zeros(10))
    assert st.interval(0.95) == (0.0, 0.0)
    assert st.p_difference() == 1.0 and st.p_equivalence(0.01) == 0.0
    off = Studentized.of(0.02, 0.0, np.full(10, 0.02), np.zeros(10))
    assert off.p_difference() == 0.0 and off.p_equivalence(0.01) == 1.0


def test_inverted_p_values_agree_with_the_interval_they_come_from() -> None:
    """p < α iff the (1 − α) interval excludes 0; TOST p < α iff the (1 − 2α) one is in ±m."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        st = Studentized(float(rng.normal(0, 1)), float(rng.uniform(0.2, 2)),
                         rng.standard_t(5, 999))  # fmt: skip
        lo, hi = st.interval(0.95)
        assert (st.p_difference() < 0.05) == (lo > 0 or hi < 0) or min(abs(lo), abs(hi)) < 1e-2
        m = float(rng.uniform(0.5, 6))
        lo90, hi90 = st.interval(0.90)
        inside = -m < lo90 and hi90 < m
        edge = min(abs(lo90 + m), abs(hi90 - m)) < 1e-2
        assert (st.p_equivalence(m) < 0.05) == inside or edge


def _arm(cell: ComparedCell, name: str) -> ArmEstimate:
    """The figure of arm ``name`` in a compared cell."""
    return next(f for f in (cell.arm_a, cell.arm_b) if f.name == name)


def test_each_arms_r_interval_is_the_same_whichever_arm_is_a() -> None:
    """R_a's interval (its own gradient) equals R_b's when the arms swap places.

    Same requests and seed: the same resamples, so the swap changes only which gradient is
    used; a wrong R_a gradient would give another SE and interval.
    """
    ps = _sums(6, n=60, shift=0.05)
    swapped = dataclasses.replace(ps, n_a=ps.n_b, t_a=ps.t_b, n_b=ps.n_a, t_b=ps.t_a)
    kw: dict[str, Any] = {"n_boot": 300, "seed": 3, "stratify": "family", "min_requests": 5}
    ab = compare(ps, arm_a="a", arm_b="b", **kw)
    ba = compare(swapped, arm_a="b", arm_b="a", **kw)
    checked = 0
    for c1, c2 in zip(ab.cells, ba.cells, strict=True):
        for arm in ("a", "b"):
            f1, f2 = _arm(c1, arm), _arm(c2, arm)
            assert pytest.approx(f2.R, rel=1e-12) == f1.R
            # no interval where the cell's delta is null (too few requests), as for the delta
            null = c1.delta.null_reason is not None
            assert (f1.lo is None) == null or f1.R is None
            if f1.R is None or null:
                continue
            # delta-method sums of squares cancel differently in the two parametrisations
            assert (f1.lo, f1.hi) == pytest.approx((f2.lo, f2.hi), rel=1e-9)
            assert f1.lo < f1.R < f1.hi and f1.level == 0.95
            checked += 1
    assert checked >= 8
    few = compare(ps, arm_a="a", arm_b="b", **{**kw, "min_requests": 61})
    assert all(f.lo is None and f.R is not None for f in (few.pooled.arm_a, few.pooled.arm_b))
