"""Path bias by arm (issue 5, item 3): analytic − importance R per arm, from one pass.

A replay run with a second estimator keeps its sums beside its own (one map keyed by
estimator); requalify's ``path-bias-importance`` deltas are checked against two separate replays,
their intervals against an independent paired (and unpaired) bootstrap, and the analytic figures
against a run without the second estimator (bit-identical).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from archive_factory import LOGGING_ARM, valid_rows, write_parquet

from specreplay.pipelines.requalify import (
    NO_IMPORTANCE_PATH_BIAS,
    RequalifyArms,
    RequalifyOptions,
    requalify_result,
)
from specreplay.render.tables import requalify_tables
from specreplay.replay.engine import ReplayResult, replay_archive
from specreplay.results.model import Cell, Result, Role
from specreplay.sim.arms import Arm, parse_arm

BASE, CAND, REF = "top32:t0.7@5", "top32:t0.7:dyadic24@5", "top8:t1.3:p0.9@5"


def _arms(base: str, cand: str, ref: str | None, log: str | None) -> RequalifyArms:
    every: dict[str, Arm] = {}
    parsed = [parse_arm(a) if a else None for a in (base, cand, ref, log)]
    for a in parsed:
        if a is not None:
            every.setdefault(a.canonical, a)
    b, c, r, lg = parsed
    assert b is not None and c is not None
    return RequalifyArms(b, c, r, lg, every)


def _requalify(res: ReplayResult, arms: RequalifyArms, archive: Path, n_boot: int) -> Result:
    opts = RequalifyOptions.build(baseline=arms.base.canonical, candidate=arms.cand.canonical,
                                  reference=arms.ref.canonical if arms.ref else None,
                                  n_boot=n_boot, min_requests=5)  # fmt: skip
    return requalify_result(res, arms, opts, archive)


@pytest.fixture(scope="module")
def runs(small_archive: Path):  # type: ignore[no-untyped-def]
    arms = _arms(BASE, CAND, REF, "top32:t0.7@5")
    listed = list(arms.all.values())
    with_c = replay_archive(small_archive, listed, law_positions=8, companion="importance")
    plain = replay_archive(small_archive, listed, law_positions=8)
    imp = replay_archive(small_archive, listed, estimator="importance")
    return arms, with_c, plain, imp


def _pooled_r(res: ReplayResult, arm: Arm) -> float:
    s = res.sums[arm.canonical]
    return float(s.t[:, arm.depth - 1].sum() / s.n.sum())


def test_importance_beside_analytic_equals_a_separate_importance_replay(runs) -> None:  # type: ignore[no-untyped-def]
    """Merged over the 3 shards, the pass's importance entry is the importance replay's, and its
    analytic entry the plain pass's, to the bit (one map keyed by estimator)."""
    arms, with_c, plain, imp = runs
    assert list(with_c.replays) == ["analytic", "importance"] and list(plain.replays) == [
        "analytic"
    ]
    for c in arms.all:
        for f in ("n", "t", "var", "request", "bucket"):
            np.testing.assert_array_equal(getattr(with_c.replays["importance"].arms[c], f),
                                          getattr(imp.sums[c], f))  # fmt: skip
            np.testing.assert_array_equal(getattr(with_c.sums[c], f), getattr(plain.sums[c], f))
        np.testing.assert_array_equal(with_c.replays["importance"].unlogged[c], imp.unlogged[c])


