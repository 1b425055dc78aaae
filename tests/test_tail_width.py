"""The statistics of a figure bounded over a truncated law (schema v2's tails).

Where an arm's R is known only to a range (the analytic replay of the logging arm's sampler on a
capture that kept part of the vocabulary: specreplay.replay.truncation), the replay hands the
statistics the range's midpoint and its width per round. Each check here is computed apart from
``compare``: the same comparison without tails, shifted by half the width (Δ, R) or by the
ratio's extreme moves (Δ/R_a); the verdict held at both ends of the range on Bonferroni
intervals; the cell nulled past the width limit.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from specreplay.stats.bootstrap import PairedSums
from specreplay.stats.compare import TAIL_WIDTH_LIMIT, Comparison, compare, parse_margin
from tests.stats_cases import paired_sums


def _tailed(ps: PairedSums, wa: float, wb: float, la: float = 0.2, lb: float = 0.3) -> PairedSums:
    """``ps`` with every round of a and b carrying tail width wa, wb (limits la, lb)."""
    tails = np.stack([ps.n_a * wa, ps.n_a * la, ps.n_b * wb, ps.n_b * lb])
    return dataclasses.replace(ps, tails=tails)


def _run(ps: PairedSums, **kw: object) -> Comparison:
    return compare(ps, arm_a="a", arm_b="b", n_boot=400, seed=3, min_requests=5, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def skewed() -> PairedSums:
    return paired_sums(11, 120, 3)


def test_every_interval_is_widened_by_the_tails_and_nothing_else(skewed: PairedSums) -> None:
    wa, wb = 0.02, 0.04
    plain, tailed = _run(skewed), _run(_tailed(skewed, wa, wb))
    h = (wa + wb) / 2
    checked = 0
    for p, t in zip(plain.cells, tailed.cells, strict=True):
        assert t.arm_a.R == p.arm_a.R and t.arm_b.R == p.arm_b.R  # midpoints: unchanged
        if p.delta.null_reason is not None:
            assert t.delta.null_reason == p.delta.null_reason
            continue
        checked += 1
        ra, rb = p.arm_a.R, p.arm_b.R
        assert ra is not None and rb is not None
        down = rb / ra - (rb - wb / 2) / (ra + wa / 2)
        up = (rb + wb / 2) / (ra - wa / 2) - rb / ra
        d, e = p.delta, t.delta
        assert e.point == d.point and e.tail_width == pytest.approx(wa + wb, abs=1e-15)
        for lo, hi, lo2, hi2, by in [
            (d.lo, d.hi, e.lo, e.hi, (h, h)),
            (d.rel_lo, d.rel_hi, e.rel_lo, e.rel_hi, (down, up)),
            (d.bca.lo, d.bca.hi, e.bca.lo, e.bca.hi, (h, h)),  # type: ignore[union-attr]
            (d.tost.lo, d.tost.hi, e.tost.lo, e.tost.hi, (down, up)),  # type: ignore[union-attr]
            (d.bonferroni.lo, d.bonferroni.hi, e.bonferroni.lo, e.bonferroni.hi, (h, h)),  # type: ignore[union-attr]
            (d.bonferroni.rel_lo, d.bonferroni.rel_hi, e.bonferroni.rel_lo,  # type: ignore[union-attr]
             e.bonferroni.rel_hi, (down, up)),  # type: ignore[union-attr]
        ]:  # fmt: skip
            assert lo2 == pytest.approx(lo - by[0], abs=1e-12)
            assert hi2 == pytest.approx(hi + by[1], abs=1e-12)
        for fig, fig2, w, lim in ((p.arm_a, t.arm_a, wa, 0.2), (p.arm_b, t.arm_b, wb, 0.3)):
            assert fig2.tail_width == pytest.approx(w) and fig2.tail_limit == pytest.approx(lim)
            assert fig2.lo == pytest.approx(fig.lo - w / 2, abs=1e-12)  # type: ignore[operator]
            assert fig2.hi == pytest.approx(fig.hi + w / 2, abs=1e-12)  # type: ignore[operator]
    assert checked >= 3


def test_a_different_verdict_must_hold_at_both_ends(skewed: PairedSums) -> None:
    plain = _run(skewed).pooled
    assert plain.delta.verdict == "DIFFERENT" and plain.delta.point > 0  # type: ignore[operator]
    lo = plain.delta.lo  # the pooled level holds one test: Bonferroni's 1 − α/1 is the 95% one
    assert lo is not None and lo > 0
    for share, want in ((0.5, "DIFFERENT"), (1.5, "INCONCLUSIVE")):
        # the whole width on arm b: Δ moves by ±w/2 = ±share·lo
        d = _run(_tailed(skewed, 0.0, 2 * share * lo), tail_limit=math.inf).pooled.delta
        assert d.verdict == want, (share, d.verdict_reason)
        assert "the mass outside the candidates moves Δ" in (d.verdict_reason or "")


def test_an_equivalent_verdict_must_hold_at_both_ends() -> None:
    ps = paired_sums(5, 200, 2, same=True)
    rng = np.random.default_rng(9)
    # b = a plus a little symmetric noise: EQUIVALENT at an absolute margin of 0.05
    tb = ps.t_b + rng.integers(-1, 2, ps.t_b.shape[0]) * (rng.uniform(size=ps.t_b.shape[0]) < 0.3)
    ps = dataclasses.replace(ps, t_b=np.maximum(tb, ps.n_b))
    margin = parse_margin("0.05")
    plain = _run(ps, margin=margin).pooled.delta
    assert plain.verdict == "EQUIVALENT" and plain.tost is not None
    room = 0.05 - max(abs(plain.tost.lo), abs(plain.tost.hi))  # m = 1: Bonferroni = TOST
    assert room > 0
    for share, want in ((0.5, "EQUIVALENT"), (1.5, "INCONCLUSIVE")):
        tailed = _tailed(ps, share * room, share * room)
        d = _run(tailed, margin=margin, tail_limit=math.inf).pooled.delta
        assert d.verdict == want, (share, d.verdict_reason)
        if want == "EQUIVALENT":  # the smallest margin covers the tails' move
            assert d.smallest_equivalent_margin is not None and plain.smallest_equivalent_margin
            assert d.smallest_equivalent_margin == pytest.approx(
                plain.smallest_equivalent_margin + share * room, rel=1e-9
            )


def test_an_arm_wider_than_the_limit_is_null_with_the_width(skewed: PairedSums) -> None:
    w = 1.5 * TAIL_WIDTH_LIMIT
    pooled = _run(_tailed(skewed, 0.01, w)).pooled
    assert pooled.arm_a.R is not None and pooled.arm_b.R is None
    why = pooled.arm_b.null_reason or ""
    assert f"{w:.3g} tokens/round wide" in why and "at most 0.3" in why
    assert pooled.delta.null_reason == why and pooled.delta.verdict is None
    # just inside the limit: a figure
    assert _run(_tailed(skewed, 0.01, 0.99 * TAIL_WIDTH_LIMIT)).pooled.arm_b.R is not None