def test_pooled_delta_is_analytic_minus_importance_with_a_paired_interval(
    runs, small_archive: Path
) -> None:  # type: ignore[no-untyped-def]
    arms, with_c, plain, imp = runs
    result = _requalify(with_c, arms, small_archive, n_boot=2000)
    pooled = result.pooled
    deltas = [d for d in pooled.deltas if d.role is Role.PATH_BIAS_IMPORTANCE]
    assert sorted(d.b for d in deltas) == sorted(arms.all)
    for d in deltas:
        arm = arms.all[d.b]
        assert d.a == f"{d.b} (importance)"
        assert d.label == "SIMULATED" and d.verdict is None
        assert d.verdict_null_reason == "diagnostic: analytic − importance R of the arm"
        expected = _pooled_r(plain, arm) - _pooled_r(imp, arm)
        assert d.point == pytest.approx(expected, abs=1e-12)
        assert d.lo is not None and d.hi is not None
        assert d.lo <= d.point <= d.hi
        paired, unpaired = _independent_widths(plain, imp, arm)
        # the replicates are paired: their BCa width (a replicate-quantile interval, like the
        # independent one) matches a paired bootstrap, not an unpaired one; the default
        # (studentized) interval is checked against a hand computation in test_studentized.py
        assert d.bca is not None and d.bca.lo is not None and d.bca.hi is not None
        width = d.bca.hi - d.bca.lo
        assert width == pytest.approx(paired, rel=0.2)  # an independent paired bootstrap
        assert abs(width - unpaired) > 0.2 * unpaired  # not an unpaired combination
    text = requalify_tables(result)
    assert "## Path bias by arm (analytic − importance)" in text
    assert NO_IMPORTANCE_PATH_BIAS not in result.assumptions


def _independent_widths(an: ReplayResult, imp: ReplayResult, arm: Arm) -> tuple[float, float]:
    """95% percentile widths of R_an − R_imp: requests resampled together, and separately."""

    def per_request(res: ReplayResult) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[type-arg]
        s = res.sums[arm.canonical]
        n = np.bincount(s.request, weights=s.n, minlength=len(res.requests))
        t = np.bincount(s.request, weights=s.t[:, arm.depth - 1], minlength=len(res.requests))
        return n, t

    (n, ta), (_, ti) = per_request(an), per_request(imp)
    rng = np.random.default_rng(11)
    k = n.shape[0]
    i, j = rng.integers(0, k, (4000, k)), rng.integers(0, k, (4000, k))
    paired = ta[i].sum(1) / n[i].sum(1) - ti[i].sum(1) / n[i].sum(1)
    unpaired = ta[i].sum(1) / n[i].sum(1) - ti[j].sum(1) / n[j].sum(1)
    q = (2.5, 97.5)
    return float(np.subtract(*np.percentile(paired, q)[::-1])), float(
        np.subtract(*np.percentile(unpaired, q)[::-1])
    )


def _without_companion(cells: tuple[Cell, ...], names: set[str]) -> tuple[Cell, ...]:
    return tuple(
        dataclasses.replace(
            c,
            arms={k: v for k, v in c.arms.items() if k in names},
            deltas=tuple(d for d in c.deltas if d.role is not Role.PATH_BIAS_IMPORTANCE),
        )
        for c in cells
    )


def test_analytic_figures_are_bit_identical_with_and_without_the_companion(
    runs, small_archive: Path
) -> None:  # type: ignore[no-untyped-def]
    arms, with_c, plain, _ = runs
    a = _requalify(with_c, arms, small_archive, n_boot=500)
    b = _requalify(plain, arms, small_archive, n_boot=500)
    names = set(arms.all) | {f"{arms.log.canonical} (MEASURED)"} if arms.log else set(arms.all)
    assert _without_companion(a.cells, names) == b.cells
    assert a.law_tests == b.law_tests and a.path_bias == b.path_bias
    # b says one thing more: no importance diagnostic (before the short-rounds assumption, last)
    assert list(b.assumptions).count(NO_IMPORTANCE_PATH_BIAS) == 1
    assert [x for x in b.assumptions if x != NO_IMPORTANCE_PATH_BIAS] == list(a.assumptions)


def test_no_drafted_id_gives_no_delta_and_says_so(tmp_path: Path) -> None:
    rows = [{k: v for k, v in r.items() if k != "drafted_id"}
            for r in valid_rows(n_requests=6, n_rounds=2, depth=3)]  # fmt: skip
    path = write_parquet(tmp_path / "a.parquet", rows)
    arms = _arms(LOGGING_ARM, "top4:t1:dyadic24@3", None, LOGGING_ARM)
    res = replay_archive(path, list(arms.all.values()), companion="importance")
    assert list(res.replays) == ["analytic"]  # importance dropped: no drafted_id
    result = _requalify(res, arms, path, n_boot=200)
    assert all(d.role is not Role.PATH_BIAS_IMPORTANCE for c in result.cells for d in c.deltas)
    assert NO_IMPORTANCE_PATH_BIAS in result.assumptions
    assert "Path bias by arm" not in requalify_tables(result)
